"""The ``selectolax`` extractor: Lexbor's HTML5 parser, through selectolax, and a few C-level queries.

Lexbor builds the tree a browser builds (the HTML Standard's tree
construction), about two and a half times faster than libxml2 builds its own;
selectolax then hands back the elements we read in document order (the
``<a>`` by tag name, the others from a CSS selector list each), and Python
touches no other element. Like the other two
extractors it only fills a :class:`Harvest`: the URLs, forms and the rest are
made by ``niofetcher.crawl.parse._finish``.

The input is the same UTF-8 that ``parse.utf8_of`` gives the others (selectolax
is not asked to detect an encoding). Lexbor has no tree depth limit, but the
HTML Standard's tree construction costs the square of the nesting depth: a
page with more than 25,000 "<" (no page of the corpus; the largest has 19,252)
is harvested by the lxml extractor instead, so that a page of deeply nested
``<div>`` cannot hold a parse process for minutes (``_MANY_TAGS``).

On every field of all 100 corpus pages it gives the lxml extractor's
answer. Where the HTML5 tree differs from libxml2's, it reports what a
browser would see; tests/test_parse_selectolax.py lists each case with its
reason:

* An element the parser moves is read where it lands: a link standing in a
  ``<table>`` between rows is put before the table ("foster parenting"); a
  ``<frame>`` outside a ``<frameset>`` is dropped; content after ``</html>``
  goes into the body (libxml2 2.14 drops it).
* ``<template>`` content is an inert fragment, not part of the document: its
  links are not the page's.
* A ``<title>`` inside ``<svg>`` or ``<math>`` is not the page's title
  (``document.title`` reads the HTML namespace only). ``<image>`` is ``<img>``.
* A ``<form>`` inside another is ignored, so its fields belong to the outer
  form. A ``<form>`` started inside a table is left empty there; the fields
  after it in that table are given to it (see ``table_form``), as a browser's
  "form element pointer" does, but one the parser moves out in front of the
  table belongs to no form here.
* ``<textarea>``: the parser already drops the one newline after the start
  tag, so this extractor hands the shared field rule the text with it put back,
  and the value is the same as the lxml extractor's. An attribute without a
  value is "" (selectolax says None), as libxml2 and the DOM have it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from ...extractor_names import missing_package
from .harvest import (
    BLOCK,
    CELL_TAGS,
    FIELD_TAGS,
    LINK_TAGS,
    NO_TEXT,
    SIMPLE_TAGS,
    Get,
    Harvest,
    Option,
    collapse,
    field,
)

try:
    from selectolax.lexbor import LexborHTMLParser, SelectolaxError
except ImportError:  # an optional dependency: say so in one line, not with the import machinery's trace
    raise ImportError(missing_package("selectolax")) from None

if TYPE_CHECKING:
    from selectolax.lexbor import LexborNode


def harvest_selectolax(data: bytes, harvest: Harvest, links_only: bool = False) -> None:
    """Fill ``harvest`` from a UTF-8 page parsed by Lexbor, as a browser's parser builds it.

    A page with more than ``_MANY_TAGS`` "<" goes to the lxml extractor instead (see the module docstring).
    """
    if len(data) > 3 * _MANY_TAGS and data.count(b"<") > _MANY_TAGS:  # (an element takes 3 bytes at least)
        from .links_lxml import harvest_lxml

        harvest_lxml(data, harvest, links_only)
        return
    try:
        tree = LexborHTMLParser(data)
    except SelectolaxError as exc:  # out of memory, in practice; extract() catches ValueError
        raise ValueError(f"Lexbor could not parse the page: {exc}") from exc
    # The many <a> in a loop of their own, without a call and a dispatch each (as links_lxml).
    links, rel_of = harvest.links, harvest.rel
    # tags(), not a CSS "a": the selector matches HTML elements alone, and an <a href> in an inline
    # <svg> is a link a browser follows (and one the other extractors find).
    for el in tree.tags("a"):
        attrs = el.attributes
        href = attrs.get("href")
        if href is None:
            if "href" not in attrs:
                continue
            href = ""  # <a href>: None to selectolax, "" to the others (and to a browser)
        links.append(href)
        rel = attrs.get("rel")
        if rel is not None:
            rel_of(href, rel)
    simple = harvest.simple
    for el in tree.css(_FEW_LINKS if links_only else _FEW):
        simple(el.tag, _getter(el))  # type: ignore[arg-type]  # an element's tag: never None
    for el in tree.tags("title"):
        if _in_html(el):
            harvest.set_title(el.text())  # RCDATA: its text is all there is in it
            break
    if links_only:
        return
    forms: dict[LexborNode, list[tuple[str, str, str]]] = {}
    tables: dict[LexborNode, list[list[str]]] = {}
    rows: dict[LexborNode, list[str]] = {}
    # A <form> started inside a table: the parser inserts it empty and pops it at once, and only its
    # "form element pointer" (not in the tree) ties the rows' fields to it.  Until the next form starts
    # (which the parser allows only once the pointer is cleared), a field in that table with no form of
    # its own belongs to it, as a browser submits it.  (An </form> in between would clear the pointer;
    # the tree does not show it.)
    table_form: tuple[LexborNode, LexborNode] | None = None  # (the form, its table)
    for el in tree.css(_NESTED):
        tag = cast(str, el.tag)  # an element's tag: never None
        if tag in CELL_TAGS:
            # The parser puts every cell in a row (a missing <tr> is made up), every row in a table section.
            row = _ancestor(el, _ROW_OR_TABLE)
            cells = rows.get(row) if row is not None else None
            if cells is not None:
                cells.append(collapse(_text(el)))
        elif tag == "tr":
            table = _ancestor(el, _TABLE)
            if table is not None and table in tables:
                rows[el] = cells = []
                tables[table].append(cells)
        elif tag == "table":
            tables[el] = harvest.table()
        elif tag == "form":
            forms[el] = harvest.form(_getter(el))
            parent = el.parent
            table = _ancestor(el, _TABLE) if parent is not None and parent.tag in _TABLE_PARTS else None
            table_form = (el, table) if table is not None and el.first_child is None else None
        else:  # a field
            form = _ancestor(el, _FORM)
            if form is None and table_form is not None and _inside(el, table_form[1]):
                form = table_form[0]
            if form is not None and form in forms:
                forms[form].append(
                    field(tag, _getter(el), functools.partial(_textarea, el), functools.partial(_options, el))
                )


# The tree construction of the HTML Standard looks through the stack of open elements for many a
# start tag (is a <p> open, "in button scope"?), so a page that nests N elements costs Lexbor N * N
# steps: 30,000 unclosed <div> (150 KB) take 0.7 s, 60,000 take 3.5 s. (Browsers stop nesting at a
# depth of 512; libxml2 at 2048, where the lxml extractor hands the page to Beautiful Soup.) The count
# of "<" bounds N at C speed: above this many, which no corpus page reaches (the most has 19,252),
# a page is harvested by the lxml extractor, whose cost is linear.  So a hostile page costs Lexbor
# half a second at most.  The count is ~5 instructions a byte (a tenth of a harvest's), so a page
# too short to hold that many elements ("<a>" is 3 bytes) is not counted.
_MANY_TAGS = 25_000
# CSS selector lists: Lexbor returns the matches of a list once each, in document order.
_FEW_LINKS = ", ".join(sorted(set(LINK_TAGS) - {"a", "title"}))  # area, base, frame, iframe, link, meta
_FEW = ", ".join(sorted(SIMPLE_TAGS - {"a"}))  # ... and img
_NESTED = ", ".join(sorted(FIELD_TAGS | CELL_TAGS | {"form", "table", "tr"}))
_ROW_OR_TABLE = frozenset(("tr", "table"))
_TABLE = frozenset(("table",))
_FORM = frozenset(("form",))
_TABLE_PARTS = frozenset(("table", "tbody", "thead", "tfoot", "tr"))  # where a form in a table is left
_FOREIGN = frozenset(("svg", "math"))  # the roots of the SVG and MathML namespaces in an HTML page


def _getter(el: LexborNode) -> Get:
    """The attribute getter of an element, as lxml's: "" (not selectolax's None) for an attribute without a value."""
    attrs = el.attributes

    def get(name: str) -> str | None:
        value = attrs.get(name)
        return "" if value is None and name in attrs else value

    return get


def _ancestor(el: LexborNode, names: frozenset[str]) -> LexborNode | None:
    parent = el.parent
    while parent is not None:
        if parent.tag in names:
            return parent
        parent = parent.parent
    return None


def _inside(el: LexborNode, ancestor: LexborNode) -> bool:
    parent = el.parent
    while parent is not None:
        if parent == ancestor:
            return True
        parent = parent.parent
    return False


def _in_html(el: LexborNode) -> bool:
    """Whether an element is in the HTML namespace: under no ``<svg>`` or ``<math>``.

    (An HTML element inside ``<foreignObject>`` in an SVG is in the HTML namespace too; a page
    title placed there is not worth the walk.)
    """
    return _ancestor(el, _FOREIGN) is None


def _text(el: LexborNode) -> str:
    """The text under ``el``, read as ``links_lxml._lxml_text`` reads it: no comments, no NO_TEXT
    subtrees (a ``<template>``'s content is a fragment outside the tree anyway), BLOCK elements
    as word breaks. A stack, not recursion: a cell may hold thousands of nested elements."""
    parts: list[str] = []
    stack: list[Iterator[LexborNode]] = [el.iter(include_text=True)]
    after: list[str] = [""]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            parts.append(after.pop())
            continue
        tag = child.tag
        if tag == "-text":
            parts.append(child.text_content or "")
        elif tag is not None and not tag.startswith("-"):  # not a comment (nor a bogus one: <?pi>)
            block = tag in BLOCK
            if block:
                parts.append(" ")
            if tag not in NO_TEXT:
                after.append(" " if block else "")
                stack.append(child.iter(include_text=True))
    return "".join(parts)


def _textarea(el: LexborNode) -> str:
    # field() drops one newline after <textarea>, as the source reads; the HTML5 parser has dropped it already.
    return "\n" + _text(el)


def _options(select: LexborNode) -> list[Option]:
    options: list[Option] = []
    for option in select.css("option"):
        get = _getter(option)
        options.append((get("value"), get("selected") is not None, functools.partial(_text, option)))
    return options

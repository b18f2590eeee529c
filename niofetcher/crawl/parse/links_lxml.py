"""The ``lxml`` extractor: C-level ``iter()`` walks over the tags we want in an ``lxml.etree`` tree.

About eight times faster than ``links_bs4`` on the same libxml2 parser: it
never builds a Python object for an element it does not read.  libxml2
builds a tree at most 2048 levels deep (``huge_tree``) and drops the rest of
the page; a page that ends on that fatal error is harvested by the bs4
extractor instead, so the two still agree.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any

from lxml import etree  # type: ignore[import-untyped,unused-ignore]

from .harvest import (
    BLOCK,
    CELL_TAGS,
    FIELD_TAGS,
    LINK_TAGS,
    NO_OPTION_TEXT,
    NO_TEXT,
    SIMPLE_TAGS,
    TAGS,
    Harvest,
    Option,
    collapse,
    field,
)


def harvest_lxml(data: bytes, harvest: Harvest, links_only: bool = False) -> None:
    """Fill ``harvest`` from a UTF-8 page, walking an ``lxml.etree`` tree; bs4 takes a page too deep for it."""
    parser = _parser()
    root = etree.fromstring(data, parser)
    last = parser.error_log.last_error
    if last is not None and last.level == etree.ErrorLevels.FATAL:
        # libxml2 gave up part-way (2048 levels deep) and the tree ends there.
        # Beautiful Soup drives the same parser through SAX events, which have
        # no depth limit: let it harvest this page, slowly but completely (imported here: a
        # process parsing with lxml imports bs4 only for such a page).
        from .links_bs4 import harvest_bs4

        harvest_bs4(data, harvest, links_only)
        return
    if root is None:
        return
    # Each kind of element in a walk of its own (lxml skips a walk when the page has no such tag): the
    # many <a> without a call and a dispatch each, tables and forms in the one walk that needs ancestors.
    links, rel_of = harvest.links, harvest.rel
    for el in root.iter("a"):
        href = el.get("href")
        if href is not None:
            links.append(href)
            rel = el.get("rel")
            if rel is not None:  # the rule is Harvest.rel's; most links have no rel, and no call
                rel_of(href, rel)
    for el in root.iter(*_FEW_TAGS if links_only else (*_FEW_TAGS, "img")):
        harvest.simple(el.tag, el.get)
    if links_only:
        title = next(root.iter("title"), None)
        if title is not None:
            harvest.set_title(_lxml_text(title))
        return
    # Dicts keyed by element keep each proxy alive, so iterancestors() hands back the same object.
    forms: dict[Any, list[tuple[str, str, str]]] = {}
    tables: dict[Any, list[list[str]]] = {}
    rows: dict[Any, list[str]] = {}
    loose: dict[Any, list[str]] = {}
    for el in root.iter(*_NESTED_TAGS):
        tag = el.tag
        if tag in CELL_TAGS:
            owner = next(el.iterancestors("tr", "table"), None)
            if owner is None:
                continue
            if owner.tag == "tr":
                cells = rows.get(owner)
            else:
                cells = loose.get(owner)
                if cells is None and owner in tables:
                    cells = loose[owner] = []
                    tables[owner].append(cells)
            if cells is not None:
                cells.append(collapse(_lxml_text(el)))
        elif tag == "tr":
            table = next(el.iterancestors("table"), None)
            if table is not None and table in tables:
                cells = rows[el] = []
                tables[table].append(cells)
                loose.pop(table, None)
        elif tag == "table":
            tables[el] = harvest.table()
        elif tag in FIELD_TAGS:
            form = next(el.iterancestors("form"), None)
            if form is not None and form in forms:
                forms[form].append(
                    field(tag, el.get, functools.partial(_lxml_text, el), functools.partial(_lxml_options, el))
                )
        elif tag == "form":
            forms[el] = harvest.form(el.get)
        elif tag == "title":
            harvest.set_title(_lxml_text(el))


def _parser() -> Any:
    """This thread's parser, made once rather than per page (an lxml parser is for one thread at a time)."""
    parser = getattr(_local, "parser", None)
    if parser is None:
        # lxml.html's HTMLParser is this parser plus HtmlElement classes we do not use.
        # huge_tree lifts libxml2's tree depth limit from 256 to 2048: unclosed
        # <font> or <div> tags pile up that deep on real, broken pages.  collect_ids=False:
        # no hash table of the id attributes, which nothing here looks up (~4% of a parse).
        parser = _local.parser = etree.HTMLParser(encoding="utf-8", huge_tree=True, collect_ids=False)
    return parser


_local = threading.local()
_FEW_TAGS = tuple(sorted(set(LINK_TAGS) - {"a", "title"}))  # area, base, frame, iframe, link, meta
_NESTED_TAGS = tuple(sorted(set(TAGS) - SIMPLE_TAGS))  # forms and tables, their fields, rows and cells; title


def _lxml_text(el: Any, skip: frozenset[str] = NO_TEXT) -> str:
    """The text under ``el``, exactly as ``_bs4_text`` reads it from the same tree (less the
    subtrees of ``skip``)."""
    parts: list[str] = [el.text or ""]
    stack: list[Iterator[Any]] = [iter(el)]
    after: list[str] = [""]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            parts.append(after.pop())
            continue
        tag = child.tag
        if tag.__class__ is str:
            block = tag in BLOCK
            if block:
                parts.append(" ")
            if tag not in skip:
                if child.text:
                    parts.append(child.text)
                after.append((" " + (child.tail or "")) if block else (child.tail or ""))
                stack.append(iter(child))
                continue
        # a comment, a processing instruction or a NO_TEXT element: only its tail is text
        if child.tail:
            parts.append(child.tail)
    return "".join(parts)


def _lxml_options(select: Any) -> list[Option]:
    """The options of ``select``, not those of a select nested in it (the HTML5 parser would have
    closed ``select`` there), in document order."""
    options: list[Option] = []
    stack: list[Iterator[Any]] = [iter(select)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            continue
        tag = child.tag
        if tag.__class__ is not str or tag == "select":
            continue
        if tag == "option":
            get = child.get
            options.append((get("value"), get("selected") is not None,
                            functools.partial(_lxml_text, child, NO_OPTION_TEXT)))
        stack.append(iter(child))
    return options

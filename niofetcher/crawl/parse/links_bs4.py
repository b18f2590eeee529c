"""The ``bs4`` extractor: Beautiful Soup over the lxml parser, shown only the elements we read.

Beautiful Soup's cost is building Python objects, and its ``SoupStrainer``
would decide only after the builder has made an attribute dict of every start tag
(and only at the top level: inside a kept subtree it keeps everything). So
the strain happens one step earlier, in the lxml builder's parser-target
callbacks (``_StrainedBuilder``): libxml2's events for an element we never
read go nowhere, and Beautiful Soup builds a tree of only the elements we
read, in document order, each under its nearest kept ancestor. What is read
as text (a title, and in full mode a form or table with everything in it:
cell, option and textarea texts) is a subtree passed whole. It drives
libxml2 through SAX events, which have no depth limit: ``links_lxml`` hands
it the pages too deep for lxml's tree.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any, cast

import bs4
from bs4 import BeautifulSoup  # type: ignore[attr-defined,unused-ignore]
from bs4.builder import LXMLTreeBuilder  # type: ignore[attr-defined,unused-ignore]  # there when lxml is installed
from bs4.element import NavigableString, PreformattedString, Tag

from .harvest import (
    BLOCK,
    CELL_TAGS,
    FIELD_TAGS,
    LINK_TAGS,
    NO_OPTION_TEXT,
    NO_TEXT,
    SIMPLE_TAGS,
    Get,
    Harvest,
    Option,
    collapse,
    field,
)

_LOOKS_LIKE_HTML = re.compile(rb"<[^ +]html", re.IGNORECASE)

# (kept wherever they stand, kept with everything inside) per mode. Fields live in forms and rows and
# cells in tables, and their texts are read, so a form or table is kept whole; in links_only, <img> is
# left out (the caller drops images) and so are forms and tables (a link inside one is kept on its own).
_FULL = (SIMPLE_TAGS, frozenset(("form", "table", "title")))
_LINKS_ONLY = (frozenset(LINK_TAGS) - {"title"}, frozenset(("title",)))


class _StrainedBuilder(LXMLTreeBuilder):  # type: ignore[misc,unused-ignore]
    """bs4's lxml HTML builder, passing on libxml2's events only for the elements the harvest reads.

    A subclass because no public bs4 API strains before the builder: ``parse_only`` is checked in
    ``BeautifulSoup.handle_starttag``, after ``LXMLTreeBuilder.start`` has copied the attributes
    twice through Python, and only for top-level tags. The overrides are the lxml parser-target
    methods (start, end, data, comment, pi, doctype); each one either returns or calls bs4's own
    (start: what bs4's own calls).
    A stack of "passed or not" per open element says which end tags to pass. libxml2 2.14 sends
    balanced events (an implied end tag is sent too); older ones may leave elements open at the end
    or close another than the innermost, which only stops the straining for the rest of the page
    (inside a whole subtree everything passes), never changes what is read. ``_check`` at import
    proves that this bs4 still drives the builder through these methods.
    """

    def __init__(self, mode: tuple[frozenset[str], frozenset[str]]) -> None:
        # multi_valued_attributes=None: rel="a b" stays one string, as lxml gives it. A plain dict for
        # the attributes: bs4's XMLAttributeDict only converts None and numbers, lxml gives str.
        super().__init__(multi_valued_attributes=None, attribute_dict_class=dict)
        self._keep, self._whole = mode
        self._open: list[bool] = []  # outside whole subtrees: per open element, whether bs4 has it
        self._depth = 0  # open elements in the outermost whole subtree, 0 outside

    def reset(self) -> None:
        """A new document (bs4 parses again when libxml2 rejects an encoding): nothing is open."""
        super().reset()
        self._open = []
        self._depth = 0

    # lxml passes nsmap only to a start() that takes one; the HTML parser has no namespaces.
    def start(self, tag: str, attrib: dict[str, str]) -> None:
        """An element starts: passed on inside a whole subtree or when it is one we read."""
        if self._depth:
            self._depth += 1
        elif tag in self._whole:
            self._depth = 1
        elif tag in self._keep:
            self._open.append(True)
        else:
            self._open.append(False)
            return
        # What bs4's start() comes to in HTML, less its two copies of attrib through Python, made to
        # read lxml's "{namespace}name" (an XML parser's); libxml2's HTML parser makes no namespaces,
        # so such a name is an attribute named so, as the lxml extractor reads it.
        self.soup.handle_starttag(tag, None, None, dict(attrib), namespaces=self.active_namespace_prefixes[-1])

    def end(self, tag: str) -> None:
        """An element ends: passed on when its start was."""
        if self._depth:
            self._depth -= 1
        elif not (self._open and self._open.pop()):  # an end without a start (never seen): dropped
            return
        super().end(tag)

    def data(self, data: str) -> None:
        """Text: only inside a whole subtree is any read."""
        if self._depth:
            super().data(data)

    def comment(self, text: str) -> None:
        """A comment: kept where text is, as before (the text walk skips it)."""
        if self._depth:
            super().comment(text)

    def pi(self, target: str, data: str) -> None:
        """A processing instruction: as a comment."""
        if self._depth:
            super().pi(target, data)

    def doctype(self, name: str, pubid: str, system: str) -> None:
        """The doctype: never read."""


def harvest_bs4(data: bytes, harvest: Harvest, links_only: bool = False) -> None:
    """Fill ``harvest`` from a UTF-8 page, walking the tree Beautiful Soup builds over libxml2's parser."""
    if data.startswith(b"<?xml") and not _LOOKS_LIKE_HTML.search(data, 0, 500):
        # Beautiful Soup would warn "XMLParsedAsHTMLWarning" (an error under
        # pytest's filterwarnings=error, and warnings filters are process-wide,
        # so no catch_warnings from parse threads). A leading newline changes
        # nothing for libxml2 and silences the check.
        data = b"\n" + data
    try:
        soup = BeautifulSoup(data, builder=_StrainedBuilder(_LINKS_ONLY if links_only else _FULL), from_encoding="utf-8")
    except bs4.ParserRejectedMarkup as exc:  # a ValueError for extract(), which need not import bs4 to catch it
        raise ValueError(f"Beautiful Soup rejected the markup: {exc}") from exc
    forms: dict[int, list[tuple[str, str, str]]] = {}  # id(form tag) -> its fields
    tables: dict[int, list[list[str]]] = {}  # id(table tag) -> its rows
    rows: dict[int, list[str]] = {}  # id(tr tag) -> its cells
    loose: dict[int, list[str]] = {}  # id(table tag) -> the implicit row collecting stray cells
    for node in soup.descendants:
        if not isinstance(node, Tag):
            continue
        tag = node.name
        if tag in SIMPLE_TAGS:
            harvest.simple(tag, _bs4_get(node))
        elif tag == "title":
            harvest.set_title(_bs4_text(node))
        elif links_only:
            continue  # a form or table inside a title, which libxml2 before 2.14 parses as markup
        elif tag in CELL_TAGS:
            owner = _bs4_ancestor(node, _ROW_OR_TABLE)
            if owner is None:
                continue
            if owner.name == "tr":
                cells = rows.get(id(owner))
            else:
                cells = loose.get(id(owner))
                if cells is None and id(owner) in tables:
                    cells = loose[id(owner)] = []
                    tables[id(owner)].append(cells)
            if cells is not None:
                cells.append(collapse(_bs4_text(node)))
        elif tag == "tr":
            table = _bs4_ancestor(node, _TABLE)
            if table is not None and id(table) in tables:
                cells = rows[id(node)] = []
                tables[id(table)].append(cells)
                loose.pop(id(table), None)
        elif tag == "table":
            tables[id(node)] = harvest.table()
        elif tag in FIELD_TAGS:
            form = _bs4_ancestor(node, _FORM)
            if form is not None and id(form) in forms:
                forms[id(form)].append(
                    field(
                        tag, _bs4_get(node), functools.partial(_bs4_text, node), functools.partial(_bs4_options, node)
                    )
                )
        elif tag == "form":
            forms[id(node)] = harvest.form(_bs4_get(node))


_ROW_OR_TABLE = frozenset(("tr", "table"))
_TABLE = frozenset(("table",))
_FORM = frozenset(("form",))


def _bs4_get(tag: Tag) -> Get:
    """The attribute getter: with multi_valued_attributes=None every value is a str."""
    return cast(Get, tag.attrs.get)


def _bs4_ancestor(tag: Tag, names: frozenset[str]) -> Tag | None:
    parent = tag.parent
    while parent is not None:
        if parent.name in names:
            return parent
        parent = parent.parent
    return None


def _bs4_text(tag: Tag, skip: frozenset[str] = NO_TEXT) -> str:
    """The text under ``tag``: no comments, no subtrees of ``skip``, BLOCK elements as word breaks."""
    parts: list[str] = []
    stack: list[Iterator[Any]] = [iter(tag.contents)]
    after: list[str] = [""]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            parts.append(after.pop())
        elif isinstance(child, Tag):
            name = child.name
            block = name in BLOCK
            if block:
                parts.append(" ")
            if name not in skip:
                after.append(" " if block else "")
                stack.append(iter(child.contents))
        elif isinstance(child, NavigableString) and not isinstance(child, PreformattedString):
            parts.append(child)  # PreformattedString: comments, CDATA, doctype, processing instructions
    return "".join(parts)


def _bs4_options(select: Tag) -> list[Option]:
    """The options of ``select``, not those of a select nested in it, as ``_lxml_options`` reads them."""
    options: list[Option] = []
    stack: list[Iterator[Any]] = [iter(select.contents)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            continue
        if not isinstance(child, Tag) or child.name == "select":
            continue
        if child.name == "option":
            get = _bs4_get(child)
            options.append((get("value"), get("selected") is not None, functools.partial(_bs4_text, child, NO_OPTION_TEXT)))
        stack.append(iter(child.contents))
    return options


def _check() -> None:
    """Fail at import, not silently slower or different, if this bs4 drives its builder otherwise."""
    soup = BeautifulSoup(
        b"<!DOCTYPE html><div>x<p><a href=a><b>y</b></a></p><title>t</title></div>",
        builder=_StrainedBuilder(_LINKS_ONLY),
        from_encoding="utf-8",
    )
    seen = [node.name if isinstance(node, Tag) else str(node) for node in soup.descendants]
    if seen != ["a", "title", "t"]:
        raise ImportError(f"bs4 {bs4.__version__} no longer drives its lxml builder as links_bs4 expects: {seen}")


_check()

"""The ``bs4`` extractor: Beautiful Soup over the lxml parser, strained to the subtrees we read.

Beautiful Soup's cost is building Python objects, so a ``SoupStrainer`` keeps
only the subtrees of ``a img area frame iframe form table title base meta link`` (a kept
subtree is kept whole, which is how a table keeps its rows and a form its
fields), and the tree is walked once.  It drives libxml2 through SAX events,
which have no depth limit: ``links_lxml`` hands it the pages too deep for
lxml's tree.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any, cast

from bs4 import BeautifulSoup, SoupStrainer  # type: ignore[attr-defined,unused-ignore]
from bs4.element import NavigableString, PreformattedString, Tag

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

# One regex rule rather than a list of names: bs4 tries every rule of a list
# on every start tag; the regex saves ~10% of a bs4 parse.
_STRAINER = SoupStrainer(re.compile(r"\A(?:{})\Z".format("|".join(sorted(SIMPLE_TAGS | {"form", "table", "title"})))))
_LINK_STRAINER = SoupStrainer(re.compile(r"\A(?:{})\Z".format("|".join(LINK_TAGS))))
_LOOKS_LIKE_HTML = re.compile(rb"<[^ +]html", re.IGNORECASE)


def harvest_bs4(data: bytes, harvest: Harvest, links_only: bool = False) -> None:
    """Fill ``harvest`` from a UTF-8 page, walking the tree Beautiful Soup builds over libxml2's parser."""
    if data.startswith(b"<?xml") and not _LOOKS_LIKE_HTML.search(data, 0, 500):
        # Beautiful Soup would warn "XMLParsedAsHTMLWarning" (an error under
        # pytest's filterwarnings=error, and warnings filters are process-wide,
        # so no catch_warnings from parse threads). A leading newline changes
        # nothing for libxml2 and silences the check.
        data = b"\n" + data
    soup = BeautifulSoup(
        data,
        "lxml",
        parse_only=_LINK_STRAINER if links_only else _STRAINER,
        from_encoding="utf-8",
        multi_valued_attributes=None,  # rel="a b" stays one string, as lxml gives it
    )
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
            continue  # a table or form inside a link: not wanted
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


def _bs4_text(tag: Tag) -> str:
    """The text under ``tag``: no comments, no NO_TEXT subtrees, BLOCK elements as word breaks."""
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
            if name not in NO_TEXT:
                after.append(" " if block else "")
                stack.append(iter(child.contents))
        elif isinstance(child, NavigableString) and not isinstance(child, PreformattedString):
            parts.append(child)  # PreformattedString: comments, CDATA, doctype, processing instructions
    return "".join(parts)


def _bs4_options(select: Tag) -> list[Option]:
    return [
        (_bs4_get(node)("value"), _bs4_get(node)("selected") is not None, _bs4_text(node))
        for node in select.descendants
        if isinstance(node, Tag) and node.name == "option"
    ]

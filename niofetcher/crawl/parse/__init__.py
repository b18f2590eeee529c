"""Link extraction: a fetched page in, its absolute URLs, forms, tables and title out.

    >>> page = extract(b'<a href="/b#top">b</a>', "https://example.org/a/")
    >>> page.links
    ['https://example.org/b']

Theory of operation
-------------------

There are two extractors and one contract. ``extractor="bs4"`` (the default)
is Beautiful Soup over the lxml parser, told by a ``SoupStrainer`` to build
only the subtrees we read; ``extractor="lxml"`` walks an ``lxml.etree`` tree
with one C-level ``iter()`` over the tags we want and is about eight times
faster. Both sit on the same libxml2 HTML parser, so they see the same tree;
what keeps them from drifting apart is that neither produces a URL. Each one
only *harvests* raw attribute values, field tuples and cell texts into a
``_Harvest``, and a single function, ``_finish``, turns a harvest into
``PageLinks``: it resolves ``<base href>``, makes every URL absolute with
``absolute_url`` (the one URL cleanup), drops what is not http(s), removes
duplicates and builds the forms. The tests hold the two extractors equal on
every page of the real corpus.

Decoding happens once, here, for both extractors (``_utf8``): the charset of
Content-Type, else a BOM or ``<meta charset>`` (``content.charset_of`` and
``content.sniff_charset``, as for ``FetchResult.text``), else UTF-8; bytes
that fail the declared charset but are valid UTF-8 are read as UTF-8. UTF-8
goes to libxml2 as it is (libxml2 puts U+FFFD for a bad sequence and goes
on); any other encoding is decoded in Python and handed over as UTF-8,
because libxml2 stops the whole parse at the first byte its decoder rejects
(see ``_transcode``). Beautiful Soup is therefore told ``from_encoding="utf-8"``
and its own detection is not used: with the lxml builder it is no
UnicodeDammit decoding anyway, only a guess passed on to libxml2, and the
real corpus page ``qq.html`` (declares gb2312, is UTF-8) came out as a
title and nothing else that way. A ``str`` body is encoded as UTF-8.

URL decisions (all in ``absolute_url``, so they hold for both extractors):

* Leading and trailing C0 controls and spaces are stripped and tabs and
  newlines inside removed, as browsers do; then ``urljoin`` against the base.
* The fragment is dropped. A fragment-only ``href="#top"`` therefore yields
  the page itself (or, under ``<base href>``, the base document - which is
  where a browser would go too). We keep it rather than special-case it: a
  crawler's frontier already knows the page.
* Only ``http`` and ``https`` with a host survive; ``javascript:``,
  ``mailto:``, ``data:``, ``tel:``, ``ftp:``, a bad port or a forbidden host
  character drop the URL.
* The URL is made fetchable the way a browser would send it: the host
  lower-cased and IDNA-encoded (``xn--``), and in the path and query every
  non-ASCII character is percent-encoded as UTF-8 along with space, control
  characters and ``" < > ` { }`` (path) or ``" < > '`` (query); existing
  ``%XX`` escapes are kept. So ``href="/статья"`` comes out as
  ``https://host/%D1%81%D1%82%D0%B0%D1%82%D1%8C%D1%8F`` from either extractor.
  (A browser would encode the *query* in the page's charset; we always use
  UTF-8 - the two differ only for non-ASCII queries on non-UTF-8 pages.)
* An empty path becomes ``/``. Each list keeps the first occurrence of a URL
  and the order of appearance.

Other decisions:

* ``<base href>``: the first ``base`` element with an href, wherever it
  stands, resolved against the page URL; one that is not http(s) is ignored.
  A form without an action (or with an empty one) submits to the *page* URL,
  not the base, as in HTML.
* ``nofollow`` holds the URLs of ``links`` and ``areas`` whose every
  ``<a>``/``<area>`` occurrence carried ``rel="nofollow"``: a URL the page
  also links to plainly is one the page vouches for.
* Forms: ``method`` other than GET or POST (``dialog``, garbage) becomes GET;
  a form whose action is not http(s) (``javascript:``) is left out. Fields
  are ``(name, type, value)``, name ``""`` when absent; ``input`` type
  defaults to ``text`` and a checkbox or radio without a value to ``on``;
  ``button`` type defaults to ``submit``; ``select`` has type ``select`` and
  the value of its first selected option, else of its first option (an
  option's value is its text when it has no value attribute); ``textarea``
  has type ``textarea`` and its text, less one leading newline. A field
  belongs to its nearest enclosing form, so to at most one; fields outside
  any form are not reported. libxml2 closes an open form when another
  starts, so "nested" forms come out as siblings.
* Tables: every ``table`` is its own entry, in the order the tables start.
  Its rows are the ``tr`` whose nearest enclosing table it is; a row's cells
  are the ``td`` and ``th`` whose nearest enclosing ``tr`` it is. Cells
  standing in a table without a ``tr`` (libxml2 does not invent one) form an
  implicit row, as a browser would make. A ``colspan`` cell appears once. A
  cell's text leaves out any nested table (that table is reported on its
  own) and ``script``/``style``/``template`` content; block elements and
  ``<br>`` separate words; whitespace is collapsed.
* ``title``: the text of the first ``title`` element, whitespace collapsed;
  None when there is none or it is blank. (libxml2 knows no SVG namespace, so
  an inline SVG's ``<title>`` placed before the head's would win - on real
  pages the head comes first.)
* Content-Type: only ``text/html`` and ``application/xhtml+xml`` are parsed
  (media type compared case-insensitively, parameters ignored), and a page
  with no Content-Type at all (None, or an empty media type) is read as HTML,
  as browsers sniff it. Anything else - an image, a PDF, JSON, ``text/plain``,
  ``text/xml`` - gives an empty ``PageLinks`` without being looked at: a
  browser shows ``text/plain`` as text and never follows an ``<a>`` in it,
  and libxml2 would find "links" in any binary that happens to hold
  ``<a href=``. XHTML goes through the same HTML parser: libxml2's HTML
  parser reads well-formed XHTML as the same tree, and a real XHTML page
  that is not well-formed (most of them) would stop an XML parser.
* Never raises for what a server sends: broken markup, binary garbage,
  undecodable bytes, an empty body give what can be found, at worst an empty
  ``PageLinks``. A body that is not ``bytes`` or ``str`` is a TypeError.

Depth. libxml2 builds a tree at most 2048 levels deep (256 without
``huge_tree``; unclosed ``<font>`` tags get there) and drops the rest of the
page; Beautiful Soup drives it through SAX events, which have no such limit.
When the lxml extractor's parse ends on that fatal error, the page is
harvested by the bs4 extractor instead, so the two still agree.

Speed (benchmarks/parse.py, corpus median 88 KB): bs4 ~8.6 ms a page,
lxml ~1.1 ms, of which libxml2's parse is ~0.7 ms. Beautiful Soup's cost is
building Python objects, so the strainer keeps only ``a img area frame
iframe form table title base`` subtrees (a kept subtree is kept whole, which
is how a table keeps its rows and a form its fields) and the tree is walked
once. The lxml extractor never builds a Python object for an element it does
not read. URLs are resolved once per distinct raw value, most of them by a
regex fast path (``_FAST``) instead of urljoin.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

from bs4 import BeautifulSoup, ParserRejectedMarkup, SoupStrainer  # type: ignore[attr-defined,unused-ignore]
from bs4.element import NavigableString, PreformattedString, Tag
from lxml import etree  # type: ignore[import-untyped,unused-ignore]

from ...content import charset_of, sniff_charset

__all__ = ["EXTRACTORS", "Form", "PageLinks", "extract"]

EXTRACTORS = ("bs4", "lxml")


@dataclass(frozen=True, slots=True)
class Form:
    """One ``<form>``: where and how it submits, and its fields."""

    action: str  # absolute URL (the page URL when the form has no action)
    method: str  # "GET" or "POST"
    inputs: tuple[tuple[str, str, str], ...]  # (name, type, value) of input/select/textarea/button


@dataclass(slots=True)
class PageLinks:
    """What a page links to, plus its forms, tables and title. See the module docstring."""

    links: list[str]  # <a href>
    images: list[str]  # <img src>
    areas: list[str]  # <area href> (image maps)
    frames: list[str]  # <frame src>, <iframe src>
    forms: list[Form]
    tables: list[list[list[str]]]  # each table: rows, each row: cell texts
    title: str | None
    nofollow: frozenset[str]  # links and areas that carried rel="nofollow" everywhere


def extract(
    body: bytes | str,
    base_url: str,
    content_type: str | None = None,
    extractor: str = "bs4",
    *,
    links_only: bool = False,
) -> PageLinks:
    """Extract the links, images, image-map areas, frames, forms, tables and title of a page.

    Args:
        body: the page as fetched (bytes), or already decoded (str).
        base_url: the page's own URL (the final URL after redirects); relative
            URLs resolve against it unless the page has a ``<base href>``.
        content_type: the Content-Type header: its charset, and whether the body is HTML at
            all (``text/html``, ``application/xhtml+xml``, or None to read it as HTML); any
            other type gives an empty PageLinks.
        extractor: ``"bs4"`` (Beautiful Soup with lxml, the default) or
            ``"lxml"`` (lxml directly, ~8x faster, same result).
        links_only: only what a crawler follows: ``links``, ``areas``,
            ``frames`` and ``nofollow``, exactly as without it; ``images``,
            ``forms`` and ``tables`` stay empty and ``title`` None.  Beautiful
            Soup then builds only the subtrees of a, area, frame, iframe and
            base, about a quarter less work on real pages.

    Returns:
        A PageLinks; an empty one when nothing can be found.

    Raises:
        ValueError: for an unknown extractor name.
        TypeError: when body is neither bytes nor str.
    """
    harvester = _HARVESTERS.get(extractor) if isinstance(extractor, str) else None
    if harvester is None:
        raise ValueError(f"extractor must be one of {EXTRACTORS}, not {extractor!r}")
    data = _utf8(body, content_type)
    harvest = _Harvest()
    if data is not None:
        try:
            harvester(data, harvest, links_only)
        except _PARSER_ERRORS:
            # libxml2 recovers from nearly everything; what it gives up on
            # ("Document is empty", an encoding it cannot use) has no links.
            harvest = _Harvest()
    if links_only:
        harvest.images.clear()  # Beautiful Soup meets the <img> inside a link; it was not asked for
    return _finish(harvest, base_url)


# -- input -------------------------------------------------------------------

_PARSER_ERRORS = (etree.LxmlError, ParserRejectedMarkup, LookupError, UnicodeError, ValueError)
_HTML_TYPES = frozenset(("text/html", "application/xhtml+xml", ""))  # "": no media type, sniffed as HTML


def is_html_type(content_type: str | None) -> bool:
    """Whether a page of this Content-Type is parsed; see "Content-Type" in the module docstring."""
    return content_type is None or content_type.partition(";")[0].strip().lower() in _HTML_TYPES


def _utf8(body: bytes | str, content_type: str | None) -> bytes | None:
    """The page as UTF-8 bytes, the one input both extractors parse; None when it holds no tag
    or is not HTML by its Content-Type.

    Markup without a single "<" holds no element at all: it is skipped, which
    also keeps Beautiful Soup from warning that it "looks like a URL".
    """
    if not isinstance(body, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
    if not is_html_type(content_type):
        return None
    if isinstance(body, str):
        data = body.encode("utf-8", "replace")
    else:
        data = bytes(body)
        encoding = charset_of(content_type) or sniff_charset(data) or "utf-8"
        if encoding != "utf-8":
            data = _transcode(data, encoding)
    return data if b"<" in data else None


def _transcode(data: bytes, encoding: str) -> bytes:
    """Legacy-encoded bytes to UTF-8, decoded here rather than by libxml2.

    libxml2 stops parsing at the first byte its (iconv) decoder rejects - the
    corpus page ``qq.html`` declares gb2312, is really UTF-8, and yields a
    four-element tree - and it does not know several of Python's codec names
    (``euc_jp``, ``utf-16-le``, ``mac-roman``). Bytes that do not decode as
    declared but are valid UTF-8 are a page re-encoded with a stale
    declaration, a common sight: they are read as UTF-8. Anything else is
    decoded as declared with U+FFFD replacement.
    """
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode(encoding, "replace")
    except LookupError:  # "charset=base64": a Python codec, not a text encoding
        return data
    return text.encode("utf-8", "replace")


# -- the harvest: raw values, shared by both extractors ------------------------

_SIMPLE_TAGS = frozenset(("a", "area", "img", "frame", "iframe", "base"))
_FIELD_TAGS = frozenset(("input", "select", "textarea", "button"))
_CELL_TAGS = frozenset(("td", "th"))
# Everything either extractor looks at. Beautiful Soup is strained to the tags
# that can start a subtree of interest: fields live in forms, rows and cells
# in tables, and a kept subtree is kept whole.
_TAGS = tuple(sorted(_SIMPLE_TAGS | _FIELD_TAGS | _CELL_TAGS | {"form", "table", "tr", "title"}))
# One regex rule rather than a list of names: bs4 tries every rule of a list
# on every start tag; the regex saves ~10% of a bs4 parse.
_STRAINER = SoupStrainer(re.compile(r"\A(?:{})\Z".format("|".join(sorted(_SIMPLE_TAGS | {"form", "table", "title"})))))
# links_only: the tags that hold what a crawler follows (and <base>, which says where it leads).
_LINK_TAGS = ("a", "area", "base", "frame", "iframe")
_LINK_STRAINER = SoupStrainer(re.compile(r"\A(?:{})\Z".format("|".join(_LINK_TAGS))))

# Text left out of a cell, title or option: code, and a nested table (reported on its own).
_NO_TEXT = frozenset(("script", "style", "template", "table"))
# Elements whose start and end separate words (text_content() would glue "a<br>b" into "ab").
_BLOCK = frozenset(
    ["address", "article", "aside", "blockquote", "br", "caption", "dd", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "legend", "li", "main", "nav", "ol", "p", "pre", "section", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul"]
)

_Get = Callable[[str], str | None]


class _Harvest:
    """Raw attribute values and texts in document order; ``_finish`` makes URLs of them."""

    __slots__ = ("areas", "base", "forms", "frames", "images", "links", "tables", "title")

    def __init__(self) -> None:
        self.base: str | None = None  # the first <base href>
        self.title: str | None = None
        self.links: list[tuple[str, bool]] = []  # (href, nofollow)
        self.areas: list[tuple[str, bool]] = []
        self.images: list[str] = []
        self.frames: list[str] = []
        self.forms: list[tuple[str | None, str | None, list[tuple[str, str, str]]]] = []
        self.tables: list[list[list[str]]] = []

    def simple(self, tag: str, get: _Get) -> None:
        """An element whose attributes are all we need: a, area, img, frame, iframe, base."""
        if tag == "a" or tag == "area":
            href = get("href")
            if href is not None:
                rel = get("rel")
                nofollow = rel is not None and "nofollow" in rel.lower().split()
                (self.links if tag == "a" else self.areas).append((href, nofollow))
        elif tag == "img":
            src = get("src")
            if src is not None:
                self.images.append(src)
        elif tag == "base":
            href = get("href")
            if self.base is None and href is not None:
                self.base = href
        else:  # frame, iframe
            src = get("src")
            if src is not None:
                self.frames.append(src)

    def form(self, get: _Get) -> list[tuple[str, str, str]]:
        """A form starts; returns the list its fields go into."""
        fields: list[tuple[str, str, str]] = []
        self.forms.append((get("action"), get("method"), fields))
        return fields

    def table(self) -> list[list[str]]:
        rows: list[list[str]] = []
        self.tables.append(rows)
        return rows

    def set_title(self, text: str) -> None:
        if self.title is None:
            self.title = _collapse(text)


_Option = tuple[str | None, bool, str]  # a select's option: (value attribute, selected, text)


def _field(
    tag: str, get: _Get, text: Callable[[], str], options: Callable[[], list[_Option]]
) -> tuple[str, str, str]:
    """(name, type, value) of an input, select, textarea or button.

    ``text`` (a textarea's) and ``options`` (a select's) are only called when needed.
    """
    name = get("name") or ""
    if tag == "input":
        kind = (get("type") or "").strip().lower() or "text"
        value = get("value")
        if value is None:
            value = "on" if kind in ("checkbox", "radio") else ""
        return name, kind, value
    if tag == "button":
        return name, (get("type") or "").strip().lower() or "submit", get("value") or ""
    if tag == "textarea":
        value = text()
        return name, "textarea", value.removeprefix("\n")
    # select: the first selected option, else the first option (a browser's default for a single select)
    opts = options()
    chosen = next((o for o in opts if o[1]), opts[0] if opts else None)
    if chosen is None:
        return name, "select", ""
    value_attr, _, option_text = chosen
    return name, "select", value_attr if value_attr is not None else _collapse(option_text)


def _collapse(text: str) -> str:
    """Whitespace runs (str.split's idea of whitespace, NBSP included) to one space, stripped."""
    return " ".join(text.split())


# -- extractor: Beautiful Soup + lxml ------------------------------------------

_LOOKS_LIKE_HTML = re.compile(rb"<[^ +]html", re.IGNORECASE)


def _harvest_bs4(data: bytes, harvest: _Harvest, links_only: bool = False) -> None:
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
        if tag in _SIMPLE_TAGS:
            harvest.simple(tag, _bs4_get(node))
        elif links_only:
            continue  # a table or form inside a link: not wanted
        elif tag in _CELL_TAGS:
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
                cells.append(_collapse(_bs4_text(node)))
        elif tag == "tr":
            table = _bs4_ancestor(node, _TABLE)
            if table is not None and id(table) in tables:
                cells = rows[id(node)] = []
                tables[id(table)].append(cells)
                loose.pop(id(table), None)
        elif tag == "table":
            tables[id(node)] = harvest.table()
        elif tag in _FIELD_TAGS:
            form = _bs4_ancestor(node, _FORM)
            if form is not None and id(form) in forms:
                forms[id(form)].append(
                    _field(
                        tag, _bs4_get(node), functools.partial(_bs4_text, node), functools.partial(_bs4_options, node)
                    )
                )
        elif tag == "form":
            forms[id(node)] = harvest.form(_bs4_get(node))
        elif tag == "title":
            harvest.set_title(_bs4_text(node))


_ROW_OR_TABLE = frozenset(("tr", "table"))
_TABLE = frozenset(("table",))
_FORM = frozenset(("form",))


def _bs4_get(tag: Tag) -> _Get:
    """The attribute getter: with multi_valued_attributes=None every value is a str."""
    return cast(_Get, tag.attrs.get)


def _bs4_ancestor(tag: Tag, names: frozenset[str]) -> Tag | None:
    parent = tag.parent
    while parent is not None:
        if parent.name in names:
            return parent
        parent = parent.parent
    return None


def _bs4_text(tag: Tag) -> str:
    """The text under ``tag``: no comments, no _NO_TEXT subtrees, _BLOCK elements as word breaks."""
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
            block = name in _BLOCK
            if block:
                parts.append(" ")
            if name not in _NO_TEXT:
                after.append(" " if block else "")
                stack.append(iter(child.contents))
        elif isinstance(child, NavigableString) and not isinstance(child, PreformattedString):
            parts.append(child)  # PreformattedString: comments, CDATA, doctype, processing instructions
    return "".join(parts)


def _bs4_options(select: Tag) -> list[_Option]:
    return [
        (_bs4_get(node)("value"), _bs4_get(node)("selected") is not None, _bs4_text(node))
        for node in select.descendants
        if isinstance(node, Tag) and node.name == "option"
    ]


# -- extractor: lxml directly --------------------------------------------------


def _harvest_lxml(data: bytes, harvest: _Harvest, links_only: bool = False) -> None:
    # lxml.html's HTMLParser is this parser plus HtmlElement classes we do not use.
    # huge_tree lifts libxml2's tree depth limit from 256 to 2048: unclosed
    # <font> or <div> tags pile up that deep on real, broken pages.
    parser = etree.HTMLParser(encoding="utf-8", huge_tree=True)
    root = etree.fromstring(data, parser)
    last = parser.error_log.last_error
    if last is not None and last.level == etree.ErrorLevels.FATAL:
        # libxml2 gave up part-way (2048 levels deep) and the tree ends there.
        # Beautiful Soup drives the same parser through SAX events, which have
        # no depth limit: let it harvest this page, slowly but completely.
        _harvest_bs4(data, harvest, links_only)
        return
    if root is None:
        return
    # Dicts keyed by element keep each proxy alive, so iterancestors() hands back the same object.
    forms: dict[Any, list[tuple[str, str, str]]] = {}
    tables: dict[Any, list[list[str]]] = {}
    rows: dict[Any, list[str]] = {}
    loose: dict[Any, list[str]] = {}
    for el in root.iter(*(_LINK_TAGS if links_only else _TAGS)):
        tag = el.tag
        if tag in _SIMPLE_TAGS:
            harvest.simple(tag, el.get)
        elif tag in _CELL_TAGS:
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
                cells.append(_collapse(_lxml_text(el)))
        elif tag == "tr":
            table = next(el.iterancestors("table"), None)
            if table is not None and table in tables:
                cells = rows[el] = []
                tables[table].append(cells)
                loose.pop(table, None)
        elif tag == "table":
            tables[el] = harvest.table()
        elif tag in _FIELD_TAGS:
            form = next(el.iterancestors("form"), None)
            if form is not None and form in forms:
                forms[form].append(
                    _field(tag, el.get, functools.partial(_lxml_text, el), functools.partial(_lxml_options, el))
                )
        elif tag == "form":
            forms[el] = harvest.form(el.get)
        elif tag == "title":
            harvest.set_title(_lxml_text(el))


def _lxml_text(el: Any) -> str:
    """The text under ``el``, exactly as ``_bs4_text`` reads it from the same tree."""
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
            block = tag in _BLOCK
            if block:
                parts.append(" ")
            if tag not in _NO_TEXT:
                if child.text:
                    parts.append(child.text)
                after.append((" " + (child.tail or "")) if block else (child.tail or ""))
                stack.append(iter(child))
                continue
        # a comment, a processing instruction or a _NO_TEXT element: only its tail is text
        if child.tail:
            parts.append(child.tail)
    return "".join(parts)


def _lxml_options(select: Any) -> list[_Option]:
    return [(o.get("value"), o.get("selected") is not None, _lxml_text(o)) for o in select.iter("option")]


_HARVESTERS: dict[str, Callable[[bytes, _Harvest, bool], None]] = {
    "bs4": _harvest_bs4,
    "lxml": _harvest_lxml,
}


# -- output: the one place URLs are made ---------------------------------------

_C0_OR_SPACE = "".join(map(chr, range(0x21)))
_TAB_OR_NEWLINE = {9: None, 10: None, 13: None}
# WHATWG percent-encode sets (path; special-scheme query), plus everything non-ASCII.
_PATH_UNSAFE = re.compile(r'[^\x21-\x7e]|["<>`{}]')
_QUERY_UNSAFE = re.compile(r"[^\x21-\x7e]|[\"<>']")
_PATH_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in '"<>`{}#?')
_QUERY_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in "\"<>'#")
# WHATWG forbidden host code points, less ":" (IPv6 hosts come without brackets).
_BAD_HOST = re.compile(r"[\x00-\x20#%/<>?@\[\\\]^|\x7f]")


# The shape of most URLs on real pages, already in the form the general path
# below would give them: lower-case http(s), a plain lower-case host, maybe a
# port, no userinfo, nothing to percent-encode, no empty "?". For these the
# answer is the match itself (fragment cut, "/" for an empty path), about eight
# times cheaper than urljoin + urlsplit + urlunsplit; tests/test_parse.py
# checks that both paths agree on every href of the corpus and on ports.
_FAST = re.compile(
    r"(https?://[a-z0-9][a-z0-9._-]*(?::([0-9]{1,5}))?)"
    r"(/[A-Za-z0-9\-._~!$&'()*+,;=:@%/]*)?"
    r"(\?[A-Za-z0-9\-._~!$&()*+,;=:@%/?]+)?"
    r"(?:#.*)?\Z",
    re.DOTALL,
)
_DOT_SEGMENT = re.compile(r"/\.\.?(?:[/?#]|\Z)")


@functools.lru_cache(maxsize=64)
def _origin_of(base: str) -> str | None:
    """"scheme://host" of a base the fast path may prefix to a root-relative href."""
    match = _FAST.match(base)
    return match.group(1) if match else None


def absolute_url(href: str, base: str) -> str | None:
    """``href`` resolved against ``base`` as a fetchable http(s) URL without fragment, or None.

    The only function that makes URLs; see "URL decisions" in the module docstring.
    """
    href = href.strip(_C0_OR_SPACE)
    # Fast path: absolute, protocol-relative and root-relative hrefs of the common shape.
    if href.startswith(("https://", "http://")):
        joined: str | None = href
    elif href.startswith("//"):
        joined = base[: base.find(":") + 1] + href if base.startswith(("https:", "http:")) else None
    elif href.startswith("/") and not _DOT_SEGMENT.search(href):
        origin = _origin_of(base) if base else None
        joined = origin + href if origin else None
    else:
        joined = None
    if joined is not None:
        match = _FAST.match(joined)
        if match:
            origin, port, path, query = match.groups()
            if port is None or int(port) <= 65535:  # a port out of range makes it no URL: the general path says so
                return f"{origin}{path or '/'}{query or ''}"
    return _absolute_general(href, base)


def _absolute_general(href: str, base: str) -> str | None:
    """``absolute_url`` for any href (already stripped): urljoin, then check and percent-encode."""
    if "\t" in href or "\n" in href or "\r" in href:
        href = href.translate(_TAB_OR_NEWLINE)
    try:
        parts = urlsplit(urljoin(base, href) if base else href)
        scheme = parts.scheme
        if scheme != "http" and scheme != "https":
            return None
        host = parts.hostname  # lower-cased, without brackets or port
        port = parts.port  # ValueError unless empty or 0-65535
    except ValueError:
        return None
    if not host:
        return None
    netloc = parts.netloc
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
        netloc = ""
    if _BAD_HOST.search(host):
        return None
    if not netloc or netloc != netloc.lower():
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"[{host}]" if ":" in host else host
        if port is not None:
            netloc = f"{netloc}:{port}"
        if userinfo:
            netloc = f"{userinfo}@{netloc}"
    path = parts.path or "/"
    if _PATH_UNSAFE.search(path):
        path = quote(path, safe=_PATH_SAFE)
    query = parts.query
    if query and _QUERY_UNSAFE.search(query):
        query = quote(query, safe=_QUERY_SAFE)
    return urlunsplit((scheme, netloc, path, query, ""))


def _finish(harvest: _Harvest, base_url: str) -> PageLinks:
    """Raw harvest -> PageLinks: base, absolute URLs, http(s) only, no duplicates, forms."""
    page = absolute_url(base_url, "") if isinstance(base_url, str) else None
    against = page or ""
    if harvest.base is not None:
        against = absolute_url(harvest.base, against) or against
    memo: dict[str, str | None] = {}

    def absolute(raw: str) -> str | None:
        try:
            return memo[raw]
        except KeyError:
            url = memo[raw] = absolute_url(raw, against)
            return url

    def unique(raws: list[str]) -> list[str]:
        return list(dict.fromkeys(url for url in map(absolute, raws) if url is not None))

    followed: set[str] = set()
    unfollowed: set[str] = set()
    for kind in (harvest.links, harvest.areas):
        for raw, nofollow in kind:
            url = absolute(raw)
            if url is not None:
                (unfollowed if nofollow else followed).add(url)

    forms: list[Form] = []
    for action_raw, method_raw, fields in harvest.forms:
        action = absolute(action_raw) if action_raw and action_raw.strip(_C0_OR_SPACE) else page
        if action is None:
            continue
        method = (method_raw or "").strip().upper()
        forms.append(Form(action, method if method == "POST" else "GET", tuple(fields)))

    return PageLinks(
        links=unique([raw for raw, _ in harvest.links]),
        images=unique(harvest.images),
        areas=unique([raw for raw, _ in harvest.areas]),
        frames=unique(harvest.frames),
        forms=forms,
        tables=harvest.tables,
        title=harvest.title or None,
        nofollow=frozenset(unfollowed - followed),
    )

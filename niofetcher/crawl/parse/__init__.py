"""Link extraction: a fetched page in, its absolute URLs, forms, tables and title out.

    >>> page = extract(b'<a href="/b#top">b</a>', "https://example.org/a/")
    >>> page.links
    ['https://example.org/b']

Theory of operation
-------------------

There are three extractors and one contract. ``extractor="bs4"`` (the default)
is Beautiful Soup over the lxml parser, shown by its builder only the
elements we read; ``extractor="lxml"`` walks an ``lxml.etree`` tree
with C-level ``iter()`` walks over the tags we want and is about three times
faster. Both sit on the same libxml2 HTML parser, so they see the same tree.
``extractor="selectolax"`` parses with Lexbor, an HTML5 parser (an optional
dependency), about 1.6 times faster than lxml again; its tree is a browser's,
which differs from libxml2's on a few kinds of broken markup
(``links_selectolax`` lists them), on no page of the corpus.
What keeps them from drifting apart is that none produces a URL. Each one
only *harvests* raw attribute values, field tuples and cell texts into a
``Harvest``, and a single function, ``_finish``, turns a harvest into
``PageLinks``: it resolves ``<base href>``, makes every URL absolute with
``niofetcher.urls.absolute_url`` (the one URL cleanup), drops what is not
http(s), removes duplicates and builds the forms. The tests hold the
extractors equal on every page of the real corpus.

The modules: this one (the values, ``extract``, decoding, ``_finish``);
``harvest`` (what every extractor gathers, and how a field or a text is
read); ``links_bs4``, ``links_lxml`` and ``links_selectolax`` (the extractors).
Their names are ``niofetcher.extractor_names.EXTRACTORS``, where the command
line reads them too.

Decoding happens once, here, for every extractor (``utf8_of``, which crawl/dedup.py reads the text of too): the charset of
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

URL decisions (all in ``niofetcher.urls.absolute_url``, so they hold for both extractors; the
table in ``niofetcher.urls`` sets them beside the request target and the stored form):

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
* ``robots``: the directives of every ``<meta name="robots" content>`` (the
  name compared case-insensitively), as ``directives.robots_directives``
  reads them: lower-case, ``none`` expanded to ``noindex`` and ``nofollow``,
  several tags added up. ``canonical``: the href of the first ``<link>``
  whose rel holds ``canonical``, made absolute like a link (against the
  base), wherever it stands (libxml2 moves a misplaced one into the body
  anyway); None when there is none. Both are harvested with ``links_only``
  too: the crawler's parse processes need them.
* ``title``: the text of the first ``title`` element, whitespace collapsed;
  None when there is none or it is blank; harvested with ``links_only`` too
  (one small element, which a record names the page by). (libxml2 knows no SVG namespace, so
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

Speed (benchmarks/parse.py, corpus median 88 KB, mean ms a page): bs4 ~3.2,
lxml ~1.0, of which libxml2's parse is ~0.65, selectolax ~0.7, of which
Lexbor's parse is ~0.26. Beautiful Soup's cost is
building Python objects, so its lxml builder drops libxml2's events for every
element we do not read before Beautiful Soup sees them (``links_bs4``): it
builds the ``a img area frame iframe base meta link`` elements alone, and
``form table title`` whole (their fields, rows and texts), and the tree is
walked once. The lxml extractor never builds a Python object for an element it does
not read, reuses one parser a thread, and asks libxml2 for no table of ids. Of
its instructions on the corpus (callgrind, links_only) about three quarters are
libxml2's parse, a sixth ``_finish`` and the rest the walks: libxml2 only
tokenizing, with no tree built (a parser target without callbacks), is already
~40% of lxml extraction, so no change on our side can make it much faster.
URLs are resolved by one ``niofetcher.urls.LinkResolver`` a page:
once per distinct href up to its fragment (a documentation page's thousands of
``api.html#member`` links are a few hundred URLs), against a base taken apart
once, by regex fast paths for absolute, root-relative and relative-path hrefs
instead of urljoin.
"""

from __future__ import annotations

import functools
import importlib
import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from lxml import etree  # type: ignore[import-untyped,unused-ignore]

from ...content import charset_of, sniff_charset
from ...extractor_names import EXTRACTORS
from ...urls import C0_CONTROL_OR_SPACE, LinkResolver, absolute_url
from ..directives import robots_directives
from .harvest import Harvest

__all__ = ["EXTRACTORS", "Form", "PageLinks", "extract", "extractor_module", "utf8_of"]

# Each extractor's module and function, imported on first use: a process that parses with lxml
# imports Beautiful Soup (0.14 s of a parse process's start) only for a page too deep for
# libxml2's tree, and selectolax (an optional dependency) is imported by its extractor alone.
# The names themselves live in niofetcher.extractor_names, which the command line reads too.
_EXTRACTOR_FUNCTIONS = {
    "bs4": ("links_bs4", "harvest_bs4"),
    "lxml": ("links_lxml", "harvest_lxml"),
    "selectolax": ("links_selectolax", "harvest_selectolax"),
}
assert tuple(_EXTRACTOR_FUNCTIONS) == EXTRACTORS, "an extractor named in extractor_names needs its module here"


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
    # The page about itself (defaults: what a redirect's or a non-HTML page's PageLinks says).
    robots: frozenset[str] = frozenset()  # <meta name="robots"> directives, lower-case, "none" expanded
    canonical: str | None = None  # <link rel="canonical" href>, absolute


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
        extractor: ``"bs4"`` (Beautiful Soup with lxml, the default),
            ``"lxml"`` (lxml directly, ~3x faster, same result) or ``"selectolax"``
            (Lexbor's HTML5 parser, faster still; where its browser's tree differs, its answer).
        links_only: only what a crawler follows and a record names: ``links``, ``areas``,
            ``frames``, ``nofollow``, ``robots``, ``canonical`` and ``title``, exactly as without it;
            ``images``, ``forms`` and ``tables`` stay empty.  Beautiful
            Soup then builds only the a, area, frame, iframe, base, meta and
            link elements and the title, about a third less work on real pages.

    Returns:
        A PageLinks; an empty one when nothing can be found.

    Raises:
        ValueError: for an unknown extractor name.
        TypeError: when body is neither bytes nor str.
        ImportError: for ``"selectolax"`` when selectolax is not installed (the message says how to).
    """
    if not isinstance(extractor, str) or extractor not in _EXTRACTOR_FUNCTIONS:
        raise ValueError(f"extractor must be one of {EXTRACTORS}, not {extractor!r}")
    harvester = _harvester(extractor)
    data = utf8_of(body, content_type)
    harvest = Harvest()
    if data is not None:
        try:
            harvester(data, harvest, links_only)
        except _PARSER_ERRORS:
            # libxml2 recovers from nearly everything; what it gives up on
            # ("Document is empty", an encoding it cannot use) has no links.
            harvest = Harvest()
    if links_only:
        harvest.images.clear()  # an <img> in a title, which libxml2 before 2.14 parses as markup
    return _finish(harvest, base_url)


def extractor_module(extractor: str) -> str:
    """The module of an extractor (one of :data:`EXTRACTORS`), for a parse process to import
    before its first job."""
    return f"{__name__}.{_EXTRACTOR_FUNCTIONS[extractor][0]}"


@functools.cache
def _harvester(extractor: str) -> Callable[[bytes, Harvest, bool], None]:
    module = importlib.import_module(extractor_module(extractor))
    return cast(Callable[[bytes, Harvest, bool], None], getattr(module, _EXTRACTOR_FUNCTIONS[extractor][1]))


# -- input -------------------------------------------------------------------

# (Beautiful Soup's ParserRejectedMarkup is a ValueError by the time it gets here: links_bs4.)
_PARSER_ERRORS = (etree.LxmlError, LookupError, UnicodeError, ValueError)
_HTML_TYPES = frozenset(("text/html", "application/xhtml+xml", ""))  # "": no media type, sniffed as HTML


def is_html_type(content_type: str | None) -> bool:
    """Whether a page of this Content-Type is parsed; see "Content-Type" in the module docstring."""
    return content_type is None or content_type.partition(";")[0].strip().lower() in _HTML_TYPES


def utf8_of(body: bytes | str, content_type: str | None) -> bytes | None:
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



def _finish(harvest: Harvest, base_url: str) -> PageLinks:
    """Raw harvest -> PageLinks: base, absolute URLs, http(s) only, no duplicates, forms."""
    page = absolute_url(base_url, "") if isinstance(base_url, str) else None
    against = page or ""
    if harvest.base is not None:
        against = absolute_url(harvest.base, against) or against
    absolute = LinkResolver(against).resolve
    # Each raw value resolved once, in order; None where it leads to no http(s) URL.
    links = list(map(absolute, harvest.links))
    areas = list(map(absolute, harvest.areas))
    nofollow = _NO_DIRECTIVES
    if harvest.nofollow:  # rarely: most pages say nofollow nowhere
        # A URL carried nofollow everywhere when all its occurrences among links and areas did.
        marked = Counter(map(absolute, harvest.nofollow))
        seen = Counter(url for url in itertools.chain(links, areas) if url in marked)
        nofollow = frozenset(url for url, count in marked.items() if url is not None and seen[url] == count)

    forms: list[Form] = []
    for action_raw, method_raw, fields in harvest.forms:
        action = absolute(action_raw) if action_raw and action_raw.strip(C0_CONTROL_OR_SPACE) else page
        if action is None:
            continue
        method = (method_raw or "").strip().upper()
        forms.append(Form(action, method if method == "POST" else "GET", tuple(fields)))

    return PageLinks(
        links=_unique(links),
        images=_unique(map(absolute, harvest.images)),
        areas=_unique(areas),
        frames=_unique(map(absolute, harvest.frames)),
        forms=forms,
        tables=harvest.tables,
        title=harvest.title or None,
        nofollow=nofollow,
        robots=robots_directives(harvest.robots) if harvest.robots else _NO_DIRECTIVES,
        canonical=absolute(harvest.canonical) if harvest.canonical is not None else None,
    )


def _unique(urls: Iterable[str | None]) -> list[str]:
    """The URLs in order of first appearance, without duplicates and without None."""
    return list(filter(None, dict.fromkeys(urls)))  # a URL is never ""


_NO_DIRECTIVES: frozenset[str] = frozenset()  # and no nofollow URLs

"""The harvest: the raw attribute values, fields and texts both extractors gather, in document order.

Neither extractor makes a URL: each fills a :class:`Harvest` (``links_bs4``
from Beautiful Soup's tree, ``links_lxml`` from lxml's), and
``niofetcher.crawl.parse`` turns it into ``PageLinks``.  What both read the
same way lives here: which tags count, how a form field's (name, type,
value) is made, and how text is collapsed.
"""

from __future__ import annotations

from collections.abc import Callable

# meta and link: <meta name="robots"> and <link rel="canonical">, which a crawler needs as much as links.
SIMPLE_TAGS = frozenset(("a", "area", "img", "frame", "iframe", "base", "meta", "link"))
FIELD_TAGS = frozenset(("input", "select", "textarea", "button"))
CELL_TAGS = frozenset(("td", "th"))
# Everything either extractor looks at. Beautiful Soup is shown the simple tags
# alone and forms and tables whole: fields live in forms, rows and cells in tables.
TAGS = tuple(sorted(SIMPLE_TAGS | FIELD_TAGS | CELL_TAGS | {"form", "table", "tr", "title"}))
# links_only: the tags that hold what a crawler follows (and <base>, which says where it leads), and
# <title>: one small element, which names the page in a crawl or fetch record.
LINK_TAGS = ("a", "area", "base", "frame", "iframe", "link", "meta", "title")

# Text left out of a cell, title or option: code, and a nested table (reported on its own).
NO_TEXT = frozenset(("script", "style", "template", "table"))
# An option's text ends where another option or a select begins: the HTML5 parser never nests
# them, a tolerant parser does, and each option's text holding all those nested in it made a page
# of a few kB of nested <select><option> cost minutes to harvest.
NO_OPTION_TEXT = NO_TEXT | {"option", "select"}
# Elements whose start and end separate words (text_content() would glue "a<br>b" into "ab").
BLOCK = frozenset(
    ["address", "article", "aside", "blockquote", "br", "caption", "dd", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "legend", "li", "main", "nav", "ol", "p", "pre", "section", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul"]
)

Get = Callable[[str], str | None]  # an element's attribute getter: the value, or None when absent


class Harvest:
    """Raw attribute values and texts in document order; ``parse._finish`` makes URLs of them."""

    __slots__ = (
        "areas", "base", "canonical", "forms", "frames", "images", "links", "nofollow", "robots", "tables", "title"
    )

    def __init__(self) -> None:
        self.base: str | None = None  # the first <base href>
        self.title: str | None = None
        self.links: list[str] = []  # <a href>
        self.areas: list[str] = []  # <area href>
        # The hrefs of those of links and areas with rel="nofollow" (their order means nothing): which
        # URLs carried it everywhere is a count (parse._finish), so no flag has to go with each link.
        self.nofollow: list[str] = []
        self.images: list[str] = []
        self.frames: list[str] = []
        self.forms: list[tuple[str | None, str | None, list[tuple[str, str, str]]]] = []
        self.tables: list[list[list[str]]] = []
        self.robots: list[str] = []  # the content of every <meta name="robots">
        self.canonical: str | None = None  # the href of the first <link rel="canonical">

    def simple(self, tag: str, get: Get) -> None:
        """An element whose attributes are all we need: a, area, img, frame, iframe, base, meta, link."""
        if tag == "a" or tag == "area":
            href = get("href")
            if href is not None:
                (self.links if tag == "a" else self.areas).append(href)
                self.rel(href, get("rel"))
        elif tag == "img":
            src = get("src")
            if src is not None:
                self.images.append(src)
        elif tag == "base":
            href = get("href")
            if self.base is None and href is not None:
                self.base = href
        elif tag == "meta":
            name = get("name")
            if name is not None and name.strip().lower() == "robots":
                content = get("content")
                if content is not None:
                    self.robots.append(content)
        elif tag == "link":
            rel = get("rel")
            if self.canonical is None and rel is not None and "canonical" in rel.lower().split():
                self.canonical = get("href")
        else:  # frame, iframe
            src = get("src")
            if src is not None:
                self.frames.append(src)

    def rel(self, href: str, rel: str | None) -> None:
        """The rel of a link or area with this href."""
        if rel is not None and "nofollow" in rel.lower().split():
            self.nofollow.append(href)

    def form(self, get: Get) -> list[tuple[str, str, str]]:
        """A form starts; returns the list its fields go into."""
        fields: list[tuple[str, str, str]] = []
        self.forms.append((get("action"), get("method"), fields))
        return fields

    def table(self) -> list[list[str]]:
        """A table starts; returns the list its rows go into."""
        rows: list[list[str]] = []
        self.tables.append(rows)
        return rows

    def set_title(self, text: str) -> None:
        """The text of a ``title`` element: the first one counts."""
        if self.title is None:
            self.title = collapse(text)


Option = tuple[str | None, bool, Callable[[], str]]  # a select's option: (value attribute, selected, its text)


def field(
    tag: str, get: Get, text: Callable[[], str], options: Callable[[], list[Option]]
) -> tuple[str, str, str]:
    """(name, type, value) of an input, select, textarea or button.

    ``text`` (a textarea's), ``options`` (a select's) and the chosen option's text are only
    called when needed.
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
    return name, "select", value_attr if value_attr is not None else collapse(option_text())


def collapse(text: str) -> str:
    """Whitespace runs (str.split's idea of whitespace, NBSP included) to one space, stripped."""
    return " ".join(text.split())

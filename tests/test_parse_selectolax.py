"""The selectolax extractor (Lexbor's HTML5 parser) held to the lxml extractor, and where they differ, why.

Every corpus page must give the same ``PageLinks`` from both, field by
field, in full and in ``links_only`` mode, except the differences listed in
``CORPUS_DIFFERENCES`` (none today): a difference not listed fails, and so
does a listed one that is gone. The differences an HTML5 parser makes on
purpose are in ``HTML5_DIFFERENCES``, each a small page with the answer of
each extractor and the reason, checked exactly. The contract tests of
tests/test_parse.py (relative URLs, forms, tables, charsets, garbage...) run
for selectolax too, through ``EXTRACTORS``; here are the rest: bad input, the
name's one home, the optional dependency's one-line failure, and a crawl.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LeakBaseline
from test_parse import CORPUS, NO_CORPUS, PAGES, corpus_base, installed

from niofetcher.crawl import CrawlConfig, CrawledPage, Crawler
from niofetcher.crawl.parse import EXTRACTORS, Form, PageLinks, extract
from niofetcher.extractor_names import EXTRACTORS as NAMES
from niofetcher.testing import TestSite

needs_selectolax = installed("selectolax")  # every test but those that make it missing

FIELDS = ("links", "images", "areas", "frames", "forms", "tables", "title", "nofollow", "robots", "canonical")
PAGE = "https://h.test/dir/page"

# (corpus page stem, field) -> why selectolax's answer is the right one. Empty: on all 100 pages, every
# field agrees.
CORPUS_DIFFERENCES: dict[tuple[str, str], str] = {}


def both(body: bytes, url: str = PAGE, content_type: str | None = "text/html", links_only: bool = False
         ) -> tuple[PageLinks, PageLinks]:
    return (extract(body, url, content_type, "lxml", links_only=links_only),
            extract(body, url, content_type, "selectolax", links_only=links_only))


def differing(a: PageLinks, b: PageLinks) -> set[str]:
    return {name for name in FIELDS if getattr(a, name) != getattr(b, name)}


# -- the corpus ---------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
@pytest.mark.parametrize("links_only", [False, True], ids=["full", "links_only"])
@pytest.mark.parametrize("path", PAGES, ids=[p.stem for p in PAGES])
@needs_selectolax
def test_corpus_page_gives_what_lxml_gives(path: Path, links_only: bool) -> None:
    by_lxml, by_selectolax = both(path.read_bytes(), corpus_base(path), links_only=links_only)
    listed = {name for (stem, name) in CORPUS_DIFFERENCES if stem == path.stem}
    assert differing(by_lxml, by_selectolax) == listed


@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
@needs_selectolax
def test_the_corpus_is_the_one_meant() -> None:
    """The agreement above is worth what the corpus holds: 100 real pages, with links, forms and tables."""
    assert len(PAGES) == 100, CORPUS
    pages = [extract(p.read_bytes(), corpus_base(p), "text/html", "selectolax") for p in PAGES]
    assert sum(len(page.links) for page in pages) > 10_000
    assert sum(bool(page.forms) for page in pages) > 30 and sum(bool(page.tables) for page in pages) > 10


# -- what an HTML5 parser does on purpose ---------------------------------------------------------------

# (name, page, field, lxml's answer, selectolax's answer, why selectolax's is right); every other field equal.
HTML5_DIFFERENCES: list[tuple[str, bytes, str, object, object, str]] = [
    ("foster-parented link",
     b"<table><tr><td><a href=/in>i</a></td></tr><a href=/between>b</a><tr><td>x</td></tr></table>",
     "links", ["https://h.test/in", "https://h.test/between"], ["https://h.test/between", "https://h.test/in"],
     ("content standing in a table between rows is moved before the table (foster parenting): the order a "
      "browser shows")),
    ("nested form",
     b"<form action=/o><input name=a><form action=/i><input name=b></form><input name=c></form>",
     "forms",
     [Form("https://h.test/o", "GET", (("a", "text", ""),)), Form("https://h.test/i", "GET", (("b", "text", ""),))],
     [Form("https://h.test/o", "GET", (("a", "text", ""), ("b", "text", "")))],
     ("a <form> inside an open form is ignored and the first </form> closes the outer one: a browser submits "
      "a and b to /o, and c with no form")),
    ("frame outside a frameset",
     b"<p>x</p><frame src=/f><iframe src=/if></iframe>",
     "frames", ["https://h.test/f", "https://h.test/if"], ["https://h.test/if"],
     "a <frame> in a body is dropped by the parser: a browser loads no such frame"),
    ("frame after the frameset",
     b"<frameset><frame src=/a></frameset><frame src=/b>",
     "frames", ["https://h.test/a", "https://h.test/b"], ["https://h.test/a"],
     "after </frameset> the parser takes no more frames"),
    ("template",
     b"<template><a href=/tpl>t</a></template><a href=/real>r</a>",
     "links", ["https://h.test/tpl", "https://h.test/real"], ["https://h.test/real"],
     "a <template>'s content is an inert fragment outside the document, shown only if a script clones it"),
    ("svg title first",
     b"<body><svg><title>icon</title></svg><title>Page</title>",
     "title", "icon", "Page",
     "document.title is the first <title> in the HTML namespace; an <svg>'s <title> is an SVG element"),
    ("svg title only",
     b"<svg><title>icon</title></svg><a href=/x>x</a>",
     "title", "icon", None,
     "as above: a page whose only <title> is an icon's has no title"),
    ("image",
     b"<image src=/im.png><img src=/i.png>",
     "images", ["https://h.test/i.png"], ["https://h.test/im.png", "https://h.test/i.png"],
     "the parser reads the start tag <image> as <img>, and a browser loads it"),
    ("content after </html>",
     b"<html><body></body></html><a href=/late>l</a>",
     "links", [], ["https://h.test/late"],
     ("content after </html> goes into the body, where a browser shows it (libxml2 2.14 drops it; the bs4 "
      "extractor, on libxml2's SAX events, finds it too)")),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("name", "body", "field", "lxml_answer", "selectolax_answer", "reason"), HTML5_DIFFERENCES,
                         ids=[case[0] for case in HTML5_DIFFERENCES])
@needs_selectolax
def test_html5_difference(name: str, body: bytes, field: str, lxml_answer: object, selectolax_answer: object,
                          reason: str) -> None:
    by_lxml, by_selectolax = both(body)
    assert (getattr(by_lxml, field), getattr(by_selectolax, field)) == (lxml_answer, selectolax_answer), reason
    assert differing(by_lxml, by_selectolax) == {field}


@pytest.mark.timeout(10)
@needs_selectolax
def test_where_the_html5_tree_hides_the_form_of_a_field() -> None:
    """A known shortfall, not a right answer: a <form> started inside a table is left empty by the parser,
    which ties the fields after it to the form by its "form element pointer", invisible in the tree. A field
    still inside that table is given to that form (the common layout, rows of fields, matches lxml and a
    browser); a field the parser moves out before the table is given to no form (a browser submits it)."""
    body = b"<table><form action=/t><tr><td><input name=d></td></tr><input type=hidden name=h></form></table>"
    by_lxml, by_selectolax = both(body)
    assert by_selectolax == by_lxml
    assert by_selectolax.forms == [Form("https://h.test/t", "GET", (("d", "text", ""), ("h", "hidden", "")))]
    moved = b"<table><form action=/t><input name=moved><tr><td>c</td></tr></form></table>"
    by_lxml, by_selectolax = both(moved)
    assert by_lxml.forms == [Form("https://h.test/t", "GET", (("moved", "text", ""),))]
    assert by_selectolax.forms == [Form("https://h.test/t", "GET", ())]
    assert differing(by_lxml, by_selectolax) == {"forms"}


@pytest.mark.timeout(10)
@needs_selectolax
def test_textarea_and_valueless_attributes_read_as_lxml_reads_them() -> None:
    """The HTML5 parser drops the newline after <textarea> itself, and selectolax gives None for an attribute
    without a value: the extractor gives the shared field rule what it expects, so the values agree."""
    body = (b"<form action=/f><textarea name=t>\n\nx</textarea><textarea name=u>\ny</textarea>"
            b"<input name=v value><select name=s><option value>e<option selected>f</select></form>"
            b"<a href>self</a><a>no href</a>")
    by_lxml, by_selectolax = both(body)
    assert by_selectolax == by_lxml
    assert by_selectolax.forms[0].inputs == (("t", "textarea", "\nx"), ("u", "textarea", "y"), ("v", "text", ""),
                                             ("s", "select", "f"))
    assert by_selectolax.links == [PAGE]


@pytest.mark.timeout(10)
@needs_selectolax
def test_an_svg_link_is_a_link() -> None:
    """An <a href> inside an inline <svg> is a link a browser follows (CSS "a" would miss it: HTML only)."""
    by_lxml, by_selectolax = both(b"<svg><a href=/s><text>s</text></a></svg><math><a href=/m>m</a></math>")
    assert by_selectolax.links == by_lxml.links == ["https://h.test/s", "https://h.test/m"]


# -- bad input ---------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
@needs_selectolax
def test_empty_and_binary_garbage_give_what_lxml_gives() -> None:
    rng = random.Random(31)
    bodies = [b"", b" ", b"<", b"\x00" * 1000, b"<\x00a href=/x>", bytes(range(256)) * 16, b"\xef\xbb\xbf",
              b"\xff\xfe<\x00a\x00>\x00"]
    bodies += [rng.randbytes(rng.randrange(1, 5000)) for _ in range(200)]
    soup = b"<>/=\"' abhrefimgsrctdrformtitlebase\n"
    bodies += [bytes(rng.choice(soup) for _ in range(rng.randrange(1, 800))) for _ in range(300)]
    for body in bodies:
        by_lxml, by_selectolax = both(body, links_only=True)
        assert by_selectolax == by_lxml, body[:80]
    assert both(b"")[1] == PageLinks([], [], [], [], [], [], None, frozenset())


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("charset", "meta"), [
    ("windows-1251", True), ("windows-1251", False), ("shift_jis", True), ("gb2312", False), ("iso-8859-1", True),
])
@needs_selectolax
def test_legacy_encodings_give_what_lxml_gives(charset: str, meta: bool) -> None:
    """Decoding is parse.utf8_of's, shared: Lexbor gets the same UTF-8 libxml2 gets."""
    words = {"windows-1251": "Статья", "shift_jis": "記事", "gb2312": "文章", "iso-8859-1": "Café"}[charset]
    head = f'<meta charset="{charset}">' if meta else ""
    body = (f"<html><head>{head}<title>{words}</title></head><body><a href='/{words}?q={words}'>x</a>"
            f"<table><tr><td>{words}</td></tr></table></body></html>").encode(charset)
    content_type = "text/html" if meta else f"text/html; charset={charset}"
    by_lxml, by_selectolax = both(body, content_type=content_type)
    assert by_selectolax == by_lxml
    assert by_selectolax.title == words and by_selectolax.tables == [[[words]]]


@pytest.mark.timeout(30)
@needs_selectolax
def test_undecodable_bytes_give_what_lxml_gives() -> None:
    body = b"<title>Caf\xe9 \xff\xfe</title><a href='/ok'>\x80</a><a href='/r\xe9s'>r</a><a href='/\xc3'>a</a>"
    by_lxml, by_selectolax = both(body, content_type="text/html; charset=utf-8")
    assert by_selectolax == by_lxml
    assert by_selectolax.title == "Caf\ufffd \ufffd\ufffd"


@pytest.mark.timeout(60)
@needs_selectolax
def test_a_huge_page_gives_what_lxml_gives() -> None:
    text = b"<p>" + b"lorem ipsum " * 800_000 + b"</p>"  # 9.6 MB of text
    links = b"".join(b"<a href='/p/%d'>%d</a><img src='/i/%d.png'>" % (i, i, i) for i in range(8000))
    body = b"<html><head><title>big</title></head><body>" + text + links + b"</body></html>"
    by_lxml, by_selectolax = both(body)
    assert by_selectolax == by_lxml
    assert len(by_selectolax.links) == 8000 and len(by_selectolax.images) == 8000


@pytest.mark.timeout(30)
@needs_selectolax
def test_deep_nesting_inside_a_cell_a_form_and_a_title_gives_what_lxml_gives() -> None:
    """Thousands of nested elements (far past Python's recursion limit) where texts are read."""
    deep = b"<span>" * 3000
    body = (b"<title>t</title><table><tr><td>" + deep + b"x<div>y</div>z<!--c--><table><tr><td>in</td></tr></table>w"
            + b"</td></tr></table><form action=/f><select name=s><option>" + deep + b"o</select>"
            + b"<textarea name=t>" + deep + b"</textarea>" + b"<div>" * 1500 + b"<a href=/deep>d</a>")
    by_lxml, by_selectolax = both(body)
    assert by_selectolax == by_lxml
    assert by_selectolax.tables == [[["x y z w"]], [["in"]]] and by_selectolax.links == ["https://h.test/deep"]


@pytest.mark.timeout(60)
@needs_selectolax
def test_a_page_of_very_many_tags_goes_to_the_lxml_extractor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lexbor's cost grows with the square of the nesting depth; a page with more than _MANY_TAGS "<"
    (deeply nested <div> or not) is harvested by the lxml extractor, which gives the same links."""
    from niofetcher.crawl.parse import links_lxml, links_selectolax

    deep = b"<div>" * (links_selectolax._MANY_TAGS + 1) + b"<a href='/deep'>d</a>"
    calls: list[int] = []
    real = links_lxml.harvest_lxml

    def counted(data: bytes, *args: object) -> None:
        calls.append(len(data))
        real(data, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(links_lxml, "harvest_lxml", counted)
    assert extract(deep, PAGE, extractor="selectolax").links == ["https://h.test/deep"]
    assert len(calls) == 1
    shallow = b"<div>" * 2000 + b"<a href='/d'>d</a>"  # below the bound: Lexbor's own
    assert extract(shallow, PAGE, extractor="selectolax").links == ["https://h.test/d"] and len(calls) == 1


# -- the name, and the optional dependency ---------------------------------------------------------------


@needs_selectolax
def test_the_names_have_one_home() -> None:
    from niofetcher.cli.args import build_parser

    assert EXTRACTORS is NAMES and "selectolax" in NAMES and NAMES[0] == "bs4"
    parser = build_parser()
    assert parser.parse_args(["crawl", "http://a.test/"]).extractor == "bs4"
    for name in NAMES:
        assert parser.parse_args(["crawl", "http://a.test/", "--extractor", name]).extractor == name
        assert CrawlConfig(seeds=["http://a.test/"], extractor=name).extractor == name
    with pytest.raises(ValueError, match="extractor must be one of 'bs4', 'lxml', 'selectolax', not 'html5lib'"):
        CrawlConfig(seeds=["http://a.test/"], extractor="html5lib")
    assert CrawlConfig(seeds=["http://a.test/"]).extractor == "bs4"  # the default stays Beautiful Soup


def run_without_selectolax(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter where ``import selectolax`` fails, as when it is not installed."""
    script = "import sys\nsys.modules['selectolax'] = None\n" + code
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)


MISSING = "extractor 'selectolax' needs the selectolax package, which is not installed: pip install selectolax"


@pytest.mark.timeout(60)
def test_without_selectolax_a_config_says_so_in_one_line() -> None:
    done = run_without_selectolax(
        "from niofetcher.crawl import CrawlConfig\n"
        "try:\n    CrawlConfig(seeds=['http://a.test/'], extractor='selectolax')\n"
        "except ValueError as exc:\n    print(exc)\n"
        "CrawlConfig(seeds=['http://a.test/'], extractor='lxml')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('bs4', 'lxml', 'selectolax') and sys.modules[m]))\n"
    )
    assert done.returncode == 0, done.stderr
    message, loaded = done.stdout.splitlines()
    assert message.startswith(MISSING) and loaded == "[]"  # checking a config imports no parser


@pytest.mark.timeout(60)
def test_without_selectolax_extract_raises_an_import_error_that_says_so() -> None:
    done = run_without_selectolax(
        "from niofetcher.crawl.parse import extract\n"
        "print(extract(b'<a href=/x>', 'http://a.test/', extractor='lxml').links)\n"
        "try:\n    extract(b'<a href=/x>', 'http://a.test/', extractor='selectolax')\n"
        "except ImportError as exc:\n    print(repr(exc), exc.__cause__, exc.__suppress_context__)\n"
    )
    assert done.returncode == 0, done.stderr
    lxml_links, error = done.stdout.splitlines()
    assert lxml_links == "['http://a.test/x']"
    assert error.startswith(f'ImportError("{MISSING}') and error.endswith("None True")


@pytest.mark.timeout(60)
def test_without_selectolax_the_crawl_command_fails_with_one_line(tmp_path: Path) -> None:
    done = run_without_selectolax(
        "from niofetcher.cli import main\n"
        f"sys.exit(main(['crawl', 'http://127.0.0.1:9/', '--db', {str(tmp_path / 'c.sqlite')!r}, "
        "'--extractor', 'selectolax', '--progress', 'none']))\n"
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert MISSING in line
    assert not (tmp_path / "c.sqlite").exists()  # refused before anything was opened


def test_importing_the_config_and_the_parser_grammar_loads_no_selectolax() -> None:
    script = ("import sys\nimport niofetcher.crawl.config, niofetcher.cli.args, niofetcher.crawl.parse\n"
              "print('selectolax' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"  # only the selectolax extractor's module imports it


# -- a crawl -----------------------------------------------------------------------------------------------


def crawl_links(tmp_path: Path, site: TestSite, name: str, **options: object) -> tuple[int, dict[str, list[str]]]:
    pages: dict[str, list[str]] = {}

    def on_page(page: CrawledPage) -> None:
        links = page.links
        pages[page.url] = [*links.links, *links.areas, *links.frames] if links is not None else []

    config = CrawlConfig(seeds=[site.base_urls[0]], db_path=str(tmp_path / f"{name}.sqlite"), **options)  # type: ignore[arg-type]
    summary = Crawler(config, on_page).run()
    return summary.counts["done"], pages


@pytest.mark.timeout(120)
@needs_selectolax
def test_a_crawl_with_selectolax_follows_what_a_crawl_with_lxml_follows(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    """End to end on the local test site, in parse processes (the default) and threads."""
    with TestSite(hosts=2, pages=60, max_seconds=120) as site:
        expected = len(site.page_urls())
        done, by_lxml = crawl_links(tmp_path, site, "lxml", extractor="lxml", parse_mode="thread")
        assert done == expected
        for mode in ("process", "thread"):
            site.reset_counters()
            done, by_selectolax = crawl_links(tmp_path, site, f"selectolax-{mode}", extractor="selectolax",
                                              parse_mode=mode)
            assert done == expected, mode
            assert by_selectolax == by_lxml, mode


@pytest.mark.timeout(120)
@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
@needs_selectolax
def test_a_crawl_of_real_pages_with_selectolax(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    """The corpus pages as the site's bodies (its own links added to each): the same pages and links as lxml."""
    bodies = [path.read_bytes() for path in PAGES[:40]]
    with TestSite(hosts=1, pages=80, bodies=bodies, max_seconds=120) as site:
        options = {"allowed_domains": ["127.0.0.1"], "include": [r"^http://127\.0\.0\.1:\d+/"]}
        done_lxml, by_lxml = crawl_links(tmp_path, site, "lxml", extractor="lxml", **options)
        site.reset_counters()
        done, by_selectolax = crawl_links(tmp_path, site, "selectolax", extractor="selectolax", **options)
    assert done == done_lxml >= 80
    assert by_selectolax == by_lxml

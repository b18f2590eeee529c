"""parse.extract: the extractors on the real corpus, and on tricky HTML.

Every tricky case runs once per extractor and expects the same literal
answer from each (selectolax's HTML5 tree differs in one, said where); the
corpus tests here hold bs4 and lxml equal on every field of every page, and
tests/test_parse_selectolax.py holds selectolax to lxml.
"""

from __future__ import annotations

import importlib.util
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from niofetcher.crawl.parse import (
    EXTRACTORS,
    Form,
    PageLinks,
    extract,
)

CORPUS = Path(
    os.environ.get("NIOFETCHER_CORPUS")
    or Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "pages"
)
PAGES = sorted(CORPUS.glob("*.html")) if CORPUS.is_dir() else []
NO_CORPUS = f"no corpus pages in {CORPUS} (set NIOFETCHER_CORPUS to the directory of *.html pages)"

PAGE = "https://example.org/articles/page/?q=1#frag"  # the page URL most cases are parsed at
PAGE_URL = "https://example.org/articles/page/?q=1"  # ...which is what a fragment-free link to it looks like


def installed(extractor: str) -> pytest.MarkDecorator:
    """Skip an extractor whose optional library is missing (selectolax: not part of the install)."""
    missing = extractor == "selectolax" and importlib.util.find_spec("selectolax") is None
    return pytest.mark.skipif(missing, reason=f"{extractor} is not installed (pip install {extractor})")


@pytest.fixture(params=[pytest.param(name, marks=installed(name)) for name in EXTRACTORS])
def extractor(request: pytest.FixtureRequest) -> str:
    return request.param


def parse(html: bytes | str, extractor: str, url: str = PAGE, content_type: str | None = None) -> PageLinks:
    return extract(html, url, content_type, extractor=extractor)


def empty(page: PageLinks) -> bool:
    return page == PageLinks([], [], [], [], [], [], None, frozenset())


# -- the real corpus -----------------------------------------------------------


def corpus_base(path: Path) -> str:
    return f"https://example.org/articles/{path.stem}/"


@pytest.mark.timeout(60)
@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
@pytest.mark.parametrize("path", PAGES, ids=[p.stem for p in PAGES])
def test_corpus_page_parses_and_extractors_agree(path: Path) -> None:
    body = path.read_bytes()
    by_bs4 = extract(body, corpus_base(path), "text/html", extractor="bs4")
    by_lxml = extract(body, corpus_base(path), "text/html", extractor="lxml")
    for field in ("links", "images", "areas", "frames", "forms", "tables", "title", "nofollow"):
        assert getattr(by_bs4, field) == getattr(by_lxml, field), field
    for url in [*by_bs4.links, *by_bs4.images, *by_bs4.areas, *by_bs4.frames, *(f.action for f in by_bs4.forms)]:
        assert url.startswith(("http://", "https://")) and "#" not in url, url
    for urls in (by_bs4.links, by_bs4.images, by_bs4.areas, by_bs4.frames):
        assert len(urls) == len(set(urls))
    assert by_bs4.nofollow <= set(by_bs4.links) | set(by_bs4.areas)


@pytest.mark.timeout(120)
@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
def test_corpus_links_only_gives_the_same_links_and_nothing_else(extractor: str) -> None:
    """links_only (what the crawler's parse processes ask for) must not change a single followed URL,
    nor the title (which a record names the page by)."""
    for path in PAGES:
        body = path.read_bytes()
        whole = extract(body, corpus_base(path), "text/html", extractor=extractor)
        links = extract(body, corpus_base(path), "text/html", extractor=extractor, links_only=True)
        for field in ("links", "areas", "frames", "nofollow", "title"):
            assert getattr(links, field) == getattr(whole, field), (path.name, field)
        assert (links.images, links.forms, links.tables) == ([], [], []), path.name


@pytest.mark.timeout(120)
@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
def test_corpus_is_plausible(extractor: str) -> None:
    """Most real pages link to more than 10 places; the big ones have forms and titles."""
    pages = {p.stem: extract(p.read_bytes(), corpus_base(p), extractor=extractor) for p in PAGES}
    linky = [name for name, page in pages.items() if len(page.links) > 10]
    assert len(linky) > len(pages) // 2, f"only {len(linky)} of {len(pages)} pages have > 10 links"
    assert sum(page.title is not None for page in pages.values()) > 0.9 * len(pages)
    assert sum(bool(page.forms) for page in pages.values()) > len(pages) // 3
    if "wikipedia" in pages:
        wiki = pages["wikipedia"]
        assert len(wiki.links) > 300 and wiki.tables and wiki.title == "Mozilla - Wikipedia"


@pytest.mark.timeout(120)
@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
def test_corpus_from_parse_threads(extractor: str) -> None:
    """The crawler parses in worker threads: same answers as one thread."""
    sample = PAGES[::5]
    alone = [extract(p.read_bytes(), corpus_base(p), extractor=extractor) for p in sample]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda p: extract(p.read_bytes(), corpus_base(p), extractor=extractor), sample))
    assert threaded == alone


@pytest.mark.timeout(10)
def test_links_only_finds_links_inside_tables_forms_and_other_links(extractor: str) -> None:
    html = (
        b'<base href="/b/"><title>t</title><table><tr><td><a href="t">1</a></td></tr></table>'
        b'<form action="/go"><input name="q"><a href="f" rel="nofollow">2</a></form>'
        b'<a href="x"><img src="i.png"><table><tr><td>cell</td></tr></table></a>'
        b'<map><area href="m"></map><iframe src="fr"></iframe>'
    )
    page = extract(html, "http://h.test/", extractor=extractor, links_only=True)
    assert page.links == ["http://h.test/b/t", "http://h.test/b/f", "http://h.test/b/x"]
    assert page.areas == ["http://h.test/b/m"] and page.frames == ["http://h.test/b/fr"]
    assert page.nofollow == {"http://h.test/b/f"}
    assert (page.images, page.forms, page.tables, page.title) == ([], [], [], "t")


@pytest.mark.timeout(10)
def test_relative_and_protocol_relative_links(extractor: str) -> None:
    page = parse(
        b'<a href="next.html">1</a><a href="../up">2</a><a href="/root">3</a>'
        b'<a href="//cdn.example.net/x">4</a><a href="?p=2">5</a><a href="./">6</a>'
        b'<a href="/a/./b/../c">7</a><a href="https://other.example.com/abs">8</a>',
        extractor,
    )
    assert page.links == [
        "https://example.org/articles/page/next.html",
        "https://example.org/articles/up",
        "https://example.org/root",
        "https://cdn.example.net/x",
        "https://example.org/articles/page/?p=2",
        "https://example.org/articles/page/",
        "https://example.org/a/c",
        "https://other.example.com/abs",
    ]


@pytest.mark.timeout(10)
def test_protocol_relative_follows_page_scheme(extractor: str) -> None:
    page = parse(b'<a href="//cdn.example.net/x">x</a>', extractor, url="http://example.org/")
    assert page.links == ["http://cdn.example.net/x"]


@pytest.mark.timeout(10)
def test_base_href_absolute(extractor: str) -> None:
    page = parse(
        b'<html><head><title>t</title></head><body><a href="early">before base</a>'
        b'<base href="https://cdn.example.net/root/"><base href="https://ignored.example/">'
        b'<a href="x">x</a><img src="/i.png"><a href="#top">top</a></body></html>',
        extractor,
    )
    # The first <base href> counts for the whole document, links before it included.
    assert page.links == ["https://cdn.example.net/root/early", "https://cdn.example.net/root/x", "https://cdn.example.net/root/"]
    assert page.images == ["https://cdn.example.net/i.png"]


@pytest.mark.timeout(10)
def test_base_href_relative(extractor: str) -> None:
    page = parse(b'<head><base target="_blank"><base href="../other/"></head><a href="x">x</a>', extractor)
    assert page.links == ["https://example.org/articles/other/x"]


@pytest.mark.timeout(10)
def test_base_href_not_http_is_ignored(extractor: str) -> None:
    page = parse(b'<base href="javascript:void(0)"><a href="x">x</a>', extractor)
    assert page.links == ["https://example.org/articles/page/x"]


@pytest.mark.timeout(10)
def test_fragments_dropped_and_fragment_only_is_the_page(extractor: str) -> None:
    """Decision: "#top" resolves to the page itself, fragment dropped; it is not special-cased."""
    page = parse(
        b'<a href="#top">t</a><a href="">e</a><a href="/p#sec">p</a><a href="/p#other">p2</a>'
        b'<a href="https://x.example/#">x</a>',
        extractor,
    )
    assert page.links == [PAGE_URL, "https://example.org/p", "https://x.example/"]


@pytest.mark.timeout(10)
def test_non_http_schemes_dropped(extractor: str) -> None:
    page = parse(
        b'<a href="javascript:alert(1)">j</a><a href="  JavaScript:void(0)">J</a><a href="mailto:a@b.example">m</a>'
        b'<a href="data:text/html,hi">d</a><a href="tel:+123">t</a><a href="ftp://files.example/x">f</a>'
        b'<a href="about:blank">a</a><a href="file:///etc/passwd">f</a><a href="http://">no host</a>'
        b'<a href="https://ok.example/">ok</a><img src="data:image/png;base64,iVBORw0KGgo=">'
        b'<iframe src="about:blank"></iframe>',
        extractor,
    )
    assert page.links == ["https://ok.example/"]
    assert page.images == [] and page.frames == []


@pytest.mark.timeout(10)
def test_whitespace_in_hrefs(extractor: str) -> None:
    page = parse(
        b'<a href="  /spaced  ">1</a><a href="\n\t/newline\n">2</a><a href="/wr\napped/li\tne">3</a>'
        b'<a href=" https://ex.example/a b ">4</a>',
        extractor,
    )
    assert page.links == [
        "https://example.org/spaced",
        "https://example.org/newline",
        "https://example.org/wrapped/line",
        "https://ex.example/a%20b",
    ]


@pytest.mark.timeout(10)
def test_duplicates_removed_first_occurrence_order_kept(extractor: str) -> None:
    page = parse(
        b'<a href="/b">b</a><a href="/a">a</a><a href="/b#x">b again</a><a href="https://example.org/a">a again</a>'
        b'<img src="/i"><img src="/i">',
        extractor,
    )
    assert page.links == ["https://example.org/b", "https://example.org/a"]
    assert page.images == ["https://example.org/i"]


@pytest.mark.timeout(10)
def test_urls_made_fetchable(extractor: str) -> None:
    """Decision: non-ASCII is percent-encoded (UTF-8), hosts lower-cased and IDNA-encoded."""
    page = parse(
        "<a href='/статья?q=новости'>1</a><a href='https://пример.рф/путь'>2</a>"
        "<a href='HTTPS://WWW.Example.ORG'>3</a><a href='/already%20encoded'>4</a>"
        "<a href='/q?a=\"x\"&b=<y>'>5</a><a href='https://ex.example:8080/p'>6</a>"
        "<a href='https://ex.example:99999/'>bad port</a><a href='https://bad host.example/'>bad host</a>".encode(),
        extractor,
    )
    assert page.links == [
        "https://example.org/%D1%81%D1%82%D0%B0%D1%82%D1%8C%D1%8F?q=%D0%BD%D0%BE%D0%B2%D0%BE%D1%81%D1%82%D0%B8",
        "https://xn--e1afmkfd.xn--p1ai/%D0%BF%D1%83%D1%82%D1%8C",
        "https://www.example.org/",
        "https://example.org/already%20encoded",
        "https://example.org/q?a=%22x%22&b=%3Cy%3E",
        "https://ex.example:8080/p",
    ]


@pytest.mark.timeout(10)
def test_image_maps(extractor: str) -> None:
    page = parse(
        b'<img src="/map.png" usemap="#m"><map name="m">'
        b'<area shape="rect" coords="0,0,10,10" href="/one"><area shape="rect" nohref>'
        b'<area href="javascript:x()"><area href="/two#frag"><area href="/one"></map>',
        extractor,
    )
    assert page.areas == ["https://example.org/one", "https://example.org/two"]
    assert page.images == ["https://example.org/map.png"]
    assert page.links == []


@pytest.mark.timeout(10)
def test_frames_and_iframes(extractor: str) -> None:
    page = parse(
        b'<html><frameset cols="50%,50%"><frame src="left.html"><frame src="/right.html">'
        b'<frame name="nosrc"></frameset></html>',
        extractor,
    )
    assert page.frames == ["https://example.org/articles/page/left.html", "https://example.org/right.html"]
    page = parse(b'<p><iframe src="//video.example/embed/1"></iframe><iframe srcdoc="<p>x</p>"></iframe>', extractor)
    assert page.frames == ["https://video.example/embed/1"]


@pytest.mark.timeout(10)
def test_nofollow_reported(extractor: str) -> None:
    page = parse(
        b'<a href="/ad" rel="nofollow">ad</a><a href="/ugc" REL="NoFollow ugc">ugc</a>'
        b'<a href="/both" rel="nofollow">1</a><a href="/both">2</a><a href="/plain" rel="noopener">p</a>'
        b'<map><area href="/area" rel="nofollow"></map>',
        extractor,
    )
    assert page.nofollow == frozenset(
        {"https://example.org/ad", "https://example.org/ugc", "https://example.org/area"}
    )
    # "/both" is also linked plainly: the page vouches for it.
    assert "https://example.org/both" in page.links


@pytest.mark.timeout(10)
def test_nofollow_is_by_url_not_by_href(extractor: str) -> None:
    """Occurrences count by the URL they lead to: another href of the same URL, or an area, counts too."""
    page = parse(
        b'<a href="/x#a" rel="nofollow">1</a><a href="/x#b" rel="nofollow">2</a><a href="https://example.org/x">3</a>'
        b'<a href="/y" rel="nofollow">1</a><a href="/y#top" rel="nofollow">2</a>'
        b'<a href="/z" rel="nofollow">z</a><map><area href="/z"><area href="/w" rel="nofollow"></map>'
        b'<a href="/w#w" rel="nofollow">w</a><a href="javascript:x" rel="nofollow">j</a>',
        extractor,
    )
    assert page.nofollow == frozenset({"https://example.org/y", "https://example.org/w"})


# -- forms ---------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_form_defaults(extractor: str) -> None:
    page = parse(
        b'<base href="https://cdn.example.net/">'
        b'<form><input name="q"></form>'
        b'<form action="" method="post"></form>'
        b'<form action="/search#results" method=" PoSt "></form>'
        b'<form action="s" method="dialog"></form>'
        b'<form action="javascript:go()"><input name="lost"></form>',
        extractor,
    )
    assert page.forms == [
        # no action, or an empty one: the page's own URL (not the base), as in HTML
        Form(PAGE_URL, "GET", (("q", "text", ""),)),
        Form(PAGE_URL, "POST", ()),
        Form("https://cdn.example.net/search", "POST", ()),
        Form("https://cdn.example.net/s", "GET", ()),
        # a javascript: action cannot be submitted: the form is left out
    ]


@pytest.mark.timeout(10)
def test_form_fields(extractor: str) -> None:
    page = parse(
        b'<form action="/go" method="get">'
        b'<input name="user" value="ann"><input type="PASSWORD" name="pw"><input type="checkbox" name="c">'
        b'<input type="radio" name="r" value="b"><input type="hidden" name="tok" value="x y">'
        b'<input type="submit" value="Send"><input name="" type="text">'
        b'<select name="one"><option value="a">A</option><option selected>  Bee  </option></select>'
        b'<select name="first"><optgroup label="g"><option>First</option><option value="2">Second</option>'
        b"</optgroup></select>"
        b'<select name="none"></select>'
        b'<textarea name="t">\nline 1\n  line 2</textarea>'
        b'<button name="b">Go</button><button type="reset">r</button>'
        b"</form>",
        extractor,
    )
    (form,) = page.forms
    assert form.action == "https://example.org/go" and form.method == "GET"
    assert form.inputs == (
        ("user", "text", "ann"),
        ("pw", "password", ""),
        ("c", "checkbox", "on"),
        ("r", "radio", "b"),
        ("tok", "hidden", "x y"),
        ("", "submit", "Send"),
        ("", "text", ""),
        ("one", "select", "Bee"),
        ("first", "select", "First"),
        ("none", "select", ""),
        ("t", "textarea", "line 1\n  line 2"),
        ("b", "submit", ""),
        ("", "reset", ""),
    )


@pytest.mark.timeout(10)
def test_nested_forms_each_input_in_at_most_one_form(extractor: str) -> None:
    page = parse(
        b'<form action="/outer"><input name="a"><form action="/inner"><input name="b"></form>'
        b'<input name="c"></form><input name="orphan">'
        b'<table><form action="/in-table"><tr><td><input name="d"></td></tr></form></table>',
        extractor,
    )
    names = [name for form in page.forms for name, _, _ in form.inputs]
    assert len(names) == len(set(names))
    assert "orphan" not in names
    by_action = {form.action: [name for name, _, _ in form.inputs] for form in page.forms}
    assert by_action["https://example.org/outer"][0] == "a"
    assert "https://example.org/in-table" in by_action


# -- tables --------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_table_header_cells_and_colspan(extractor: str) -> None:
    page = parse(
        b"<table><thead><tr><th>Name</th><th colspan=2>Score</th></tr></thead>"
        b"<tbody><tr><td>  Ann\n  Lee </td><td>1</td><td>2</td></tr>"
        b"<tr><th scope=row>Bob</th><td colspan=2>n/a</td></tr><tr></tr></tbody></table>",
        extractor,
    )
    assert page.tables == [[["Name", "Score"], ["Ann Lee", "1", "2"], ["Bob", "n/a"], []]]


@pytest.mark.timeout(10)
def test_nested_tables(extractor: str) -> None:
    """Decision: the outer cell's text leaves out the nested table, which is its own entry."""
    page = parse(
        b"<table><tr><td>before<table><tr><td>inner 1</td><td>inner 2</td></tr></table>after</td>"
        b"<td>x</td></tr><tr><td>last</td></tr></table>",
        extractor,
    )
    assert page.tables == [
        [["before after", "x"], ["last"]],
        [["inner 1", "inner 2"]],
    ]


@pytest.mark.timeout(10)
def test_table_cell_text(extractor: str) -> None:
    page = parse(
        b"<table><tr><td>a<br>b</td><td><p>one</p><p>two</p></td><td>in<b>line</b></td>"
        b"<td>x<script>var y = 1;</script><style>td{}</style><!-- c -->z</td>"
        b"<td>A&amp;B&nbsp;&nbsp;C</td><td><a href='/in-cell'>link</a></td></tr></table>",
        extractor,
    )
    assert page.tables == [[["a b", "one two", "inline", "xz", "A&B C", "link"]]]
    assert page.links == ["https://example.org/in-cell"]


@pytest.mark.timeout(10)
def test_table_cells_without_row(extractor: str) -> None:
    """libxml2 invents no <tr>: stray cells make one implicit row, as a browser would."""
    page = parse(b"<table><td>1</td><td>2</td><tr><td>3</td></tr><td>4</td></table>", extractor)
    assert page.tables == [[["1", "2"], ["3"], ["4"]]]


# -- title ---------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_title_entities_and_whitespace(extractor: str) -> None:
    title = b"<html><head><title>\n  Fish &amp; Chips &lt;3&gt;\t&nbsp;&#8212; \n Caf&eacute;  </title>"
    page = parse(title, extractor)
    assert page.title == "Fish & Chips <3> \u2014 Caf\u00e9"


@pytest.mark.timeout(10)
def test_title_missing_blank_first(extractor: str) -> None:
    assert parse(b"<p>no title</p>", extractor).title is None
    assert parse(b"<title>  \n </title>", extractor).title is None
    assert parse(b"<title>One</title><title>Two</title>", extractor).title == "One"


# -- robustness ----------------------------------------------------------------


@pytest.mark.timeout(10)
def test_broken_markup(extractor: str) -> None:
    page = parse(
        b"</div></span><div><p><a href='/1'>one<div>unclosed<table><tr><td>cell"
        b"<a href=/2>two</td></tr><a href=\"/3\">three<form action=/f><input name=x"
        b"><title>Late &amp; odd</title></div></div></div><a href='/4'",
        extractor,
    )
    order = ["https://example.org/1", "https://example.org/2", "https://example.org/3"]
    if extractor == "selectolax":
        # HTML5 "foster parenting": the <a href="/3"> standing in the table after its row is put
        # before the table, where a browser shows it (tests/test_parse_selectolax.py lists why).
        order = ["https://example.org/1", "https://example.org/3", "https://example.org/2"]
    assert page.links[:3] == order
    assert page.tables and page.title == "Late & odd"


@pytest.mark.timeout(10)
def test_undecodable_bytes(extractor: str) -> None:
    body = (
        b"<title>Caf\xe9 \xff\xfe</title><a href='/ok'>\x80\x81</a>"
        b"<a href='/r\xe9sum\xe9'>r</a><a href='/after'>a</a>"
    )
    page = parse(body, extractor, content_type="text/html; charset=utf-8")
    assert page.title == "Caf\ufffd \ufffd\ufffd"
    assert page.links == ["https://example.org/ok", "https://example.org/r%EF%BF%BDsum%EF%BF%BD", "https://example.org/after"]


@pytest.mark.timeout(10)
def test_stale_meta_charset_on_a_utf8_page(extractor: str) -> None:
    """A page re-encoded as UTF-8 that still declares gb2312 (the corpus's qq.html) is read as UTF-8."""
    body = '<meta charset="gb2312"><title>腾讯网</title><a href="/新闻">n</a><a href="/b">b</a>'.encode()
    page = parse(body, extractor)
    assert page.title == "腾讯网"
    assert page.links == ["https://example.org/%E6%96%B0%E9%97%BB", "https://example.org/b"]


@pytest.mark.timeout(30)
def test_empty_and_garbage_never_raise(extractor: str) -> None:
    rng = random.Random(20240601)
    bodies: list[bytes | str] = [
        b"", "", b"   \n", b"<", b"<<<>>>", b"<!-- only a comment -->", b"<!DOCTYPE html>", b"\x00" * 1000,
        bytes(range(256)) * 8, b"\xef\xbb\xbf", b"\xff\xfe<\x00", "\ud800<a href='/x'>x</a>",
        b"https://example.com/page.html", b"page.html",  # bs4 warns these look like a URL / a file name
        b'<?xml version="1.0"?><feed><a href="/x">x</a></feed>',  # bs4 warns: XML parsed as HTML
        b"<a href='/x'>" * 3, b"<a href=", b"<table><tr><td><table><td><form><select><option>",
    ]
    bodies += [rng.randbytes(rng.randrange(1, 4000)) for _ in range(150)]
    soup = b"<>/=\"' abhrefimgsrctdrformtitlebase\n"  # tag soup from the characters that matter
    bodies += [bytes(rng.choice(soup) for _ in range(rng.randrange(1, 600))) for _ in range(150)]
    for body in bodies:
        page = parse(body, extractor)
        assert isinstance(page, PageLinks)
        for url in page.links + page.images:
            assert url.startswith(("http://", "https://"))
    for body in (b"", b"   ", "", b"\x00\x01\x02", b"https://example.com/page.html"):
        assert empty(parse(body, extractor))


@pytest.mark.timeout(60)
def test_nested_selects_cost_no_more_than_their_size(extractor: str) -> None:
    """libxml2 nests ``<select><option>`` repeated, where the HTML5 parser closes each select at
    the next (and drops every other one): a select's options stop at a select nested in it, an
    option's text at the next option, and only the chosen option's text is read.  1,000 of them
    (22 kB) took hours before (each option's text held all those nested in it, for every select)."""
    n = 1000
    page = parse(b"<form>" + b"".join(b"<select name=s%d><option>o%d" % (i, i) for i in range(n)), extractor)
    (form,) = page.forms
    assert form.inputs[0] == ("s0", "select", "o0")
    assert len(form.inputs) >= n // 2
    assert all(value == "o" + name.removeprefix("s") for name, kind, value in form.inputs), form.inputs[:5]


@pytest.mark.timeout(10)
def test_bad_page_url_gives_no_urls_but_no_error(extractor: str) -> None:
    page = parse(b"<a href='rel'>r</a><a href='https://abs.example/'>a</a><form></form>", extractor, url="not a url")
    assert page.links == ["https://abs.example/"] and page.forms == []


@pytest.mark.timeout(60)
def test_deep_nesting(extractor: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past libxml2's tree depth limit (2048 with huge_tree) the lxml extractor falls back to bs4's SAX path."""
    body = b"<div>" * 3000 + b"<a href='/deep'>d</a>" + b"</div>" * 3000 + b"<a href='/after'>a</a>"
    assert parse(body, extractor).links == ["https://example.org/deep", "https://example.org/after"]
    body = b"<font>" * 5000 + b"<a href='/in-font'>f</a>"
    assert parse(body, extractor).links == ["https://example.org/in-font"]
    # The lxml extractor's parser is reused, page after page: a page too deep leaves nothing behind,
    # not even its fatal error (which would send the next page the slow way, to the same links).
    from niofetcher.crawl.parse import links_bs4

    def no_fallback(*args: object) -> None:
        raise AssertionError("a page after a deep one went to the bs4 fallback")

    monkeypatch.setattr(links_bs4, "harvest_bs4", no_fallback)  # links_lxml imports it when it falls back
    assert parse(b"<p><a href='/next'>n</a>", extractor).links == ["https://example.org/next"]


def test_markup_beautiful_soup_rejects_gives_an_empty_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """bs4's ParserRejectedMarkup reaches extract() as a ValueError (extract() need not import bs4
    to catch it), for the bs4 extractor and for the lxml extractor's fallback alike."""
    import bs4

    from niofetcher.crawl.parse import links_bs4

    def rejecting(*args: object, **kwargs: object) -> None:
        raise bs4.ParserRejectedMarkup("rejected")

    monkeypatch.setattr(links_bs4, "BeautifulSoup", rejecting)
    assert parse(b"<a href='/x'>x</a>", "bs4").links == []
    assert parse(b"<div>" * 3000 + b"<a href='/deep'>d</a>", "lxml").links == []  # too deep: bs4's turn
    assert parse(b"<a href='/x'>x</a>", "lxml").links == ["https://example.org/x"]


@pytest.mark.timeout(60)
def test_huge_page(extractor: str) -> None:
    text = b"<p>" + b"lorem ipsum " * 700_000 + b"</p>"  # 8.4 MB of text
    links = b"".join(b"<a href='/p/%d'>%d</a>" % (i, i) for i in range(5000))
    page = parse(b"<html><body>" + text + links + text[:1000] + b"<img src='/last.png'></body></html>", extractor)
    assert len(page.links) == 5000 and page.links[-1] == "https://example.org/p/4999"
    assert page.images == ["https://example.org/last.png"]


# -- charsets ------------------------------------------------------------------

RUSSIAN = (
    "<html><head>{meta}<title>Статья  о &laquo;погоде&raquo;</title></head>"
    "<body><a href=\"/статья\">Ссылка</a><a href=\"/поиск?q=дождь\">Поиск</a>"
    "<table><tr><th>Город</th><td>Москва</td></tr></table></body></html>"
)
RUSSIAN_LINKS = [
    "https://host.example/%D1%81%D1%82%D0%B0%D1%82%D1%8C%D1%8F",
    "https://host.example/%D0%BF%D0%BE%D0%B8%D1%81%D0%BA?q=%D0%B4%D0%BE%D0%B6%D0%B4%D1%8C",
]


def check_russian(page: PageLinks) -> None:
    assert page.title == "Статья о «погоде»"
    assert page.links == RUSSIAN_LINKS
    assert page.tables == [[["Город", "Москва"]]]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("meta", [
    '<meta charset="windows-1251">',
    '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">',
])
def test_windows_1251_by_meta_charset(extractor: str, meta: str) -> None:
    body = RUSSIAN.format(meta=meta).encode("cp1251")
    check_russian(extract(body, "https://host.example/", extractor=extractor))


@pytest.mark.timeout(10)
def test_windows_1251_by_content_type_only(extractor: str) -> None:
    body = RUSSIAN.format(meta="").encode("cp1251")
    check_russian(extract(body, "https://host.example/", "text/html; charset=windows-1251", extractor))
    # Content-Type is definite: it wins over a meta tag that says otherwise.
    body = RUSSIAN.format(meta='<meta charset="utf-8">').encode("cp1251")
    check_russian(extract(body, "https://host.example/", "text/html; charset=Windows-1251", extractor))


@pytest.mark.timeout(10)
@pytest.mark.parametrize("encoding", ["utf-16", "koi8-r", "utf-8-sig"])
def test_other_encodings(extractor: str, encoding: str) -> None:
    body = RUSSIAN.format(meta="").encode(encoding)
    charset = None if encoding in ("utf-16", "utf-8-sig") else encoding  # BOMs speak for themselves
    content_type = f"text/html; charset={charset}" if charset else None
    check_russian(extract(body, "https://host.example/", content_type, extractor))


@pytest.mark.timeout(10)
def test_str_body_is_utf8(extractor: str) -> None:
    text = RUSSIAN.format(meta='<meta charset="windows-1251">')  # a str's meta charset means nothing
    check_russian(extract(text, "https://host.example/", "text/html; charset=iso-8859-1", extractor))


@pytest.mark.timeout(10)
def test_nonsense_charset(extractor: str) -> None:
    body = RUSSIAN.format(meta="").encode()
    for content_type in ("text/html; charset=base64", "text/html; charset=no-such-codec", "text/html; charset="):
        check_russian(extract(body, "https://host.example/", content_type, extractor))


# -- Content-Type: only HTML is parsed -------------------------------------------

# A body every type below is given: it would yield links, a form, a table and a title if parsed.
LINKY = (
    b"<title>t</title><a href='/a'>a</a><area href='/m'><iframe src='/f'></iframe><img src='/i.png'>"
    b"<form action='/s'><input name=q></form><table><tr><td>c</td></tr></table>"
)
LINKY_LINKS = ["https://example.org/a"]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("links_only", [False, True], ids=["full", "links_only"])
@pytest.mark.parametrize(
    "content_type",
    ["image/png", "application/pdf", "application/json", "text/plain; charset=utf-8", "text/xml",
     "application/octet-stream", "IMAGE/SVG+XML"],
)
def test_non_html_content_type_gives_nothing(extractor: str, content_type: str, links_only: bool) -> None:
    assert empty(extract(LINKY, PAGE, content_type, extractor, links_only=links_only))


@pytest.mark.timeout(10)
@pytest.mark.parametrize("links_only", [False, True], ids=["full", "links_only"])
@pytest.mark.parametrize(
    "content_type",
    [None, "", "; charset=utf-8", "text/html", "Text/HTML ; charset=UTF-8", "application/xhtml+xml",
     "application/XHTML+XML; charset=utf-8"],
)
def test_html_and_xhtml_and_no_content_type_parse(extractor: str, content_type: str | None, links_only: bool) -> None:
    page = extract(LINKY, PAGE, content_type, extractor, links_only=links_only)
    assert page.links == LINKY_LINKS
    assert page.areas == ["https://example.org/m"] and page.frames == ["https://example.org/f"]
    assert page.title == "t"
    if links_only:
        assert page.images == [] and page.forms == []
    else:
        assert page.images == ["https://example.org/i.png"]
        assert page.forms == [Form("https://example.org/s", "GET", (("q", "text", ""),))]
        assert page.tables == [[["c"]]]


@pytest.mark.timeout(10)
def test_real_xhtml_page_parses(extractor: str) -> None:
    body = (
        b'<?xml version="1.0" encoding="utf-8"?>\n'
        b'<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" '
        b'"http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">\n'
        b'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>x</title></head>'
        b'<body><p><a href="/one">1</a><br/><a href="two.html">2</a></p></body></html>'
    )
    page = extract(body, PAGE, "application/xhtml+xml", extractor)
    assert page.links == ["https://example.org/one", "https://example.org/articles/page/two.html"]
    assert page.title == "x"


@pytest.mark.timeout(10)
def test_bad_body_is_a_type_error_whatever_the_content_type() -> None:
    with pytest.raises(TypeError, match="bytes or str"):
        extract(None, PAGE, "image/png")  # type: ignore[arg-type]


# -- the API -------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_unknown_extractor_and_bad_body() -> None:
    with pytest.raises(ValueError, match="extractor"):
        extract(b"<a href='/x'>", PAGE, extractor="html5lib")
    with pytest.raises(TypeError, match="bytes or str"):
        extract(None, PAGE)  # type: ignore[arg-type]
    page = extract(bytearray(b"<a href='/x'>x</a>"), PAGE)  # type: ignore[arg-type]
    assert page.links == ["https://example.org/x"]
    assert extract(b"<a href='/x'>x</a>", PAGE) == extract(b"<a href='/x'>x</a>", PAGE, extractor="lxml")


TRICKY = [
    b'<base href="../b/"><a href="x#y">x</a><map><area href="a" rel="nofollow"></map><img src="//i.example/i">',
    b"<form><input name=a><form action=/b><select name=s><option>1<option selected value=2>2</select></form>",
    b"<table><tr><td>1<table><td>2</table><th colspan=3>3</th></tr><td>4</table>",
    "<title>\u00e9 &amp; \u00fc</title><a href='/\u00e9'>e</a>".encode("cp1252"),
    b"<frameset><frame src=a><frame src=b></frameset><iframe src=c></iframe>",
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("body", TRICKY)
def test_extractors_agree_on_tricky_pages(body: bytes) -> None:
    assert extract(body, PAGE, extractor="bs4") == extract(body, PAGE, extractor="lxml")

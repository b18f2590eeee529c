"""The resolver of relative references (niofetcher.urls: LinkResolver, absolute_url's fast paths)
held to the old urljoin-based path, ``_absolute_general``, which stays the definition.

Equal means equal: the same string, or None for both, on generated hard cases
(every href of up to three pieces from a list of troublemakers, against bases
that are troublemakers too), on hypothesis's text, through ``extract`` with
both extractors, and on every href of every page of the real corpus.
"""

from __future__ import annotations

import html
import itertools
from urllib.parse import urljoin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_parse import NO_CORPUS, PAGES, corpus_base

from niofetcher.crawl.parse import EXTRACTORS, _harvester, extract, utf8_of
from niofetcher.crawl.parse.harvest import Harvest
from niofetcher.urls import C0_CONTROL_OR_SPACE, LinkResolver, absolute_url
from niofetcher.urls import links as links_module
from niofetcher.urls.links import _absolute_general

# Bases as a page URL or a <base href> may come: fast-shaped ones, and each way of not being one.
RAW_BASES = [
    "https://docs.example.org/en/latest/api/mod.html",
    "https://example.org/articles/x/",
    "http://example.org",
    "http://example.org/",
    "https://Ex.ORG:8443/a/b;p?q#f",  # upper case, port, params, query, fragment
    "http://h/a/../b/./c",  # dot segments kept in an absolute base
    "http://h/..",
    "http://h//a//b/",  # empty segments
    "http://h/p;",  # urljoin re-serialises this one as http://h/p
    "http://h/a/;p",
    "http://h/p?",  # empty query
    "https://h/?q",
    "https://h/a?x=1&y=?#frag",
    "http://h:65536/a/",  # port out of range
    "http://h:080/a/",
    "http://h:0/",
    "http://[::1]:8080/a/b",  # IPv6
    "http://[2001:DB8::1]/a/",
    "http://user:pw@h/a/",  # userinfo
    "http://bücher.example/a/",  # IDNA
    "http://h/%7Euser/a%20b/",
    "http://h/é/x",  # to be percent-encoded
    "HTTP://H/A/",
    "http://h/a\\b/c",
    "ftp://h/a/",  # no http(s): every href refused but absolute ones
    "",
]
BASES = sorted({base for raw in RAW_BASES for base in (raw, absolute_url(raw, "") or "")})

# Pieces of hrefs: dot segments, separators, schemes, hosts, characters to encode or strip.
PIECES = [
    "", "a", "b.html", ".", "..", "/", "//", "?", "?q=1", "#", "#f", ";p", ";", ":", "%2e", "%2E%2E", "\\", "\t",
    "\n", " ", "\x00", "é", "@", "'", '"', "~", "HTTP:", "javascript:", "mailto:x@y", "data:,x", "//h:8080",
    "//[::1]", "//H.Example", "https://h.example", "http:", "../..",
]


def general(href: str, base: str) -> str | None:
    """The old answer: urljoin, then the URL rules (what absolute_url was before the resolver)."""
    return _absolute_general(href.strip(C0_CONTROL_OR_SPACE), base)


def assert_agree(hrefs: list[str], base: str) -> int:
    """absolute_url and one LinkResolver (its cache warm with the earlier hrefs) answer as the old path."""
    resolver = LinkResolver(base).resolve
    for href in hrefs:
        expected = general(href, base)
        assert absolute_url(href, base) == expected, (href, base)
        assert resolver(href) == expected, (href, base)
    return len(hrefs)


def test_every_href_of_up_to_two_pieces() -> None:
    hrefs = ["".join(parts) for n in range(3) for parts in itertools.product(PIECES, repeat=n)]
    assert sum(assert_agree(hrefs, base) for base in BASES) > 40_000


# The pieces that make paths: every href of three of them, against bases of each shape.
STRUCTURE = ["", "a", ".", "..", "/", "//", "?", "?q=1", "#f", ";p", ";", ":", "%2e", "\\", " ", "é", "//h:8080"]


def test_every_href_of_three_path_pieces() -> None:
    hrefs = ["".join(parts) for parts in itertools.product(STRUCTURE, repeat=3)]
    bases = ["https://docs.example.org/en/latest/api/mod.html", "http://h//a//b/", "http://h/a/;p", "https://h/?q"]
    assert sum(assert_agree(hrefs, base) for base in bases) > 19_000


# Pages of one directory: their resolvers share the fast paths' answers (LinkResolver), which must
# therefore not depend on what tells the pages apart: the last segment, the query, a fragment.
DIRECTORY = ["https://docs.example.org/en/latest/api/mod.html", "https://docs.example.org/en/latest/api/",
             "https://docs.example.org/en/latest/api/other.html?x=1", "https://docs.example.org/en/latest/api/?q"]


def test_the_pages_of_a_directory_share_answers_that_are_theirs() -> None:
    hrefs = ["".join(parts) for n in range(3) for parts in itertools.product(PIECES, repeat=n)]
    for base in DIRECTORY[1:]:
        assert LinkResolver(base)._shared is LinkResolver(DIRECTORY[0])._shared, base
    for _ in range(2):  # the second time round every page meets a cache its neighbours filled
        assert sum(assert_agree(hrefs, base) for base in DIRECTORY) > 5_000


SPHINX = ["../api/mod.Class.html#mod.Class.meth", "#section", "genindex.html", "./", "../", "_static/x.css",
          "../../index.html", "search.html?q=x", "mod.html#mod", "a/b/../c.html#x", "..", "../../../../../x"]


@pytest.mark.parametrize("base", BASES)
def test_documentation_hrefs(base: str) -> None:
    assert_agree(SPHINX, base)


_href_text = st.lists(st.sampled_from(PIECES) | st.text(max_size=4), max_size=6).map("".join)


@settings(max_examples=1000, deadline=None)
@given(st.lists(_href_text, max_size=8), st.sampled_from(BASES))
def test_generated_hrefs(hrefs: list[str], base: str) -> None:
    assert_agree(hrefs, base)


@settings(max_examples=500, deadline=None)
@given(_href_text, st.sampled_from(BASES))
def test_the_fragment_is_no_part_of_the_answer(href: str, base: str) -> None:
    """Hrefs that differ only after their "#" share one cache entry, and so one answer."""
    resolver = LinkResolver(base).resolve
    for fragment in ("", "#", "#x", "#a b", "#\x00", "#é#?/../"):
        assert resolver(href + fragment) == general(href + fragment, base), (href + fragment, base)


@pytest.mark.parametrize("extractor", EXTRACTORS)
@pytest.mark.parametrize("base_href", [None, "../x/", "//other.example/d/", "?q", "http://h/p;", "javascript:x"])
def test_extract_agrees_with_the_old_path(extractor: str, base_href: str | None) -> None:
    """Through extract, with and without a (relative) <base href>: every link as the old path gives it."""
    page = "https://docs.example.org/en/latest/api/mod.html?v=1#top"
    hrefs = [href for href in ("".join(p) for p in itertools.product(PIECES, repeat=2)) if "\x00" not in href]
    head = f'<base href="{html.escape(base_href)}">' if base_href is not None else ""
    body = head + "".join(f'<a href="{html.escape(href)}">x</a>' for href in hrefs)
    against = absolute_url(page, "") or ""
    if base_href is not None:
        against = general(base_href, against) or against
    # What libxml2 hands over as the value (it normalises nothing but the entities back).
    harvest = Harvest()
    _harvester(extractor)(body.encode(), harvest, True)
    expected = [url for url in (general(raw, against) for raw in harvest.links) if url is not None]
    assert extract(body, page, extractor=extractor).links == list(dict.fromkeys(expected))


@pytest.mark.timeout(300)
@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_every_href_of_the_corpus(extractor: str) -> None:
    """Every raw URL either extractor harvests from a corpus page, against the page's base and others."""
    compared = 0
    for path in PAGES:
        data = utf8_of(path.read_bytes(), "text/html")
        harvest = Harvest()
        if data is not None:
            _harvester(extractor)(data, harvest, False)
        raws = [raw for raw in harvest.links + harvest.areas] + harvest.images + harvest.frames
        raws += [action for action, _, _ in harvest.forms if action] + [harvest.canonical or "", harvest.base or ""]
        against = absolute_url(corpus_base(path), "") or ""
        if harvest.base is not None:
            against = general(harvest.base, against) or against
        for base in (against, "https://docs.example.org/en/latest/api/mod.html", "http://h:8080/a/b;p?q", ""):
            compared += assert_agree(raws, base)
    assert compared > 70_000  # ~20,000 raw values an extractor, four bases each


def test_one_base_for_many_pages_keeps_a_bounded_memory_of_directories() -> None:
    """Every page of a site with <base href="/"> resolves against one base: what is remembered of
    its hrefs' directories stays bounded, and the answers stay urljoin's."""
    base = "https://site.example/"
    for n in range(2000):
        href = f"shop/{n}/item"
        assert absolute_url(href, base) == urljoin(base, href)
    parsed = links_module._base_of(base)
    assert parsed is not None and 0 < len(parsed.prefixes) <= links_module._MAX_PREFIXES

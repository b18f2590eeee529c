"""LinkScope (niofetcher.crawl.policy): which links of a page the crawl follows.

``followed`` answers a URL's scope once for every page a process reads (``_verdicts``); these
tests hold it to its definition -- each candidate once, in page order, not nofollow, ``in_scope``
-- over pages that share URLs, scopes that differ in one field only, and a memory that fills up.
"""

from __future__ import annotations

import itertools

import pytest

from niofetcher.crawl import policy
from niofetcher.crawl.parse import PageLinks
from niofetcher.crawl.policy import LinkScope

URLS = [
    "http://example.org/", "https://example.org/a?x=1", "http://www.example.org/b", "http://notexample.org/",
    "http://EXAMPLE.org/c", "http://example.org:8080/d", "http://user@example.org/e", "http://example.org./f",
    "http://bücher.example/", "http://xn--bcher-kva.example/g", "http://[::1]/h", "http://[::1/", "ftp://example.org/",
    "mailto:x@example.org", "not a url", "http://example.org/private/x", "http://example.org/doc.pdf",
]
SCOPES = [
    LinkScope(("example.org",)),
    LinkScope(("example.org", "xn--bcher-kva.example")),
    LinkScope(("example.org",), include=(r"/[a-c]",)),
    LinkScope(("example.org",), exclude=(r"/private/", r"\.pdf$")),
    LinkScope(("example.org",), include=(r"example",), exclude=(r"\?",)),
    LinkScope(("::1",)),
    LinkScope(("example.org",), follow_nofollow=True),
]


def page(links: list[str], nofollow: frozenset[str] = frozenset(), canonical: str | None = None) -> PageLinks:
    return PageLinks(links, [], [links[0]] if links else [], links[-2:], [], [], None, nofollow, canonical=canonical)


def definition(scope: LinkScope, links: PageLinks) -> list[str]:
    """What followed() was before it remembered verdicts."""
    skip = frozenset() if scope.follow_nofollow else links.nofollow
    candidates = dict.fromkeys((*links.links, *links.areas, *links.frames))
    if links.canonical is not None:
        candidates[links.canonical] = None
    return [url for url in candidates if url not in skip and scope.in_scope(url)]


def pages() -> list[PageLinks]:
    """Pages linking to overlapping sets of URLs, some nofollow, some with a canonical."""
    return [page(URLS[i:] + URLS[:i], frozenset(URLS[i::5]), URLS[(3 * i) % len(URLS)] if i % 2 else None)
            for i in range(len(URLS))]


def test_in_scope() -> None:
    hosts = LinkScope(("example.org",))
    # The scheme is not the scope's to check: links come from absolute_url, http(s) only.
    assert [hosts.in_scope(url) for url in URLS] == [
        True, True, True, False, True, True, True, True, False, False, False, False, True, False, False, True, True]
    assert not SCOPES[3].in_scope("http://example.org/private/x")
    assert SCOPES[2].in_scope("http://example.org/a") and not SCOPES[2].in_scope("http://example.org/d")


def test_followed_is_its_definition_across_pages_and_scopes() -> None:
    # Scopes interleaved, every page twice: each scope meets verdicts it or another scope left.
    for _ in range(2):
        for links, scope in itertools.product(pages(), SCOPES):
            assert scope.followed(links) == definition(scope, links), (scope, links.links[:2])


def test_followed_when_the_memory_of_verdicts_fills_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy, "_MAX_VERDICTS", 3)
    scope = LinkScope(("example.org",), exclude=(r"/e$",))
    for links in pages() * 2:
        assert scope.followed(links) == definition(scope, links)
    assert len(policy._verdicts(scope)) <= 3


def test_nofollow_pages_follow_only_their_canonical() -> None:
    links = PageLinks(URLS, [], [], [], [], [], None, frozenset(), robots=frozenset({"nofollow"}),
                      canonical="http://example.org/c")
    assert LinkScope(("example.org",)).followed(links) == ["http://example.org/c"]
    assert LinkScope(("other.org",)).followed(links) == []

"""The test site's link graph is the one it always was, at any size, prebuilt or made on request."""

from __future__ import annotations

import http.client
import re

import pytest

from niofetcher.testing import TestSite, pages
from niofetcher.testing.messages import NOT_FOUND, Resource

HREF = re.compile(r'href="([^"]+)"')


def reference_link_targets(page: int, count_pages: int, count: int) -> list[int]:
    """The graph as first written (O(pages) per page): jumps k*i+1, then neighbours i+1, i+2 ..."""
    jumps = ((k * page + 1) % count_pages for k in range(1, count + 1))
    neighbours = ((page + k) % count_pages for k in range(1, count_pages))
    targets: list[int] = []
    for target in (*jumps, *neighbours):
        if len(targets) == count:
            break
        if target != page and target not in targets:
            targets.append(target)
    return targets


@pytest.mark.parametrize("count_pages", [1, 2, 3, 4, 5, 7, 10, 16, 31, 64, 100, 257])
@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 13, 40, 300])
def test_link_targets_are_the_reference_ones_in_the_same_order(count_pages: int, count: int) -> None:
    for page in range(count_pages):
        assert pages._link_targets(page, count_pages, count) == reference_link_targets(page, count_pages, count)


def served(resources: pages.Resources, path: str) -> tuple[bytes, ...]:
    """The bytes a keep-alive GET of ``path`` gets."""
    return tuple(bytes(chunk) for chunk in resources.get(path, NOT_FOUND).chunks(True, False))


@pytest.mark.parametrize("corpus", [False, True])
def test_a_site_too_big_to_prebuild_serves_the_same_bytes_on_request(
    monkeypatch: pytest.MonkeyPatch, corpus: bool
) -> None:
    bodies = [b"<html><body><p>one</p></body></html>", b"<p>two, no body end</p>"] if corpus else None
    site = TestSite(hosts=2, pages=30, links_per_page=4, port=20_000, robots_unavailable=1, bodies=bodies)
    prebuilt = [pages.build_host(site, i) for i in range(2)]
    monkeypatch.setattr(pages, "PREBUILT_PAGES", 59)
    generated = [pages.build_host(site, i) for i in range(2)]
    assert all(isinstance(host, dict) for host in prebuilt)
    assert all(isinstance(host, pages.GeneratedPages) for host in generated)
    paths = ["/", *(f"/page/{i}" for i in range(30)), "/robots.txt", "/robots.txt"]
    for before, after in zip(prebuilt, generated):
        assert [served(after, path) for path in paths] == [served(before, path) for path in paths]


@pytest.mark.parametrize("path", ["/page/30", "/page/007", "/page/-1", "/page/", "/page/x", "/page/\u00b2", "/nope"])
def test_generated_pages_answer_exactly_the_paths_a_prebuilt_table_has(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setattr(pages, "PREBUILT_PAGES", 0)
    host = pages.build_host(TestSite(pages=30, port=20_000), 0)
    assert isinstance(host, pages.GeneratedPages)
    default = Resource("418 I'm a teapot", "text/plain", [b""])
    assert host.get(path, default) is default
    assert host.get("/page/29", default) is not default


def test_a_million_page_site_starts_at_once_and_serves_its_last_page() -> None:
    with TestSite(pages=1_000_000, links_per_page=5) as site:
        connection = http.client.HTTPConnection("127.0.0.1", site.ports[0], timeout=10)
        connection.request("GET", "/page/999999")
        response = connection.getresponse()
        body = response.read()
        connection.close()
    assert response.status == 200
    assert b"Test site host 0 page 999999" in body
    assert [f"/page/{i}" for i in pages._link_targets(999_999, 1_000_000, 5)] == HREF.findall(body.decode())

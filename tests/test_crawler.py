"""The crawler (docs/crawler.md), proven against real loopback servers.

- A crawl reaches every page of a multi-host site exactly once -- counted by
  the server -- hands each page to ``on_page`` once, from a worker thread,
  and ends by itself when nothing is waiting, processing or being parsed.
- Scope: ``max_pages``, ``max_depth``, ``allowed_domains`` (default: the
  seeds' hosts, subdomains included), include/exclude patterns; only HTML is
  parsed for links.
- robots.txt per host, fetched through the fetcher before the host's first
  page: ``Disallow`` is obeyed (the URL ends 'error' with a robots reason),
  ``Crawl-delay`` becomes the host delay.
- Retries for ``retry_statuses`` and network errors, honouring Retry-After,
  up to ``max_attempts``; then 'error'.
- ``stop()`` is graceful: fetches in flight finish, the rest stays 'waiting'
  and a second Crawler on the same database finishes the crawl without
  fetching again what was done.  A crawl killed with SIGKILL resumes the
  same way (leftover 'processing' rows go back to 'waiting').
- A URL becomes 'done' only after ``on_page`` returned; when it raises, the
  URL ends 'error' and the crawl goes on.
- Parsing in processes or in threads, with bs4 or lxml, crawls the same URLs.

Server-side counters (``PortCounters.paths``, or the request log of the
small RawServer sites below) are the proof wherever a request is at stake;
the frontier's own table is read with plain ``sqlite3``.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import LeakBaseline, MakeServer, sigkill_after_requests, wait_until
from rawserver import ConnInfo, http_response, read_request

import niofetcher.crawl.parsing as parsing_module
import niofetcher.crawl.pipeline as pipeline_module
from niofetcher import FetcherConfig, NIOFetcher
from niofetcher.crawl import CrawlConfig, CrawledPage, Crawler, CrawlSummary
from niofetcher.crawl.frontier import Frontier
from niofetcher.crawl.parse import PageLinks
from niofetcher.crawl.policy import retry_after
from niofetcher.testing import PortCounters, TestSite

ROBOTS = "/robots.txt"


# -- running crawls -------------------------------------------------------------


class PageLog:
    """An ``on_page`` callback that records every call: the page, how often, from which thread."""

    def __init__(self, then: Callable[[CrawledPage], None] | None = None) -> None:
        self.pages: dict[str, CrawledPage] = {}
        self.calls: Counter[str] = Counter()
        self.threads: set[threading.Thread] = set()
        self._then = then
        self._lock = threading.Lock()

    def __call__(self, page: CrawledPage) -> None:
        with self._lock:
            self.calls[page.url] += 1
            self.pages[page.url] = page
            self.threads.add(threading.current_thread())
        if self._then is not None:
            self._then(page)

    def links(self) -> dict[str, list[str]]:
        """URL -> the URLs a crawler follows from it (links, areas, frames)."""
        return {
            url: [*page.links.links, *page.links.areas, *page.links.frames] if page.links is not None else []
            for url, page in self.pages.items()
        }


def crawl_config(tmp_path: Path, seeds: Sequence[str], db: str = "crawl.sqlite", **options: Any) -> CrawlConfig:
    """A CrawlConfig on a database in ``tmp_path``; thread parsing unless told otherwise (fast start)."""
    options.setdefault("parse_mode", "thread")
    return CrawlConfig(seeds=list(seeds), db_path=str(tmp_path / db), **options)


def crawl(tmp_path: Path, seeds: Sequence[str], on_page: PageLog | None = None, **options: Any) -> CrawlSummary:
    return Crawler(crawl_config(tmp_path, seeds, **options), on_page).run()


def frontier_rows(db_path: str) -> dict[str, sqlite3.Row]:
    """Every row of the frontier's ``urls`` table, read with plain sqlite3.

    Not through a Frontier, whose opening would put 'processing' rows back to 'waiting'.
    """
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        conn.row_factory = sqlite3.Row
        return {row["url"]: row for row in conn.execute("SELECT * FROM urls")}


def states(db_path: str) -> Counter[str]:
    return Counter(row["state"] for row in frontier_rows(db_path).values())


def urls_in_state(db_path: str, state: str) -> set[str]:
    return {url for url, row in frontier_rows(db_path).items() if row["state"] == state}


# -- what the servers saw --------------------------------------------------------


def requested_pages(site: TestSite, counters: list[PortCounters] | None = None) -> Counter[str]:
    """URL -> requests the site served for it, robots.txt left out."""
    if counters is None:
        counters = [site.counters(port) for port in site.ports]
    seen: Counter[str] = Counter()
    for base, port_counters in zip(site.base_urls, counters, strict=True):
        for path, n in port_counters.paths.items():
            if path != ROBOTS:
                seen[base + path[1:]] += n
    return seen


def reachable(seed: str, links: dict[str, list[str]], follow: Callable[[str, int], bool]) -> dict[str, int]:
    """URL -> hops from ``seed``, walking ``links`` breadth-first and only into links ``follow(url, hops)`` allows.

    ``links`` holds what the crawl itself reported for the pages it fetched; a
    page the walk reaches but the crawl did not fetch has no entry, so a crawl
    that stops short shows up as a URL here that the server never saw.
    """
    hops = {seed: 0}
    queue = deque([seed])
    while queue:
        url = queue.popleft()
        for link in links.get(url, ()):
            if link not in hops and follow(link, hops[url] + 1):
                hops[link] = hops[url] + 1
                queue.append(link)
    return hops


# -- a small scripted site on a RawServer --------------------------------------------

Reply = bytes | None  # None: close the connection without a byte of response
Route = bytes | Callable[[int], Reply]  # a callable gets how many requests the path had before


@dataclass(frozen=True)
class Hit:
    at: float  # time.monotonic() when the request head had arrived
    host: str  # the Host header
    path: str


def html(*hrefs: str, extra: str = "") -> bytes:
    body = "<html><body>" + "".join(f'<a href="{h}">{h}</a>' for h in hrefs) + extra + "</body></html>"
    return http_response(200, body.encode(), [("Content-Type", "text/html; charset=utf-8")], close=True)


def text(body: str, status: int = 200, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    return http_response(status, body.encode(), [("Content-Type", "text/plain"), *headers], close=True)


NOT_FOUND = text("not found\n", status=404)
UNAVAILABLE = text("busy\n", status=503, headers=[("Retry-After", "0")])


def in_turn(*replies: Reply) -> Callable[[int], Reply]:
    """A route answering its n-th request with ``replies[n]`` (the last one from then on)."""
    return lambda n: replies[min(n, len(replies) - 1)]


class MiniSite:
    """A RawServer serving ``routes`` by path, one request per connection (``Connection: close``),
    answering a path in ``delays`` that many seconds late.

    One request per connection keeps the fetcher's own stale-connection
    replay out of the retry tests: every failure reaches the crawler.  Every
    request is logged with its arrival time and Host header.
    """

    def __init__(
        self, raw_server: MakeServer, routes: dict[str, Route], delays: dict[str, float] | None = None
    ) -> None:
        self.routes = routes
        self.delays = delays or {}
        self.hits: list[Hit] = []
        self._lock = threading.Lock()
        self.server = raw_server(self._handle, max_seconds=30)

    def _handle(self, sock: socket.socket, info: ConnInfo) -> None:
        head = read_request(sock, info)
        if head is None:
            return
        lines = head.decode("latin-1").split("\r\n")
        path = lines[0].split(" ")[1]
        host = next((line.split(":", 1)[1].strip() for line in lines[1:] if line.lower().startswith("host:")), "")
        with self._lock:
            before = sum(1 for hit in self.hits if hit.path == path)
            self.hits.append(Hit(time.monotonic(), host, path))
        route = self.routes.get(path, NOT_FOUND)
        reply = route(before) if callable(route) else route
        if not info.sleep(self.delays.get(path, 0.0)):
            return
        if reply is not None:
            sock.sendall(reply)

    @property
    def port(self) -> int:
        return self.server.port

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> Counter[str]:
        with self._lock:
            return Counter(hit.path for hit in self.hits)

    def log(self) -> list[Hit]:
        with self._lock:
            return list(self.hits)


# -- the whole site, exactly once ------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_crawl_fetches_every_page_of_every_host_exactly_once_and_ends_by_itself(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    log = PageLog()
    with TestSite(hosts=4, pages=600, max_seconds=60) as site:
        summary = crawl(tmp_path, [site.base_urls[0]], log, allowed_domains=["127.0.0.1"])
        counters = [site.counters(port) for port in site.ports]
    everything = set(site.page_urls())
    assert len(everything) == 4 * 601

    for port_counters in counters:  # the server's side
        assert port_counters.paths[ROBOTS] == 1
    seen = requested_pages(site, counters)
    assert set(seen) == everything
    assert set(seen.values()) == {1}

    db = str(tmp_path / "crawl.sqlite")
    assert summary.counts == {"waiting": 0, "processing": 0, "done": len(everything), "error": 0}
    assert states(db) == {"done": len(everything)}
    with Frontier(db) as frontier:
        assert frontier.counts() == summary.counts
    assert not summary.stopped and summary.errors == {} and summary.pages == len(everything)

    assert set(log.calls) == everything and set(log.calls.values()) == {1}
    assert threading.current_thread() not in log.threads
    assert not any(t.name == "niofetcher-loop" for t in log.threads)
    seed = log.pages[site.base_urls[0]]
    assert (seed.depth, seed.parent) == (0, None)
    for url, page in log.pages.items():
        assert isinstance(page.links, PageLinks) and page.result.ok
        if url != seed.url:  # found on a page crawled before it, one hop deeper
            assert page.parent is not None
            parent = log.pages[page.parent]
            assert parent.links is not None
            assert url in parent.links.links and page.depth == parent.depth + 1


# -- scope -----------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_max_pages_stops_the_crawl_after_that_many_pages_and_leaves_the_rest_waiting(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    with TestSite(hosts=1, pages=300, max_seconds=30) as site:
        summary = crawl(tmp_path, [site.base_urls[0]], max_pages=40)
        seen = requested_pages(site)
    assert sum(seen.values()) == 40 and set(seen.values()) == {1}
    assert summary.counts["done"] == 40 and summary.counts["error"] == 0
    assert summary.counts["processing"] == 0 and summary.counts["waiting"] > 0
    assert summary.stopped
    assert urls_in_state(str(tmp_path / "crawl.sqlite"), "done") == set(seen)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("max_depth, pages_expected", [(0, 1), (1, 6), (2, None)])
def test_max_depth_crawls_exactly_the_pages_within_that_many_hops(
    tmp_path: Path, no_leaks: LeakBaseline, max_depth: int, pages_expected: int | None
) -> None:
    log = PageLog()
    with TestSite(hosts=1, pages=200, max_seconds=30) as site:
        seed = site.base_urls[0]
        crawl(tmp_path, [seed], log, max_depth=max_depth)
        seen = requested_pages(site)
    hops = reachable(seed, log.links(), lambda url, depth: depth <= max_depth)
    assert set(seen) == set(hops) and set(seen.values()) == {1}
    assert {url: page.depth for url, page in log.pages.items()} == hops
    if pages_expected is not None:  # depth 0: the seed alone; depth 1: the seed and its five links
        assert len(hops) == pages_expected
    assert max(hops.values()) == max_depth


@pytest.mark.timeout(30)
def test_max_depth_counts_the_shortest_path_even_when_a_longer_one_is_crawled_first(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    """``/`` links to a fast ``/a`` and a slow ``/b``; ``/a`` -> ``/c`` -> ``/x`` -> ``/y``, and ``/b`` -> ``/x``.

    ``/x`` is 2 hops from the seed (through ``/b``) and ``/y`` 3 hops, but
    the crawl meets ``/x`` first through the longer path (3 hops, while
    ``/b`` is still coming).  With ``max_depth=3``, ``/y`` is within the
    limit and must be crawled.
    """
    site = MiniSite(raw_server, {
        ROBOTS: NOT_FOUND, "/": html("/a", "/b"), "/a": html("/c"), "/b": html("/x"),
        "/c": html("/x"), "/x": html("/y"), "/y": html(),
    }, delays={"/b": 1.0})
    crawl(tmp_path, [site.url("/")], max_depth=3, fetcher=FetcherConfig(max_connections_per_host=4))
    assert site.paths()["/y"] == 1, f"{site.paths()}"


@dataclass(frozen=True)
class Scope:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def follows(self, url: str, _depth: int = 0) -> bool:
        if self.include and not any(re.search(p, url) for p in self.include):
            return False
        return not any(re.search(p, url) for p in self.exclude)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("scope", [
    Scope(include=(r"/page/\d{1,2}$",)),  # pages 0..99 of 200
    Scope(exclude=(r"[13579]$",)),  # no odd page
    Scope(include=(r"/page/\d{1,2}$", r"/page/1\d\d$"), exclude=(r"5$", r"/page/1[0-4]\d$")),
], ids=["include", "exclude", "both"])
def test_include_and_exclude_patterns_decide_which_links_are_followed(
    tmp_path: Path, no_leaks: LeakBaseline, scope: Scope
) -> None:
    log = PageLog()
    with TestSite(hosts=1, pages=200, max_seconds=30) as site:
        seed = site.base_urls[0]
        crawl(tmp_path, [seed], log, include=scope.include, exclude=scope.exclude)
        seen = requested_pages(site)
    links = log.links()
    assert set(seen) == set(reachable(seed, links, scope.follows)) and set(seen.values()) == {1}
    assert all(scope.follows(url) for url in seen if url != seed)
    skipped = {link for targets in links.values() for link in targets if not scope.follows(link)}
    assert skipped and not skipped & set(seen)  # the patterns had something to refuse, and refused it


@pytest.mark.timeout(30)
@pytest.mark.parametrize("allowed", [None, ["BÜCHER.test"], ["xn--bcher-kva.test"]], ids=["seed-host", "unicode", "a-label"])
def test_a_unicode_host_is_crawled_whole_whichever_way_its_domain_is_written(
    tmp_path: Path, no_leaks: LeakBaseline, allowed: list[str] | None
) -> None:
    """The frontier stores the Unicode seed as A-labels, and so its links; the scope compares A-labels,
    so an allowed domain written in Unicode (as a user types it) still admits them."""
    with TestSite(hosts=1, pages=30, max_seconds=30) as site:
        port = site.ports[0]
        seed = f"http://bücher.test:{port}/"
        fetcher = FetcherConfig(resolve={f"bücher.test:{port}": "127.0.0.1"})
        summary = crawl(tmp_path, [seed], allowed_domains=allowed, fetcher=fetcher)
        seen = requested_pages(site)
    assert summary.counts["done"] == 31 and summary.counts["error"] == 0
    assert len(seen) == 31 and set(seen.values()) == {1}
    assert urls_in_state(str(tmp_path / "crawl.sqlite"), "done") >= {f"http://xn--bcher-kva.test:{port}/page/7"}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("allowed, b_expected", [
    (None, set()),  # default: the seed's host (and its subdomains) only
    (["a.test", "b.test"], {("b.test", ROBOTS), ("b.test", "/b1")}),
], ids=["default-seed-hosts", "listed-domains"])
def test_allowed_domains_default_to_the_seed_hosts_with_their_subdomains(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline,
    allowed: list[str] | None, b_expected: set[tuple[str, str]],
) -> None:
    """Names map to loopback through ``resolve``; a stub resolver proves no name is ever looked up."""
    b_site = MiniSite(raw_server, {ROBOTS: NOT_FOUND, "/b1": html(), "/e1": html()})
    a_site = MiniSite(raw_server, {ROBOTS: NOT_FOUND, "/a1": html(), "/sub": html()})
    a_site.routes["/"] = html(
        "/a1",
        f"http://x.a.test:{a_site.port}/sub",  # a subdomain of the seed's host: in scope
        f"http://b.test:{b_site.port}/b1",  # another domain
        f"http://evila.test:{b_site.port}/e1",  # ends like a.test but is not a subdomain of it
    )
    looked_up: list[str] = []

    def no_dns(host: str, port: int) -> list:
        looked_up.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "no DNS in tests")

    names = ("a.test", "x.a.test", "b.test", "evila.test")
    fetcher = FetcherConfig(resolve={name: "127.0.0.1" for name in names}, resolver=no_dns)
    crawl(tmp_path, [f"http://a.test:{a_site.port}/"], allowed_domains=allowed, fetcher=fetcher)

    a_pages = {(hit.host.split(":")[0], hit.path) for hit in a_site.log() if hit.path != ROBOTS}
    assert a_pages == {("a.test", "/"), ("a.test", "/a1"), ("x.a.test", "/sub")}
    assert {(hit.host.split(":")[0], hit.path) for hit in b_site.log()} == b_expected
    assert looked_up == []


def redirect_to(location: str) -> bytes:
    return http_response(302, b"", [("Location", location)], close=True)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("target", ["other-domain", "robots-disallowed"])
def test_a_redirect_does_not_lead_the_crawl_out_of_scope_or_past_robots(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline, target: str
) -> None:
    """A redirect is a link the server follows for the crawler: the target must pass the same checks.

    ``/go`` on the seed's host redirects either to another domain (not in
    the default allowed_domains) or to a path the host's robots.txt
    disallows.  Neither target may be requested.
    """
    other = MiniSite(raw_server, {ROBOTS: NOT_FOUND, "/landing": html()})
    site = MiniSite(raw_server, {ROBOTS: text("User-agent: *\nDisallow: /private\n"), "/private": html()})
    site.routes["/"] = html("/go")
    site.routes["/go"] = redirect_to(
        f"http://b.test:{other.port}/landing" if target == "other-domain" else f"http://a.test:{site.port}/private"
    )
    fetcher = FetcherConfig(resolve={"a.test": "127.0.0.1", "b.test": "127.0.0.1"})
    crawl(tmp_path, [f"http://a.test:{site.port}/"], fetcher=fetcher)
    assert site.paths()["/go"] == 1  # the redirect was met
    assert other.paths()["/landing"] == 0 and site.paths()["/private"] == 0


@pytest.mark.timeout(30)
def test_only_html_is_parsed_for_links(tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline) -> None:
    anchor = '<a href="/from-{}">a link</a>'
    site = MiniSite(raw_server, {
        ROBOTS: NOT_FOUND,
        "/": html("/plain.txt", "/page.html"),
        "/plain.txt": text(f"<html><body>{anchor.format('text')}</body></html>"),
        "/page.html": html(extra=anchor.format("html")),
        "/from-html": html(),
        "/from-text": html(),
    })
    log = PageLog()
    crawl(tmp_path, [site.url("/")], log)
    assert site.paths() == Counter({ROBOTS: 1, "/": 1, "/plain.txt": 1, "/page.html": 1, "/from-html": 1})
    assert log.pages[site.url("/plain.txt")].links is None
    links = log.pages[site.url("/page.html")].links
    assert links is not None and links.links == [site.url("/from-html")]


# -- robots.txt ---------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_robots_disallow_keeps_paths_unrequested_and_marks_them_error(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    with TestSite(hosts=1, pages=100, robots_disallow=["/page/1"], max_seconds=30) as site:
        summary = crawl(tmp_path, [site.base_urls[0]])
        seen = requested_pages(site)
        robots_requests = site.counters().paths[ROBOTS]
    base = site.base_urls[0]
    disallowed = {url for url in site.page_urls() if url.startswith(base + "page/1")}  # 1, 10-19
    assert robots_requests == 1
    assert seen and not disallowed & set(seen)
    rows = frontier_rows(str(tmp_path / "crawl.sqlite"))
    refused = {url for url, row in rows.items() if row["state"] == "error"}
    assert refused and refused <= disallowed  # found through links, never fetched
    assert all("robots" in rows[url]["error"] for url in refused)
    assert urls_in_state(str(tmp_path / "crawl.sqlite"), "done") == set(seen)
    assert summary.errors == {"robots_disallowed": len(refused)}


@pytest.mark.timeout(30)
def test_robots_crawl_delay_spaces_the_requests_to_that_host(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    pages = [f"/p{i}" for i in range(4)]
    site = MiniSite(raw_server, {
        ROBOTS: text("User-agent: *\nCrawl-delay: 0.3\n"),
        "/": html(*pages),
        **{page: html() for page in pages},
    })
    summary = crawl(tmp_path, [site.url("/")], fetcher=FetcherConfig(max_connections_per_host=4))
    assert summary.counts["done"] == 5
    hits = site.log()
    assert hits[0].path == ROBOTS  # robots.txt comes before the host's first page
    starts = [hit.at for hit in hits[1:]]
    assert len(starts) == 5
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    # Four connections and four URLs ready at once would arrive together without the delay; the
    # 0.1 s margin is for connect times (each request has a connection of its own).
    assert min(gaps) >= 0.2, gaps


# -- retries ----------------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("replies, max_attempts, state, status", [
    ((UNAVAILABLE, UNAVAILABLE, html()), 3, "done", 200),
    ((UNAVAILABLE, UNAVAILABLE, html()), 2, "error", 503),
    ((None, html()), 3, "done", 200),  # the connection closed before a response: a network error
    ((None, None, None, html()), 3, "error", None),
], ids=["503-twice-then-200", "503-until-attempts-run-out", "network-error-then-200", "network-error-thrice"])
def test_retryable_failures_are_retried_up_to_max_attempts(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline,
    replies: tuple[Reply, ...], max_attempts: int, state: str, status: int | None,
) -> None:
    site = MiniSite(raw_server, {ROBOTS: NOT_FOUND, "/flaky": in_turn(*replies)})
    url = site.url("/flaky")
    summary = crawl(tmp_path, [url], max_attempts=max_attempts, retry_delay=0.05)
    attempts = min(max_attempts, len(replies))
    assert site.paths()["/flaky"] == attempts  # the server's side
    row = frontier_rows(str(tmp_path / "crawl.sqlite"))[url]
    assert (row["state"], row["attempts"], row["status"]) == (state, attempts, status)
    assert summary.counts[state] == 1 and summary.counts["waiting"] == summary.counts["processing"] == 0


@pytest.mark.timeout(30)
def test_a_retry_waits_as_long_as_retry_after_says(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    later = text("busy\n", status=503, headers=[("Retry-After", "1")])
    site = MiniSite(raw_server, {ROBOTS: NOT_FOUND, "/later": in_turn(later, html())})
    summary = crawl(tmp_path, [site.url("/later")], retry_delay=0.05)
    first, second = (hit.at for hit in site.log() if hit.path == "/later")
    assert second - first >= 0.9  # retry_delay alone would have retried after 0.05 s
    assert summary.counts["done"] == 1


@pytest.mark.timeout(30)
def test_a_retry_after_of_no_use_leaves_the_retry_to_the_schedule(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    """A Retry-After that is no number ('\u00b2' passes str.isdigit(); the crawl died of the
    ValueError of float()) is ignored: the page is retried after retry_delay and done."""
    odd = text("busy\n", status=503, headers=[("Retry-After", "\u00b2")])
    site = MiniSite(raw_server, {ROBOTS: NOT_FOUND, "/odd": in_turn(odd, html())})
    summary = crawl(tmp_path, [site.url("/odd")], retry_delay=0.05)
    assert [hit.path for hit in site.log()].count("/odd") == 2
    assert summary.counts["done"] == 1


def test_a_retry_after_waits_an_hour_at_most(raw_server: MakeServer) -> None:
    """A crawl told to come back in three years would hold its hosts' URLs and never end."""
    srv = raw_server(lambda sock, info: sock.sendall(text("busy\n", status=503, headers=[("Retry-After", "100000000")]))
                     if read_request(sock, info) is not None else None)
    with NIOFetcher() as fetcher:
        fetcher.register(srv.url("/"))
        result = fetcher.get(timeout=10)
    assert result is not None and result.status == 503
    assert retry_after(result) == 3600.0


# -- on_page --------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_an_on_page_exception_fails_that_url_and_the_crawl_goes_on(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    def explode(page: CrawledPage) -> None:
        if page.url.endswith("/page/3"):
            raise RuntimeError("the embedding program choked")

    with TestSite(hosts=1, pages=30, max_seconds=30) as site:
        summary = crawl(tmp_path, [site.base_urls[0]], PageLog(then=explode))
        seen = requested_pages(site)
    bad = site.base_urls[0] + "page/3"
    rows = frontier_rows(str(tmp_path / "crawl.sqlite"))
    assert seen[bad] == 1  # fetched once, not retried
    assert rows[bad]["state"] == "error" and "the embedding program choked" in rows[bad]["error"]
    assert summary.counts == {"waiting": 0, "processing": 0, "done": len(rows) - 1, "error": 1}
    assert summary.errors == {"on_page_failed": 1}
    assert set(seen) == set(rows) and set(seen.values()) == {1}


# -- stopping and resuming -----------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_stop_is_graceful_and_a_second_crawler_finishes_without_refetching(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    """stop() from on_page after 20 pages: what is in flight finishes, nothing else starts.

    After stop() the server can still see the requests that were on their
    way (at most one per connection) and those a freed connection took
    before the stop reached the loop thread (again at most one per
    connection): 2 x ``max_connections_per_host``.  URLs registered with the
    fetcher but not started are not "in flight" and must stay 'waiting'.
    """
    per_host = 2
    fetcher = FetcherConfig(max_connections_per_host=per_host)
    at_stop: dict[str, int] = {}
    once = threading.Lock()
    with TestSite(hosts=1, pages=200, delay=0.02, max_seconds=60) as site:

        def stop_after_20(page: CrawledPage) -> None:
            with once:
                if len(log.calls) >= 20 and not at_stop:
                    at_stop["requests"] = site.counters().requests
                    crawler.stop()

        log = PageLog(then=stop_after_20)
        crawler = Crawler(crawl_config(tmp_path, [site.base_urls[0]], fetcher=fetcher), log)
        first = crawler.run()
        first_run = requested_pages(site)
        after_stop = site.counters().requests - at_stop["requests"]
        db = str(tmp_path / "crawl.sqlite")
        done_first = urls_in_state(db, "done")

        site.reset_counters()
        second = crawl(tmp_path, [site.base_urls[0]], fetcher=FetcherConfig(max_connections_per_host=8))
        second_run = requested_pages(site)

    assert first.stopped and first.counts["processing"] == 0 and first.counts["waiting"] > 0
    assert after_stop <= 2 * per_host, f"{after_stop} requests reached the server after stop()"
    assert done_first == set(first_run)  # every page fetched in run 1 was handed over and recorded
    assert not done_first & set(second_run)
    assert not second.stopped and second.counts == {
        "waiting": 0, "processing": 0, "done": len(site.page_urls()), "error": 0}
    both = first_run + second_run
    assert set(both) == set(site.page_urls()) and set(both.values()) == {1}


@pytest.mark.timeout(60)
def test_stop_with_pages_in_parse_jobs_and_waiting_for_on_page_loses_none_of_them(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    """stop() from on_page while batches are in the parse processes and queued for on_page (a slow
    on_page keeps them queued): every page the server sent is still parsed, handed to on_page once
    and recorded 'done' before run() returns; nothing is left 'processing'; a resume does the rest."""

    def slow_then_stop(page: CrawledPage) -> None:
        time.sleep(0.002)
        if len(log.calls) >= 100:
            crawler.stop()

    log = PageLog(then=slow_then_stop)
    fetcher = FetcherConfig(max_connections_per_host=8)
    with TestSite(hosts=2, pages=300, max_seconds=60) as site:
        config = crawl_config(tmp_path, [site.base_urls[0]], parse_mode="process", fetcher=fetcher)
        crawler = Crawler(config, log)
        first = crawler.run()
        first_run = requested_pages(site)
        done_first = urls_in_state(str(tmp_path / "crawl.sqlite"), "done")
        site.reset_counters()
        second = crawl(tmp_path, [site.base_urls[0]])
        second_run = requested_pages(site)

    assert first.stopped and first.counts["processing"] == 0 and first.counts["error"] == 0
    assert done_first == set(first_run) == set(log.calls) and set(log.calls.values()) == {1}
    assert len(done_first) >= 100
    assert not done_first & set(second_run)
    assert second.counts["done"] == len(site.page_urls()) and not second.stopped
    assert set(first_run + second_run) == set(site.page_urls())


@pytest.mark.timeout(60)
def test_a_parse_process_that_dies_loses_no_page(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    """SIGKILL one parse process mid-crawl: the jobs it held and every later one are parsed in the
    crawler's own process instead, and the crawl ends complete, every page fetched and handed over once."""
    killed: list[int] = []
    once = threading.Lock()

    def kill_a_parse_process(page: CrawledPage) -> None:
        with once:
            if len(log.calls) >= 30 and not killed:
                parse_processes = [
                    child for child in psutil.Process().children() if "niofetcher.crawl.workers" in " ".join(child.cmdline())
                ]
                killed.append(parse_processes[0].pid)
                parse_processes[0].kill()

    log = PageLog(then=kill_a_parse_process)
    with TestSite(hosts=2, pages=200, max_seconds=60) as site:
        summary = crawl(tmp_path, [site.base_urls[0]], log, parse_mode="process", allowed_domains=["127.0.0.1"])
        seen = requested_pages(site)
    everything = set(site.page_urls())
    assert killed
    assert summary.counts == {"waiting": 0, "processing": 0, "done": len(everything), "error": 0}
    assert set(seen) == everything and set(seen.values()) == {1}
    assert set(log.calls) == everything and set(log.calls.values()) == {1}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("breakage", ["pump thread", "on_page raises SystemExit"])
def test_a_crawl_thread_that_dies_ends_the_crawl_with_an_error_and_loses_nothing(
    tmp_path: Path, no_leaks: LeakBaseline, monkeypatch: pytest.MonkeyPatch, breakage: str
) -> None:
    """A bug in the pump thread, or an on_page that raises what is not an Exception, used to leave the
    coordinator waiting for ever for pages that would never come (stop() could not end it). Now run()
    raises at once, nothing is left 'processing', and a second crawl finishes the job."""
    real_is_html = pipeline_module._is_html
    calls = itertools.count()

    def is_html_breaking_once(result: Any) -> bool:
        if next(calls) == 20:
            raise ValueError("a bug in the pump")
        return real_is_html(result)

    def exit_once(page: CrawledPage) -> None:
        if len(log.calls) == 20:
            raise SystemExit("on_page exits")

    log = PageLog(then=exit_once if breakage.startswith("on_page") else None)
    if breakage == "pump thread":
        monkeypatch.setattr(pipeline_module, "_is_html", is_html_breaking_once)
    with TestSite(hosts=1, pages=100, max_seconds=30) as site:
        with pytest.raises(RuntimeError, match="died"):
            crawl(tmp_path, [site.base_urls[0]], log)
        db_path = str(tmp_path / "crawl.sqlite")
        assert states(db_path)["processing"] == 0
        monkeypatch.undo()
        second = crawl(tmp_path, [site.base_urls[0]])
    assert second.counts == {"waiting": 0, "processing": 0, "done": len(site.page_urls()), "error": 0}


@pytest.mark.timeout(30)
def test_a_page_that_cannot_be_parsed_fails_alone(
    tmp_path: Path, no_leaks: LeakBaseline, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_extract = parsing_module.extract  # type: ignore[attr-defined]  # the name parse_pages calls

    def choke_on_page_3(body: bytes, url: str, *args: Any, **options: Any) -> PageLinks:
        if url.endswith("/page/3"):
            raise RuntimeError("the parser choked")
        return real_extract(body, url, *args, **options)

    monkeypatch.setattr(parsing_module, "extract", choke_on_page_3)  # thread mode: parsed in this process
    log = PageLog()
    with TestSite(hosts=1, pages=30, max_seconds=30) as site:
        summary = crawl(tmp_path, [site.base_urls[0]], log)
        seen = requested_pages(site)
    bad = site.base_urls[0] + "page/3"
    rows = frontier_rows(str(tmp_path / "crawl.sqlite"))
    assert seen[bad] == 1 and bad not in log.calls
    assert rows[bad]["state"] == "error" and "the parser choked" in rows[bad]["error"]
    assert summary.counts == {"waiting": 0, "processing": 0, "done": len(rows) - 1, "error": 1}
    assert set(log.calls) == set(rows) - {bad}


CRAWL_SCRIPT = textwrap.dedent("""
    import sys
    from niofetcher import FetcherConfig, NIOFetcher
    from niofetcher.crawl import CrawlConfig, Crawler
    if __name__ == "__main__":  # parse processes import this module again
        seed, db, parse_mode = sys.argv[1:]
        config = CrawlConfig(seeds=[seed], db_path=db, parse_mode=parse_mode,
                             fetcher=FetcherConfig(max_connections_per_host=2))
        Crawler(config).run()
""")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("parse_mode", ["thread", "process"])
def test_a_crawl_killed_with_sigkill_resumes_without_losing_or_refetching_done_pages(
    tmp_path: Path, no_leaks: LeakBaseline, parse_mode: str
) -> None:
    """Killed with parse jobs and batches of pages in flight: they were 'processing', so they come back."""
    db = str(tmp_path / "crawl.sqlite")
    with TestSite(hosts=1, pages=400, delay=0.01, max_seconds=60) as site:
        child = subprocess.Popen([sys.executable, "-c", CRAWL_SCRIPT, site.base_urls[0], db, parse_mode],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        sigkill_after_requests(child, lambda: site.counters().requests, 150)
        killed_run = requested_pages(site)

        rows = frontier_rows(db)
        done_before = {url for url, row in rows.items() if row["state"] == "done"}
        processing_before = {url for url, row in rows.items() if row["state"] == "processing"}
        assert done_before and processing_before  # killed half-way
        assert len(killed_run) < len(site.page_urls())

        with Frontier(db) as frontier:  # reopening puts the killed run's claims back
            assert frontier.counts()["processing"] == 0
            assert all(frontier.state(url) == "waiting" for url in processing_before)

        site.reset_counters()
        summary = crawl(tmp_path, [site.base_urls[0]])
        resumed_run = requested_pages(site)

    assert summary.counts == {"waiting": 0, "processing": 0, "done": len(site.page_urls()), "error": 0}
    assert not done_before & set(resumed_run)
    assert set(killed_run + resumed_run) == set(site.page_urls())
    assert set(resumed_run.values()) == {1}


# -- parsing: processes or threads, bs4 or lxml --------------------------------------------------------


@pytest.mark.timeout(60)
def test_process_and_thread_parsing_and_both_extractors_crawl_the_same_urls(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    variants = {
        "process-bs4": {"parse_mode": "process", "extractor": "bs4"},  # the default
        "thread-bs4": {"parse_mode": "thread", "extractor": "bs4"},
        "thread-lxml": {"parse_mode": "thread", "extractor": "lxml"},
    }
    assert CrawlConfig(seeds=["http://127.0.0.1/"]).parse_mode == "process"
    done: dict[str, set[str]] = {}
    links: dict[str, dict[str, list[str]]] = {}
    with TestSite(hosts=2, pages=100, max_seconds=60) as site:
        for name, options in variants.items():
            log = PageLog()
            site.reset_counters()
            summary = crawl(tmp_path, [site.base_urls[0]], log, db=f"{name}.sqlite", **options)
            assert summary.counts["done"] == len(site.page_urls()), name
            assert set(requested_pages(site).values()) == {1}, name
            done[name] = urls_in_state(str(tmp_path / f"{name}.sqlite"), "done")
            links[name] = log.links()
    assert done["process-bs4"] == done["thread-bs4"] == done["thread-lxml"] == set(site.page_urls())
    assert links["process-bs4"] == links["thread-bs4"] == links["thread-lxml"]


@pytest.mark.timeout(30)
def test_a_fetcher_loop_that_dies_ends_the_crawl_with_an_error_and_a_rerun_completes_it(
    tmp_path: Path, no_leaks: LeakBaseline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault on the fetcher's loop thread (here: its 30th dispatch raises) used to leave the crawl
    waiting for ever for results that could not come.  Now run() ends with a one-line error, every
    URL it held goes back to 'waiting', and a rerun finishes the crawl."""
    from niofetcher.engine import Engine

    real_dispatch = Engine._dispatch
    calls = itertools.count()

    def dispatch_failing_once(self: Engine) -> None:
        if next(calls) == 30:
            raise RuntimeError("a bug on the loop thread")
        real_dispatch(self)

    monkeypatch.setattr(Engine, "_dispatch", dispatch_failing_once)
    with TestSite(hosts=1, pages=200, delay=0.002, max_seconds=30) as site:
        with pytest.raises(RuntimeError, match=r"^niofetcher loop failed: RuntimeError: a bug on the loop thread$"):
            crawl(tmp_path, [site.base_urls[0]])
        db_path = str(tmp_path / "crawl.sqlite")
        assert states(db_path)["processing"] == 0 and states(db_path)["waiting"] > 0
        monkeypatch.undo()
        second = crawl(tmp_path, [site.base_urls[0]])
    assert second.counts == {"waiting": 0, "processing": 0, "done": len(site.page_urls()), "error": 0}


@pytest.mark.timeout(30)
def test_with_max_depth_every_recorded_depth_is_the_shortest_distance_from_the_seed(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    """A race: ``/x`` is 2 hops away through the slow ``/b`` and 3 through the fast ``/a`` -> ``/c``;
    ``/y`` hangs below ``/x``.  Whichever parse finishes first, the recorded depths must be the
    breadth-first distances of the site's link graph: with max_depth the crawl goes in layers."""
    graph = {"/": ["/a", "/b"], "/a": ["/c"], "/b": ["/x"], "/c": ["/x", "/d"], "/d": ["/y"], "/x": ["/y"], "/y": []}
    site = MiniSite(raw_server, {ROBOTS: NOT_FOUND, **{path: html(*links) for path, links in graph.items()}},
                    delays={"/b": 1.0})
    crawl(tmp_path, [site.url("/")], max_depth=10, fetcher=FetcherConfig(max_connections_per_host=4))
    distance = reachable("/", graph, lambda url, hops: True)
    rows = frontier_rows(str(tmp_path / "crawl.sqlite"))
    assert {url: row["depth"] for url, row in rows.items()} == {site.url(path): d for path, d in distance.items()}
    assert all(row["state"] == "done" for row in rows.values())


@pytest.mark.timeout(30)
@pytest.mark.parametrize("failing", ["niofetcher-crawl-pump", "niofetcher-crawl-deliver-1"])
def test_a_crawl_thread_that_cannot_start_ends_the_run_with_nothing_left_running(
    tmp_path: Path, no_leaks: LeakBaseline, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """Out of threads: run() raises what start() raised, the threads already started stop, and the claimed
    URLs go back to waiting (before, the pump started first spun for ever)."""
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == failing:
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    with TestSite(hosts=1, pages=20) as site, pytest.raises(RuntimeError, match="can't start new thread"):
        crawl(tmp_path, [site.base_urls[0]], PageLog())
    monkeypatch.undo()
    assert states(str(tmp_path / "crawl.sqlite")) == {"waiting": 1}


@pytest.mark.timeout(60)
def test_progress_shows_the_requests_on_the_wire_and_the_open_connections(tmp_path: Path) -> None:
    """progress() says what the fetcher is doing now, not only what the frontier holds."""
    with TestSite(hosts=1, pages=200, delay=0.05) as site:
        crawler = Crawler(crawl_config(tmp_path, [site.base_urls[0]],
                                       fetcher=FetcherConfig(max_connections_per_host=4)))
        assert crawler.progress().fetching == crawler.progress().open_connections == 0  # before run()
        thread = threading.Thread(target=crawler.run)
        thread.start()
        try:
            seen = wait_until(lambda: crawler.progress().fetching == 4 == crawler.progress().open_connections, 30)
        finally:
            crawler.stop()
            thread.join(30)
    assert seen and not thread.is_alive()

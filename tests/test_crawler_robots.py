"""robots.txt as RFC 9309 says (docs/crawler.md), against the real test site.

- Redirects of robots.txt (301, 302, 303, 307, 308), to the same host or to
  another, are followed up to 5; the rules found apply to the first host.
  A sixth redirect makes robots.txt "unavailable": allow all (RFC 9309
  2.3.1.2 allows that; Google does the same).
- A 5xx or an unreachable robots.txt is a complete disallow for that host:
  its URLs wait while robots.txt is fetched again with the crawl's retry
  policy; a Disallow that comes after a 503 is obeyed; when the attempts
  are used up, the host's URLs end 'error' with the reason.
- Crawl-delay is honoured up to ``max_crawl_delay`` and capped beyond it
  (logged once per host); the first page follows robots.txt without a delay.
- The file is read as RFC 9309 and Google's parser read it (a BOM skipped,
  an unknown line ending no group, the user agent matched by its product
  token), through a crawl too; the cases of Google's own tests are in
  test_robots_rulebook.py.

The server's request log (``TestSite(log_requests=True)``) is the proof of
what was requested and when.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from conftest import LeakBaseline, MakeServer
from rawserver import ConnInfo, http_response, read_request

from niofetcher import FetcherConfig
from niofetcher.crawl import CrawlConfig, Crawler, CrawlSummary
from niofetcher.crawl.frontier.base import ROBOTS_SECONDS
from niofetcher.crawl.robots import DISALLOWED
from niofetcher.testing import TestSite

ROBOTS = "/robots.txt"


def crawl(tmp_path: Path, site: TestSite, **options: Any) -> CrawlSummary:
    options.setdefault("parse_mode", "thread")
    options.setdefault("retry_delay", 0.05)
    config = CrawlConfig(seeds=[site.base_urls[0]], db_path=str(tmp_path / "crawl.sqlite"), **options)
    return Crawler(config).run()


def rows(tmp_path: Path) -> dict[str, tuple[str, str | None]]:
    """URL -> (state, error), read with plain sqlite3."""
    with contextlib.closing(sqlite3.connect(tmp_path / "crawl.sqlite")) as conn:
        return {url: (state, error) for url, state, error in conn.execute("SELECT url, state, error FROM urls")}


def requested(site: TestSite) -> Counter[str]:
    """URL -> requests the site served for it, robots.txt and its redirect hops included."""
    return Counter(
        base + path[1:] for base, port in zip(site.base_urls, site.ports, strict=True)
        for path, n in site.counters(port).paths.items() for _ in range(n)
    )


def pages_of(seen: Counter[str]) -> set[str]:
    return {url for url in seen if "/robots" not in url}


# -- redirects (case 9) -------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("cross_host", [False, True], ids=["same-host", "other-host"])
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirected_robots_txt_is_followed_and_its_rules_obeyed(
    tmp_path: Path, no_leaks: LeakBaseline, status: int, cross_host: bool
) -> None:
    with TestSite(hosts=2, pages=30, robots_disallow=["/page/1"], robots_redirects=2,
                  robots_redirect_status=status, robots_redirect_cross_host=cross_host, max_seconds=30) as site:
        summary = crawl(tmp_path, site)
        seen = requested(site)
    for j, base in enumerate(site.base_urls):  # every host's chain, each hop once
        hop_hosts = [site.base_urls[(j + k) % 2] if cross_host else base for k in (1, 2)]
        assert seen[base + "robots.txt"] == 1
        assert seen[f"{hop_hosts[0]}robots/{j}/1"] == seen[f"{hop_hosts[1]}robots/{j}/2"] == 1
    fetched = pages_of(seen)
    disallowed = {url for url in site.page_urls() if "/page/1" in url}  # 1, 10-19 on both hosts
    assert len(fetched) > 30 and not fetched & disallowed and set(seen.values()) == {1}
    found = rows(tmp_path)
    assert {url for url, (state, _) in found.items() if state == "done"} == fetched
    refused = {url for url, (state, _) in found.items() if state == "error"}
    assert refused and refused <= disallowed
    assert all(found[url][1] == "disallowed by robots.txt" for url in refused)
    assert summary.errors == {"robots_disallowed": len(refused)}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("hops, obeyed", [(5, True), (6, False)])
def test_robots_txt_redirects_are_followed_up_to_five_and_more_means_no_rules(
    tmp_path: Path, no_leaks: LeakBaseline, hops: int, obeyed: bool
) -> None:
    """Five redirects reach the rules; a sixth is not followed and robots.txt counts as unavailable
    (RFC 9309 2.3.1.2 lets a crawler assume so; 2.3.1.3: unavailable allows everything)."""
    with TestSite(hosts=2, pages=20, robots_disallow=["/page/1"], robots_redirects=hops,
                  robots_redirect_cross_host=True, max_seconds=30) as site:
        crawl(tmp_path, site)
        seen = requested(site)
    chain = [url for url in seen if "/robots/0/" in url]
    assert len(chain) == min(hops, 5) and set(seen.values()) == {1}
    page_1 = site.base_urls[0] + "page/1"
    assert (page_1 not in seen) is obeyed
    assert rows(tmp_path)[page_1][0] == ("error" if obeyed else "done")


# -- 5xx and unreachable (case 10) ----------------------------------------------------------


@pytest.mark.timeout(30)
def test_a_503_robots_txt_holds_the_host_back_and_the_disallow_that_follows_is_obeyed(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    with TestSite(hosts=1, pages=30, robots_disallow=["/page/1"], robots_unavailable=2, log_requests=True,
                  max_seconds=30) as site:
        summary = crawl(tmp_path, site, max_attempts=3)
        log = site.counters().log
    paths = [path for _, path in log]
    assert paths[:3] == [ROBOTS] * 3  # 503, 503, then the rules: nothing of the host before them
    assert paths.count(ROBOTS) == 3
    assert not [path for path in paths if path.startswith("/page/1")]
    assert summary.counts["done"] == len(set(paths)) - 1 and summary.counts["waiting"] == 0
    assert summary.errors == {"robots_disallowed": summary.counts["error"]}


@pytest.mark.timeout(30)
def test_robots_txt_unavailable_on_every_attempt_ends_the_hosts_urls_as_errors(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    with TestSite(hosts=1, pages=30, robots_unavailable=100, max_seconds=30) as site:
        summary = crawl(tmp_path, site, max_attempts=2)
        seen = site.counters().paths
    assert seen == Counter({ROBOTS: 2})  # fetched max_attempts times; not one page
    assert rows(tmp_path) == {site.base_urls[0]: ("error", "robots.txt unavailable: HTTP 503 Service Unavailable")}
    assert summary.counts == {"waiting": 0, "processing": 0, "done": 0, "error": 1}
    assert summary.errors == {"robots_unavailable": 1}


def requested_path(sock: Any, info: ConnInfo, paths: list[str], lock: threading.Lock) -> str | None:
    """Read one request on ``sock``; its path, also appended to ``paths``; None when none came."""
    head = read_request(sock, info)
    if head is None:
        return None
    path = head.decode("latin-1").split(" ")[1]
    with lock:
        paths.append(path)
    return path


@pytest.mark.timeout(30)
def test_a_robots_txt_that_cannot_be_reached_is_a_complete_disallow_until_it_can(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    """A connection closed without a response (a network error) on the first fetch of robots.txt,
    its rules on the second: the page they disallow is never requested."""
    paths: list[str] = []
    lock = threading.Lock()
    replies = {
        "/": http_response(200, b'<a href="/private">p</a><a href="/public">q</a>',
                           [("Content-Type", "text/html")], close=True),
        "/public": http_response(200, b"ok", [("Content-Type", "text/html")], close=True),
        "/private": http_response(200, b"secret", [("Content-Type", "text/html")], close=True),
    }
    rules = http_response(200, b"User-agent: *\nDisallow: /private\n", [("Content-Type", "text/plain")], close=True)

    def handle(sock: Any, info: ConnInfo) -> None:
        path = requested_path(sock, info, paths, lock)
        if path is None:
            return
        with lock:
            robots_before = paths.count(ROBOTS) - 1
        if path == ROBOTS:
            if robots_before:
                sock.sendall(rules)
            return  # the first time: close without a byte
        sock.sendall(replies.get(path, http_response(404, b"", close=True)))

    server = raw_server(handle, max_seconds=30)
    config = CrawlConfig(seeds=[f"http://127.0.0.1:{server.port}/"], db_path=str(tmp_path / "crawl.sqlite"),
                         parse_mode="thread", retry_delay=0.05)
    summary = Crawler(config).run()
    assert paths[:2] == [ROBOTS, ROBOTS] and sorted(paths[2:]) == ["/", "/public"]
    assert summary.counts["done"] == 2 and summary.errors == {"robots_disallowed": 1}


# -- the file, read as RFC 9309 and Google's parser read it (tests/test_robots_rulebook.py) ------------


def serve_site(
    raw_server: MakeServer, robots: bytes, pages: list[str], content_type: str = "text/plain"
) -> tuple[int, list[str]]:
    """A site serving ``robots`` as /robots.txt (as ``content_type``) and a home page that links to
    ``pages``; its port, and the paths it was asked for, as they come."""
    paths: list[str] = []
    lock = threading.Lock()
    home = "".join(f'<a href="{page}">{page}</a>' for page in pages).encode()

    def handle(sock: Any, info: ConnInfo) -> None:
        path = requested_path(sock, info, paths, lock)
        if path is None:
            return
        if path == ROBOTS:
            sock.sendall(http_response(200, robots, [("Content-Type", content_type)], close=True))
        else:
            sock.sendall(http_response(200, home if path == "/" else b"ok", [("Content-Type", "text/html")],
                                       close=True))

    return raw_server(handle, max_seconds=30).port, paths


@pytest.mark.timeout(30)
def test_a_crawl_obeys_the_groups_as_google_reads_them(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    """Two sites, one crawl as niofetcher/1.0.  The first names niofetcher in two groups: one after
    a UTF-8 BOM, one whose user-agent lines an unknown line separates.  The second names only
    crawlers whose names start or extend niofetcher's, and '*'.  Read by Protego alone, the BOM
    lost the first group and the unknown line emptied the second (/bom and /unknown-line were
    fetched), and "User-agent: niofetch" applied to niofetcher (/niofetch-group was refused,
    /star fetched)."""
    named = (b"\xef\xbb\xbfUser-agent: niofetcher\nDisallow: /bom\n\n"
             b"User-agent: niofetcher\nUnknown-Field: unknown\nUser-agent: somebot\nDisallow: /unknown-line\n\n"
             b"User-agent: *\nDisallow: /star\n")
    unnamed = (b"User-agent: niofetch\nDisallow: /niofetch-group\n\n"
               b"User-agent: niofetcherX\nDisallow: /niofetcherx-group\n\n"
               b"User-agent: *\nDisallow: /star\n")
    pages = ["/bom", "/unknown-line", "/niofetch-group", "/niofetcherx-group", "/star"]
    named_port, named_paths = serve_site(raw_server, named, pages)
    unnamed_port, unnamed_paths = serve_site(raw_server, unnamed, pages)
    config = CrawlConfig(seeds=[f"http://127.0.0.1:{port}/" for port in (named_port, unnamed_port)],
                         db_path=str(tmp_path / "crawl.sqlite"), parse_mode="thread",
                         fetcher=FetcherConfig(user_agent="niofetcher/1.0"))
    summary = Crawler(config).run()
    # niofetcher's own groups apply, both of them, and not the '*' group.
    assert sorted(named_paths) == sorted([ROBOTS, "/", "/niofetch-group", "/niofetcherx-group", "/star"])
    # No group names niofetcher: '*' applies, and neither the group of a shorter name nor a longer.
    assert sorted(unnamed_paths) == sorted([ROBOTS, "/", "/bom", "/unknown-line", "/niofetch-group",
                                            "/niofetcherx-group"])
    refused = {url for url, (state, error) in rows(tmp_path).items() if error == DISALLOWED}
    assert refused == {f"http://127.0.0.1:{named_port}{path}" for path in ("/bom", "/unknown-line")} | {
        f"http://127.0.0.1:{unnamed_port}/star"}
    assert summary.counts["done"] == 9 and summary.errors == {"robots_disallowed": 3}


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("charset", "path"), [("utf-16le", "/secret"), ("latin-1", "/caf\u00e9")])
def test_a_resumed_crawl_obeys_a_robots_txt_in_the_charset_its_content_type_names(
    tmp_path: Path, raw_server: MakeServer, no_leaks: LeakBaseline, charset: str, path: str
) -> None:
    """A robots.txt in UTF-16LE, or in Latin-1 with a non-ASCII path, read back from the frontier by
    a resumed crawl: the frontier kept only its bytes, read back as UTF-8, so the resumed run found
    no rules (UTF-16) or another path (Latin-1) and fetched the disallowed page."""
    robots = f"User-agent: *\nDisallow: {path}\n".encode(charset)
    port, paths = serve_site(raw_server, robots, ["/a", quote(path)], f"text/plain; charset={charset}")
    config = CrawlConfig(seeds=[f"http://127.0.0.1:{port}/"], db_path=str(tmp_path / "crawl.sqlite"),
                         parse_mode="thread", max_pages=1)
    Crawler(config).run()
    assert paths == [ROBOTS, "/"]
    summary = Crawler(dataclasses.replace(config, max_pages=None)).run()
    assert paths == [ROBOTS, "/", "/a"]  # robots.txt read back from the frontier, and obeyed
    assert rows(tmp_path)[f"http://127.0.0.1:{port}{quote(path)}"] == ("error", DISALLOWED)
    assert summary.errors == {"robots_disallowed": 1}


# -- Crawl-delay (case 11) ---------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_a_crawl_delay_beyond_max_crawl_delay_is_capped_and_logged_once(
    tmp_path: Path, no_leaks: LeakBaseline, caplog: pytest.LogCaptureFixture
) -> None:
    """``Crawl-delay: 3600`` would make this crawl of four pages last three hours; capped to
    0.5 s, the pages are 0.5 s apart, and the first follows robots.txt at once."""
    cap = 0.5
    with TestSite(hosts=1, pages=3, links_per_page=3, robots_crawl_delay=3600, log_requests=True,
                  max_seconds=30) as site:
        with caplog.at_level(logging.WARNING, logger="niofetcher"):
            summary = crawl(tmp_path, site, max_crawl_delay=cap,
                            fetcher=FetcherConfig(max_connections_per_host=4))
        log = site.counters().log
    assert summary.counts["done"] == 4
    assert log[0][1] == ROBOTS and len(log) == 5
    starts = [at for at, _ in log]
    # The margin is the timer's: a host delay is never early, but the clock readings on both sides
    # are taken at slightly different points.
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts[1:])]
    assert min(gaps) >= cap - 0.05, gaps
    assert starts[1] - starts[0] < cap - 0.1, "the first page waited for a delay after robots.txt"
    warnings = [record for record in caplog.records if "Crawl-delay" in record.getMessage()]
    assert len(warnings) == 1 and "3600" in warnings[0].getMessage()


@pytest.mark.timeout(30)
def test_a_crawl_delay_within_max_crawl_delay_is_honoured_as_it_is(
    tmp_path: Path, no_leaks: LeakBaseline, caplog: pytest.LogCaptureFixture
) -> None:
    with TestSite(hosts=1, pages=2, links_per_page=2, robots_crawl_delay=0.4, log_requests=True,
                  max_seconds=30) as site:
        with caplog.at_level(logging.WARNING, logger="niofetcher"):
            crawl(tmp_path, site, fetcher=FetcherConfig(max_connections_per_host=4))
        starts = [at for at, _ in site.counters().log]
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts[1:])]
    assert len(gaps) == 2 and min(gaps) >= 0.35, gaps
    assert starts[1] - starts[0] < 0.3, "the first page waited for a delay after robots.txt"
    assert not [record for record in caplog.records if "Crawl-delay" in record.getMessage()]


def test_a_crawl_delay_below_the_crawls_own_delay_does_not_lower_it(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    """``--delay 0.5`` with ``Crawl-delay: 0.1``: the pages still start 0.5 s apart (the Crawl-delay
    replaced the crawl's delay: 0.1 s apart)."""
    with TestSite(hosts=1, pages=3, links_per_page=3, robots_crawl_delay=0.1, log_requests=True,
                  max_seconds=30) as site:
        crawl(tmp_path, site, fetcher=FetcherConfig(max_connections_per_host=4, host_delay=0.5))
        starts = [at for at, _ in site.counters().log]
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert len(gaps) == 4 and min(gaps) >= 0.4, gaps  # robots.txt, / and /page/0 to /page/2 (0.1 apart before)


@pytest.mark.parametrize("value", [-1.0, float("inf"), float("nan"), True, "30"])
def test_max_crawl_delay_must_be_a_non_negative_number_of_seconds(value: Any) -> None:
    with pytest.raises(ValueError, match="max_crawl_delay"):
        CrawlConfig(seeds=["http://127.0.0.1/"], max_crawl_delay=value)
    assert CrawlConfig(seeds=["http://127.0.0.1/"]).max_crawl_delay == 30.0


# -- a bounded table (case 12) -------------------------------------------------------------------


def test_the_robots_table_ages_out_the_least_recently_used_origins_that_are_not_busy() -> None:
    from niofetcher.crawl.robots import ALLOW_ALL, RobotsTable
    from niofetcher.urls import Origin

    a, b, c, d = (Origin("http", f"{name}.test", 80) for name in "abcd")
    busy = {a}
    table = RobotsTable(2, busy=busy.__contains__)
    table.put(a, ALLOW_ALL)
    table.put(b, ALLOW_ALL)
    table.put(c, ALLOW_ALL)  # over capacity: a is oldest but busy, so b goes
    assert (a in table, b in table, c in table, len(table)) == (True, False, True, 2)
    busy.clear()
    assert table.get(a) is ALLOW_ALL  # a is now the most recently used
    table.put(d, ALLOW_ALL)
    assert (a in table, c in table, d in table) == (True, False, True)
    assert table.get(c) is None  # aged out: the gate reads its answer back from the frontier (below)


def test_the_robots_table_is_bounded_by_what_its_rules_weigh() -> None:
    """A parser holds about 270 bytes a rule line: the table counts rule lines (LINES_PER_UNIT a
    unit), not origins, so that a few huge robots.txt cannot fill memory where the same number of
    short ones fit; lines end as the parser ends them, and blank lines and comments weigh nothing."""
    from niofetcher.crawl.robots import LINES_PER_UNIT, MAX_ROBOTS_BYTES, RobotsRules, RobotsTable, interpret
    from niofetcher.models import FetchResult, URLBean
    from niofetcher.urls import Origin

    def rules(lines: int, end: bytes = b"\n", padding: bytes = b"") -> RobotsRules:
        body = b"User-agent: *" + end + b"".join(b"Disallow: /p%d/" % i + end + padding for i in range(lines - 1))
        url = "http://x.test/robots.txt"
        answer = interpret(FetchResult(URLBean(url), url, url, status=200, body=body), 0, "niofetcher")
        assert isinstance(answer, RobotsRules)
        return answer

    short, long = rules(2), rules(10 * LINES_PER_UNIT)
    assert (short.weight, long.weight) == (1, 11)
    assert rules(10 * LINES_PER_UNIT, end=b"\r").weight == 11  # old Mac line ends are lines too
    assert rules(10 * LINES_PER_UNIT, padding=b"\n\n# a comment\n").weight == 11
    # Past MAX_ROBOTS_BYTES nothing is parsed (RFC 9309 2.5), so nothing more is weighed either.
    huge = rules(MAX_ROBOTS_BYTES // 10)
    assert huge.weight < MAX_ROBOTS_BYTES // 13 // LINES_PER_UNIT + 2
    assert huge.parser is not None and not huge.parser.can_fetch("http://x.test/p100/", "niofetcher")
    assert huge.parser.can_fetch(f"http://x.test/p{MAX_ROBOTS_BYTES // 10 - 2}/", "niofetcher")
    table = RobotsTable(12, busy=lambda origin: False)
    origins = [Origin("http", f"h{i}.test", 80) for i in range(13)]
    for origin in origins[:12]:
        table.put(origin, short)
    assert (len(table), table.weight) == (12, 12)
    table.put(origins[12], long)  # the eleven oldest go to make room
    assert [origin in table for origin in origins] == [False] * 11 + [True, True]
    assert table.weight == 12
    table.put(origins[12], short)  # replaced: its weight goes with it
    assert table.weight == 2


def test_the_robots_table_passes_over_every_busy_origin_and_forgets_stale_rules() -> None:
    from niofetcher.crawl.robots import ALLOW_ALL, RobotsTable
    from niofetcher.urls import Origin

    origins = [Origin("http", f"h{i}.test", 80) for i in range(40)]
    busy = set(origins[:20])
    table = RobotsTable(25, busy=busy.__contains__)
    for origin in origins:
        table.put(origin, ALLOW_ALL)
    # Twenty busy ones at the front never stop the idle ones from going: the five newest stay.
    assert [origin for origin in origins if origin in table] == origins[:20] + origins[35:]
    busy.update(origins)
    new = Origin("http", "new.test", 80)
    table.put(new, ALLOW_ALL)  # every other one busy: all stay, over the capacity, and the put ends
    assert (len(table), table.weight) == (26, 26)
    stale = Origin("http", "stale.test", 80)
    table.put(stale, dataclasses.replace(ALLOW_ALL, expires=time.monotonic() - 1.0))  # the one idle origin goes
    assert new not in table and stale in table
    assert table.get(stale) is None and stale not in table and table.weight == 25


def test_rules_aged_out_are_read_back_from_the_frontier_not_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import niofetcher.crawl.robots_gate as robots_gate_module
    from niofetcher import NIOFetcher
    from niofetcher.crawl.frontier import Frontier
    from niofetcher.crawl.robots_gate import RobotsGate, RobotsReply
    from niofetcher.models import FetchResult, URLBean
    from niofetcher.urls import Origin

    monkeypatch.setattr(robots_gate_module, "_ROBOTS_CAPACITY", 1)
    a, b = Origin("http", "a.test", 80), Origin("http", "b.test", 80)
    with Frontier(tmp_path / "crawl.sqlite") as frontier, NIOFetcher(FetcherConfig()) as fetcher:
        frontier.add(["http://a.test/", "http://b.test/"])
        gate = RobotsGate("niofetcher", 3, 30.0, busy=lambda origin: False, stopping=threading.Event())
        gate.use(frontier, fetcher)
        for origin in (a, b):
            assert gate.rules(origin) is None  # nothing stored: the crawler would fetch it
            url = f"{origin}/robots.txt"
            body = b"User-agent: *\nDisallow: /private\n"
            gate.arrived(RobotsReply(origin, FetchResult(URLBean(url), url, url, status=200, body=body), 0),
                         frontier, fetcher)
        assert len(gate) == 1  # a was aged out when b's rules came
        rules = gate.rules(a)
        assert rules is not None and rules.refuses("http://a.test/private/x", "niofetcher") != ""
        assert rules.refuses("http://a.test/public", "niofetcher") == ""
        # Read back, the rules are good for what is left of their day, in memory too.
        assert time.monotonic() + ROBOTS_SECONDS - 60.0 < rules.expires <= time.monotonic() + ROBOTS_SECONDS


def test_rules_read_back_near_the_end_of_their_day_are_fetched_again_at_its_end(tmp_path: Path) -> None:
    from niofetcher import NIOFetcher
    from niofetcher.crawl.frontier import Frontier
    from niofetcher.crawl.robots_gate import RobotsGate
    from niofetcher.urls import Origin

    now = [1_700_000_000.0]
    origin = Origin("http", "a.test", 80)
    with Frontier(tmp_path / "crawl.sqlite", clock=lambda: now[0]) as frontier, \
            NIOFetcher(FetcherConfig()) as fetcher:
        frontier.add(["http://a.test/"])
        frontier.store_robots("http://a.test", 200, b"User-agent: *\nDisallow: /private\n")
        now[0] += ROBOTS_SECONDS - 0.2  # fetched a day less 0.2 s ago
        gate = RobotsGate("niofetcher", 3, 30.0, busy=lambda origin: True, stopping=threading.Event())
        gate.use(frontier, fetcher)
        rules = gate.rules(origin)
        assert rules is not None and rules.refuses("http://a.test/private/x", "niofetcher") != ""
        time.sleep(0.3)
        now[0] += 0.3
        assert gate.rules(origin) is None  # a day old, busy or not: robots.txt is fetched again


@pytest.mark.timeout(30)
def test_a_crawl_with_a_tiny_robots_table_still_obeys_every_host(
    tmp_path: Path, no_leaks: LeakBaseline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room for one origin's rules, a crawl of four hosts (pages linking round the ring, one
    connection) still fetches every page once and obeys every host's rules: a busy host is never
    aged out, and one that was has its answer read back from the frontier, so that each robots.txt
    is fetched once.  A resumed crawl reads them there too (the test above shows the read-back of
    an aged-out origin alone; this crawl ages few out)."""
    import niofetcher.crawl.robots_gate as robots_gate_module

    monkeypatch.setattr(robots_gate_module, "_ROBOTS_CAPACITY", 1)
    with TestSite(hosts=4, pages=40, robots_disallow=["/page/1"], max_seconds=30) as site:
        config = CrawlConfig(seeds=[site.base_urls[0]], db_path=str(tmp_path / "crawl.sqlite"),
                             parse_mode="thread", fetcher=FetcherConfig(max_connections=1))
        crawler = Crawler(config)
        summary = crawler.run()
        seen = requested(site)
        assert [seen[base + "robots.txt"] for base in site.base_urls] == [1, 1, 1, 1]
        pages = {url: n for url, n in seen.items() if "/robots" not in url}
        assert set(pages.values()) == {1} and not any("/page/1" in url for url in pages)
        assert len(crawler._robots) <= 4
        assert summary.counts["waiting"] == summary.counts["processing"] == 0
        # Resumed with two new seeds per host, one allowed and one not: no robots.txt is fetched
        # again, and the stored rules are obeyed.
        resumed = dataclasses.replace(config, seeds=[base + page for base in site.base_urls
                                                     for page in ("page/2?resumed", "page/1?resumed")])
        again = Crawler(resumed).run()
        seen_again = requested(site) - seen
    assert again.pages == 4
    assert set(seen_again) == {base + "page/2" for base in site.base_urls}  # the site counts paths
    assert {rows(tmp_path)[base + "page/1?resumed"] for base in site.base_urls} == {
        ("error", "disallowed by robots.txt")}


# -- one host's waits hold no other host back ----------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("max_depth", [None, 10], ids=["no-max-depth", "max-depth"])
def test_a_host_whose_robots_txt_must_be_retried_holds_no_other_host_back(
    tmp_path: Path, no_leaks: LeakBaseline, max_depth: int | None
) -> None:
    """The bad host's seed waits in memory for its robots.txt, retried 2 s later; the good host is
    crawled to its end meanwhile, its deeper layers included (they waited for that retry when a URL
    held for robots.txt counted in the breadth-first layer)."""
    with TestSite(hosts=1, pages=5, robots_unavailable=1, log_requests=True, max_seconds=60) as bad, \
            TestSite(hosts=1, pages=200, log_requests=True, max_seconds=60) as good:
        config = CrawlConfig(seeds=[bad.base_urls[0], good.base_urls[0]], db_path=str(tmp_path / "crawl.sqlite"),
                             parse_mode="thread", retry_delay=2.0, max_depth=max_depth)
        summary = Crawler(config).run()
        bad_log, good_log = bad.counters().log, good.counters().log
    assert summary.counts["done"] == 6 + 201
    robots_fetches = [at for at, path in bad_log if path == ROBOTS]
    assert len(robots_fetches) == 2
    assert good_log[-1][0] < robots_fetches[1], "the good host waited for the bad host's robots.txt"


@pytest.mark.timeout(60)
def test_a_host_with_a_crawl_delay_holds_no_other_host_back(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    """The slow host serves a page a second; the fast host is crawled to its end before the slow
    one's fourth page (a crawl in breadth-first layers made it wait for each of the slow layers)."""
    with TestSite(hosts=1, pages=8, links_per_page=8, robots_crawl_delay=1.0, log_requests=True,
                  max_seconds=60) as slow, TestSite(hosts=1, pages=300, log_requests=True, max_seconds=60) as fast:
        config = CrawlConfig(seeds=[slow.base_urls[0], fast.base_urls[0]], db_path=str(tmp_path / "crawl.sqlite"),
                             parse_mode="thread", fetcher=FetcherConfig(max_connections_per_host=4))
        summary = Crawler(config).run()
        slow_pages = [at for at, path in slow.counters().log if path != ROBOTS]
        fast_log = fast.counters().log
    assert summary.counts["done"] == 9 + 301
    assert fast_log[-1][0] < slow_pages[3], "the fast host waited for the slow host's pages"

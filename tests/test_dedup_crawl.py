"""Duplicate detection in a crawl (issue 29, item 2): ``CrawlConfig(dedup="exact" | "near")``.

Real crawls of the trap site (``niofetcher.testing.TrapSite``) on 127.0.0.1, counted by the server:

- endless pagination that repeats one page, and a soft 404 that answers any path with one page,
  stop at their first repeat: the later page is done with ``duplicate_of`` set (its row, its
  ``on_page``, its JSONL record) and its links are not followed; with the URL rules off and no
  duplicate detection (the negative control) the same crawl runs to its budget;
- the fingerprints outlive the run: a resumed crawl, and a second run on PostgreSQL (another
  worker, another process's memory), find a duplicate of a page done before;
- ``--dedup`` on the command line: the summary row and the records.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeServer
from rawserver import ConnInfo, Handler, http_response, read_request
from test_cli_crawl import crawl as cli_crawl
from test_cli_crawl import summary_rows

from niofetcher.crawl import CrawlConfig, CrawledPage, Crawler, CrawlSummary
from niofetcher.crawl.schedule import RevisitPolicy
from niofetcher.testing import TrapSite

pytest_plugins = ["pg_cluster"]

# The URL rules that would stop these traps without duplicate detection, off: only it stops them here.
NO_RULES: dict[str, Any] = {"max_url_length": None, "max_path_repeats": None, "strip_query_params": ()}
BUDGET = 120


def run(site: TrapSite, db: Path, seeds: list[str] | None = None, **options: Any) -> tuple[CrawlSummary, list[CrawledPage]]:
    seen: list[CrawledPage] = []
    config = CrawlConfig(seeds=seeds or [site.base_url], db_path=str(db), parse_mode="thread", **options)
    return Crawler(config, on_page=seen.append).run(), seen


def duplicates(db: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return dict(conn.execute("SELECT url, duplicate_of FROM urls WHERE duplicate_of IS NOT NULL").fetchall())


@pytest.mark.timeout(90)
@pytest.mark.parametrize("dedup", ["exact", "near"])
def test_pagination_and_soft_404s_stop_at_their_first_repeat(tmp_path: Path, dedup: str) -> None:
    with TrapSite(traps=["pagination", "soft404"]) as site:
        summary, seen = run(site, tmp_path / "on.db", max_pages=BUDGET, dedup=dedup, **NO_RULES)
        assert not summary.stopped and site.real_fetched() == set(site.real_urls())
        fetches = site.fetches()
        # /list?page=2 repeats /list: done as its duplicate, its link to ?page=3 not followed.  The
        # dead link's soft 404 is the first of its kind; its relative links answer the same page.
        assert fetches["pagination"] <= 2, fetches
        assert fetches["soft404"] <= 1 + 4, fetches  # the first soft 404 and the links on it, each a duplicate
        found = duplicates(tmp_path / "on.db")
        assert found and summary.duplicates == len(found)
        assert any("page=" in url for url in found)
        for url, original in found.items():
            assert original != url and original.startswith(site.base_url)
        told = {page.url: page.duplicate_of for page in seen if page.duplicate_of is not None}
        assert told == found  # on_page saw what the rows say


@pytest.mark.timeout(90)
def test_without_duplicate_detection_the_same_traps_run_to_the_budget(tmp_path: Path) -> None:
    with TrapSite(traps=["pagination", "soft404"]) as site:
        summary, _ = run(site, tmp_path / "off.db", max_pages=BUDGET, **NO_RULES)
        assert summary.stopped and summary.counts["done"] == BUDGET and summary.duplicates == 0
        fetches = site.fetches()
        assert fetches["pagination"] + fetches["soft404"] >= BUDGET - len(site.real_urls()) - 2, fetches
        assert duplicates(tmp_path / "off.db") == {}


@pytest.mark.timeout(60)
def test_a_resumed_crawl_finds_duplicates_of_pages_done_before(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    with TrapSite(traps=["soft404"]) as site:
        first = f"{site.base_url}no/such/page"
        summary, _ = run(site, db, seeds=[first], max_depth=0, dedup="exact")
        assert summary.counts["done"] == 1 and summary.duplicates == 0
        second = f"{site.base_url}another/missing/one"
        summary, seen = run(site, db, seeds=[second], max_depth=0, dedup="exact")
        assert summary.duplicates == 1 and [page.duplicate_of for page in seen] == [first]
        assert duplicates(db) == {second: first}


@pytest.mark.timeout(90)
def test_on_postgresql_another_worker_finds_duplicates_of_pages_done_before(postgres_dsn: str) -> None:
    options: dict[str, Any] = {"frontier": postgres_dsn, "crawl_name": "dedup_pg", "parse_mode": "thread",
                               "max_depth": 0, "dedup": "near"}
    with TrapSite(traps=["soft404"]) as site:
        first, second = f"{site.base_url}gone", f"{site.base_url}also/gone"
        assert Crawler(CrawlConfig(seeds=[first], **options)).run().counts["done"] == 1
        seen: list[CrawledPage] = []
        summary = Crawler(CrawlConfig(seeds=[second], **options), on_page=seen.append).run()
        assert summary.duplicates == 1 and [page.duplicate_of for page in seen] == [first]


@pytest.mark.timeout(90)
def test_the_command_line_counts_duplicates_and_records_say_which(tmp_path: Path) -> None:
    out = tmp_path / "pages.jsonl"
    with TrapSite(traps=["pagination"]) as site:
        done = cli_crawl(site.base_url, tmp_path / "c.db", "--out", str(out), "--dedup", "near",
                         "--max-pages", str(BUDGET))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    marked = {record["url"]: record["duplicate_of"] for record in records if record["duplicate_of"]}
    assert marked and all(original.endswith("/list") for original in marked.values())
    assert all("duplicate_of" in record for record in records)
    assert summary_rows(done.stdout)["duplicates this run"] == str(len(marked))


def home_with_new_links() -> Handler:
    """``/`` with the same words at every visit, a comment that changes (so its bytes do) and a new
    link each time (``/x1``, ``/x2``, ...); every ``/x`` page alike."""
    visits = itertools.count(1)

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        while (head := read_request(sock, info)) is not None:
            if head.startswith(b"GET / "):
                n = next(visits)
                body = b"<html><body><!-- %d --><p>home page words</p><a href='/x%d'>x</a></body></html>" % (n, n)
            else:
                body = b"<html><body><p>page x</p></body></html>"
            sock.sendall(http_response(200, body, [("Content-Type", "text/html")]))

    return handler


@pytest.mark.timeout(30)
def test_a_revisit_whose_text_is_unchanged_is_no_duplicate_of_itself(tmp_path: Path, raw_server: MakeServer) -> None:
    """Revisits of ``/`` find its own earlier visit's fingerprint: that is "unchanged", and the new
    links it carries are followed (marked a duplicate of itself, only /x1 was ever crawled)."""
    srv = raw_server(home_with_new_links(), max_seconds=20)
    home = srv.url("/")
    seen: list[tuple[str, str | None]] = []
    config = CrawlConfig(seeds=[home], db_path=str(tmp_path / "crawl.sqlite"), dedup="exact", parse_mode="thread",
                         keep_running=True, revisit=RevisitPolicy(interval=0.3, min_interval=0.3, max_interval=0.3,
                                                                  adaptive=False))
    crawler = Crawler(config, on_page=lambda page: seen.append((page.url, page.duplicate_of)))
    stopper = threading.Timer(2.0, crawler.stop)
    stopper.start()
    try:
        crawler.run()
    finally:
        stopper.cancel()
    visits_of_home = [duplicate_of for url, duplicate_of in seen if url == home]
    assert len(visits_of_home) >= 3 and set(visits_of_home) == {None}, seen
    assert len({url for url, _ in seen if "/x" in url}) >= 2, seen


TWINS = {
    b"/": b"<html><body><a href='/a'>a</a> <a href='/b'>b</a></body></html>",
    b"/a": b"<html><body><p>the very same words on both pages</p><a href='/c'>next</a></body></html>",
    b"/b": b"<html><body><p>the very same words on both pages</p><a href='/d'>next</a></body></html>",
    b"/c": b"<html><body><p>page c</p></body></html>",
    b"/d": b"<html><body><p>page d</p></body></html>",
}


def twins(sock: socket.socket, info: ConnInfo) -> None:
    """/a and /b of the same text; /b answers 0.5 s late, after /a is through on_page."""
    while (head := read_request(sock, info)) is not None:
        path = head.split(b" ")[1]
        if path == b"/b" and not info.sleep(0.5):
            return
        body = TWINS.get(path)
        sock.sendall(http_response(200, body, [("Content-Type", "text/html")]) if body is not None
                     else http_response(404, b""))


@pytest.mark.timeout(30)
def test_a_page_on_page_refused_is_no_original(tmp_path: Path, raw_server: MakeServer) -> None:
    """/a is filed as an original when parsed, then its on_page raises and it ends 'error': /b, of
    its text, is the original then, not a duplicate of a page that is not done (whose links, and
    its own, would be lost)."""
    srv = raw_server(twins, max_seconds=20)

    def refuse_a(page: CrawledPage) -> None:
        if page.url.endswith("/a"):
            raise RuntimeError("on_page refuses /a")

    config = CrawlConfig(seeds=[srv.url("/")], db_path=str(tmp_path / "crawl.sqlite"), dedup="exact",
                         parse_mode="thread")
    summary = Crawler(config, on_page=refuse_a).run()
    with contextlib.closing(sqlite3.connect(tmp_path / "crawl.sqlite")) as conn:
        rows = {url.removeprefix(srv.url("/")): (state, duplicate_of)
                for url, state, duplicate_of in conn.execute("SELECT url, state, duplicate_of FROM urls")}
    assert rows["a"] == ("error", None)
    assert rows["b"] == ("done", None) and rows["d"] == ("done", None), rows
    assert summary.duplicates == 0

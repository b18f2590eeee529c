"""A graceful stop is bounded: ``Crawler.stop(grace)`` and ``crawl --stop-grace S`` (issue 24, item 7).

- A stop lets fetches in flight finish for at most the grace; those still in flight then are
  cancelled and go back to 'waiting' with their attempt not counted, so a rerun fetches them as
  if nothing had happened.  A robots.txt fetch in flight is held to the same bound.
- ``stop()`` without a grace waits for them as before: the negative control, in which the hanging
  fetch ends only by its read timeout, and that attempt counts.
- SIGTERM to ``niofetcher crawl`` (as Docker and systemd send it, and kill 10 s or 90 s later):
  the process is gone within the grace and a few seconds, exit status 0.

The hanging URL is a raw loopback server that reads the request and never answers; the frontier
is read with plain sqlite3.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from rawserver import ConnInfo, Handler, RawServer, http_response, read_request, wait_for_eof
from test_cli_crawl import crawl, end_of, start_crawl
from test_crawler import crawl_config, frontier_rows

import niofetcher.crawl.parsing as parsing_module
from niofetcher import FetcherConfig
from niofetcher.crawl import Crawler, CrawlSummary
from niofetcher.crawl.parsing import ParseOutput
from niofetcher.testing import TestSite

#: The read timeout of every crawl here: far longer than any grace, so a stop that waited for it shows.
LONG_READ_TIMEOUT = 30.0
#: What a stop may take beyond its grace: winding the crawl down (and, for the CLI, exiting), with a wide margin.
MARGIN = 8.0

_HOME = http_response(200, b'<html><body><a href="/slow">slow</a></body></html>', [("Content-Type", "text/html")])
_SLOW = http_response(200, b"<html><body>at last</body></html>", [("Content-Type", "text/html")])
_MISSING = http_response(404, b"not here", [("Content-Type", "text/plain")])


def hanging_once(path: bytes) -> Handler:
    """A site of ``/`` (which links to ``/slow``), ``/slow`` and a 404 for the rest, robots.txt
    included, whose ``path`` never answers the first time it is asked for (the request is read, the
    connection held open until the client closes it), and answers at once after that."""
    hung = threading.Event()

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        while (head := read_request(sock, info)) is not None:
            asked = head.split(b" ", 2)[1]
            if asked == path and not hung.is_set():
                hung.set()
                wait_for_eof(sock, info)
                return
            sock.sendall({b"/": _HOME, b"/slow": _SLOW}.get(asked, _MISSING))

    return handler


@pytest.fixture
def hanging_site() -> Iterator[Callable[[bytes], RawServer]]:
    """A factory: ``hanging_site(path)`` is a started :func:`hanging_once` server; stopped at teardown."""
    servers: list[RawServer] = []

    def make(path: bytes) -> RawServer:
        server = RawServer(hanging_once(path))
        servers.append(server)
        return server.start()

    yield make
    for server in servers:
        server.stop()


def asked_for(server: RawServer, path: bytes) -> bool:
    return any(head.split(b" ", 2)[1] == path for head in list(server.requests))


def run_in_thread(crawler: Crawler) -> tuple[threading.Thread, dict[str, CrawlSummary]]:
    outcome: dict[str, CrawlSummary] = {}
    thread = threading.Thread(target=lambda: outcome.update(summary=crawler.run()), name="test-crawl")
    thread.start()
    return thread, outcome


# -- the library: Crawler.stop(grace) -------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hanging", [b"/slow", b"/robots.txt"], ids=["a-page", "robots.txt"])
def test_stop_with_a_grace_gives_back_what_is_still_in_flight_without_counting_an_attempt(
    tmp_path: Path, hanging_site: Callable[[bytes], RawServer], hanging: bytes
) -> None:
    server = hanging_site(hanging)
    config = crawl_config(tmp_path, [server.url("/")], fetcher=FetcherConfig(read_timeout=LONG_READ_TIMEOUT))
    crawler = Crawler(config)
    thread, outcome = run_in_thread(crawler)
    try:
        assert wait_until(lambda: asked_for(server, hanging), timeout=30)
        grace = 0.5
        stopped_at = time.monotonic()
        crawler.stop(grace=grace)
        thread.join(grace + MARGIN)
        took = time.monotonic() - stopped_at
    finally:
        crawler.stop(grace=0)
        thread.join()
    assert took < grace + MARGIN, f"the stop took {took:.1f} s"
    summary = outcome["summary"]
    assert summary.stopped and summary.counts["processing"] == 0 and summary.errors == {}
    rows = frontier_rows(config.db_path)
    waiting = server.url("/slow") if hanging == b"/slow" else server.url("/")
    assert (rows[waiting]["state"], rows[waiting]["attempts"], rows[waiting]["error"]) == ("waiting", 0, None)

    resumed = Crawler(crawl_config(tmp_path, [server.url("/")])).run()
    assert resumed.counts == {"waiting": 0, "processing": 0, "done": 2, "error": 0}


@pytest.mark.timeout(60)
def test_stop_without_a_grace_waits_for_the_fetch_in_flight_until_its_read_timeout(
    tmp_path: Path, hanging_site: Callable[[bytes], RawServer]
) -> None:
    """The negative control: the same stop without a grace waits for the fetch, which ends only by
    its read timeout -- an attempt of the URL's, counted."""
    server = hanging_site(b"/slow")
    config = crawl_config(tmp_path, [server.url("/")], fetcher=FetcherConfig(read_timeout=1.0))
    crawler = Crawler(config)
    thread, outcome = run_in_thread(crawler)
    try:
        assert wait_until(lambda: asked_for(server, b"/slow"), timeout=30)
        crawler.stop()
    finally:
        thread.join(30)
        crawler.stop(grace=0)
        thread.join()
    assert outcome["summary"].stopped
    slow = frontier_rows(config.db_path)[server.url("/slow")]
    assert (slow["state"], slow["attempts"]) == ("waiting", 1)
    assert slow["error"].startswith("read_timeout")


@pytest.mark.timeout(60)
def test_a_queue_of_parse_jobs_does_not_hold_a_stop_whose_grace_ran_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parsing slower than fetching (bs4 on real pages, a broad crawl) queues pages for the parse
    workers; once the grace is over those not yet in a worker are given back, not parsed first.
    Counted, not timed: the jobs parsed after the stop are those the workers already held."""
    parse = parsing_module.parse_pages
    jobs = {"started": 0, "submitted": 0}
    submit = parsing_module.ParseExecutor.submit

    def slow_parse(*args: Any) -> list[ParseOutput]:
        jobs["started"] += 1
        time.sleep(0.25)  # a job of large real pages
        return parse(*args)

    def counted_submit(self: parsing_module.ParseExecutor, *args: Any, **kwargs: Any) -> None:
        jobs["submitted"] += 1
        submit(self, *args, **kwargs)

    monkeypatch.setattr(parsing_module, "parse_pages", slow_parse)
    monkeypatch.setattr(parsing_module.ParseExecutor, "submit", counted_submit)
    with TestSite(hosts=2, pages=400, max_seconds=60) as site:
        config = crawl_config(tmp_path, [site.base_urls[0]], fetcher=FetcherConfig(max_connections_per_host=8))
        crawler = Crawler(config)
        thread, outcome = run_in_thread(crawler)
        try:
            assert wait_until(lambda: jobs["submitted"] - jobs["started"] > 6 * config.parse_workers, timeout=30)
            crawler.stop(grace=0)
            started_at_stop = jobs["started"]
            thread.join(MARGIN)
        finally:
            thread.join()
    queued = jobs["submitted"] - started_at_stop
    # The workers finish the job each holds (and may take one more before the shutdown reaches them);
    # parsing the whole queue first is what held the stop.
    assert jobs["started"] - started_at_stop <= 2 * config.parse_workers < queued
    summary = outcome["summary"]
    assert summary.stopped and summary.counts["processing"] == 0 and summary.errors == {}
    assert {row["attempts"] for row in frontier_rows(config.db_path).values() if row["state"] == "waiting"} == {0}


@pytest.mark.timeout(60)
def test_a_queue_of_pages_for_a_slow_on_page_does_not_hold_a_stop_whose_grace_ran_out(tmp_path: Path) -> None:
    """Once the grace is over, only the on_page calls already running are waited for: the batches
    queued for the delivery threads are given back, not shown first.  Counted, not timed."""
    calls = {"n": 0}
    lock = threading.Lock()

    def slow_on_page(page: object) -> None:
        with lock:
            calls["n"] += 1
        time.sleep(0.1)  # an embedding program's slow step: a database write, an upload

    with TestSite(hosts=2, pages=400, max_seconds=60) as site:
        config = crawl_config(tmp_path, [site.base_urls[0]], fetcher=FetcherConfig(max_connections_per_host=8))
        crawler = Crawler(config, on_page=slow_on_page)
        thread, outcome = run_in_thread(crawler)
        try:
            # Pages fetched and parsed far faster than on_page takes them: batches queue up.
            assert wait_until(lambda: site.counters().requests > calls["n"] + 50, timeout=30)
            crawler.stop(grace=0)
            shown_at_stop = calls["n"]
            thread.join(MARGIN)
        finally:
            thread.join()
    fetched = site.counters().requests
    # The calls running at the stop end; another may start before the stop reaches its thread.
    assert calls["n"] - shown_at_stop <= 2 * config.parse_workers < fetched - shown_at_stop
    summary = outcome["summary"]
    assert summary.stopped and summary.counts["processing"] == 0
    assert {row["attempts"] for row in frontier_rows(config.db_path).values() if row["state"] == "waiting"} == {0}


@pytest.mark.timeout(10)
def test_stop_refuses_a_grace_that_is_no_number_of_seconds(tmp_path: Path) -> None:
    crawler = Crawler(crawl_config(tmp_path, ["http://127.0.0.1:9/"]))
    for grace in (-1.0, float("nan"), True, "5"):
        with pytest.raises(ValueError, match="grace must be"):
            crawler.stop(grace=grace)  # type: ignore[arg-type]


# -- the command line: SIGTERM and --stop-grace ---------------------------------------------------


@pytest.mark.timeout(90)
def test_sigterm_ends_the_crawl_within_its_stop_grace_and_a_rerun_fetches_what_was_in_flight(
    tmp_path: Path, hanging_site: Callable[[bytes], RawServer]
) -> None:
    server = hanging_site(b"/slow")
    db = tmp_path / "crawl.sqlite"
    grace = 1.0
    child = start_crawl(server.url("/"), db, "--progress", "none", "--stop-grace", str(grace),
                        "--read-timeout", str(LONG_READ_TIMEOUT))
    assert wait_until(lambda: asked_for(server, b"/slow") or child.poll() is not None, timeout=30)
    stopped_at = time.monotonic()
    child.send_signal(signal.SIGTERM)
    stdout, stderr = end_of(child, timeout=grace + MARGIN)
    took = time.monotonic() - stopped_at
    assert child.returncode == 0, stdout + stderr
    assert took < grace + MARGIN, f"SIGTERM took {took:.1f} s"
    assert "crawl stopped" in stdout and "Traceback" not in stderr
    slow = frontier_rows(str(db))[server.url("/slow")]
    assert (slow["state"], slow["attempts"], slow["error"]) == ("waiting", 0, None)

    rerun = crawl(server.url("/"), db)
    assert rerun.returncode == 0 and "crawl complete" in rerun.stdout, rerun.stdout + rerun.stderr
    slow = frontier_rows(str(db))[server.url("/slow")]
    assert (slow["state"], slow["attempts"], slow["status"]) == ("done", 1, 200)

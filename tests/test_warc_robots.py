"""robots.txt in the crawl's WARC file, exactly once (issue 25, item 4; docs/cli.md, "Outputs").

Every fetch of robots.txt that got a response is a capture, as Heritrix
archives it: a response record and a request record pointing at it, with
WARC-IP-Address and WARC-Warcinfo-ID (its run's) -- each redirect hop, each attempt that
answered 503 before the one that settled it, a 404 too.  ``--out`` gets no
line for it.  A crawl that reads a stored answer back fetches nothing and
writes no record.

Exactly once: the records of a fetch are written and fsynced before its
answer is stored in the frontier, in the transaction that stores the files'
lengths.  So a full disk under the WARC leaves no answer stored, in SQLite or
PostgreSQL (the resumed crawl fetches robots.txt again and archives that
fetch once), and a crawl killed just after that transaction keeps both (the
resumed crawl reads the answer back and adds nothing).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import LeakBaseline, sigkill_after_requests
from rawserver import RawServer, http_response, routes
from test_warc import assert_warcio_checks_and_indexes, niofetcher, records, runs
from warcio.recordloader import ArcWarcRecord

from niofetcher import FetcherConfig, FetchResult
from niofetcher.cli.output import PageWriter
from niofetcher.crawl import CrawlConfig, Crawler
from niofetcher.testing import TestSite

pytest_plugins = ["pg_cluster"]


def robots_exchanges(warc: Path) -> list[tuple[str, str]]:
    """(WARC-Target-URI, status) of each robots.txt response record, in the file's order, each checked:
    its request record points at it, and both carry the address and the ID of their run's warcinfo."""
    read = [record for _, rest in runs(warc) for record in rest]
    assert all(header(record, "WARC-IP-Address") == "127.0.0.1" for record in read)
    concurrent = Counter(header(record, "WARC-Concurrent-To") for record in read if record.rec_type == "request")
    exchanges = []
    for record in read:
        uri = header(record, "WARC-Target-URI")
        if record.rec_type == "response" and "/robots" in uri:
            assert concurrent[header(record, "WARC-Record-ID")] == 1, f"{uri}: not one request record"
            exchanges.append((uri, record.http_headers.get_statuscode()))
    return exchanges


def header(record: ArcWarcRecord, name: str) -> str:
    value: str = record.rec_headers.get_header(name)
    return value


def robots_requests(server: RawServer) -> int:
    return sum(head.startswith(b"GET /robots.txt ") for head in server.requests)


def stored_robots(db: Path) -> list[int]:
    """The status of each robots.txt answer that the SQLite frontier keeps."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [row[0] for row in conn.execute("SELECT robots_status FROM hosts WHERE robots_at IS NOT NULL")]


@pytest.mark.timeout(120)
def test_every_robots_txt_fetch_with_a_response_is_a_pair_and_a_resumed_crawl_adds_none(tmp_path: Path) -> None:
    """Three hosts: robots.txt answers 503 then its rules, redirects once, is a 404.  Stopped by
    --max-pages after the seeds, then resumed: the resumed crawl reads the three answers back."""
    db, warc, out = tmp_path / "crawl.sqlite", tmp_path / "crawl.warc.gz", tmp_path / "pages.jsonl"
    page = http_response(200, b"<html><body>no links</body></html>", [("Content-Type", "text/html")])
    with TestSite(hosts=1, pages=3, robots_unavailable=1, max_seconds=90) as retried, \
            TestSite(hosts=1, pages=3, robots_redirects=1, max_seconds=90) as redirected, \
            RawServer(routes({b"/": page})) as missing:
        seeds = [retried.base_urls[0], redirected.base_urls[0], missing.url("/")]

        def crawl(*more: str) -> None:
            done = niofetcher("crawl", *seeds, "--db", str(db), "--warc", str(warc), "--out", str(out),
                              "--progress", "none", *more)
            assert done.returncode == 0, done.stderr

        crawl("--max-pages", "3")
        first = robots_exchanges(warc)
        served = [retried.counters().requests, redirected.counters().requests, robots_requests(missing)]
        crawl()
        resumed = robots_exchanges(warc)
        assert [retried.counters().requests, redirected.counters().requests] == [s + 3 for s in served[:2]]
        assert robots_requests(missing) == served[2] == 1
    assert Counter(first) == Counter([
        (retried.base_urls[0] + "robots.txt", "503"), (retried.base_urls[0] + "robots.txt", "200"),
        (redirected.base_urls[0] + "robots.txt", "301"), (redirected.base_urls[0] + "robots/0/1", "200"),
        (missing.url("/robots.txt"), "404"),
    ])
    assert resumed == first  # the answers were read back: nothing fetched, nothing archived
    assert sorted(stored_robots(db)) == [200, 200, 404]
    kinds = [record.rec_type for record, _ in records(warc)]
    assert kinds.count("response") == kinds.count("request") == 5 + 9  # robots.txt, and the 9 pages
    assert kinds.count("warcinfo") == len(runs(warc)) == 2  # the resumed crawl's pages follow its own
    assert_warcio_checks_and_indexes(warc, len(kinds))
    assert "robots" not in out.read_text()  # --out: one line per URL of the crawl, and robots.txt is none


class FullDiskForRobots(PageWriter):
    """A PageWriter whose disk is full when robots.txt's records are written, the first time."""

    failed = False

    def commit_robots(self, fetches: Sequence[FetchResult]) -> dict[str, int]:
        if not self.failed:
            self.failed = True
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "crawl.warc")
        return super().commit_robots(fetches)


@dataclass
class Backend:
    """Where a test crawl keeps its frontier, and how the test reads the robots.txt answers stored there."""

    config: dict[str, Any]  # CrawlConfig's arguments that name it
    stored: Callable[[], list[int]]  # the status of each robots.txt answer stored


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        db = tmp_path / "crawl.sqlite"
        return Backend({"db_path": str(db)}, lambda: stored_robots(db))
    import psycopg

    dsn: str = request.getfixturevalue("postgres_dsn")
    crawl = f"warc_robots_{uuid.uuid4().hex}"  # a schema of its own in the session's cluster

    def stored() -> list[int]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {crawl}")
            return [row[0] for row in conn.execute("SELECT robots_status FROM hosts WHERE robots_at IS NOT NULL")]

    return Backend({"frontier": dsn, "crawl_name": crawl}, stored)


@pytest.mark.timeout(60)
def test_a_full_disk_under_robots_txt_records_stores_no_answer_and_the_resume_archives_it_once(
    tmp_path: Path, backend: Backend, no_leaks: LeakBaseline
) -> None:
    warc = tmp_path / "crawl.warc"
    per_worker = "frontier" in backend.config
    with TestSite(hosts=1, pages=5, log_requests=True, max_seconds=50) as site:
        config = CrawlConfig(seeds=[site.base_urls[0]], parse_mode="thread",
                             fetcher=FetcherConfig(record_exchanges=True), **backend.config)
        with FullDiskForRobots(None, str(warc), "t", per_worker=per_worker) as failing, \
                pytest.raises(OSError, match="No space"):
            Crawler(config, output=failing).run()
        assert backend.stored() == []  # its records are not in the file: neither is the answer kept
        with PageWriter(None, str(warc), "t", per_worker=per_worker) as writer:
            Crawler(config, output=writer).run()
        assert backend.stored() == [200]
        fetched = [path for _, path in site.counters().log if path == "/robots.txt"]
    assert len(fetched) == 2  # fetched again by the resumed crawl
    assert robots_exchanges(warc) == [(site.base_urls[0] + "robots.txt", "200")]
    # One warcinfo: the run whose first write failed left none behind.
    assert_warcio_checks_and_indexes(warc, 1 + 2 * (1 + 6))


# The child crawls, and kills itself as soon as the transaction that stores a robots.txt answer commits.
KILLED_AFTER_ROBOTS = textwrap.dedent("""
    import contextlib, os, signal, sys
    from niofetcher import FetcherConfig
    from niofetcher.cli.output import PageWriter
    from niofetcher.crawl import CrawlConfig, Crawler
    from niofetcher.crawl.frontier import Frontier

    seed, db, warc = sys.argv[1:]
    stored, depth = [], [0]
    store_robots, batch = Frontier.store_robots, Frontier.batch

    def storing(self, *args):
        stored.append(args)
        store_robots(self, *args)
        self.checkpoint()  # commits as the batch ends, not at the frontier's next group commit

    @contextlib.contextmanager
    def killing_batch(self):
        depth[0] += 1
        try:
            with batch(self):
                yield
        finally:
            depth[0] -= 1
        if stored and not depth[0]:  # committed: killed before anything else is
            os.kill(os.getpid(), signal.SIGKILL)

    Frontier.store_robots, Frontier.batch = storing, killing_batch
    config = CrawlConfig(seeds=[seed], db_path=db, parse_mode="thread", fetcher=FetcherConfig(record_exchanges=True))
    with PageWriter(None, warc, "t") as writer:
        Crawler(config, output=writer).run()
""")


@pytest.mark.timeout(60)
def test_a_crawl_killed_as_it_stored_a_robots_txt_answer_keeps_its_records_once(tmp_path: Path) -> None:
    db, warc = tmp_path / "crawl.sqlite", tmp_path / "crawl.warc"
    with TestSite(hosts=1, pages=5, robots_redirects=1, log_requests=True, max_seconds=50) as site:
        killed = subprocess.run([sys.executable, "-c", KILLED_AFTER_ROBOTS, site.base_urls[0], str(db), str(warc)],
                                capture_output=True, timeout=30, check=False)
        assert killed.returncode == -9, killed.stderr.decode()
        assert stored_robots(db) == [200]
        config = CrawlConfig(seeds=[site.base_urls[0]], db_path=str(db), parse_mode="thread",
                             fetcher=FetcherConfig(record_exchanges=True))
        with PageWriter(None, str(warc), "t") as writer:
            Crawler(config, output=writer).run()
        fetched = [path for _, path in site.counters().log if path.startswith("/robots")]
    assert fetched == ["/robots.txt", "/robots/0/1"]  # once: the resumed crawl read the answer back
    base = site.base_urls[0]
    assert robots_exchanges(warc) == [(base + "robots.txt", "301"), (base + "robots/0/1", "200")]
    # The killed run's robots.txt pairs after its warcinfo, the resumed run's pages after its own.
    assert [len(rest) for _, rest in runs(warc)] == [2 * 2, 2 * 6]
    assert_warcio_checks_and_indexes(warc, 2 + 2 * (2 + 6))


@pytest.mark.timeout(90)
def test_a_crawl_of_many_hosts_sigkilled_twice_and_resumed_archives_each_answer_stored_once(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    """Killed wherever it is: each host's robots.txt answer, stored once, has one record; a hop may have
    been fetched again by a resume (a new capture, once each), never archived more often than served."""
    db, warc = tmp_path / "crawl.sqlite", tmp_path / "crawl.warc.gz"
    args = ["--db", str(db), "--warc", str(warc), "--progress", "none"]
    with TestSite(hosts=8, pages=40, delay=0.005, robots_redirects=1, log_requests=True, max_seconds=80) as site:
        seed = site.base_urls[0]
        for kill_at in (60, 180):
            child = subprocess.Popen([sys.executable, "-m", "niofetcher", "crawl", seed, *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            sigkill_after_requests(child, lambda: site.counters().requests, kill_at)
        finished = niofetcher("crawl", seed, *args)
        assert finished.returncode == 0, finished.stderr
        served = Counter(base + path.lstrip("/") for base, port in zip(site.base_urls, site.ports, strict=True)
                         for _, path in site.counters(port).log if path.startswith("/robots"))
    assert stored_robots(db) == [200] * len(site.base_urls)
    archived = Counter(uri for uri, _ in robots_exchanges(warc))
    assert [archived[base + f"robots/{j}/1"] for j, base in enumerate(site.base_urls)] == [1] * len(site.base_urls)
    assert archived.keys() == served.keys() and all(archived[uri] <= served[uri] for uri in served)
    kinds = [record.rec_type for record, _ in records(warc)]
    assert_warcio_checks_and_indexes(warc, len(kinds))

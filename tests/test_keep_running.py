"""A crawl that keeps running (issue 27): ``CrawlConfig(keep_running=True)``, ``crawl --keep-running``.

Real crawls of :class:`~test_revisits.KeptSite` on 127.0.0.1 with fixed intervals of a fraction of a
second: the run sleeps until the next URL falls due, revisits it with a conditional GET, follows the
new links of a page that changed while it ran, and ends only when stopped.  What is asserted is
what the site saw (each request and when it was answered) and what the crawl recorded; waits are
bounded by deadlines, nothing is timed.

- a kept run fetches each page again and again, never twice within one interval, and a page changed
  while it runs is parsed in it, its new link followed;
- stop() ends it while it sleeps, and a run without keep_running ends by itself (the control);
- on PostgreSQL, the same;
- stopped by SIGKILL or SIGTERM and resumed (on PostgreSQL by a new worker), each URL has one
  ``--out`` record and one WARC capture per visit the frontier counts;
- the command line: SIGTERM ends ``crawl --keep-running`` with one ``--out`` record per visit;
  ``--keep-running`` without ``--revisit`` is a usage error, as keep_running without a policy is.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cli_crawl import crawl as cli_crawl
from test_cli_crawl import warc_records
from test_revisits import KeptSite, Request, site_of

from niofetcher.crawl import CrawlConfig, CrawledPage, Crawler, CrawlSummary
from niofetcher.crawl.schedule import RevisitPolicy

pytest_plugins = ["pg_cluster"]
pytestmark = pytest.mark.timeout(60)

INTERVAL = 0.3
KEPT = RevisitPolicy(interval=INTERVAL, min_interval=INTERVAL, max_interval=INTERVAL, adaptive=False)


def wait_for(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the crawl did not get there in time"
        time.sleep(0.02)


@contextlib.contextmanager
def kept_run(config: CrawlConfig, seen: list[CrawledPage]) -> Iterator[tuple[Crawler, list[CrawlSummary]]]:
    """A Crawler running in a thread of its own; stopped and joined on the way out."""
    crawler = Crawler(config, on_page=seen.append)
    ended: list[CrawlSummary] = []
    thread = threading.Thread(target=lambda: ended.append(crawler.run()), daemon=True)
    thread.start()
    try:
        yield crawler, ended
    finally:
        crawler.stop()
        thread.join(timeout=20)
        assert not thread.is_alive(), "stop() did not end a kept run"


def visits(site: KeptSite) -> dict[str, list[Request]]:
    by_path: dict[str, list[Request]] = {}
    for request in site.served():
        by_path.setdefault(request.path, []).append(request)
    return by_path


def assert_never_twice_in_one_interval(site: KeptSite) -> None:
    """A page is done when its answer has come; it is due INTERVAL after that, never before."""
    for path, requests in visits(site).items():
        for before, after in itertools.pairwise(requests):
            assert after.at - before.at >= INTERVAL, (path, [r.at for r in requests])


def test_a_kept_run_revisits_as_pages_fall_due_and_follows_what_changed(tmp_path: Path) -> None:
    with site_of().running() as site:
        seen: list[CrawledPage] = []
        config = CrawlConfig(seeds=[site.base_url], db_path=str(tmp_path / "crawl.db"), parse_mode="thread",
                             revisit=KEPT, keep_running=True)
        with kept_run(config, seen) as (_, ended):
            wait_for(lambda: all(len(visits(site).get(path, ())) >= 3 for path in ("/", "/a", "/b")))
            assert not ended  # still running: nothing waits, and it has not ended
            # Conditional GETs, answered 304: unchanged, not parsed.
            assert {r.status for r in visits(site)["/a"][1:]} == {304}
            site.pages["/c"] = "<html><body>new</body></html>"
            site.change("/a", '<html><body><a href="/c">c</a></body></html>')
            wait_for(lambda: "/c" in visits(site))
        (summary,) = ended
        assert summary.counts["processing"] == 0 and summary.errors == {}
        assert_never_twice_in_one_interval(site)
        changed = [page for page in seen if page.url.endswith("/a") and page.changed and page.result.status == 200]
        assert len(changed) == 2  # the first visit and the one that found it changed
        assert changed[1].links is not None and changed[1].links.links == [site.base_url + "c"]
        assert sum(page.url.endswith("/c") for page in seen) >= 1


def test_stop_ends_a_kept_run_that_sleeps_and_a_plain_run_ends_by_itself(tmp_path: Path) -> None:
    with site_of().running() as site:
        seen: list[CrawledPage] = []
        hourly = RevisitPolicy(interval=3600.0, min_interval=3600.0, max_interval=3600.0)
        config = CrawlConfig(seeds=[site.base_url], db_path=str(tmp_path / "kept.db"), parse_mode="thread",
                             revisit=hourly, keep_running=True)
        with kept_run(config, seen) as (_, ended):
            wait_for(lambda: len(seen) == 3)
            time.sleep(1.5)  # past the first pass: asleep until a URL falls due in an hour
            assert not ended
        assert ended[0].counts["done"] == 3 and ended[0].next_due is not None
        # The control: the same crawl without keep_running ends when the pass is over.
        plain = Crawler(CrawlConfig(seeds=[site.base_url], db_path=str(tmp_path / "plain.db"),
                                    parse_mode="thread", revisit=hourly)).run()
        assert plain.counts["done"] == 3 and not plain.stopped


def test_a_kept_run_on_postgresql(postgres_dsn: str) -> None:
    with site_of().running() as site:
        seen: list[CrawledPage] = []
        config = CrawlConfig(seeds=[site.base_url], frontier=postgres_dsn,
                             crawl_name=f"kept_{int(time.time() * 1000)}", parse_mode="thread",
                             revisit=KEPT, keep_running=True)
        with kept_run(config, seen):
            wait_for(lambda: all(len(visits(site).get(path, ())) >= 3 for path in ("/", "/a", "/b")))
        assert_never_twice_in_one_interval(site)
        assert [page.changed for page in seen[:3]] == [True] * 3 and not any(page.changed for page in seen[3:])


def test_sigterm_ends_crawl_keep_running_with_one_record_per_visit(tmp_path: Path) -> None:
    db, out = tmp_path / "crawl.db", tmp_path / "pages.jsonl"
    with site_of().running() as site:
        returncode, stdout, stderr = kept_crawl(site, ["--db", str(db), "--out", str(out)], 9, signal.SIGTERM)
        assert returncode == 0, stderr
        records: list[dict[str, Any]] = [json.loads(line) for line in out.read_text().splitlines()]
        # Every visit the site answered, and no other, has its record: one per visit.
        assert Counter(record["url"] for record in records) == Counter(
            site.base_url + request.path[1:] for request in site.served())
        assert [record["changed"] for record in records[:3]] == [True] * 3
        assert {record["status"] for record in records[3:]} == {304}
        assert "done" in stdout


def kept_crawl(site: KeptSite, options: list[str], served: int, signum: int) -> tuple[int, str, str]:
    """``crawl --keep-running`` of ``site`` with ``options``, sent ``signum`` once the site has served
    ``served`` page requests in all: its exit status, standard output and standard error."""
    command = [sys.executable, "-m", "niofetcher", "crawl", site.base_url, *options, "--progress", "none",
               "--revisit", f"{INTERVAL}s", "--fixed-revisit", "--keep-running"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(site.served()) >= served)
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, stdout, stderr


@pytest.mark.parametrize(("store", "signum"), [("sqlite", signal.SIGKILL), ("sqlite", signal.SIGTERM),
                                               ("postgres", signal.SIGKILL)])
def test_after_any_stop_and_a_resume_each_visit_has_one_record_in_out_and_warc(
        tmp_path: Path, request: pytest.FixtureRequest, store: str, signum: int) -> None:
    """A kept crawl stopped (SIGKILL: nothing flushed; SIGTERM: graceful) after some visits, then
    resumed -- on PostgreSQL by a new worker of the crawl -- has, for each URL, as many ``--out``
    records and WARC captures (a response or a revisit record; robots.txt's are the crawl's own) as
    the frontier counts visits of it: none lost, none twice."""
    out, warc = tmp_path / "pages.jsonl", tmp_path / "crawl.warc"
    if store == "sqlite":
        where = ["--db", str(tmp_path / "crawl.db")]
    else:
        dsn = request.getfixturevalue("postgres_dsn")  # skips where there is no PostgreSQL
        where = ["--frontier", dsn, "--crawl", f"kept_{int(time.time() * 1000)}"]
    with site_of().running() as site:
        # Requests served in all when each run is stopped: the first run and a resumed one by
        # ``signum``, then a last one gracefully (a killed run's unrecorded tail is cut by the next).
        for stop_after, stop in ((7, signum), (14, signum), (17, signal.SIGTERM)):
            returncode, _, stderr = kept_crawl(site, [*where, "--out", str(out), "--warc", str(warc)], stop_after, stop)
            assert returncode == (-signal.SIGKILL if stop == signal.SIGKILL else 0), stderr
        stored = dict(visits_of(where))
        assert sum(stored.values()) >= 3 * 2  # every page visited, and visited again
        assert Counter(json.loads(line)["url"] for line in out.read_text().splitlines()) == Counter(stored)
        captures = Counter(uri for kind, uri, _status, _payload in warc_records(warc)
                           if kind in ("response", "revisit") and not uri.endswith("/robots.txt"))
        assert captures == Counter(stored)


def visits_of(where: list[str]) -> list[tuple[str, int]]:
    """(url, visits) of every row of the crawl ``where`` names (``--db FILE`` or ``--frontier DSN --crawl NAME``)."""
    if where[0] == "--db":
        with contextlib.closing(sqlite3.connect(where[1])) as conn:
            return conn.execute("SELECT url, visits FROM urls").fetchall()
    import psycopg

    with psycopg.connect(where[1], autocommit=True) as conn:
        conn.execute(f"SET search_path TO {where[3]}")
        return conn.execute("SELECT url, visits FROM urls").fetchall()


def test_keep_running_needs_a_revisit_policy(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_running needs a revisit policy"):
        CrawlConfig(seeds=["http://127.0.0.1:9/"], db_path=str(tmp_path / "crawl.db"), keep_running=True)
    done = cli_crawl("http://127.0.0.1:9/", tmp_path / "crawl.db", "--keep-running")
    assert done.returncode == 2 and "--keep-running goes with --revisit" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "crawl.db").exists()

"""``niofetcher status --db``: where a crawl on a SQLite frontier stands, read only.

- A finished crawl: its URLs per state as they are in the file, and no host
  with URLs waiting; the file is not changed by being read.
- A running crawl (a slow site): status reads the file while the crawl owns
  it -- it takes no lock and waits for none --, exit 0, counts that add up
  to what the crawl has found so far, and the crawl goes on to its end.
- A file that is missing (and is not created), a directory, a file that is
  not SQLite, a SQLite database of another program, and a frontier of a
  newer schema version: one line each, exit status 2.
- Exactly one frontier: ``--db`` or ``--frontier`` with ``--crawl``.
- ``crawl_status()`` itself reads a frontier that its owner holds open, as
  the owner's last commit left it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from test_cli_crawl import assert_one_clean_line, crawl, end_of, niofetcher, start_crawl, states

from niofetcher.crawl.frontier import STATES, Frontier
from niofetcher.crawl.frontier.schema import SCHEMA_VERSION
from niofetcher.crawl.frontier.sqlite import crawl_status
from niofetcher.testing import TestSite


def shown_counts(stdout: str) -> dict[str, int]:
    """The ``  state  n`` lines of status."""
    return {m[1]: int(m[2]) for m in re.finditer(r"^  (\w+)\s+(\d+)$", stdout, re.MULTILINE) if m[1] in STATES}


def shown_hosts(stdout: str) -> list[tuple[int, str]]:
    """The ``  n  host`` lines under "hosts with the most URLs waiting"."""
    below = stdout.split("hosts with the most URLs waiting:", 1)[1].splitlines()[1:]
    return [(int(line.split()[0]), line.split()[1]) for line in below]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.timeout(60)
def test_status_of_a_finished_crawl_counts_its_urls_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "crawl.sqlite"
    with TestSite(hosts=2, pages=10) as site:
        assert crawl(site.base_urls[0], db, "--max-pages", "8").returncode == 0
    before = digest(db)
    shown = niofetcher("status", "--db", str(db), "--top", "5")
    assert shown.returncode == 0, shown.stderr
    # Not even SQLite's -wal and -shm, which a user who may not write the directory could not make.
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("crawl.sqlite")) == ["crawl.sqlite"]
    lines = shown.stdout.splitlines()
    assert lines[0] == f"crawl {db}"
    counts = shown_counts(shown.stdout)
    assert list(counts) == list(STATES) and counts == {state: states(db)[state] for state in STATES}
    assert counts["done"] == 8 and counts["waiting"] > 0  # the budget left URLs waiting, on both hosts
    hosts = shown_hosts(shown.stdout)
    assert {host + "/" for _, host in hosts} == set(site.base_urls)
    assert sum(n for n, _ in hosts) == counts["waiting"] and hosts == sorted(hosts, key=lambda row: -row[0])
    assert digest(db) == before


@pytest.mark.timeout(90)
def test_status_reads_a_running_crawl_without_disturbing_it(tmp_path: Path) -> None:
    db = tmp_path / "crawl.sqlite"
    with TestSite(hosts=1, pages=120, delay=0.1) as site:
        child = start_crawl(site.base_urls[0], db, "--progress", "none", "--per-host", "2")
        try:
            deadline = time.monotonic() + 30
            while site.counters().requests < 10:  # robots.txt and a few pages: the crawl owns the file
                assert child.poll() is None and time.monotonic() < deadline, "the crawl ended early"
                time.sleep(0.02)
            shown = niofetcher("status", "--db", str(db))
            assert child.poll() is None, "the crawl should still be running while status read it"
        finally:
            out, err = end_of(child, timeout=60)
        assert shown.returncode == 0, shown.stderr
        counts = shown_counts(shown.stdout)
        assert 1 <= counts["done"] < len(site.page_urls())  # read mid-crawl: some done, not all
        assert counts["waiting"] + counts["processing"] >= 1 and sum(counts.values()) <= len(site.page_urls())
        assert all(host + "/" == site.base_urls[0] for _, host in shown_hosts(shown.stdout))
    assert child.returncode == 0, err
    assert states(db) == {"done": len(site.page_urls())}, out  # the crawl ran to its end, status or not


@pytest.mark.timeout(60)
def test_status_while_a_stopped_crawl_left_its_log_reads_the_logged_commits(tmp_path: Path) -> None:
    """A crawl killed outright leaves its commits in the -wal file beside the database: status reads them."""
    db = tmp_path / "crawl.sqlite"
    with TestSite(hosts=1, pages=200, delay=0.02) as site:
        child = start_crawl(site.base_urls[0], db, "--progress", "none")
        deadline = time.monotonic() + 30
        while site.counters().requests < 30:
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        os.killpg(child.pid, signal.SIGKILL)  # the crawl and its parse processes
        end_of(child)
    shown = niofetcher("status", "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    counts = shown_counts(shown.stdout)
    assert counts["done"] >= 1 and counts == {state: states(db)[state] for state in STATES}


def other_programs_database(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")


def newer_frontier(path: Path) -> None:
    with TestSite(hosts=1, pages=1) as site:
        assert crawl(site.base_urls[0], path).returncode == 0
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("make", "words"), [
    (None, "does not exist"),
    (Path.mkdir, "is a directory"),
    (lambda path: path.write_text("url,state\nhttp://a.test/,done\n" * 100), "is not a SQLite database"),
    (other_programs_database, "is a SQLite database but not a niofetcher frontier"),
    (newer_frontier, f"has frontier schema version {SCHEMA_VERSION + 1} (from a newer niofetcher)"),
], ids=["missing", "directory", "text", "other-program", "newer-version"])
def test_a_db_status_cannot_read_is_one_line_and_exit_2(tmp_path: Path, make: object, words: str) -> None:
    db = tmp_path / "crawl.sqlite"
    if callable(make):
        make(db)
    shown = niofetcher("status", "--db", str(db))
    assert shown.returncode == 2 and shown.stdout == ""
    assert_one_clean_line(shown.stderr)
    assert f"--db {db} {words}" in shown.stderr, shown.stderr
    if make is None:
        assert not db.exists(), "status created the file it was asked to read"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("args", "words"), [
    ([], "status needs --db FILE"),
    (["--db", "x.sqlite", "--frontier", "postgresql://127.0.0.1:1/db", "--crawl", "c"], "not both"),
    (["--db", "x.sqlite", "--crawl", "c"], "--crawl names a crawl in a --frontier database"),
    (["--frontier", "postgresql://127.0.0.1:1/db"], "--frontier needs --crawl NAME"),
], ids=["neither", "both", "crawl-without-frontier", "frontier-without-crawl"])
def test_status_takes_one_frontier(args: list[str], words: str) -> None:
    shown = niofetcher("status", *args)
    assert shown.returncode == 2 and words in shown.stderr, shown.stderr
    assert_one_clean_line(shown.stderr)


@pytest.mark.timeout(30)
def test_crawl_status_reads_the_last_commit_of_a_frontier_held_open(tmp_path: Path) -> None:
    db = tmp_path / "crawl.sqlite"
    with Frontier(db, commit_every=1000, commit_interval=3600.0) as frontier:  # its owner, lock and all
        frontier.add(["http://a.test/1", "http://a.test/2", "http://b.test/1"])
        first, _ = frontier.claim(2)  # one of each host
        frontier.complete(first.url, 200)  # in a batch not committed yet
        status = crawl_status(db, top=1)
        assert status.counts == {"waiting": 1, "processing": 2, "done": 0, "error": 0}
        assert (status.busiest, status.workers) == ([("http://a.test", 1, None)], [])
        frontier.flush()
        assert crawl_status(db).counts == {"waiting": 1, "processing": 1, "done": 1, "error": 0}

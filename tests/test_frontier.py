"""The crawl frontier, ``Frontier`` (docs/crawler.md).

Every URL is in exactly one state at all times, checked with a query the way a
user would (a second sqlite3 connection on the file); known URLs are never
added twice, in whatever form they come; claims go by priority, then FIFO,
and never hand a URL out twice, even to four threads at once; failures are
retried with a growing, capped delay (or a server's Retry-After) until
``max_attempts``; ``release()`` gives the attempt back; a crashed run resumes
with its in-flight URLs waiting again and its done URLs done; and files that
cannot be used fail with one clear ``FrontierError``.

Time is a fake clock passed as ``clock``: no test sleeps.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from conftest import run_threads

from niofetcher.crawl import CrawlConfig, CrawledPage, Crawler
from niofetcher.crawl.frontier import STATES, Frontier, FrontierError, FrontierURL, schema
from niofetcher.crawl.frontier.base import ROBOTS_SECONDS
from niofetcher.crawl.frontier.schema import CLAIM_ROWS, SCHEMA_VERSION
from niofetcher.crawl.schedule import RetrySchedule
from niofetcher.testing import TestSite
from niofetcher.urls import normalize_url

# The crawl's retry policy, which a test asks as the crawler does: fail() is told the wait.
RETRIES = RetrySchedule(max_attempts=3, first=1.0, most=300.0)


class FakeClock:
    """Unix time that moves only when a test says so."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# The columns of the urls table, in their order: the same on every SQL store (PostgreSQL's:
# tests/test_frontier_postgres.py), so that a user's queries work on each.
URL_COLUMNS = ["url", "state", "attempts", "depth", "priority", "parent", "status", "error", "discovered_at",
               "fetched_at", "next_attempt_at", "seq", "host_id", "lastmod", "duplicate_of", "etag", "last_modified",
               "digest", "visits", "changes", "next_due", "captured_at", "changed_time", "unchanged_time"]


# -- helpers ------------------------------------------------------------------


def same_rows_and_new_columns_empty(upgraded: list[tuple[Any, ...]], kept: list[tuple[Any, ...]]) -> bool:
    """An upgrade keeps every value of every row; the columns it adds (at the end) start empty (NULL,
    or 0 for a count: visits, changes)."""
    width = len(kept[0])
    return [row[:width] for row in upgraded] == kept and all(
        value is None or value == 0 for row in upgraded for value in row[width:])


def read_rows(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Ask the file, as a user with the sqlite3 module would (a connection of its own)."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def states_on_disk(path: Path) -> dict[str, str]:
    return dict(read_rows(path, "SELECT url, state FROM urls"))  # type: ignore[arg-type]


def assert_consistent(frontier: Frontier, path: Path) -> dict[str, int]:
    """Every URL in exactly one of the four states, and counts() agreeing with the file."""
    counts = frontier.counts()  # commits what is pending, so the file shows it
    assert set(counts) == set(STATES)
    other = "SELECT COUNT(*) FROM urls WHERE state NOT IN ('waiting', 'processing', 'done', 'error')"
    assert read_rows(path, other) == [(0,)]
    (total,), = read_rows(path, "SELECT COUNT(*) FROM urls")
    (distinct,), = read_rows(path, "SELECT COUNT(DISTINCT url) FROM urls")
    assert total == distinct == sum(counts.values())
    on_disk = dict.fromkeys(STATES, 0)
    on_disk.update(read_rows(path, "SELECT state, COUNT(*) FROM urls GROUP BY state"))  # type: ignore[arg-type]
    assert counts == on_disk
    # 'waiting' rows are due some time; rows that are done or error are not due at all.
    never_due = "SELECT COUNT(*) FROM urls WHERE state = 'waiting' AND next_attempt_at IS NULL"
    assert read_rows(path, never_due) == [(0,)]
    due = "SELECT COUNT(*) FROM urls WHERE state IN ('done', 'error') AND next_attempt_at IS NOT NULL"
    assert read_rows(path, due) == [(0,)]
    return counts


def urls(n: int, host: str = "a.test") -> list[str]:
    return [f"http://{host}/page/{i}" for i in range(n)]


def claim_all(frontier: Frontier, batch: int = 7) -> list[FrontierURL]:
    out: list[FrontierURL] = []
    while claimed := frontier.claim(batch):
        out.extend(claimed)
    return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "crawl.db"


@pytest.fixture
def frontier(db: Path, clock: FakeClock) -> Iterable[Frontier]:
    with Frontier(db, clock=clock) as f:
        yield f


# -- URLs the frontier refuses (the normal form itself: tests/test_url_rules.py) ----


@pytest.mark.timeout(10)
def test_unstorable_urls_are_refused_and_the_frontier_stays_readable(frontier: Frontier, db: Path) -> None:
    """A NUL would cut the URL short in SQLite's JSON; a lone surrogate (an undecodable byte of a command
    line) would be stored as invalid UTF-8 and make every later claim() fail."""
    bad = ["http://a.test/x\x00y", "http://a.test/\udcff", "http://a.test/?q=\ud800"]
    for url in bad:
        with pytest.raises(ValueError):
            normalize_url(url)
    assert frontier.add([*bad, "http://a.test/x", "http://a.test/\u00e9"]) == 2
    assert sorted(item.url for item in claim_all(frontier)) == ["http://a.test/%C3%A9", "http://a.test/x"]
    assert_consistent(frontier, db)


# -- states and transitions ---------------------------------------------------


@pytest.mark.timeout(30)
def test_life_of_a_url_every_url_in_exactly_one_state(frontier: Frontier, db: Path, clock: FakeClock) -> None:
    assert frontier.counts() == {"waiting": 0, "processing": 0, "done": 0, "error": 0}
    assert frontier.next_due() is None
    assert frontier.add(urls(6)) == 6
    assert assert_consistent(frontier, db) == {"waiting": 6, "processing": 0, "done": 0, "error": 0}
    assert frontier.next_due() == clock.now  # new URLs are due at once

    claimed = frontier.claim(4)
    assert [c.url for c in claimed] == urls(4)
    assert all(c.attempts == 1 for c in claimed)
    assert assert_consistent(frontier, db) == {"waiting": 2, "processing": 4, "done": 0, "error": 0}

    clock.advance(1)
    frontier.complete(claimed[0].url, 200)
    assert frontier.fail(claimed[1].url, "read_timeout", retry_in=RETRIES.retry_in(claimed[1].attempts)) == "waiting"
    assert frontier.fail(claimed[2].url, "not found", status=404) == "error"
    frontier.release([claimed[3].url])
    assert assert_consistent(frontier, db) == {"waiting": 4, "processing": 0, "done": 1, "error": 1}

    assert frontier.state("http://a.test/page/4") == "waiting"
    assert frontier.state("HTTP://A.TEST:80/page/0#x") == "done"
    assert frontier.state("http://a.test/unknown") is None
    assert frontier.state("not a url") is None

    sql = "SELECT url, state, attempts, status, error, fetched_at FROM urls"
    rows = {row[0]: row[1:] for row in read_rows(db, sql)}
    assert rows[urls(1)[0]] == ("done", 1, 200, None, clock.now)
    assert rows["http://a.test/page/1"] == ("waiting", 1, None, "read_timeout", clock.now)
    assert rows["http://a.test/page/2"] == ("error", 1, 404, "not found", clock.now)
    assert rows["http://a.test/page/3"] == ("waiting", 0, None, None, None)

    # The CHECK constraint keeps even a user's UPDATE to the four states.
    conn = sqlite3.connect(db)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE urls SET state = 'fetching' WHERE url = ?", (urls(1)[0],))
    conn.close()


@pytest.mark.timeout(30)
def test_outcomes_only_for_claimed_urls(frontier: Frontier, db: Path) -> None:
    frontier.add(urls(2))
    with pytest.raises(ValueError, match="not 'processing'"):
        frontier.complete(urls(1)[0], 200)  # waiting, not claimed
    with pytest.raises(ValueError, match="not in the frontier"):
        frontier.fail("http://elsewhere.test/", "x")
    (item,) = frontier.claim(1)
    frontier.complete(item.url, 200)
    with pytest.raises(ValueError, match="'done'"):
        frontier.complete(item.url, 200)  # twice
    with pytest.raises(ValueError):
        frontier.fail(item.url, "late")
    frontier.release([item.url, "http://elsewhere.test/", "garbage"])  # not processing: left alone
    assert frontier.state(item.url) == "done"
    # complete() and fail() accept any form of a claimed URL.
    (item,) = frontier.claim(1)
    frontier.complete("HTTP://a.test:80/page/1#top", 204)
    assert frontier.state(item.url) == "done"
    assert assert_consistent(frontier, db) == {"waiting": 0, "processing": 0, "done": 2, "error": 0}


def test_complete_many_records_a_batch_of_claimed_urls(frontier: Frontier, db: Path, clock: FakeClock) -> None:
    frontier.add(urls(6))
    claimed = frontier.claim(6)
    frontier.complete_many([(item.url, 200 + i) for i, item in enumerate(claimed[:4])])
    frontier.complete_many([])
    assert assert_consistent(frontier, db) == {"waiting": 0, "processing": 2, "done": 4, "error": 0}
    rows = read_rows(db, "SELECT url, status, fetched_at FROM urls WHERE state = 'done' ORDER BY seq")
    assert rows == [(item.url, 200 + i, clock.now) for i, item in enumerate(claimed[:4])]
    # Any form of a claimed URL, as for complete(); the long way round finds the stored one.
    frontier.complete_many([("HTTP://A.test:80/page/4#x", 204)])
    assert frontier.state(claimed[4].url) == "done"


def test_complete_many_stops_at_a_url_that_is_not_claimed(frontier: Frontier, db: Path) -> None:
    """All or nothing: a URL that is not a claimed one undoes the whole call (the outputs a checkpoint
    counts were written for all of them), and outcomes pending from earlier calls stay."""
    frontier.add(urls(5))
    first, second, third, fourth = frontier.claim(4)
    frontier.complete(fourth.url, 200)  # pending
    with pytest.raises(ValueError, match="not 'processing'"):
        frontier.complete_many([(first.url, 200), (urls(5)[4], 200), (second.url, 200)])  # the 5th: waiting
    assert [frontier.state(u) for u in (first.url, second.url, fourth.url)] == ["processing", "processing", "done"]
    with pytest.raises(ValueError, match="'done'"):
        frontier.complete_many([(second.url, 200), (second.url, 200)], {"out": 10})  # the same URL twice
    assert frontier.state(second.url) == "processing" and frontier.checkpoint() == {}
    frontier.complete_many([(first.url, 200), (second.url, 200)])
    assert frontier.state(third.url) == "processing"
    assert assert_consistent(frontier, db) == {"waiting": 1, "processing": 1, "done": 3, "error": 0}


class CountingConnection:
    """A sqlite3 connection that counts the statements run through it."""

    def __init__(self, conn: sqlite3.Connection | None) -> None:
        assert conn is not None
        self.conn = conn
        self.calls = 0

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        self.calls += 1
        return self.conn.execute(sql, *args)  # type: ignore[arg-type]

    def executemany(self, sql: str, rows: Iterable[object]) -> sqlite3.Cursor:
        listed = list(rows)
        self.calls += len(listed)
        return self.conn.executemany(sql, listed)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)


@pytest.mark.parametrize("operation", ["add_many", "claim", "complete_many", "release"])
def test_a_batch_of_urls_is_as_many_statements_as_a_single_url(db: Path, operation: str) -> None:
    """sqlite3 lets the GIL go at every step of a statement, and a thread of a busy crawler may wait
    5 ms to get it back each time: these calls must not run a statement per URL (executemany does).
    Counted at the connection: every execute() and every row of an executemany() (commit_every is
    out of the way).  Not with SQLite's trace hook, which also reports each trigger program run
    inside a statement's one step, under the statement's text."""

    def statements(n: int) -> int:
        with Frontier(db.with_name(f"{operation}-{n}.db"), commit_every=100_000) as frontier:
            many = urls(n)
            frontier.add_many((url, 0, None, 0) for url in many)
            if operation != "add_many" and operation != "claim":
                frontier.claim(n)
            counting = CountingConnection(frontier.store._conn)
            frontier.store._conn = counting  # type: ignore[assignment]
            if operation == "add_many":
                frontier.add_many((url, 1, "http://a.test/", 0) for url in urls(n, "b.test"))
            elif operation == "claim":
                assert len(frontier.claim(n)) == n
            elif operation == "complete_many":
                frontier.complete_many((url, 200) for url in many)
            else:
                frontier.release(many)
            frontier.store._conn = counting.conn
            return counting.calls

    assert statements(1) == statements(300) <= 6


# -- adding -------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_add_counts_new_urls_and_ignores_known_ones_in_any_form(frontier: Frontier, db: Path) -> None:
    assert frontier.add(["http://a.test/x", "http://a.test/y"]) == 2
    assert frontier.add(["HTTP://A.TEST/x", "http://a.test:80/x#frag", "http://a.test/y", "http://a.test/z"]) == 1
    assert frontier.add(["http://a.test/q", "http://a.test/q", "http://A.test/q#1"]) == 1  # duplicates in one call
    assert frontier.add(["ftp://a.test/", "mailto:x@a.test", "/relative", "http://", "http://[::1/"]) == 0
    assert frontier.add([]) == 0
    assert frontier.add(["https://a.test/x"]) == 1  # another scheme is another URL
    assert frontier.add(["http://a.test/x?"]) == 1  # an empty query is kept, as WHATWG keeps it: another URL
    assert frontier.add(["http://a.test/x?a=1", "http://a.test/x?A=1"]) == 2  # the query's case counts

    # Known in any state: a done or failed URL is not added again.
    for item in claim_all(frontier):
        if item.url.endswith("/x"):
            frontier.complete(item.url, 200)
        else:
            frontier.fail(item.url, "boom")
    assert frontier.add(["http://a.test/x", "http://A.TEST/y", "http://a.test/new"]) == 1
    assert assert_consistent(frontier, db)["waiting"] == 1

    with pytest.raises(TypeError):
        frontier.add("http://a.test/oops")  # a str is an iterable of characters: refused
    with pytest.raises(ValueError):
        frontier.add(["http://a.test/d"], depth=-1)


@pytest.mark.timeout(30)
def test_add_records_depth_parent_priority_and_discovery_time(frontier: Frontier, db: Path, clock: FakeClock) -> None:
    frontier.add(["http://a.test/"])
    clock.advance(5)
    assert frontier.add(["http://a.test/child"], depth=1, parent="HTTP://A.test/", priority=3) == 1
    assert frontier.add_many([("http://b.test/1", 2, "http://a.test/child", 1), ("http://b.test/2", 2, None, 0),
                              ("bogus", 1, None, 0), ("http://b.test/1", 5, None, 9)]) == 2
    sql = "SELECT url, depth, parent, priority, discovered_at, attempts, status FROM urls"
    rows = {r[0]: r[1:] for r in read_rows(db, sql)}
    assert rows == {
        "http://a.test/": (0, None, 0, clock.now - 5, 0, None),
        "http://a.test/child": (1, "http://a.test/", 3, clock.now, 0, None),  # the parent is stored normalised
        "http://b.test/1": (2, "http://a.test/child", 1, clock.now, 0, None),  # the first add wins
        "http://b.test/2": (2, None, 0, clock.now, 0, None),
    }
    item = next(c for c in frontier.claim(10) if c.url == "http://a.test/child")
    assert item == FrontierURL("http://a.test/child", depth=1, priority=3, attempts=1, parent="http://a.test/")



@pytest.mark.timeout(30)
def test_a_known_url_found_nearer_a_seed_gets_the_smaller_depth_in_any_state(
    frontier: Frontier, db: Path, clock: FakeClock
) -> None:
    """A URL's depth is its shortest distance from a seed, whichever parent's links came first."""
    def row(url: str) -> tuple[object, ...]:
        (found,) = read_rows(db, "SELECT depth, parent, state, seq FROM urls WHERE url = ?", (url,))
        return found

    names = ["processing", "done", "error", "waiting"]  # claimed in this order
    assert frontier.add([f"http://a.test/{name}" for name in names], depth=5, parent="http://a.test/far") == 4
    claimed = {item.url: item for item in frontier.claim(3)}
    frontier.complete("http://a.test/done", 200)
    frontier.fail("http://a.test/error", "boom")
    seqs = {name: row(f"http://a.test/{name}")[3] for name in names}

    # Deeper or as deep: nothing changes.
    assert frontier.add([f"http://a.test/{name}" for name in names], depth=5, parent="http://a.test/other") == 0
    assert frontier.add_many([(f"http://a.test/{name}", 7, "http://a.test/deeper", 0) for name in names]) == 0
    assert {row(f"http://a.test/{name}")[:2] for name in names} == {(5, "http://a.test/far")}
    # Nearer: the depth goes down and the parent that gave it is recorded; state and place stay.
    assert frontier.add_many([("http://a.test/new", 1, "http://a.test/", 0)]
                             + [(f"HTTP://A.test/{name}", 2, "http://a.test/near", 0) for name in names]) == 1
    for name in names:
        assert row(f"http://a.test/{name}") == (2, "http://a.test/near", name, seqs[name])
    assert frontier.add(["http://a.test/done"]) == 0  # found as a seed
    assert row("http://a.test/done")[:2] == (0, None)
    assert assert_consistent(frontier, db) == {"waiting": 2, "processing": 1, "done": 1, "error": 1}
    # The claimed one is handed back as it was claimed; its next claim has the new depth.
    assert claimed["http://a.test/processing"].depth == 5
    frontier.release(["http://a.test/processing"])
    assert {item.url: item.depth for item in frontier.claim(10)} == {
        "http://a.test/new": 1, "http://a.test/waiting": 2, "http://a.test/processing": 2}


@pytest.mark.timeout(30)
def test_one_batch_with_a_url_twice_keeps_the_smaller_depth(frontier: Frontier, db: Path) -> None:
    assert frontier.add_many([("http://a.test/x", 3, "http://a.test/p3", 0), ("http://a.test/x", 1, "http://a.test/p1", 0),
                              ("http://a.test/x", 2, "http://a.test/p2", 0), ("http://a.test/y", 1, None, 0)]) == 2
    assert read_rows(db, "SELECT url, depth, parent FROM urls ORDER BY url") == [
        ("http://a.test/x", 1, "http://a.test/p1"), ("http://a.test/y", 1, None)]
    assert assert_consistent(frontier, db)["waiting"] == 2
    # New rows after the lowered ones are still counted right (a batch of both kinds, then new only).
    assert frontier.add_many([("http://a.test/x", 0, None, 0), ("http://a.test/z", 4, None, 0)]) == 1
    assert frontier.add(urls(3)) == 3
    assert assert_consistent(frontier, db)["waiting"] == 6

# -- claiming -----------------------------------------------------------------


@pytest.mark.timeout(30)
def test_claim_order_is_priority_then_discovery(frontier: Frontier) -> None:
    frontier.add(["http://a.test/low-1", "http://a.test/low-2"], priority=0)
    frontier.add(["http://a.test/high-1"], priority=5)
    frontier.add(["http://a.test/mid-1", "http://a.test/mid-2"], priority=2)
    frontier.add_many([("http://a.test/high-2", 0, None, 5), ("http://a.test/neg", 0, None, -1),
                       ("http://a.test/low-3", 0, None, 0), ("http://a.test/mid-3", 0, None, 2)])
    first = frontier.claim(3)
    assert [c.url for c in first] == ["http://a.test/high-1", "http://a.test/high-2", "http://a.test/mid-1"]
    frontier.add(["http://a.test/high-3"], priority=5)  # later, but outranks what waits
    assert [c.url for c in frontier.claim(100)] == [
        "http://a.test/high-3", "http://a.test/mid-2", "http://a.test/mid-3",
        "http://a.test/low-1", "http://a.test/low-2", "http://a.test/low-3", "http://a.test/neg",
    ]
    assert frontier.claim(10) == []
    assert frontier.claim(0) == []
    with pytest.raises(ValueError):
        frontier.claim(-1)



@pytest.mark.timeout(30)
def test_claim_goes_breadth_first_within_a_priority(frontier: Frontier) -> None:
    """Lower depths first, then discovery order: a deep link found early waits for the shallow ones
    found later, a URL whose depth went down moves up with it, and priority still comes first."""
    frontier.add(["http://a.test/d3-early", "http://a.test/d3-moved"], depth=3)
    frontier.add(["http://a.test/d2"], depth=2)
    frontier.add(["http://a.test/d1-a", "http://a.test/d1-b"], depth=1)
    frontier.add(["http://a.test/d4-urgent"], depth=4, priority=1)
    frontier.add(["http://a.test/d3-moved"], depth=1)  # found again, nearer
    assert [(c.url, c.depth) for c in frontier.claim(3)] == [  # d3-moved was discovered before d1-a
        ("http://a.test/d4-urgent", 4), ("http://a.test/d3-moved", 1), ("http://a.test/d1-a", 1)]
    assert [(c.url, c.depth) for c in frontier.claim(10, max_depth=2)] == [
        ("http://a.test/d1-b", 1), ("http://a.test/d2", 2)]
    assert [c.url for c in frontier.claim(10)] == ["http://a.test/d3-early"]

@pytest.mark.timeout(30)
def test_a_retried_url_keeps_its_place(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add(urls(3))
    first, *_ = frontier.claim(1)
    frontier.fail(first.url, "connect_error", retry_in=RETRIES.retry_in(first.attempts))
    frontier.add(["http://a.test/later"])
    clock.advance(1)  # the retry is due now
    assert [c.url for c in frontier.claim(10)] == [first.url, *urls(3)[1:], "http://a.test/later"]


@pytest.mark.timeout(60)
def test_claim_never_hands_out_a_url_twice(frontier: Frontier, db: Path, clock: FakeClock) -> None:
    rng = random.Random(7)
    frontier.add_many((f"http://h{i % 13}.test/{i}", 0, None, rng.randrange(4)) for i in range(3000))
    seen: Counter[str] = Counter()
    while claimed := frontier.claim(rng.randrange(1, 60)):
        seen.update(c.url for c in claimed)
        for c in claimed:
            r = rng.random()
            if r < 0.1:
                frontier.fail(c.url, "read_timeout")
            elif r < 0.2:
                frontier.release([c.url])  # comes back, and may be claimed again
                seen[c.url] -= 1
            else:
                frontier.complete(c.url, 200)
        frontier.add(f"http://h0.test/{rng.randrange(6000)}" for _ in range(5))  # some new, some known
    assert max(seen.values()) == 1
    counts = assert_consistent(frontier, db)
    assert counts["waiting"] == counts["processing"] == 0
    assert sum(seen.values()) == counts["done"] + counts["error"]


# -- failures and retries -----------------------------------------------------


@pytest.mark.timeout(30)
def test_retry_delays_grow_and_are_capped(db: Path, clock: FakeClock) -> None:
    retries = RetrySchedule(max_attempts=7, first=2.0, most=20.0)
    with Frontier(db, clock=clock) as frontier:
        frontier.add(["http://a.test/flaky"])
        delays = []
        for attempt in range(1, 7):
            (item,) = frontier.claim(5)
            assert item.attempts == attempt
            assert frontier.fail(item.url, "read_timeout", None, retries.retry_in(item.attempts)) == "waiting"
            due = frontier.next_due()
            assert due is not None
            delays.append(due - clock.now)
            clock.advance(due - clock.now - 0.001)
            assert frontier.claim(5) == []  # not due yet
            clock.advance(0.001)
        assert delays == [2.0, 4.0, 8.0, 16.0, 20.0, 20.0]  # retry_delay * 2**(attempts-1), capped
        (item,) = frontier.claim(5)
        assert item.attempts == 7
        assert retries.retry_in(item.attempts) is None  # attempts used up
        assert frontier.fail(item.url, "read_timeout") == "error"
        assert frontier.next_due() is None
        rows = read_rows(db, "SELECT state, attempts, error, next_attempt_at FROM urls")
        assert rows == [("error", 7, "read_timeout", None)]


@pytest.mark.timeout(30)
def test_retry_after_is_honoured(frontier: Frontier, clock: FakeClock) -> None:
    frontier.add(["http://a.test/busy", "http://a.test/other"])
    busy, other = frontier.claim(2)
    assert frontier.fail(busy.url, "service unavailable", 503, RETRIES.retry_in(busy.attempts, 120.0)) == "waiting"
    assert frontier.fail(other.url, "too many requests", 429, RETRIES.retry_in(other.attempts, 0.25)) == "waiting"
    clock.advance(1.0)
    assert [c.url for c in frontier.claim(5)] == [other.url]
    assert frontier.next_due() == clock.now - 1.0 + 120.0
    clock.advance(118.9)
    assert frontier.claim(5) == []
    clock.advance(0.1)
    (again,) = frontier.claim(5)
    assert again.url == busy.url and again.attempts == 2
    # The cap is for our own backoff; a server's longer Retry-After still wins.
    assert frontier.fail(busy.url, "service unavailable", 503, RETRIES.retry_in(again.attempts, 1000.0)) == "waiting"
    assert frontier.next_due() == clock.now + 1000.0


@pytest.mark.timeout(30)
def test_next_due_is_the_earliest_of_every_depth(frontier: Frontier, db: Path, clock: FakeClock) -> None:
    """No index by due time (schema 5): the earliest due time is looked up depth by depth."""
    frontier.add(["http://a.test/"])
    frontier.add(["http://a.test/1", "http://b.test/1"], depth=1)
    frontier.add(["http://a.test/3"], depth=3)
    seed, one, other = frontier.claim(3)
    assert (seed.depth, one.depth, other.depth) == (0, 1, 1)
    frontier.fail(seed.url, "reset", retry_in=50.0)
    frontier.fail(one.url, "reset", retry_in=30.0)
    assert frontier.next_due() == clock.now  # depth 3's, found at once
    frontier.claim(5)
    frontier.complete("http://a.test/3", 200)
    frontier.fail(other.url, "reset", retry_in=40.0)
    assert frontier.next_due() == clock.now + 30.0  # depth 1's, earlier than depth 0's
    clock.advance(30.0)
    frontier.complete(frontier.claim(5)[0].url, 200)
    assert frontier.next_due() == clock.now + 10.0
    plan = " ".join(str(row[3]) for row in read_rows(db, "EXPLAIN QUERY PLAN " + schema.NEXT_DUE))
    assert "urls_depth" in plan and "SCAN urls" not in plan


def _plan_of_urls(db: Path, sql: str) -> list[str]:
    """The lines of the query plan that read urls, with the file's statistics."""
    return [str(row[3]) for row in read_rows(db, "EXPLAIN QUERY PLAN " + sql) if " urls " in f"{row[3]} "]


@pytest.mark.timeout(60)
def test_next_due_keeps_to_the_depth_index_with_any_statistics(db: Path, clock: FakeClock) -> None:
    """A small table waiting at one depth, analysed: the planner would rather build an automatic
    index (a scan of the whole table) for every next_due() than probe urls_depth."""
    with Frontier(db, clock=clock) as frontier:
        frontier.add(urls(3000))
    with sqlite3.connect(db) as conn:
        conn.execute("ANALYZE")
    lines = _plan_of_urls(db, schema.NEXT_DUE)
    assert lines and all("USING" in line and "urls_depth" in line and "AUTOMATIC" not in line for line in lines), lines
    # The negative control: the same statement left to the planner.
    unhinted = _plan_of_urls(db, schema.NEXT_DUE.replace("INDEXED BY urls_depth", ""))
    assert any("AUTOMATIC" in line for line in unhinted), unhinted
    with Frontier(db, clock=clock) as frontier:
        assert frontier.next_due() == clock.now


@pytest.mark.timeout(30)
def test_retries_end_in_error_after_max_attempts(frontier: Frontier, db: Path, clock: FakeClock) -> None:
    frontier.add(["http://a.test/down"])
    outcomes = []
    for _ in range(3):
        clock.advance(1000)
        (item,) = frontier.claim(1)
        outcomes.append(frontier.fail(item.url, "connect_error", None, RETRIES.retry_in(item.attempts)))
    assert outcomes == ["waiting", "waiting", "error"]
    clock.advance(1000)
    assert frontier.claim(1) == []  # a claim of nothing leaves the outcome to its batch
    frontier.flush()
    assert read_rows(db, "SELECT state, attempts, status, error FROM urls") == [("error", 3, None, "connect_error")]
    assert assert_consistent(frontier, db)["error"] == 1


@pytest.mark.timeout(30)
def test_release_does_not_count_the_attempt(frontier: Frontier, db: Path) -> None:
    frontier.add(urls(3))
    claimed = frontier.claim(3)
    frontier.release(c.url for c in claimed[:2])
    assert assert_consistent(frontier, db) == {"waiting": 2, "processing": 1, "done": 0, "error": 0}
    assert read_rows(db, "SELECT attempts FROM urls WHERE state = 'waiting'") == [(0,), (0,)]
    again = frontier.claim(3)
    assert [c.url for c in again] == [c.url for c in claimed[:2]]  # back in their place, due at once
    assert [c.attempts for c in again] == [1, 1]
    with pytest.raises(TypeError):
        frontier.release("http://a.test/page/0")


# -- reopening and crashes ----------------------------------------------------


CRASH_SCRIPT = """
import os, sys
from niofetcher.crawl.frontier import Frontier
f = Frontier(sys.argv[1], commit_every=int(sys.argv[2]))
f.add(["http://a.test/%d" % i for i in range(10)])
claimed = f.claim(6)
f.complete(claimed[0].url, 200)
f.complete(claimed[1].url, 200)
f.counts()  # commits: these two are done for good
f.complete(claimed[2].url, 200)  # pending unless commit_every is 1
f.fail(claimed[3].url, "boom")
sys.stdout.flush()
os._exit(1)  # killed: no close(), no commit, the WAL left behind
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("commit_every", [1, 128])
def test_killed_run_resumes_with_processing_urls_waiting(db: Path, commit_every: int) -> None:
    proc = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, str(db), str(commit_every)],
                          capture_output=True, text=True, timeout=50, check=False)
    assert proc.returncode == 1, proc.stderr
    with Frontier(db) as frontier:
        states = states_on_disk(db)
        assert [states[f"http://a.test/{i}"] for i in (0, 1)] == ["done", "done"]  # committed: never fetched again
        if commit_every == 1:
            assert [states[f"http://a.test/{i}"] for i in (2, 3)] == ["done", "error"]
        else:
            # Batched outcomes not yet committed are lost: claimed, so waiting again - fetched again, not lost.
            assert [states[f"http://a.test/{i}"] for i in (2, 3)] == ["waiting", "waiting"]
        assert [states[f"http://a.test/{i}"] for i in (4, 5)] == ["waiting", "waiting"]  # were in flight
        assert "processing" not in states.values()
        assert assert_consistent(frontier, db)["processing"] == 0
        # The interrupted attempt still counts (it may have reached the server).
        assert read_rows(db, "SELECT attempts FROM urls WHERE url = 'http://a.test/4'") == [(1,)]
        resumed = [c.url for c in claim_all(frontier)]
        expected = [f"http://a.test/{i}" for i in range(2 if commit_every > 1 else 4, 10)]
        assert resumed == expected  # in their old order, and nothing that was done


@pytest.mark.timeout(30)
def test_reopen_keeps_everything_and_the_fifo_order(db: Path, clock: FakeClock) -> None:
    with Frontier(db, clock=clock) as frontier:
        frontier.add(urls(3))
        (item,) = frontier.claim(1)
        frontier.complete(item.url, 200)  # pending: close() commits it
    with Frontier(db, clock=clock) as frontier:
        assert frontier.counts() == {"waiting": 2, "processing": 0, "done": 1, "error": 0}
        assert frontier.add(urls(4)) == 1
        assert [c.url for c in frontier.claim(10)] == urls(4)[1:]



# The tables of the versions before, as niofetcher made them.
_VERSION_2_TABLES = """
CREATE TABLE meta (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE urls (
    url TEXT NOT NULL PRIMARY KEY,
    state TEXT NOT NULL DEFAULT 'waiting' CHECK (state IN ('waiting', 'processing', 'done', 'error')),
    attempts INTEGER NOT NULL DEFAULT 0, depth INTEGER NOT NULL DEFAULT 0, priority INTEGER NOT NULL DEFAULT 0,
    parent TEXT, status INTEGER, error TEXT, discovered_at REAL NOT NULL, fetched_at REAL, next_attempt_at REAL,
    seq INTEGER NOT NULL
);
CREATE INDEX urls_due ON urls (next_attempt_at) WHERE state = 'waiting';
CREATE TABLE checkpoints (name TEXT NOT NULL PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX urls_claim ON urls (priority DESC, depth, seq, next_attempt_at) WHERE state = 'waiting';
"""
_VERSION_1_TABLES = _VERSION_2_TABLES.replace(
    "CREATE TABLE checkpoints (name TEXT NOT NULL PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;\n", ""
).replace("(priority DESC, depth, seq, next_attempt_at)", "(priority DESC, seq, next_attempt_at)")


def make_old_file(db: Path, version: int) -> None:
    """A frontier of schema ``version`` (1: no checkpoints table, one queue in discovery order;
    2: one queue, breadth first), holding URLs of two hosts in every state, one left 'processing'."""
    conn = sqlite3.connect(db)
    conn.executescript(_VERSION_1_TABLES if version == 1 else _VERSION_2_TABLES)
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?), ('created_at', '1.0')", (str(version),))
    rows = [
        ("http://a.test/", "done", 1, 0, None), ("http://a.test/d2", "waiting", 0, 2, "http://a.test/"),
        ("http://a.test/d1", "processing", 1, 1, "http://a.test/"), ("http://b.test:8080/", "waiting", 0, 1, None),
        ("http://b.test:8080/gone", "error", 3, 1, "http://b.test:8080/"),
        ("http://b.test:8080/more", "waiting", 0, 1, "http://b.test:8080/"),
    ]
    conn.executemany(
        "INSERT INTO urls (url, state, attempts, depth, parent, discovered_at, next_attempt_at, seq)"
        " VALUES (?1, ?2, ?3, ?4, ?5, 1.0, CASE WHEN ?2 IN ('waiting', 'processing') THEN 1.0 END, ?6)",
        [(*row, seq) for seq, row in enumerate(rows, 1)],
    )
    conn.commit()
    conn.close()


def make_file_as(db: Path, version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A frontier as schema ``version`` (3 or later) wrote it: an old file upgraded that far, no further."""
    make_old_file(db, 2)
    with monkeypatch.context() as patch:
        patch.setattr(schema, "SCHEMA_VERSION", version)
        Frontier(db).close()


def table_shape(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """The columns of urls, and the indexes and triggers, as SQLite describes them."""
    columns = read_rows(path, "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('urls')")
    others = read_rows(path, "SELECT type, name FROM sqlite_master WHERE type IN ('index', 'trigger') ORDER BY name")
    return columns, others


@pytest.mark.timeout(30)
@pytest.mark.parametrize("version", [1, 2])
def test_an_older_file_is_upgraded_when_opened(tmp_path: Path, version: int) -> None:
    db = tmp_path / "old.db"
    make_old_file(db, version)
    with Frontier(db) as frontier:
        assert frontier.checkpoint() == {}
        assert frontier.counts() == {"waiting": 4, "processing": 0, "done": 1, "error": 1}
        # Both hosts in one claim, in turn, each breadth first; d1 was processing, so its attempt counted.
        claimed = frontier.claim(10)
        assert [(c.url, c.attempts) for c in claimed] == [
            ("http://a.test/d1", 2), ("http://b.test:8080/", 1), ("http://b.test:8080/more", 1), ("http://a.test/d2", 1)
        ]
        frontier.complete_many([("http://a.test/d1", 200)], {"out": 7})
    assert read_rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert read_rows(db, "SELECT COUNT(*) FROM urls WHERE host_id IS NULL") == [(0,)]
    assert read_rows(db, "SELECT origin FROM hosts ORDER BY origin") == [("http://a.test",), ("http://b.test:8080",)]
    fresh = tmp_path / "fresh.db"
    Frontier(fresh).close()
    assert table_shape(db) == table_shape(fresh)  # an upgraded file is a new one, column for column
    assert not read_rows(db, "SELECT name FROM sqlite_master WHERE name = 'urls_claim'")
    with Frontier(db) as frontier:
        assert frontier.checkpoint() == {"out": 7}
        assert frontier.counts() == {"waiting": 3, "processing": 0, "done": 2, "error": 1}


@pytest.mark.timeout(30)
def test_a_version_3_file_gets_a_null_lastmod_for_every_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.db"
    make_file_as(db, 3, monkeypatch)
    assert "lastmod" not in [name for (name,) in read_rows(db, "SELECT name FROM pragma_table_info('urls')")]
    rows = "SELECT url, state, attempts, depth, priority, parent, seq, host_id FROM urls ORDER BY url"
    kept = read_rows(db, rows)
    Frontier(db).close()  # the upgrade
    assert read_rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert len(kept) == 6 and same_rows_and_new_columns_empty(read_rows(db, rows), kept)
    assert read_rows(db, "SELECT COUNT(*) FROM urls WHERE lastmod IS NULL") == [(6,)]
    with Frontier(db) as frontier:
        assert frontier.counts() == {"waiting": 4, "processing": 0, "done": 1, "error": 1}
        frontier.add_many([("http://b.test:8080/more", 1, None, 0)], {"http://b.test:8080/more": "2024-05-01"})
        assert {c.url: c.lastmod for c in frontier.claim(10)}["http://b.test:8080/more"] == "2024-05-01"
    assert read_rows(db, "SELECT url, lastmod FROM urls WHERE lastmod IS NOT NULL") == [
        ("http://b.test:8080/more", "2024-05-01")]
    fresh = tmp_path / "fresh.db"
    Frontier(fresh).close()
    assert table_shape(db) == table_shape(fresh)


@pytest.mark.timeout(30)
def test_a_version_4_file_loses_its_index_by_due_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.db"
    make_file_as(db, 4, monkeypatch)
    assert read_rows(db, "SELECT name FROM sqlite_master WHERE name = 'urls_due'") == [("urls_due",)]
    rows = "SELECT * FROM urls ORDER BY url"
    kept = read_rows(db, rows)
    with Frontier(db) as frontier:  # the upgrade
        assert frontier.next_due() == 1.0
        assert frontier.counts() == {"waiting": 4, "processing": 0, "done": 1, "error": 1}
    assert read_rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert len(kept) == 6 and same_rows_and_new_columns_empty(read_rows(db, rows), kept)
    assert not read_rows(db, "SELECT name FROM sqlite_master WHERE name = 'urls_due'")
    fresh = tmp_path / "fresh.db"
    Frontier(fresh).close()
    assert table_shape(db) == table_shape(fresh)
    # A new file has pages of 2 KiB; an older one keeps its own.
    assert read_rows(fresh, "PRAGMA page_size") == [(2048,)] and read_rows(db, "PRAGMA page_size") == [(4096,)]


@pytest.mark.timeout(30)
def test_a_robots_txt_answer_is_kept_in_the_file_for_a_day(db: Path, clock: FakeClock) -> None:
    with Frontier(db, clock=clock) as frontier:
        frontier.add(["http://a.test/", "http://b.test/"])
        assert frontier.robots("http://a.test") is None
        frontier.store_robots("http://a.test", 200, b"User-agent: *\nDisallow: /private\n")
        frontier.store_robots("http://b.test", 404, b"")
        assert frontier.robots("http://a.test") == (200, b"User-agent: *\nDisallow: /private\n", 0.0)
        with pytest.raises(ValueError):
            frontier.complete("http://a.test/", 200)  # not claimed: a call that fails keeps the answers
    clock.now += ROBOTS_SECONDS - 1.0
    with Frontier(db, clock=clock) as frontier:  # read back by a new opener
        assert frontier.robots("http://a.test") == (200, b"User-agent: *\nDisallow: /private\n", ROBOTS_SECONDS - 1.0)
        assert frontier.robots("http://b.test") == (404, b"", ROBOTS_SECONDS - 1.0)
        assert frontier.robots("http://c.test") is None  # a host the frontier never saw
        frontier.store_robots("http://b.test", 200, b"User-agent: *\nDisallow:\n")  # fetched anew
        clock.now += 2.0
        assert frontier.robots("http://a.test") is None  # more than a day old: fetch it again
        assert frontier.robots("http://b.test") == (200, b"User-agent: *\nDisallow:\n", 2.0)


@pytest.mark.timeout(30)
def test_a_version_5_file_gets_a_place_for_robots_txt_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.db"
    make_file_as(db, 5, monkeypatch)
    hosts_columns = "SELECT name FROM pragma_table_info('hosts')"
    assert read_rows(db, hosts_columns) == [("id",), ("origin",)]
    kept = read_rows(db, "SELECT * FROM urls ORDER BY url")
    with Frontier(db) as frontier:  # the upgrade
        assert frontier.robots("http://a.test") is None
        frontier.store_robots("http://a.test", 200, b"User-agent: *\n")
        assert frontier.robots("http://a.test")[:2] == (200, b"User-agent: *\n")  # type: ignore[index]
    assert read_rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert same_rows_and_new_columns_empty(read_rows(db, "SELECT * FROM urls ORDER BY url"), kept)
    fresh = tmp_path / "fresh.db"
    Frontier(fresh).close()
    assert read_rows(db, hosts_columns) == read_rows(fresh, hosts_columns) == [
        ("id",), ("origin",), ("robots_status",), ("robots",), ("robots_at",)]


@pytest.mark.timeout(30)
def test_a_version_8_file_gets_what_a_revisit_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 9 (issue 27): the revisit columns, empty on every row kept, and the partial index of
    the done and error rows that will be due again, which wake() and revisits() read."""
    db = tmp_path / "old.db"
    make_file_as(db, 8, monkeypatch)
    kept = read_rows(db, "SELECT * FROM urls ORDER BY url")
    with Frontier(db) as frontier:  # the upgrade
        assert frontier.revisits() == (0, None) and frontier.wake() == 0
        assert frontier.counts() == {"waiting": 4, "processing": 0, "done": 1, "error": 1}
    assert read_rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    upgraded = read_rows(db, "SELECT * FROM urls ORDER BY url")
    assert same_rows_and_new_columns_empty(upgraded, kept) and len(upgraded[0]) == len(kept[0]) + 9
    fresh = tmp_path / "fresh.db"
    Frontier(fresh).close()
    assert table_shape(db) == table_shape(fresh)
    plan = read_rows(db, "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM urls WHERE state IN ('done', 'error') AND next_due <= 1")
    assert "urls_revisit" in str(plan)


@pytest.mark.timeout(30)
def test_a_version_10_file_gets_the_times_of_its_visits_from_its_last_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 11 (issue 27, a rate of change estimated): changed_time and unchanged_time.  The
    visits of a version 10 file were not timed: a row visited more than once takes each visit after
    the first as its last interval long (next_due - fetched_at), so that its changes come with time;
    the others get 0.  The claims carry them, with the changes and the seconds since the last fetch."""
    db = tmp_path / "old.db"
    clock = FakeClock(1000.0)
    make_file_as(db, 10, monkeypatch)
    with contextlib.closing(sqlite3.connect(db)) as conn:  # three rows done: 5 visits and 1 change, 1 visit, none
        conn.execute("UPDATE urls SET state = 'done', visits = 5, changes = 1, fetched_at = 900.0, next_due = 960.0,"
                     " next_attempt_at = NULL WHERE url = 'http://a.test/d2'")
        conn.execute("UPDATE urls SET state = 'done', visits = 1, fetched_at = 900.0, next_due = 990.0,"
                     " next_attempt_at = NULL WHERE url = 'http://b.test:8080/more'")
        conn.execute("UPDATE state_counts SET n = n + (CASE state WHEN 'done' THEN 2 WHEN 'waiting' THEN -2 END)"
                     " WHERE state IN ('done', 'waiting')")
        conn.commit()
    kept = read_rows(db, "SELECT * FROM urls ORDER BY url")
    with Frontier(db, clock=clock) as frontier:  # the upgrade
        assert frontier.wake() == 2
        claimed = {item.url: item for item in frontier.claim(10)}
    assert read_rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    upgraded = read_rows(db, "SELECT * FROM urls ORDER BY url")
    assert len(upgraded[0]) == len(kept[0]) + 2
    assert read_rows(db, "SELECT url, changed_time, unchanged_time FROM urls WHERE changed_time + unchanged_time > 0"
                     ) == [("http://a.test/d2", 60.0, 180.0)]  # 1 change and 3 unchanged visits of 60 s
    assert read_rows(db, "SELECT COUNT(*) FROM urls WHERE changed_time = 0 AND unchanged_time = 0") == [(5,)]
    d2, more = claimed["http://a.test/d2"], claimed["http://b.test:8080/more"]
    assert (d2.visits, d2.changes, d2.changed_time, d2.unchanged_time, d2.since_fetch) == (5, 1, 60.0, 180.0, 100.0)
    assert (more.visits, more.changes, more.changed_time, more.unchanged_time, more.since_fetch) == (1, 0, 0, 0, 100.0)
    assert claimed["http://b.test:8080/"].since_fetch is None  # never fetched
    fresh = tmp_path / "fresh.db"
    Frontier(fresh).close()
    assert table_shape(db) == table_shape(fresh)


@pytest.mark.timeout(30)
def test_a_version_9_file_gets_a_place_for_the_time_of_each_capture(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 10 (issue 27): captured_at, NULL on every row kept (no capture's time was), which
    claims then carry; a crawl of the upgraded file fills it (tests/test_warc_revisits.py)."""
    db = tmp_path / "old.db"
    make_file_as(db, 9, monkeypatch)
    kept = read_rows(db, "SELECT * FROM urls ORDER BY url")
    with Frontier(db) as frontier:  # the upgrade
        assert {item.captured_at for item in frontier.claim(10)} == {None}
    assert read_rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert read_rows(db, "SELECT COUNT(*) FROM urls WHERE captured_at IS NULL") == [(len(kept),)]
    fresh = tmp_path / "fresh.db"
    Frontier(fresh).close()
    assert table_shape(db) == table_shape(fresh)


@pytest.mark.timeout(30)
def test_an_upgrade_takes_a_stored_url_that_has_no_host(tmp_path: Path) -> None:
    """A row put in by hand that host_key() cannot take apart: the file still opens, the row is
    a host of its own and is handed out like any other (the crawl records it as failed)."""
    db = tmp_path / "old.db"
    make_old_file(db, 2)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO urls (url, discovered_at, next_attempt_at, seq) VALUES ('by-hand', 1.0, 1.0, 99)")
    conn.commit()
    conn.close()
    with Frontier(db) as frontier:
        assert "by-hand" in [c.url for c in frontier.claim(10)]
    assert read_rows(db, "SELECT COUNT(*) FROM urls WHERE host_id IS NULL") == [(0,)]


@pytest.mark.timeout(30)
def test_a_version_2_file_without_its_checkpoints_table_is_damaged(db: Path) -> None:
    Frontier(db).close()
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE checkpoints")
    conn.close()
    assert "checkpoints table is missing" in str(_one_line_error(db))

# -- files that cannot be used ------------------------------------------------


def _one_line_error(path: Path) -> FrontierError:
    with pytest.raises(FrontierError) as info:
        Frontier(path)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return info.value


@pytest.mark.timeout(30)
def test_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are not the URLs you are looking for\n" * 200)
    assert "not a database" in str(_one_line_error(path))
    assert path.read_text().startswith("these are")  # left as it was


@pytest.mark.timeout(30)
def test_a_corrupt_frontier(db: Path) -> None:
    with Frontier(db) as frontier:
        frontier.add(urls(3000))
    data = bytearray(db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    assert len(data) > 4 * page_size
    rng = random.Random(3)
    data[page_size:] = bytes(rng.randrange(256) for _ in range(len(data) - page_size))  # all but page 1
    db.write_bytes(bytes(data))
    _one_line_error(db)


@pytest.mark.timeout(30)
def test_a_truncated_frontier(db: Path) -> None:
    with Frontier(db) as frontier:
        frontier.add(urls(3000))
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])
    _one_line_error(db)


@pytest.mark.timeout(30)
def test_an_unknown_schema_version(db: Path) -> None:
    Frontier(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.close()
    error = _one_line_error(db)
    assert f"version {SCHEMA_VERSION + 1}" in str(error) and "newer" in str(error)


@pytest.mark.timeout(30)
def test_another_programs_database(db: Path) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("CREATE TABLE urls (url TEXT, seen INTEGER)")
    conn.close()
    assert "not a niofetcher frontier" in str(_one_line_error(db))


@pytest.mark.timeout(30)
def test_an_empty_file_becomes_a_frontier(db: Path) -> None:
    db.write_bytes(b"")
    with Frontier(db) as frontier:
        assert frontier.add(urls(2)) == 2
    assert read_rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]


@pytest.mark.timeout(30)
def test_a_path_that_cannot_be_opened(tmp_path: Path) -> None:
    """Each in words, not SQLite's "unable to open database file"; and no file is left behind."""
    missing = tmp_path / "no-such-dir" / "crawl.db"
    assert str(_one_line_error(missing)) == f"cannot open {missing}: directory {missing.parent} does not exist"
    assert str(_one_line_error(tmp_path)) == f"cannot open {tmp_path}: it is a directory"
    (tmp_path / "a-file").write_text("")
    below_a_file = tmp_path / "a-file" / "crawl.db"
    assert str(_one_line_error(below_a_file)) == f"cannot open {below_a_file}: {below_a_file.parent} is not a directory"
    not_sqlite = tmp_path / "notes.db"
    not_sqlite.write_bytes(b"SQLite format 2\0" * 512)
    assert str(_one_line_error(not_sqlite)) == f"cannot open {not_sqlite}: file is not a database"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "notes.db"]


def _open_error_as_nobody(path: Path) -> str:
    """The message Frontier(path) fails with, for a user without root's powers over the file: this
    process when it is not root, else a forked child that becomes nobody (it has niofetcher loaded:
    an interpreter started as nobody could not read /root)."""
    if os.geteuid() != 0:
        return str(_one_line_error(path))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave, whatever happens
        try:
            os.close(read_end)
            os.setgid(65534)
            os.setuid(65534)
            try:
                Frontier(path).close()
                message = "opened"
            except FrontierError as exc:
                message = str(exc)
            os.write(write_end, message.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(pid, 0)
    return message


@pytest.mark.timeout(30)
def test_a_file_that_may_not_be_read_or_written(tmp_path: Path) -> None:
    # tmp_path is inside pytest's directory of this user, closed to others: a directory of its own.
    directory = Path(tempfile.mkdtemp(prefix="frontier-perm-"))
    try:
        directory.chmod(0o777)
        db = directory / "crawl.db"
        Frontier(db).close()
        os.chmod(db, 0o000)
        assert _open_error_as_nobody(db) == f"cannot open {db}: permission denied: it must be readable and writable"
        os.chmod(db, 0o444)
        assert _open_error_as_nobody(db) == f"cannot open {db}: permission denied: it must be readable and writable"
        os.chmod(db, 0o666)
        directory.chmod(0o555)
        assert _open_error_as_nobody(db) == f"cannot open {db}: permission denied: directory {directory} is not writable"
        assert sorted(p.name for p in directory.iterdir()) == ["crawl.db"]
    finally:
        directory.chmod(0o755)
        shutil.rmtree(directory)


@pytest.mark.timeout(60)
def test_close_samples_the_statistics_it_leaves_rather_than_reading_every_row(db: Path) -> None:
    """close() runs PRAGMA optimize, which ANALYZEs a table never analyzed -- every new file's --
    and without a limit that reads every entry of every index (169 s at 10M URLs).  Sampled,
    the counts it stores are estimates: never exactly the 5,000 rows, as a full count gives."""
    with Frontier(db) as frontier:
        frontier.add(f"http://127.0.0.1:{1 + n % 40}/{n}" for n in range(5000))
        frontier.complete_many((item.url, 200) for item in frontier.claim(100))
    stats = {idx: stat for idx, stat in read_rows(db, "SELECT idx, stat FROM sqlite_stat1 WHERE tbl = 'urls'")}
    (rows, _distinct) = str(stats["sqlite_autoindex_urls_1"]).split()
    assert int(rows) != 5000


@pytest.mark.timeout(30)
def test_closed_frontier_and_bad_arguments(db: Path) -> None:
    frontier = Frontier(db)
    frontier.close()
    frontier.close()  # twice is fine
    assert frontier.closed and "closed" in repr(frontier)
    with pytest.raises(FrontierError, match="closed"):
        frontier.claim(1)
    with pytest.raises(FrontierError, match="closed"):
        frontier.add(urls(1))
    with pytest.raises(ValueError):
        Frontier(":memory:", commit_every=0)
    # The retry policy left the frontier: its old options say where it went.
    for name in ("max_attempts", "retry_delay", "max_retry_delay"):
        with pytest.raises(TypeError, match=f"takes no {name}: the retry policy left the frontier"):
            Frontier(":memory:", **{name: 3})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such'"):
        Frontier(":memory:", no_such=1)
    with Frontier(clock=lambda: 0.0) as frontier:
        frontier.add(urls(1))
        (item,) = frontier.claim(1)
        for wait in (-1.0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match="retry_in"):
                frontier.fail(item.url, "x", retry_in=wait)
        with pytest.raises(TypeError, match="retry_in"):
            frontier.fail(item.url, "x", retry_in=True)
        assert frontier.state(item.url) == "processing"  # nothing recorded


@pytest.mark.timeout(30)
def test_in_memory_frontier() -> None:
    with Frontier() as frontier:
        assert frontier.add(urls(3)) == 3
        (item,) = frontier.claim(1)
        frontier.complete(item.url, 200)
        assert frontier.counts() == {"waiting": 2, "processing": 0, "done": 1, "error": 0}
        assert "waiting=2" in repr(frontier)


# -- threads ------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_four_threads_add_claim_and_complete(db: Path) -> None:
    per_thread = 1500
    claimed: list[list[str]] = [[] for _ in range(4)]
    retries = RetrySchedule(max_attempts=2, first=0.0)
    with Frontier(db) as frontier:

        def worker(n: int) -> None:
            rng = random.Random(n)
            # Each thread adds its own URLs and, in other forms, some of the others'.
            mine = [f"http://t{n}.test/{i}" for i in range(per_thread)]
            for start in range(0, per_thread, 50):
                frontier.add(mine[start:start + 50], depth=1, parent=f"http://t{n}.test/")
                frontier.add(f"HTTP://T{rng.randrange(4)}.test:80/{rng.randrange(per_thread)}#x" for _ in range(10))
                for item in frontier.claim(rng.randrange(1, 40)):
                    claimed[n].append(item.url)
                    if rng.random() < 0.1:
                        frontier.fail(item.url, "read_timeout", retry_in=retries.retry_in(item.attempts))
                    else:
                        frontier.complete(item.url, 200)
                frontier.counts()
            while items := frontier.claim(25):
                for item in items:
                    claimed[n].append(item.url)
                    if rng.random() < 0.05:
                        frontier.fail(item.url, "gone", retry_in=retries.retry_in(item.attempts))
                    else:
                        frontier.complete(item.url, 200)

        run_threads([functools.partial(worker, n) for n in range(4)])
        counts = assert_consistent(frontier, db)
        assert counts["waiting"] == counts["processing"] == 0
        assert counts["done"] + counts["error"] == 4 * per_thread
        times = Counter(url for urls_ in claimed for url in urls_)
        assert len(times) == 4 * per_thread
        # A URL is claimed once, or again only after a failed attempt sent it back.
        ((retried,),) = read_rows(db, "SELECT COUNT(*) FROM urls WHERE attempts = 2")
        assert sum(times.values()) == 4 * per_thread + int(retried)  # type: ignore[call-overload]
        assert read_rows(db, "SELECT url, attempts FROM urls WHERE attempts NOT IN (1, 2)") == []
        for url, attempts in read_rows(db, "SELECT url, attempts FROM urls"):
            assert times[url] == attempts  # type: ignore[index]


# -- read by a user -----------------------------------------------------------


@pytest.mark.timeout(30)
def test_the_urls_table_has_the_columns_of_every_sql_store(frontier: Frontier, db: Path) -> None:
    """URL_COLUMNS, in their order, and a host row for each URL: PostgreSQL's tables are the same."""
    frontier.add(["http://a.test/"])
    frontier.flush()
    assert [name for (name,) in read_rows(db, "SELECT name FROM pragma_table_info('urls')")] == URL_COLUMNS
    assert read_rows(db, "SELECT urls.url, hosts.origin FROM urls JOIN hosts ON hosts.id = urls.host_id") == [
        ("http://a.test/", "http://a.test")]


@pytest.mark.timeout(30)
def test_the_table_as_a_user_reads_it(frontier: Frontier, db: Path, clock: FakeClock) -> None:
    frontier.add(["http://a.test/"], priority=1)
    frontier.add(["http://a.test/about", "http://b.test/"], depth=1, parent="http://a.test/")
    item, *_ = frontier.claim(3)
    frontier.complete(item.url, 200)
    frontier.flush()
    # While the crawler holds the file open (WAL: readers never wait for it).
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    columns = [row["name"] for row in conn.execute("PRAGMA table_info(urls)")]
    assert columns[:11] == ["url", "state", "attempts", "depth", "priority", "parent", "status", "error",
                            "discovered_at", "fetched_at", "next_attempt_at"]
    types = {row["name"]: row["type"] for row in conn.execute("PRAGMA table_info(urls)")}
    assert [types[c] for c in columns[:11]] == ["TEXT", "TEXT", "INTEGER", "INTEGER", "INTEGER", "TEXT",
                                                "INTEGER", "TEXT", "REAL", "REAL", "REAL"]
    done = conn.execute("SELECT * FROM urls WHERE state = 'done'").fetchone()
    assert (done["url"], done["status"], done["fetched_at"], done["depth"]) == ("http://a.test/", 200, clock.now, 0)
    children = conn.execute("SELECT url FROM urls WHERE parent = ? ORDER BY url", ("http://a.test/",)).fetchall()
    assert [r["url"] for r in children] == ["http://a.test/about", "http://b.test/"]
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    plan = " ".join(str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + CLAIM_ROWS, (0, "[]", 5, 10, 0)))
    assert "urls_host_queue" in plan and "TEMP B-TREE" not in plan  # each host's queue is an index: no sort
    conn.close()


@pytest.mark.timeout(30)
def test_an_on_page_exception_whose_text_sqlite_cannot_encode_fails_only_its_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message of an on_page exception becomes the page's error text; one holding a lone
    surrogate (a page's bytes decoded with surrogateescape) ends that page 'error', its text
    escaped, and the crawl goes on to its end, instead of dying with UnicodeEncodeError in fail()."""
    db = tmp_path / "crawl.sqlite"
    # The crawl logs the exception, surrogate and all, and pytest-xdist sends a test's captured log
    # to its controller as UTF-8: the record would end the test session, not the crawl.
    monkeypatch.setattr(logging.getLogger("niofetcher"), "disabled", True)

    title = b"caf\xe9".decode("utf-8", "surrogateescape")

    def explode(page: CrawledPage) -> None:
        if page.url.endswith("/page/3"):
            raise ValueError(f"cannot handle title {title}")

    with TestSite(hosts=1, pages=10, max_seconds=30) as site:
        summary = Crawler(CrawlConfig(seeds=[site.base_urls[0]], db_path=str(db)), explode).run()
        bad = site.base_urls[0] + "page/3"
    assert summary.errors == {"on_page_failed": 1}
    assert summary.counts["waiting"] == summary.counts["processing"] == 0 and summary.counts["error"] == 1
    with Frontier(db) as frontier:
        entry = frontier.lookup(bad)
    assert entry is not None and entry.state == "error"
    assert entry.error == "ValueError: cannot handle title caf\\udce9"

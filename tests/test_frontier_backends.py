"""One frontier suite for every backend: the SQLite ``Frontier`` and the ``PostgresFrontier`` keep
the promises of ``niofetcher/crawl/frontier/base.py`` alike (issue 12, item 5d).

Each test gets a ``backend``: a fresh frontier file, or a fresh crawl (a schema) in the one
throwaway PostgreSQL cluster of the session (``pg_cluster.py``); ``backend.open()`` opens the
frontier, ``backend.rows(sql)`` reads the tables as a user would, through a connection of its
own -- the same SQL on both, which is the point of the one table shape.  Time is a fake clock.
The SQLite frontier commits every outcome at once here (``commit_every=1``), as the PostgreSQL
one always does outside ``batch()``: what a second reader sees is then the same.

The SQLite-only and PostgreSQL-only rules (files that cannot be opened, the statements a batch
costs, the parked hosts' walks) stay in tests/test_frontier*.py; PostgreSQL's own are at the end.
"""

from __future__ import annotations

import itertools
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from test_frontier import FakeClock

from niofetcher.crawl.frontier import STATES, Frontier, FrontierError, FrontierLocked, FrontierURL
from niofetcher.testing import PostgresCluster

pytest_plugins = ["pg_cluster"]
pytestmark = pytest.mark.timeout(60)

_crawl_names = itertools.count()


class Backend:
    """A place for one test's frontier, and a user's view of its tables."""

    name = ""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.opened: list[Any] = []

    def open(self, **kwargs: Any) -> Any:
        kwargs.setdefault("clock", self.clock)
        frontier = self._open(**kwargs)
        self.opened.append(frontier)
        return frontier

    def _open(self, **kwargs: Any) -> Any:
        raise NotImplementedError

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """What a user's query gives, through a connection of its own (what is committed)."""
        raise NotImplementedError

    def columns(self, table: str) -> list[str]:
        """The names of ``table``'s columns, in their order."""
        raise NotImplementedError

    def crash(self, frontier: Any) -> None:
        """End ``frontier`` as a killed process does: its connection gone, nothing committed."""
        raise NotImplementedError

    def close_all(self) -> None:
        for frontier in self.opened:
            if not frontier.closed:
                frontier.close()


class SQLiteBackend(Backend):
    name = "sqlite"

    def __init__(self, clock: FakeClock, path: Path) -> None:
        super().__init__(clock)
        self.path = path
        self.integrity_errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)

    def _open(self, **kwargs: Any) -> Any:
        kwargs.setdefault("commit_every", 1)
        return Frontier(self.path, **kwargs)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.path)
        try:
            with conn:
                return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def columns(self, table: str) -> list[str]:
        return [name for (name,) in self.rows(f"SELECT name FROM pragma_table_info('{table}')")]

    def crash(self, frontier: Any) -> None:
        conn, frontier._conn = frontier._conn, None
        conn.close()
        frontier._let_go()


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, clock: FakeClock, dsn: str) -> None:
        super().__init__(clock)
        import psycopg

        self.psycopg = psycopg
        self.dsn = dsn
        self.crawl = f"test_{next(_crawl_names)}_{int(time.time() * 1000) % 10**9}"
        self.integrity_errors = (psycopg.errors.CheckViolation,)

    def _open(self, **kwargs: Any) -> Any:
        from niofetcher.crawl.frontier.postgres import PostgresFrontier

        return PostgresFrontier(self.dsn, self.crawl, **kwargs)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {self.crawl}")
            cursor = conn.execute(sql)  # type: ignore[call-overload]
            return cursor.fetchall() if cursor.description is not None else []

    def columns(self, table: str) -> list[str]:
        return [name for (name,) in self.rows(
            "SELECT column_name FROM information_schema.columns"
            f" WHERE table_schema = '{self.crawl}' AND table_name = '{table}' ORDER BY ordinal_position")]

    def crash(self, frontier: Any) -> None:
        conn, frontier._conn = frontier._conn, None
        conn.close()  # the open transaction is rolled back by the server; the lock goes with the session


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> Iterator[Backend]:
    made: Backend
    if request.param == "sqlite":
        made = SQLiteBackend(clock, tmp_path / "crawl.db")
    else:
        made = PostgresBackend(clock, request.getfixturevalue("postgres_dsn"))
    try:
        yield made
    finally:
        made.close_all()


@pytest.fixture
def frontier(backend: Backend) -> Any:
    return backend.open(max_attempts=3, retry_delay=1.0, max_retry_delay=300.0)


# -- helpers ------------------------------------------------------------------


def urls(n: int, host: str = "a.test") -> list[str]:
    return [f"http://{host}/page/{i}" for i in range(n)]


def clustered(hosts: str, per_host: int) -> list[str]:
    """Links as a page lists them: all of one host, then all of the next."""
    return [f"http://{host}.test/{i}" for host in hosts for i in range(per_host)]


def assert_consistent(frontier: Any, backend: Backend) -> dict[str, int]:
    """Every URL in exactly one of the four states, and counts() agreeing with the table."""
    counts: dict[str, int] = frontier.counts()
    assert set(counts) == set(STATES)
    assert backend.rows("SELECT COUNT(*) FROM urls WHERE state NOT IN ('waiting', 'processing', 'done', 'error')") \
        == [(0,)]
    ((total, distinct),) = backend.rows("SELECT COUNT(*), COUNT(DISTINCT url) FROM urls")
    assert total == distinct == sum(counts.values())
    on_table = dict.fromkeys(STATES, 0)
    on_table.update(backend.rows("SELECT state, COUNT(*) FROM urls GROUP BY state"))
    assert counts == on_table
    assert backend.rows("SELECT COUNT(*) FROM urls WHERE state = 'waiting' AND next_attempt_at IS NULL") == [(0,)]
    assert backend.rows(
        "SELECT COUNT(*) FROM urls WHERE state IN ('done', 'error') AND next_attempt_at IS NOT NULL") == [(0,)]
    return counts


def claim_all(frontier: Any, batch: int = 7) -> list[FrontierURL]:
    out: list[FrontierURL] = []
    while claimed := frontier.claim(batch):
        out.extend(claimed)
    return out


# -- the life of a URL --------------------------------------------------------


def test_life_of_a_url_every_url_in_exactly_one_state(frontier: Any, backend: Backend, clock: FakeClock) -> None:
    assert frontier.counts() == {"waiting": 0, "processing": 0, "done": 0, "error": 0}
    assert frontier.next_due() is None and frontier.min_due_depth() is None
    assert frontier.add(urls(6)) == 6
    assert assert_consistent(frontier, backend) == {"waiting": 6, "processing": 0, "done": 0, "error": 0}
    assert frontier.next_due() == clock.now and frontier.min_due_depth() == 0

    claimed = frontier.claim(4)
    assert [c.url for c in claimed] == urls(4)
    assert all(c.attempts == 1 for c in claimed)
    assert assert_consistent(frontier, backend) == {"waiting": 2, "processing": 4, "done": 0, "error": 0}

    clock.advance(1)
    frontier.complete_many([(claimed[0].url, 200)])
    assert frontier.fail(claimed[1].url, "read_timeout") == "waiting"
    assert frontier.fail(claimed[2].url, "not found", status=404, retry=False) == "error"
    frontier.release([claimed[3].url])
    assert assert_consistent(frontier, backend) == {"waiting": 4, "processing": 0, "done": 1, "error": 1}
    assert frontier.state("HTTP://A.TEST:80/page/0#x") == "done"
    assert frontier.state("http://a.test/unknown") is None and frontier.state("not a url") is None

    rows = {row[0]: row[1:] for row in backend.rows("SELECT url, state, attempts, status, error, fetched_at FROM urls")}
    assert rows["http://a.test/page/0"] == ("done", 1, 200, None, clock.now)
    assert rows["http://a.test/page/1"] == ("waiting", 1, None, "read_timeout", clock.now)
    assert rows["http://a.test/page/2"] == ("error", 1, 404, "not found", clock.now)
    assert rows["http://a.test/page/3"] == ("waiting", 0, None, None, None)
    # The CHECK constraint keeps even a user's UPDATE to the four states.
    with pytest.raises(backend.integrity_errors):  # type: ignore[attr-defined]
        backend.rows("UPDATE urls SET state = 'fetching' WHERE url = 'http://a.test/page/0'")


def test_the_tables_have_the_same_columns(frontier: Any, backend: Backend) -> None:
    """The urls table has the same columns in the same order on both backends: the same queries work."""
    frontier.add(["http://a.test/"])
    assert backend.columns("urls") == ["url", "state", "attempts", "depth", "priority", "parent", "status", "error",
                                       "discovered_at", "fetched_at", "next_attempt_at", "seq", "host_id", "lastmod"]
    assert backend.rows("SELECT urls.url, hosts.origin FROM urls JOIN hosts ON hosts.id = urls.host_id") == [
        ("http://a.test/", "http://a.test")]


def test_outcomes_only_for_claimed_urls(frontier: Any, backend: Backend) -> None:
    frontier.add(urls(2))
    with pytest.raises(ValueError, match="not 'processing'"):
        frontier.complete_many([(urls(1)[0], 200)])  # waiting, not claimed
    with pytest.raises(ValueError, match="not in the frontier"):
        frontier.fail("http://elsewhere.test/", "x")
    (item,) = frontier.claim(1)
    frontier.complete_many([(item.url, 200)])
    with pytest.raises(ValueError, match="'done'"):
        frontier.complete_many([(item.url, 200)])  # twice
    with pytest.raises(ValueError):
        frontier.fail(item.url, "late")
    frontier.release([item.url, "http://elsewhere.test/", "garbage"])  # not processing: left alone
    assert frontier.state(item.url) == "done"
    (item,) = frontier.claim(1)
    frontier.complete_many([("HTTP://a.test:80/page/1#top", 204)])  # any form of a claimed URL
    frontier.add(["http://a.test/f"])
    (fail_me,) = frontier.claim(1)
    assert frontier.fail("HTTP://A.test/f", "boom", retry=False) == "error"
    assert frontier.state(fail_me.url) == "error"
    assert assert_consistent(frontier, backend) == {"waiting": 0, "processing": 0, "done": 2, "error": 1}


def test_complete_many_is_all_or_nothing_with_its_checkpoint(frontier: Any, backend: Backend) -> None:
    frontier.add(urls(5))
    first, second, third, fourth = frontier.claim(4)
    frontier.complete_many([(fourth.url, 200)], {"out": 1})
    with pytest.raises(ValueError, match="not 'processing'"):
        frontier.complete_many([(first.url, 200), (urls(5)[4], 200), (second.url, 200)], {"out": 2})
    assert [frontier.state(u) for u in (first.url, second.url, fourth.url)] == ["processing", "processing", "done"]
    with pytest.raises(ValueError, match="'done'"):
        frontier.complete_many([(second.url, 200), (second.url, 200)], {"out": 3})  # the same URL twice
    assert frontier.state(second.url) == "processing" and frontier.checkpoint() == {"out": 1}
    frontier.complete_many([(first.url, 201), (second.url, 202)], {"out": 4, "warc": 9})
    assert frontier.checkpoint() == {"out": 4, "warc": 9}
    frontier.complete_many([], {"out": 5})  # no outcomes: stored all the same; names not given stay
    assert backend.rows("SELECT name, value FROM checkpoints ORDER BY name") == [("out", 5), ("warc", 9)]
    assert backend.rows("SELECT status FROM urls WHERE state = 'done' ORDER BY seq") == [(201,), (202,), (200,)]
    for bad, error in (({"out": -1}, ValueError), ({"out": True}, TypeError), ({3: 4}, TypeError)):
        with pytest.raises(error):
            frontier.complete_many([(third.url, 200)], bad)
    assert frontier.state(third.url) == "processing"
    assert assert_consistent(frontier, backend) == {"waiting": 1, "processing": 1, "done": 3, "error": 0}


# -- adding -------------------------------------------------------------------


def test_add_counts_new_urls_and_ignores_known_ones_in_any_form(frontier: Any, backend: Backend) -> None:
    assert frontier.add(["http://a.test/x", "http://a.test/y"]) == 2
    assert frontier.add(["HTTP://A.TEST/x", "http://a.test:80/x#frag", "http://a.test/y", "http://a.test/z"]) == 1
    assert frontier.add(["http://a.test/q", "http://a.test/q", "http://A.test/q#1"]) == 1
    assert frontier.add(["ftp://a.test/", "mailto:x@a.test", "/relative", "http://", "http://[::1/"]) == 0
    assert frontier.add([]) == 0
    for item in claim_all(frontier):
        if item.url.endswith("/x"):
            frontier.complete_many([(item.url, 200)])
        else:
            frontier.fail(item.url, "boom", retry=False)
    assert frontier.add(["http://a.test/x", "http://A.TEST/y", "http://a.test/new"]) == 1  # known in any state
    assert assert_consistent(frontier, backend)["waiting"] == 1
    with pytest.raises(TypeError):
        frontier.add("http://a.test/oops")
    with pytest.raises(ValueError):
        frontier.add(["http://a.test/d"], depth=-1)


def test_add_records_depth_parent_priority_and_discovery_time(frontier: Any, backend: Backend, clock: FakeClock) -> None:
    frontier.add(["http://a.test/"])
    clock.advance(5)
    assert frontier.add(["http://a.test/child"], depth=1, parent="HTTP://A.test/", priority=3) == 1
    assert frontier.add_many([("http://b.test/1", 2, "http://a.test/child", 1), ("http://b.test/2", 2, None, 0),
                              ("bogus", 1, None, 0), ("http://b.test/1", 5, None, 9)]) == 2
    rows = {r[0]: r[1:] for r in backend.rows("SELECT url, depth, parent, priority, discovered_at, attempts FROM urls")}
    assert rows == {
        "http://a.test/": (0, None, 0, clock.now - 5, 0),
        "http://a.test/child": (1, "http://a.test/", 3, clock.now, 0),  # the parent is stored normalised
        "http://b.test/1": (2, "http://a.test/child", 1, clock.now, 0),  # the first add wins
        "http://b.test/2": (2, None, 0, clock.now, 0),
    }
    item = next(c for c in frontier.claim(10) if c.url == "http://a.test/child")
    assert item == FrontierURL("http://a.test/child", depth=1, priority=3, attempts=1, parent="http://a.test/")


def test_a_known_url_found_nearer_a_seed_gets_the_smaller_depth_in_any_state(frontier: Any, backend: Backend) -> None:
    def row(url: str) -> tuple[Any, ...]:
        (found,) = backend.rows(f"SELECT depth, parent, state, seq FROM urls WHERE url = '{url}'")
        return found

    names = ["processing", "done", "error", "waiting"]  # claimed in this order
    assert frontier.add([f"http://a.test/{name}" for name in names], depth=5, parent="http://a.test/far") == 4
    claimed = {item.url: item for item in frontier.claim(3)}
    frontier.complete_many([("http://a.test/done", 200)])
    frontier.fail("http://a.test/error", "boom", retry=False)
    seqs = {name: row(f"http://a.test/{name}")[3] for name in names}
    assert frontier.add_many([(f"http://a.test/{name}", 7, "http://a.test/deeper", 0) for name in names]) == 0
    assert {row(f"http://a.test/{name}")[:2] for name in names} == {(5, "http://a.test/far")}
    assert frontier.add_many([("http://a.test/new", 1, "http://a.test/", 0)]
                             + [(f"HTTP://A.test/{name}", 2, "http://a.test/near", 0) for name in names]) == 1
    for name in names:
        assert row(f"http://a.test/{name}") == (2, "http://a.test/near", name, seqs[name])
    assert claimed["http://a.test/processing"].depth == 5
    frontier.release(["http://a.test/processing"])
    assert {item.url: item.depth for item in frontier.claim(10)} == {
        "http://a.test/new": 1, "http://a.test/waiting": 2, "http://a.test/processing": 2}
    # One batch with a URL twice keeps the smaller depth, with its parent.
    assert frontier.add_many([("http://a.test/x", 3, "http://a.test/p3", 0), ("http://a.test/x", 1, "http://a.test/p1", 0),
                              ("http://a.test/x", 2, "http://a.test/p2", 0)]) == 1
    assert row("http://a.test/x")[:2] == (1, "http://a.test/p1")
    assert assert_consistent(frontier, backend)["waiting"] == 1


def test_a_sitemap_lastmod_is_stored_and_handed_back_with_claims(frontier: Any, backend: Backend) -> None:
    """add_many()'s lastmods: a column of urls (NULL for a link), for a new URL or a known one, in
    the claims of every attempt; a URL the frontier would not take is left out, as add_many() does."""
    frontier.add(["http://a.test/known", "http://a.test/link"])
    assert frontier.add_many([("http://a.test/new", 1, "http://a.test/map.xml", 0), ("http://a.test/known", 1, None, 0)],
                             {"HTTP://A.test/new": "2024-01-02", "http://a.test/known": "2024", "bogus": "x"}) == 1
    frontier.add_many([], {"http://a.test/known": "2024-03-04T05:06:07+00:00"})  # listed again, dated anew
    assert sorted(backend.rows("SELECT url, lastmod FROM urls")) == [
        ("http://a.test/known", "2024-03-04T05:06:07+00:00"), ("http://a.test/link", None),
        ("http://a.test/new", "2024-01-02")]
    claimed = {c.url: c.lastmod for c in frontier.claim(10)}
    assert claimed == {"http://a.test/known": "2024-03-04T05:06:07+00:00", "http://a.test/link": None,
                       "http://a.test/new": "2024-01-02"}
    assert frontier.fail("http://a.test/new", "timeout") == "waiting"
    backend.clock.advance(3600)
    assert [(c.url, c.lastmod) for c in frontier.claim(10)] == [("http://a.test/new", "2024-01-02")]


# -- claiming -----------------------------------------------------------------


def test_claim_order_is_priority_then_breadth_first_then_discovery(frontier: Any) -> None:
    frontier.add(["http://a.test/low-1", "http://a.test/low-2"], priority=0)
    frontier.add(["http://a.test/high-1"], priority=5)
    frontier.add(["http://a.test/mid-1", "http://a.test/mid-2"], priority=2)
    frontier.add_many([("http://a.test/high-2", 0, None, 5), ("http://a.test/neg", 0, None, -1),
                       ("http://a.test/low-3", 0, None, 0), ("http://a.test/mid-3", 0, None, 2)])
    assert [c.url for c in frontier.claim(3)] == ["http://a.test/high-1", "http://a.test/high-2", "http://a.test/mid-1"]
    frontier.add(["http://a.test/high-3"], priority=5)  # later, but outranks what waits
    assert [c.url for c in frontier.claim(100)] == [
        "http://a.test/high-3", "http://a.test/mid-2", "http://a.test/mid-3",
        "http://a.test/low-1", "http://a.test/low-2", "http://a.test/low-3", "http://a.test/neg",
    ]
    assert frontier.claim(10) == [] and frontier.claim(0) == []
    with pytest.raises(ValueError):
        frontier.claim(-1)
    frontier.add(["http://b.test/d3-early", "http://b.test/d3-moved"], depth=3)
    frontier.add(["http://b.test/d2"], depth=2)
    frontier.add(["http://b.test/d1-a", "http://b.test/d1-b"], depth=1)
    frontier.add(["http://b.test/d4-urgent"], depth=4, priority=1)
    frontier.add(["http://b.test/d3-moved"], depth=1)  # found again, nearer
    assert frontier.min_due_depth() == 1
    assert [(c.url, c.depth) for c in frontier.claim(3)] == [
        ("http://b.test/d4-urgent", 4), ("http://b.test/d3-moved", 1), ("http://b.test/d1-a", 1)]
    assert [(c.url, c.depth) for c in frontier.claim(10, max_depth=2)] == [("http://b.test/d1-b", 1), ("http://b.test/d2", 2)]
    assert frontier.min_due_depth() == 3
    assert [c.url for c in frontier.claim(10)] == ["http://b.test/d3-early"]


def test_claim_never_hands_out_a_url_twice(frontier: Any, backend: Backend) -> None:
    rng = random.Random(7)
    frontier.add_many((f"http://h{i % 13}.test/{i}", 0, None, rng.randrange(4)) for i in range(1500))
    seen: Counter[str] = Counter()
    while claimed := frontier.claim(rng.randrange(1, 60)):
        seen.update(c.url for c in claimed)
        with frontier.batch():
            done = []
            for c in claimed:
                r = rng.random()
                if r < 0.1:
                    frontier.fail(c.url, "read_timeout", retry=False)
                elif r < 0.2:
                    frontier.release([c.url])  # comes back, and may be claimed again
                    seen[c.url] -= 1
                else:
                    done.append((c.url, 200))
            frontier.complete_many(done)
            frontier.add(f"http://h0.test/{rng.randrange(3000)}" for _ in range(5))  # some new, some known
    assert max(seen.values()) == 1
    counts = assert_consistent(frontier, backend)
    assert counts["waiting"] == counts["processing"] == 0
    assert sum(seen.values()) == counts["done"] + counts["error"]


# -- hosts --------------------------------------------------------------------


def check_hosts_in_turn_with_room(frontier: Any) -> None:
    """Hosts in turn, each capped by host_room; a host without room keeps its URLs for later."""
    frontier.add(clustered("abcd", 5))
    claimed = [c.url for c in frontier.claim(6)]
    assert claimed == ["http://a.test/0", "http://b.test/0", "http://c.test/0", "http://d.test/0",
                       "http://a.test/1", "http://b.test/1"]
    # The next claim goes on with the hosts in turn, each FIFO (c.test and d.test gave a URL each too).
    assert [c.url for c in frontier.claim(2)] == ["http://a.test/2", "http://b.test/2"]
    room = {"http://a.test": 0, "http://b.test": 1, "http://c.test": 3, "http://d.test": 2}
    claimed_hosts = Counter(c.host for c in frontier.claim(100, host_room=room.__getitem__))
    assert claimed_hosts == {"http://b.test": 1, "http://c.test": 3, "http://d.test": 2}
    again = frontier.claim(100, host_room=lambda host: 2 if host == "http://a.test" else 0)
    assert [c.url for c in again] == ["http://a.test/3", "http://a.test/4"]


def test_a_claim_takes_the_hosts_in_turn_each_as_host_room_allows(frontier: Any) -> None:
    check_hosts_in_turn_with_room(frontier)
    assert frontier.counts()["waiting"] == 20 - 16


def test_the_host_check_can_fail(frontier: Any) -> None:
    """Negative control: a frontier whose claim ignores host_room fails the check above."""
    claim = frontier.claim
    frontier.claim = lambda limit, max_depth=None, host_room=None: claim(limit, max_depth)
    with pytest.raises(AssertionError):
        check_hosts_in_turn_with_room(frontier)


def test_a_short_claim_asks_the_hosts_with_more_again(frontier: Any) -> None:
    frontier.add(["http://a.test/only"] + clustered("b", 30) + clustered("c", 30))
    assert Counter(c.host for c in frontier.claim(41)) == {"http://a.test": 1, "http://b.test": 20, "http://c.test": 20}


def test_priority_first_across_hosts_then_turns(frontier: Any) -> None:
    frontier.add(clustered("ab", 3))
    frontier.add(["http://z.test/urgent"], priority=5)  # a host found last, with a higher priority
    frontier.add(["http://b.test/soon"], priority=1)
    assert [c.url for c in frontier.claim(3)] == ["http://z.test/urgent", "http://b.test/soon", "http://a.test/0"]
    assert [c.url for c in frontier.claim(10)] == [
        "http://a.test/1", "http://b.test/0", "http://a.test/2", "http://b.test/1", "http://b.test/2"]


def test_a_host_comes_back_in_line_whenever_a_url_of_it_waits_again(backend: Backend, clock: FakeClock) -> None:
    """Released, retried, added again, or after a reopen: no host with a waiting URL is left out."""
    frontier = backend.open(retry_delay=1.0)
    frontier.add(["http://a.test/1", "http://b.test/1", "http://c.test/1"])
    a, b, _c = frontier.claim(10)
    assert frontier.claim(10) == []
    frontier.release([a.url])
    frontier.fail(b.url, "connect_error")
    frontier.add(["http://d.test/1"])
    clock.advance(2)
    assert sorted(u.url for u in frontier.claim(10)) == ["http://a.test/1", "http://b.test/1", "http://d.test/1"]
    frontier.add(["http://e.test/1", "http://e.test/2"])
    frontier.close()
    frontier = backend.open()  # the claimed ones were left processing
    assert sorted(u.url for u in frontier.claim(10)) == [
        "http://a.test/1", "http://b.test/1", "http://c.test/1", "http://d.test/1", "http://e.test/1", "http://e.test/2"]


def test_hosts_whose_urls_are_not_due_or_too_deep_wait_in_line(backend: Backend, clock: FakeClock) -> None:
    frontier = backend.open(retry_delay=10.0)
    frontier.add(["http://a.test/hi"], priority=5)
    (hi,) = frontier.claim(1)
    frontier.fail(hi.url, "http_503")  # waits 10 s, priority 5
    frontier.add(["http://a.test/lo0", "http://a.test/lo1"], priority=0)
    frontier.add(["http://b.test/x"], priority=3)
    assert sorted(c.url for c in frontier.claim(10)) == ["http://a.test/lo0", "http://a.test/lo1", "http://b.test/x"]
    frontier.add(["http://b.test/y"], priority=3)
    clock.advance(11)
    assert [(c.url, c.priority) for c in frontier.claim(1)] == [("http://a.test/hi", 5)]
    # A depth limit: hosts with nothing as shallow wait for a claim that goes deeper, or new URLs.
    frontier.add_many((f"http://deep.test/{i}", 3, None, 0) for i in range(50))
    assert [c.url for c in frontier.claim(10, max_depth=1)] == ["http://b.test/y"]
    assert frontier.claim(10, max_depth=1) == []
    frontier.add(["http://deep.test/shallow"], depth=1)
    assert [c.url for c in frontier.claim(10, max_depth=1)] == ["http://deep.test/shallow"]
    assert frontier.claim(10, max_depth=2) == []
    assert len(frontier.claim(10, max_depth=3)) == 10


def test_a_host_room_that_raises_loses_no_host(frontier: Any) -> None:
    frontier.add(["http://a.test/0", "http://b.test/0", "http://c.test/0"])

    def room(host: str) -> int:
        if host == "http://b.test":
            raise KeyError(host)
        return 5

    with pytest.raises(KeyError):
        frontier.claim(10, host_room=room)
    assert frontier.counts()["processing"] == 0
    assert sorted(c.url for c in frontier.claim(10)) == ["http://a.test/0", "http://b.test/0", "http://c.test/0"]


# -- failures and retries -----------------------------------------------------


def test_retry_delays_grow_and_are_capped_and_end_in_error(backend: Backend, clock: FakeClock) -> None:
    frontier = backend.open(max_attempts=7, retry_delay=2.0, max_retry_delay=20.0)
    frontier.add(["http://a.test/flaky"])
    delays = []
    for attempt in range(1, 7):
        (item,) = frontier.claim(5)
        assert item.attempts == attempt
        assert frontier.fail(item.url, "read_timeout", status=None) == "waiting"
        due = frontier.next_due()
        delays.append(due - clock.now)
        clock.advance(due - clock.now - 0.001)
        assert frontier.claim(5) == [] and frontier.min_due_depth() is None  # not due yet
        clock.advance(0.001)
    assert delays == [2.0, 4.0, 8.0, 16.0, 20.0, 20.0]
    (item,) = frontier.claim(5)
    assert item.attempts == 7
    assert frontier.fail(item.url, "read_timeout") == "error"
    assert frontier.next_due() is None
    assert backend.rows("SELECT state, attempts, error, next_attempt_at FROM urls") == [("error", 7, "read_timeout", None)]


def test_retry_after_is_honoured_and_a_retried_url_keeps_its_place(frontier: Any, clock: FakeClock) -> None:
    frontier.add(["http://a.test/busy", "http://a.test/other", "http://a.test/third"])
    busy, other = frontier.claim(2)
    assert frontier.fail(busy.url, "service unavailable", status=503, retry_after=120.0) == "waiting"
    assert frontier.fail(other.url, "too many requests", status=429, retry_after=0.25) == "waiting"
    clock.advance(1.0)
    assert [c.url for c in frontier.claim(5)] == [other.url, "http://a.test/third"]  # in its place, before third
    assert frontier.next_due() == clock.now - 1.0 + 120.0
    clock.advance(119)
    (again,) = frontier.claim(5)
    assert again.url == busy.url and again.attempts == 2
    assert frontier.fail(busy.url, "service unavailable", status=503, retry_after=1000.0) == "waiting"
    assert frontier.next_due() == clock.now + 1000.0  # a server's Retry-After beats the cap


def test_release_does_not_count_the_attempt(frontier: Any, backend: Backend) -> None:
    frontier.add(urls(3))
    claimed = frontier.claim(3)
    frontier.release(c.url for c in claimed[:2])
    assert assert_consistent(frontier, backend) == {"waiting": 2, "processing": 1, "done": 0, "error": 0}
    assert backend.rows("SELECT attempts FROM urls WHERE state = 'waiting'") == [(0,), (0,)]
    again = frontier.claim(3)
    assert [c.url for c in again] == [c.url for c in claimed[:2]] and [c.attempts for c in again] == [1, 1]
    with pytest.raises(TypeError):
        frontier.release("http://a.test/page/0")


# -- batches ------------------------------------------------------------------


def test_a_call_refused_inside_a_batch_rolls_the_batch_back(frontier: Any, backend: Backend) -> None:
    frontier.add(["http://a.test/0", "http://b.test/0"])
    with pytest.raises(ValueError), frontier.batch():
        frontier.add(["http://a.test/1", "http://a.test/2"])
        assert len(frontier.claim(10)) == 4
        assert frontier.claim(10) == []  # the hosts turn out empty
        frontier.complete_many([("http://c.test/unknown", 200)])
    assert assert_consistent(frontier, backend) == {"waiting": 2, "processing": 0, "done": 0, "error": 0}
    assert frontier.add(["http://a.test/1"]) == 1  # rolled back: new again
    assert sorted(c.url for c in frontier.claim(10)) == ["http://a.test/0", "http://a.test/1", "http://b.test/0"]


def test_a_batch_commits_once_at_its_end(frontier: Any, backend: Backend) -> None:
    frontier.add(urls(3))
    first, second, third = frontier.claim(3)
    with frontier.batch():
        frontier.fail(first.url, "HTTP 404", status=404, retry=False)
        frontier.complete_many([(second.url, 200)], {"out": 7})
        assert backend.rows("SELECT COUNT(*) FROM urls WHERE state = 'processing'") == [(3,)]  # nothing seen yet
    assert backend.rows("SELECT state, COUNT(*) FROM urls GROUP BY state ORDER BY state") == [
        ("done", 1), ("error", 1), ("processing", 1)]
    # A block that raises by itself commits nothing on its way out; the next commit does.
    with pytest.raises(KeyError), frontier.batch():
        frontier.complete_many([(third.url, 200)], {"out": 8})
        raise KeyError("the caller's own")
    assert backend.rows("SELECT value FROM checkpoints") == [(7,)]
    assert frontier.checkpoint() == {"out": 8}
    assert assert_consistent(frontier, backend) == {"waiting": 0, "processing": 0, "done": 2, "error": 1}


# -- reopening and crashes ----------------------------------------------------


def test_a_crashed_run_resumes_with_its_processing_urls_waiting(backend: Backend, clock: FakeClock) -> None:
    frontier = backend.open()
    frontier.add(urls(10))
    claimed = frontier.claim(6)
    frontier.complete_many([(claimed[0].url, 200), (claimed[1].url, 200)], {"out": 2})
    batch = frontier.batch()
    batch.__enter__()  # a batch that never ends: the process dies in it
    frontier.complete_many([(claimed[2].url, 200)], {"out": 3})
    backend.crash(frontier)
    with pytest.raises(FrontierError):  # the crashed one is unusable
        frontier.counts()
    frontier = backend.open()
    states = dict(backend.rows("SELECT url, state FROM urls"))
    assert [states[u] for u in urls(10)] == ["done"] * 2 + ["waiting"] * 8
    assert frontier.checkpoint() == {"out": 2}
    assert assert_consistent(frontier, backend)["processing"] == 0
    # The interrupted attempts still count (they may have reached the server).
    assert backend.rows("SELECT attempts FROM urls WHERE url = 'http://a.test/page/4'") == [(1,)]
    assert [c.url for c in claim_all(frontier)] == urls(10)[2:]  # in their old order


def test_a_second_opener_is_refused_or_shares_by_host_and_changes_nothing(backend: Backend) -> None:
    """SQLite: one process per file.  PostgreSQL: a second worker joins, and takes none of the first
    one's hosts until that one gives them back (closing)."""
    frontier = backend.open()
    frontier.add(urls(2))
    frontier.claim(1)
    if backend.name == "sqlite":
        with pytest.raises(FrontierLocked, match="in use by another crawl"):
            backend.open()
    else:
        second = backend.open()
        assert second.claim(10) == [] and not second.holds("http://a.test")
        assert frontier.holds("http://a.test")
        with pytest.raises(ValueError, match="another worker's claim"):
            second.complete_many([(urls(1)[0], 200)])
    assert frontier.counts() == {"waiting": 1, "processing": 1, "done": 0, "error": 0}
    assert backend.rows("SELECT COUNT(*) FROM urls WHERE state = 'processing'") == [(1,)]
    frontier.close()
    frontier.close()  # twice is fine
    assert backend.open().counts() == {"waiting": 2, "processing": 0, "done": 0, "error": 0}


# -- PostgreSQL's own ---------------------------------------------------------


KILLED_WORKER = """
import os, signal, sys
from niofetcher.crawl.frontier.postgres import PostgresFrontier
f = PostgresFrontier(sys.argv[1], sys.argv[2])
f.add(["http://a.test/%d" % i for i in range(10)])
claimed = f.claim(4)
f.complete_many([(claimed[0].url, 200)])
with f.batch():
    f.complete_many([(claimed[1].url, 200)])
    print("claimed", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def postgres_only(backend: Backend) -> PostgresBackend:
    if not isinstance(backend, PostgresBackend):
        pytest.skip("PostgreSQL only")
    return backend


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_killed_worker_lets_go_of_the_crawl_and_its_urls_wait_again(backend: Backend) -> None:
    pg = postgres_only(backend)
    done = subprocess.run([sys.executable, "-c", KILLED_WORKER, pg.dsn, pg.crawl], capture_output=True, text=True,
                          timeout=50, check=False)
    assert done.returncode == -signal.SIGKILL and done.stdout == "claimed\n", done.stderr
    deadline = time.monotonic() + 10
    while True:  # the server ends the dead one's session when it sees the socket closed
        try:
            frontier = pg.open()
            break
        except FrontierLocked:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert frontier.counts() == {"waiting": 9, "processing": 0, "done": 1, "error": 0}
    assert pg.rows("SELECT attempts FROM urls WHERE url = 'http://a.test/1'") == [(1,)]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_version_2_crawl_gets_the_lastmod_column_when_opened(backend: Backend) -> None:
    pg = postgres_only(backend)
    with pg.open() as frontier:
        frontier.add(["http://a.test/", "http://b.test/"])
    pg.rows("ALTER TABLE urls DROP COLUMN lastmod")  # the crawl as version 2 made it
    pg.rows("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    rows = "SELECT url, state, depth, seq, host_id FROM urls ORDER BY url"
    kept = pg.rows(rows)
    with pg.open() as frontier:
        frontier.add_many([], {"http://b.test/": "2024-05-06"})
        assert {c.url: c.lastmod for c in frontier.claim(10)} == {"http://a.test/": None, "http://b.test/": "2024-05-06"}
    assert pg.rows("SELECT value FROM meta WHERE key = 'schema_version'") == [("3",)]
    assert len(kept) == 2 and [row[:1] + row[2:] for row in pg.rows(rows)] == [row[:1] + row[2:] for row in kept]
    assert pg.columns("urls")[-1] == "lastmod"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_what_cannot_be_used_is_one_line_of_error(backend: Backend) -> None:
    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    pg = postgres_only(backend)
    port = pg.dsn.rsplit(":", 1)[1].split("/")[0]
    with pytest.raises(FrontierError) as refused:
        PostgresFrontier("postgresql://postgres:secret@127.0.0.1:1/postgres", "x", connect_timeout=2)
    assert "127.0.0.1:1/postgres" in str(refused.value) and "\n" not in str(refused.value)
    assert "secret" not in str(refused.value)
    with pytest.raises(FrontierError, match="does not exist"):
        PostgresFrontier(f"postgresql://postgres@127.0.0.1:{port}/nosuchdb", "x")
    for bad in ("a b", "a.b", "pg_x", "PG_x", "public", "", "x" * 64):  # "Upper", "1st" and "a-b" are names now
        with pytest.raises(ValueError, match="crawl name"):
            PostgresFrontier(pg.dsn, bad)
    pg.rows(f"CREATE SCHEMA {pg.crawl}")
    pg.rows(f"CREATE TABLE {pg.crawl}.other (x int)")
    with pytest.raises(FrontierError, match="not a niofetcher frontier"):
        pg.open()
    # A statement that fails (here: the server cancels it) is one line too, and the frontier
    # carries on from its last commit.
    name = f"{pg.crawl}_b"
    with PostgresFrontier(pg.dsn, name, statement_timeout=0.2) as frontier:
        frontier.add(["http://a.test/"])
        assert frontier._conn is not None
        with pytest.raises(FrontierError, match="statement timeout") as slow, frontier._db() as conn:
            conn.execute("SELECT pg_sleep(2)")
        assert "\n" not in str(slow.value)
        assert frontier.counts()["waiting"] == 1 and [c.url for c in frontier.claim(5)] == ["http://a.test/"]


def test_the_throwaway_cluster_leaves_nothing_behind(postgres_dsn: str) -> None:  # skipped where it cannot run
    with PostgresCluster() as cluster:
        assert cluster.directory is not None
        directory, server = cluster.directory, cluster._server
        assert server is not None and server.poll() is None
    assert server.poll() is not None and not directory.exists()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_lost_connection_is_one_line_of_error_and_a_reopen_carries_on(backend: Backend) -> None:
    pg = postgres_only(backend)
    frontier = pg.open()
    frontier.add(urls(3))
    (claimed,) = frontier.claim(1)
    assert pg.rows(f"SELECT pg_terminate_backend({frontier._conn.info.backend_pid})") == [(True,)]
    with pytest.raises(FrontierError) as lost:
        frontier.next_due()
    assert "\n" not in str(lost.value) and pg.crawl in str(lost.value), lost.value
    frontier.close()  # nothing to commit on a lost connection: no second error
    reopened = pg.open()
    assert reopened.counts() == {"waiting": 3, "processing": 0, "done": 0, "error": 0}
    assert pg.rows(f"SELECT attempts FROM urls WHERE url = '{claimed.url}'") == [(1,)]


# -- between workers: one connection each, the races made to happen -------------


def wait_for_lock(pg: PostgresBackend, frontier: Any, call: Future[Any]) -> None:
    """Until ``frontier``'s statement in ``call`` (another thread) waits for a row lock, or ``call`` ended."""
    pid = frontier._conn.info.backend_pid
    deadline = time.monotonic() + 20
    while pg.rows(f"SELECT wait_event_type FROM pg_stat_activity WHERE pid = {pid}") != [("Lock",)]:
        if call.done():
            return
        assert time.monotonic() < deadline, "the statement never waited"
        time.sleep(0.01)


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_links_to_a_host_another_worker_is_adding_at_the_same_time_are_not_lost(backend: Backend) -> None:
    """Two workers add the first URLs of one new host at once: the second one's host row loses
    the race (it waits for the first one's insert), and its URLs must still go in."""
    pg = postgres_only(backend)
    first, second = pg.open(), pg.open()
    with ThreadPoolExecutor(1) as pool:
        with first.batch():
            assert first.add(["http://new.test/1"]) == 1
            adding = pool.submit(second.add, ["http://new.test/2", "http://new.test/3"])
            wait_for_lock(pg, second, adding)
        assert adding.result(timeout=20) == 2
    assert pg.rows("SELECT url FROM urls ORDER BY url") == [
        ("http://new.test/1",), ("http://new.test/2",), ("http://new.test/3",)]
    assert pg.rows("SELECT COUNT(*) FROM hosts") == [(1,)]
    assert assert_consistent(second, pg)["waiting"] == 3


def late_outcome(frontier: Any, url: str, outcome: str) -> None:
    if outcome == "complete":
        frontier.complete_many([(url, 200)])
    elif outcome == "fail":
        frontier.fail(url, "no retry", retry=False)
    else:
        frontier.release([url])


@pytest.mark.parametrize("outcome", ["complete", "fail", "release"])
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_an_outcome_that_waited_for_a_takeover_is_refused(backend: Backend, outcome: str) -> None:
    """The old owner's outcome is sent while the new owner's takeover (and its claim of the same
    URL again) is not committed yet, and waits for it: once it is, the outcome must be refused --
    not judged by the host as the statement first saw it."""
    pg = postgres_only(backend)
    old = pg.open()
    old.add(urls(1))
    (url,) = old.claim(1)
    new = pg.open()
    pg.rows("UPDATE hosts SET lease_until = 0")  # the old owner stalled past its lease
    new._take_soon = True
    with ThreadPoolExecutor(1) as pool:
        with new.batch():
            assert [c.url for c in new.claim(5)] == [url.url]  # taken over, recovered, claimed again
            late = pool.submit(late_outcome, old, url.url, outcome)
            wait_for_lock(pg, old, late)
        late.result(timeout=20)
    assert old.refused == 1
    assert pg.rows("SELECT state, attempts FROM urls") == [("processing", 2)]
    new.complete_many([(url.url, 200)])
    assert new.refused == 0 and assert_consistent(new, pg)["done"] == 1


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_takeover_and_the_old_owners_renewal_do_not_deadlock(backend: Backend) -> None:
    """The old owner completes a URL in a batch and, in the same batch, renews its lease, while
    another worker takes the host over (its lease ran out on the server) and recovers that URL:
    the two must not wait for each other."""
    pg = postgres_only(backend)
    old = pg.open()
    old.add(urls(2))
    first, _second = old.claim(2)
    new = pg.open()
    pg.rows("UPDATE hosts SET lease_until = 0")
    new._take_soon = True
    with ThreadPoolExecutor(1) as pool:
        with old.batch():
            old.complete_many([(first.url, 200)])
            taking = pool.submit(new.claim, 5)
            wait_for_lock(pg, new, taking)
            old._renew_at = 0.0  # a renewal is due
            assert old.lost_hosts() == []
        assert taking.result(timeout=20) == []
    assert old.refused == 0 and old.holds("http://a.test")
    assert assert_consistent(old, pg) == {"waiting": 0, "processing": 1, "done": 1, "error": 0}


def test_recordable_names_the_claims_whose_outcomes_will_count(frontier: Any, backend: Backend) -> None:
    """All of them while nothing changed hands (the only case on SQLite), in the order given."""
    frontier.add(urls(3))
    claimed = [item.url for item in frontier.claim(3)]
    with frontier.batch():
        assert frontier.recordable(reversed(claimed)) == list(reversed(claimed))
        frontier.complete_many([(url, 200) for url in claimed])
    assert assert_consistent(frontier, backend)["done"] == 3


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_recordable_leaves_out_a_host_taken_over_and_holds_its_answer_until_the_batch_ends(
    backend: Backend,
) -> None:
    """A host another worker took over: its claims are not recordable, and their outcomes are refused.
    One recordable inside a batch stays this worker's until the batch commits: a taker skips it."""
    pg = postgres_only(backend)
    old = pg.open()
    old.add(urls(1, "a.test") + urls(1, "b.test"))
    a, b = sorted(item.url for item in old.claim(5))
    pg.rows("UPDATE hosts SET lease_until = 0 WHERE origin = 'http://b.test'")  # b's lease ran out on the server
    new = pg.open()
    assert [item.url for item in new.claim(5)] == [b]  # taken over, recovered, claimed again
    pg.rows("UPDATE hosts SET lease_until = 0 WHERE origin = 'http://a.test'")
    new.add(urls(1, "c.test"))  # a free host, so that a fair share lets the new worker take one more
    new._take_soon = True
    with old.batch():
        assert old.recordable([a, b]) == [a]
        with ThreadPoolExecutor(1) as pool:  # a, expired, would come first: locked, it is skipped
            assert [item.url for item in pool.submit(new.claim, 5).result(timeout=20)] == urls(1, "c.test")
        old.complete_many([(a, 200), (b, 200)])
    assert old.refused == 1
    assert pg.rows("SELECT url, state FROM urls ORDER BY url") == [(a, "done"), (b, "processing"),
                                                                  (urls(1, "c.test")[0], "processing")]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_long_add_goes_in_as_several_statements_and_adds_the_same(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut into statements of _INSERT_ROWS URLs (so that a million seeds do not outlive the
    statement_timeout): the same URLs, depths and hosts as one statement gives."""
    import niofetcher.crawl.frontier.postgres.frontier as postgres_module

    pg = postgres_only(backend)
    monkeypatch.setattr(postgres_module, "_INSERT_ROWS", 3)
    frontier = pg.open()
    entries = [(url, 2, None, 0) for url in clustered("abc", 3)] + [("http://a.test/0", 1, None, 0),
                                                                      ("http://d.test/0", 0, None, 0)]
    assert frontier.add_many(entries) == 10
    assert frontier.add_many(entries) == 0
    assert pg.rows("SELECT COUNT(*), COUNT(DISTINCT host_id), MIN(depth) FROM urls") == [(10, 4, 0)]
    assert pg.rows("SELECT depth FROM urls WHERE url = 'http://a.test/0'") == [(1,)]
    assert pg.rows("SELECT COUNT(*) FROM hosts") == [(4,)]
    assert assert_consistent(frontier, backend)["waiting"] == 10


def test_failures_are_the_first_errors_since_a_time_with_why(frontier: Any, clock: FakeClock) -> None:
    frontier.add(urls(4))
    first, second, third, fourth = frontier.claim(4)
    frontier.fail(first.url, "before the run", retry=False)
    clock.advance(10)
    since = clock()
    frontier.fail(second.url, "HTTP 404 Not Found", status=404, retry=False)
    frontier.fail(third.url, "timeout", retry=True)  # waits again: not a failure of the run
    clock.advance(1)
    frontier.fail(fourth.url, "connection refused", retry=False)
    assert frontier.failures(since, 5) == [(second.url, "HTTP 404 Not Found"), (fourth.url, "connection refused")]
    assert frontier.failures(since, 1) == [(second.url, "HTTP 404 Not Found")]

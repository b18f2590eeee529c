"""The PostgreSQL frontier's own rules, beyond the contract every store keeps
(tests/test_frontier_backends.py): its tables as a user's SQL reads them, an older crawl's
upgrade, what cannot be used, a killed worker, a lost connection, and the races between workers
-- one connection each, the races made to happen.

Each test gets ``pg``: a fresh crawl (a schema) in the one throwaway PostgreSQL cluster of the
session (``pg_cluster.py``), opened by ``pg.open()`` as in the contract suite, and read by
``pg.rows(sql)`` through a connection of its own, as a user would.  Time is a fake clock.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from test_frontier import URL_COLUMNS, FakeClock
from test_frontier_backends import PostgresStore, clustered, urls

from niofetcher.crawl.frontier import STATES, FrontierError, FrontierLocked, frontier_failures, prepare_frontier
from niofetcher.testing import PostgresCluster

pytest_plugins = ["pg_cluster"]
pytestmark = pytest.mark.timeout(60)


class Crawl(PostgresStore):
    """The contract suite's PostgreSQL store, and a user's view of its tables."""

    def __init__(self, request: pytest.FixtureRequest, clock: FakeClock) -> None:
        super().__init__(request, clock)
        import psycopg

        self.psycopg = psycopg

    def open(self, **options: Any) -> Any:
        """A worker of the crawl: a PostgresFrontier, whose insides these tests reach."""
        return super().open(**options)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """What a user's query gives, through a connection of its own (what is committed)."""
        with self.psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {self.crawl}")
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description is not None else []

    def columns(self, table: str) -> list[str]:
        """The names of ``table``'s columns, in their order."""
        return [name for (name,) in self.rows(
            "SELECT column_name FROM information_schema.columns"
            f" WHERE table_schema = '{self.crawl}' AND table_name = '{table}' ORDER BY ordinal_position")]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def pg(request: pytest.FixtureRequest, clock: FakeClock) -> Any:
    made = Crawl(request, clock)
    try:
        yield made
    finally:
        made.close_all()


def assert_consistent(frontier: Any, pg: Crawl) -> dict[str, int]:
    """Every URL in exactly one of the four states, and counts() agreeing with the table."""
    counts: dict[str, int] = frontier.counts()
    assert set(counts) == set(STATES)
    assert pg.rows("SELECT COUNT(*) FROM urls WHERE state NOT IN ('waiting', 'processing', 'done', 'error')") == [(0,)]
    ((total, distinct),) = pg.rows("SELECT COUNT(*), COUNT(DISTINCT url) FROM urls")
    assert total == distinct == sum(counts.values())
    on_table = dict.fromkeys(STATES, 0)
    on_table.update(pg.rows("SELECT state, COUNT(*) FROM urls GROUP BY state"))
    assert counts == on_table
    assert pg.rows("SELECT COUNT(*) FROM urls WHERE state = 'waiting' AND next_attempt_at IS NULL") == [(0,)]
    assert pg.rows("SELECT COUNT(*) FROM urls WHERE state IN ('done', 'error') AND next_attempt_at IS NOT NULL") == [(0,)]
    return counts


# -- the tables, as a user reads them -----------------------------------------


def test_the_tables_have_the_sqlite_frontiers_columns_and_keep_to_the_four_states(pg: Crawl, clock: FakeClock) -> None:
    """The urls table has the SQLite frontier's columns in the same order (tests/test_frontier.py):
    the same queries work on both.  What the frontier did is in it, and the CHECK constraint keeps
    even a user's UPDATE to the four states."""
    frontier = pg.open()
    frontier.add(urls(4))
    claimed = frontier.claim(4)
    clock.advance(1)
    frontier.complete_many([(claimed[0].url, 200)])
    assert frontier.fail(claimed[1].url, "read_timeout", retry_in=1.0) == "waiting"
    assert frontier.fail(claimed[2].url, "not found", status=404) == "error"
    frontier.release([claimed[3].url])
    assert pg.columns("urls") == URL_COLUMNS
    rows = {row[0]: row[1:] for row in pg.rows("SELECT url, state, attempts, status, error, fetched_at FROM urls")}
    assert rows == {
        "http://a.test/page/0": ("done", 1, 200, None, clock.now),
        "http://a.test/page/1": ("waiting", 1, None, "read_timeout", clock.now),
        "http://a.test/page/2": ("error", 1, 404, "not found", clock.now),
        "http://a.test/page/3": ("waiting", 0, None, None, None),
    }
    assert pg.rows("SELECT DISTINCT hosts.origin FROM urls JOIN hosts ON hosts.id = urls.host_id") == [("http://a.test",)]
    assert pg.rows("SELECT name, value FROM checkpoints") == []
    assert assert_consistent(frontier, pg) == {"waiting": 2, "processing": 0, "done": 1, "error": 1}
    with pytest.raises(pg.psycopg.errors.CheckViolation):
        pg.rows("UPDATE urls SET state = 'fetching' WHERE url = 'http://a.test/page/0'")


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


def test_a_killed_worker_lets_go_of_the_crawl_and_its_urls_wait_again(pg: Crawl) -> None:
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


def test_a_version_2_crawl_gets_the_lastmod_column_when_opened(pg: Crawl) -> None:
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


def test_a_crawl_without_the_revisit_columns_gets_them_when_opened(pg: Crawl) -> None:
    """Issue 27: a crawl made before revisits gets their columns and index in place, its rows kept."""
    with pg.open() as frontier:
        frontier.add(["http://a.test/", "http://b.test/"])
        frontier.complete_many([(frontier.claim(1)[0].url, 200)])
    pg.rows("DROP INDEX urls_revisit")  # the crawl as a niofetcher before revisits made it
    for column in ("etag", "last_modified", "digest", "visits", "changes", "next_due"):
        pg.rows(f"ALTER TABLE urls DROP COLUMN {column}")
    rows = "SELECT url, state, depth, seq, host_id, status FROM urls ORDER BY url"
    kept = pg.rows(rows)
    with pg.open() as frontier:
        assert frontier.revisits() == (0, None) and frontier.wake() == 0
    assert pg.rows(rows) == kept
    assert pg.columns("urls")[-6:] == ["etag", "last_modified", "digest", "visits", "changes", "next_due"]
    assert pg.rows("SELECT visits, changes, next_due FROM urls") == [(0, 0, None)] * 2
    assert pg.rows(f"SELECT indexname FROM pg_indexes WHERE schemaname = '{pg.crawl}' AND indexname = 'urls_revisit'") == [
        ("urls_revisit",)]


def test_a_crawl_without_the_visit_times_gets_them_when_opened(pg: Crawl) -> None:
    """Issue 27 (a rate of change estimated): a crawl made before changed_time and unchanged_time
    gets them in place; a row visited more than once takes each visit after the first as its last
    interval long, as SQLite's version 11 does; the others get 0."""
    with pg.open() as frontier:
        frontier.add(["http://a.test/", "http://b.test/"])
    pg.rows("ALTER TABLE urls DROP COLUMN changed_time, DROP COLUMN unchanged_time")  # as a niofetcher before them made it
    pg.rows("UPDATE urls SET state = 'done', visits = 5, changes = 1, fetched_at = 900.0, next_due = 960.0,"
            " next_attempt_at = NULL WHERE url = 'http://a.test/'")
    rows = "SELECT url, state, visits, changes, fetched_at, next_due FROM urls ORDER BY url"
    kept = pg.rows(rows)
    with pg.open() as frontier:
        assert frontier.counts()["waiting"] >= 1
    assert pg.rows(rows) == kept
    assert pg.columns("urls")[-2:] == ["changed_time", "unchanged_time"]
    assert pg.rows("SELECT url, changed_time, unchanged_time FROM urls ORDER BY url") == [
        ("http://a.test/", 60.0, 180.0), ("http://b.test/", 0.0, 0.0)]


def test_crawl_checks_and_reads_a_shared_crawl_without_joining_it(pg: Crawl) -> None:
    """What ``crawl --frontier`` asks before its run (prepare_frontier: make or check the crawl) and
    after it (frontier_failures) takes no host and registers no worker: a worker that opened the
    crawl for it took the free hosts with work for that moment (each take moves a host's epoch),
    and was a second worker of the same pid in ``workers`` while it did.  The control: a worker's
    open and close does take them."""
    prepare_frontier(pg.dsn, crawl=pg.crawl)  # a new crawl: made, as its first worker would
    assert "next_due" in pg.columns("urls") and pg.rows("SELECT COUNT(*) FROM workers") == [(0,)]
    with pg.open() as frontier:
        frontier.add(["http://a.test/", "http://a.test/2", "http://b.test/", "http://b.test/2"])
        assert "http://a.test/" in [item.url for item in frontier.claim(4)]
        frontier.fail("http://a.test/", "dns_error")  # final: an 'error' to report
        frontier.release(["http://a.test/2", "http://b.test/", "http://b.test/2"])
    hosts = "SELECT origin, owner, epoch FROM hosts ORDER BY origin"
    free = pg.rows(hosts)
    assert [owner for _origin, owner, _epoch in free] == [None, None]  # free, with URLs waiting
    prepare_frontier(pg.dsn, crawl=pg.crawl)
    assert frontier_failures(pg.dsn, 0.0, 10, crawl=pg.crawl) == [("http://a.test/", "dns_error")]
    assert pg.rows(hosts) == free and pg.rows("SELECT COUNT(*) FROM workers") == [(0,)]
    pg.open().close()
    assert [epoch for _o, _w, epoch in pg.rows(hosts)] > [epoch for _o, _w, epoch in free]
    with pytest.raises(FrontierError, match="there is no crawl"):
        frontier_failures(pg.dsn, 0.0, 10, crawl=f"{pg.crawl}_none")


def test_what_cannot_be_used_is_one_line_of_error(pg: Crawl) -> None:
    from niofetcher.crawl.frontier.postgres import PostgresFrontier

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
        assert frontier.store._conn is not None
        with pytest.raises(FrontierError, match="statement timeout") as slow, frontier.store._db() as conn:
            conn.execute("SELECT pg_sleep(2)")
        assert "\n" not in str(slow.value)
        assert frontier.counts()["waiting"] == 1 and [c.url for c in frontier.claim(5)] == ["http://a.test/"]


def test_the_throwaway_cluster_leaves_nothing_behind(postgres_dsn: str) -> None:  # skipped where it cannot run
    with PostgresCluster() as cluster:
        assert cluster.directory is not None
        directory, server = cluster.directory, cluster._server
        assert server is not None and server.poll() is None
    assert server.poll() is not None and not directory.exists()


def test_a_lost_connection_is_one_line_of_error_and_a_reopen_carries_on(pg: Crawl) -> None:
    frontier = pg.open()
    frontier.add(urls(3))
    (claimed,) = frontier.claim(1)
    assert pg.rows(f"SELECT pg_terminate_backend({frontier.store._conn.info.backend_pid})") == [(True,)]
    with pytest.raises(FrontierError) as lost:
        frontier.next_due()
    assert "\n" not in str(lost.value) and pg.crawl in str(lost.value), lost.value
    frontier.close()  # nothing to commit on a lost connection: no second error
    reopened = pg.open()
    assert reopened.counts() == {"waiting": 3, "processing": 0, "done": 0, "error": 0}
    assert pg.rows(f"SELECT attempts FROM urls WHERE url = '{claimed.url}'") == [(1,)]


# -- between workers: one connection each, the races made to happen -------------


def wait_for_lock(pg: Crawl, frontier: Any, call: Future[Any]) -> None:
    """Until ``frontier``'s statement in ``call`` (another thread) waits for a row lock, or ``call`` ended."""
    pid = frontier.store._conn.info.backend_pid
    deadline = time.monotonic() + 20
    while pg.rows(f"SELECT wait_event_type FROM pg_stat_activity WHERE pid = {pid}") != [("Lock",)]:
        if call.done():
            return
        assert time.monotonic() < deadline, "the statement never waited"
        time.sleep(0.01)


def test_links_to_a_host_another_worker_is_adding_at_the_same_time_are_not_lost(pg: Crawl) -> None:
    """Two workers add the first URLs of one new host at once: the second one's host row loses
    the race (it waits for the first one's insert), and its URLs must still go in."""
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
        frontier.fail(url, "no retry")
    else:
        frontier.release([url])


@pytest.mark.parametrize("outcome", ["complete", "fail", "release"])
def test_an_outcome_that_waited_for_a_takeover_is_refused(pg: Crawl, outcome: str) -> None:
    """The old owner's outcome is sent while the new owner's takeover (and its claim of the same
    URL again) is not committed yet, and waits for it: once it is, the outcome must be refused --
    not judged by the host as the statement first saw it."""
    old = pg.open()
    old.add(urls(1))
    (url,) = old.claim(1)
    new = pg.open()
    pg.rows("UPDATE hosts SET lease_until = 0")  # the old owner stalled past its lease
    new.store._take_soon = True
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


def test_a_takeover_and_the_old_owners_renewal_do_not_deadlock(pg: Crawl) -> None:
    """The old owner completes a URL in a batch and, in the same batch, renews its lease, while
    another worker takes the host over (its lease ran out on the server) and recovers that URL:
    the two must not wait for each other."""
    old = pg.open()
    old.add(urls(2))
    first, _second = old.claim(2)
    new = pg.open()
    pg.rows("UPDATE hosts SET lease_until = 0")
    new.store._take_soon = True
    with ThreadPoolExecutor(1) as pool:
        with old.batch():
            old.complete_many([(first.url, 200)])
            taking = pool.submit(new.claim, 5)
            wait_for_lock(pg, new, taking)
            old.store._renew_at = 0.0  # a renewal is due
            assert old.lost_hosts() == []
        assert taking.result(timeout=20) == []
    assert old.refused == 0 and old.holds("http://a.test")
    assert assert_consistent(old, pg) == {"waiting": 0, "processing": 1, "done": 1, "error": 0}


def test_recordable_leaves_out_a_host_taken_over_and_holds_its_answer_until_the_batch_ends(
    pg: Crawl,
) -> None:
    """A host another worker took over: its claims are not recordable, and their outcomes are refused.
    One recordable inside a batch stays this worker's until the batch commits: a taker skips it."""
    old = pg.open()
    old.add(urls(1, "a.test") + urls(1, "b.test"))
    a, b = sorted(item.url for item in old.claim(5))
    pg.rows("UPDATE hosts SET lease_until = 0 WHERE origin = 'http://b.test'")  # b's lease ran out on the server
    new = pg.open()
    assert [item.url for item in new.claim(5)] == [b]  # taken over, recovered, claimed again
    pg.rows("UPDATE hosts SET lease_until = 0 WHERE origin = 'http://a.test'")
    new.add(urls(1, "c.test"))  # a free host, so that a fair share lets the new worker take one more
    new.store._take_soon = True
    with old.batch():
        assert old.recordable([a, b]) == [a]
        with ThreadPoolExecutor(1) as pool:  # a, expired, would come first: locked, it is skipped
            assert [item.url for item in pool.submit(new.claim, 5).result(timeout=20)] == urls(1, "c.test")
        old.complete_many([(a, 200), (b, 200)])
    assert old.refused == 1
    assert pg.rows("SELECT url, state FROM urls ORDER BY url") == [(a, "done"), (b, "processing"),
                                                                  (urls(1, "c.test")[0], "processing")]


def test_a_long_add_goes_in_as_several_statements_and_adds_the_same(
    pg: Crawl, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut into statements of _INSERT_ROWS URLs (so that a million seeds do not outlive the
    statement_timeout): the same URLs, depths and hosts as one statement gives."""
    import niofetcher.crawl.frontier.postgres.frontier as postgres_module

    monkeypatch.setattr(postgres_module, "_INSERT_ROWS", 3)
    frontier = pg.open()
    entries = [(url, 2, None, 0) for url in clustered("abc", 3)] + [("http://a.test/0", 1, None, 0),
                                                                      ("http://d.test/0", 0, None, 0)]
    assert frontier.add_many(entries) == 10
    assert frontier.add_many(entries) == 0
    assert pg.rows("SELECT COUNT(*), COUNT(DISTINCT host_id), MIN(depth) FROM urls") == [(10, 4, 0)]
    assert pg.rows("SELECT depth FROM urls WHERE url = 'http://a.test/0'") == [(1,)]
    assert pg.rows("SELECT COUNT(*) FROM hosts") == [(4,)]
    assert assert_consistent(frontier, pg)["waiting"] == 10

"""Host-aware claims: the frontier hands out URLs spread over hosts that can take them now, the
hosts in turn within a priority, breadth first and FIFO within a host; and opening a big file
reads no more than its hosts."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from niofetcher.crawl.frontier import Frontier
from niofetcher.crawl.frontier.hosts import HostRotation
from niofetcher.urls import host_key, normalize_url, parse_target


def clustered(hosts: str, per_host: int) -> list[str]:
    """Links as a page lists them: all of one host, then all of the next."""
    return [f"http://{host}.test/{i}" for host in hosts for i in range(per_host)]


@pytest.mark.timeout(30)
def test_a_claim_takes_the_hosts_in_turn_not_the_links_in_the_order_found() -> None:
    with Frontier() as frontier:
        frontier.add(clustered("abc", 10))
        claimed = [c.url for c in frontier.claim(6)]
        assert claimed == ["http://a.test/0", "http://b.test/0", "http://c.test/0",
                           "http://a.test/1", "http://b.test/1", "http://c.test/1"]
        # Discovery order alone (the one queue of schema version 2) would have given a.test's six.
        assert claimed != clustered("abc", 10)[:6]
        # The next claim goes on where this one stopped, each host FIFO.
        assert [c.url for c in frontier.claim(3)] == ["http://a.test/2", "http://b.test/2", "http://c.test/2"]


@pytest.mark.timeout(30)
def test_host_room_caps_each_host_and_a_host_without_room_waits_its_turn() -> None:
    with Frontier() as frontier:
        frontier.add(clustered("abcd", 5))
        room = {"http://a.test": 0, "http://b.test": 1, "http://c.test": 3, "http://d.test": 2}
        claimed = frontier.claim(100, host_room=room.__getitem__)
        assert Counter(c.host for c in claimed) == {"http://b.test": 1, "http://c.test": 3, "http://d.test": 2}
        # a.test lost nothing: with room, its URLs come, FIFO.
        again = frontier.claim(100, host_room=lambda host: 2 if host == "http://a.test" else 0)
        assert [c.url for c in again] == ["http://a.test/0", "http://a.test/1"]
        assert frontier.counts()["waiting"] == 20 - 8


@pytest.mark.timeout(30)
def test_a_short_claim_asks_the_hosts_with_more_again() -> None:
    """A share of the limit from each host first; hosts with more give the rest."""
    with Frontier() as frontier:
        frontier.add(["http://a.test/only"] + clustered("b", 30) + clustered("c", 30))
        claimed = frontier.claim(41)
        assert len(claimed) == 41
        assert Counter(c.host for c in claimed) == {"http://a.test": 1, "http://b.test": 20, "http://c.test": 20}


@pytest.mark.timeout(30)
def test_priority_first_across_hosts_then_turns() -> None:
    with Frontier() as frontier:
        frontier.add(clustered("ab", 3))
        frontier.add(["http://z.test/urgent"], priority=5)  # a host found last, with a higher priority
        frontier.add(["http://b.test/soon"], priority=1)
        assert [c.url for c in frontier.claim(3)] == ["http://z.test/urgent", "http://b.test/soon", "http://a.test/0"]
        assert [c.url for c in frontier.claim(10)] == [
            "http://a.test/1", "http://b.test/0", "http://a.test/2", "http://b.test/1", "http://b.test/2"]


@pytest.mark.timeout(30)
def test_a_host_comes_back_in_line_whenever_a_url_of_it_waits_again(tmp_path: Path) -> None:
    """Released, retried, added again, or after a reopen: no host with a waiting URL is left out."""
    clock = [1000.0]
    db = tmp_path / "f.db"
    with Frontier(db, clock=lambda: clock[0]) as frontier:
        frontier.add(["http://a.test/1", "http://b.test/1", "http://c.test/1"])
        a, b, _c = frontier.claim(10)
        assert frontier.claim(10) == [] and frontier.store._queues.rotation.hosts() == []  # every queue empty, nobody in line
        frontier.release([a.url])
        frontier.fail(b.url, "connect_error", retry_in=1.0)
        frontier.add(["http://d.test/1"])
        clock[0] += 2
        assert sorted(u.url for u in frontier.claim(10)) == ["http://a.test/1", "http://b.test/1", "http://d.test/1"]
        frontier.add(["http://e.test/1", "http://e.test/2"])
    with Frontier(db, clock=lambda: clock[0]) as frontier:  # the claimed ones were left processing
        assert sorted(u.url for u in frontier.claim(10)) == [
            "http://a.test/1", "http://b.test/1", "http://c.test/1", "http://d.test/1", "http://e.test/1",
            "http://e.test/2"]


@pytest.mark.timeout(30)
def test_a_host_whose_urls_are_not_due_yet_stays_in_line() -> None:
    clock = [1000.0]
    with Frontier(clock=lambda: clock[0]) as frontier:
        frontier.add(["http://a.test/1", "http://b.test/1"])
        first, second = frontier.claim(10)
        frontier.fail(first.url, "read_timeout", retry_in=10.0)
        frontier.complete(second.url, 200)
        assert frontier.claim(10) == []
        assert frontier.store._queues.rotation.hosts() == ["http://a.test"]  # b.test is empty and forgotten; a.test waits
        clock[0] += 11
        assert [u.url for u in frontier.claim(10)] == ["http://a.test/1"]


@pytest.mark.timeout(30)
def test_the_host_key_is_the_origin_the_fetcher_limits() -> None:
    """One key exactly when parse_target gives one Origin: the crawler's per-host window and the
    fetcher's per-host limit count the same thing."""
    urls = ["http://a.test/x", "http://A.test:80/y", "http://user:pw@a.test/z", "http://a.test:8080/",
            "https://a.test/", "https://a.test:443/q?x=1", "http://[::1]:8080/p", "http://[::1]/", "http://a.test"]
    for u in urls:
        for v in urls:
            same_key = host_key(normalize_url(u)) == host_key(normalize_url(v))
            assert same_key == (parse_target(u).origin == parse_target(v).origin), (u, v)
    assert host_key(normalize_url("http://user:pw@a.test:8080/x")) == "http://a.test:8080"


def test_rotation_lines_by_priority_and_turns() -> None:
    rotation = HostRotation()
    for host in "abc":
        rotation.offer(host, 0)
    rotation.offer("c", 3)  # up to a higher line; its old entry is skipped
    rotation.offer("a", 0)  # already in line: no second place
    turns = rotation.take(10, None)
    assert [(host, priority) for host, _room, priority in turns] == [("c", 3), ("a", 0), ("b", 0)]
    assert len(rotation) == 0
    rotation.put_back("a", 0)
    rotation.put_back("b", 0, front=True)  # keeps its turn
    rotation.put_back("c", 0)
    assert [host for host, _room, _p in rotation.take(2, lambda host: 0 if host == "b" else 1)] == ["a", "c"]
    assert rotation.hosts() == ["b"]  # no room: it stays in line
    rotation.forget("b")
    assert rotation.take(10, None) == [] and len(rotation) == 0


@pytest.mark.timeout(120)
def test_opening_reads_the_hosts_not_every_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts, recovery and the hosts' turns come without a pass over the urls table: opening a
    file of 40,000 URLs runs about as many SQLite instructions as one of 400 (a GROUP BY over the
    table, as schema version 2 did, would run a hundred times as many)."""
    steps: list[int] = []
    real_connect = sqlite3.connect

    def counting_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = real_connect(*args, **kwargs)
        steps.append(0)

        def count() -> int:
            steps[-1] += 1
            return 0

        conn.set_progress_handler(count, 100)
        return conn

    def open_cost(n: int) -> int:
        db = tmp_path / f"{n}.db"
        with Frontier(db) as frontier:
            frontier.add_many((f"http://h{i % 4}.test/{i}", 0, None, 0) for i in range(n))
            frontier.claim(3)  # left processing: the open puts them back
        monkeypatch.setattr(sqlite3, "connect", counting_connect)
        try:
            with Frontier(db) as frontier:
                assert frontier.counts() == {"waiting": n, "processing": 0, "done": 0, "error": 0}
                cost = steps[-1]
        finally:
            monkeypatch.setattr(sqlite3, "connect", real_connect)
        return cost

    small, big = open_cost(400), open_cost(40_000)
    assert big < 3 * max(small, 1), (small, big)
    # The negative control: the pass over the table that opening no longer makes.
    with sqlite3.connect(tmp_path / "40000.db") as conn:
        scanned = [0]
        conn.set_progress_handler(lambda: scanned.__setitem__(0, scanned[0] + 1) or 0, 100)
        conn.execute("SELECT state, COUNT(*) FROM urls GROUP BY state").fetchall()
    assert scanned[0] > 10 * big


@pytest.mark.timeout(30)
def test_the_stored_counts_are_those_of_the_last_commit(tmp_path: Path) -> None:
    """Opening reads the counts that the last commit stored: outcomes that were still pending when
    the process died are not in them (the full-disk rollback is in test_frontier_faults.py)."""
    db = tmp_path / "f.db"
    frontier = Frontier(db, commit_every=1000, commit_interval=1000)
    frontier.add(clustered("ab", 5))
    first, second, *_ = frontier.claim(4)
    frontier.complete(first.url, 200)
    frontier.flush()
    frontier.complete(second.url, 200)  # pending when the process "dies"
    conn, frontier.store._conn = frontier.store._conn, None  # as a SIGKILL leaves it: the open transaction lost
    assert conn is not None
    conn.close()
    frontier.store._let_go()
    assert read_counts(db) == {"waiting": 6, "processing": 3, "done": 1}
    with Frontier(db) as reopened:
        assert reopened.counts() == {"waiting": 9, "processing": 0, "done": 1, "error": 0}


def read_counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute("SELECT state, COUNT(*) FROM urls GROUP BY state").fetchall())
    finally:
        conn.close()


def counted(frontier: Frontier) -> dict[str, int]:
    """The rows per state, counted the long way."""
    conn = frontier.store._conn
    assert conn is not None
    counts = dict.fromkeys(("waiting", "processing", "done", "error"), 0)
    counts.update(conn.execute("SELECT state, COUNT(*) FROM urls GROUP BY state"))
    return counts


@pytest.mark.timeout(30)
def test_a_call_that_refuses_inside_a_batch_leaves_the_counts_and_new_row_count_true() -> None:
    """A ValueError inside a batch rolls back what the batch did so far: what the frontier keeps in
    memory (counts, the last rowid) goes back with it, or the next add counts wrong, for good."""
    with Frontier() as frontier:
        frontier.add(["http://a.test/0"])
        with pytest.raises(ValueError), frontier.batch():
            frontier.add(["http://a.test/1", "http://a.test/2"])
            frontier.fail("http://a.test/unknown", "no such URL")
        assert frontier.counts() == counted(frontier)
        assert frontier.add(["http://a.test/3"]) == 1
        assert frontier.counts() == counted(frontier) == {"waiting": 2, "processing": 0, "done": 0, "error": 0}


@pytest.mark.timeout(30)
def test_a_rolled_back_claim_puts_its_hosts_back_in_line() -> None:
    """Two claims in one batch: the second finds the hosts empty and lets them go; when the batch
    is rolled back their URLs wait again, and their hosts must be in line again to be claimed."""
    with Frontier(commit_every=1000, commit_interval=3600) as frontier:
        frontier.add(["http://a.test/0", "http://b.test/0"])
        with pytest.raises(ValueError), frontier.batch():
            assert len(frontier.claim(10)) == 2
            assert frontier.claim(10) == []
            frontier.complete("http://c.test/unknown", 200)
        assert counted(frontier)["waiting"] == 2
        assert frontier.counts() == counted(frontier)
        assert sorted(c.url for c in frontier.claim(10)) == ["http://a.test/0", "http://b.test/0"]


@pytest.mark.timeout(30)
def test_a_host_room_that_raises_loses_no_host() -> None:
    with Frontier() as frontier:
        frontier.add(["http://a.test/0", "http://b.test/0", "http://c.test/0"])

        def room(host: str) -> int:
            if host == "http://b.test":
                raise KeyError(host)
            return 5

        with pytest.raises(KeyError):
            frontier.claim(10, host_room=room)
        assert sorted(c.url for c in frontier.claim(10)) == ["http://a.test/0", "http://b.test/0", "http://c.test/0"]


@pytest.mark.timeout(60)
def test_a_host_with_nothing_within_the_depth_is_parked_until_the_depth_or_its_urls_change() -> None:
    """A breadth-first layer asks for depth <= d; a host whose queue holds only deeper URLs would
    be walked in full by every claim of the layer (its index orders by priority, then depth)."""
    clock = [1000.0]
    with Frontier(clock=lambda: clock[0]) as frontier:
        frontier.add_many((f"http://deep.test/{i}", 3, None, 0) for i in range(20_000))
        frontier.add(["http://a.test/1", "http://a.test/2"], depth=1)
        assert [c.url for c in frontier.claim(1, max_depth=1)] == ["http://a.test/1"]
        assert frontier.store._queues.rotation.hosts() == ["http://a.test"]  # deep.test is out of line
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        frontier.store._conn.set_progress_handler(count, 100)  # type: ignore[union-attr]
        for _ in range(20):
            frontier.claim(10, max_depth=1)
        assert steps[0] < 200, steps[0]  # 20,000 rows walked 20 times would be thousands
        frontier.store._conn.set_progress_handler(None, 100)  # type: ignore[union-attr]
        frontier.add(["http://deep.test/shallow"], depth=1)  # new URLs: back in line
        assert [c.url for c in frontier.claim(10, max_depth=1)] == ["http://deep.test/shallow"]
        assert frontier.claim(10, max_depth=2) == []
        assert len(frontier.claim(10, max_depth=3)) == 10  # a deeper limit: back in line
        # A URL within the depth that is not due yet keeps its host in line: the crawl waits for it.
        frontier.add(["http://late.test/1"], depth=1)
        frontier.add_many((f"http://late.test/deep{i}", 3, None, 0) for i in range(3))
        (late,) = frontier.claim(1, max_depth=1)
        frontier.fail(late.url, "read_timeout", retry_in=10.0)
        assert frontier.claim(10, max_depth=1) == []
        clock[0] += 11
        assert [c.url for c in frontier.claim(10, max_depth=1)] == ["http://late.test/1"]


@pytest.mark.timeout(30)
def test_a_higher_priority_url_not_due_yet_keeps_its_host_in_the_higher_line() -> None:
    now = [1000.0]
    with Frontier(clock=lambda: now[0]) as frontier:
        frontier.add(["http://a.test/hi"], priority=5)
        (hi,) = frontier.claim(1)
        frontier.fail(hi.url, "http_503", retry_in=10.0)  # waits until 1010, priority 5
        frontier.add(["http://a.test/lo0", "http://a.test/lo1"], priority=0)
        frontier.add(["http://b.test/x"], priority=3)
        assert sorted(c.url for c in frontier.claim(10)) == ["http://a.test/lo0", "http://a.test/lo1", "http://b.test/x"]
        frontier.add(["http://b.test/y"], priority=3)
        now[0] = 1011
        assert [(c.url, c.priority) for c in frontier.claim(1)] == [("http://a.test/hi", 5)]


@pytest.mark.timeout(30)
def test_a_host_whose_row_was_rolled_back_gets_it_again() -> None:
    """add_many() inserts a hosts row only for hosts out of line; a rollback takes back a new
    host's row while the host was already in line, and its next URLs must still have a host."""
    with Frontier(commit_every=1000, commit_interval=3600) as frontier:
        with pytest.raises(ValueError), frontier.batch():
            frontier.add(["http://new.test/1"])
            frontier.fail("http://new.test/unknown", "no such URL")
        frontier.add(["http://new.test/2"])
        assert [c.url for c in frontier.claim(10)] == ["http://new.test/2"]
    assert frontier.closed


@pytest.mark.timeout(30)
def test_a_host_room_that_raises_in_a_later_pass_hands_nothing_out_and_keeps_nothing() -> None:
    """The first hosts asked gave too little, so the claim asks further hosts; when host_room
    raises then, the URLs the first pass marked 'processing' were handed to no one: they must
    wait again, also with outcomes pending (no rollback then)."""
    now = [1000.0]
    with Frontier(clock=lambda: now[0], commit_every=1000, commit_interval=3600) as frontier:
        frontier.add(["http://a.test/0", "http://b.test/0", "http://c.test/0", "http://p.test/0"])
        (late,) = frontier.claim(1)
        frontier.fail(late.url, "http_503", retry_in=10.0)  # pending; a.test has nothing due for 10 s
        asked: list[str] = []

        def room(host: str) -> int:
            asked.append(host)
            if asked.count(host) == 2:  # b.test, in the second pass
                raise KeyError(host)
            return 0 if host in ("http://b.test", "http://c.test") else 5

        with pytest.raises(KeyError):
            frontier.claim(2, host_room=room)
        assert asked[-1] == "http://b.test" and "http://p.test" in asked
        assert frontier.counts() == counted(frontier) == {"waiting": 4, "processing": 0, "done": 0, "error": 0}
        now[0] += 100
        assert sorted(c.url for c in frontier.claim(10)) == [
            "http://a.test/0", "http://b.test/0", "http://c.test/0", "http://p.test/0"]


@pytest.mark.timeout(30)
def test_a_claim_of_hosts_with_nothing_due_asks_them_in_few_passes() -> None:
    """Each pass asks more hosts than the one before: claim(1) over N hosts with nothing due is
    not N passes of a few statements (nor N walks of a higher line whose hosts were asked)."""
    now = [1000.0]
    with Frontier(clock=lambda: now[0]) as frontier:
        frontier.add([f"http://hi{i}.test/0" for i in range(200)], priority=5)
        frontier.add([f"http://lo{i}.test/0" for i in range(200)])
        for item in frontier.claim(400):
            frontier.fail(item.url, "http_503", retry_in=10.0)
        frontier.flush()
        statements: list[str] = []
        assert frontier.store._conn is not None
        frontier.store._conn.set_trace_callback(statements.append)
        assert frontier.claim(1) == []
        frontier.store._conn.set_trace_callback(None)
        assert len(statements) < 60, len(statements)  # one pass a host would be 800
        now[0] += 11
        assert len(frontier.claim(1000)) == 400  # and no host was lost on the way



@pytest.mark.timeout(30)
def test_a_link_added_lately_skips_the_database_unless_it_is_nearer_or_was_rolled_back() -> None:
    with Frontier(commit_every=1000, commit_interval=3600) as frontier:
        frontier.add(["http://a.test/menu"], depth=2)
        statements: list[str] = []
        frontier.store._conn.set_trace_callback(statements.append)  # type: ignore[union-attr]
        assert frontier.add(["http://a.test/menu", "http://A.test:80/menu#top"], depth=3) == 0
        assert statements == []  # known at no smaller depth: nothing to ask the file
        assert frontier.add(["http://a.test/menu"], depth=1) == 0  # nearer: the file lowers its depth
        assert statements and [c.depth for c in frontier.claim(1)] == [1]
        frontier.store._conn.set_trace_callback(None)  # type: ignore[union-attr]
        with pytest.raises(ValueError), frontier.batch():
            frontier.add(["http://a.test/rolled-back"])
            frontier.fail("http://a.test/unknown", "no such URL")
        assert frontier.add(["http://a.test/rolled-back"]) == 1  # the rollback took it back: new again
        assert frontier.state("http://a.test/rolled-back") == "waiting"

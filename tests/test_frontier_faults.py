"""A write that fails on a full disk (issue 9, case 7): one clear line, nothing half-done.

The disk is made full at the real part without mounting anything: ``PRAGMA max_page_count`` on the
frontier's own connection caps the database at its current size, and SQLite then fails a write
that needs one more page with SQLITE_FULL, "database or disk is full" -- the error a full disk
gives.  After it the whole open transaction is rolled back (pending outcomes with it, and their
checkpoint), the counts agree with the file, the frontier goes on working once there is room, and
close() neither raises a second error nor hangs.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from niofetcher.crawl.frontier import STATES, Frontier, FrontierError

pytestmark = pytest.mark.timeout(60)


def committed_counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        counts = dict.fromkeys(STATES, 0)
        counts.update(conn.execute("SELECT state, COUNT(*) FROM urls GROUP BY state"))
        return counts
    finally:
        conn.close()


def fill_the_disk(frontier: Frontier) -> None:
    """No page more than the file has now."""
    conn = frontier.store._conn
    assert conn is not None
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages}")


def make_room(frontier: Frontier) -> None:
    conn = frontier.store._conn
    assert conn is not None
    conn.execute("PRAGMA max_page_count = 1073741823")


def many(n: int, host: str) -> list[tuple[str, int, None, int]]:
    return [(f"http://{host}/a-rather-long-path/to-fill-pages/{i}", 1, None, 0) for i in range(n)]


@pytest.fixture
def busy(tmp_path: Path) -> tuple[Frontier, Path, list[str]]:
    """A frontier with outcomes pending: 20 URLs claimed, 10 of them completed but not committed."""
    db = tmp_path / "crawl.sqlite"
    frontier = Frontier(db, commit_every=1000, commit_interval=3600)
    frontier.add([f"http://a.test/{i}" for i in range(30)])
    claimed = [item.url for item in frontier.claim(20)]
    for url in claimed[:10]:
        frontier.complete(url, 200)
    return frontier, db, claimed


def assert_one_line_full(error: FrontierError, db: Path) -> None:
    assert str(error) == f"database or disk is full: frontier {db}"
    assert isinstance(error.__cause__, sqlite3.OperationalError)


@pytest.mark.parametrize("operation", ["add_many", "complete_many", "fail"])
def test_a_full_disk_rolls_the_transaction_back_and_the_counts_agree(
    busy: tuple[Frontier, Path, list[str]], operation: str
) -> None:
    frontier, db, claimed = busy
    before = committed_counts(db)
    assert before == {"waiting": 10, "processing": 20, "done": 0, "error": 0}
    fill_the_disk(frontier)
    with pytest.raises(FrontierError) as info:
        if operation == "add_many":
            frontier.add_many(many(2000, "b.test"))
        elif operation == "complete_many":
            # The outcomes fit; the checkpoint, a name a few pages long, does not: neither is kept.
            frontier.complete_many([(url, 200) for url in claimed[10:]], {"x" * 20000: 1})
        else:
            frontier.fail(claimed[10], "x" * 20000)
    assert_one_line_full(info.value, db)
    # Nothing half-done: the file is as the last commit left it, the pending complete()s are gone
    # with the transaction (their URLs are 'processing' again, fetched again on a resume), and the
    # counts say so.
    assert committed_counts(db) == before
    assert frontier.counts() == before
    assert frontier.checkpoint() == {}
    make_room(frontier)  # room again: the frontier goes on
    assert frontier.add_many(many(5, "c.test")) == 5
    frontier.complete(claimed[0], 200)
    assert frontier.counts() == committed_counts(db) == {"waiting": 15, "processing": 19, "done": 1, "error": 0}
    frontier.close()


def test_close_after_a_full_disk_raises_nothing_more(busy: tuple[Frontier, Path, list[str]]) -> None:
    frontier, db, _ = busy
    fill_the_disk(frontier)
    with pytest.raises(FrontierError, match="database or disk is full"):
        frontier.add_many(many(2000, "b.test"))
    frontier.close()  # nothing left to commit
    assert frontier.closed
    with Frontier(db) as again:  # and the lock is gone with it
        assert again.counts() == {"waiting": 30, "processing": 0, "done": 0, "error": 0}


class CommitFails:
    """The frontier's connection, but COMMIT fails as on a full disk, leaving the transaction open:
    with a real full disk the log is written at commit, which max_page_count cannot reach."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.fail = True

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT" and self.fail:
            raise sqlite3.OperationalError("database or disk is full")
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)


@pytest.mark.parametrize("operation", ["claim", "flush"])
def test_a_commit_that_fails_rolls_back_and_the_counts_agree(
    busy: tuple[Frontier, Path, list[str]], operation: str
) -> None:
    """claim()'s own commit fails (or flush()'s): the URLs it picked are not handed out, and not left
    claimed; the pending outcomes are rolled back with them; the counts say what the file says."""
    frontier, db, _ = busy
    before = committed_counts(db)
    conn = CommitFails(frontier.store._conn)  # type: ignore[arg-type]
    frontier.store._conn = conn  # type: ignore[assignment]
    with pytest.raises(FrontierError) as info:
        frontier.claim(5) if operation == "claim" else frontier.flush()
    assert_one_line_full(info.value, db)
    assert not conn.in_transaction
    conn.fail = False
    assert frontier.counts() == committed_counts(db) == before
    # The pending complete()s went with the transaction: those 10 are claimed still, not waiting.
    assert [item.url for item in frontier.claim(100)] == [f"http://a.test/{i}" for i in range(20, 30)]
    frontier.close()


def test_close_that_cannot_commit_raises_that_once_and_closes(busy: tuple[Frontier, Path, list[str]]) -> None:
    """The pending outcomes cannot be committed: close() says so in the same one line, rolls them
    back and still closes the file and lets go of the lock; a second close() is a no-op."""
    frontier, db, _ = busy
    frontier.store._conn = CommitFails(frontier.store._conn)  # type: ignore[arg-type,assignment]
    with pytest.raises(FrontierError) as info:
        frontier.close()
    assert_one_line_full(info.value, db)
    assert frontier.closed
    frontier.close()
    with Frontier(db) as again:  # the pending complete()s were rolled back: 20 claimed URLs resume
        assert again.counts() == {"waiting": 30, "processing": 0, "done": 0, "error": 0}


def test_a_full_disk_after_claims_in_a_batch_puts_their_hosts_back_in_line(tmp_path: Path) -> None:
    """The second claim of a batch finds a.test empty and lets it go; the rollback makes its URLs
    wait again, so a.test must be in line again or nothing would ever claim them."""
    db = tmp_path / "crawl.sqlite"
    with Frontier(db, commit_every=1000, commit_interval=3600) as frontier:
        frontier.add([f"http://a.test/{i}" for i in range(3)])
        with pytest.raises(FrontierError), frontier.batch():
            assert len(frontier.claim(10)) == 3
            assert frontier.claim(10) == []
            fill_the_disk(frontier)
            frontier.add_many(many(2000, "b.test"))
        make_room(frontier)
        assert frontier.counts() == committed_counts(db) == {"waiting": 3, "processing": 0, "done": 0, "error": 0}
        assert len(frontier.claim(10)) == 3

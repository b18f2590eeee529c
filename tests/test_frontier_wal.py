"""The SQLite frontier's log checkpoints in a thread of their own (niofetcher/crawl/frontier/sqlite/wal.py).

On real files: the thread copies the log into the file while the writer goes on, so that the next
commit starts the log again from its beginning (the file grows, the log does not); without it
(the negative control) nothing is copied and the log grows with every commit.  A frontier starts
the thread only once its log is long, and stops it at close() or when it is collected unclosed.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from niofetcher.crawl.frontier import Frontier
from niofetcher.crawl.frontier.sqlite.wal import LogCheckpointer

PAGE = 2048
ROW = b"x" * 1500  # about a page a row


def log_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "niofetcher-frontier-log"]


def log_file(path: str) -> sqlite3.Connection:
    """A new file in WAL mode with a table ``t``, whose log only a LogCheckpointer checkpoints."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {PAGE}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t (b BLOB)")
    return conn


def write_rows(
    conn: sqlite3.Connection, rows: int, per_commit: int = 64, log: LogCheckpointer | None = None
) -> None:
    for start in range(0, rows, per_commit):
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO t (b) VALUES (?)", [(ROW,)] * min(per_commit, rows - start))
        conn.execute("COMMIT")
        if log is not None:
            log.committed(conn)


def wait_for(predicate: object, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("checkpointer", [True, False], ids=["thread", "no-thread"])
def test_the_thread_copies_the_log_into_the_file(tmp_path: Path, checkpointer: bool) -> None:
    path = str(tmp_path / "log.db")
    conn = log_file(path)
    log = LogCheckpointer(path, interval=0.01, start_bytes=512 * PAGE)
    try:
        write_rows(conn, 1000)
        assert os.path.getsize(path) < 100 * PAGE  # every row is still in the log only
        if checkpointer:
            log.committed(conn)
            assert log.running and len(log_threads()) == 1
        # The thread copies while the writer goes on (or, without it, nothing is copied).
        write_rows(conn, 1000)
        copied = wait_for(lambda: os.path.getsize(path) > 1900 * PAGE, 10.0 if checkpointer else 0.5)
        assert copied == checkpointer
        assert conn.execute("SELECT COUNT(*) FROM t").fetchone() == (2000,)
    finally:
        log.stop()
        conn.close()
    assert not log.running and not log_threads()


def test_a_writer_that_never_pauses_catches_up_and_its_log_starts_again(tmp_path: Path) -> None:
    """Commits back to back leave the thread's checkpoint always a commit or two behind, and the
    log starts again only at a write that finds it all copied: the writer's own catch-up, asked
    for once the log is long, is that moment.  8 MiB of pages go through a log kept under 4 MiB."""
    path = str(tmp_path / "busy.db")
    conn = log_file(path)
    log = LogCheckpointer(path, interval=0.01, start_bytes=256 * PAGE, restart_bytes=512 * PAGE)
    try:
        write_rows(conn, 4000, per_commit=16, log=log)
        assert log.running
        assert os.path.getsize(path + "-wal") < 2048 * PAGE  # the rows alone are 4,000 pages
        assert conn.execute("SELECT COUNT(*) FROM t").fetchone() == (4000,)
    finally:
        log.stop()
        conn.close()


def test_what_a_reader_held_back_is_the_threads_to_copy_not_a_commits(tmp_path: Path) -> None:
    """A reader holding its snapshot keeps the log from being copied past it.  The thread asks for
    a catch-up only when its own copy left no more than the last commits, so that the commit
    after such a reader is not the one to copy all it held back (one copied 144 MiB in 191 ms)."""
    path = str(tmp_path / "read.db")
    conn = log_file(path)
    log = LogCheckpointer(path, interval=0.01, start_bytes=256 * PAGE, restart_bytes=512 * PAGE)
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        write_rows(conn, 600, log=log)
        assert log.running
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM t").fetchone()  # its snapshot: 600 rows
        write_rows(conn, 3000, log=log)  # all of it held back
        assert wait_for(lambda: not log._catch_up.is_set(), 2.0)
        time.sleep(0.1)  # rounds of the thread, the reader still reading
        assert not log._catch_up.is_set()
        reader.execute("COMMIT")
        assert conn.execute("SELECT COUNT(*) FROM t").fetchone() == (3600,)
    finally:
        reader.close()
        log.stop()
        conn.close()


def test_a_log_shorter_than_start_bytes_starts_no_thread(tmp_path: Path) -> None:
    path = str(tmp_path / "small.db")
    log = LogCheckpointer(path, start_bytes=1 << 20)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        log.committed(conn)  # no log at all yet
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (b BLOB)")
        write_rows(conn, 10)
        log.committed(conn)
        assert not log.running and not log_threads()
    finally:
        log.stop()
        conn.close()


def grow_log(frontier: Frontier, db: Path) -> int:
    """Add new URLs until the frontier's log thread runs; how many were added."""
    added = 0
    for batch in range(100):
        added += frontier.add([f"http://127.0.0.1:{1 + n % 50}/{batch}/{n}" for n in range(500)])
        if log_threads():
            return added
    raise AssertionError(f"no log thread with a {os.path.getsize(str(db) + '-wal'):,}-byte log")


def test_a_frontier_starts_its_log_thread_once_the_log_is_long_and_stops_it_at_close(
    tmp_path: Path, no_leaks: object
) -> None:
    db = tmp_path / "crawl.db"
    with Frontier(db) as frontier:
        frontier.add(["http://127.0.0.1:1/"])
        assert not log_threads()  # a small frontier has none
        added = grow_log(frontier, db) + 1
        assert [t.daemon for t in log_threads()] == [True]
        # Its own connection checkpoints only past 256 MiB, as a floor.
        (pages,) = frontier.store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()  # type: ignore[union-attr]
        assert pages * PAGE == 256 << 20
    assert not log_threads()
    assert not os.path.exists(str(db) + "-wal")  # the last connection to close removed it
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT COUNT(*) FROM urls").fetchone() == (added,)
    finally:
        conn.close()


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the unclosed frontier's lock file says so
def test_an_unclosed_frontier_stops_its_log_thread_when_collected(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    frontier = Frontier(db)
    grow_log(frontier, db)
    (thread,) = log_threads()
    del frontier
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_frontier_opened_through_a_symlink_watches_the_log_beside_the_file(tmp_path: Path, no_leaks: object) -> None:
    """SQLite keeps the log beside the file a path resolves to, not beside the link."""
    (tmp_path / "data").mkdir()
    link = tmp_path / "crawl.db"
    link.symlink_to(tmp_path / "data" / "crawl.db")
    with Frontier(link) as frontier:
        grow_log(frontier, tmp_path / "data" / "crawl.db")
    assert not log_threads()


def test_a_path_that_is_not_utf8_is_watched_and_opened_too(tmp_path: Path, no_leaks: object) -> None:
    """A directory name of bytes that are not UTF-8 (Python hands them over as surrogates): the
    thread's URI is made of the bytes, so that it opens the file rather than dying on them."""
    directory = tmp_path / os.fsdecode(b"bad\xff name")
    directory.mkdir()
    with Frontier(directory / "crawl.db") as frontier:
        grow_log(frontier, directory / "crawl.db")
        time.sleep(0.5)  # rounds of the thread
        assert frontier.store._log is not None and frontier.store._log.running
    assert not log_threads()


def test_a_thread_that_cannot_start_costs_the_frontier_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaks: object
) -> None:
    """A process at its limit of threads: the commit that would start one is made and raises
    nothing, and close() still lets go of the file (a new frontier opens it)."""

    def no_thread(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    db = tmp_path / "crawl.db"
    frontier = Frontier(db)
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    try:
        added = 0
        for batch in range(200):
            added += frontier.add([f"http://127.0.0.1:{1 + n % 50}/{batch}/{n}" for n in range(500)])
            if os.path.getsize(str(db) + "-wal") > 9 << 20:
                break
        assert os.path.getsize(str(db) + "-wal") > 9 << 20 and not frontier.store._log.running  # type: ignore[union-attr]
    finally:
        frontier.close()
    monkeypatch.undo()
    with Frontier(db) as again:
        assert again.counts()["waiting"] == added

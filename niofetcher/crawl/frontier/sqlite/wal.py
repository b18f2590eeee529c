"""The SQLite frontier's log checkpoints, in a thread of their own.

In WAL mode a commit appends the pages it changed to the log (``<path>-wal``); a *checkpoint*
copies them into the file and syncs it.  Left to SQLite, the commit that takes the log past
``wal_autocheckpoint`` runs the checkpoint itself, in the committing thread: with a 64 MiB log
that commit waited 0.2 to 0.4 s (measured at 3 million keys), and the checkpoints were 15% of
``add_many()``'s time at 100,000 URLs (py-spy) -- all of it on the crawler's coordinator thread.

Here a thread with a connection of its own runs a PASSIVE checkpoint every ``interval``
seconds instead.  A passive checkpoint takes no lock that a writer needs, and the sqlite3 module
lets go of the GIL while it runs, so the frontier's commits go on meanwhile.

The log starts again from its beginning only at a write that finds all of it copied, and a
writer that commits every few milliseconds leaves the thread no such moment: its copy always
ends a commit or two behind.  (A RESTART checkpoint from the thread would wait for a moment with
no writer, polling with sleeps of up to 100 ms for gaps of microseconds: it gave up, and the log
grew to the floor below.)  So once the log is ``restart_bytes`` long, the thread asks the
frontier to *catch up*, when its own checkpoint has left no more than the last commits
uncopied: at its next commit the frontier runs a passive checkpoint itself, between its own
transactions, which copies only those (a few milliseconds' worth), and its next write starts the
log again.

The frontier's own connection keeps its automatic checkpoint as a floor, at a longer log, should
this thread fall behind or fail where the frontier's commits would fail too (a full disk).  No
checkpoint copies past what a reader still reads, so a reader that holds its snapshot for long
(a query over millions of rows, a shell left inside BEGIN) keeps the log growing meanwhile,
whoever checkpoints; neither the thread nor the catch-up ever waits for one, and what it held
back is copied by the thread once it ends, not by a catch-up (one commit copied 144 MiB in 191 ms
when it was).

The thread starts with the first commit that finds the log longer than ``start_bytes``, so that a
small frontier (most tests, a short crawl) never has one, and stops at the frontier's close() --
or when the frontier is garbage-collected without one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import urllib.parse

__all__ = ["LogCheckpointer"]

# The most a catch-up copies, in frames (about 2 MiB at 2 KiB pages: a few milliseconds).
_CATCH_UP_FRAMES = 1024


class LogCheckpointer:
    """Checkpoints of one frontier file's log, in a thread started on demand.

    Args:
        path: the frontier's file; its log is beside the file the path resolves to (SQLite
            resolves symlinks), so that file is the one watched and opened.
        interval: seconds between two checkpoints.
        start_bytes: the log's length from which the thread runs.
        restart_bytes: the log's length from which the frontier catches up, so that the log
            starts again from its beginning.
    """

    def __init__(
        self, path: str, interval: float = 0.25, start_bytes: int = 8 << 20, restart_bytes: int = 64 << 20
    ) -> None:
        self._path = os.path.realpath(path)
        self._interval = interval
        self._start_bytes = start_bytes
        self._restart_bytes = restart_bytes
        self._stopping = threading.Event()
        self._catch_up = threading.Event()  # asked for by the thread, cleared once done
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether the thread runs: started, not stopped, and not ended on its own (its connection
        failed; the automatic checkpoint is then what is left, and no new thread is started)."""
        return self._thread is not None and self._thread.is_alive()

    def committed(self, conn: sqlite3.Connection) -> None:
        """After each commit of the frontier on ``conn``, outside any transaction: start the thread
        once the log is long enough (one stat() a commit until then), or catch up when it asks.
        Never raises: the commit is made, and without the thread the automatic checkpoint of
        ``conn`` still bounds the log."""
        if self._thread is None:
            self._start_if_long()
        elif self._catch_up.is_set():
            # A failure here (a full disk) is the next statement's to report.
            with contextlib.suppress(sqlite3.Error):
                busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if not busy and copied == frames:  # else the thread's own was under way: next commit
                    self._catch_up.clear()

    def _start_if_long(self) -> None:
        if self._stopping.is_set():
            return
        try:
            size = os.stat(self._path + "-wal").st_size
        except OSError:  # no log (yet): nothing to checkpoint
            return
        if size < self._start_bytes:
            return
        thread = threading.Thread(
            target=_checkpoint_until,
            args=(self._path, self._interval, self._restart_bytes, self._stopping, self._catch_up),
            name="niofetcher-frontier-log", daemon=True,
        )
        try:
            thread.start()
        except RuntimeError:  # no thread to be had (the process's limit): the next commit tries again
            return
        self._thread = thread

    def stop_soon(self) -> None:
        """Ask the thread to stop, without waiting (a frontier garbage-collected unclosed)."""
        self._stopping.set()

    def stop(self) -> None:
        """Stop the thread and wait for it: at most the end of a checkpoint under way."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()


def _checkpoint_until(
    path: str, interval: float, restart_bytes: int, stopping: threading.Event, catch_up: threading.Event
) -> None:
    """The thread: a PASSIVE checkpoint every ``interval`` until ``stopping`` is set, asking for
    ``catch_up`` while the log is ``restart_bytes`` long and copied but for its last commits.  It
    holds no reference to the frontier, so that an unclosed frontier can still be collected."""
    try:
        # mode=rw: a file that is gone is not made anew (an empty database beside the log).
        conn = sqlite3.connect(
            f"file:{urllib.parse.quote(os.fsencode(path))}?mode=rw", uri=True, timeout=0, isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error:  # the frontier's automatic checkpoints go on
        return
    try:
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    except sqlite3.Error:
        conn.close()
        return
    restart_frames = restart_bytes // page_size
    try:
        while not stopping.wait(interval):
            try:
                _busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error:
                # A full disk or an I/O error: the frontier's own commits meet it as well and say
                # so, and its automatic checkpoint is the floor; try again a while later.
                stopping.wait(10 * interval)
                continue
            # Only a log copied all but its last commits: after a reader that held it back, the
            # rest is the thread's to copy (in the next rounds), not a commit's.
            if frames >= restart_frames and frames - copied <= _CATCH_UP_FRAMES:
                catch_up.set()
            else:
                catch_up.clear()
    finally:
        conn.close()

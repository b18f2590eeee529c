"""The connection of a SQLite frontier: one connection behind one lock, and when its changes commit.

*Batched commits.*  ``complete()``, ``complete_many()`` and ``fail()`` (and
``store_robots()``, counted as an outcome) leave
their change in an open transaction until ``commit_every`` outcomes are
pending or ``commit_interval`` seconds have passed since the first; every
other method (``add``, ``add_many``, ``release``, ``counts``, ``next_due``,
``state``, ``checkpoint``, ``flush``, ``close``) commits before it returns,
and ``claim`` when it hands out URLs (a crawler asks for a claim after every
batch of results, most of them claims of nothing).  What a crash can lose is
therefore only the outcome of the last few fetches: such a URL was committed
as 'processing', so the next open puts it back to 'waiting' and it is fetched
again.  A URL is never lost, and a URL whose 'done' was committed is never
fetched again.  ``commit_every=1`` commits every call.

*Errors.*  When a statement fails (a full disk, an I/O error), the whole open
transaction is rolled back -- outcomes still pending with it, and their
checkpoint -- and what the frontier keeps in memory is read from the file again: the frontier is
left as the last commit left it, and the error is raised as one
:class:`FrontierError` line that starts with SQLite's words ("database or
disk is full: ..."), of the kind SQLite's result code says (:func:`database_error`:
every sqlite3 error that leaves the SQLite backend goes through it).  Nothing is half-done, and close() after it has nothing
left to commit.

*Threads.*  The crawler calls the frontier from its coordinator thread only,
but every public method takes one re-entrant lock around one connection
(opened with ``check_same_thread=False``), so calls from several threads are
safe: each call is atomic, and a claimed URL is handed to exactly one caller.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator

from ..base import FrontierError, FrontierErrorKind, check_int, check_time

__all__ = ["Transactions", "database_error"]

# SQLite's primary result codes (sqlite3.Error.sqlite_errorcode, Python 3.11 on, & 0xFF) that say
# more than "a statement failed"; the numbers are SQLite's, stable since version 3.
_KINDS = {
    3: FrontierErrorKind.UNAVAILABLE,  # SQLITE_PERM
    8: FrontierErrorKind.UNAVAILABLE,  # SQLITE_READONLY
    11: FrontierErrorKind.NOT_A_FRONTIER,  # SQLITE_CORRUPT
    14: FrontierErrorKind.UNAVAILABLE,  # SQLITE_CANTOPEN
    23: FrontierErrorKind.UNAVAILABLE,  # SQLITE_AUTH
    26: FrontierErrorKind.NOT_A_FRONTIER,  # SQLITE_NOTADB
}


def database_error(exc: sqlite3.Error, message: str) -> FrontierError:
    """``exc`` as the FrontierError saying ``message``, of the kind its result code says (a failed
    statement when the code says nothing more, or Python is older than 3.11 and gives none)."""
    code = getattr(exc, "sqlite_errorcode", None)
    kind = _KINDS.get(code & 0xFF, FrontierErrorKind.STORAGE) if isinstance(code, int) else FrontierErrorKind.STORAGE
    return FrontierError(message, kind)


class Transactions:
    """The base of the SQLite :class:`~niofetcher.crawl.frontier.sqlite.Frontier`: its connection
    (``_conn``, opened by the subclass), the lock around it, and the batching of its commits.

    Args:
        path: the database, for messages.
        commit_every, commit_interval: how many outcomes may wait uncommitted, and for how long.
    """

    def __init__(self, path: str, commit_every: int, commit_interval: float) -> None:
        self._commit_every = check_int("commit_every", commit_every, 1)
        self._commit_interval = check_time("commit_interval", commit_interval)
        self.path = path
        self._lock = threading.RLock()
        self._pending = 0  # complete()/fail() calls (and lone checkpoints) not committed yet
        self.rollbacks = 0  # _reload() counts them (store.Store.rollbacks)
        self._batching = 0  # open batch() blocks: while there are any, no commit happens
        self._commit_deferred = False  # a commit was asked for inside a batch
        self._pending_since = 0.0  # time.monotonic() of the first of them
        self._conn: sqlite3.Connection | None = None

    def _reload(self, conn: sqlite3.Connection) -> None:
        """Read again from the file what the subclass keeps in memory: after a rollback it is stale."""
        raise NotImplementedError

    def _before_commit(self, conn: sqlite3.Connection) -> None:
        """Write into the open transaction what the subclass keeps in memory and the file must hold."""
        raise NotImplementedError

    def _after_commit(self, conn: sqlite3.Connection) -> None:
        """What the subclass does once a commit is made, outside any transaction."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock and the open connection; turn database failures into FrontierError.

        A call that fails leaves nothing of its own behind: a statement that fails (a full disk,
        an I/O error; even a COMMIT) rolls the whole transaction back, pending outcomes too -- SQLite
        may have done so already, or undone just the statement, or nothing if the COMMIT failed --
        and what the frontier keeps in memory is read from the file again.  Any other exception (a URL that is not
        claimed, a bad argument) inside a batch() block undoes the block -- its transaction holds
        the block alone (``SQLStore.transaction`` commits what was pending when it began) -- and
        outside one ends a transaction that holds nothing pending, so that no write lock is left
        held; memory is read again as well.
        """
        with self._lock:
            conn = self._conn
            if conn is None:
                raise FrontierError(f"frontier {self.path} is closed", FrontierErrorKind.CLOSED)
            try:
                yield conn
            except sqlite3.ProgrammingError:
                raise  # a bug here, not a problem with the file
            except sqlite3.Error as exc:
                self._pending = 0
                self._commit_deferred = False  # what it would have committed is rolled back below
                with contextlib.suppress(sqlite3.Error):
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    self._reload(conn)
                raise database_error(exc, f"{exc}: frontier {self.path}") from exc
            except BaseException:
                if (self._batching or not self._pending) and conn.in_transaction:
                    # Inside a batch() the transaction holds the block's earlier calls: they go
                    # too (all or none), and what the frontier keeps in memory of them.
                    self._pending = 0
                    self._commit_deferred = False
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                        self._reload(conn)
                raise

    @contextlib.contextmanager
    def _write(self, conn: sqlite3.Connection) -> Iterator[None]:
        """Make several statements one unit, inside the open transaction.

        A savepoint rather than a transaction of its own: when the call fails for a reason of its
        own (not every URL claimed), only its work is undone, not the outcomes still pending.
        """
        if not conn.in_transaction:
            conn.execute("BEGIN IMMEDIATE")
        conn.execute("SAVEPOINT frontier_call")
        try:
            yield
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # _db() rolls everything back after those
                    conn.execute("ROLLBACK TO frontier_call")
                    conn.execute("RELEASE frontier_call")
            raise
        conn.execute("RELEASE frontier_call")

    def _begin(self, conn: sqlite3.Connection) -> None:
        """Start the transaction a lone statement joins; BEGIN IMMEDIATE takes the
        write lock up front, so the lock is never upgraded (an upgrade can fail
        with 'database is locked' without waiting)."""
        if not conn.in_transaction:
            conn.execute("BEGIN IMMEDIATE")

    def _commit(self, conn: sqlite3.Connection) -> None:
        if self._batching:
            self._commit_deferred = True
            return
        if conn.in_transaction:
            self._before_commit(conn)
            conn.execute("COMMIT")
            self._after_commit(conn)
        self._pending = 0

    def _outcome_recorded(self, conn: sqlite3.Connection, n: int = 1) -> None:
        """After complete()/fail() of ``n`` URLs: commit if enough are pending, or for long enough."""
        now = time.monotonic()
        if self._pending == 0:
            self._pending_since = now
        self._pending += n
        if self._pending >= self._commit_every or now - self._pending_since >= self._commit_interval:
            self._commit(conn)

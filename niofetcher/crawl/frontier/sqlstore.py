"""What the two SQL stores (SQLite, PostgreSQL) do the same way beneath the service: a
transaction block over the same counter of open blocks (a commit asked for inside one waits for
its end), and the reads of one URL by a statement of each store's SQL.

A base of both store classes, last in their bases, so that each store's own layers come first and
this reads only what they provide (``_db()``, ``_commit()``, ``_lock``, ``_conn``, ``_clock``, and
the class's SQL of one URL: :attr:`SQLStore._LOOKUP` and :attr:`SQLStore._MIN_DUE_DEPTH`, each with
one ``url`` or ``now`` placeholder in its driver's style).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from .base import StoredURL

__all__ = ["SQLStore"]


class SQLStore:
    """The part of a SQL store that is the same on both (see above)."""

    _LOOKUP: ClassVar[str]  # the columns of StoredURL, in its order, of a stored URL
    _MIN_DUE_DEPTH: ClassVar[str]  # the smallest depth of a waiting URL due at a time, a row or none

    rollbacks: int  # the store's _reload() counts each one
    _conn: Any  # the store's connection, None once closed
    _lock: Any  # the store's RLock around it
    _batching: int  # open transaction() blocks: while there are any, no commit happens
    _commit_deferred: bool  # a commit was asked for inside a block
    _clock: Callable[[], float]

    if TYPE_CHECKING:  # the store's layers provide these

        def _db(self) -> contextlib.AbstractContextManager[Any]: ...

        def _commit(self, conn: Any) -> None: ...

    @property
    def clock(self) -> Callable[[], float]:
        """Unix time, the store's."""
        return self._clock

    @property
    def closed(self) -> bool:
        """True once the store is closed."""
        return self._conn is None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Make the calls in the block durable together: nothing commits until it ends.

        A crawler records one batch of pages with several calls -- fail() for some,
        release() for others, complete_many() with the outputs' checkpoint last -- and a
        crash must keep all of them or none: a failure committed before the checkpoint
        that covers its output record would lose that record on resume.  A block that
        raises commits nothing on its way out (the next commit will, or a crash undoes it).

        A block begins with what is uncommitted committed (outcomes a store commits in batches,
        a raised block's calls), so that its transaction holds the block alone: a call refused
        in it undoes exactly the block, whatever came before.
        """
        with self._lock:
            if not self._batching:
                with self._db() as conn:
                    self._commit(conn)
            self._batching += 1
            try:
                yield
            finally:
                self._batching -= 1
            if not self._batching and self._commit_deferred:
                self._commit_deferred = False
                with self._db() as conn:
                    self._commit(conn)

    def flush(self) -> None:
        """Commit what is pending (outside a transaction block)."""
        with self._db() as conn:
            self._commit(conn)

    def min_due_depth(self) -> int | None:
        """The smallest depth among waiting URLs that are due now, None when there is none."""
        with self._db() as conn:
            self._commit(conn)
            row = conn.execute(self._MIN_DUE_DEPTH, (self._clock(),)).fetchone()
            return int(row[0]) if row is not None else None

    def lookup(self, url: str) -> StoredURL | None:
        """The stored URL ``url`` as the store keeps it, committed first; None when unknown."""
        with self._db() as conn:
            self._commit(conn)
            row = conn.execute(self._LOOKUP, (url,)).fetchone()
        if row is None:
            return None
        (url, state, attempts, depth, priority, parent, status, error, discovered, fetched, due, lastmod,
         etag, last_modified, digest, visits, changes, next_due, changed_time, unchanged_time) = row
        return StoredURL(url, state, attempts, depth, priority, parent, status, error, float(discovered),
                         None if fetched is None else float(fetched), None if due is None else float(due),
                         lastmod, etag, last_modified, digest, int(visits), int(changes),
                         None if next_due is None else float(next_due), float(changed_time), float(unchanged_time))

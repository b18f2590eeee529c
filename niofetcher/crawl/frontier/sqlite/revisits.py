"""A SQLite frontier's revisits: done and error URLs back to 'waiting' when they fall due again
(``wake()``), and how many are due (``revisits()``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from ..base import Revisits
from ..schema import DUE_AGAIN, REVISITS, WAKE
from .claims import HostQueues
from .transactions import Transactions

__all__ = ["Revisiting"]


class Revisiting(Transactions):
    """The revisits of the SQLite Frontier (a part of it): its clock, its hosts' queues, its
    counts (``_move``) and the time of its last wake are the Frontier's."""

    _clock: Callable[[], float]
    _queues: HostQueues

    def _move(self, old: str, new: str, n: int = 1) -> None:
        raise NotImplementedError

    def wake(self, now: float) -> int:
        """Done and error URLs whose ``next_due`` is ``now`` or earlier back to 'waiting', due since
        then, their attempts from 0, their hosts in line; how many.  One range of the partial index
        ``urls_revisit``: the done rows that are not due are not read."""
        with self._db() as conn:
            (due,) = conn.execute(DUE_AGAIN, (now,)).fetchone()
            rows = json.loads(due)
            if not rows:
                return 0
            self._begin(conn)
            self._wake_rows(conn, rows, now)
            self._commit(conn)
            self._line_up(rows)
            return len(rows)

    def _wake_rows(self, conn: sqlite3.Connection, rows: list[list[Any]], now: float) -> None:
        """Done and error rows (``[rowid, state, host, priority]``, as DUE_AGAIN and MODIFIED_ROWS
        give them) back to 'waiting', inside the caller's transaction; their hosts go in line
        (:meth:`_line_up`) once it is committed."""
        conn.execute(WAKE, (json.dumps([row[0] for row in rows]), now))
        for _rowid, state, _host, _priority in rows:
            self._move(state, "waiting")

    def _line_up(self, rows: list[list[Any]]) -> None:
        """The hosts of rows :meth:`_wake_rows` moved, in line for claims."""
        for _rowid, _state, host, priority in rows:
            self._queues.offer(host, priority)

    def revisits(self) -> Revisits:
        """How many done and error URLs are due again now, and when the next one falls due."""
        with self._db() as conn:
            self._commit(conn)
            due, later = conn.execute(REVISITS, (self._clock(),)).fetchone()
            return Revisits(int(due), None if later is None else float(later))

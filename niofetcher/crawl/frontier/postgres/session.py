"""The connection of a PostgreSQL frontier: one connection behind one lock, and when its changes commit.

*Transactions.*  Every call commits before it returns, except inside :meth:`Session.batch`, where the
block commits once at its end (the crawler's round: its outcomes, their links, its next claim).
A call that fails rolls the open transaction back -- inside a batch, all of the batch -- and the
frontier reads what it keeps in memory from the database again: a database failure raises one
:class:`FrontierError` line (a server that cannot be reached names host:port), a refused call
its ValueError.  A block that raises by itself commits nothing on its way out (the next call
that commits does, or the end of the connection undoes it), as on SQLite.  ``connect_timeout``
and ``statement_timeout`` bound every wait on the server, and TCP keepalives notice a server or
a network that is gone within about a lease (:func:`keepalives`): a worker that cannot reach the
database cannot keep its hosts, and ends rather than wait.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..base import STATES, FrontierError, FrontierErrorKind
from ..postgres_schema import STORE_COUNTS

if TYPE_CHECKING:
    import psycopg

__all__ = ["Session", "first_line", "keepalives", "single", "where_of"]


def _not_a_pipeline_echo(record: logging.LogRecord) -> bool:
    """psycopg logs "error ignored terminating <Pipeline>" when a pipeline ends on a connection
    already lost; the FrontierError raised then says so already, in its one line."""
    return not str(record.msg).startswith("error ignored terminating")


logging.getLogger("psycopg").addFilter(_not_a_pipeline_echo)


def first_line(exc: BaseException) -> str:
    """The first line of what ``exc`` says (its class name when it says nothing): a message is one line."""
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def keepalives(psycopg: Any, dsn: str, lease: float) -> dict[str, Any]:
    """libpq settings that notice a dead server or network within about a lease, where the
    kernel's defaults take two hours: a probe after a third of a lease idle, then three a sixth
    of a lease apart, and data sent but not acknowledged for a lease ends the connection too
    (tcp_user_timeout: keepalives are only sent while nothing is).  A DSN's own settings win."""
    wanted = {"keepalives": 1, "keepalives_idle": max(1, round(lease / 3)),
              "keepalives_interval": max(1, round(lease / 6)), "keepalives_count": 3,
              "tcp_user_timeout": max(1000, round(lease * 1000))}
    given = psycopg.conninfo.conninfo_to_dict(dsn)
    return {name: value for name, value in wanted.items() if name not in given}


def single(cursor: psycopg.Cursor[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The one row a statement gives (an aggregate, or an update of a row known to be there)."""
    row = cursor.fetchone()
    if row is None:
        raise FrontierError("a statement that gives one row gave none")
    return row


def where_of(psycopg: Any, dsn: str) -> str:
    """host:port/database of ``dsn`` for messages (never its password)."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise FrontierError(f"not a PostgreSQL connection string: {first_line(exc)}",
                            FrontierErrorKind.UNAVAILABLE) from None
    host = params.get("host") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    database = params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or "postgres"
    return f"{host}:{port}/{database}"


class Session:
    """One worker's connection to its crawl: the lock around it, the worker's changes to the counts
    that its next commit stores, and when its calls commit (see "Transactions" above).  The base of
    :class:`~niofetcher.crawl.frontier.postgres.PostgresFrontier`, which opens ``_conn``.

    Args:
        driver: psycopg, imported by the frontier when one is opened.
        crawl: the crawl's name, its schema's.
        where: host:port/database of the server, for messages.
        clock: unix time, for what the worker records and asks (due times).
    """

    def __init__(self, driver: types.ModuleType, crawl: str, where: str, clock: Callable[[], float]) -> None:
        self._psycopg = driver
        self.crawl = crawl
        self.where = where
        self._clock = clock
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._lock = threading.RLock()
        self._batching = 0  # open batch() blocks: while there are any, no commit happens
        self._commit_deferred = False  # a commit was asked for inside a batch
        self._delta = dict.fromkeys(STATES, 0)  # what this worker changed since its last commit
        self.rollbacks = 0  # _roll_back() counts them (store.Store.rollbacks)
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None

    def _reload(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """Read again from the database what the subclass keeps in memory: after a rollback it is stale."""
        raise NotImplementedError

    def _committed(self) -> None:
        """What the subclass keeps of each commit, once it is made."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _db(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """Hold the lock and the connection; a call that fails rolls the transaction back (see
        "Transactions" above) and database errors become one FrontierError line."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise FrontierError(f"the frontier of crawl {self.crawl!r} at {self.where} is closed",
                                    FrontierErrorKind.CLOSED)
            try:
                yield conn
            except self._psycopg.Error as exc:
                self._roll_back(conn)
                raise FrontierError(f"{first_line(exc)}: crawl {self.crawl!r} at {self.where}") from None
            except BaseException:
                self._roll_back(conn)
                raise

    def _roll_back(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._commit_deferred = False  # what it would have committed is gone
        with contextlib.suppress(self._psycopg.Error):  # a lost connection: every later call says so
            conn.rollback()
            self.rollbacks += 1
            self._delta = dict.fromkeys(STATES, 0)
            self._reload(conn)
            conn.commit()

    def _commit(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        if self._batching:
            self._commit_deferred = True
        elif conn.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
            self._store_and_commit(conn)

    def _store_and_commit(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """This worker's changes to the counts go into the commit that makes them true: both in
        one round trip (a COMMIT statement in the pipeline: conn.commit() there would wait for a
        sync of its own)."""
        if not any(self._delta.values()):
            conn.commit()
        else:
            with conn.pipeline():
                conn.execute(STORE_COUNTS, {"me": self.worker_id, "states": list(self._delta),
                                            "counts": list(self._delta.values())})
                conn.execute("COMMIT")
            self._delta = dict.fromkeys(STATES, 0)
        self._committed()

    def _move(self, old: str, new: str, n: int = 1) -> None:
        self._delta[old] -= n
        self._delta[new] += n

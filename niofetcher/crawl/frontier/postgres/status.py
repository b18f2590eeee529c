"""Where a crawl in PostgreSQL stands: what a worker reads of the whole crawl, and
:func:`crawl_status`, which reads it as no worker.

*The whole crawl.*  The counts are the sums of rows each worker adds its own changes to, in the
commit that makes them true; ``next_due()`` answers for this worker's hosts and, when nothing of
them waits, says "soon" while anything waits or is in flight anywhere, so a worker ends only when
the whole crawl has.  A host another worker added URLs to is taken (or kept) by whoever has room.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..base import STATES, CrawlStatus, FrontierError, FrontierErrorKind, Revisits, WorkerStatus, check_crawl_name
from ..postgres_schema import (
    BUSIEST_HOSTS,
    COUNTS,
    FAILURES,
    LIVE_WORKERS,
    MIN_DUE_DEPTH,
    NEXT_DUE,
    REVISITS,
)
from .leases import HostLeases
from .session import first_line, single, where_of
from .tables import create_or_check

if TYPE_CHECKING:
    import psycopg

__all__ = ["CrawlReads", "crawl_failures", "crawl_status", "prepare_crawl"]

# What next_due() says when nothing of this worker's waits but the crawl goes on elsewhere: look again in a second.
_POLL_SECONDS = 1.0

# The columns of StoredURL, in its order (the SQLite frontier's statement, with psycopg's placeholder).
_LOOKUP = ("SELECT url, state, attempts, depth, priority, parent, status, error, discovered_at, fetched_at,"
           " next_attempt_at, lastmod, etag, last_modified, digest, visits, changes, next_due, changed_time,"
           " unchanged_time FROM urls WHERE url = %s")


class CrawlReads(HostLeases):
    """What a worker reads of the crawl: its counts, when its next URL is due, its failures, the
    checkpoint (all it keeps of one URL and the smallest due depth are sqlstore.SQLStore's, by the
    statements below).  Each commits what is pending first (outside a batch)."""

    # What SQLStore (sqlstore.py) reads with: lookup(), min_due_depth().
    _LOOKUP = _LOOKUP
    _MIN_DUE_DEPTH = MIN_DUE_DEPTH

    def checkpoint(self) -> dict[str, int]:
        """The checkpoint entries stored by :meth:`complete_many`, committed."""
        with self._db() as conn:
            self._commit(conn)
            return {name: int(value) for name, value in conn.execute("SELECT name, value FROM checkpoints")}

    def counts(self) -> dict[str, int]:
        """URLs per state in the whole crawl, every worker's; all four states are always there."""
        with self._db() as conn:
            self._keep_leases(conn)
            self._commit(conn)
            counts = dict(self._delta)  # this worker's, not committed yet (inside a batch)
            for state, n in conn.execute(COUNTS):
                counts[state] += int(n)
            return counts

    def next_due(self) -> float | None:
        """The earliest time (unix) a waiting URL of this worker's hosts is due; when none is,
        a second from now while anything waits or is in flight anywhere in the crawl (another
        worker's claims may add URLs, a dead worker's hosts wait to be taken); None when the
        whole crawl is done."""
        with self._db() as conn:
            self._keep_leases(conn)
            self._commit(conn)
            due, anything = single(conn.execute(NEXT_DUE, {
                "ids": [host_id for host_id, _ in self._held.values()], "fenced": self._fenced}))
            if due is not None:
                return float(due)
            return self._clock() + _POLL_SECONDS if anything else None

    def failures(self, since: float, limit: int) -> list[tuple[str, str]]:
        """The first ``limit`` URLs of the crawl (any worker's) that ended in 'error' at or after
        ``since`` (unix time), oldest first, each with its error."""
        with self._db() as conn:
            self._commit(conn)
            return [(str(url), str(why)) for url, why in conn.execute(FAILURES, {"since": since, "limit": limit})]


def crawl_status(dsn: str, crawl: str, *, top: int = 10, connect_timeout: float = 10.0) -> CrawlStatus:
    """Read where crawl ``crawl`` at ``dsn`` stands, as no worker: nothing is taken or written.

    Raises:
        FrontierError: the server cannot be reached, or holds no frontier of that name and version.
        ImportError: when psycopg is not installed.
    """
    with _reading(dsn, crawl, connect_timeout) as conn:
        counts = dict.fromkeys(STATES, 0)
        counts.update((state, int(n)) for state, n in conn.execute(COUNTS))
        workers = [WorkerStatus(*row) for row in conn.execute(LIVE_WORKERS)]
        busiest = [(host, int(n), owner) for host, n, owner in conn.execute(BUSIEST_HOSTS, {"top": top})]
        due, later = single(conn.execute(REVISITS, {"now": time.time()}))
        return CrawlStatus(counts, workers, busiest, Revisits(int(due), None if later is None else float(later)))


def crawl_failures(dsn: str, crawl: str, since: float, limit: int, *,
                   connect_timeout: float = 10.0) -> list[tuple[str, str]]:
    """What :meth:`CrawlReads.failures` answers, read as no worker (``crawl --frontier``'s summary
    after its run): a worker that opened the crawl for it would take free hosts for that moment.

    Raises:
        FrontierError, ImportError: as :func:`crawl_status`.
    """
    with _reading(dsn, crawl, connect_timeout) as conn:
        return [(str(url), str(why)) for url, why in conn.execute(FAILURES, {"since": since, "limit": limit})]


def prepare_crawl(dsn: str, crawl: str, *, connect_timeout: float = 10.0) -> None:
    """Create crawl ``crawl``'s tables at ``dsn`` when it is new, or check (and upgrade) them, as the
    first worker would, but as no worker: none registers, no host is taken (``crawl --frontier``
    checks its frontier so before it starts).

    Raises:
        FrontierError, ImportError: as :func:`crawl_status`, but a crawl that does not exist yet is made.
    """
    import psycopg

    crawl = check_crawl_name(crawl)
    where = where_of(psycopg, dsn)
    try:
        with psycopg.connect(dsn, connect_timeout=max(1, round(connect_timeout))) as conn:  # commits on the way out
            create_or_check(conn, crawl, where, time.time)
    except psycopg.Error as exc:
        raise FrontierError(f"cannot open crawl {crawl!r} at {where}: {first_line(exc)}",
                            FrontierErrorKind.UNAVAILABLE) from None


@contextmanager
def _reading(dsn: str, crawl: str, connect_timeout: float) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A connection that reads crawl ``crawl`` (its schema first on the search path), as no worker;
    FrontierError for a crawl that is not there and for any error of the server's."""
    import psycopg
    from psycopg import sql

    crawl = check_crawl_name(crawl)
    where = where_of(psycopg, dsn)
    try:
        with psycopg.connect(dsn, connect_timeout=max(1, round(connect_timeout)), autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s LIMIT 1",
                                (crawl,)).fetchone():
                raise FrontierError(f"there is no crawl {crawl!r} at {where}", FrontierErrorKind.NOT_A_FRONTIER)
            create_or_check(conn, crawl, where, time.time)  # it has tables: this only checks them
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(crawl)))
            yield conn
    except psycopg.Error as exc:
        raise FrontierError(f"cannot read crawl {crawl!r} at {where}: {first_line(exc)}",
                            FrontierErrorKind.UNAVAILABLE) from None


"""Where a crawl in PostgreSQL stands: what a worker reads of the whole crawl, and
:func:`crawl_status`, which reads it as no worker.

*The whole crawl.*  The counts are the sums of rows each worker adds its own changes to, in the
commit that makes them true; ``next_due()`` answers for this worker's hosts and, when nothing of
them waits, says "soon" while anything waits or is in flight anywhere, so a worker ends only when
the whole crawl has.  A host another worker added URLs to is taken (or kept) by whoever has room.
"""

from __future__ import annotations

import time
from typing import Any

from ....urls import normalize_url
from ..base import STATES, CrawlStatus, FrontierError, FrontierErrorKind, StoredURL, WorkerStatus, check_crawl_name
from ..postgres_schema import (
    BUSIEST_HOSTS,
    COUNTS,
    FAILURES,
    LIVE_WORKERS,
    MIN_DUE_DEPTH,
    NEXT_DUE,
    STATE_OF,
    create_or_check,
)
from .leases import HostLeases
from .session import first_line, single, where_of

__all__ = ["CrawlReads", "crawl_status"]

# What next_due() says when nothing of this worker's waits but the crawl goes on elsewhere: look again in a second.
_POLL_SECONDS = 1.0

# The columns of StoredURL, in its order (the SQLite frontier's statement, with psycopg's placeholder).
_LOOKUP = ("SELECT url, state, attempts, depth, priority, parent, status, error, discovered_at, fetched_at,"
           " next_attempt_at, lastmod FROM urls WHERE url = %s")


class CrawlReads(HostLeases):
    """What a worker reads of the crawl: its counts, when its next URL is due, its failures, the
    state of a URL and all it keeps of one, the checkpoint.  Each commits what is pending first
    (outside a batch)."""

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

    def min_due_depth(self) -> int | None:
        """The smallest depth among waiting URLs that are due now, None when there is none."""
        with self._db() as conn:
            self._commit(conn)
            row = conn.execute(MIN_DUE_DEPTH, (self._clock(),)).fetchone()
            return int(row[0]) if row is not None else None

    def state(self, url: str) -> str | None:
        """The state of a URL (in any form that normalises to a known one), None if unknown or invalid."""
        try:
            key = normalize_url(url)
        except (TypeError, ValueError):
            return None
        with self._db() as conn:
            self._commit(conn)
            row = conn.execute(STATE_OF, (key,)).fetchone()
            return str(row[0]) if row is not None else None

    def lookup(self, url: str) -> StoredURL | None:
        """``url`` (in any form that normalises to a known one) as the crawl keeps it, whichever
        worker wrote it last; None if unknown or invalid."""
        try:
            key = normalize_url(url)
        except (TypeError, ValueError):
            return None
        with self._db() as conn:
            self._commit(conn)
            row = conn.execute(_LOOKUP, (key,)).fetchone()
            return _stored_url(row) if row is not None else None


def _stored_url(row: Any) -> StoredURL:
    """A row of _LOOKUP as a StoredURL."""
    url, state, attempts, depth, priority, parent, status, error, discovered, fetched, due, lastmod = row
    return StoredURL(url, state, attempts, depth, priority, parent, status, error, float(discovered),
                     None if fetched is None else float(fetched), None if due is None else float(due), lastmod)


def crawl_status(dsn: str, crawl: str, *, top: int = 10, connect_timeout: float = 10.0) -> CrawlStatus:
    """Read where crawl ``crawl`` at ``dsn`` stands, as no worker: nothing is taken or written.

    Raises:
        FrontierError: the server cannot be reached, or holds no frontier of that name and version.
        ImportError: when psycopg is not installed.
    """
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
            counts = dict.fromkeys(STATES, 0)
            counts.update((state, int(n)) for state, n in conn.execute(COUNTS))
            workers = [WorkerStatus(*row) for row in conn.execute(LIVE_WORKERS)]
            busiest = [(host, int(n), owner) for host, n, owner in conn.execute(BUSIEST_HOSTS, {"top": top})]
    except psycopg.Error as exc:
        raise FrontierError(f"cannot read crawl {crawl!r} at {where}: {first_line(exc)}",
                            FrontierErrorKind.UNAVAILABLE) from None
    return CrawlStatus(counts, workers, busiest)


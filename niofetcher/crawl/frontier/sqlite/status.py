"""Where a crawl in a SQLite file stands: what its frontier reads of it, and :func:`crawl_status`,
which reads the file from outside.

*Reading from outside.*  :func:`crawl_status` (``niofetcher status --db``) reads
a file through a read-only connection of its own, without the owner's lock:
a crawl may be running on it.  WAL lets it read the last commit while the
crawler goes on writing; it never writes, and never creates a missing file,
nor SQLite's -wal and -shm beside a file no crawl has open.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable

from ..base import STATES, CrawlStatus, FrontierError, FrontierErrorKind, Revisits, check_int
from ..schema import BUSIEST_HOSTS, COUNTS, FAILURES, MIN_DUE_DEPTH, NEXT_DUE, REVISITS, SCHEMA_VERSION, check_schema
from .transactions import Transactions, database_error

__all__ = ["CrawlReads", "crawl_status"]

# The oldest schema version crawl_status() reads: the first with hosts and stored counts (an older
# file is upgraded by the next crawl that opens it, which a reader may not do).
_STATUS_SINCE_VERSION = 3

# The columns of StoredURL, in its order: the same statement on both backends but for the placeholder.
_LOOKUP = ("SELECT url, state, attempts, depth, priority, parent, status, error, discovered_at, fetched_at,"
           " next_attempt_at, lastmod, etag, last_modified, digest, visits, changes, next_due, changed_time,"
           " unchanged_time FROM urls WHERE url = ?")


class CrawlReads(Transactions):
    """What the store reads of its crawl: the counts, when the next URL is due, the failures, the
    checkpoint (all it keeps of one URL and the smallest due depth are sqlstore.SQLStore's, by the
    statements below).  Each commits what is pending first (outside a batch)."""

    _counts: dict[str, int]  # URLs per state, kept by the frontier's own statements
    _clock: Callable[[], float]  # unix time, the frontier's

    # What SQLStore (sqlstore.py) reads with: lookup(), min_due_depth().
    _LOOKUP = _LOOKUP
    _MIN_DUE_DEPTH = MIN_DUE_DEPTH

    def checkpoint(self) -> dict[str, int]:
        """The checkpoint entries stored by :meth:`complete_many`, committed (empty for a new frontier)."""
        with self._db() as conn:
            self._commit(conn)
            return dict(conn.execute("SELECT name, value FROM checkpoints"))

    def counts(self) -> dict[str, int]:
        """URLs per state; all four states are always there."""
        with self._db() as conn:
            self._commit(conn)
            return dict(self._counts)

    def next_due(self) -> float | None:
        """The earliest time (unix) a waiting URL is due, None when none waits.

        A time not later than now means :meth:`claim` has work now; a later
        one is how long a crawler with nothing in flight may sleep.
        """
        with self._db() as conn:
            self._commit(conn)
            (due,) = conn.execute(NEXT_DUE).fetchone()
            return float(due) if due is not None else None

    def failures(self, since: float, limit: int) -> list[tuple[str, str]]:
        """The first ``limit`` URLs that ended in 'error' at or after ``since`` (unix time), oldest
        first, each with its error."""
        with self._db() as conn:
            self._commit(conn)
            return [(str(url), str(why)) for url, why in conn.execute(FAILURES, (since, limit))]


def crawl_status(path: str | os.PathLike[str], *, top: int = 10) -> CrawlStatus:
    """Read where the crawl in the SQLite file ``path`` stands: its URLs per state (as its last
    commit stored them) and the ``top`` hosts with the most URLs waiting, in one snapshot.

    It reads only, through a read-only connection, and takes no lock: a crawl may be running on
    the file (see "Reading from outside" above).  The result is the PostgreSQL frontier's
    :class:`~niofetcher.crawl.frontier.base.CrawlStatus`, without workers and without owners.

    Raises:
        FrontierError: one line naming ``path``: it is missing or cannot be read, is not SQLite,
            is not a niofetcher frontier, is damaged, or is of a schema version this code does
            not read.
    """

    check_int("top", top, 1)
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FrontierError(f"{path} does not exist", FrontierErrorKind.UNAVAILABLE)
    if os.path.isdir(path):
        raise FrontierError(f"{path} is a directory", FrontierErrorKind.UNAVAILABLE)
    # mode=ro: SQLite never creates the file, and refuses to write to it.  With no log beside the
    # file, no crawl has it open (a crawl's connection keeps its -wal until it closes): immutable=1
    # then reads it without the -shm and -wal that even a read-only reader of a WAL file creates,
    # which a user who may not write the directory cannot (and which it would leave behind).
    immutable = "" if os.path.exists(f"{path}-wal") else "&immutable=1"
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro{immutable}"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=10.0, isolation_level=None)) as conn:
            conn.execute("BEGIN")  # one snapshot: the counts and the hosts of the same commit
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = check_schema(conn, path, tables)
            if version < _STATUS_SINCE_VERSION:
                raise FrontierError(f"{path} has frontier schema version {version}, which status does not read: "
                                    f"a crawl run on it upgrades it to version {SCHEMA_VERSION}",
                                    FrontierErrorKind.NOT_A_FRONTIER)
            (counts,) = conn.execute(COUNTS).fetchone()
            stored = json.loads(counts)
            busiest: list[tuple[str, int, str | None]] = [
                (str(host), int(n), None) for host, n in conn.execute(BUSIEST_HOSTS, (top,))]
            revisits = Revisits(0, None)
            if version >= 9:  # a file from before revisits has none (status upgrades nothing)
                due, later = conn.execute(REVISITS, (time.time(),)).fetchone()
                revisits = Revisits(int(due), None if later is None else float(later))
    except sqlite3.DatabaseError as exc:  # "file is not a database", "unable to open database file", ...
        what = "is not a SQLite database" if "not a database" in str(exc) else f"cannot be read: {exc}"
        raise database_error(exc, f"{path} {what}") from None
    return CrawlStatus({state: int(stored.get(state, 0)) for state in STATES}, [], busiest, revisits)

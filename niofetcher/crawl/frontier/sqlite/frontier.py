"""The crawl frontier: every URL a crawl knows of, in one SQLite table.

Each URL is in exactly one state (see ``base.py`` for the states, how a URL
moves between them, its depth and what a crash does) -- it is one column of
one row.  The table is meant to be read by people too::

    $ sqlite3 crawl.db "SELECT state, COUNT(*) FROM urls GROUP BY state"
    $ sqlite3 crawl.db "SELECT url, status, error FROM urls WHERE state = 'error'"

Theory of operation
-------------------

*Speed.*  A crawler adds thousands of links a second (about 50 a page) and
claims and completes hundreds of URLs a second.  The file is in WAL mode
with ``synchronous=NORMAL``: a commit appends to the log and does not fsync
(the log is synced at checkpoints, which a thread of their own runs:
``wal.py``), so a commit costs tens of microseconds, and a power cut can
lose the last few commits but never corrupts the file.
The primary key does the de-duplication (``INSERT ... ON CONFLICT``).
``benchmarks/frontier_speed.py`` measures it.

*Claims, host by host.*  A crawler keeps every connection busy only if a
claim spreads over hosts that can take URLs now: a page's links cluster by
host, and one queue in discovery order handed them out together.  So each
URL row names its host (``host_id``, a row of ``hosts``), a partial index
holds each host's waiting rows in claim order -- a queue per host --, and
``claim()`` takes the hosts in turn (``claims.py`` over ``hosts.py``): the
next hosts that the caller's ``host_room`` says can take URLs, a share of
the claim from each, round-robin within a priority, breadth first and FIFO
within a host.

*The GIL.*  The sqlite3 module lets go of the GIL for every step of every
statement -- for ``executemany`` once per row, for a query once per row
returned -- and getting it back waits for the switch interval (5 ms) when
another thread is busy running Python.  In a crawler some thread always is:
an ``executemany`` of 60 links measured 10 us a row alone and 7 ms a row
beside one busy thread.  So every method here is a handful of statements
whatever the number of URLs: many URLs travel as one JSON array that the
statement reads with ``json_each``, and ``claim()`` picks its rows into one
JSON result row with ``json_group_array``.

*Checkpoints.*  ``complete_many(outcomes, checkpoint)`` stores a few named
numbers -- the CLI keeps the byte length of each output file it has flushed
-- in the same transaction as those outcomes, and so in the same commit,
whenever that comes: after a crash the file holds both or neither.  A URL is
'done' exactly when its output is within the stored length, so a resumed
crawl cuts each output back to ``checkpoint()`` and writes every record once.

*Counts, and opening.*  ``counts()`` is called often (progress lines, "is
the crawl over?"), and ``GROUP BY state`` reads the whole table -- about
50 ms per 100,000 URLs, 5 s at 5 million.  So the frontier keeps the
numbers up to date from the row counts of its own statements, and stores
them in ``state_counts`` with every commit that changes them; nothing that
opening a file does grows with the table: the counts are read, the rows a
crash left 'processing' are found through their own index, and the hosts
with waiting URLs are one probe each.  This is one reason why one Frontier
owns a file at a time: another writer (a user's UPDATE in the sqlite3 shell)
would make the stored numbers wrong.  Readers are welcome at any time --
WAL never makes them wait for the crawler, nor the crawler for them.

*One owner.*  Opening a file takes an exclusive ``flock()`` on ``<path>.lock``
before it reads anything (see ``lock.py``): a second opener gets
:class:`FrontierLocked` and changes nothing.


*Reading from outside.*  See ``status.py``: a crawl's status read without its lock.

*Batched commits, errors, threads.*  See ``transactions.py``: ``complete()``,
``complete_many()`` and ``fail()`` commit in batches, every other method before
it returns; a failed statement rolls the open transaction back and raises one
:class:`FrontierError` line; every method is atomic, from any thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ....urls import host_key
from ..base import STATES, FrontierError, FrontierErrorKind, FrontierURL, Visit, processing_key, refuse_moved_options
from ..schema import (
    ADD_ADMITTED,
    ADMITTED_OF,
    ADMITTED_THROUGH,
    COMPLETE,
    COMPLETE_MANY,
    COUNT_ROWS,
    COUNTS,
    GIVE_UP,
    INSERT,
    INSERT_HOSTS,
    KNOWN_URLS,
    LAST_ROW,
    MARK_CLAIMED,
    MODIFIED_ROWS,
    RELEASE,
    RELEASED_HOSTS,
    RETRY,
    SAVE_CHECKPOINT,
    SET_ADMITTED_THROUGH,
    SET_LASTMODS,
    STORE_COUNTS,
    STORE_REFUSALS,
    VISITED,
    create_or_upgrade,
)
from ..service import Additions, FrontierService, check_traps
from ..sqlstore import SQLStore
from ..traps import TrapRules
from .claims import DEEPEST, HostQueues, Row
from .hostdata import HostData
from .lock import OwnerLock, path_problem
from .revisits import Revisiting
from .status import CrawlReads
from .transactions import database_error
from .wal import LogCheckpointer

__all__ = ["Frontier", "SQLiteStore"]


class Frontier(FrontierService):
    """The crawl frontier, in a SQLite file (or in memory): a :class:`SQLiteStore` under the service.

    Args:
        path: the SQLite file, created when missing; ``":memory:"`` keeps
            the frontier in memory (tests, throw-away crawls).
        clock: unix time, for discovered_at, fetched_at and due times;
            tests pass a fake one.
        commit_every, commit_interval: how many :meth:`complete` /
            :meth:`fail` calls may wait uncommitted, and for how long (see
            "Batched commits" above).  Every other method commits.
        traps: the trap rules :meth:`add_many` applies to what it is given
            (``traps.py``); None: none.  The links refused are counted in
            :attr:`not_followed` and stored by cause in ``refusals``.

    The retry policy is not the frontier's: :meth:`fail` is told how long a URL waits
    (``max_attempts``, ``retry_delay`` and ``max_retry_delay`` moved to the crawl's
    :class:`~niofetcher.crawl.schedule.RetrySchedule`; given here, they raise TypeError saying so).

    Raises:
        FrontierLocked: when another Frontier has the file open, in this
            process or another (see "One owner" above); nothing is changed.
        FrontierError: when the file cannot be opened (its directory is
            missing, it is a directory, it may not be read and written), is
            not SQLite, is corrupt, is some other program's database, or has a
            schema version this code does not know.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        clock: Callable[[], float] = time.time,
        commit_every: int = 128,
        commit_interval: float = 0.1,
        traps: TrapRules | None = None,
        **moved: object,
    ) -> None:
        refuse_moved_options("Frontier", moved)
        traps = check_traps(traps)
        store = SQLiteStore(path, clock=clock, commit_every=commit_every, commit_interval=commit_interval,
                            count_admitted=traps is not None and traps.max_pages_per_host is not None)
        super().__init__(store, traps=traps)
        self.store: SQLiteStore = store
        self.path = store.path

    def flush(self) -> None:
        """Commit the outcomes still pending (outside a batch() block)."""
        self.store.flush()


class SQLiteStore(CrawlReads, Revisiting, HostData, SQLStore):
    """A crawl's URLs in a SQLite file (or in memory), which one process holds: the storage
    operations of ``store.Store`` (see "Theory of operation" above).

    Args:
        path, clock, commit_every, commit_interval: as for :class:`Frontier`.
        count_admitted: keep the URLs admitted per host up to date (a crawl with a per-host budget).
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Callable[[], float], commit_every: int,
                 commit_interval: float, count_admitted: bool) -> None:
        # The admitted table is kept up to date only by a frontier that checks it (see schema.py, version 7).
        self._counting_admitted = count_admitted
        super().__init__(os.fspath(path), commit_every, commit_interval)
        self._clock = clock
        self._counts = dict.fromkeys(STATES, 0)
        self._stored_counts = dict(self._counts)  # what state_counts holds
        self._next_seq = 1
        self._last_rowid = 0  # the largest rowid in urls: see add_many()
        self._queues = HostQueues()  # every host with a waiting URL, in turn or parked
        self._owner: OwnerLock | None = None
        self._log: LogCheckpointer | None = None
        if self.path not in ("", ":memory:"):  # "" is a temporary file of SQLite's own
            problem = path_problem(self.path)
            if problem is not None:
                raise FrontierError(f"cannot open {self.path}: {problem}", FrontierErrorKind.UNAVAILABLE)
            self._owner = OwnerLock(self.path)  # before anything reads the file
            self._log = LogCheckpointer(self.path)
            weakref.finalize(self, self._log.stop_soon)  # its thread outlives no frontier
        try:
            # isolation_level=None: no implicit BEGINs; this class says when.
            conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
            try:
                self._open(conn)
            except BaseException:
                conn.close()
                raise
        except sqlite3.Error as exc:
            self._let_go()
            raise database_error(exc, f"cannot open {self.path}: {exc}") from exc
        except BaseException:
            self._let_go()
            raise
        self._conn = conn

    # -- opening -----------------------------------------------------------

    def _open(self, conn: sqlite3.Connection) -> None:
        """Set the file up, check, create or upgrade the schema, recover, and line the hosts up."""
        # A new file gets pages of 2 KiB, not 4: the frontier's writes are rows and index entries
        # far apart (a claim spread over hosts, a new URL's place in the url index), a page each,
        # and every page changed is written twice (log, then file).  At 300k URLs a crawl-like
        # round wrote 61 KB a page with 2 KiB pages, 105 KB with 4 KiB (CPU time alike).  Not 1 KiB
        # (46 KB): an index keeps a key of more than ~230 bytes there on an overflow page of its
        # own, which doubled the file for URLs of 300 bytes; 2 KiB holds keys up to ~480 bytes.
        # A file made before keeps its pages.
        conn.execute("PRAGMA page_size = 2048")
        # The first statement that reads the file: "file is not a database" comes from here.
        conn.execute("PRAGMA journal_mode = WAL")  # answers 'memory' for :memory:, which is fine
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("PRAGMA cache_size = -65536")  # 64 MiB: the upper levels of every index, and more
        # Read the file through a mapping (SQLite caps it, 2 GiB in Python's builds): a page the
        # cache does not hold costs a page fault, not a pread() and a copy.  A quarter faster claims
        # and completions at 1M URLs, a third faster adds of known ones (measured, runs alternated).
        # Writes still go through the log, so a full disk is still an error, not a signal.
        conn.execute("PRAGMA mmap_size = 4294967296")
        # The log is checkpointed by a thread of its own (wal.py), four times a second once it is
        # long, and started again from its beginning every 64 MiB (this connection copying its
        # last commits then); this connection checkpoints it by itself past 256 MiB, should that
        # thread fall behind.  That writes the pages every commit touches (the hosts' queue heads,
        # the counts) to the file more often than one checkpoint per 64 MiB did (268 against 236
        # MiB written in an 8 s crawl-like run, 29 fdatasync()s against 11), and is faster all the
        # same (docs/benchmarks.md): the commit that ran a 64 MiB checkpoint itself waited 0.2 to
        # 0.4 s.  A log that a long reader made longer is cut back to 64 MiB when it starts again.
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        conn.execute(f"PRAGMA wal_autocheckpoint = {(256 << 20) // page_size}")
        conn.execute(f"PRAGMA journal_size_limit = {64 << 20}")
        conn.execute("BEGIN IMMEDIATE")  # two processes opening one new file: one creates, one checks
        try:
            create_or_upgrade(conn, self.path, self._clock)
            self._reload(conn)
            if self._counting_admitted:
                (through,) = conn.execute(ADMITTED_THROUGH).fetchone()
                if through < self._last_rowid:
                    conn.execute(ADD_ADMITTED, (through,))
                    conn.execute(SET_ADMITTED_THROUGH, (self._last_rowid,))
            # A crashed (or killed) run: put its in-flight URLs back (through urls_processing), and
            # their hosts in line.  Always: one probe when there are none.
            moved = conn.execute("UPDATE urls SET state = 'waiting' WHERE state = 'processing'").rowcount
            if moved != self._counts["processing"]:
                # Stored counts that the rows belie (another writer): count the rows, this once.
                (counted,) = conn.execute(COUNT_ROWS).fetchone()
                self._counts = {state: json.loads(counted).get(state, 0) for state in STATES}
            else:
                self._move("processing", "waiting", moved)
            if moved:
                self._queues.line_up(conn)
            self._before_commit(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise

    def _reload(self, conn: sqlite3.Connection) -> None:
        """The counts as stored, where the FIFO sequence and the rowids go on, and every host with
        a waiting URL in line (a rolled-back claim may have let go of hosts whose URLs wait again)."""
        # The hosts in line afresh, and first, so that a failure below leaves none rather than stale
        # ones: after a rollback a host in line may have lost its row in hosts, and add_many()
        # inserts rows only for hosts out of line.
        self._queues.reset()
        self.rollbacks += 1
        (counts,) = conn.execute(COUNTS).fetchone()
        stored = json.loads(counts)
        self._counts = {state: stored.get(state, 0) for state in STATES}
        self._stored_counts = dict(self._counts)
        last = conn.execute(LAST_ROW).fetchone()
        self._last_rowid, self._next_seq = (last[0], last[1] + 1) if last is not None else (0, 1)
        self._queues.line_up(conn)

    def _mark_claimed(self, conn: sqlite3.Connection, rows: list[Row]) -> None:
        """Claimed rows to 'processing', in the transaction they join."""
        self._begin(conn)
        conn.execute(MARK_CLAIMED, (json.dumps([row[0] for row in rows]),))
        self._move("waiting", "processing", len(rows))

    def _release_rows(self, conn: sqlite3.Connection, keys: list[str]) -> None:
        """Claimed rows back to 'waiting', their attempt given back; their hosts' places are the
        caller's to settle."""
        self._move("processing", "waiting", conn.execute(RELEASE, (json.dumps(keys),)).rowcount)

    def _before_commit(self, conn: sqlite3.Connection) -> None:
        """The counts go into the commit that makes them true."""
        if self._counts != self._stored_counts:
            conn.execute(STORE_COUNTS, (json.dumps(self._counts),))
            self._stored_counts = dict(self._counts)

    def _after_commit(self, conn: sqlite3.Connection) -> None:
        if self._log is not None:
            self._log.committed(conn)

    def _move(self, old: str, new: str, n: int = 1) -> None:
        self._counts[old] -= n
        self._counts[new] += n

    # -- plumbing ----------------------------------------------------------

    def _let_go(self) -> None:
        if self._owner is not None:
            self._owner.release()
            self._owner = None

    # -- adding ------------------------------------------------------------

    def insert(self, additions: Additions, modified: Mapping[str, float] | None) -> int:
        """Store prepared additions (``store.Store.insert``): a statement for the new hosts, one for
        the URLs, one for the lastmods and two for the URLs their dates wake (the rows found through
        the URL key, then the move), however many URLs."""
        with self._db() as conn:
            now = self._clock()
            seq = self._next_seq
            rows = [(key, depth, priority, parent, seq + i, host)
                    for i, (key, (depth, priority, parent, host)) in enumerate(additions.rows.items())]
            self._begin(conn)
            queues = self._queues
            fresh = [host for host in additions.hosts if host not in queues]
            if fresh:  # a host in line or parked has its row already
                conn.execute(INSERT_HOSTS, (json.dumps(fresh),))
            if rows:
                conn.execute(INSERT, (now, json.dumps(rows)))
            woken: list[list[Any]] = []
            if additions.lastmods:
                conn.execute(SET_LASTMODS, (json.dumps(additions.lastmods),))
                if modified:
                    (found,) = conn.execute(MODIFIED_ROWS, (json.dumps(modified),)).fetchone()
                    woken = json.loads(found)
                    if woken:
                        self._wake_rows(conn, woken, now)
            # The new rows got the rowids after the largest one (SQLite's way, short of 2**63
            # rows), so the largest rowid now tells how many were new: the row count cannot,
            # it counts the known URLs whose depth went down too.
            (last,) = conn.execute("SELECT MAX(rowid) FROM urls").fetchone()
            added = (last or 0) - self._last_rowid
            if added and self._counting_admitted:
                conn.execute(ADD_ADMITTED, (self._last_rowid,))
                conn.execute(SET_ADMITTED_THROUGH, (last,))
            if additions.refused:
                conn.execute(STORE_REFUSALS, (json.dumps(additions.refused),))
            self._last_rowid = last or 0
            self._counts["waiting"] += added
            self._commit(conn)
            # Known URLs leave gaps in seq; only the order matters.
            self._next_seq = seq + len(rows)
            # Every host of the batch, whether its URLs were new or not: a host in line with
            # nothing waiting costs one look when its turn comes, a host left out would be lost.
            for host, top in additions.hosts.items():
                self._queues.offer(host, top)
            self._line_up(woken)
            return added

    def admitted(self, hosts: list[str]) -> dict[str, int]:
        """The URLs admitted per host, for those of ``hosts`` with any (``store.Store.admitted``)."""
        with self._db() as conn:
            (counts,) = conn.execute(ADMITTED_OF, (json.dumps(hosts),)).fetchone()
            return {str(host): int(n) for host, n in json.loads(counts).items()}

    def known(self, urls: list[str]) -> set[str]:
        """Those of ``urls`` that are stored (``store.Store.known``)."""
        with self._db() as conn:
            (found,) = conn.execute(KNOWN_URLS, (json.dumps(urls),)).fetchone()
            return set(json.loads(found))

    # -- claiming and outcomes -------------------------------------------------

    def take(
        self, limit: int, max_depth: int | None, host_room: Callable[[str], int] | None
    ) -> list[FrontierURL]:
        """Claim up to ``limit`` due URLs (``store.Store.take``), host by host (``claims.py``): the
        next hosts that ``host_room`` says can take URLs, a share of the claim from each, and those
        with more for more while it is short.  In one transaction: no URL is handed out twice,
        whichever thread asks."""
        with self._db() as conn:
            rows = self._queues.claim(
                conn, limit, DEEPEST if max_depth is None else max_depth, host_room, self._clock(),
                lambda rows: self._mark_claimed(conn, rows),
                lambda rows: self._release_rows(conn, [row[1] for row in rows]),
            )
            if rows:  # with the outcomes still pending; a claim of nothing leaves them to their batch
                self._commit(conn)
        return [
            FrontierURL(url, depth, priority, attempts, parent, lastmod, etag, last_modified, digest, visits, interval,
                        captured_at, changes, changed_time, unchanged_time, since_fetch)
            for (_rowid, url, depth, priority, attempts, parent, _seq, _host, lastmod, etag, last_modified, digest,
                 visits, interval, captured_at, changes, changed_time, unchanged_time, since_fetch) in rows
        ]

    def _complete_one(self, conn: sqlite3.Connection, url: str, status: int | None, now: float) -> None:
        if not conn.execute(COMPLETE, (status, now, url)).rowcount:
            key = self._key_of_processing(conn, url, "complete")
            conn.execute(COMPLETE, (status, now, key))

    def finish(self, outcomes: list[tuple[str, int | None]], checkpoint: dict[str, int] | None,
               visits: Mapping[str, Visit] | None) -> None:
        """Claimed URLs to 'done', all or none, with ``checkpoint`` and ``visits``
        (``store.Store.finish``): one statement for all of them when every URL is a claimed one in
        stored form, the way a crawler records a batch of pages.  Committed in batches (see
        "Batched commits" in transactions.py; a lone checkpoint counts as one outcome)."""
        entries = None if checkpoint is None else json.dumps(checkpoint)
        visited = json.dumps([[url, visit.etag, visit.last_modified, visit.digest, bool(visit.changed),
                               visit.revisit_in, visit.captured_at, visit.changed_time, visit.unchanged_time]
                              for url, visit in visits.items()]) if visits else None
        with self._db() as conn:
            with self._write(conn):
                now = self._clock()
                if outcomes and conn.execute(COMPLETE_MANY, (now, json.dumps(outcomes))).rowcount != len(outcomes):
                    # Not every URL is a claimed one in stored form: undo, and go the long way
                    # round, which finds the stored form of each, or the culprit.
                    conn.execute("ROLLBACK TO frontier_call")
                    for url, status in outcomes:
                        self._complete_one(conn, url, status, now)
                if visited is not None:
                    conn.execute(VISITED, (now, visited))
                if entries is not None:
                    conn.execute(SAVE_CHECKPOINT, (entries,))
            self._move("processing", "done", len(outcomes))
            self._outcome_recorded(conn, len(outcomes) or 1)

    def fail(self, url: str, error: str, status: int | None, retry_in: float | None,
             revisit_in: float | None) -> str:
        """A claimed URL's failed attempt (``store.Store.fail``).  Committed in batches."""
        with self._db() as conn:
            self._begin(conn)
            claimed = "SELECT priority FROM urls WHERE url = ? AND state = 'processing'"
            row = conn.execute(claimed, (url,)).fetchone()
            if row is None:
                url = self._key_of_processing(conn, url, "fail")
                row = conn.execute(claimed, (url,)).fetchone()
            (priority,) = row
            now = self._clock()
            if retry_in is not None:
                conn.execute(RETRY, (status, error, now, now + retry_in, url))
                self._queues.offer(host_key(url), priority)
                new_state = "waiting"
            else:
                conn.execute(GIVE_UP, (status, error, now, url, None if revisit_in is None else now + revisit_in))
                new_state = "error"
            self._move("processing", new_state)
            self._outcome_recorded(conn)
            return new_state

    def _key_of_processing(self, conn: sqlite3.Connection, url: str, action: str) -> str:
        """The stored form of a URL given in another form, or ValueError if it is not processing."""

        def state_of(key: str) -> str | None:
            row = conn.execute("SELECT state FROM urls WHERE url = ?", (key,)).fetchone()
            return None if row is None else str(row[0])

        return processing_key(url, action, state_of)

    def give_back(self, urls: list[str]) -> None:
        """Claimed URLs back to 'waiting', the attempt given back; the others are left alone."""
        with self._db() as conn:
            self._begin(conn)
            listed = json.dumps(urls)
            (released,) = conn.execute(RELEASED_HOSTS, (listed,)).fetchone()
            self._move("processing", "waiting", conn.execute(RELEASE, (listed,)).rowcount)
            self._commit(conn)
            for host, priority in json.loads(released):
                self._queues.offer(host, priority)

    # -- closing -----------------------------------------------------------

    def close(self) -> None:
        """Commit what is pending and close the file.  Closing twice is fine."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            try:
                if conn.in_transaction:
                    try:
                        self._before_commit(conn)
                        conn.execute("COMMIT")
                    except sqlite3.Error as exc:  # closing rolls it back
                        raise database_error(exc, f"{exc}: frontier {self.path}") from exc
                with contextlib.suppress(sqlite3.Error):  # only an optimisation: a full disk may refuse it
                    # Sampled: the ANALYZE that optimize runs on tables never analyzed (every new
                    # file's) otherwise reads every entry of every index, 169 s at 10M URLs.
                    conn.execute("PRAGMA analysis_limit = 1000")
                    conn.execute("PRAGMA optimize")
            finally:
                try:
                    if self._log is not None:  # first, so that this connection is the last to close
                        self._log.stop()
                finally:
                    conn.close()
                    self._let_go()

    def describe(self) -> str:
        """The file, and its URLs per state (or 'closed'), for the frontier's repr."""
        if self._conn is None:
            return f"{self.path!r} closed"
        return f"{self.path!r} " + " ".join(f"{state}={n}" for state, n in self._counts.items())

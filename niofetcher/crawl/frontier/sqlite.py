"""The crawl frontier: every URL a crawl knows of, in one SQLite table.

Each URL is in exactly one state — it is one column of one row::

    add() ──► waiting ──claim()──► processing ──complete()──► done
                 ▲                    │   │
                 │   fail(), retry    │   └──fail(), no retry or
                 ├────────────────────┘       attempts used up──► error
                 │   release(), or reopening after a crash
                 └────────────────────────────────────────────── processing

The table is meant to be read by people too::

    $ sqlite3 crawl.db "SELECT state, COUNT(*) FROM urls GROUP BY state"
    $ sqlite3 crawl.db "SELECT url, status, error FROM urls WHERE state = 'error'"

Theory of operation
-------------------

*Speed.*  A crawler adds thousands of links a second (about 50 a page) and
claims and completes hundreds of URLs a second.  The file is in WAL mode
with ``synchronous=NORMAL``: a commit appends to the log and does not fsync
(the log is synced at checkpoints), so a commit costs tens of microseconds,
and a power cut can lose the last few commits but never corrupts the file.
The primary key does the de-duplication (``INSERT ... ON CONFLICT``); ``claim()``
walks a partial index holding only the waiting rows in claim order.
``benchmarks/frontier_speed.py`` measures it.

*The GIL.*  The sqlite3 module lets go of the GIL for every step of every
statement -- for ``executemany`` once per row, for a query once per row
returned -- and getting it back waits for the switch interval (5 ms) when
another thread is busy running Python.  In a crawler some thread always is:
an ``executemany`` of 60 links measured 10 us a row alone and 7 ms a row
beside one busy thread.  So every method here is a handful of statements
whatever the number of URLs: many URLs travel as one JSON array that the
statement reads with ``json_each``, and ``claim()`` picks its rows into one
JSON result row with ``json_group_array``.

*Batched commits.*  ``complete()``, ``complete_many()`` and ``fail()`` leave
their change in an open transaction until ``commit_every`` outcomes are
pending or ``commit_interval`` seconds have passed since the first; every
other method (``add``, ``add_many``, ``claim``, ``release``, ``counts``,
``next_due``, ``state``, ``checkpoint``, ``flush``, ``close``) commits before it returns.  What a crash can lose is
therefore only the outcome of the last few fetches: such a URL was committed
as 'processing', so the next open puts it back to 'waiting' and it is fetched
again.  A URL is never lost, and a URL whose 'done' was committed is never
fetched again.  ``commit_every=1`` commits every call.

*Checkpoints.*  ``complete_many(outcomes, checkpoint)`` stores a few named
numbers -- the CLI keeps the byte length of each output file it has flushed
-- in the same transaction as those outcomes, and so in the same commit,
whenever that comes: after a crash the file holds both or neither.  A URL is
'done' exactly when its output is within the stored length, so a resumed
crawl cuts each output back to ``checkpoint()`` and writes every record once.

*Errors.*  When a statement fails (a full disk, an I/O error), the whole open
transaction is rolled back -- outcomes still pending with it, and their
checkpoint -- and the counts are read from the file again: the frontier is
left as the last commit left it, and the error is raised as one
:class:`FrontierError` line that starts with SQLite's words ("database or
disk is full: ...").  Nothing is half-done, and close() after it has nothing
left to commit.

*Depth.*  A URL's depth is its shortest distance from a seed: adding a known
URL at a smaller depth than the recorded one lowers it (and records the
parent that gave it), whatever the URL's state.  ``claim()`` hands out the
lower depths first within a priority, so a crawl goes breadth first.

*Crashes.*  Opening a frontier moves leftover 'processing' rows back to
'waiting'.  Their attempt stays counted: the request may well have reached
the server, and a URL that kills the crawler every time it is fetched runs
out of attempts instead of killing every resumed run.  ``release()`` is the
clean way out (a graceful stop): it gives the attempt back.

*Counts.*  ``counts()`` is called often (progress lines, "is the crawl
over?"), and ``GROUP BY state`` reads the whole table — about 50 ms per
100,000 URLs.  So the frontier counts the rows of each state once when it
opens and then keeps the numbers up to date from the row counts of its own
statements.  This is one reason why one Frontier owns a file at a time:
another writer (a user's UPDATE in the sqlite3 shell) would make the
numbers, and the FIFO sequence, stale until the next open.  Readers are
welcome at any time — WAL never makes them wait for the crawler, nor the
crawler for them.

*One owner.*  A second crawl on the same file would put the first one's
'processing' rows back to 'waiting' (the crash recovery above) and fetch
them again.  So opening a file takes an exclusive ``flock()`` on a sidecar
file, ``<path>.lock`` (``path`` with symlinks resolved), before it reads
anything, and holds it until close(); the kernel drops it when the process
dies, so a SIGKILL leaves no stale lock, and a child the crawl forks lets go
of its copy at once (it would outlive the crawl).  A second opener -- another process, or another Frontier in the same
process -- gets :class:`FrontierLocked` naming the owner's pid (written into
the lock file) and changes nothing.  Why a sidecar rather than a ``flock()``
on the database itself, although on Linux flock locks and SQLite's POSIX
(fcntl) locks do not see each other: locking the database needs a file
descriptor of our own on it, and closing *any* descriptor of a file drops
every POSIX lock the process holds on it -- so a second Frontier in the same
process, closing its descriptor after finding the file locked, would silently
drop the first one's SQLite locks (SQLite's "How To Corrupt" §2.2).  On NFS,
Linux implements flock() with POSIX locks, so it would clash with SQLite's
own there.  And a sidecar can say who owns it.

*Threads.*  The crawler calls the frontier from its coordinator thread only,
but every public method takes one re-entrant lock around one connection
(opened with ``check_same_thread=False``), so calls from several threads are
safe: each call is atomic, and a claimed URL is handed to exactly one caller.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import math
import os
import socket
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

from ...urls import normalize_url

__all__ = ["SCHEMA_VERSION", "STATES", "Frontier", "FrontierError", "FrontierLocked", "FrontierURL", "normalize_url"]

#: The version of the tables below, kept in ``meta``.  A file of an older
#: version is upgraded when it is opened (version 1 had no checkpoints table
#: and claimed in discovery order); a newer one is refused rather than
#: misread.  An older niofetcher refuses this version in turn, which is the
#: point: it would not keep the checkpoints up to date.
SCHEMA_VERSION = 2

#: Every state a URL can be in, in the order of its life.
STATES = ("waiting", "processing", "done", "error")

_SCHEMA = """
CREATE TABLE meta (
    key    TEXT NOT NULL PRIMARY KEY,  -- 'schema_version', 'created_at'
    value  TEXT NOT NULL
);

CREATE TABLE urls (
    url             TEXT NOT NULL PRIMARY KEY,   -- normalised (normalize_url): a known URL is never added twice
    state           TEXT NOT NULL DEFAULT 'waiting'
                    CHECK (state IN ('waiting', 'processing', 'done', 'error')),
    attempts        INTEGER NOT NULL DEFAULT 0,  -- claims so far; release() gives one back
    depth           INTEGER NOT NULL DEFAULT 0,  -- link hops from a seed; seeds are 0
    priority        INTEGER NOT NULL DEFAULT 0,  -- higher is claimed first
    parent          TEXT,                        -- the page this URL was found on; NULL for a seed
    status          INTEGER,                     -- HTTP status of the last attempt; NULL when no response came
    error           TEXT,                        -- why the last attempt failed; NULL once done
    discovered_at   REAL NOT NULL,               -- unix time it was added
    fetched_at      REAL,                        -- unix time the last attempt ended (complete or fail)
    next_attempt_at REAL,                        -- unix time a waiting URL becomes due; NULL once done or error
    seq             INTEGER NOT NULL             -- discovery order: FIFO among equal priorities
);

-- next_due(): the earliest due time among waiting rows in one probe.
CREATE INDEX urls_due ON urls (next_attempt_at) WHERE state = 'waiting';
"""

# What version 2 added to version 1, which dropped its urls_claim index (priority DESC, seq,
# next_attempt_at): a new file gets _SCHEMA and then this, an old one is upgraded by this.
_SCHEMA_2 = """
-- The committed length of each output file (complete_many's checkpoint).  WITHOUT ROWID: an
-- insert here leaves the connection's last_insert_rowid alone, which add_many() counts by.
CREATE TABLE checkpoints (
    name   TEXT NOT NULL PRIMARY KEY,  -- 'out', 'warc', ...
    value  INTEGER NOT NULL
) WITHOUT ROWID;

-- claim(): the waiting rows in claim order (breadth first within a priority), with the due
-- time in the index so that rows not due yet are skipped without reading the table.
CREATE INDEX urls_claim ON urls (priority DESC, depth, seq, next_attempt_at) WHERE state = 'waiting';
"""

# Statements that take many URLs take them as one JSON array (json_each), so that a whole
# batch is one sqlite3 call: see "The GIL" above.  json_extract() rather than ->>, which
# needs SQLite 3.38.

# A fresh URL is due at once: next_attempt_at = discovered_at.  Each element of ?2 is
# [url, depth, priority, parent, seq].  A known URL found nearer a seed gets the smaller depth
# and the parent that gave it; otherwise it is left alone.  ("WHERE true" tells SQLite that
# ON CONFLICT is the upsert clause, not a join constraint.)
_INSERT = """
INSERT INTO urls (url, state, depth, priority, parent, discovered_at, next_attempt_at, seq)
SELECT json_extract(value, '$[0]'), 'waiting', json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), ?1, ?1, json_extract(value, '$[4]')
FROM json_each(?2) WHERE true
ON CONFLICT (url) DO UPDATE SET depth = excluded.depth, parent = excluded.parent
WHERE excluded.depth < urls.depth
"""

# claim() picks the rows in one step (json_group_array: one result row, however many URLs)
# and then moves them in another.  The inner query walks the partial index urls_claim in
# claim order and stops at the limit.
_PICK = """
SELECT json_group_array(json_array(rowid, url, depth, priority, attempts + 1, parent, seq)) FROM (
    SELECT rowid, url, depth, priority, attempts, parent, seq FROM urls
    WHERE state = 'waiting' AND next_attempt_at <= ?1 AND depth <= ?2
    ORDER BY priority DESC, depth, seq
    LIMIT ?3)
"""

_MARK_CLAIMED = """
UPDATE urls SET state = 'processing', attempts = attempts + 1
WHERE rowid IN (SELECT value FROM json_each(?)) AND state = 'waiting'
"""

_COMPLETE = """
UPDATE urls SET state = 'done', status = ?, error = NULL, fetched_at = ?, next_attempt_at = NULL
WHERE url = ? AND state = 'processing'
"""

# Each element of ?2 is [url, status].  A URL given twice matches one row: the count tells.
_COMPLETE_MANY = """
UPDATE urls SET state = 'done', status = json_extract(j.value, '$[1]'), error = NULL, fetched_at = ?1,
                next_attempt_at = NULL
FROM json_each(?2) AS j
WHERE urls.url = json_extract(j.value, '$[0]') AND urls.state = 'processing'
"""

_RETRY = """
UPDATE urls SET state = 'waiting', status = ?, error = ?, fetched_at = ?, next_attempt_at = ?
WHERE url = ? AND state = 'processing'
"""

_GIVE_UP = """
UPDATE urls SET state = 'error', status = ?, error = ?, fetched_at = ?, next_attempt_at = NULL
WHERE url = ? AND state = 'processing'
"""

# ?1 is a JSON object {name: value}.
_SAVE_CHECKPOINT = """
INSERT INTO checkpoints (name, value) SELECT key, value FROM json_each(?1) WHERE true
ON CONFLICT (name) DO UPDATE SET value = excluded.value
"""

# Not fetched, so the attempt does not count; next_attempt_at is still the
# (past) time it was due, so it is due again at once and keeps its place.
_RELEASE = """
UPDATE urls SET state = 'waiting', attempts = MAX(attempts - 1, 0)
WHERE url IN (SELECT value FROM json_each(?)) AND state = 'processing'
"""

# claim() without a depth limit: deeper than any depth.
_DEEPEST = 1 << 62

# Exponents past this would overflow a float; the delay is long capped by then.
_MAX_BACKOFF_EXPONENT = 64


@dataclass(frozen=True, slots=True)
class FrontierURL:
    """A claimed URL: what the crawler needs to fetch it and to add its links."""

    url: str
    depth: int
    priority: int
    attempts: int  # including this one
    parent: str | None


class FrontierError(ValueError):
    """Raised when a frontier file cannot be used (corrupt, not SQLite, newer schema) or a
    statement on it fails (a full disk, an I/O error)."""


class FrontierLocked(FrontierError):
    """Raised when a frontier file is open in another Frontier, in this process or another."""


class _OwnerLock:
    """The exclusive flock() on ``<path>.lock`` that makes a Frontier the one owner of its file
    (see "One owner" above).  The lock file holds the owner's pid and host, for the message of
    whoever finds it locked; close() removes it."""

    # Locks held by this process, to be let go in a forked child: the child shares the open file
    # (and so the lock), and would keep it after the crawl that took it had died.
    _held: ClassVar[weakref.WeakSet[_OwnerLock]] = weakref.WeakSet()

    def __init__(self, db_path: str) -> None:
        # Beside the file itself, however it is named (a symlink, "./crawl.db"): where SQLite puts its -wal.
        self.path = os.path.realpath(db_path) + ".lock"
        while True:
            try:
                file = open(self.path, "a+b", buffering=0)  # noqa: SIM115 -- held open until release()
            except OSError as exc:
                raise FrontierError(f"cannot open {db_path}: cannot create {self.path}: {exc.strerror}") from exc
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = self._owner(file)
                file.close()
                raise FrontierLocked(f"{db_path} is in use by another crawl{owner}") from None
            except BaseException:
                file.close()
                raise
            # The owner before us removes the file when it lets go: if it did so after our open(),
            # the lock is on a file nobody else will ever open, so try again.
            try:
                same = os.path.samestat(os.fstat(file.fileno()), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            file.close()
        file.truncate(0)
        file.write(f"{os.getpid()} {socket.gethostname()}\n".encode())
        self._file: io.FileIO | None = file
        self._pid = os.getpid()
        _OwnerLock._held.add(self)

    @staticmethod
    def _owner(file: io.FileIO) -> str:
        """" (pid 1234)", from the lock file's first line; "" while the owner has not written it yet."""
        pid, _, host = os.pread(file.fileno(), 200, 0).decode("utf-8", "replace").strip().partition(" ")
        if not pid.isdigit():
            return ""
        if host and host != socket.gethostname():
            return f" (pid {pid} on {host})"
        return f" (pid {pid}, this process)" if int(pid) == os.getpid() else f" (pid {pid})"

    def release(self) -> None:
        """Remove the lock file and let go (the removal first, while the lock is still ours)."""
        file, self._file = self._file, None
        if file is None:
            return
        _OwnerLock._held.discard(self)
        if os.getpid() == self._pid:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        file.close()

    @classmethod
    def _forget_in_child(cls) -> None:
        for lock in list(cls._held):
            lock.release()  # in the child: closes its descriptor, leaves the file and the parent's lock


os.register_at_fork(after_in_child=_OwnerLock._forget_in_child)


def _statements(script: str) -> Iterator[str]:
    """Split an SQL script into statements (sqlite3.complete_statement knows about comments and quotes)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            yield statement
            statement = ""


def _check_int(name: str, value: object, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value!r}")
    return value


def _path_problem(path: str) -> str | None:
    """What keeps ``path`` from holding a frontier, in words, for the problems that SQLite words
    as "unable to open database file" or finds only later; None when nothing is seen wrong."""
    directory = os.path.dirname(path) or "."
    try:
        is_directory = stat.S_ISDIR(os.stat(directory).st_mode)
    except FileNotFoundError:
        return f"directory {directory} does not exist"
    except OSError as exc:  # a file on the way (ENOTDIR), a directory we may not enter (EACCES)
        return f"directory {directory}: {exc.strerror}"
    if not is_directory:
        return f"{directory} is not a directory"
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        return "permission denied: it must be readable and writable"
    if not os.access(directory, os.W_OK | os.X_OK):
        # SQLite keeps its log (-wal, -shm) beside the file, and the lock file goes there too.
        return f"permission denied: directory {directory} is not writable"
    return None


def _check_checkpoint(checkpoint: Mapping[str, int]) -> dict[str, int]:
    entries = {}
    for name, value in checkpoint.items():
        if not isinstance(name, str):
            raise TypeError(f"checkpoint names must be str, not {name!r}")
        entries[name] = _check_int(f"checkpoint[{name!r}]", value, 0)
    return entries


def _check_time(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, not {value!r}")
    return float(value)


class Frontier:
    """The crawl frontier, in a SQLite file (or in memory).

    Args:
        path: the SQLite file, created when missing; ``":memory:"`` keeps
            the frontier in memory (tests, throw-away crawls).
        max_attempts: claims a URL gets before a retryable failure makes it
            an 'error' for good.
        retry_delay: the wait before the first retry; it doubles with each
            further attempt (``retry_delay * 2**(attempts-1)``) ...
        max_retry_delay: ... up to this.  A server's Retry-After, passed to
            :meth:`fail`, can make the wait longer still.
        clock: unix time, for discovered_at, fetched_at and due times;
            tests pass a fake one.
        commit_every, commit_interval: how many :meth:`complete` /
            :meth:`fail` calls may wait uncommitted, and for how long (see
            "Batched commits" above).  Every other method commits.

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
        max_attempts: int = 3,
        retry_delay: float = 1.0,
        max_retry_delay: float = 300.0,
        clock: Callable[[], float] = time.time,
        *,
        commit_every: int = 128,
        commit_interval: float = 0.1,
    ) -> None:
        self.max_attempts = _check_int("max_attempts", max_attempts, 1)
        self.retry_delay = _check_time("retry_delay", retry_delay)
        self.max_retry_delay = _check_time("max_retry_delay", max_retry_delay)
        if self.max_retry_delay < self.retry_delay:
            raise ValueError(f"max_retry_delay ({max_retry_delay!r}) is less than retry_delay ({retry_delay!r})")
        self._commit_every = _check_int("commit_every", commit_every, 1)
        self._commit_interval = _check_time("commit_interval", commit_interval)
        self._clock = clock
        self.path = os.fspath(path)
        self._lock = threading.RLock()
        self._counts = dict.fromkeys(STATES, 0)
        self._next_seq = 1
        self._last_rowid = 0  # the largest rowid in urls: see add_many()
        self._pending = 0  # complete()/fail() calls (and lone checkpoints) not committed yet
        self._batching = 0  # open batch() blocks: while there are any, no commit happens
        self._commit_deferred = False  # a commit was asked for inside a batch
        self._pending_since = 0.0  # time.monotonic() of the first of them
        self._conn: sqlite3.Connection | None = None
        self._owner: _OwnerLock | None = None
        if self.path not in ("", ":memory:"):  # "" is a temporary file of SQLite's own
            problem = _path_problem(self.path)
            if problem is not None:
                raise FrontierError(f"cannot open {self.path}: {problem}")
            self._owner = _OwnerLock(self.path)  # before anything reads the file
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
            raise FrontierError(f"cannot open {self.path}: {exc}") from exc
        except BaseException:
            self._let_go()
            raise
        self._conn = conn

    # -- opening -----------------------------------------------------------

    def _open(self, conn: sqlite3.Connection) -> None:
        """Set the file up, check, create or upgrade the schema, count, and recover."""
        # The first statement that reads the file: "file is not a database" comes from here.
        conn.execute("PRAGMA journal_mode = WAL")  # answers 'memory' for :memory:, which is fine
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute("PRAGMA cache_size = -16384")  # 16 MiB
        conn.execute("BEGIN IMMEDIATE")  # two processes opening one new file: one creates, one checks
        try:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                # Not executescript(): it would commit the BEGIN IMMEDIATE above first.
                for statement in _statements(_SCHEMA + _SCHEMA_2):
                    conn.execute(statement)
                conn.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("schema_version", str(SCHEMA_VERSION)), ("created_at", repr(self._clock()))],
                )
            elif self._check_schema(conn, tables) == 1:
                conn.execute("DROP INDEX IF EXISTS urls_claim")
                for statement in _statements(_SCHEMA_2):
                    conn.execute(statement)
                conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            self._load_counts(conn)
            if self._counts["processing"]:
                # A crashed (or killed) run: put its in-flight URLs back.
                moved = conn.execute("UPDATE urls SET state = 'waiting' WHERE state = 'processing'").rowcount
                self._counts["processing"] -= moved
                self._counts["waiting"] += moved
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise

    def _check_schema(self, conn: sqlite3.Connection, tables: set[str]) -> int:
        """The schema version of a file that is a frontier this code can read (maybe after an upgrade)."""
        if "meta" not in tables:
            raise FrontierError(
                f"{self.path} is a SQLite database but not a niofetcher frontier (it has no meta table)"
            )
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        try:
            version = int(row[0]) if row is not None else None
        except (TypeError, ValueError):
            version = None
        if version is None:
            raise FrontierError(f"{self.path} is not a niofetcher frontier (no schema version in its meta table)")
        if version not in (1, SCHEMA_VERSION):
            newer = "a newer niofetcher" if version > SCHEMA_VERSION else "an unknown version"
            raise FrontierError(
                f"{self.path} has frontier schema version {version} (from {newer}); "
                f"this niofetcher reads version {SCHEMA_VERSION}"
            )
        if "urls" not in tables or (version == SCHEMA_VERSION and "checkpoints" not in tables):
            missing = "urls" if "urls" not in tables else "checkpoints"
            raise FrontierError(f"{self.path} is a damaged niofetcher frontier: the {missing} table is missing")
        return version

    def _load_counts(self, conn: sqlite3.Connection) -> None:
        """One pass over the table: the rows per state, and where the FIFO sequence goes on.

        It reads every page of the table, so it is also the check that catches
        most corrupt files when they are opened rather than in mid-crawl.
        """
        counts = dict.fromkeys(STATES, 0)
        last_seq = last_rowid = 0
        for state, count, max_seq, max_rowid in conn.execute(
            "SELECT state, COUNT(*), MAX(seq), MAX(rowid) FROM urls GROUP BY state"
        ):
            counts[state] = count
            last_seq = max(last_seq, max_seq or 0)
            last_rowid = max(last_rowid, max_rowid or 0)
        self._counts = counts
        self._next_seq = last_seq + 1
        self._last_rowid = last_rowid

    # -- plumbing ----------------------------------------------------------

    def _let_go(self) -> None:
        if self._owner is not None:
            self._owner.release()
            self._owner = None

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock and the open connection; turn database failures into FrontierError.

        A call that fails leaves nothing of its own behind: a statement that fails (a full disk,
        an I/O error; even a COMMIT) rolls the whole transaction back, pending outcomes too -- SQLite
        may have done so already, or undone just the statement, or nothing if the COMMIT failed --
        and the counts are read from the file again.  Any other exception (a URL that is not
        claimed, a bad argument) ends a transaction that holds nothing pending, so that no write
        lock is left held.
        """
        with self._lock:
            conn = self._conn
            if conn is None:
                raise FrontierError(f"frontier {self.path} is closed")
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
                    self._load_counts(conn)
                raise FrontierError(f"{exc}: frontier {self.path}") from exc
            except BaseException:
                if not self._pending and conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
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
            conn.execute("COMMIT")
        self._pending = 0

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Make the calls in the block durable together: nothing commits until it ends.

        A crawler records one batch of pages with several calls -- fail() for some,
        release() for others, complete_many() with the outputs' checkpoint last -- and a
        crash must keep all of them or none: a failure committed before the checkpoint
        that covers its output record would lose that record on resume.  A block that
        raises commits nothing on its way out (the next commit will, or a crash undoes it).
        """
        with self._lock:
            self._batching += 1
            try:
                yield
            except BaseException:
                self._batching -= 1
                raise
            self._batching -= 1
            if not self._batching and self._commit_deferred:
                self._commit_deferred = False
                with self._db() as conn:
                    self._commit(conn)

    def _outcome_recorded(self, conn: sqlite3.Connection, n: int = 1) -> None:
        """After complete()/fail() of ``n`` URLs: commit if enough are pending, or for long enough."""
        now = time.monotonic()
        if self._pending == 0:
            self._pending_since = now
        self._pending += n
        if self._pending >= self._commit_every or now - self._pending_since >= self._commit_interval:
            self._commit(conn)

    def _move(self, old: str, new: str, n: int = 1) -> None:
        self._counts[old] -= n
        self._counts[new] += n

    # -- adding ------------------------------------------------------------

    def add(self, urls: Iterable[str], depth: int = 0, parent: str | None = None, priority: int = 0) -> int:
        """Add URLs found at one depth on one page (or seeds: depth 0, no parent).

        Each URL is normalised (:func:`normalize_url`); URLs already known, in
        whatever state, and URLs that are not http(s) or are malformed are
        skipped -- except that a known URL given a smaller depth than its
        recorded one gets that depth and this parent (a URL's depth is its
        shortest distance from a seed).  One transaction per call.

        Returns:
            How many URLs were new.
        """
        if isinstance(urls, str):
            raise TypeError("add() takes an iterable of URLs; wrap a single URL in a list")
        _check_int("depth", depth, 0)
        _check_int("priority", priority)
        return self.add_many((url, depth, parent, priority) for url in urls)

    def add_many(self, entries: Iterable[tuple[str, int, str | None, int]]) -> int:
        """Add ``(url, depth, parent, priority)`` entries, like :meth:`add`, in one transaction.

        Returns:
            How many URLs were new.
        """
        parents: dict[str | None, str | None] = {None: None}
        rows = []
        checked: tuple[object, object] = (None, None)
        with self._db() as conn:
            now = self._clock()
            seq = self._next_seq
            for url, depth, parent, priority in entries:
                try:
                    key = normalize_url(url)
                except ValueError:
                    continue
                # The entries of a page share depth and priority: check them when they change
                # (by identity -- True == 1, but True is not 1).
                if depth is not checked[0] or priority is not checked[1]:
                    _check_int("depth", depth, 0)
                    _check_int("priority", priority)
                    checked = (depth, priority)
                if parent not in parents:
                    try:
                        parents[parent] = normalize_url(parent)  # type: ignore[arg-type]
                    except (TypeError, ValueError):
                        parents[parent] = parent
                rows.append((key, depth, priority, parents[parent], seq))
                seq += 1
            if not rows:
                return 0
            self._begin(conn)
            cursor = conn.execute(_INSERT, (now, json.dumps(rows)))
            # The row count is of new URLs and of known ones whose depth went down.  The new rows
            # got the rowids after the largest one (SQLite's way, short of 2**63 rows), and the
            # connection's last_insert_rowid is the last of them -- updates leave it alone, and so
            # do the other tables' inserts (meta only when the file is made, checkpoints is
            # WITHOUT ROWID) -- so that is how many were new, without a statement more.
            added = 0
            if cursor.rowcount and cursor.lastrowid is not None and cursor.lastrowid > self._last_rowid:
                added = cursor.lastrowid - self._last_rowid
                self._last_rowid = cursor.lastrowid
            self._commit(conn)
            # Known URLs leave gaps in seq; only the order matters.
            self._next_seq = seq
            self._counts["waiting"] += added
            return added

    # -- claiming and outcomes -------------------------------------------------

    def claim(self, limit: int, max_depth: int | None = None) -> list[FrontierURL]:
        """Hand out up to ``limit`` waiting URLs that are due, highest priority
        first, then the lowest depth (breadth first), then in the order they
        were discovered.

        They move to 'processing' and their attempts go up by one, in one
        transaction: no URL is handed out twice, whichever thread asks.
        """
        _check_int("limit", limit, 0)
        if limit == 0:
            return []
        with self._db() as conn:
            self._begin(conn)
            deepest = _DEEPEST if max_depth is None else max_depth
            (picked,) = conn.execute(_PICK, (self._clock(), deepest, limit)).fetchone()
            rows = json.loads(picked)
            if rows:
                conn.execute(_MARK_CLAIMED, (json.dumps([row[0] for row in rows]),))
            self._commit(conn)
            self._move("waiting", "processing", len(rows))
        rows.sort(key=lambda row: (-row[3], row[2], row[6]))  # priority, depth, seq
        return [
            FrontierURL(url, depth, priority, attempts, parent)
            for _rowid, url, depth, priority, attempts, parent, _seq in rows
        ]

    def complete(self, url: str, status: int | None) -> None:
        """Record that a claimed URL was fetched: processing → done.

        The change may stay uncommitted for a while (``commit_every``,
        ``commit_interval``); the interval is looked at when complete() or
        fail() is called, so a crawler that goes quiet with outcomes pending
        should call :meth:`flush` (or any other method).

        Raises:
            ValueError: when ``url`` is not in 'processing' (never claimed, or
                completed, failed or released already).
        """
        with self._db() as conn:
            self._begin(conn)
            self._complete_one(conn, url, status, self._clock())
            self._move("processing", "done")
            self._outcome_recorded(conn)

    def _complete_one(self, conn: sqlite3.Connection, url: str, status: int | None, now: float) -> None:
        if not conn.execute(_COMPLETE, (status, now, url)).rowcount:
            key = self._key_of_processing(conn, url, "complete")
            conn.execute(_COMPLETE, (status, now, key))

    def complete_many(
        self, outcomes: Iterable[tuple[str, int | None]], checkpoint: Mapping[str, int] | None = None
    ) -> None:
        """:meth:`complete` for many ``(url, status)`` pairs, all or none: one statement for all of
        them when every URL is a claimed one in stored form, the way a crawler records a batch of pages.

        ``checkpoint`` (names and integers >= 0, such as ``{"out": 12345, "warc": 67890}``, the
        lengths of the output files holding these pages) is stored in the same transaction as
        these outcomes, also when there are none: whichever commit makes the outcomes durable
        makes it durable too, and never one without the other.  Entries replace those of the same
        name; :meth:`checkpoint` reads them.  Committed in batches like :meth:`complete` (a lone
        checkpoint counts as one outcome).

        Raises:
            ValueError: like :meth:`complete`, for the first URL that is not in 'processing'; then
                nothing of this call is recorded, neither the outcomes nor the checkpoint.
            TypeError, ValueError: for a checkpoint name that is not a str or a value that is
                not an int >= 0, before anything is recorded.
        """
        entries = None if checkpoint is None else json.dumps(_check_checkpoint(checkpoint))
        with self._db() as conn:
            rows = list(outcomes)
            if not rows and entries is None:
                return
            with self._write(conn):
                now = self._clock()
                if rows and conn.execute(_COMPLETE_MANY, (now, json.dumps(rows))).rowcount != len(rows):
                    # Not every URL is a claimed one in stored form: undo, and go the long way
                    # round, which finds the stored form of each, or the culprit.
                    conn.execute("ROLLBACK TO frontier_call")
                    for url, status in rows:
                        self._complete_one(conn, url, status, now)
                if entries is not None:
                    conn.execute(_SAVE_CHECKPOINT, (entries,))
            self._move("processing", "done", len(rows))
            self._outcome_recorded(conn, len(rows) or 1)

    def checkpoint(self) -> dict[str, int]:
        """The checkpoint entries stored by :meth:`complete_many`, committed (empty for a new frontier)."""
        with self._db() as conn:
            self._commit(conn)
            return dict(conn.execute("SELECT name, value FROM checkpoints"))

    def fail(
        self,
        url: str,
        error: str,
        status: int | None = None,
        retry: bool = True,
        retry_after: float | None = None,
    ) -> str:
        """Record a failed attempt of a claimed URL; it is retried or given up on.

        With ``retry`` and attempts left (attempts < max_attempts), the URL
        waits again and becomes due after ``retry_delay * 2**(attempts-1)``
        seconds, capped by ``max_retry_delay``, but never sooner than
        ``retry_after`` (a server's Retry-After) when given.  Otherwise it
        becomes an 'error'.  ``status`` and ``error`` are recorded either way.
        Committed in batches, like :meth:`complete`.

        Returns:
            The URL's new state, 'waiting' or 'error'.

        Raises:
            ValueError: when ``url`` is not in 'processing'.
        """
        with self._db() as conn:
            self._begin(conn)
            row = conn.execute("SELECT attempts FROM urls WHERE url = ? AND state = 'processing'", (url,)).fetchone()
            if row is None:
                url = self._key_of_processing(conn, url, "fail")
                row = conn.execute("SELECT attempts FROM urls WHERE url = ?", (url,)).fetchone()
            attempts = row[0]
            now = self._clock()
            if retry and attempts < self.max_attempts:
                delay = self.retry_delay_after(attempts, retry_after)
                conn.execute(_RETRY, (status, error, now, now + delay, url))
                new_state = "waiting"
            else:
                conn.execute(_GIVE_UP, (status, error, now, url))
                new_state = "error"
            self._move("processing", new_state)
            self._outcome_recorded(conn)
            return new_state

    def retry_delay_after(self, attempts: int, retry_after: float | None) -> float:
        """Seconds to wait after the ``attempts``-th failed fetch: retry_delay, doubling up to
        max_retry_delay, never sooner than a server's Retry-After (robots.txt retries use it too)."""
        delay = min(self.retry_delay * 2.0 ** min(max(attempts - 1, 0), _MAX_BACKOFF_EXPONENT), self.max_retry_delay)
        if retry_after is not None and math.isfinite(retry_after):
            # A Retry-After date already past gives a negative number: no wait.
            delay = max(delay, retry_after)
        return delay

    def _key_of_processing(self, conn: sqlite3.Connection, url: str, action: str) -> str:
        """The stored form of a URL given in another form, or ValueError if it is not processing."""
        try:
            key = normalize_url(url)
        except (TypeError, ValueError):
            problem = "it is not a valid http(s) URL"
        else:
            row = conn.execute("SELECT state FROM urls WHERE url = ?", (key,)).fetchone()
            if row is not None and row[0] == "processing":
                return key
            problem = "it is not in the frontier" if row is None else f"it is {row[0]!r}, not 'processing' (claimed)"
        raise ValueError(f"cannot {action} {url!r}: {problem}")

    def release(self, urls: Iterable[str]) -> None:
        """Put claimed URLs back to 'waiting' without counting the attempt:
        they were not fetched (a graceful stop).  URLs that are not
        'processing' are left alone."""
        if isinstance(urls, str):
            raise TypeError("release() takes an iterable of URLs; wrap a single URL in a list")
        keys = set()
        for url in urls:
            try:
                keys.add(normalize_url(url))
            except (TypeError, ValueError):
                continue
        if not keys:
            return
        with self._db() as conn:
            self._begin(conn)
            released = conn.execute(_RELEASE, (json.dumps(list(keys)),)).rowcount
            self._commit(conn)
            self._move("processing", "waiting", released)

    # -- looking -----------------------------------------------------------

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
            (due,) = conn.execute("SELECT MIN(next_attempt_at) FROM urls WHERE state = 'waiting'").fetchone()
            return float(due) if due is not None else None

    def min_due_depth(self) -> int | None:
        """The smallest depth among waiting URLs that are due now, None when there is none."""
        with self._db() as conn:
            self._commit(conn)
            (depth,) = conn.execute(
                "SELECT MIN(depth) FROM urls WHERE state = 'waiting' AND next_attempt_at <= ?", (self._clock(),)
            ).fetchone()
            return int(depth) if depth is not None else None

    def state(self, url: str) -> str | None:
        """The state of a URL (in any form that normalises to a known one), None if unknown or invalid."""
        try:
            key = normalize_url(url)
        except (TypeError, ValueError):
            return None
        with self._db() as conn:
            self._commit(conn)
            row = conn.execute("SELECT state FROM urls WHERE url = ?", (key,)).fetchone()
            return row[0] if row is not None else None

    def flush(self) -> None:
        """Commit the complete()s and fail()s still pending."""
        with self._db() as conn:
            self._commit(conn)

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
                        conn.execute("COMMIT")
                    except sqlite3.Error as exc:  # closing rolls it back
                        raise FrontierError(f"{exc}: frontier {self.path}") from exc
                with contextlib.suppress(sqlite3.Error):  # only an optimisation: a full disk may refuse it
                    conn.execute("PRAGMA optimize")
            finally:
                conn.close()
                self._let_go()

    @property
    def closed(self) -> bool:
        return self._conn is None

    def __enter__(self) -> Frontier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._conn is None:
            return f"<Frontier {self.path!r} closed>"
        counts = " ".join(f"{state}={n}" for state, n in self._counts.items())
        return f"<Frontier {self.path!r} {counts}>"

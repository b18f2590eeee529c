"""The crawl frontier in PostgreSQL: :class:`PostgresFrontier`, the backend for crawls that outgrow a file.

It keeps the promises of ``base.py`` the way the SQLite :class:`~niofetcher.crawl.frontier.sqlite.Frontier`
does -- the states, attempts, retries with backoff, depth, priority, parent, status, error, the
checkpoint, claims host by host -- and the same ``urls`` table (see ``postgres_schema.py``).
psycopg 3 is loaded here only, when one is opened (the extra ``postgres``); nothing else of
niofetcher imports it.

Theory of operation
-------------------
*A schema per crawl.*  One database holds several crawls, each under its name: the crawl's tables
are in a schema of that name, not in shared tables with a ``crawl`` column.  So the tables are
exactly the SQLite frontier's (``urls`` has its columns and nothing more), and a user's query is
the same query after ``SET search_path TO name``; a crawl's indexes hold its own rows only, its
autovacuum settings are its own, and ``DROP SCHEMA name CASCADE`` forgets it.  The connection's
``search_path`` is the crawl's schema, so the statements name the tables as a user would.

*One owner, for now.*  This is the frontier of one crawl process at a time: opening it takes a
session-level advisory lock named after the crawl, and a second opener gets
:class:`~niofetcher.crawl.frontier.lock.FrontierLocked` naming the holder (its ``application_name``:
pid and host); the server lets go when the connection ends, however the process ended.  Being
the one writer is what lets opening move every 'processing' row back to 'waiting' (a crashed
run's, their attempt kept), and lets the frontier keep the counts per state and the hosts in turn
(``hosts.py``) in memory, as the SQLite frontier does.  The ``hosts`` table already has what
workers sharing a crawl need -- an owner, a lease's end, a fencing epoch -- and a ``workers``
table waits for their heartbeats; no code here pretends to use them yet.

*Round trips, not statements, are the cost.*  Every method is a few statements whatever the
number of URLs (arrays and ``unnest``: one statement inserts a page's links and any new hosts),
and statements that go together are sent in one pipeline (psycopg's pipeline mode: the counts
with their COMMIT, a checkpoint with its outcomes).  A claim asks the next hosts in turn for a
share each (``CLAIM_ROWS``, again for the hosts with more while it is short), then marks the
rows it took and learns where each host stands in one more statement (``MARK_CLAIMED``).

*Transactions.*  Every call commits before it returns, except inside :meth:`batch`, where the
block commits once at its end (the crawler's round: its outcomes, their links, its next claim).
A call that fails rolls the open transaction back -- inside a batch, all of the batch -- and the
frontier reads what it keeps in memory from the database again: a database failure raises one
:class:`FrontierError` line (a server that cannot be reached names host:port), a refused call
its ValueError.  A block that raises by itself commits nothing on its way out (the next call
that commits does, or the end of the connection undoes it), as on SQLite.  ``connect_timeout``
and ``statement_timeout`` bound every wait on the server.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ...urls import host_key, normalize_url
from .base import STATES, FrontierError, FrontierURL, check_int, check_time, retry_delay
from .hosts import HostRotation, Turn
from .lock import FrontierLocked
from .postgres_schema import (
    CLAIM_ROWS,
    COMPLETE_MANY,
    COUNT_ROWS,
    COUNTS,
    FAIL,
    HOSTS_AFTER_CLAIM,
    INSERT,
    MARK_CLAIMED,
    MIN_DUE_DEPTH,
    NEXT_DUE,
    QUEUED_HOSTS,
    RECOVER,
    RELEASE,
    SAVE_CHECKPOINT,
    STATE_OF,
    STORE_COUNTS,
    check_crawl_name,
    create_or_check,
)
from .recent import RecentURLs
from .sqlite import _check_checkpoint  # the same rules for a checkpoint (the crawler loads sqlite.py anyway)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresFrontier"]

# The deepest a claim without a depth limit goes: depth is an INTEGER column.
_DEEPEST = 2**31 - 1
# A claim asks the hosts of a pass again for more while it is short, at most this many times.
_CLAIM_ROUNDS = 4
# Names the advisory lock of a crawl, with the hash of its name ('niof').
_LOCK_CLASS = 0x6E696F66

#: A row of CLAIM_ROWS: [host, url, depth, priority, attempts, parent, seq].
_Row = tuple[Any, ...]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


class PostgresFrontier:
    """The crawl frontier of crawl ``crawl``, in the PostgreSQL database at ``dsn``.

    Args:
        dsn: a libpq connection string (``postgresql://user@host:port/db``); a password in it
            is never repeated in a message.
        crawl: the crawl's name, which is its schema's (see ``postgres_schema.check_crawl_name``).
        max_attempts, retry_delay, max_retry_delay, clock: as for the SQLite
            :class:`~niofetcher.crawl.frontier.sqlite.Frontier`.
        connect_timeout: seconds to wait for the server when connecting.
        statement_timeout: seconds a statement may run before the server cancels it.

    Raises:
        FrontierLocked: when another frontier has this crawl open (see "One owner" above).
        FrontierError: when the server cannot be reached or refuses us, or the crawl's schema
            holds something else than a frontier of this version.
        ImportError: when psycopg is not installed (``pip install 'niofetcher[postgres]'``).
    """

    def __init__(
        self,
        dsn: str,
        crawl: str,
        *,
        max_attempts: int = 3,
        retry_delay: float = 1.0,
        max_retry_delay: float = 300.0,
        clock: Callable[[], float] = time.time,
        connect_timeout: float = 10.0,
        statement_timeout: float = 60.0,
    ) -> None:
        self.max_attempts = check_int("max_attempts", max_attempts, 1)
        self.retry_delay = check_time("retry_delay", retry_delay)
        self.max_retry_delay = check_time("max_retry_delay", max_retry_delay)
        if self.max_retry_delay < self.retry_delay:
            raise ValueError(f"max_retry_delay ({max_retry_delay!r}) is less than retry_delay ({retry_delay!r})")
        self.crawl = check_crawl_name(crawl)
        connect_timeout = check_time("connect_timeout", connect_timeout)
        statement_timeout = check_time("statement_timeout", statement_timeout)
        try:
            import psycopg  # here: only a PostgreSQL frontier pays for it
        except ImportError as exc:
            raise ImportError(f"a PostgreSQL frontier needs psycopg 3 ({exc}): "
                              "pip install 'niofetcher[postgres]'") from exc

        self._psycopg = psycopg
        self.where = _where(psycopg, dsn)
        self._clock = clock
        self._lock = threading.RLock()
        self._batching = 0  # open batch() blocks: while there are any, no commit happens
        self._commit_deferred = False  # a commit was asked for inside a batch
        self._counts = dict.fromkeys(STATES, 0)
        self._stored_counts = dict(self._counts)
        self._rotation = HostRotation()  # every host with a waiting URL, in turn ...
        self._too_deep: dict[str, tuple[int, int]] = {}  # ... or parked: (depth limit, its line)
        self._shallowest_parked = _DEEPEST  # the smallest depth limit in _too_deep
        self._recent = RecentURLs()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        try:
            conn = psycopg.connect(
                dsn, connect_timeout=max(1, round(connect_timeout)),
                application_name=f"niofetcher pid {os.getpid()} on {socket.gethostname()}"[:63],
            )
        except psycopg.Error as exc:
            raise FrontierError(f"cannot open crawl {crawl!r} at {self.where}: {_first_line(exc)}") from None
        try:
            self._open(conn, statement_timeout)
        except psycopg.Error as exc:
            conn.close()
            raise FrontierError(f"cannot open crawl {crawl!r} at {self.where}: {_first_line(exc)}") from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    # -- opening -----------------------------------------------------------

    def _open(self, conn: psycopg.Connection[tuple[Any, ...]], statement_timeout: float) -> None:
        """Take the crawl, create or check its tables, recover a crashed run, line the hosts up."""
        from psycopg import sql

        conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{round(statement_timeout * 1000)}ms",))
        (mine,) = _single(conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (_LOCK_CLASS, self.crawl)))
        if not mine:
            holder = conn.execute(
                "SELECT a.application_name FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = hashtext(%s)::oid AND l.granted",
                (_LOCK_CLASS, self.crawl)).fetchone()
            by = f" ({holder[0]})" if holder and holder[0] else ""
            raise FrontierLocked(f"crawl {self.crawl!r} at {self.where} is in use by another crawl{by}")
        conn.commit()  # the settings and the lock are the session's, and outlive this transaction
        create_or_check(conn, self.crawl, self.where, self._clock)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.crawl)))
        conn.commit()  # SET is transactional: committed, it holds for the session
        self._reload(conn)
        moved = conn.execute(RECOVER).rowcount
        if moved != self._counts["processing"]:
            # Stored counts that the rows belie (another writer): count the rows, this once.
            self._counts = dict.fromkeys(STATES, 0)
            self._counts.update(conn.execute(COUNT_ROWS).fetchall())
        else:
            self._move("processing", "waiting", moved)
        if moved:
            self._line_up(conn)
        self._store_and_commit(conn)

    def _reload(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """What the frontier keeps in memory, from the database as committed (after a rollback)."""
        self._rotation = HostRotation()
        self._too_deep.clear()
        self._shallowest_parked = _DEEPEST
        self._recent.clear()
        self._counts = dict.fromkeys(STATES, 0)
        self._counts.update(conn.execute(COUNTS).fetchall())
        self._stored_counts = dict(self._counts)
        self._line_up(conn)

    def _line_up(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        for host, priority in conn.execute(QUEUED_HOSTS):
            self._offer(host, priority)

    # -- plumbing ------------------------------------------------------------

    @contextlib.contextmanager
    def _db(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """Hold the lock and the connection; a call that fails rolls the transaction back (see
        "Transactions" above) and database errors become one FrontierError line."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise FrontierError(f"the frontier of crawl {self.crawl!r} at {self.where} is closed")
            try:
                yield conn
            except self._psycopg.Error as exc:
                self._roll_back(conn)
                raise FrontierError(f"{_first_line(exc)}: crawl {self.crawl!r} at {self.where}") from None
            except BaseException:
                self._roll_back(conn)
                raise

    def _roll_back(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._commit_deferred = False  # what it would have committed is gone
        with contextlib.suppress(self._psycopg.Error):  # a lost connection: every later call says so
            conn.rollback()
            self._reload(conn)
            conn.commit()

    def _commit(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        if self._batching:
            self._commit_deferred = True
        elif conn.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
            self._store_and_commit(conn)

    def _store_and_commit(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """The counts go into the commit that makes them true: both in one round trip (a COMMIT
        statement in the pipeline: conn.commit() there would wait for a sync of its own)."""
        if self._counts == self._stored_counts:
            conn.commit()
            return
        with conn.pipeline():
            conn.execute(STORE_COUNTS, {"states": list(self._counts), "counts": list(self._counts.values())})
            conn.execute("COMMIT")
        self._stored_counts = dict(self._counts)

    def _move(self, old: str, new: str, n: int = 1) -> None:
        self._counts[old] -= n
        self._counts[new] += n

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Make the calls in the block one transaction: nothing commits until it ends (see
        "Transactions" above; the SQLite Frontier's batch() says why a crawler needs it)."""
        with self._lock:
            self._batching += 1
            try:
                yield
            finally:
                self._batching -= 1
            if not self._batching and self._commit_deferred:
                self._commit_deferred = False
                with self._db() as conn:
                    self._commit(conn)

    # -- adding ------------------------------------------------------------

    def add(self, urls: Iterable[str], depth: int = 0, parent: str | None = None, priority: int = 0) -> int:
        """Add URLs found at one depth on one page (or seeds), as the SQLite Frontier's add(); how many were new."""
        if isinstance(urls, str):
            raise TypeError("add() takes an iterable of URLs; wrap a single URL in a list")
        check_int("depth", depth, 0)
        check_int("priority", priority)
        return self.add_many((url, depth, parent, priority) for url in urls)

    def add_many(self, entries: Iterable[tuple[str, int, str | None, int]]) -> int:
        """Add ``(url, depth, parent, priority)`` entries in one statement; how many were new.

        A URL given twice keeps its first place and priority, and the smallest depth with the
        parent that gave it (PostgreSQL's upsert may not touch a row twice in one statement,
        so the batch is folded here first).
        """
        parents: dict[str | None, str | None] = {None: None}
        rows: dict[str, list[Any]] = {}  # url -> [depth, priority, parent, host]
        hosts: dict[str, int] = {}  # the hosts of these URLs, and the highest priority of each
        checked: tuple[object, object] = (None, None)
        recent = self._recent
        with self._db() as conn:
            for url, depth, parent, priority in entries:
                try:
                    key = normalize_url(url)
                except ValueError:
                    continue
                if depth is not checked[0] or priority is not checked[1]:  # identity: True == 1
                    check_int("depth", depth, 0)
                    check_int("priority", priority)
                    checked = (depth, priority)
                if recent.changes_nothing(key, depth):
                    continue
                if parent not in parents:
                    try:
                        parents[parent] = normalize_url(parent)  # type: ignore[arg-type]
                    except (TypeError, ValueError):
                        parents[parent] = parent
                row = rows.get(key)
                if row is None:
                    host = host_key(key)
                    rows[key] = [depth, priority, parents[parent], host]
                    if hosts.get(host, priority - 1) < priority:
                        hosts[host] = priority
                elif depth < row[0]:
                    row[0], row[2] = depth, parents[parent]
            if not rows:
                return 0
            columns = list(zip(*rows.values()))
            (added,) = _single(conn.execute(INSERT, {
                "fresh": [host for host in hosts if host not in self._rotation and host not in self._too_deep],
                "hosts": list(hosts), "now": self._clock(), "urls": list(rows), "depths": list(columns[0]),
                "priorities": list(columns[1]), "parents": list(columns[2]), "host_of": list(columns[3]),
            }))
            self._counts["waiting"] += added
            self._commit(conn)
            for key, row in rows.items():
                recent.added(key, row[0])
            for host, top in hosts.items():
                self._offer(host, top)
            return int(added)

    # -- claiming ------------------------------------------------------------

    def claim(
        self, limit: int, max_depth: int | None = None, host_room: Callable[[str], int] | None = None
    ) -> list[FrontierURL]:
        """Up to ``limit`` due URLs, no deeper than ``max_depth``, moved to 'processing': hosts in
        turn, each no more than ``host_room(host)`` says it can take now -- the order and the
        rules of the SQLite Frontier's claim()."""
        check_int("limit", limit, 0)
        if limit == 0:
            return []
        deepest = _DEEPEST if max_depth is None else min(max_depth, _DEEPEST)
        with self._db() as conn:
            self._unpark(deepest)
            now = self._clock()
            rows: list[_Row] = []
            turns: list[Turn] = []  # every host asked, in the order asked
            found: dict[str, list[_Row]] = {}
            in_line = len(self._rotation)

            def room(host: str) -> int:
                return limit if host_room is None else host_room(host)

            try:
                # Passes over the next hosts in turn, as many hosts as are missing URLs (more when
                # those asked gave fewer than there were of them): hosts with nothing due cost a
                # few passes, not one each.
                while len(rows) < limit and len(turns) < in_line:
                    most = min(max(limit - len(rows), len(turns) - len(rows)), in_line - len(turns))
                    taken = self._rotation.take(most, room)
                    if not taken:
                        break
                    turns += taken
                    rows += self._claim_pass(conn, taken, limit - len(rows), deepest, now, found)
                settled = self._mark_and_settle(conn, turns, found, rows, deepest) if turns else 0
            except BaseException:
                for host, _share, priority in reversed(turns):  # nothing handed out: every host keeps its turn
                    self._rotation.put_back(host, priority, front=True)
                raise
            self._move("waiting", "processing", settled)
            self._commit(conn)
        return [FrontierURL(url, depth, priority, attempts, parent)
                for _host, url, depth, priority, attempts, parent, _seq in rows]

    def _claim_pass(self, conn: psycopg.Connection[tuple[Any, ...]], turns: list[Turn], limit: int, deepest: int,
                    now: float, found: dict[str, list[_Row]]) -> list[_Row]:
        """Ask the hosts of ``turns`` for their first due rows (a share of ``limit`` each, then more
        from those that had more), add them to ``found``, and take ``limit`` of them in claim order."""
        room = {host: share for host, share, _priority in turns}
        mine: dict[str, list[_Row]] = {host: [] for host in room}
        asking = list(room)
        skip = have = 0
        for _ in range(_CLAIM_ROUNDS):
            share = min(-(-(limit - have) // len(asking)), max(room[host] for host in asking))
            got = dict.fromkeys(asking, 0)
            for row in conn.execute(CLAIM_ROWS, {"hosts": asking, "now": now, "deepest": deepest, "share": share,
                                                 "skip": skip}):
                mine[row[0]].append(row)
                got[row[0]] += 1
            skip += share
            # Hosts that gave all they were asked for and can take more may have more.
            asking = [host for host in asking if got[host] == share and skip < room[host]]
            have = sum(min(len(host_rows), room[host]) for host, host_rows in mine.items())
            if not asking or have >= limit:
                break
        ranked: list[tuple[int, int, int, int, _Row]] = []
        for host, host_rows in mine.items():
            host_rows.sort(key=lambda row: (-row[3], row[2], row[6]))  # the host's queue order
            del host_rows[room[host]:]
            ranked.extend((-row[3], rank, row[2], row[6], row) for rank, row in enumerate(host_rows))
        found.update(mine)
        ranked.sort(key=lambda entry: entry[:4])
        return [entry[4] for entry in ranked[:limit]]

    def _mark_and_settle(self, conn: psycopg.Connection[tuple[Any, ...]], turns: list[Turn],
                         found: dict[str, list[_Row]], rows: list[_Row], deepest: int) -> int:
        """Mark ``rows`` claimed and put each host asked back where its queue says: out of line
        (nothing waits), parked (nothing as shallow as the depth limit), at the front of its line
        (none of its rows was taken: it keeps its turn) or at the end.  How many were marked."""
        taken = {row[1] for row in rows}
        limited = deepest != _DEEPEST
        lines = {host: priority for host, _share, priority in turns}
        with conn.pipeline():  # one round trip for both
            marking = conn.execute(MARK_CLAIMED, (list(taken),)) if taken else None
            hosts = conn.execute(HOSTS_AFTER_CLAIM, {
                "asked": list(lines), "deepest": deepest, "idle": [limited and not found[host] for host in lines]})
        marked = marking.rowcount if marking is not None else 0
        if marked != len(taken):
            raise FrontierError(f"{len(taken) - marked} claimed URLs were no longer waiting: crawl {self.crawl!r} at "
                                f"{self.where} has another writer")
        front = []
        for host, top, within in hosts.fetchall():
            if top is None:
                continue  # nothing waits there: out of line until a URL of it waits again (_offer)
            if limited and not found[host] and not within:
                self._too_deep[host] = (deepest, max(top, lines[host]))
                self._shallowest_parked = min(self._shallowest_parked, deepest)
            elif found[host] and not any(row[1] in taken for row in found[host]):
                front.append((host, top))
            else:
                self._rotation.put_back(host, top)
        for host, top in reversed(front):  # in their order, each in front of the one after it
            self._rotation.put_back(host, top, front=True)
        return marked

    def _offer(self, host: str, priority: int) -> None:
        """A URL of ``host`` waits (new, or again): in line it goes, parked or not."""
        parked = self._too_deep.pop(host, None)
        self._rotation.offer(host, priority if parked is None else max(priority, parked[1]))

    def _unpark(self, deepest: int) -> None:
        """The hosts parked for a depth limit short of ``deepest`` go back in line (a look at each
        parked host only when some are)."""
        if deepest <= self._shallowest_parked:
            return
        for host, (depth, priority) in list(self._too_deep.items()):
            if depth < deepest:
                del self._too_deep[host]
                self._rotation.offer(host, priority)
        self._shallowest_parked = min((depth for depth, _ in self._too_deep.values()), default=_DEEPEST)

    # -- outcomes ------------------------------------------------------------

    def complete(self, url: str, status: int | None) -> None:
        """Record that a claimed URL was fetched: processing → done (:meth:`complete_many` of one)."""
        self.complete_many([(url, status)])

    def complete_many(
        self, outcomes: Iterable[tuple[str, int | None]], checkpoint: Mapping[str, int] | None = None
    ) -> None:
        """``(url, status)`` pairs of claimed URLs to 'done', all or none, with ``checkpoint`` (names
        and ints >= 0) stored in the same transaction -- the SQLite Frontier's complete_many().

        Raises:
            ValueError: for the first URL that is not in 'processing'; nothing of the call is recorded.
            TypeError, ValueError: for a bad checkpoint, before anything is recorded.
        """
        entries = None if checkpoint is None else _check_checkpoint(checkpoint)
        rows = list(outcomes)
        if not rows and entries is None:
            return
        with self._db() as conn:
            now = self._clock()
            with conn.pipeline():  # one round trip for all of it
                if self._batching:
                    conn.execute("SAVEPOINT frontier_call")  # to undo this call only (see below)
                done = conn.execute(COMPLETE_MANY, {
                    "now": now, "urls": [url for url, _ in rows], "statuses": [status for _, status in rows]})
                if entries:
                    conn.execute(SAVE_CHECKPOINT, {"names": list(entries), "values": list(entries.values())})
            if done.rowcount != len(rows):
                # Not every URL is a claimed one in stored form: undo, and go the long way round,
                # which finds the stored form of each, or the culprit.
                if self._batching:
                    conn.execute("ROLLBACK TO SAVEPOINT frontier_call")
                else:
                    conn.rollback()
                for url, status in rows:
                    key = self._key_of_processing(conn, url, "complete")
                    conn.execute(COMPLETE_MANY, {"now": now, "urls": [key], "statuses": [status]})
                if entries:
                    conn.execute(SAVE_CHECKPOINT, {"names": list(entries), "values": list(entries.values())})
            self._move("processing", "done", len(rows))
            self._commit(conn)

    def _key_of_processing(self, conn: psycopg.Connection[tuple[Any, ...]], url: str, action: str) -> str:
        """The stored form of a claimed URL given in any form, or ValueError if it is not processing."""
        try:
            key = normalize_url(url)
        except (TypeError, ValueError):
            problem = "it is not a valid http(s) URL"
        else:
            row = conn.execute(STATE_OF, (key,)).fetchone()
            if row is not None and row[0] == "processing":
                return key
            problem = "it is not in the frontier" if row is None else f"it is {row[0]!r}, not 'processing' (claimed)"
        raise ValueError(f"cannot {action} {url!r}: {problem}")

    def fail(
        self, url: str, error: str, status: int | None = None, retry: bool = True, retry_after: float | None = None
    ) -> str:
        """A failed attempt of a claimed URL: with ``retry`` and attempts left it waits again,
        after the backoff (or ``retry_after``), otherwise it is an 'error' -- the SQLite
        Frontier's fail().  Returns its new state.

        Raises:
            ValueError: when ``url`` is not in 'processing'.
        """
        with self._db() as conn:
            params = {
                "retry": bool(retry), "most": self.max_attempts, "status": status, "error": error,
                "now": self._clock(), "url": url,
                "delays": [self.retry_delay_after(n, retry_after) for n in range(1, self.max_attempts)],
            }
            row = conn.execute(FAIL, params).fetchone()
            if row is None:
                params["url"] = self._key_of_processing(conn, url, "fail")
                row = _single(conn.execute(FAIL, params))
            new_state, host, priority = row
            if new_state == "waiting":
                self._offer(host, priority)
            self._move("processing", new_state)
            self._commit(conn)
            return str(new_state)

    def retry_delay_after(self, attempts: int, retry_after: float | None) -> float:
        """Seconds to wait after the ``attempts``-th failed fetch (robots.txt retries use it too)."""
        return retry_delay(attempts, retry_after, self.retry_delay, self.max_retry_delay)

    def release(self, urls: Iterable[str]) -> None:
        """Claimed URLs back to 'waiting', the attempt not counted (they were not fetched); URLs
        that are not 'processing' are left alone."""
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
            released = conn.execute(RELEASE, {"urls": list(keys)}).fetchall()
            self._move("processing", "waiting", len(released))
            self._commit(conn)
            for host, priority in released:
                self._offer(host, priority)

    # -- looking -----------------------------------------------------------

    def checkpoint(self) -> dict[str, int]:
        """The checkpoint entries stored by :meth:`complete_many`, committed."""
        with self._db() as conn:
            self._commit(conn)
            return {name: int(value) for name, value in conn.execute("SELECT name, value FROM checkpoints")}

    def counts(self) -> dict[str, int]:
        """URLs per state; all four states are always there."""
        with self._db() as conn:
            self._commit(conn)
            return dict(self._counts)

    def next_due(self) -> float | None:
        """The earliest time (unix) a waiting URL is due, None when none waits."""
        with self._db() as conn:
            self._commit(conn)
            row = conn.execute(NEXT_DUE).fetchone()
            return float(row[0]) if row is not None and row[0] is not None else None

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

    def flush(self) -> None:
        """Commit what is pending (outside a batch there is nothing: every call commits)."""
        with self._db() as conn:
            self._commit(conn)

    # -- closing -----------------------------------------------------------

    def close(self) -> None:
        """Commit what is pending and let go of the crawl (the connection, its lock with it).  Closing twice is fine."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            try:
                # Only an open transaction in good order: a lost connection has nothing to commit.
                if conn.info.transaction_status == self._psycopg.pq.TransactionStatus.INTRANS:
                    self._store_and_commit(conn)
            except self._psycopg.Error as exc:
                raise FrontierError(f"{_first_line(exc)}: crawl {self.crawl!r} at {self.where}") from None
            finally:
                conn.close()

    @property
    def closed(self) -> bool:
        """True once the frontier is closed: no call but ``close()`` may follow."""
        return self._conn is None

    def __enter__(self) -> PostgresFrontier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._conn is None:
            return f"<PostgresFrontier {self.crawl!r} at {self.where} closed>"
        counts = " ".join(f"{state}={n}" for state, n in self._counts.items())
        return f"<PostgresFrontier {self.crawl!r} at {self.where} {counts}>"


def _single(cursor: psycopg.Cursor[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The one row a statement gives (an aggregate, or an update of a row known to be there)."""
    row = cursor.fetchone()
    if row is None:
        raise FrontierError("a statement that gives one row gave none")
    return row


def _where(psycopg: Any, dsn: str) -> str:
    """host:port/database of ``dsn`` for messages (never its password)."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise FrontierError(f"not a PostgreSQL connection string: {_first_line(exc)}") from None
    host = params.get("host") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    database = params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or "postgres"
    return f"{host}:{port}/{database}"

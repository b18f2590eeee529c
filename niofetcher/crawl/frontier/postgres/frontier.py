"""The crawl frontier in PostgreSQL: :class:`PostgresFrontier`, the backend for crawls that outgrow a file.

It keeps the promises of ``base.py`` the way the SQLite :class:`~niofetcher.crawl.frontier.sqlite.Frontier`
does -- the states, attempts, retries with backoff, depth, priority, parent, status, error, the
checkpoint, claims host by host -- and the same ``urls`` table (see ``postgres_schema.py``).
psycopg 3 is loaded by this package only, when one is opened (the extra ``postgres``); nothing else of
niofetcher imports it.  The store is built in layers, a module each (the package's ``__init__.py``
lists them); this one is what a worker does: open, add, claim, record outcomes.

Theory of operation
-------------------
*A schema per crawl.*  One database holds several crawls, each under its name: the crawl's tables
are in a schema of that name, not in shared tables with a ``crawl`` column.  So the tables are
exactly the SQLite frontier's (``urls`` has its columns and nothing more), and a user's query is
the same query after ``SET search_path TO name``; a crawl's indexes hold its own rows only, its
autovacuum settings are its own, and ``DROP SCHEMA name CASCADE`` forgets it.  The connection's
``search_path`` is the crawl's schema, so the statements name the tables as a user would.  The name
reaches SQL only as a quoted identifier (``sql.Identifier``) or a bound parameter, never spliced
into a statement: a crawl may be called ``my-crawl``.

*Round trips, not statements, are the cost.*  Every method is a few statements whatever the
number of URLs (arrays and ``unnest``: one statement inserts a page's links and any new hosts),
and statements that go together are sent in one pipeline (psycopg's pipeline mode: the counts
with their COMMIT, a checkpoint with its outcomes).  A claim asks the next hosts in turn for a
share each (``CLAIM_ROWS``, again for the hosts with more while it is short), then marks the
rows it took and learns where each host stands in one more statement (``MARK_CLAIMED``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ....urls import normalize_url
from ..base import (
    FrontierError,
    FrontierErrorKind,
    FrontierURL,
    Revisits,
    Visit,
    check_crawl_name,
    check_int,
    check_time,
    processing_key,
    refuse_moved_options,
)
from ..hosts import Turn
from ..postgres_schema import (
    ADMITTED_OF,
    CLAIM_ROWS,
    COMPLETE_MANY,
    FAIL,
    GIVE_BACK,
    HOSTS_AFTER_CLAIM,
    INSERT,
    KNOWN_URLS,
    LEAVE,
    LOCK_MINE,
    MARK_CLAIMED,
    REGISTER,
    RELEASE,
    REVISITS,
    SAVE_CHECKPOINT,
    SET_LASTMODS,
    STATE_OF,
    STORE_REFUSALS,
    VISITED,
    WAKE,
    WAKE_MODIFIED,
)
from ..service import Additions, FrontierService, check_traps
from ..sqlstore import SQLStore
from ..traps import TrapRules
from .hostdata import HostData
from .leases import DEEPEST
from .session import first_line, keepalives, single, where_of
from .status import CrawlReads
from .tables import create_or_check

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresFrontier", "PostgresStore"]

# A claim asks the hosts of a pass again for more while it is short, at most this many times.
_CLAIM_ROUNDS = 4
# The shortest statement_timeout derived from the lease (see PostgresFrontier).
_LEAST_STATEMENT_TIMEOUT = 5.0
# The most URLs one INSERT statement adds: a million seeds take seconds, longer than a statement may.
_INSERT_ROWS = 20_000

#: A row of CLAIM_ROWS: [host, url, depth, priority, attempts, parent, seq, lastmod].
_Row = tuple[Any, ...]


class PostgresFrontier(FrontierService):
    """The crawl frontier of crawl ``crawl``, in the PostgreSQL database at ``dsn``: one worker of
    it, a :class:`PostgresStore` under the service.

    Args:
        dsn: a libpq connection string (``postgresql://user@host:port/db``); a password in it
            is never repeated in a message.
        crawl: the crawl's name, which is its schema's, in lower case (see
            ``base.check_crawl_name``).
        clock: as for the SQLite :class:`~niofetcher.crawl.frontier.sqlite.Frontier` (which says
            where ``max_attempts``, ``retry_delay`` and ``max_retry_delay`` went).
        connect_timeout: seconds to wait for the server when connecting.
        statement_timeout: seconds a statement may run before the server cancels it; None: one
            lease, at least 5 s.  A statement still running a lease after it was sent is of no
            use: the worker's clock has given its hosts up by then (two thirds of a lease), and
            another worker may hold them; the floor keeps a short lease from turning one slow
            commit into a failed crawl.  (Long inserts are cut into statements of their own.)
        lease_seconds: how long a host is this worker's after each renewal (see "Host leases" in leases.py).
        max_hosts: the most hosts this worker holds at once, None for no bound (a crawler gives
            the hosts its window can keep busy, so that workers share the hosts).
        group_by_address: the crawl has per-IP limits: the hosts of one address are owned by one
            worker at a time, their addresses learnt from the crawl (:meth:`note_addresses`; see
            "Address groups" in leases.py).
        traps: the trap rules, as for the SQLite Frontier.  ``max_pages_per_host`` holds across
            workers as exactly as their counts do when they check them: each worker reads every
            worker's count of a host when it adds URLs of it, so workers adding URLs of one host at
            the same moment can each admit up to what was left (see docs/crawler.md, "Traps").

    Raises:
        FrontierError: when the server cannot be reached or refuses us, or the crawl's schema
            holds something else than a frontier of this version.
        ImportError: when psycopg is not installed (``pip install 'niofetcher[postgres]'``).
    """

    def __init__(
        self,
        dsn: str,
        crawl: str,
        *,
        clock: Callable[[], float] = time.time,
        connect_timeout: float = 10.0,
        statement_timeout: float | None = None,
        lease_seconds: float = 10.0,
        max_hosts: int | None = None,
        group_by_address: bool = False,
        traps: TrapRules | None = None,
        **moved: object,
    ) -> None:
        refuse_moved_options("PostgresFrontier", moved)
        traps = check_traps(traps)
        store = PostgresStore(dsn, crawl, clock=clock, connect_timeout=connect_timeout,
                              statement_timeout=statement_timeout, lease_seconds=lease_seconds, max_hosts=max_hosts,
                              group_by_address=group_by_address)
        super().__init__(store, traps=traps)
        self.store: PostgresStore = store
        self.crawl, self.where, self.worker_id = store.crawl, store.where, store.worker_id

    @property
    def refused(self) -> int:
        """Outcomes refused because their host had changed hands (see "Fencing" in leases.py), since opening."""
        return self.store.refused

    @property
    def max_hosts(self) -> int | None:
        """The most hosts this worker holds at once, None for no bound."""
        return self.store.max_hosts


class PostgresStore(CrawlReads, HostData, SQLStore):
    """One worker's store of a crawl in PostgreSQL: the storage operations of ``store.Store`` and
    the host leases of ``capabilities.HostLeases`` (``leases.py``).  The arguments are
    :class:`PostgresFrontier`'s but ``traps``.
    """

    def __init__(
        self,
        dsn: str,
        crawl: str,
        *,
        clock: Callable[[], float],
        connect_timeout: float,
        statement_timeout: float | None,
        lease_seconds: float,
        max_hosts: int | None,
        group_by_address: bool,
    ) -> None:
        name = check_crawl_name(crawl)
        connect_timeout = check_time("connect_timeout", connect_timeout)
        lease_seconds = check_time("lease_seconds", lease_seconds)
        if not lease_seconds > 0:
            raise ValueError(f"lease_seconds must be positive, not {lease_seconds!r}")
        statement_timeout = (max(lease_seconds, _LEAST_STATEMENT_TIMEOUT) if statement_timeout is None
                             else check_time("statement_timeout", statement_timeout))
        max_hosts = None if max_hosts is None else check_int("max_hosts", max_hosts, 1)
        try:
            import psycopg  # here: only a PostgreSQL frontier pays for it
        except ImportError as exc:
            raise ImportError(f"a PostgreSQL frontier needs psycopg 3 ({exc}): "
                              "pip install 'niofetcher[postgres]'") from exc

        super().__init__(psycopg, name, where_of(psycopg, dsn), clock, lease_seconds, max_hosts, group_by_address)
        try:
            conn = psycopg.connect(
                dsn, connect_timeout=max(1, round(connect_timeout)),
                application_name=f"niofetcher pid {os.getpid()} on {socket.gethostname()}"[:63],
                **keepalives(psycopg, dsn, self.lease_seconds),
            )
        except psycopg.Error as exc:
            raise FrontierError(f"cannot open crawl {crawl!r} at {self.where}: {first_line(exc)}",
                                FrontierErrorKind.UNAVAILABLE) from None
        try:
            self._open(conn, statement_timeout)
        except psycopg.Error as exc:
            conn.close()
            raise FrontierError(f"cannot open crawl {crawl!r} at {self.where}: {first_line(exc)}",
                                FrontierErrorKind.UNAVAILABLE) from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    # -- opening -----------------------------------------------------------

    def _open(self, conn: psycopg.Connection[tuple[Any, ...]], statement_timeout: float) -> None:
        """Create or check the crawl's tables, register as a worker, take the first hosts."""
        from psycopg import sql

        conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{round(statement_timeout * 1000)}ms",))
        # A transaction left open longer than a lease (a worker paused, stuck) holds row locks that
        # other workers wait for: the server ends it, and the session with it, so that its hosts
        # are free at once.  The worker finds its connection gone, which ends its crawl.
        conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                     (f"{max(1000, round(self.lease_seconds * 1000))}ms",))
        conn.commit()  # the settings are the session's, and outlive this transaction
        create_or_check(conn, self.crawl, self.where, self._clock)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.crawl)))
        conn.commit()  # SET is transactional: committed, it holds for the session
        conn.execute(REGISTER, {"me": self.worker_id, "host_name": socket.gethostname(), "pid": os.getpid()})
        self._keep_leases(conn)
        self._store_and_commit(conn)

    # -- adding ------------------------------------------------------------

    def insert(self, additions: Additions, modified: Mapping[str, float] | None) -> int:
        """Store prepared additions (``store.Store.insert``) in one statement; one more for the
        lastmods, and one for the URLs their dates wake, which go in line if this worker holds their
        hosts (the others wait for whoever takes their host, as :meth:`wake`'s do).

        URLs of hosts another worker holds wait for it; new hosts are free, and this worker takes
        them at its next claim if it has room.  (PostgreSQL's upsert may not touch a row twice in one
        statement: service.prepare_additions folds the batch.)
        """
        with self._db() as conn:
            rows, hosts = additions.rows, additions.hosts
            # In statements of a cut each, in URL order across the cuts: workers adding the same huge
            # seed list take its keys in one order (each statement inserts in URL order), never
            # each waiting for a key the other inserted in an earlier cut.
            keys = sorted(rows) if len(rows) > _INSERT_ROWS else list(rows)
            columns = list(zip(*(rows[key] for key in keys)))
            added = fresh = 0
            for start in range(0, len(keys), _INSERT_ROWS):  # once, but for a huge list of seeds
                cut = slice(start, start + _INSERT_ROWS)
                of = hosts if len(keys) <= _INSERT_ROWS else dict.fromkeys(columns[3][cut])  # this cut's
                values = {
                    "fresh": [host for host in of if host not in self._held], "hosts": list(of),
                    "now": self._clock(), "urls": keys[cut], "depths": list(columns[0][cut]),
                    "priorities": list(columns[1][cut]), "parents": list(columns[2][cut]),
                    "host_of": list(columns[3][cut]), "me": self.worker_id,
                }
                n, new_hosts, found = single(conn.execute(INSERT, values))
                if found < len(of):
                    # A host of these URLs came in from another worker meanwhile (see INSERT): again, in a
                    # statement that sees it.  Once is enough: the first waited for that worker to end.
                    again, _fresh, _found = single(conn.execute(INSERT, values))
                    n += again
                added += n
                fresh += new_hosts
            woken: list[tuple[Any, ...]] = []
            if additions.lastmods:
                dated = additions.lastmods
                conn.execute(SET_LASTMODS, {"urls": list(dated), "lastmods": list(dated.values())})
                if modified:
                    woken = conn.execute(WAKE_MODIFIED, {"urls": list(modified), "modified": list(modified.values()),
                                                         "now": self._clock()}).fetchall()
                    for state, _host, _priority in woken:
                        self._move(state, "waiting")
            refused = additions.refused
            if refused:
                conn.execute(STORE_REFUSALS, {"me": self.worker_id, "causes": list(refused),
                                              "counts": list(refused.values())})
            self._delta["waiting"] += added
            if fresh or woken:
                self._take_soon = True
            self._commit(conn)
            for host, top in (*hosts.items(), *((host, priority) for _state, host, priority in woken)):
                self._offer(host, top)
            return int(added)

    def admitted(self, hosts: list[str]) -> dict[str, int]:
        """Every worker's count of URLs admitted per host, as committed now (``store.Store.admitted``)."""
        with self._db() as conn:
            return {str(host): int(n) for host, n in conn.execute(ADMITTED_OF, {"hosts": hosts})}

    def known(self, urls: list[str]) -> set[str]:
        """Those of ``urls`` that the crawl has (``store.Store.known``)."""
        with self._db() as conn:
            return {str(url) for (url,) in conn.execute(KNOWN_URLS, {"urls": urls})}

    # -- claiming ------------------------------------------------------------

    def take(
        self, limit: int, max_depth: int | None, host_room: Callable[[str], int] | None
    ) -> list[FrontierURL]:
        """Up to ``limit`` due URLs of this worker's hosts, no deeper than ``max_depth``, moved to
        'processing': hosts in turn, each no more than ``host_room(host)`` says it can take now --
        the order and the rules of the SQLite store's take()."""
        deepest = DEEPEST if max_depth is None else min(max_depth, DEEPEST)
        with self._db() as conn:
            self._keep_leases(conn)
            if self._fenced and time.monotonic() >= self._deadline:
                self._commit(conn)
                return []  # no lease this worker can count on: nothing may start
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
                if turns:
                    rows = self._mark_and_settle(conn, turns, found, rows, deepest)
            except BaseException:
                for host, _share, priority in reversed(turns):  # nothing handed out: every host keeps its turn
                    self._rotation.put_back(host, priority, front=True)
                raise
            self._move("waiting", "processing", len(rows))
            self._commit(conn)
        return [FrontierURL(url, depth, priority, attempts, parent, lastmod, etag, last_modified, digest, visits,
                            None if interval is None else float(interval), captured_at, changes, float(changed_time),
                            float(unchanged_time), None if since_fetch is None else float(since_fetch))
                for (_host, url, depth, priority, attempts, parent, _seq, lastmod, etag, last_modified, digest, visits,
                     interval, captured_at, changes, changed_time, unchanged_time, since_fetch) in rows]

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
                         found: dict[str, list[_Row]], rows: list[_Row], deepest: int) -> list[_Row]:
        """Mark ``rows`` claimed -- those of hosts still this worker's -- and put each host asked
        back where its queue says: out of line (nothing waits), parked (nothing as shallow as the
        depth limit), at the front of its line (none of its rows was taken: it keeps its turn) or
        at the end.  The rows marked."""
        limited = deepest != DEEPEST
        lines = {host: priority for host, _share, priority in turns}
        mine = {"ids": [self._held[host][0] for host in lines if host in self._held], "me": self.worker_id,
                "taken": [row[1] for row in rows], "fenced": self._fenced}
        with conn.pipeline():  # one round trip for all three
            if rows and self._fenced:
                conn.execute(LOCK_MINE, mine)
            marking = conn.execute(MARK_CLAIMED, mine) if rows else None
            hosts = conn.execute(HOSTS_AFTER_CLAIM, {
                "asked": list(lines), "deepest": deepest, "idle": [limited and not found[host] for host in lines]})
        marked = {url for (url,) in marking.fetchall()} if marking is not None else set()
        # A row not marked was claimed by another worker: its host changed hands, as the next renewal will say.
        rows = [row for row in rows if row[1] in marked]
        for row in rows:
            self._claimed[row[1]] = (row[0], self._held[row[0]][1])  # the host was locked as this worker's
            self._claims_by_host[row[0]] += 1
        front = []
        for host, top, within in hosts.fetchall():
            if top is None:
                continue  # nothing waits there: out of line until a URL of it waits again (_offer)
            if limited and not found[host] and not within:
                self._too_deep[host] = (deepest, max(top, lines[host]))
                self._shallowest_parked = min(self._shallowest_parked, deepest)
            elif found[host] and not any(row[1] in marked for row in found[host]):
                front.append((host, top))
            else:
                self._rotation.put_back(host, top)
        for host, top in reversed(front):  # in their order, each in front of the one after it
            self._rotation.put_back(host, top, front=True)
        return rows

    def _unpark(self, deepest: int) -> None:
        """The hosts parked for a depth limit short of ``deepest`` go back in line (a look at each
        parked host only when some are)."""
        if deepest <= self._shallowest_parked:
            return
        for host, (depth, priority) in list(self._too_deep.items()):
            if depth < deepest:
                del self._too_deep[host]
                self._rotation.offer(host, priority)
        self._shallowest_parked = min((depth for depth, _ in self._too_deep.values()), default=DEEPEST)

    # -- outcomes ------------------------------------------------------------

    def _own(self, conn: psycopg.Connection[tuple[Any, ...]], url: str, action: str,
             seen: set[str]) -> tuple[str, str, int]:
        """(stored URL, host, epoch) of a URL this worker claimed, given in any form; no longer in
        flight here.  ValueError for any other URL (``seen``: the URLs of this call so far)."""
        key = url if url in self._claimed else None
        if key is None:
            with contextlib.suppress(TypeError, ValueError):
                key = normalize_url(url)
        if key is not None and key in self._claimed:
            host, epoch = self._claimed.pop(key)
            seen.add(key)
            return key, host, epoch
        if key is not None and key in seen:
            raise ValueError(f"cannot {action} {url!r}: it is given twice (the first makes it 'done', not 'processing')")
        self._key_of_processing(conn, url, action)
        raise ValueError(f"cannot {action} {url!r}: it is another worker's claim")

    def _unclaim(self, host: str) -> None:
        self._claims_by_host[host] -= 1
        if not self._claims_by_host[host]:
            del self._claims_by_host[host]

    def finish(self, outcomes: list[tuple[str, int | None]], checkpoint: dict[str, int] | None,
               visits: Mapping[str, Visit] | None) -> None:
        """Claimed URLs to 'done', all or none, with ``checkpoint`` and ``visits`` in the same
        transaction (``store.Store.finish``).  An outcome whose host changed hands since its claim
        is refused (counted in :attr:`refused`); ValueError for the first URL that this worker did
        not claim, and nothing of the call is recorded."""
        with self._db() as conn:
            seen: set[str] = set()
            owned = [self._own(conn, url, "complete", seen) for url, _status in outcomes]
            now = self._clock()
            with conn.pipeline():  # one round trip for all of it
                self._lock_mine(conn, [host for _key, host, _epoch in owned])
                done = conn.execute(COMPLETE_MANY, {
                    "now": now, "urls": [key for key, _host, _epoch in owned],
                    "statuses": [status for _, status in outcomes], "epochs": [epoch for _key, _host, epoch in owned],
                    "me": self.worker_id, "fenced": self._fenced})
                if visits:
                    stored = {url: key for (url, _status), (key, _host, _epoch) in zip(outcomes, owned, strict=True)}
                    kept = [(stored[url], visit) for url, visit in visits.items() if url in stored]
                    conn.execute(VISITED, {
                        "now": now, "urls": [key for key, _ in kept], "etags": [v.etag for _, v in kept],
                        "last_modifieds": [v.last_modified for _, v in kept], "digests": [v.digest for _, v in kept],
                        "changed": [bool(v.changed) for _, v in kept], "revisit_in": [v.revisit_in for _, v in kept],
                        "captured_at": [v.captured_at for _, v in kept],
                        "changed_time": [v.changed_time for _, v in kept],
                        "unchanged_time": [v.unchanged_time for _, v in kept]})
                if checkpoint:
                    conn.execute(SAVE_CHECKPOINT, {"names": list(checkpoint), "values": list(checkpoint.values())})
            for _key, host, _epoch in owned:
                self._unclaim(host)
            self._refuse(len(outcomes) - done.rowcount, "completions")
            self._move("processing", "done", done.rowcount)
            if done.rowcount:
                self._done_times.append((time.monotonic(), done.rowcount))
            self._commit(conn)

    def _key_of_processing(self, conn: psycopg.Connection[tuple[Any, ...]], url: str, action: str) -> str:
        """The stored form of a claimed URL given in any form, or ValueError if it is not processing."""

        def state_of(key: str) -> str | None:
            row = conn.execute(STATE_OF, (key,)).fetchone()
            return None if row is None else str(row[0])

        return processing_key(url, action, state_of)

    def fail(self, url: str, error: str, status: int | None, retry_in: float | None,
             revisit_in: float | None) -> str:
        """A failed attempt of a claimed URL (``store.Store.fail``): its new state, or 'refused'
        when its host changed hands since its claim (nothing recorded, counted in :attr:`refused`).
        ValueError when ``url`` is not a URL this worker claimed."""
        with self._db() as conn:
            key, host, epoch = self._own(conn, url, "fail", set())
            self._unclaim(host)
            with conn.pipeline():
                self._lock_mine(conn, [host])
                failed = conn.execute(FAIL, {
                    "wait": retry_in, "revisit": revisit_in, "status": status, "error": error, "now": self._clock(), "url": key,
                    "epoch": epoch, "me": self.worker_id, "fenced": self._fenced,
                })
            row = failed.fetchone()
            if row is None:
                self._refuse(1, "failures")
                self._commit(conn)
                return "refused"
            new_state, host, priority = row
            if new_state == "waiting":
                self._offer(host, priority)
            self._move("processing", new_state)
            self._commit(conn)
            return str(new_state)

    def wake(self, now: float) -> int:
        """Done and error URLs of the crawl whose ``next_due`` is ``now`` or earlier back to
        'waiting' -- the SQLite store's wake(); rows another worker is waking are skipped.  Those
        of hosts this worker holds go in line; the others wait for whoever takes their host."""
        with self._db() as conn:
            woken = conn.execute(WAKE, {"now": now}).fetchall()
            for state, _host, _priority in woken:
                self._move(state, "waiting")
            if woken:
                self._take_soon = True
            self._commit(conn)
            for _state, host, priority in woken:
                self._offer(host, priority)
            return len(woken)

    def revisits(self) -> Revisits:
        """How many done and error URLs of the crawl are due again now, and when the next one falls due."""
        with self._db() as conn:
            due, later = single(conn.execute(REVISITS, {"now": self._clock()}))
            self._commit(conn)
            return Revisits(int(due), None if later is None else float(later))

    def give_back(self, urls: list[str]) -> None:
        """Claimed URLs back to 'waiting', the attempt not counted; URLs that this worker has not in
        flight are left alone, and so are those whose host changed hands."""
        keys = {key: self._claimed[key][1] for key in urls if key in self._claimed}
        if not keys:
            return
        with self._db() as conn:
            with conn.pipeline():
                self._lock_mine(conn, [self._claimed[key][0] for key in keys])
                releasing = conn.execute(RELEASE, {"urls": list(keys), "epochs": list(keys.values()),
                                                   "me": self.worker_id, "fenced": self._fenced})
            released = releasing.fetchall()
            for key in keys:
                self._unclaim(self._claimed.pop(key)[0])
            self._refuse(len(keys) - len(released), "releases")
            self._move("processing", "waiting", len(released))
            self._commit(conn)
            for host, priority in released:
                self._offer(host, priority)

    # -- closing -----------------------------------------------------------

    def close(self) -> None:
        """Commit what is pending, give every host back (other workers take them at once) and
        leave the crawl.  Closing twice is fine."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            try:
                # Only a connection in good order: a lost one has nothing to commit, and its hosts
                # are free already (its session is gone).
                if conn.info.transaction_status in (self._psycopg.pq.TransactionStatus.INTRANS,
                                                    self._psycopg.pq.TransactionStatus.IDLE):
                    conn.execute(GIVE_BACK, {"me": self.worker_id,
                                             "ids": [host_id for host_id, _ in self._held.values()]})
                    conn.execute(LEAVE, {"me": self.worker_id})
                    self._store_and_commit(conn)
            except self._psycopg.Error as exc:
                raise FrontierError(f"{first_line(exc)}: crawl {self.crawl!r} at {self.where}") from None
            finally:
                conn.close()

    def describe(self) -> str:
        """The crawl, and this worker's hosts and claims (or 'closed'), for the frontier's repr."""
        if self._conn is None:
            return f"{self.crawl!r} at {self.where} closed"
        return f"{self.crawl!r} at {self.where} worker {self.worker_id} hosts={len(self._held)} in_flight={len(self._claimed)}"

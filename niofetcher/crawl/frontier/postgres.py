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
``search_path`` is the crawl's schema, so the statements name the tables as a user would.  The name
reaches SQL only as a quoted identifier (``sql.Identifier``) or a bound parameter, never spliced
into a statement: a crawl may be called ``my-crawl``.

*Host leases.*  Any number of workers -- processes on any number of machines -- open the same
crawl, and each (scheme, host, port) is owned by at most one of them at a time, so that a host's
connection limit, its politeness delay and its Crawl-delay are kept by one fetcher: cluster-wide.
A worker registers in ``workers`` (with the server process of its connection) and takes hosts
with work that are free, whose lease ran out, or whose owner's connection is gone -- a dead
worker's first, ``FOR UPDATE SKIP LOCKED``, a few at a time and no more than ``max_hosts`` -- and
gives a host back when it has nothing to do there (its queue empty, nothing in flight) or when it
stops.  One statement renews all its leases every third of ``lease_seconds``, which are measured
by the server's clock; by its own (monotonic) clock the worker stops claiming for its hosts, and
:meth:`holds` says no, two thirds of a lease after the last renewal was sent, so it stops
starting requests before any lease it failed to renew can end -- in its fetcher too, whose loop
thread may run first after a pause: :meth:`start_deadlines` gives the coordinator that time per
host for the fetcher's start gates.  The leases are kept in the calls
the coordinator makes anyway (``claim``, ``counts``, ``next_due``, :meth:`lost_hosts`), in their
transaction: there is no thread.

*Fencing.*  Taking a host raises its ``epoch``; a claim records each URL's, and ``complete``,
``fail`` and ``release`` are accepted only while the host is the worker's under that epoch.  A
worker that lost a host -- paused past its lease, cut off, or dead with a last statement still on
its way (a killed process's statement can still commit) -- changes nothing: its outcome is
counted in :attr:`refused` and dropped, not raised, for the page is another worker's now.  The
taker moves the host's 'processing' rows back to 'waiting', their attempt counted.  Marking a
claim, and recording an outcome, first locks its hosts' rows ``FOR SHARE``, so that no row is
marked for a host that changed hands meanwhile -- a takeover that commits while the statement
runs included -- and a host is never taken while its owner records (hosts, then their URLs: one
lock order).

*The whole crawl.*  The counts are the sums of rows each worker adds its own changes to, in the
commit that makes them true; ``next_due()`` answers for this worker's hosts and, when nothing of
them waits, says "soon" while anything waits or is in flight anywhere, so a worker ends only when
the whole crawl has.  A host another worker added URLs to is taken (or kept) by whoever has room.

*Test-only switch.*  With the environment variable ``NIOFETCHER_TEST_NO_HOST_LEASES=1`` every
check of an owner passes (read once, in ``__init__``): the negative control of the tests that
prove the per-host limit holds across workers.  Never for a real crawl.

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
and ``statement_timeout`` bound every wait on the server, and TCP keepalives notice a server or
a network that is gone within about a lease (``_keepalives``): a worker that cannot reach the
database cannot keep its hosts, and ends rather than wait.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ...urls import normalize_url
from .base import (
    ROBOTS_SECONDS,
    STATES,
    CrawlStatus,
    FrontierError,
    FrontierErrorKind,
    FrontierURL,
    StoredRobots,
    WorkerStatus,
    check_checkpoint,
    check_int,
    check_time,
    processing_key,
    retry_delay,
)
from .hosts import HostRotation, Turn
from .locations import check_crawl_name
from .postgres_schema import (
    BUSIEST_HOSTS,
    CLAIM_ROWS,
    CLAIMS_OF_MINE,
    COMPLETE_MANY,
    COUNTS,
    FAIL,
    FAILURES,
    GIVE_BACK,
    HEARTBEAT,
    HELD,
    HOSTS_AFTER_CLAIM,
    INSERT,
    LEAVE,
    LIVE_WORKERS,
    LOCK_MINE,
    MARK_CLAIMED,
    MIN_DUE_DEPTH,
    MINE_LOCKED,
    NEXT_DUE,
    QUEUED_HOSTS,
    RECOVER,
    REGISTER,
    RELEASE,
    RENEW,
    ROBOTS_OF,
    SAVE_CHECKPOINT,
    SET_LASTMODS,
    SHARE,
    STATE_OF,
    STORE_COUNTS,
    STORE_ROBOTS,
    TAKE,
    create_or_check,
)
from .recent import RecentURLs
from .service import prepare_additions

if TYPE_CHECKING:
    import psycopg

__all__ = ["NO_HOST_LEASES", "CrawlStatus", "PostgresFrontier", "WorkerStatus", "crawl_status"]

log = logging.getLogger("niofetcher")

#: The test-only switch that turns host ownership off (see "Test-only switch" above).
NO_HOST_LEASES = "NIOFETCHER_TEST_NO_HOST_LEASES"

# The deepest a claim without a depth limit goes: depth is an INTEGER column.
_DEEPEST = 2**31 - 1
# Names the lock that serializes creating a crawl's tables, with the hash of its name ('niof').
_LOCK_CLASS = 0x6E696F66
# A claim asks the hosts of a pass again for more while it is short, at most this many times.
_CLAIM_ROUNDS = 4
# Hosts taken in one statement at most (the fair share bounds them too).
_TAKE_STEP = 256
# After a renewal sent at t, requests start until t + this share of the lease (renewals come every third).
_SAFE_SHARE = 2 / 3
# What next_due() says when nothing of this worker's waits but the crawl goes on elsewhere: look again in a second.
_POLL_SECONDS = 1.0
# The shortest statement_timeout derived from the lease (see PostgresFrontier).
_LEAST_STATEMENT_TIMEOUT = 5.0
# The most URLs one INSERT statement adds: a million seeds take seconds, longer than a statement may.
_INSERT_ROWS = 20_000
# The window of "pages in the last minute" in the heartbeat.
_MINUTE = 60.0

#: A row of CLAIM_ROWS: [host, url, depth, priority, attempts, parent, seq, lastmod].
_Row = tuple[Any, ...]


def _not_a_pipeline_echo(record: logging.LogRecord) -> bool:
    """psycopg logs "error ignored terminating <Pipeline>" when a pipeline ends on a connection
    already lost; the FrontierError raised then says so already, in its one line."""
    return not str(record.msg).startswith("error ignored terminating")


logging.getLogger("psycopg").addFilter(_not_a_pipeline_echo)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


class PostgresFrontier:
    """The crawl frontier of crawl ``crawl``, in the PostgreSQL database at ``dsn``: one worker of it.

    Args:
        dsn: a libpq connection string (``postgresql://user@host:port/db``); a password in it
            is never repeated in a message.
        crawl: the crawl's name, which is its schema's, in lower case (see
            ``locations.check_crawl_name``).
        max_attempts, retry_delay, max_retry_delay, clock: as for the SQLite
            :class:`~niofetcher.crawl.frontier.sqlite.Frontier`.
        connect_timeout: seconds to wait for the server when connecting.
        statement_timeout: seconds a statement may run before the server cancels it; None: one
            lease, at least 5 s.  A statement still running a lease after it was sent is of no
            use: the worker's clock has given its hosts up by then (two thirds of a lease), and
            another worker may hold them; the floor keeps a short lease from turning one slow
            commit into a failed crawl.  (Long inserts are cut into statements of their own.)
        lease_seconds: how long a host is this worker's after each renewal (see "Host leases").
        max_hosts: the most hosts this worker holds at once, None for no bound (a crawler gives
            the hosts its window can keep busy, so that workers share the hosts).

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
        max_attempts: int = 3,
        retry_delay: float = 1.0,
        max_retry_delay: float = 300.0,
        clock: Callable[[], float] = time.time,
        connect_timeout: float = 10.0,
        statement_timeout: float | None = None,
        lease_seconds: float = 10.0,
        max_hosts: int | None = None,
    ) -> None:
        self.max_attempts = check_int("max_attempts", max_attempts, 1)
        self.retry_delay = check_time("retry_delay", retry_delay)
        self.max_retry_delay = check_time("max_retry_delay", max_retry_delay)
        if self.max_retry_delay < self.retry_delay:
            raise ValueError(f"max_retry_delay ({max_retry_delay!r}) is less than retry_delay ({retry_delay!r})")
        self.crawl = check_crawl_name(crawl)
        connect_timeout = check_time("connect_timeout", connect_timeout)
        self.lease_seconds = check_time("lease_seconds", lease_seconds)
        if not self.lease_seconds > 0:
            raise ValueError(f"lease_seconds must be positive, not {lease_seconds!r}")
        statement_timeout = (max(self.lease_seconds, _LEAST_STATEMENT_TIMEOUT) if statement_timeout is None
                             else check_time("statement_timeout", statement_timeout))
        self.max_hosts = None if max_hosts is None else check_int("max_hosts", max_hosts, 1)
        try:
            import psycopg  # here: only a PostgreSQL frontier pays for it
        except ImportError as exc:
            raise ImportError(f"a PostgreSQL frontier needs psycopg 3 ({exc}): "
                              "pip install 'niofetcher[postgres]'") from exc

        self._psycopg = psycopg
        self.where = _where(psycopg, dsn)
        self._clock = clock
        self._fenced = os.environ.get(NO_HOST_LEASES) != "1"  # the one place the test-only switch is read
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        #: Outcomes refused because their host had changed hands (see "Fencing"), since opening.
        self.refused = 0
        self._lock = threading.RLock()
        self._batching = 0  # open batch() blocks: while there are any, no commit happens
        self._commit_deferred = False  # a commit was asked for inside a batch
        self._delta = dict.fromkeys(STATES, 0)  # what this worker changed since its last commit
        self._rotation = HostRotation()  # every host held with a waiting URL, in turn ...
        self._too_deep: dict[str, tuple[int, int]] = {}  # ... or parked: (depth limit, its line)
        self._shallowest_parked = _DEEPEST  # the smallest depth limit in _too_deep
        self._recent = RecentURLs()
        self._held: dict[str, tuple[int, int]] = {}  # host -> (hosts.id, epoch): this worker's
        self._claimed: dict[str, tuple[str, int]] = {}  # url in flight -> (host, epoch it was claimed under)
        self._claims_by_host: Counter[str] = Counter()
        self._lost: list[str] = []  # hosts lost since lost_hosts() last said
        self._given_back: set[str] = set()  # hosts this worker gave back: a URL of one waits -> take again
        self._leaving: set[str] = set()  # held hosts beyond a fair share: no more claims, given back once drained
        self._take_soon = True  # free hosts with work are likely: take at the next call
        self._take_at = 0.0  # time.monotonic() of the next take otherwise
        self._renew_at = 0.0  # ... of the next renewal
        self._deadline = -math.inf  # ... past which no request of a held host may start (see holds())
        self._committed_deadline = self._deadline  # ... as the last commit made it true
        self._gate_changes: dict[str, float | None] = {}  # for start_deadlines(), in the order they happened
        self._gated_until = math.nan  # the deadline start_deadlines() last gave every held host (nan: none yet)
        self._done_times: deque[tuple[float, int]] = deque()  # (time.monotonic(), URLs done): the heartbeat's
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        try:
            conn = psycopg.connect(
                dsn, connect_timeout=max(1, round(connect_timeout)),
                application_name=f"niofetcher pid {os.getpid()} on {socket.gethostname()}"[:63],
                **_keepalives(psycopg, dsn, self.lease_seconds),
            )
        except psycopg.Error as exc:
            raise FrontierError(f"cannot open crawl {crawl!r} at {self.where}: {_first_line(exc)}",
                                FrontierErrorKind.UNAVAILABLE) from None
        try:
            self._open(conn, statement_timeout)
        except psycopg.Error as exc:
            conn.close()
            raise FrontierError(f"cannot open crawl {crawl!r} at {self.where}: {_first_line(exc)}",
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
        # Workers started together must not both create the tables: one at a time (till the commit).
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_CLASS, self.crawl))
        create_or_check(conn, self.crawl, self.where, self._clock)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.crawl)))
        conn.commit()  # SET is transactional: committed, it holds for the session
        conn.execute(REGISTER, {"me": self.worker_id, "host_name": socket.gethostname(), "pid": os.getpid()})
        self._keep_leases(conn)
        self._store_and_commit(conn)

    def _reload(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """What the frontier keeps in memory, from the database as committed (after a rollback)."""
        self._rotation = HostRotation()
        self._too_deep.clear()
        self._shallowest_parked = _DEEPEST
        self._recent.clear()
        self._delta = dict.fromkeys(STATES, 0)
        me = {"me": self.worker_id}
        held_before = self._held
        self._held = {origin: (host_id, epoch) for host_id, origin, epoch in conn.execute(HELD, me)}
        self._claimed = {url: (origin, epoch) for url, origin, epoch in conn.execute(CLAIMS_OF_MINE, me)}
        self._claims_by_host = Counter(host for host, _epoch in self._claimed.values())
        self._leaving.clear()
        for host in held_before.keys() - self._held.keys():  # a take rolled back: not this worker's
            self._gate_changes[host] = -math.inf
        self._gated_until = math.nan  # every held host's gate again, from the deadline restored below
        # A renewal or a take rolled back: the leases are as last committed; renew at the next call.
        self._deadline = self._committed_deadline
        self._renew_at = 0.0
        self._take_soon = True
        self._line_up(conn, [host_id for host_id, _epoch in self._held.values()])

    def _line_up(self, conn: psycopg.Connection[tuple[Any, ...]], ids: list[int]) -> None:
        if ids:
            for host, priority in conn.execute(QUEUED_HOSTS, {"ids": ids}):
                self._offer(host, priority)

    # -- host leases -----------------------------------------------------------

    def holds(self, host: str) -> bool:
        """Whether requests to ``host`` (``host_key()``) may start now: it is this worker's, and
        its lease cannot have ended by this worker's clock (see "Host leases" above)."""
        if not self._fenced:
            return True
        return host in self._held and time.monotonic() < self._deadline

    def lost_hosts(self) -> list[str]:
        """Keep the leases (renew, take, give back, when due) and say which hosts this worker lost
        since the last call: renewals that found another owner, or leases its clock gave up on.
        Whatever of them is in flight must not start; its outcomes will be refused."""
        with self._db() as conn:
            self._keep_leases(conn)
            self._commit(conn)
            lost, self._lost = self._lost, []
            return lost

    def start_deadlines(self) -> dict[str, float | None]:
        """What changed since the last call of the times (``time.monotonic()``) from which no
        request to a host may start: each held host's deadline (as :meth:`holds` counts it), minus
        infinity for a host lost (another worker's now: it stays closed), None for a host given
        back (nothing of it is registered); empty when nothing changed.  The host set changes with
        takes and losses, the deadline of them all with each renewal: a few times a lease."""
        with self._lock:
            changes, self._gate_changes = self._gate_changes, {}
            if not self._fenced:
                return {}
            if self._deadline != self._gated_until:
                self._gated_until = self._deadline
                changes.update(dict.fromkeys(self._held, self._deadline))
            return changes

    def _keep_leases(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """Renew, give back, take: what is due of it, in the current transaction."""
        now = time.monotonic()
        if self._fenced and self._held and now >= self._deadline:
            # No renewal in time (a pause, a slow round): any of these may be another's by now.
            log.warning("crawl %s: worker %s gave up its %d hosts: no lease renewal in time",
                        self.crawl, self.worker_id, len(self._held))
            conn.execute(GIVE_BACK, {"me": self.worker_id, "ids": [host_id for host_id, _ in self._held.values()]})
            self._forget_hosts(list(self._held), lost=True)
        if now >= self._renew_at:
            self._renew(conn, now)
        if self._take_soon or now >= self._take_at:
            if self.max_hosts is not None and len(self._held) >= self.max_hosts:
                # A full hand: the hosts it has finished with make room now, not at the next
                # renewal (a third of a lease away), or the worker idles with work to take.
                self._give_back_idle(conn)
            self._take(conn, now)

    def _renew(self, conn: psycopg.Connection[tuple[Any, ...]], now: float) -> None:
        """One statement for every lease; the heartbeat; the hosts with nothing to do given back."""
        held = self._held
        while self._done_times and self._done_times[0][0] < now - _MINUTE:
            self._done_times.popleft()
        me = {"me": self.worker_id, "lease": self.lease_seconds, "ids": [host_id for host_id, _ in held.values()]}
        with conn.pipeline():
            renewed = conn.execute(RENEW, me) if held else None
            conn.execute(HEARTBEAT, {"me": self.worker_id, "held": len(held),
                                     "pages": sum(n for _t, n in self._done_times)})
            share = conn.execute(SHARE, {"lease": self.lease_seconds}) if self._fenced else None
        if renewed is not None and self._fenced:
            kept = {host_id for (host_id,) in renewed.fetchall()}
            lost = [host for host, (host_id, _epoch) in held.items() if host_id not in kept]
            if lost:
                log.warning("crawl %s: worker %s lost %d hosts to others", self.crawl, self.worker_id, len(lost))
                self._forget_hosts(lost, lost=True)
        self._deadline = now + self.lease_seconds * _SAFE_SHARE
        self._renew_at = now + self.lease_seconds / 3
        if share is not None:
            self._shed(*_single(share))
        self._give_back_idle(conn)

    def _give_back_idle(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """Give back the hosts with nothing to do here: nothing waiting in line, nothing in flight."""
        held = self._held
        idle = [host for host in held
                if host not in self._rotation and host not in self._too_deep and not self._claims_by_host[host]]
        if idle:
            conn.execute(GIVE_BACK, {"me": self.worker_id, "ids": [held[host][0] for host in idle]})
            self._forget_hosts(idle, lost=False)
            self._given_back.update(idle)

    def _shed(self, share: int) -> None:
        """Fairness: hold no more than a fair share of the hosts with work (``share``: each live
        worker the same), and let the hosts beyond it go -- those with the least in flight, which
        stop being claimed for and are given back once nothing of them is in flight."""
        staying = [host for host in self._held if host not in self._leaving]
        excess = len(staying) - share
        if excess <= 1:  # a host more than the share is no reason to move one
            return
        for host in sorted(staying, key=self._claims_by_host.__getitem__)[:excess]:
            self._leaving.add(host)
            self._rotation.forget(host)
            self._too_deep.pop(host, None)

    def _take(self, conn: psycopg.Connection[tuple[Any, ...]], now: float) -> None:
        """Take free hosts with work (up to max_hosts held), and recover what their last owner had in flight."""
        most = _TAKE_STEP if self.max_hosts is None else min(_TAKE_STEP, self.max_hosts - len(self._held))
        if most <= 0:
            return  # no room: the take stays due, for the moment a host is given back
        self._take_soon = False
        self._take_at = now + self.lease_seconds / 3
        taken = conn.execute(TAKE, {"me": self.worker_id, "lease": self.lease_seconds, "most": most,
                                    "held": len(self._held), "fenced": self._fenced}).fetchall()
        if len(taken) == most:
            self._take_at = now  # there may be more: at the next call
        if not taken:
            return
        if not self._held:  # the leases of hosts already held are older: they set the deadline
            self._deadline = now + self.lease_seconds * _SAFE_SHARE
            self._renew_at = now + self.lease_seconds / 3
        ids = []
        for host_id, host, epoch in taken:
            self._held[host] = (host_id, epoch)
            self._gate_changes[host] = self._deadline
            self._given_back.discard(host)
            ids.append(host_id)
        if self._fenced:
            self._move("processing", "waiting", conn.execute(RECOVER, {"ids": ids}).rowcount)
        self._line_up(conn, ids)

    def _forget_hosts(self, hosts: list[str], *, lost: bool) -> None:
        for host in hosts:
            del self._held[host]
            self._leaving.discard(host)
            self._rotation.forget(host)
            self._too_deep.pop(host, None)
            self._gate_changes[host] = -math.inf if lost else None
        if lost:
            self._lost += hosts

    # -- plumbing ------------------------------------------------------------

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
        self._committed_deadline = self._deadline

    def _move(self, old: str, new: str, n: int = 1) -> None:
        self._delta[old] -= n
        self._delta[new] += n

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

    def add_many(
        self, entries: Iterable[tuple[str, int, str | None, int]], lastmods: Mapping[str, str] | None = None
    ) -> int:
        """Add ``(url, depth, parent, priority)`` entries in one statement; how many were new.
        ``lastmods`` as in the SQLite Frontier's add_many() (one more statement when given).

        A URL given twice keeps its first place and priority, and the smallest depth with the
        parent that gave it (PostgreSQL's upsert may not touch a row twice in one statement, so
        service.prepare_additions folds the batch).  URLs of hosts another worker holds wait for it;
        new hosts are free, and this worker takes them at its next claim if it has room.
        """
        with self._db() as conn:
            additions = prepare_additions(entries, lastmods, self._recent)
            if not additions:
                return 0
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
                    "host_of": list(columns[3][cut]),
                }
                n, new_hosts, found = _single(conn.execute(INSERT, values))
                if found < len(of):
                    # A host of these URLs came in from another worker meanwhile (see INSERT): again, in a
                    # statement that sees it.  Once is enough: the first waited for that worker to end.
                    again, _fresh, _found = _single(conn.execute(INSERT, values))
                    n += again
                added += n
                fresh += new_hosts
            if additions.lastmods:
                dated = additions.lastmods
                conn.execute(SET_LASTMODS, {"urls": list(dated), "lastmods": list(dated.values())})
            self._delta["waiting"] += added
            if fresh:
                self._take_soon = True
            self._commit(conn)
            for key, row in rows.items():
                self._recent.added(key, row[0])
            for host, top in hosts.items():
                self._offer(host, top)
            return int(added)

    # -- claiming ------------------------------------------------------------

    def claim(
        self, limit: int, max_depth: int | None = None, host_room: Callable[[str], int] | None = None
    ) -> list[FrontierURL]:
        """Up to ``limit`` due URLs of this worker's hosts, no deeper than ``max_depth``, moved to
        'processing': hosts in turn, each no more than ``host_room(host)`` says it can take now --
        the order and the rules of the SQLite Frontier's claim()."""
        check_int("limit", limit, 0)
        if limit == 0:
            return []
        deepest = _DEEPEST if max_depth is None else min(max_depth, _DEEPEST)
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
        return [FrontierURL(url, depth, priority, attempts, parent, lastmod)
                for _host, url, depth, priority, attempts, parent, _seq, lastmod in rows]

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
        limited = deepest != _DEEPEST
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

    def _offer(self, host: str, priority: int) -> None:
        """A URL of ``host`` waits (new, or again): in line it goes, parked or not, if the host is
        this worker's; a host it gave back it takes again."""
        if host not in self._held or host in self._leaving:
            if host in self._given_back:
                self._take_soon = True
            return
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

    def _lock_mine(self, conn: psycopg.Connection[tuple[Any, ...]], hosts: Iterable[str]) -> None:
        """Before an outcome is recorded for URLs of ``hosts``, in its transaction: lock the rows of
        those still this worker's ``FOR SHARE``, as a claim does (LOCK_MINE).  The fence in the
        outcome's statement reads the hosts as its snapshot has them; a takeover not committed when
        the statement began, which re-claimed the row meanwhile, would pass it (the row is
        rechecked as it is after that commit, the host is not).  Locked, no host changes hands
        until this transaction ends; one taken meanwhile is waited for, and not locked."""
        if self._fenced:
            ids = {self._held[host][0] for host in hosts if host in self._held}
            if ids:
                conn.execute(LOCK_MINE, {"ids": list(ids), "me": self.worker_id})

    def recordable(self, urls: Iterable[str]) -> list[str]:
        """Of these URLs claimed here (as claimed), those whose outcomes will be accepted, in order:
        their hosts are still this worker's under the epochs of their claims, and stay so until the
        transaction ends (locked FOR SHARE, as before an outcome).  Inside the :meth:`batch` that
        records their outcomes, an output written for them is written for exactly those that count."""
        keys = list(urls)
        if not self._fenced:
            return keys
        held, claimed = self._held, self._claimed
        claims = [(url, claimed.get(url)) for url in keys]
        ids = {held[claim[0]][0] for _url, claim in claims if claim is not None and claim[0] in held}
        if not ids:
            return []
        with self._db() as conn:
            epochs = dict(conn.execute(MINE_LOCKED, {"ids": list(ids), "me": self.worker_id}).fetchall())
            self._commit(conn)  # inside a batch, nothing: the locks last until the batch commits
        return [url for url, claim in claims
                if claim is not None and claim[0] in held and epochs.get(held[claim[0]][0]) == claim[1]]

    def _unclaim(self, host: str) -> None:
        self._claims_by_host[host] -= 1
        if not self._claims_by_host[host]:
            del self._claims_by_host[host]

    def _refuse(self, n: int, action: str) -> None:
        if n:
            self.refused += n
            log.info("crawl %s: %d %s refused: their hosts changed hands", self.crawl, n, action)

    def complete(self, url: str, status: int | None) -> None:
        """Record that a claimed URL was fetched: processing → done (:meth:`complete_many` of one)."""
        self.complete_many([(url, status)])

    def complete_many(
        self, outcomes: Iterable[tuple[str, int | None]], checkpoint: Mapping[str, int] | None = None
    ) -> None:
        """``(url, status)`` pairs of claimed URLs to 'done', all or none, with ``checkpoint`` (names
        and ints >= 0) stored in the same transaction -- the SQLite Frontier's complete_many().
        An outcome whose host changed hands since its claim is refused (counted in :attr:`refused`).

        Raises:
            ValueError: for the first URL that this worker did not claim; nothing of the call is recorded.
            TypeError, ValueError: for a bad checkpoint, before anything is recorded.
        """
        entries = None if checkpoint is None else check_checkpoint(checkpoint)
        rows = list(outcomes)
        if not rows and entries is None:
            return
        with self._db() as conn:
            seen: set[str] = set()
            owned = [self._own(conn, url, "complete", seen) for url, _status in rows]
            with conn.pipeline():  # one round trip for all of it
                self._lock_mine(conn, [host for _key, host, _epoch in owned])
                done = conn.execute(COMPLETE_MANY, {
                    "now": self._clock(), "urls": [key for key, _host, _epoch in owned],
                    "statuses": [status for _, status in rows], "epochs": [epoch for _key, _host, epoch in owned],
                    "me": self.worker_id, "fenced": self._fenced})
                if entries:
                    conn.execute(SAVE_CHECKPOINT, {"names": list(entries), "values": list(entries.values())})
            for _key, host, _epoch in owned:
                self._unclaim(host)
            self._refuse(len(rows) - done.rowcount, "completions")
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

    def fail(
        self, url: str, error: str, status: int | None = None, retry: bool = True, retry_after: float | None = None
    ) -> str:
        """A failed attempt of a claimed URL: with ``retry`` and attempts left it waits again,
        after the backoff (or ``retry_after``), otherwise it is an 'error' -- the SQLite
        Frontier's fail().  Returns its new state, or 'refused' when its host changed hands since
        its claim (nothing recorded, counted in :attr:`refused`).

        Raises:
            ValueError: when ``url`` is not a URL this worker claimed.
        """
        with self._db() as conn:
            key, host, epoch = self._own(conn, url, "fail", set())
            self._unclaim(host)
            with conn.pipeline():
                self._lock_mine(conn, [host])
                failed = conn.execute(FAIL, {
                    "retry": bool(retry), "most": self.max_attempts, "status": status, "error": error,
                    "now": self._clock(), "url": key, "epoch": epoch, "me": self.worker_id, "fenced": self._fenced,
                    "delays": [self.retry_delay_after(n, retry_after) for n in range(1, self.max_attempts)],
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

    def retry_delay_after(self, attempts: int, retry_after: float | None) -> float:
        """Seconds to wait after the ``attempts``-th failed fetch (robots.txt retries use it too)."""
        return retry_delay(attempts, retry_after, self.retry_delay, self.max_retry_delay)

    def release(self, urls: Iterable[str]) -> None:
        """Claimed URLs back to 'waiting', the attempt not counted (they were not fetched); URLs
        that this worker has not in flight are left alone, and so are those whose host changed hands."""
        if isinstance(urls, str):
            raise TypeError("release() takes an iterable of URLs; wrap a single URL in a list")
        keys: dict[str, int] = {}
        for url in urls:
            key = url if url in self._claimed else None
            if key is None:
                with contextlib.suppress(TypeError, ValueError):
                    key = normalize_url(url)
            if key is not None and key in self._claimed:
                keys[key] = self._claimed[key][1]
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

    # -- robots.txt --------------------------------------------------------

    def robots(self, host: str) -> StoredRobots | None:
        """``host``'s robots.txt as a worker of this crawl fetched it in the last day, None when
        none did: a new owner of a host need not fetch it again."""
        with self._db() as conn:
            row = conn.execute(ROBOTS_OF, {"host": host, "seconds": ROBOTS_SECONDS}).fetchone()
            self._commit(conn)
            return StoredRobots(int(row[0]), bytes(row[1] or b""), float(row[2])) if row is not None else None

    def store_robots(self, host: str, status: int, body: bytes) -> None:
        """Keep what ``host``'s robots.txt said (a final answer: 2xx or 4xx) for the host's next owners."""
        with self._db() as conn:
            conn.execute(STORE_ROBOTS, {"host": host, "status": status, "body": body, "me": self.worker_id,
                                        "fenced": self._fenced})
            self._commit(conn)

    # -- looking -----------------------------------------------------------

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
            due, anything = _single(conn.execute(NEXT_DUE, {
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

    def flush(self) -> None:
        """Commit what is pending (outside a batch there is nothing: every call commits)."""
        with self._db() as conn:
            self._commit(conn)

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
        return (f"<PostgresFrontier {self.crawl!r} at {self.where} worker {self.worker_id} "
                f"hosts={len(self._held)} in_flight={len(self._claimed)}>")


def crawl_status(dsn: str, crawl: str, *, top: int = 10, connect_timeout: float = 10.0) -> CrawlStatus:
    """Read where crawl ``crawl`` at ``dsn`` stands, as no worker: nothing is taken or written.

    Raises:
        FrontierError: the server cannot be reached, or holds no frontier of that name and version.
        ImportError: when psycopg is not installed.
    """
    import psycopg
    from psycopg import sql

    crawl = check_crawl_name(crawl)
    where = _where(psycopg, dsn)
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
        raise FrontierError(f"cannot read crawl {crawl!r} at {where}: {_first_line(exc)}",
                            FrontierErrorKind.UNAVAILABLE) from None
    return CrawlStatus(counts, workers, busiest)


def _keepalives(psycopg: Any, dsn: str, lease: float) -> dict[str, Any]:
    """libpq settings that notice a dead server or network within about a lease, where the
    kernel's defaults take two hours: a probe after a third of a lease idle, then three a sixth
    of a lease apart, and data sent but not acknowledged for a lease ends the connection too
    (tcp_user_timeout: keepalives are only sent while nothing is).  A DSN's own settings win."""
    wanted = {"keepalives": 1, "keepalives_idle": max(1, round(lease / 3)),
              "keepalives_interval": max(1, round(lease / 6)), "keepalives_count": 3,
              "tcp_user_timeout": max(1000, round(lease * 1000))}
    given = psycopg.conninfo.conninfo_to_dict(dsn)
    return {name: value for name, value in wanted.items() if name not in given}


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
        raise FrontierError(f"not a PostgreSQL connection string: {_first_line(exc)}",
                            FrontierErrorKind.UNAVAILABLE) from None
    host = params.get("host") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    database = params.get("dbname") or os.environ.get("PGDATABASE") or params.get("user") or "postgres"
    return f"{host}:{port}/{database}"

"""Host leases of a PostgreSQL frontier: which hosts a worker holds, for how long, and what it may
record for them.

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

*Address groups.*  In a crawl with per-IP limits (``by_address``), the hosts of one address are
owned by one worker at a time, so that one fetcher counts every connection to that address.  A
host's address is learnt from the crawl: an IP literal's is its own, known when it is taken; a
name's is where its answers came from (:meth:`note_addresses`, robots.txt's included), kept on
its row (``hosts.address``).  A take skips a free host whose address a live other worker holds
(one probe of ``hosts_address`` per candidate); a host whose address is not known yet may be
taken.  Whenever a worker comes to hold a host of a known address -- a take, or the address
learnt -- it settles the group in the same transaction: it takes the address's advisory lock
without waiting (``pg_try_advisory_xact_lock``), then looks for a live other holder.  Locked
elsewhere (another worker settling it now) or held elsewhere, it gives way: the host gets no more
claims, :meth:`holds` says no for it (what waited for its robots.txt does not start), and it goes
back once nothing of it is in flight.  Two workers settling one address are
thereby put in the order of their commits, and the later one gives way; so exactly one keeps a
group, and a group no one can settle now goes back free, for the next take.  Until a name's
first answer its address is unknown, and its requests are counted against its own address only
by this worker's fetcher: that is the window docs/distributed.md bounds.

*Test-only switches.*  With the environment variable ``NIOFETCHER_TEST_NO_HOST_LEASES=1`` every
check of an owner passes (read once, in ``__init__``): the negative control of the tests that
prove the per-host limit holds across workers.  ``NIOFETCHER_TEST_NO_ADDRESS_GROUPS=1`` turns the
address groups off alone (the per-IP limit then holds per worker only).  Never for a real crawl.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import time
import types
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ....urls import parse_target
from ..hosts import HostRotation
from ..postgres_schema import (
    ADDRESSES_HELD_ELSEWHERE,
    CLAIMS_OF_MINE,
    GIVE_BACK,
    HEARTBEAT,
    HELD,
    LOCK_ADDRESSES,
    LOCK_MINE,
    MINE_LOCKED,
    QUEUED_HOSTS,
    RECOVER,
    RENEW,
    SET_ADDRESSES,
    SHARE,
    TAKE,
)
from .session import Session, single

if TYPE_CHECKING:
    import psycopg

__all__ = ["DEEPEST", "NO_ADDRESS_GROUPS", "NO_HOST_LEASES", "HostLeases"]

log = logging.getLogger("niofetcher")

#: The test-only switch that turns host ownership off (see "Test-only switches" above).
NO_HOST_LEASES = "NIOFETCHER_TEST_NO_HOST_LEASES"
#: The test-only switch that turns the address groups off (see "Test-only switches" above).
NO_ADDRESS_GROUPS = "NIOFETCHER_TEST_NO_ADDRESS_GROUPS"

#: The deepest a claim without a depth limit goes: depth is an INTEGER column.
DEEPEST = 2**31 - 1
# Hosts taken in one statement at most (the fair share bounds them too).
_TAKE_STEP = 256
# After a renewal sent at t, requests start until t + this share of the lease (renewals come every third).
_SAFE_SHARE = 2 / 3
# The window of "pages in the last minute" in the heartbeat.
_MINUTE = 60.0


class HostLeases(Session):
    """The hosts this worker holds, with their leases and epochs, and the URLs it has in flight;
    the hosts held with waiting URLs, in turn or parked, that its claims go through.

    Args:
        driver, crawl, where, clock: as for :class:`~niofetcher.crawl.frontier.postgres.session.Session`.
        lease_seconds: how long a host is this worker's after each renewal.
        max_hosts: the most hosts this worker holds at once, None for no bound.
        by_address: the crawl has per-IP limits: the hosts of one address are one worker's at a
            time (see "Address groups" above).
    """

    def __init__(self, driver: types.ModuleType, crawl: str, where: str, clock: Callable[[], float],
                 lease_seconds: float, max_hosts: int | None, by_address: bool = False) -> None:
        super().__init__(driver, crawl, where, clock)
        self.lease_seconds = lease_seconds
        self.max_hosts = max_hosts
        self._fenced = os.environ.get(NO_HOST_LEASES) != "1"  # the one place the test-only switch is read
        self._by_address = by_address and self._fenced and os.environ.get(NO_ADDRESS_GROUPS) != "1"  # ... and this one
        self._addresses: dict[str, str] = {}  # held host -> its address, where known
        #: Outcomes refused because their host had changed hands (see "Fencing"), since opening.
        self.refused = 0
        self._rotation = HostRotation()  # every host held with a waiting URL, in turn ...
        self._too_deep: dict[str, tuple[int, int]] = {}  # ... or parked: (depth limit, its line)
        self._shallowest_parked = DEEPEST  # the smallest depth limit in _too_deep
        self._held: dict[str, tuple[int, int]] = {}  # host -> (hosts.id, epoch): this worker's
        self._claimed: dict[str, tuple[str, int]] = {}  # url in flight -> (host, epoch it was claimed under)
        self._claims_by_host: Counter[str] = Counter()
        self._lost: list[str] = []  # hosts lost since lost_hosts() last said
        self._given_back: set[str] = set()  # hosts this worker gave back: a URL of one waits -> take again
        self._leaving: set[str] = set()  # held hosts beyond a fair share: no more claims, given back once drained
        self._gave_way: set[str] = set()  # ... leaving as another worker holds their address: nothing more starts
        self._take_soon = True  # free hosts with work are likely: take at the next call
        self._take_at = 0.0  # time.monotonic() of the next take otherwise
        self._renew_at = 0.0  # ... of the next renewal
        self._deadline = -math.inf  # ... past which no request of a held host may start (see holds())
        self._committed_deadline = self._deadline  # ... as the last commit made it true
        self._gate_changes: dict[str, float | None] = {}  # for start_deadlines(), in the order they happened
        self._gated_until = math.nan  # the deadline start_deadlines() last gave every held host (nan: none yet)
        self._done_times: deque[tuple[float, int]] = deque()  # (time.monotonic(), URLs done): the heartbeat's

    def _reload(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """The hosts held, the URLs in flight and the hosts in line, from the database as committed
        (after a rollback); the leases renewed and taken at the next call."""
        self._rotation = HostRotation()
        self._too_deep.clear()
        self._shallowest_parked = DEEPEST
        me = {"me": self.worker_id}
        held_before = self._held
        held = conn.execute(HELD, me).fetchall()
        self._held = {origin: (host_id, epoch) for host_id, origin, epoch, _address in held}
        self._addresses = {origin: address for _id, origin, _epoch, address in held if address is not None}
        self._claimed = {url: (origin, epoch) for url, origin, epoch in conn.execute(CLAIMS_OF_MINE, me)}
        self._claims_by_host = Counter(host for host, _epoch in self._claimed.values())
        self._leaving.clear()
        self._gave_way.clear()
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


    def _committed(self) -> None:
        self._committed_deadline = self._deadline

    def holds(self, host: str) -> bool:
        """Whether requests to ``host`` (``host_key()``) may start now: it is this worker's, and
        its lease cannot have ended by this worker's clock (see "Host leases" above), and it has not
        given way on its address (see "Address groups")."""
        if not self._fenced:
            return True
        return host in self._held and host not in self._gave_way and time.monotonic() < self._deadline

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
            self._shed(*single(share))
        self._give_back_idle(conn)

    def _give_back_idle(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """Give back the hosts with nothing to do here: nothing waiting in line, nothing in flight."""
        idle = [host for host in self._held
                if host not in self._rotation and host not in self._too_deep and not self._claims_by_host[host]]
        if idle:
            self._give_back(conn, idle)

    def _give_back(self, conn: psycopg.Connection[tuple[Any, ...]], hosts: list[str]) -> None:
        conn.execute(GIVE_BACK, {"me": self.worker_id, "ids": [self._held[host][0] for host in hosts]})
        self._forget_hosts(hosts, lost=False)
        self._given_back.update(hosts)

    def _shed(self, share: int) -> None:
        """Fairness: hold no more than a fair share of the hosts with work (``share``: each live
        worker the same), and let the hosts beyond it go -- those with the least in flight, or
        with address groups whole groups, which stop being claimed for and are given back once
        nothing of them is in flight."""
        staying = [host for host in self._held if host not in self._leaving]
        excess = len(staying) - share
        if excess <= 1:  # a host more than the share is no reason to move one
            return
        busy = self._claims_by_host.__getitem__
        if not self._by_address:
            leaving = sorted(staying, key=busy)[:excess]
        else:
            # An address's hosts can only move together: whole groups go, the least busy first, but
            # never the last one (a host whose address is unknown is a group of its own).
            groups: dict[str, list[str]] = {}
            for host in staying:
                groups.setdefault(self._addresses.get(host, host), []).append(host)
            leaving = []
            for hosts in sorted(groups.values(), key=lambda hosts: sum(map(busy, hosts)))[:-1]:
                if len(leaving) >= excess:
                    break
                leaving += hosts
        for host in leaving:
            self._leave(host)

    def _leave(self, host: str) -> None:
        """No more claims for ``host``: it goes back once nothing of it is in flight (_give_back_idle)."""
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
                                    "held": len(self._held), "fenced": self._fenced,
                                    "by_address": self._by_address}).fetchall()
        if len(taken) == most:
            self._take_at = now  # there may be more: at the next call
        if not taken:
            return
        if not self._held:  # the leases of hosts already held are older: they set the deadline
            self._deadline = now + self.lease_seconds * _SAFE_SHARE
            self._renew_at = now + self.lease_seconds / 3
        ids = []
        addresses = {}
        for host_id, host, epoch, address in taken:
            self._held[host] = (host_id, epoch)
            self._gate_changes[host] = self._deadline
            self._given_back.discard(host)
            ids.append(host_id)
            if self._by_address and (known := address or _literal_address(host)) is not None:
                addresses[host] = known
        if self._fenced:
            self._move("processing", "waiting", conn.execute(RECOVER, {"ids": ids}).rowcount)
        if addresses:
            self._settle_addresses(conn, addresses)
        kept = {host_id for host_id, _epoch in self._held.values()}  # less those given way
        self._line_up(conn, [host_id for host_id in ids if host_id in kept])

    def note_addresses(self, peers: Mapping[str, str]) -> None:
        """Where answers came from: ``host_key()`` -> ``FetchResult.peer`` (``"ip:port"``).  In a
        crawl with per-IP limits, the address of each host this worker holds is kept with it, and a
        group another worker holds is given way to (see "Address groups" above); otherwise nothing."""
        if not self._by_address:
            return
        fresh = {}
        for host, peer in peers.items():
            address = _ip(peer.rpartition(":")[0].strip("[]"))
            if address is not None and host in self._held and self._addresses.get(host) != address:
                fresh[host] = address
        if fresh:
            with self._db() as conn:
                self._settle_addresses(conn, fresh)
                self._commit(conn)

    def _settle_addresses(self, conn: psycopg.Connection[tuple[Any, ...]], addresses: dict[str, str]) -> None:
        """Held hosts with their addresses (just taken, or just learnt): keep them on their rows, and
        give way where another worker settles or holds the address (see "Address groups" above)."""
        self._addresses.update(addresses)
        groups = sorted(set(addresses.values()))
        busy = {address for (address,) in conn.execute(LOCK_ADDRESSES, {"addresses": groups})}
        conn.execute(SET_ADDRESSES, {"me": self.worker_id, "ids": [self._held[host][0] for host in addresses],
                                     "addresses": list(addresses.values())})
        mine = [address for address in groups if address not in busy]
        elsewhere = {address for (address,) in conn.execute(
            ADDRESSES_HELD_ELSEWHERE, {"me": self.worker_id, "addresses": mine})} if mine else set()
        giving = [host for host, address in addresses.items() if address in busy or address in elsewhere]
        if giving:
            log.info("crawl %s: worker %s gives way on %d hosts: another worker holds their addresses",
                     self.crawl, self.worker_id, len(giving))
            for host in giving:
                self._leave(host)
            self._gave_way.update(giving)
            idle = [host for host in giving if not self._claims_by_host[host]]
            if idle:
                self._give_back(conn, idle)

    def _forget_hosts(self, hosts: list[str], *, lost: bool) -> None:
        for host in hosts:
            del self._held[host]
            self._addresses.pop(host, None)
            self._leaving.discard(host)
            self._gave_way.discard(host)
            self._rotation.forget(host)
            self._too_deep.pop(host, None)
            self._gate_changes[host] = -math.inf if lost else None
        if lost:
            self._lost += hosts

    def _offer(self, host: str, priority: int) -> None:
        """A URL of ``host`` waits (new, or again): in line it goes, parked or not, if the host is
        this worker's; a host it gave back it takes again."""
        if host not in self._held or host in self._leaving:
            if host in self._given_back:
                self._take_soon = True
            return
        parked = self._too_deep.pop(host, None)
        self._rotation.offer(host, priority if parked is None else max(priority, parked[1]))

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

    def _refuse(self, n: int, action: str) -> None:
        if n:
            self.refused += n
            log.info("crawl %s: %d %s refused: their hosts changed hands", self.crawl, n, action)


def _ip(text: str) -> str | None:
    """``text`` as an IP address in its one written form, None when it is not one."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _literal_address(host: str) -> str | None:
    """The address of a host (``host_key()``) named by an IP literal: its own; None for a name."""
    return _ip(parse_target(host).origin.host)

"""The connection table and the scheduler: pure bookkeeping, no I/O.

Theory of operation.  Every (scheme, host, port) has a HostSlot holding its
waiting requests (a heap on (-priority, seq), so FIFO among equals: Tasks, and
URLs registered as a str as a ``request.PendingURL`` until they start), its
connections with capacity and its counts.  The table knows no protocol: a
connection is on offer when its driver says it can take a request (the engine
asks ``Connection.next_cycle`` after each response; HTTP/1.1 answers 1 when the
connection may be reused, 0 when it must close), and a request given to one
takes it off (its "idle" connections, in HTTP/1.1's words, below).  A slot is
*ready* when it has a request waiting, its politeness delay has passed and it
either has a connection on offer or is below its connection limit.  Ready slots sit in one heap keyed by their best
waiting request, so "the highest-priority URL among hosts that can take one
now" is the top of that heap: O(log n) per decision, no scan over hosts or
URLs, and a host at its limit is simply absent, so it blocks nobody (no
head-of-line blocking).

Entries are never removed from the heap; a slot remembers the one entry
that is current (``ready_entry``) and any other entry is skipped when it
surfaces (lazy deletion).

The total limit is enforced here too: when every connection slot is taken,
the oldest idle connection anywhere is closed to make room (as libcurl's
connection cache does); when none is idle the top slot simply waits until a
connection closes or goes idle.  ``next_assignment`` returns what to do; the
engine does the I/O.

Per-host state is freed (docs/guarantees.md, "memory does not grow").  A slot with nothing
queued, nothing in flight, no connection (resolving, connecting, busy or
idle) and its politeness delay passed leaves the table for ``recent``, the
last RECENT_HOSTS such slots, oldest dropped first; a host that comes back
while its slot is there gets that slot again (its figures and its TLS session
with it), otherwise a new one.  A slot whose delay is still running is
looked at again when it ends.  The delays set through ``set_delay`` (a
crawler's Crawl-delay) live in their own map, SET_DELAYS hosts at most, least
recently used forgotten first, so a host keeps its delay long after its slot
is gone: the map is all that stays, a few hundred bytes a host, where a slot
kept alive for its delay would hold its lists, its figures and a TLS session.
A Throttle's state of a host whose throttled delay is above its floor
(``throttle_floor``: a server that asked to slow down, or is slow) is kept the
same way, THROTTLED_HOSTS hosts at most, when its slot leaves ``recent``, and
given back to the slot it gets when it returns: a server that answered 429s
is not hammered again because a thousand other hosts came and went.

Start gates.  ``set_gate`` gives an origin a deadline (``time.monotonic()``, the table's clock)
after which none of its requests starts, on a new connection or a kept-alive one: a crawler that
holds a host by a lease it may fail to renew stops starting requests before the lease can have
ended (docs/distributed.md).  A gated origin's requests stay queued, not failed -- a later gate
reopens it, a cancel takes them back -- and its slot leaves the ready heap as any slot that cannot
start, so it blocks nobody; a gate needs no timer, as ``HostSlot.can_start`` compares it with the time of
each decision.  The gates live in their own map, kept until lifted (None), so a slot made later
starts behind its origin's gate; an origin without one pays one comparison with infinity.

Proxies.  A slot is still one origin, and its limit counts every connection
to that origin whatever the route; but a connection carries requests of one
route only (direct, or through one proxy with one set of credentials), so
an idle connection is taken only by a task of its route.  When none fits, a
new one opens -- after closing one of the slot's idle ones if the slot is at
its limit.  ``max_connections_per_proxy`` bounds the open connections of one
proxy (host:port) over all origins, as the total limit does for all: an idle
connection of that proxy is closed to make room, and when none is idle the
slot is *parked* on the proxy, out of the ready heap so that it blocks no
other host, in a FIFO of that proxy's waiters.  Each time one of the
proxy's connections closes or goes idle, one waiter is woken back into the
ready heap (O(log n) again); a woken slot whose next task turns out not to
need the proxy passes the wake on, so a free place is never left unused
while a waiter sleeps.  Parked entries are deleted lazily, like ready ones.

Addresses and turns: ``max_connections_per_ip`` and ``ip_delay``, in ip_groups.py.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from .config import Address
from .hosts import HostSlot, IPGroup
from .ip_groups import AddressLines, Clock, Locate, ScheduleAt
from .request import MakeTask, PendingURL, QueueEntry, Task
from .urls import Origin, Proxy

if TYPE_CHECKING:
    from .hosts import Connection

_V = TypeVar("_V")

RECENT_HOSTS = 1024  # freed slots kept for host_stats() and for a quick return
SET_DELAYS = 65536  # hosts whose set_delay() is remembered without a slot
THROTTLED_HOSTS = 65536  # hosts whose Throttle state is remembered without a slot

# A Throttle's state of a host, kept when its slot is dropped: its throttled delay, the delay its
# last backoff found too short, its backoffs, and the good answers since its last backoff.
ThrottleState = tuple[float, float, int, int]


def _remember(lru: OrderedDict[Origin, _V], origin: Origin, value: _V, most: int) -> None:
    """Keep ``value`` for ``origin`` in ``lru``, most recently used last, forgetting the least
    recently used beyond ``most``."""
    lru[origin] = value
    lru.move_to_end(origin)
    if len(lru) > most:
        lru.popitem(last=False)


def _tasks_only(entry: PendingURL, origin: Origin) -> Task:
    raise TypeError(f"a PendingURL for {origin} was queued on a HostTable built without make_task")


class Assignment(NamedTuple):
    """A decision of the scheduler: run ``task``, on ``conn`` or on a new connection, after closing ``evict``.

    ``evict_for_proxy``: an idle connection of the task's proxy (or of its address), closed as well
    when both the host's limit and ``max_connections_per_proxy`` (``max_connections_per_ip``) need a place.
    ``group`` and ``addresses`` (per-IP limits, a direct route): the address the decision counted on
    and what a new connection connects to -- carried here, not read from the slot after the evicts
    have closed, as a close may make the slot forget its address (an expired answer).
    """

    slot: HostSlot
    task: Task
    conn: Connection | None
    evict: Connection | None
    evict_for_proxy: Connection | None = None
    group: IPGroup | None = None
    addresses: Sequence[Address] | None = None


class HostTable(AddressLines):
    """All host slots, the ready heap and the global connection count."""

    def __init__(
        self, max_connections: int, per_host: int, delay: float, jitter: float, schedule_at: ScheduleAt, clock: Clock,
        make_task: MakeTask | None = None, per_proxy: int | None = None, per_ip: int | None = None,
        ip_delay: float = 0.0, locate: Locate | None = None, throttle_floor: float = 0.0,
    ) -> None:
        """``make_task`` is needed only by a table that queues PendingURLs (``enqueue_entry``).

        ``throttle_floor``: a new host's throttled delay (``Throttle.min_delay``), from its first start on.

        ``per_proxy``: open connections one proxy gets at most (None: only the total limit).
        ``per_ip`` and ``ip_delay``: the same per resolved address, and the least time between two
        request starts to one; either needs ``locate``, which looks a slot's origin up and answers
        through ``located`` (ip_groups.py, "Addresses"), with the time until which the answer holds.
        """
        if make_task is None:
            make_task = _tasks_only
        self.max_connections = max_connections
        self.per_host = per_host
        self.default_delay = delay
        self.jitter = jitter
        self.throttle_floor = throttle_floor
        self.slots: dict[Origin, HostSlot] = {}
        self.recent: OrderedDict[Origin, HostSlot] = OrderedDict()  # freed slots, oldest first
        self._set_delays: OrderedDict[Origin, float] = OrderedDict()  # least recently used first
        self._throttled: OrderedDict[Origin, ThrottleState] = OrderedDict()  # the same
        self._gates: dict[Origin, float] = {}  # the start gates set (set_gate), until lifted
        self.total_open = 0
        self.pending = 0
        self._ready: list[tuple[int, int, int, HostSlot]] = []
        self._push_ids = itertools.count()
        self._idle_lru: OrderedDict[Connection, None] = OrderedDict()
        self._schedule_at = schedule_at
        self._clock = clock
        self._make_task = make_task
        self.per_proxy = per_proxy
        self._proxied: dict[Connection, Proxy] = {}  # every open connection through a proxy, and its proxy
        self.proxy_open: dict[str, int] = {}  # open connections per proxy authority (host:port)
        self._proxy_idle: dict[str, OrderedDict[Connection, None]] = {}  # with per_proxy only: oldest first
        self._proxy_waiters: dict[str, deque[HostSlot]] = {}
        self.per_ip = per_ip
        self.ip_delay = ip_delay
        self._by_ip = per_ip is not None or ip_delay > 0
        if self._by_ip and locate is None:
            raise ValueError("per-IP limits need locate")
        self._locate = locate
        self.ip_groups: dict[str, IPGroup] = {}
        self._ip_of: dict[Connection, IPGroup] = {}  # every open connection counted on an address
        self._turned_away: set[Connection] = set()  # until their requests' failures are seen (may_connect)

    def slot(self, origin: Origin) -> HostSlot:
        """The slot of ``origin``: its live one, its recent one back, or a new one."""
        slot = self.slots.get(origin)
        if slot is None:
            slot = self.recent.pop(origin, None)
            if slot is None:
                delay = self._set_delays.get(origin)
                if delay is None:
                    delay = self.default_delay
                else:
                    self._set_delays.move_to_end(origin)
                slot = HostSlot(origin, self.per_host, delay, self.jitter, throttle_delay=self.throttle_floor)
                throttled = self._throttled.pop(origin, None) if self._throttled else None
                if throttled is not None:
                    slot.throttle_delay, slot.too_fast, slot.backoffs, good_since = throttled
                    slot.served_at_backoff = -good_since  # served - served_at_backoff, as it was
                if self._gates:
                    slot.start_until = self._gates.get(origin, math.inf)
            self.slots[origin] = slot
        return slot

    def __repr__(self) -> str:
        return (
            f"<HostTable [hosts: {len(self.slots)}, {len(self.recent)} recent | pending: {self.pending} | "
            f"connections: {self.total_open} open, {len(self._idle_lru)} idle]>"
        )

    # -- events -------------------------------------------------------------

    def enqueue(self, task: Task, now: float) -> None:
        """Queue ``task`` on its origin's slot."""
        self.enqueue_entry(task.target.origin, (-task.priority, task.seq, task), now)

    def enqueue_entry(self, origin: Origin, entry: QueueEntry, now: float) -> None:
        """Queue ``entry`` (a Task's or a pending str URL's) on ``origin``'s slot."""
        slot = self.slot(origin)
        heapq.heappush(slot.queue, entry)
        self.pending += 1
        self.refresh(slot, now)

    def set_delay(self, origin: Origin, delay: float, now: float) -> None:
        """From now on, ``delay`` seconds between request starts to ``origin`` (remembered without a slot)."""
        delays = self._set_delays
        if delay == self.default_delay:
            delays.pop(origin, None)
        else:
            _remember(delays, origin, delay, SET_DELAYS)
        # No slot is made for it: one made here, with nothing to do, would never be freed.
        slot = self.slots.get(origin) or self.recent.get(origin)
        if slot is not None:
            slot.delay = delay
            self.refresh(slot, now)

    def throttled(self, slot: HostSlot, delay: float, too_fast: float) -> None:
        """``slot``'s throttled delay is ``delay`` from its next start on (``too_fast``: see throttle.py)."""
        slot.throttle_delay = delay
        slot.too_fast = too_fast

    def backed_off(self, slot: HostSlot, delay: float, too_fast: float, pause_until: float, now: float) -> None:
        """A backoff of ``slot`` begins: ``delay`` from now on, and none of its requests starts before
        ``pause_until`` (a Retry-After) nor before ``delay`` from now."""
        slot.throttle_delay = delay
        slot.too_fast = too_fast
        slot.backoffs += 1
        slot.backoff_at = now
        slot.served_at_backoff = slot.served
        self.pause(slot, now + delay, now)
        self.pause(slot, pause_until, now)

    def pause(self, slot: HostSlot, until: float, now: float) -> None:
        """None of ``slot``'s requests starts before ``until``."""
        if until > slot.next_start_at:
            slot.next_start_at = until
            self.refresh(slot, now)

    def set_gate(self, origin: Origin, start_until: float | None, now: float) -> list[Connection]:
        """From now on, no request to ``origin`` starts at or after ``start_until``; None lifts its gate.

        Returns the idle connections the caller is to close: all of the origin's when its gate is
        lifted (its lease given back) or closed now (lost).  A lease holder that kept them would hold
        sockets to a server that another worker now owns, past every limit both promise."""
        lifted = start_until is None
        if start_until is None:
            self._gates.pop(origin, None)
            start_until = math.inf
        else:
            self._gates[origin] = start_until
        slot = self.slots.get(origin) or self.recent.get(origin)  # no slot made for it, as in set_delay
        if slot is None:
            return []
        slot.start_until = start_until
        self.refresh(slot, now)
        return list(slot.idle) if lifted or start_until <= time.monotonic() else []

    def connection_opened(self, slot: HostSlot, conn: Connection | None = None, group: IPGroup | None = None) -> None:
        """A connection of ``slot``'s began (it counts from its name lookup on); ``conn`` tells its route,
        ``group`` the address it counts on (its Assignment's)."""
        slot.open += 1
        self.total_open += 1
        slot.peak_open = max(slot.peak_open, slot.open)
        proxy = conn.proxy if conn is not None else None
        if proxy is not None:
            self._proxied[conn] = proxy  # type: ignore[index]
            key = proxy.authority
            self.proxy_open[key] = self.proxy_open.get(key, 0) + 1
        elif group is not None and conn is not None:
            group = self.ip_groups.setdefault(group.ip, group)  # freed by an evict closed for this start
            group.open += 1
            self._ip_of[conn] = group

    def connection_idle(self, conn: Connection, now: float) -> None:
        """``conn`` waits for its next request."""
        slot = conn.slot
        slot.idle.append(conn)
        self._idle_lru[conn] = None
        self.refresh(slot, now)
        if self._proxied and self.per_proxy is not None:
            proxy = self._proxied.get(conn)
            if proxy is not None:
                self._proxy_idle.setdefault(proxy.authority, OrderedDict())[conn] = None
                self._wake(proxy.authority, now)  # a place to take, by closing it
        if self._ip_of:
            group = self._ip_of.get(conn)
            if group is not None:
                if self.per_ip is not None:
                    group.idle.pop(conn, None)  # an entry left from an earlier idle spell
                    group.handed.pop(conn, None)
                    if not slot.queue:
                        group.idle[conn] = None  # idle for want of work: anyone's to close
                    elif self._turn_over(conn, slot, group, now):
                        group.handed[conn] = None  # its host parks when it next looks for a place
                    else:
                        return  # held: its host, ready above, takes it (ip_groups.py, "Turns")
                self._wake_ip(group, now)

    def connection_closed(self, conn: Connection, was_idle: bool, now: float) -> None:
        """``conn`` is gone; ``was_idle``: from the idle pool."""
        slot = conn.slot
        if was_idle:
            slot.idle.remove(conn)
            del self._idle_lru[conn]
        slot.open -= 1
        self.total_open -= 1
        self.refresh(slot, now)
        if self._proxied:
            proxy = self._proxied.pop(conn, None)
            if proxy is not None:
                self._proxy_closed(conn, proxy.authority, was_idle, now)
        if self._turned_away and conn.carried is None:  # a crash: no failure of its request to come
            self._turned_away.discard(conn)
        if self._ip_of:
            group = self._ip_of.pop(conn, None)
            if group is not None:
                group.open -= 1
                group.idle.pop(conn, None)
                group.handed.pop(conn, None)
                self._wake_ip(group, now)
                self._free_group(group, now)
        if self._by_ip and ((not slot.open and not slot.in_flight and slot.ip_parked is None
                             and slot.ip_woken is None) or slot.located_until < now):
            # Its next connection looks again: so a host busy for hours follows its DNS, and one
            # without connections keeps no answer -- unless it waits for a place on that address,
            # where a look-up would cost it its place in line, or a start of its is under way.  A
            # start whose evict closes here connects and counts where its Assignment says, not
            # where the slot is left.  Never at a decision: an answer that expires at once
            # (dns_cache_ttl=0) would be looked up for ever.
            slot.addresses = slot.ip = None
        if not slot.open:
            self._free_if_unused(slot, now)

    def _proxy_closed(self, conn: Connection, key: str, was_idle: bool, now: float) -> None:
        left = self.proxy_open[key] - 1
        if left:
            self.proxy_open[key] = left
        else:
            del self.proxy_open[key]
        if self.per_proxy is None:
            return
        if was_idle:
            self._forget_proxy_idle(conn, key)
        self._wake(key, now)

    def _forget_proxy_idle(self, conn: Connection, key: str) -> None:
        idle = self._proxy_idle[key]
        del idle[conn]
        if not idle:
            del self._proxy_idle[key]

    def _take_idle(self, slot: HostSlot, route: Proxy | None) -> Connection | None:
        """The slot's most recently used idle connection of ``route``, out of the idle pool; None if none."""
        idle = slot.idle
        if not idle:
            return None
        proxied = self._proxied
        if not proxied:  # no proxy anywhere: every idle connection is direct
            if route is not None:
                return None
            conn = idle.pop()
        else:
            for index in range(len(idle) - 1, -1, -1):
                if proxied.get(idle[index]) == route:
                    conn = idle.pop(index)
                    break
            else:
                return None
            if route is not None and self.per_proxy is not None:
                self._forget_proxy_idle(conn, route.authority)
        del self._idle_lru[conn]
        return conn

    def exchange_ended(self, slot: HostSlot, served: bool, now: float) -> None:
        """A request of ``slot``'s left its connection; ``served``: with a complete response."""
        slot.in_flight -= 1
        if served:
            slot.served += 1
        if not slot.open:
            self._free_if_unused(slot, now)

    def _free_if_unused(self, slot: HostSlot, now: float) -> None:
        """Move ``slot`` to ``recent`` if nothing of it is left but figures (see the module docstring)."""
        if slot.queue or slot.in_flight or slot.open or self.slots.get(slot.origin) is not slot:
            return
        if slot.next_start_at > now:
            if not slot.delay_timer_armed:
                slot.delay_timer_armed = True
                self._schedule_at(slot.next_start_at, self._delay_passed, slot)
            return
        origin = slot.origin
        del self.slots[origin]
        slot.addresses = slot.ip = None  # a name looked up again when it comes back
        recent = self.recent
        recent[origin] = slot
        if len(recent) > RECENT_HOSTS:
            origin, slot = recent.popitem(last=False)
            if slot.throttle_delay > self.throttle_floor:  # a server that asked to slow down, or is slow
                state = (slot.throttle_delay, slot.too_fast, slot.backoffs, slot.served - slot.served_at_backoff)
                _remember(self._throttled, origin, state, THROTTLED_HOSTS)

    # -- decisions ----------------------------------------------------------

    def next_assignment(self, now: float) -> Assignment | None:
        """The highest-priority request that can start now, and where; None when nothing can.

        The caller closes ``evict`` (if any), starts the task, then calls ``refresh(slot)``.
        """
        ready = self._ready
        by_ip = self._by_ip
        while ready:
            entry = ready[0]
            slot = entry[3]
            if entry is not slot.ready_entry or not slot.can_start(now):
                heapq.heappop(ready)
                if entry is slot.ready_entry:
                    slot.ready_entry = None
                    self.refresh(slot, now)  # re-arms the delay timer if that is what blocks it (passes a wake on)
                continue
            if slot.start_until != math.inf and time.monotonic() >= slot.start_until:
                # The gate by the real clock: ``now`` is the select()'s, stale after a pause (or
                # after the batches of one select()), and a gate must hold whatever ran since.
                heapq.heappop(ready)
                slot.ready_entry = None  # reopened by set_gate
                if slot.ip_woken is not None:
                    self._pass_wake(slot, now)
                continue
            if not slot.idle and self.total_open >= self.max_connections and not self._idle_lru:
                return None  # every connection is busy: wait for one to finish
            # Made before anything is taken: should it fail, the URL is still queued.
            queued = slot.queue[0]
            task = queued[2] if len(queued) == 3 else self._make_task(queued, slot.origin)
            route = task.proxy
            group: IPGroup | None = None
            if by_ip and route is None:
                if slot.ip is None:
                    self._locate_slot(slot, queued, task, now)
                    continue
                group = self._ip_group(slot.ip)
                if group.next_start_at > now:
                    if slot.idle:
                        # Its own connection is there: it waits for the address's delay, by its
                        # own timer, not for a place in the line, whose wakes come as places free
                        # (none may: it would wait for its idle connection to close).
                        if len(queued) != 3:
                            slot.queue[0] = (queued[0], queued[1], task)
                        self.pause(slot, group.next_start_at, now)
                    else:
                        self._park_ip(slot, group, queued, task, now)
                    continue
            idle = slot.idle
            conn: Connection | None
            if group is not None and idle and self._turn_bound(slot, group, task):
                # Others wait for a place on its full address: a connection whose turn is over is
                # handed over, and with none left the slot waits behind them (ip_groups.py, "Turns").
                conn = self._take_own(slot, group, now)
                if conn is None:
                    self._park_ip(slot, group, queued, task, now, turn_over=True)
                    if group.parked > 1:  # one that can take the place now, not only this slot
                        self._wake_ip(group, now)
                    continue
            elif idle and route is None and not self._proxied and not task.needs_fresh_connection:
                conn = idle.pop()  # no proxy anywhere, as in nearly every crawl: _take_idle's first case, inline
                del self._idle_lru[conn]
            else:
                conn = None if task.needs_fresh_connection else self._take_idle(slot, route)
            evict: Connection | None = None
            evict_for_proxy: Connection | None = None
            if conn is None:
                host_evict = bool(slot.idle) and (task.needs_fresh_connection or slot.open >= slot.limit)
                if host_evict:
                    # A replay after a stale connection: its idle siblings are suspect too.  Or
                    # the host is at its limit with idle connections of another route only.
                    evict = slot.idle[0]
                elif self.total_open >= self.max_connections:
                    evict = next(iter(self._idle_lru))
                if route is not None and self.per_proxy is not None:
                    key = route.authority
                    frees_one = evict is not None and self._proxied.get(evict) == route
                    if self.proxy_open.get(key, 0) >= self.per_proxy and not frees_one:
                        spare = self._proxy_idle.get(key)
                        if not spare:
                            if slot.ip_woken is not None:
                                self._pass_wake(slot, now)  # it waits on the proxy, not the address
                            self._park(slot, key, queued, task)
                            continue
                        if host_evict:
                            evict_for_proxy = next(iter(spare))
                        else:
                            evict = next(iter(spare))  # frees a place of the proxy's, and one of the total
                if group is not None and self.per_ip is not None and group.open >= self.per_ip and (
                        evict is None or self._ip_of.get(evict) is not group):
                    spare_conn = self._spare(group)
                    if spare_conn is None:
                        self._park_ip(slot, group, queued, task, now)
                        continue
                    if host_evict:
                        evict_for_proxy = spare_conn
                    else:
                        evict = spare_conn  # frees a place of the address's, and one of the total
            heapq.heappop(ready)
            slot.ready_entry = None
            if self.per_proxy is not None and (slot.parked is not None or slot.woken is not None):
                self._waited(slot, route, now)
            heapq.heappop(slot.queue)
            if by_ip:
                self._ip_started(slot, group, conn is None, now)
            self.pending -= 1
            slot.in_flight += 1
            wait = now - task.registered_at
            slot.dispatched += 1
            slot.wait_sum += wait
            slot.wait_max = max(slot.wait_max, wait)
            slot.start_gap = now - slot.last_start_at
            # With nothing left waiting, the gap to the next start is the host's idling, not a
            # spacing the fetcher chose: a backoff must not take an hour's idling as too short.
            slot.last_start_at = now if slot.queue else math.inf
            if slot.delay or slot.throttle_delay:
                slot.next_start_at = now + slot.next_delay()
            return Assignment(slot, task, conn, evict, evict_for_proxy, group,
                              slot.addresses if group is not None and conn is None else None)
        return None

    def _park(self, slot: HostSlot, key: str, queued: QueueEntry, task: Task) -> None:
        """``slot``'s next task needs proxy ``key``, which has no place: out of the ready heap, into its waiters."""
        heapq.heappop(self._ready)
        slot.ready_entry = None
        if len(queued) != 3:
            # Its Task is made (and counted live by the engine): keep that one, under the same key.
            slot.queue[0] = (queued[0], queued[1], task)
        slot.woken = None  # a wake it had found the place taken
        if slot.parked != key:
            slot.parked = key
            self._proxy_waiters.setdefault(key, deque()).append(slot)

    def _waited(self, slot: HostSlot, route: Proxy | None, now: float) -> None:
        """``slot`` starts a task after it was parked or woken: a wake it does not use goes on."""
        woken = slot.woken
        slot.parked = slot.woken = None
        if woken is not None and (route is None or route.authority != woken):
            self._wake(woken, now)

    def _wake(self, key: str, now: float) -> None:
        """Proxy ``key`` has a place (one closed, or went idle): the first waiter that can start goes back."""
        waiters = self._proxy_waiters.get(key)
        if waiters is None:
            return
        while waiters:
            slot = waiters.popleft()
            if slot.parked != key:
                continue  # it started, or parked again elsewhere, since
            slot.parked = None
            if slot.can_start(now):
                slot.woken = key
                self.refresh(slot, now)
                break
        if not waiters:
            del self._proxy_waiters[key]

    def refresh(self, slot: HostSlot, now: float) -> None:
        """Put ``slot`` in the ready heap under its current best request if it can take one now."""
        if not slot.can_start(now):
            slot.ready_entry = None
            if slot.ip_woken is not None:
                self._pass_wake(slot, now)  # woken, then delayed or gated: the place goes to the next
            # A full slot comes back through connection_idle / connection_closed; a delayed one by timer.
            if slot.queue and slot.next_start_at > now and not slot.delay_timer_armed:
                slot.delay_timer_armed = True
                self._schedule_at(slot.next_start_at, self._delay_passed, slot)
            return
        best = slot.queue[0]
        neg_priority, seq = best[0], best[1]
        entry = slot.ready_entry
        if entry is not None and entry[0] == neg_priority and entry[1] == seq:
            return
        entry = (neg_priority, seq, next(self._push_ids), slot)
        slot.ready_entry = entry
        heapq.heappush(self._ready, entry)

    def _delay_passed(self, slot: HostSlot) -> None:
        slot.delay_timer_armed = False
        now = self._clock()
        self.refresh(slot, now)
        self._free_if_unused(slot, now)

    # -- draining -----------------------------------------------------------

    def drain_pending(self) -> list[Task]:
        """Remove and return every waiting request (for cancellation at shutdown)."""
        make_task = self._make_task
        tasks = [
            entry[2] if len(entry) == 3 else make_task(entry, slot.origin)
            for slot in self.slots.values() for entry in slot.queue
        ]
        for slot in self.slots.values():
            slot.queue.clear()
            slot.ready_entry = None
            slot.parked = slot.woken = slot.ip_parked = slot.ip_woken = None
        self._ready.clear()
        self._proxy_waiters.clear()
        for group in self.ip_groups.values():
            group.waiters.clear()
            group.parked = group.woken = 0
        if self.per_ip is not None:
            for conn, group in self._ip_of.items():
                if conn in self._idle_lru and conn not in group.handed:
                    group.idle[conn] = None  # held for work that is gone
        self.pending = 0
        return tasks

"""The host table's per-address part: ``max_connections_per_ip``, ``ip_delay`` and turns (pool.py).

Addresses.  ``max_connections_per_ip`` and ``ip_delay`` hold per resolved
address over every origin that resolves to it (shared hosting: thousands of
names on one server), in an IPGroup per address made the way a proxy's
waiters are: open connections, the earliest next start, the idle
connections a waiter may close for a place, and a line of parked slots.  A
slot learns its address before it needs a new connection: the table asks
``locate`` (the engine's resolver, an answer from its cache comes at once)
and the slot waits out of the ready heap until ``located``; a look-up that
fails, or gives no answer within the connect timeout, fails the slot's first
request (``not_located``: dns_error, as its connection's own look-up would),
for a connection that does not know its address would be counted on none.
Its connections connect to those addresses, counted on the first one from
the moment they begin, and the slot forgets them when its last connection closes, or
when one closes after the answer expired (the record's TTL, as the resolver
kept it: ``dns_cache_ttl`` at most), so that its next connection follows a
changed DNS answer.  A slot whose address is full or whose
``ip_delay`` still runs parks on the address, out of the ready heap, so that
it blocks no host on another one -- but one with an idle connection of its
own needs no place, only the delay, and waits by its own timer; one waiter
is woken per place freed or per delay passed (one timer per address, not
per slot), a woken slot that starts and leaves room wakes the next, and one
woken that cannot start after all passes its wake on.  A request waiting here waits in its queue:
neither its connect timeout nor its request timeout has begun.  Through a
proxy the origin's address is the proxy's to know: proxied requests are
counted by ``max_connections_per_proxy`` only.

Falling back.  A connection whose first address fails tries its name's next
ones (channel.py), each asked of ``may_connect`` first: an address with a
place now takes its count from the one it leaves, so that it is counted where
it connects, and one without turns it away -- its request starts again (a
replay, once) on that address, parked in its line like any other.  Either way
its slot puts that address first for its next connections, until it looks
its name up again.

Turns.  A full address is shared by turns, not by churn.  Closing another
host's idle connection to open one's own costs a connect (and a TLS handshake)
on both sides, so a waiter may close an idle connection of its address at once
only when that connection's host has nothing queued: it is idle for want of
work (``IPGroup.idle``; looked at again when taken, as its host may have work
by then).  A connection whose host still has work is *held*: it is in no list
a waiter looks at, and its host takes it at its next start.  It keeps its
place until its turn is over: once it has been open TURN_TIME and has served
TURN_REQUESTS responses, and another slot waits for a place on its full
address (parked, or woken and not started yet: ``IPGroup.parked`` and
``woken``, counted exactly, so the question costs no scan), it is *handed
over* -- put in ``IPGroup.handed`` as it goes idle, or when its host next
looks for a connection -- and its host parks behind the slots already waiting,
to get a place again when its turn comes round.  The first waiter closes it
and opens its own, which serves a turn of its own.  The turn counts from the
connection's opening, so one that served long before anyone waited hands over
at its next idle moment.  Nothing here needs a timer: a turn ends when its
connection goes idle or its host looks for one, the two moments a place can
change hands.  A held connection whose host's queue runs empty (by a start on
another of its connections, or a cancel) is free again.  A woken waiter that
finds its place gone (taken by another, or seen only between a close and an
open) keeps the place it had in line (a ticket: the line is a heap), not the
tail: the order of turns is kept.  A slot that waits keeps its address when
its last connection closes, so that no look-up costs it its place.

So with connection_service_time=None a waiting host is still served within
about (slots waiting / per-IP limit) turns, and connections open about once a
turn, not once a request.  A turn is the longer of a time and a count:
TURN_TIME (1 s) bounds what a fast server's turn costs the others in waiting,
TURN_REQUESTS (4) keeps a slow server's turn from paying for its connect and
handshake with a single page; both sit far below the service time (60 s by
default), which still ends a turn early.  Measured with
benchmarks/throughput.py (20 busy hosts on one address, 2 connections a host,
0 ms latency, a limit of 8): 20,000 pages opened 19,800 connections at 0.13
to 0.17 client CPU ms a page by first come first served, 24 to 47 at 0.08 to
0.10 by turns, which is what 8 unlimited connections cost; at 20 ms latency 118 connections
in 13 s, 95% of the 8 places' ideal.  With both options off, the cost is two
tests per decision.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .config import Address, Sockaddr
from .hosts import HostSlot, IPGroup
from .request import MakeTask, QueueEntry, Task

if TYPE_CHECKING:
    from .hosts import Connection
    from .urls import Proxy

ScheduleAt = Callable[[float, Callable[[Any], None], Any], Any]
Clock = Callable[[], float]
Locate = Callable[[HostSlot], None]

# A turn on a full address (module docstring, "Turns"): a connection of a host with work keeps its
# place while others wait until it has been open this long and has served this many responses.
TURN_TIME = 1.0
TURN_REQUESTS = 4


class AddressLines:
    """The per-address methods of pool.HostTable, which holds the state they share with it."""

    _ready: list[tuple[int, int, int, HostSlot]]
    _make_task: MakeTask
    pending: int
    _idle_lru: OrderedDict[Connection, None]
    _proxied: dict[Connection, Proxy]
    _schedule_at: ScheduleAt
    _clock: Clock
    _locate: Locate | None
    per_ip: int | None
    ip_delay: float
    ip_groups: dict[str, IPGroup]
    _ip_of: dict[Connection, IPGroup]
    _turned_away: set[Connection]

    def refresh(self, slot: HostSlot, now: float) -> None:
        """Put ``slot`` in the ready heap if it can take a request now (the table's)."""
        raise NotImplementedError

    def _free_if_unused(self, slot: HostSlot, now: float) -> None:
        """Move ``slot`` out of the table if nothing of it is left (the table's)."""
        raise NotImplementedError

    # -- addresses (module docstring, "Addresses") ------------------------------

    def _locate_slot(self, slot: HostSlot, queued: QueueEntry, task: Task, now: float) -> None:
        """``slot`` needs its address first: out of the ready heap until ``located`` (maybe at once)."""
        heapq.heappop(self._ready)
        slot.ready_entry = None
        if len(queued) != 3:
            slot.queue[0] = (queued[0], queued[1], task)  # the Task made is the one that starts
        if slot.ip_woken is not None:
            self._pass_wake(slot, now)  # its address may have changed: the place goes to the next
        if not slot.locating:
            slot.locating = True
            self._locate(slot)  # type: ignore[misc]

    def located(self, slot: HostSlot, addresses: Sequence[Address], now: float, until: float) -> None:
        """``slot``'s origin resolves to ``addresses`` (not empty), an answer that holds until ``until``
        (the record's TTL, as the resolver kept it)."""
        if not slot.locating:
            return  # an answer after it gave up waiting, or after a cancel
        slot.locating = False
        slot.addresses = addresses
        slot.ip = addresses[0][1][0]
        slot.located_until = until
        self.refresh(slot, now)

    def not_located(self, slot: HostSlot, now: float) -> Task | None:
        """``slot``'s origin could not be looked up (a failure, or no answer within the connect
        timeout): its first request is taken off its queue, for the caller to fail, and returned.

        A connection that does not know its address is counted on none, so it would break the very
        limits the look-up was for; the request fails instead, as it would by its own connection's
        look-up without per-IP limits, and the next one looks up again (joining the look-up still
        under way, if any).  None when no look-up is awaited (a late answer) or nothing is queued.
        """
        if not slot.locating:
            return None
        slot.locating = False
        task = None
        if slot.queue:
            entry = heapq.heappop(slot.queue)
            self.pending -= 1
            task = entry[2] if len(entry) == 3 else self._make_task(entry, slot.origin)
        self.refresh(slot, now)
        self._free_if_unused(slot, now)
        return task

    def may_connect(self, conn: Connection, sockaddr: Sockaddr) -> bool:
        """Whether ``conn``, counted on an address, may try ``sockaddr`` (module docstring, "Falling
        back"): on its own address, yes; on another, only with a place there now, and its count moves."""
        group = self._ip_of.get(conn)
        ip = sockaddr[0]
        if group is None or group.ip == ip:
            return True
        now = self._clock()
        slot = conn.slot
        if slot.addresses is not None and slot.ip == group.ip:  # its next connections go there first
            slot.addresses = sorted(slot.addresses, key=lambda address: address[1][0] != ip)
            slot.ip = ip
        per_ip = self.per_ip
        other = self.ip_groups.get(ip)
        if other is not None and (other.next_start_at > now or (per_ip is not None and other.open >= per_ip)):
            self._turned_away.add(conn)
            return False
        self._turned_away.discard(conn)
        other = self._ip_group(ip)
        group.open -= 1
        other.open += 1
        self._ip_of[conn] = other
        if self.ip_delay:
            other.next_start_at = now + self.ip_delay
        self._wake_ip(group, now)
        self._free_group(group, now)
        return True

    def turned_away(self, conn: Connection) -> bool:
        """``conn``, closed now, failed to connect because an address it fell back to had no place
        (``may_connect``): its request may start again, on that address in its turn."""
        if conn in self._turned_away:
            self._turned_away.remove(conn)
            return True
        return False

    def _ip_group(self, ip: str) -> IPGroup:
        group = self.ip_groups.get(ip)
        if group is None:
            group = self.ip_groups[ip] = IPGroup(ip)
        return group

    def _spare(self, group: IPGroup) -> Connection | None:
        """An idle connection of the address a waiter may close for a place; None if none.

        First the oldest of a host with nothing queued -- one whose host has work again by now is
        held (its host takes it, or it comes back here when that work is gone: ``_out_of_work``) --
        then the oldest handed over.
        """
        idle, pool = group.idle, self._idle_lru
        while idle:
            conn = next(iter(idle))
            if conn in pool and not conn.slot.queue:
                return conn
            del idle[conn]  # taken for a request since it went idle, or held now
        handed = group.handed
        while handed:
            conn = next(iter(handed))
            if conn in pool:
                return conn
            del handed[conn]  # its host took it back: nobody else waited any more
        return None

    # -- turns (module docstring, "Turns") ------------------------------------

    @staticmethod
    def _others_wait(slot: HostSlot, group: IPGroup) -> bool:
        """Some slot other than ``slot`` waits for a place on ``group``: parked, or woken and not started."""
        return group.parked + group.woken > (slot.ip_parked is group) + (slot.ip_woken is group)

    def _turn_bound(self, slot: HostSlot, group: IPGroup, task: Task) -> bool:
        """``slot``'s idle connections on ``group`` are reused by turns: the address is full and others wait."""
        per_ip = self.per_ip
        return (per_ip is not None and group.open >= per_ip and not task.needs_fresh_connection
                and self._others_wait(slot, group))

    def _turn_over(self, conn: Connection, slot: HostSlot, group: IPGroup, now: float) -> bool:
        """Idle ``conn`` of ``slot``'s, on ``group``, has had its turn while others wait for a place."""
        per_ip = self.per_ip
        return (conn.requests_done >= TURN_REQUESTS and now - conn.established_at >= TURN_TIME
                and per_ip is not None and group.open >= per_ip and self._others_wait(slot, group))

    def _take_own(self, slot: HostSlot, group: IPGroup, now: float) -> Connection | None:
        """``slot``'s most recently used direct idle connection whose turn is not over, out of the idle
        pool; those whose turn is over are handed over on the way.  None if none is left."""
        idle, proxied = slot.idle, self._proxied
        for index in range(len(idle) - 1, -1, -1):  # a host's few connections, not a scan of many
            conn = idle[index]
            if proxied and conn in proxied:
                continue
            if (conn.requests_done >= TURN_REQUESTS and now - conn.established_at >= TURN_TIME
                    and self._ip_of.get(conn) is group):
                if conn not in group.handed:
                    group.idle.pop(conn, None)
                    group.handed[conn] = None
                continue
            del idle[index]
            del self._idle_lru[conn]
            return conn
        return None

    def _out_of_work(self, slot: HostSlot, now: float) -> None:
        """``slot`` has nothing queued: its held idle connections are free for whoever waits."""
        ip_of = self._ip_of
        for conn in slot.idle:
            group = ip_of.get(conn)
            if group is not None and conn not in group.idle and conn not in group.handed:
                group.idle[conn] = None
                self._wake_ip(group, now)

    # -- waiting on an address ---------------------------------------------------

    def _park_ip(
        self, slot: HostSlot, group: IPGroup, queued: QueueEntry, task: Task, now: float, turn_over: bool = False,
    ) -> None:
        """``slot``'s next request waits for ``group``: out of the ready heap, into its waiters.

        Last in line, unless it was woken from this line and found the place gone (taken by another,
        or only seen for a moment between a close and an open): then where it was, with its ticket.
        Never after its own turn (``turn_over``).
        """
        heapq.heappop(self._ready)
        slot.ready_entry = None
        if len(queued) != 3:
            slot.queue[0] = (queued[0], queued[1], task)
        woken = slot.ip_woken
        if woken is not None:
            woken.woken -= 1
            slot.ip_woken = None
        parked = slot.ip_parked
        if parked is not group:
            if parked is not None:
                parked.parked -= 1  # its address changed: it waits on the new one
            slot.ip_parked = group
            group.parked += 1
            if woken is not group or turn_over:
                group.tickets += 1
                slot.ip_ticket = group.tickets
            heapq.heappush(group.waiters, (slot.ip_ticket, id(slot), slot))
        if group.next_start_at > now:
            self._arm_ip_timer(group)

    def _stop_waiting(self, slot: HostSlot) -> None:
        """``slot`` neither waits nor was woken any more (its entry in a line is skipped when it surfaces)."""
        parked = slot.ip_parked
        if parked is not None:
            parked.parked -= 1
            slot.ip_parked = None
        woken = slot.ip_woken
        if woken is not None:
            woken.woken -= 1
            slot.ip_woken = None

    def _pass_wake(self, slot: HostSlot, now: float) -> None:
        """``slot`` was woken for a place it cannot take now: the next waiter gets it."""
        group = slot.ip_woken
        assert group is not None
        group.woken -= 1
        slot.ip_woken = None
        self._wake_ip(group, now)

    def _ip_started(self, slot: HostSlot, group: IPGroup | None, new_connection: bool, now: float) -> None:
        """A request of ``slot``'s starts, on ``group``'s address (None: uncounted, or through a proxy);
        room left is passed to the next waiter."""
        if slot.ip_parked is not None or slot.ip_woken is not None:
            self._stop_waiting(slot)
        if self.per_ip is not None and not slot.queue and slot.idle:
            self._out_of_work(slot, now)
        if group is None:
            return
        if self.ip_delay:
            group.next_start_at = now + self.ip_delay
        if group.waiters:
            if new_connection:
                # Counted by connection_opened right after this decision: the room seen
                # here must not include the place this start takes.
                group.open += 1
                self._wake_ip(group, now)
                group.open -= 1
            else:
                self._wake_ip(group, now)

    def _has_room(self, group: IPGroup, now: float) -> bool:
        if group.next_start_at > now:
            return False
        per_ip = self.per_ip
        return per_ip is None or group.open < per_ip or self._spare(group) is not None

    def _wake_ip(self, group: IPGroup, now: float) -> None:
        """``group`` may have room: its first waiter that can start goes back to the ready heap."""
        waiters = group.waiters
        if not waiters:
            return
        if group.next_start_at > now:
            self._arm_ip_timer(group)
            return
        if not self._has_room(group, now):
            return
        while waiters:
            ticket, _, slot = heapq.heappop(waiters)
            if slot.ip_parked is not group or slot.ip_ticket != ticket:
                continue  # it started, was cancelled or parked elsewhere since
            slot.ip_parked = None
            group.parked -= 1
            if slot.can_start(now):
                woken = slot.ip_woken
                if woken is not None:
                    woken.woken -= 1
                slot.ip_woken = group
                group.woken += 1
                self.refresh(slot, now)
                break

    def _arm_ip_timer(self, group: IPGroup) -> None:
        if not group.timer_armed:
            group.timer_armed = True
            self._schedule_at(group.next_start_at, self._ip_delay_passed, group)

    def _ip_delay_passed(self, group: IPGroup) -> None:
        group.timer_armed = False
        now = self._clock()
        self._wake_ip(group, now)
        self._free_group(group, now)

    def _free_group(self, group: IPGroup, now: float) -> None:
        """Forget ``group`` once nothing of it is left; while its delay runs, its timer keeps it."""
        if group.open or group.timer_armed or self.ip_groups.get(group.ip) is not group:
            return
        waiters = group.waiters
        while waiters and (waiters[0][2].ip_parked is not group or waiters[0][2].ip_ticket != waiters[0][0]):
            heapq.heappop(waiters)
        if waiters:
            return
        if group.next_start_at > now:
            self._arm_ip_timer(group)
            return
        del self.ip_groups[group.ip]

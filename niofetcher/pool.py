"""The connection table and the scheduler: pure bookkeeping, no I/O.

Theory of operation.  Every (scheme, host, port) has a HostSlot holding its
waiting requests (a heap on (-priority, seq), so FIFO among equals: Tasks, and
URLs registered as a str as a ``request.PendingURL`` until they start), its idle
connections and its counts.  A slot is *ready* when it has a request waiting,
its politeness delay has passed and it either has an idle connection or is
below its connection limit.  Ready slots sit in one heap keyed by their best
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
"""

from __future__ import annotations

import heapq
import itertools
import random
import ssl
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from .request import MakeTask, PendingURL, QueueEntry, Task
from .urls import Origin

if TYPE_CHECKING:
    from .connection import Connection  # which names HostSlot only in annotations too

ScheduleAt = Callable[[float, Callable[[Any], None], Any], Any]
Clock = Callable[[], float]

RECENT_HOSTS = 1024  # freed slots kept for host_stats() and for a quick return
SET_DELAYS = 65536  # hosts whose set_delay() is remembered without a slot


@dataclass(slots=True, eq=False)
class HostSlot:
    """One (scheme, host, port): its queue, its connections and its politeness state."""

    origin: Origin
    limit: int
    delay: float
    jitter: float
    queue: list[QueueEntry] = field(default_factory=list, repr=False)  # a heap on (-priority, seq)
    idle: list[Connection] = field(default_factory=list, repr=False)  # most recently used last
    open: int = 0  # resolving, connecting, busy and idle connections
    in_flight: int = 0
    next_start_at: float = 0.0
    ready_entry: tuple[int, int, int, HostSlot] | None = field(default=None, repr=False)
    delay_timer_armed: bool = field(default=False, repr=False)
    tls_session: ssl.SSLSession | None = field(default=None, repr=False)  # resumed by the next connection
    peak_open: int = 0
    served: int = 0
    dispatched: int = 0
    wait_sum: float = 0.0
    wait_max: float = 0.0

    def next_delay(self) -> float:
        """The gap before this host's next request start, randomised by ± jitter."""
        if self.jitter:
            return self.delay * (1.0 + random.uniform(-self.jitter, self.jitter))
        return self.delay


def _tasks_only(entry: PendingURL, origin: Origin) -> Task:
    raise TypeError(f"a PendingURL for {origin} was queued on a HostTable built without make_task")


class Assignment(NamedTuple):
    """A decision of the scheduler: run ``task``, on ``conn`` or on a new connection, after closing ``evict``."""

    slot: HostSlot
    task: Task
    conn: Connection | None
    evict: Connection | None


class HostTable:
    """All host slots, the ready heap and the global connection count."""

    def __init__(
        self, max_connections: int, per_host: int, delay: float, jitter: float, schedule_at: ScheduleAt, clock: Clock,
        make_task: MakeTask | None = None,
    ) -> None:
        """``make_task`` is needed only by a table that queues PendingURLs (``enqueue_entry``)."""
        if make_task is None:
            make_task = _tasks_only
        self.max_connections = max_connections
        self.per_host = per_host
        self.default_delay = delay
        self.jitter = jitter
        self.slots: dict[Origin, HostSlot] = {}
        self.recent: OrderedDict[Origin, HostSlot] = OrderedDict()  # freed slots, oldest first
        self._set_delays: OrderedDict[Origin, float] = OrderedDict()  # least recently used first
        self.total_open = 0
        self.pending = 0
        self._ready: list[tuple[int, int, int, HostSlot]] = []
        self._push_ids = itertools.count()
        self._idle_lru: OrderedDict[Connection, None] = OrderedDict()
        self._schedule_at = schedule_at
        self._clock = clock
        self._make_task = make_task

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
                slot = HostSlot(origin, self.per_host, delay, self.jitter)
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
            delays[origin] = delay
            delays.move_to_end(origin)
            if len(delays) > SET_DELAYS:
                delays.popitem(last=False)
        # No slot is made for it: one made here, with nothing to do, would never be freed.
        slot = self.slots.get(origin) or self.recent.get(origin)
        if slot is not None:
            slot.delay = delay
            self.refresh(slot, now)

    def connection_opened(self, slot: HostSlot) -> None:
        """A connection of ``slot``'s began (it counts from its name lookup on)."""
        slot.open += 1
        self.total_open += 1
        slot.peak_open = max(slot.peak_open, slot.open)

    def connection_idle(self, conn: Connection, now: float) -> None:
        """``conn`` waits for its next request."""
        slot = conn.slot
        slot.idle.append(conn)
        self._idle_lru[conn] = None
        self.refresh(slot, now)

    def connection_closed(self, conn: Connection, was_idle: bool, now: float) -> None:
        """``conn`` is gone; ``was_idle``: from the idle pool."""
        slot = conn.slot
        if was_idle:
            slot.idle.remove(conn)
            del self._idle_lru[conn]
        slot.open -= 1
        self.total_open -= 1
        self.refresh(slot, now)
        if not slot.open:
            self._free_if_unused(slot, now)

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
        recent = self.recent
        recent[origin] = slot
        if len(recent) > RECENT_HOSTS:
            recent.popitem(last=False)

    # -- decisions ----------------------------------------------------------

    def next_assignment(self, now: float) -> Assignment | None:
        """The highest-priority request that can start now, and where; None when nothing can.

        The caller closes ``evict`` (if any), starts the task, then calls ``refresh(slot)``.
        """
        ready = self._ready
        while ready:
            entry = ready[0]
            slot = entry[3]
            if entry is not slot.ready_entry or not self._can_start(slot, now):
                heapq.heappop(ready)
                if entry is slot.ready_entry:
                    slot.ready_entry = None
                    self.refresh(slot, now)  # re-arms the delay timer if that is what blocks it
                continue
            if not slot.idle and self.total_open >= self.max_connections and not self._idle_lru:
                return None  # every connection is busy: wait for one to finish
            # Made before anything is taken: should it fail, the URL is still queued.
            queued = slot.queue[0]
            task = queued[2] if len(queued) == 3 else self._make_task(queued, slot.origin)
            conn: Connection | None = None
            evict: Connection | None = None
            if slot.idle and not task.needs_fresh_connection:
                conn = slot.idle.pop()
                del self._idle_lru[conn]
            elif slot.idle:
                evict = slot.idle[0]  # a replay after a stale connection: its idle siblings are suspect too
            elif self.total_open >= self.max_connections:
                evict = next(iter(self._idle_lru))
            heapq.heappop(ready)
            slot.ready_entry = None
            heapq.heappop(slot.queue)
            self.pending -= 1
            slot.in_flight += 1
            wait = now - task.registered_at
            slot.dispatched += 1
            slot.wait_sum += wait
            slot.wait_max = max(slot.wait_max, wait)
            if slot.delay:
                slot.next_start_at = now + slot.next_delay()
            return Assignment(slot, task, conn, evict)
        return None

    @staticmethod
    def _can_start(slot: HostSlot, now: float) -> bool:
        return bool(slot.queue) and (bool(slot.idle) or slot.open < slot.limit) and slot.next_start_at <= now

    def refresh(self, slot: HostSlot, now: float) -> None:
        """Put ``slot`` in the ready heap under its current best request if it can take one now."""
        if not self._can_start(slot, now):
            slot.ready_entry = None
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
        self._ready.clear()
        self.pending = 0
        return tasks

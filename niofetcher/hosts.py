"""A host of the connection table and a resolved address: their state, no I/O (pool.py, ip_groups.py)."""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .config import Address
from .models import HostStats
from .request import QueueEntry
from .transport import TLSSessions
from .urls import Origin

if TYPE_CHECKING:
    from .connection import Connection as AnyConnection

    Connection = AnyConnection["HostSlot"]  # a connection whose host is a slot of the table


@dataclass(slots=True, eq=False)
class HostSlot:
    """One (scheme, host, port): its queue, its connections and its politeness state."""

    origin: Origin
    limit: int
    delay: float
    jitter: float
    queue: list[QueueEntry] = field(default_factory=list, repr=False)  # a heap on (-priority, seq)
    # Its connections with capacity for a request, as their drivers say (HTTP/1.1: the idle ones),
    # most recently used last.
    idle: list[Connection] = field(default_factory=list, repr=False)
    open: int = 0  # resolving, connecting, busy and idle connections
    in_flight: int = 0
    next_start_at: float = 0.0
    start_until: float = math.inf  # its gate: no request starts at or after it (pool.py, "Start gates")
    ready_entry: tuple[int, int, int, HostSlot] | None = field(default=None, repr=False)
    delay_timer_armed: bool = field(default=False, repr=False)
    throttle_delay: float = 0.0  # the Throttle's delay (throttle.py): the larger of it and ``delay`` holds
    too_fast: float = 0.0  # the Throttle's: the delay its last backoff found too short
    backoff_at: float = -math.inf  # when its last backoff began: an answer to a request sent before is of it
    backoffs: int = 0  # backoffs, each begun by an answer that asked it to slow down (429, 503)
    served_at_backoff: int = 0  # ``served`` when its last backoff began
    # When its last request started, if others of its waited then (else inf), and the gap before
    # that start (-inf: none the fetcher chose), the spacing a backoff takes as too short.
    last_start_at: float = math.inf
    start_gap: float = -math.inf
    tls_sessions: TLSSessions = field(default_factory=TLSSessions, repr=False)  # for its next TLS connection
    parked: str | None = field(default=None, repr=False)  # the proxy it waits on for a place (pool.py, "Proxies")
    woken: str | None = field(default=None, repr=False)  # the proxy whose free place it was woken for
    # With per-IP limits only (ip_groups.py, "Addresses"): its addresses, the first one's
    # key, and the state of its waits.
    addresses: Sequence[Address] | None = field(default=None, repr=False)
    ip: str | None = None
    located_until: float = field(default=0.0, repr=False)  # its addresses are looked up again after it
    locating: bool = field(default=False, repr=False)
    ip_parked: IPGroup | None = field(default=None, repr=False)  # in its line of waiters
    ip_ticket: int = field(default=0, repr=False)  # its place in that line
    ip_woken: IPGroup | None = field(default=None, repr=False)  # woken from it, not started yet
    peak_open: int = 0
    served: int = 0
    dispatched: int = 0
    wait_sum: float = 0.0
    wait_max: float = 0.0

    def next_delay(self) -> float:
        """The gap before this host's next request start, randomised by ± jitter."""
        delay = max(self.delay, self.throttle_delay)
        if self.jitter:
            return delay * (1.0 + random.uniform(-self.jitter, self.jitter))
        return delay

    def stats(self) -> HostStats:
        """Its figures, as ``NIOFetcher.host_stats()`` gives them."""
        return HostStats(
            pending=len(self.queue),
            in_flight=self.in_flight,
            open_connections=self.open,
            peak_connections=self.peak_open,
            requests_served=self.served,
            mean_queue_wait=self.wait_sum / self.dispatched if self.dispatched else 0.0,
            max_queue_wait=self.wait_max,
            delay=max(self.delay, self.throttle_delay),
            backoffs=self.backoffs,
        )

    def can_start(self, now: float) -> bool:
        """A request of its waits, and may start now: a connection to take or to open, its delay passed, its gate open."""
        return (bool(self.queue) and (bool(self.idle) or self.open < self.limit)
                and self.next_start_at <= now < self.start_until)


@dataclass(slots=True, eq=False)
class IPGroup:
    """One resolved address, with per-IP limits on: its connections, its next start and its waiters."""

    ip: str
    open: int = 0
    next_start_at: float = 0.0
    # Idle connections a waiter may close, oldest first, deleted lazily (a connection taken for a
    # request stays until it surfaces): those of hosts with nothing queued, and those handed over
    # at the end of their turn (ip_groups.py, "Turns").  Held ones are in neither.
    idle: OrderedDict[Connection, None] = field(default_factory=OrderedDict, repr=False)
    handed: OrderedDict[Connection, None] = field(default_factory=OrderedDict, repr=False)
    # Its line: a heap on (ticket, slot's id), deleted lazily -- an entry is live while its slot's
    # ``ip_parked`` is this group and its ``ip_ticket`` the entry's (ip_groups.py, "Turns").
    waiters: list[tuple[int, int, HostSlot]] = field(default_factory=list, repr=False)
    tickets: int = 0  # the last ticket given
    parked: int = 0  # slots whose ``ip_parked`` is this group: the live entries of ``waiters``
    woken: int = 0  # slots whose ``ip_woken`` is this group
    timer_armed: bool = False

"""The loop thread's side of the fetcher: requests, connections, redirects, results.

Everything here runs in the one loop thread, except the engine's face to
``NIOFetcher``: ``submit`` (appends to the inbox, a deque), ``pending``,
``wake``, ``post`` (runs a callback on the loop thread: ``finish_up``,
``stop``, ``cancel_pending``, ``set_host_delay`` and ``set_host_gates`` are posted), ``stats``
and ``host_stats`` (snapshots taken without stopping the loop) and
``failure``.

One loop iteration: wait for readiness; handle every ready socket and due
timer; take new registrations; let the scheduler start whatever can start;
hand the finished results to the fetcher in one batch.  Running the
scheduler once per batch of events, not once per event, is both cheaper and
the reason the service-time check is exact: timers due now have already
closed the connections that have served their time.
"""

from __future__ import annotations

import collections
import enum
import functools
import itertools
import logging
import math
import ssl
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .channel import lookup_too_slow
from .config import Address, FetcherConfig
from .connection import Connection
from .cookies import new_jar, store_cookies
from .errors import ErrorKind, FetchFailure
from .hosts import HostSlot
from .http11 import Response, header_value
from .loop import Loop
from .models import REDIRECT_STATUSES, Counters, FetchResult, HostStats, URLBean
from .pool import HostTable
from .request import (
    DONE,
    IDEMPOTENT_METHODS,
    ROUTING,
    RUNNING,
    WAITING,
    PendingURL,
    RequestDefaults,
    Task,
)
from .resolver import ResolverPool
from .throttle import Throttle, retry_after
from .timers import Timer
from .transport import tls_context
from .urls import Origin, Target, parse_target, redirect_url, split_credentials

if TYPE_CHECKING:
    from .hosts import Connection as HostConnection  # a Connection whose host is a HostSlot

log = logging.getLogger("niofetcher")

_INF = math.inf


class Phase(enum.IntEnum):
    """How far the engine is in its life.  It only ever moves forward."""

    RUNNING = 0  # taking work and starting it
    DRAINING = 1  # shutdown(wait=True) began: the registered work starts even while max_completed results wait
    CANCELLING = 2  # ending: nothing new starts or replays, a connection closes after its response
    STOPPED = 3  # the loop has ended: every task delivered, every socket and thread closed


# Read per loop iteration and per response: a global costs a sixth of reading it through the class.
_CANCELLING = Phase.CANCELLING


Deliver = Callable[[list[FetchResult]], None]

#: A str URL on its way to the loop, as atoms only: (url, priority, scheme, host, port, host_header,
#: path, registered_at).  A tuple of atoms is one the collector stops walking, so a backlog of a
#: million registrations costs a collection nothing; a Target (a NamedTuple: never untracked)
#: in each would double the pause of every full collection while the backlog lasts (measured).
PendingRegistration = tuple[str, int, str, str, int, str, str, float]
#: A URLBean on its way: (bean, priority, target, registered_at).
BeanRegistration = tuple[URLBean, int, Target, float]
#: A registration on its way to the loop, see ``submit``.
InboxEntry = PendingRegistration | BeanRegistration

#: Registrations the loop moves from its inbox to the host queues per iteration (about a millisecond's work).
INBOX_SLICE = 1024


class Engine:
    """Owns the loop, the host table, the resolver pool and every connection.

    Faults.  The loop must survive its own bugs (docs/guarantees.md, "the loop survives its own bugs"), in two
    layers.  Everything the loop does for one connection -- its readiness
    events, its timer, its DNS answer, starting a request on it -- runs under a
    guard that turns an unexpected exception into ``connection_crashed``: that
    connection closes and the request it carried ends as ``protocol_error``,
    found through ``Connection.carried`` and settled by its ``Task.state``, so
    it is delivered once whether the fault came before, during or after its
    routing.  A fault anywhere else (the scheduler, the loop itself) ends the
    loop thread: ``failure`` keeps the exception, and ``_release`` cancels every
    task still in ``_live`` or the inbox -- a registry kept for exactly this, as
    the host table and the connections may be what broke.  A URL registered as a
    str has no Task while it waits (request.py, "Pending URLs and the garbage
    collector"): until it starts it is in the inbox or in its host queue's plain
    list, which ``cancel_pending`` sweeps; its Task joins ``_live`` the moment it
    is made, before the scheduler takes it off that list.
    """

    # Part of the face: make the loop look at its inbox, and at the room its consumer made
    # (max_completed).  It is the loop's own method, bound in __init__: register() calls it
    # once per URL (register_many() once per batch), and a wrapper would cost one Python call more each time.
    wake: Callable[[], None]

    def __init__(
        self, config: FetcherConfig, deliver: Deliver, completed_backlog: Callable[[], int],
        close_intake: Callable[[], None],
    ) -> None:
        self.config = config
        self.loop = Loop()
        self.wake = self.loop.wake
        self.table = HostTable(
            config.max_connections, config.max_connections_per_host, config.host_delay,
            config.host_delay_jitter, self.loop.timers.call_at, lambda: self.loop.now, self._pending_task,
            config.max_connections_per_proxy, config.max_connections_per_ip, config.ip_delay, self._locate,
            config.throttle.min_delay if config.throttle is not None else 0.0,
        )
        self.resolver = ResolverPool(config, self.loop.call_soon_threadsafe)
        self.connections: set[HostConnection] = set()
        self.counters = Counters()  # read by FetcherStats
        self.phase = Phase.RUNNING
        self.failure: BaseException | None = None  # what ended the loop thread, if not a shutdown
        self._inbox: collections.deque[InboxEntry] = collections.deque()
        self._seq = itertools.count()
        # FetcherConfig.cookies: the jar each hop's request asks and each hop's response fills.
        self.cookie_jar = new_jar() if config.cookies else None
        self._request_defaults = RequestDefaults.from_config(config, self.cookie_jar)
        self._deliver = deliver
        self._completed_backlog = completed_backlog
        self._close_intake = close_intake
        self._finished: list[FetchResult] = []
        self._live: set[Task] = set()  # made, taken from the inbox, no result made yet
        self._denied = config.denied_networks()
        self._tls_context: ssl.SSLContext | None = None
        self._locating: dict[HostSlot, Timer] = {}  # the give-up timers of the lookups for per-IP limits

    def __repr__(self) -> str:
        return (
            f"<Engine {self.phase.name} [in flight: {self.counters.in_flight} | pending: {self.pending()} "
            f"| connections: {len(self.connections)}]>"
        )

    # -- the face: any thread -------------------------------------------------

    def submit(self, entries: list[InboxEntry]) -> None:
        """Queue registrations for the loop; ``wake()`` makes it look.

        An entry is a ``PendingRegistration`` (a URL that is a ``str`` exactly, with a
        ``priority`` that is an ``int`` exactly) or a ``BeanRegistration`` (anything else comes
        in a URLBean, which carries its own priority).  The loop makes them Tasks or PendingURLs as it
        takes them, so that a caller pays for a batch of any size, under its lock, one
        ``extend``.  A caller that limits ``pending()`` must hold one lock over both calls.
        """
        self._inbox.extend(entries)

    def pending(self) -> int:
        """Registrations not dispatched yet: in the inbox or a host queue."""
        return len(self._inbox) + self.table.pending

    def post(self, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback(*args)`` on the loop thread, after what was posted before it."""
        self.loop.call_soon_threadsafe(callback, *args)

    def stats(self) -> dict[str, int]:
        """``pending``, ``open_connections`` and every counter, by their FetcherStats names."""
        return {"pending": self.pending(), "open_connections": self.table.total_open, **self.counters.snapshot()}

    def host_stats(self) -> dict[Origin, HostStats]:
        """Per (scheme, host, port): the live hosts, then the last ``pool.RECENT_HOSTS`` freed ones."""
        table = self.table
        # Live ones first: a slot freed between the two copies is then in both, not in neither.
        live = list(table.slots.values())
        slots = [*table.recent.values(), *live]
        return {slot.origin: slot.stats() for slot in slots}

    # -- the loop -----------------------------------------------------------

    def run(self) -> None:
        """The loop thread's body: loop until stopped or broken, then cancel and release everything."""
        loop = self.loop
        try:
            while self.phase < _CANCELLING:
                loop.run_once(0.0 if self._inbox else None)  # a slice of the inbox is left: no waiting
                if self._inbox:
                    self._take_inbox()
                self._dispatch()
                if self._finished:
                    self._deliver_finished()
        except BaseException as exc:  # kept as ``failure``; every URL is cancelled below
            self.failure = exc
            # Reported through NIOFetcher.failure (traceback included) and every cancelled result's
            # error_detail; a traceback printed here as well would be a second report of one failure.
            log.debug("niofetcher loop failed; cancelling everything it held", exc_info=exc)
        finally:
            self._release()

    def close_unstarted(self) -> None:
        """The loop never ran: cancel what was registered and free the loop's descriptors."""
        self._release()

    def _release(self) -> None:
        """Cancel everything unfinished, deliver it, and close every socket and thread.

        After a loop failure the host table or a connection may be inconsistent,
        so the orderly cancel is only tried: whatever it leaves, the registry of
        live tasks and the inbox still reach, and sockets are closed by force.
        """
        self._advance(Phase.CANCELLING)
        self._close_intake()  # before the inbox is swept: nothing may land there after it
        failure = self.failure
        detail = "fetcher shut down" if failure is None else f"niofetcher loop failed: {_describe(failure)}"
        cancelled = FetchFailure(ErrorKind.CANCELLED, detail)
        try:
            self._cancel_everything(cancelled)
        except Exception:  # the sweep below delivers what this could not
            log.exception("niofetcher: cancelling after a loop failure failed; closing by force")
            for conn in self.connections:
                if conn.channel.sock is not None:
                    conn.channel.sock.close()
        self._cancel_inbox(cancelled)
        self._cancel_queued_urls(cancelled)
        for task in list(self._live):
            self._finish_error(task, cancelled)
        self._deliver_finished()
        self.resolver.close()
        self.loop.close()
        self.phase = Phase.STOPPED

    def _advance(self, phase: Phase) -> None:
        self.phase = max(self.phase, phase)

    # -- posted by NIOFetcher: run on the loop thread ---------------------------

    def finish_up(self) -> None:
        """shutdown(wait=True) began: the registered work starts whatever waits undrained."""
        self._advance(Phase.DRAINING)

    def stop(self) -> None:
        """End the loop; whatever is unfinished is cancelled."""
        self._advance(Phase.CANCELLING)

    def set_host_delay(self, origin: Origin, seconds: float) -> None:
        """From now on, at least ``seconds`` between request starts to ``origin``."""
        self.table.set_delay(origin, seconds, self.loop.now)

    def set_host_gates(self, gates: list[tuple[Origin, float | None]]) -> None:
        """From now on, no request to each ``origin`` starts at or after its time (None: no such bound);
        the idle connections of an origin whose gate is lifted or closed now close at once."""
        table, now = self.table, self.loop.now
        for origin, start_until in gates:
            for conn in table.set_gate(origin, start_until, now):
                self.counters.closed_idle += 1
                conn.close()

    def cancel_pending(self, detail: str = "cancelled before it started") -> None:
        """Cancel what waits in the inbox and the host queues; in-flight work goes on."""
        cancelled = FetchFailure(ErrorKind.CANCELLED, detail)
        for task in self.table.drain_pending():
            self._finish_error(task, cancelled)
        self._cancel_inbox(cancelled)

    def _cancel_inbox(self, cancelled: FetchFailure) -> None:
        inbox = self._inbox
        while inbox:
            self._finish_error(self._inbox_task(inbox.popleft()), cancelled)

    def _cancel_queued_urls(self, cancelled: FetchFailure) -> None:
        """Cancel the str URLs still waiting in host queues, read from the queues themselves.

        Only needed when the orderly cancel failed (the host table may be what broke):
        a Task in a queue is in ``_live`` already, and a PendingURL whose Task was made
        before the failure (its seq is live) is not made twice.
        """
        live = {task.seq for task in self._live}
        for slot in list(self.table.slots.values()):
            queue, slot.queue = slot.queue, []
            for entry in queue:
                if len(entry) != 3 and entry[1] not in live:
                    self._finish_error(self._pending_task(entry, slot.origin), cancelled)

    def _inbox_task(self, item: InboxEntry) -> Task:
        """The Task of a registration still in the inbox, made as it is cancelled, and kept in ``_live`` at once."""
        if len(item) == 8:
            url, priority, scheme, host, port, host_header, path, registered_at = item
            bean, target = URLBean(url, priority=priority), Target(Origin(scheme, host, port), host_header, path)
        else:
            bean, priority, target, registered_at = item
        task = Task(bean, target, next(self._seq), registered_at, self._request_defaults)
        self._live.add(task)
        return task

    def _pending_task(self, entry: PendingURL, origin: Origin) -> Task:
        """The Task of a pending str URL, made as it starts or is cancelled, and kept in ``_live`` at once."""
        neg_priority, seq, url, host_header, path, registered_at = entry
        bean = URLBean(url, priority=-neg_priority)
        task = Task(bean, Target(origin, host_header, path), seq, registered_at, self._request_defaults)
        self._live.add(task)
        return task

    # -- the loop ---------------------------------------------------------------

    def _take_inbox(self) -> None:
        # What another thread posted before it registered these URLs comes first: a crawler sets a
        # host's Crawl-delay, then registers its first pages, and they must not start before it.
        self.loop.run_calls()
        inbox = self._inbox
        if self.phase >= _CANCELLING:  # a stop() was among those calls
            self._cancel_inbox(FetchFailure(ErrorKind.CANCELLED, "fetcher shut down"))
            return
        table = self.table
        slots = table.slots
        now = self.loop.now
        seq = self._seq
        # A slice per iteration: register_many() of a million URLs must not stand the loop still
        # for the seconds their queueing takes.  run() does not wait for events while some are left.
        for _ in range(min(len(inbox), INBOX_SLICE)):
            # Enqueue before popping: pending() counts inbox + table for max_pending
            # without the loop's cooperation, and must never see a task in neither.
            item = inbox[0]
            if len(item) == 8:
                url, priority, scheme, host, port, host_header, path, registered_at = item
                # A plain tuple finds the slot its Origin keys (equal, hashed alike): the host's
                # Origin is made only for a host the table does not hold yet.
                slot = slots.get((scheme, host, port))  # type: ignore[call-overload]
                origin = slot.origin if slot is not None else Origin(scheme, host, port)
                # Atoms only, so that the collector stops walking it (request.py explains).
                table.enqueue_entry(origin, (-priority, next(seq), url, host_header, path, registered_at), now)
            else:
                bean, priority, target, registered_at = item
                task = Task(bean, target, next(seq), registered_at, self._request_defaults)
                self._live.add(task)
                table.enqueue_entry(target.origin, (-task.priority, task.seq, task), now)
            inbox.popleft()

    def _dispatch(self) -> None:
        if self.phase >= _CANCELLING:
            return
        limit = self.config.max_completed
        if limit is not None and self.phase is Phase.DRAINING:
            limit = None  # "finish all registered work" must not wait on results nobody drains
        now = self.loop.now
        table = self.table
        counters = self.counters
        request_timeout = self.config.request_timeout
        while True:
            if limit is not None and self._completed_backlog() + len(self._finished) >= limit:
                return  # the consumer wakes us when it drains
            assignment = table.next_assignment(now)
            if assignment is None:
                return
            slot, task, conn, evict, evict_for_proxy, group, addresses = assignment
            if task.first_dispatch_at is None:
                task.first_dispatch_at = now
            task.dispatched_at = now
            task.deadline = now + request_timeout - task.active_time if request_timeout is not None else _INF
            task.state = RUNNING
            counters.in_flight += 1
            try:
                if evict is not None:
                    evict.close()
                if evict_for_proxy is not None:
                    evict_for_proxy.close()
                if conn is not None:
                    counters.reused_requests += 1
                    task.connection_reused = True
                    conn.start(task)
                else:
                    task.connection_reused = False
                    task.needs_fresh_connection = False
                    conn = Connection(self, self.loop, self.config, slot, task, self._denied)
                    table.connection_opened(slot, conn, group)
                    self.connections.add(conn)
                    counters.connections_opened += 1
                    if addresses is not None:
                        # Located by the table (per-IP limits): where it was counted is where it goes.
                        conn.channel.may_try = functools.partial(table.may_connect, conn)
                        conn.resolved(addresses, None)
                    else:
                        peer = task.proxy or slot.origin  # through a proxy, its name is the one looked up
                        self.resolver.lookup(peer.host, peer.port, conn.resolved, now)
            except Exception as exc:  # noqa: BLE001 - a fault in starting one request costs that request only
                if conn is not None:
                    conn.on_internal_error(exc)
                self._task_crashed(task, slot, exc)  # if no connection carried it yet
            table.refresh(slot, now)

    def _locate(self, slot: HostSlot) -> None:
        """Look ``slot``'s origin up for the host table's per-IP limits; a failed lookup, or no
        answer within the connect timeout, fails its first request (``HostTable.not_located``)."""
        loop = self.loop
        origin = slot.origin
        self.resolver.lookup(origin.host, origin.port, functools.partial(self._located, slot), loop.now)
        if slot.locating:  # no answer at once (from the cache): it may never come in time
            self._locating[slot] = loop.timers.call_at(loop.now + self.config.connect_timeout,
                                                       self._give_up_locating, slot)

    def _located(self, slot: HostSlot, addresses: Sequence[Address] | None, failure: FetchFailure | None) -> None:
        timer = self._locating.pop(slot, None)
        if timer is not None:
            timer.cancel()
        if addresses is not None:
            origin = slot.origin
            self.table.located(slot, addresses, self.loop.now, self.resolver.holds_until(origin.host, origin.port))
        elif failure is not None and (task := self.table.not_located(slot, self.loop.now)) is not None:
            self._finish_error(task, failure)

    def _give_up_locating(self, slot: HostSlot) -> None:
        self._located(slot, None, lookup_too_slow(self.config.connect_timeout))

    # -- connection events (ConnectionOwner) --------------------------------

    def exchange_done(self, conn: HostConnection, task: Task, response: Response) -> None:
        """``conn`` brought ``task``'s response: a result or the next hop; the connection idles or closes."""
        status = response.status
        self._exchange_ended(task, conn.slot)
        throttle = self.config.throttle
        if throttle is not None:
            self._throttle(throttle, conn.slot, task, status, response.headers)
        self._keep_or_close(conn)
        if self.cookie_jar is not None:  # before the next hop asks for its Cookie header
            store_cookies(self.cookie_jar, task.url, response.headers)
        location = header_value(response.headers, "location") if status in REDIRECT_STATUSES else None
        if location is not None and self.config.follow_redirects:
            self._redirect(task, status, location, conn)
        else:
            self._finish(task, status, response.reason, response.headers, response.body, conn=conn)
        conn.carried = None  # routed: a later fault on this connection is not this task's

    def exchange_failed(
        self, conn: HostConnection, task: Task, failure: FetchFailure, replayable: bool, head: Response | None
    ) -> None:
        """``task`` failed on ``conn`` (closed by now), after ``head`` if one came (the response as far as it
        came, body included, which the result keeps): a replay or a result."""
        self._exchange_ended(task, conn.slot, served=False)
        throttle = self.config.throttle
        if throttle is not None:
            self._throttle(throttle, conn.slot, task, None, [])
        replayable = self.table.turned_away(conn) or replayable  # per-IP: it waits for its place instead
        if replayable and not task.replayed and self.phase < _CANCELLING and task.method in IDEMPOTENT_METHODS:
            task.replayed = True
            task.needs_fresh_connection = True
            self.counters.replayed_requests += 1
            self._requeue(task)
        elif head is not None:
            self._finish(task, head.status, head.reason, head.headers, head.body, conn=conn, failure=failure)
        else:
            self._finish_error(task, failure, conn=conn)
        conn.carried = None

    def connection_crashed(self, conn: HostConnection, exc: Exception) -> None:
        """A bug while serving ``conn``: it closes, its request ends as ``protocol_error``, the loop goes on.

        A fault in the clean-up itself escapes, and ends the loop (see the class docstring).
        """
        log.error("niofetcher: internal error on %r; that request fails, the rest go on", conn, exc_info=exc)
        task = conn.carried
        conn.carried = None
        conn.task = None
        conn.close()
        if conn in self.connections:
            # Its close failed half-way: the socket may be registered still and the host's
            # connection count is off, which could stall that host for ever.  Only the
            # loop's own ending cleans that up safely.
            raise RuntimeError(f"{conn!r} could not be closed after an internal error") from exc
        if task is not None:
            self._task_crashed(task, conn.slot, exc, conn)

    def _task_crashed(self, task: Task, slot: HostSlot, exc: Exception, conn: HostConnection | None = None) -> None:
        """End ``task`` after a fault, unless it already has a result or waits for its next hop."""
        if task.state is RUNNING:
            self._exchange_ended(task, slot, served=False)
        if task.state is ROUTING:
            self._finish_error(task, FetchFailure(ErrorKind.PROTOCOL_ERROR, f"internal error: {_describe(exc)}"), conn)

    def connection_closed(self, conn: HostConnection, was_idle: bool) -> None:
        """``conn`` has closed (once per connection)."""
        # The host table first: should it fail, the connection is still in ``connections``, and
        # connection_crashed ends the loop rather than leave the host counting a socket it lost.
        self.table.connection_closed(conn, was_idle, self.loop.now)
        self.connections.discard(conn)

    def idle_expired(self, conn: HostConnection, service_time: bool) -> None:
        """Idle ``conn`` has served its time (``service_time``) or idled too long: it closes."""
        if service_time:
            self.counters.closed_service_time += 1
        else:
            self.counters.closed_idle += 1
        conn.close()

    def tls_context(self) -> ssl.SSLContext:
        """The configuration's one client context, built when the first https connection needs it."""
        if self._tls_context is None:
            self._tls_context = tls_context(self.config)
        return self._tls_context

    def tls_handshake_done(self, resumed: bool) -> None:
        """A TLS handshake completed; ``resumed``: it resumed an earlier session."""
        counters = self.counters
        counters.tls_handshakes += 1
        counters.tls_resumed += resumed

    def _exchange_ended(self, task: Task, slot: HostSlot, served: bool = True) -> None:
        task.state = ROUTING
        self.counters.in_flight -= 1
        self.table.exchange_ended(slot, served, self.loop.now)

    def _throttle(
        self, throttle: Throttle, slot: HostSlot, task: Task, status: int | None, headers: list[tuple[str, str]]
    ) -> None:
        """Move ``slot``'s throttled delay by how the exchange went: ``status`` None for a failure."""
        now = self.loop.now
        if status is not None and status in throttle.backoff_statuses:
            wait = retry_after(header_value(headers, "retry-after"), time.time())
            pause_until = now + wait if wait is not None else now
            if task.dispatched_at >= slot.backoff_at:  # sent after the last backoff began: a new one
                delay, too_fast = throttle.backed_off(max(slot.throttle_delay, slot.delay), slot.start_gap,
                                                      slot.served - slot.served_at_backoff)
                self.table.backed_off(slot, delay, too_fast, pause_until, now)
            else:
                self.table.pause(slot, pause_until, now)
        else:
            good = status is not None and status < 500
            delay, too_fast = throttle.eased(slot.throttle_delay, slot.too_fast, now - task.dispatched_at, good)
            self.table.throttled(slot, delay, too_fast)

    def _keep_or_close(self, conn: HostConnection) -> None:
        """After a response: back to the host table's connections with capacity, unless it has none
        (its driver's rule: HTTP/1.1's one request at a time, and its keep-alive decision)."""
        if self.phase >= _CANCELLING or not conn.next_cycle():
            conn.close()
            return
        if conn.reuse_deadline <= self.loop.now:
            self.counters.closed_service_time += 1
            conn.close()
            return
        most = self.config.max_requests_per_connection
        if most is not None and conn.requests_done >= most:
            conn.close()
            return
        conn.make_idle()
        self.table.connection_idle(conn, self.loop.now)

    # -- redirects and results ----------------------------------------------

    def _redirect(self, task: Task, status: int, location: str, conn: HostConnection) -> None:
        """Requeue ``task`` for the hop to ``location``, or end it when that hop may not be taken."""
        url, scheme = redirect_url(location, task.url)
        if scheme not in ("http", "https"):
            failure = FetchFailure(ErrorKind.PROTOCOL_ERROR, f"redirect to a non-http(s) URL: {url}")
            self._finish_error(task, failure, conn, status)
            return
        if len(task.redirects) >= self.config.max_redirects:
            detail = f"more than max_redirects={self.config.max_redirects}"
            self._finish_error(task, FetchFailure(ErrorKind.TOO_MANY_REDIRECTS, detail), conn, status)
            return
        first = task.bean.url if "@" not in task.bean.url else split_credentials(task.bean.url)[0]
        if url == first or any(url == seen for _, seen in task.redirects):
            loop = FetchFailure(ErrorKind.TOO_MANY_REDIRECTS, f"redirect loop at {url}")
            self._finish_error(task, loop, conn, status)
            return
        try:
            target = parse_target(url)
        except ValueError as exc:
            self._finish_error(task, FetchFailure(ErrorKind.PROTOCOL_ERROR, f"bad redirect: {exc}"), conn, status)
            return
        task.redirects = [*task.redirects, (status, url)]
        if status == 303 or (status in (301, 302) and task.method == "POST"):
            if task.method != "HEAD":
                task.method = "GET"
            task.drop_body()
        task.retarget(url, target)
        self._requeue(task)

    def _requeue(self, task: Task) -> None:
        """Back into the queue for the next hop; the time it waits there does not count as its time."""
        now = self.loop.now
        task.active_time += now - task.dispatched_at
        task.deadline = _INF
        task.state = WAITING
        self.table.enqueue(task, now)

    def _finish(
        self, task: Task, status: int, reason: str, headers: list[tuple[str, str]], body: bytes,
        conn: HostConnection | None = None, failure: FetchFailure | None = None,
    ) -> None:
        if task.state is DONE:
            # Only after a loop failure, when the orderly cancel met a table or a
            # connection that was wrong, can a task be reached twice; it has its result.
            log.error("niofetcher: a second result for %s dropped", task.url)
            return
        now = self.loop.now
        started = task.first_dispatch_at
        result = FetchResult(
            bean=task.bean, url=task.bean.url, final_url=task.url, status=status, reason=reason,
            headers=headers, body=body, redirects=list(task.redirects),
            elapsed=now - started if started is not None else 0.0,
            queue_wait=(started if started is not None else now) - task.registered_at,
            connection_reused=task.connection_reused,
            session_reused=conn is not None and conn.session_reused,
            replayed=task.replayed,
            error=failure.kind if failure else None,
            error_detail=failure.detail if failure else "",
            refused=failure.refused if failure else False,
            fetched_at=time.time(),
            peer=conn.peer if conn is not None else None,
            exchanges=[*task.exchanges],
        )
        self._finished.append(result)
        task.state = DONE
        self._live.discard(task)

    def _finish_error(
        self, task: Task, failure: FetchFailure, conn: HostConnection | None = None, status: int | None = None
    ) -> None:
        self._finish(task, status, "", [], b"", conn=conn, failure=failure)  # type: ignore[arg-type]

    def _deliver_finished(self) -> None:
        finished, self._finished = self._finished, []
        self._deliver(finished)

    # -- shutdown -------------------------------------------------------------

    def _cancel_everything(self, cancelled: FetchFailure) -> None:
        self.cancel_pending(cancelled.detail)
        for conn in list(self.connections):
            if conn.idle or conn.task is None:
                conn.close()
            else:
                conn.fail(cancelled)


def _describe(exc: BaseException) -> str:
    """``TypeName: message`` for an error detail: a message alone (a KeyError's key) says little."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

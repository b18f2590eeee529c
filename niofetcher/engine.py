"""The loop thread's side of the fetcher: requests, connections, redirects, results.

Everything here runs in the one loop thread; the only entries from other
threads are ``inbox`` (a deque, appended to by ``register``) and calls posted
through ``loop.call_soon_threadsafe``.

One loop iteration: wait for readiness; handle every ready socket and due
timer; take new registrations; let the scheduler start whatever can start;
hand the finished results to the fetcher in one batch.  Running the
scheduler once per batch of events, not once per event, is both cheaper and
the reason the service-time check is exact: timers due now have already
closed the connections that have served their time.
"""

from __future__ import annotations

import collections
import logging
import math
import ssl
from collections.abc import Callable, Sequence
from urllib.parse import urljoin, urlsplit

from .config import Address, FetcherConfig
from .connection import IDLE, Connection
from .content import ACCEPT_ENCODING
from .errors import ErrorKind, FetchFailure
from .http11 import RequestHeaders, validated_headers
from .loop import Loop
from .models import FetchResult, URLBean
from .pool import HostSlot, HostTable
from .resolver import ResolverPool
from .transport import tls_context
from .urls import Target, parse_target

log = logging.getLogger("niofetcher")

REDIRECT_STATUSES = frozenset((301, 302, 303, 307, 308))
IDEMPOTENT_METHODS = frozenset(("GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"))
_CROSS_ORIGIN_DROPPED = frozenset(("authorization", "cookie", "proxy-authorization"))
_BODY_HEADERS = frozenset(("content-length", "content-type", "content-encoding", "transfer-encoding"))
_INF = math.inf
HOST_HEADERS_CACHE = 4096  # Host headers whose validated request headers are kept

# Where a task is, so that a fault anywhere on its way settles it exactly once:
# WAITING in the inbox or a host queue; RUNNING on a connection (counted in
# in_flight); ROUTING once its exchange has ended and the engine decides
# between a result, a redirect and a replay; DONE once its result is made.
WAITING, RUNNING, ROUTING, DONE = range(4)


class Task:
    """One registration on its way through the fetcher, redirects and a replay included."""

    __slots__ = (
        "_defaults",
        "_headers",
        "_wire_headers",
        "active_time",
        "bean",
        "body",
        "connection_reused",
        "deadline",
        "dispatched_at",
        "first_dispatch_at",
        "method",
        "needs_fresh_connection",
        "priority",
        "redirects",
        "registered_at",
        "replayed",
        "seq",
        "session_reused",
        "state",
        "target",
        "url",
    )

    def __init__(
        self, bean: URLBean, target: Target, seq: int, registered_at: float, defaults: RequestDefaults,
    ) -> None:
        self.bean = bean
        self.seq = seq
        self.priority = bean.priority
        method = bean.method
        self.method = method if method in IDEMPOTENT_METHODS or method == "POST" else method.upper()
        self.body = bean.body
        self.target = target
        self.url = bean.url
        self.registered_at = registered_at
        self.first_dispatch_at: float | None = None
        self.dispatched_at = 0.0
        self.active_time = 0.0  # time spent dispatched, summed over redirects and replays
        self.deadline = _INF
        # A tuple until the first redirect: an empty list per pending URL would be
        # one more object for the garbage collector to walk while millions wait.
        self.redirects: Sequence[tuple[int, str]] = ()
        self.replayed = False
        self.needs_fresh_connection = False
        self.connection_reused = False
        self.session_reused = False
        self.state = WAITING
        # Shared with every other task until this one has headers of its own:
        # a million pending URLs must not mean a million copies of the defaults.
        self._defaults = defaults
        headers = defaults.headers
        if bean.headers:
            headers = dict(headers)
            for name, value in bean.headers.items():
                headers[name.lower()] = (name, value)
        self._headers = headers
        self._wire_headers: RequestHeaders | None = None

    def wire_headers(self) -> RequestHeaders:
        """The request headers for the current target, Host first, validated.  Raises FetchFailure."""
        wire = self._wire_headers
        if wire is None:
            defaults = self._defaults
            host_header = self.target.host_header
            if self._headers is defaults.headers and not self.body:
                wire = defaults.for_host(host_header)
            else:
                wire = validated_headers(_header_list(host_header, self._headers, self.body))
            self._wire_headers = wire
        return wire

    def drop_body(self) -> None:
        """A redirect turned the request into a GET: its body and the headers describing it go."""
        self.body = b""
        self._headers = {k: v for k, v in self._headers.items() if k not in _BODY_HEADERS}
        self._wire_headers = None

    def retarget(self, url: str, target: Target) -> None:
        if target.origin != self.target.origin:
            self._headers = {k: v for k, v in self._headers.items() if k not in _CROSS_ORIGIN_DROPPED}
        self.url = url
        self.target = target
        self._wire_headers = None


class RequestDefaults:
    """The headers every request carries, and their validated wire form per Host, built once."""

    __slots__ = ("_by_host", "headers")

    def __init__(self, headers: dict[str, tuple[str, str]]) -> None:
        self.headers = headers
        self._by_host: dict[str, RequestHeaders] = {}

    def for_host(self, host_header: str) -> RequestHeaders:
        """Loop thread only."""
        wire = self._by_host.get(host_header)
        if wire is None:
            if len(self._by_host) >= HOST_HEADERS_CACHE:  # a crawl of many hosts: keep it small, not clever
                self._by_host.clear()
            wire = self._by_host[host_header] = validated_headers(_header_list(host_header, self.headers, b""))
        return wire


def _header_list(host_header: str, headers: dict[str, tuple[str, str]], body: bytes) -> list[tuple[str, str]]:
    wire = [("Host", host_header)]
    wire.extend(pair for key, pair in headers.items() if key != "host")
    if body and "content-length" not in headers and "transfer-encoding" not in headers:
        wire.append(("Content-Length", str(len(body))))
    return wire


Deliver = Callable[[list[FetchResult]], None]


class Engine:
    """Owns the loop, the host table, the resolver pool and every connection.

    Faults.  The loop must survive its own bugs (DESIGN.md guarantee 9), in two
    layers.  Everything the loop does for one connection -- its readiness
    events, its timer, its DNS answer, starting a request on it -- runs under a
    guard that turns an unexpected exception into ``connection_crashed``: that
    connection closes and the request it carried ends as ``protocol_error``,
    found through ``Connection.carried`` and settled by its ``Task.state``, so
    it is delivered once whether the fault came before, during or after its
    routing.  A fault anywhere else (the scheduler, the loop itself) ends the
    loop thread: ``failure`` keeps the exception, and ``_release`` cancels every
    task still in ``_live`` or the inbox -- a registry kept for exactly this, as
    the host table and the connections may be what broke.
    """

    def __init__(
        self, config: FetcherConfig, deliver: Deliver, completed_backlog: Callable[[], int],
        close_intake: Callable[[], None],
    ) -> None:
        self.config = config
        self.loop = Loop()
        self.table = HostTable(
            config.max_connections, config.max_connections_per_host, config.host_delay,
            config.host_delay_jitter, self.loop.timers.call_at, lambda: self.loop.now,
        )
        self.resolver = ResolverPool(config, self.loop.call_soon_threadsafe)
        self.inbox: collections.deque[Task] = collections.deque()
        self.connections: set[Connection] = set()
        self.running = True
        self.stopping = False
        self.finishing = False  # shutdown(wait=True) began: max_completed no longer holds work back
        self._deliver = deliver
        self._completed_backlog = completed_backlog
        self._close_intake = close_intake
        self._finished: list[FetchResult] = []
        self._live: set[Task] = set()  # taken from the inbox, no result made yet
        self.failure: BaseException | None = None  # what ended the loop thread, if not a shutdown
        self._denied = config.denied_networks()
        self.request_defaults = RequestDefaults(_base_headers(config))
        # counters read by FetcherStats
        self.in_flight = 0
        self.connections_opened = 0
        self.reused_requests = 0
        self.replayed_requests = 0
        self.closed_service_time = 0
        self.closed_idle = 0
        self.bytes_received = 0
        self.tls_handshakes = 0
        self.tls_resumed = 0
        self._tls_context: ssl.SSLContext | None = None

    # -- the loop -----------------------------------------------------------

    def run(self) -> None:
        loop = self.loop
        try:
            while self.running:
                loop.run_once(None)
                if self.inbox:
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
        self.stopping = True
        self._close_intake()  # before the inbox is swept: nothing may land there after it
        failure = self.failure
        detail = "fetcher shut down" if failure is None else f"niofetcher loop failed: {_describe(failure)}"
        cancelled = FetchFailure(ErrorKind.CANCELLED, detail)
        try:
            self._cancel_everything(cancelled)
        except Exception:  # the sweep below delivers what this could not
            log.exception("niofetcher: cancelling after a loop failure failed; closing by force")
            for conn in self.connections:
                if conn.sock is not None:
                    conn.sock.close()
        while self.inbox:
            self._finish_error(self.inbox.popleft(), cancelled)
        for task in list(self._live):
            self._finish_error(task, cancelled)
        self._deliver_finished()
        self.resolver.close()
        self.loop.close()

    def finish_up(self) -> None:
        """Loop thread: shutdown(wait=True) began; the registered work starts whatever waits undrained."""
        self.finishing = True

    def stop(self) -> None:
        """Loop thread: end the loop; whatever is unfinished is cancelled."""
        self.stopping = True
        self.running = False

    def wake(self) -> None:
        self.loop.wake()

    def _take_inbox(self) -> None:
        # What another thread posted before it registered these URLs comes first: a crawler sets a
        # host's Crawl-delay, then registers its first pages, and they must not start before it.
        self.loop.run_calls()
        inbox = self.inbox
        table = self.table
        now = self.loop.now
        while inbox:
            # Enqueue before popping: register() counts inbox + table for max_pending
            # without the loop's cooperation, and must never see a task in neither.
            task = inbox[0]
            if self.stopping:
                self._finish_error(task, FetchFailure(ErrorKind.CANCELLED, "fetcher shut down"))
            else:
                self._live.add(task)
                table.enqueue(task, now)
            inbox.popleft()

    def _dispatch(self) -> None:
        if self.stopping:
            return
        limit = self.config.max_completed
        now = self.loop.now
        table = self.table
        request_timeout = self.config.request_timeout
        while True:
            if limit is not None and not self.finishing and self._completed_backlog() + len(self._finished) >= limit:
                return  # the consumer wakes us when it drains
            assignment = table.next_assignment(now)
            if assignment is None:
                return
            slot, task, conn, evict = assignment
            if task.first_dispatch_at is None:
                task.first_dispatch_at = now
            task.dispatched_at = now
            task.deadline = now + request_timeout - task.active_time if request_timeout is not None else _INF
            task.state = RUNNING
            self.in_flight += 1
            try:
                if evict is not None:
                    evict.close()
                if conn is not None:
                    self.reused_requests += 1
                    task.connection_reused = True
                    conn.start(task)
                else:
                    task.connection_reused = False
                    task.needs_fresh_connection = False
                    conn = Connection(self, self.loop, self.config, slot, task, self._denied)
                    table.connection_opened(slot)
                    self.connections.add(conn)
                    self.connections_opened += 1
                    origin = slot.origin
                    self.resolver.lookup(origin.host, origin.port, _resolved_callback(conn), now)
            except Exception as exc:  # noqa: BLE001 - a fault in starting one request costs that request only
                if conn is not None:
                    conn.on_internal_error(exc)
                self._task_crashed(task, slot, exc)  # if no connection carried it yet
            table.refresh(slot, now)

    # -- connection events (ConnectionOwner) --------------------------------

    def exchange_done(self, conn: Connection, task: Task) -> None:
        http = conn.http
        status = http.status
        assert status is not None
        result_parts = (status, http.reason, http.headers, http.body)
        self._exchange_ended(task, conn.slot)
        self._keep_or_close(conn)
        location = _header(http.headers, "location") if status in REDIRECT_STATUSES else None
        if location is not None and self.config.follow_redirects:
            self._redirect(task, status, location)
        else:
            self._finish(task, *result_parts, conn=conn)
        conn.carried = None  # routed: a later fault on this connection is not this task's

    def exchange_failed(self, conn: Connection, task: Task, failure: FetchFailure, replayable: bool) -> None:
        self._exchange_ended(task, conn.slot, served=False)
        http = conn.http
        if replayable and not task.replayed and not self.stopping and task.method in IDEMPOTENT_METHODS:
            task.replayed = True
            task.needs_fresh_connection = True
            self.replayed_requests += 1
            self._requeue(task)
        elif http.status is not None:
            self._finish(task, http.status, http.reason, http.headers, b"", conn=conn, failure=failure)
        else:
            self._finish_error(task, failure, conn=conn)
        conn.carried = None

    def connection_crashed(self, conn: Connection, exc: Exception) -> None:
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

    def _task_crashed(self, task: Task, slot: HostSlot, exc: Exception, conn: Connection | None = None) -> None:
        """End ``task`` after a fault, unless it already has a result or waits for its next hop."""
        if task.state == RUNNING:
            self._exchange_ended(task, slot, served=False)
        if task.state == ROUTING:
            self._finish_error(task, FetchFailure(ErrorKind.PROTOCOL_ERROR, f"internal error: {_describe(exc)}"), conn)

    def connection_closed(self, conn: Connection, was_idle: bool) -> None:
        # The host table first: should it fail, the connection is still in ``connections``, and
        # connection_crashed ends the loop rather than leave the host counting a socket it lost.
        self.table.connection_closed(conn, was_idle, self.loop.now)
        self.connections.discard(conn)

    def idle_expired(self, conn: Connection, service_time: bool) -> None:
        if service_time:
            self.closed_service_time += 1
        else:
            self.closed_idle += 1
        conn.close()

    def tls_context(self) -> ssl.SSLContext:
        """The configuration's one client context, built when the first https connection needs it."""
        if self._tls_context is None:
            self._tls_context = tls_context(self.config.verify_tls, self.config.ca_file)
        return self._tls_context

    def tls_handshake_done(self, resumed: bool) -> None:
        self.tls_handshakes += 1
        self.tls_resumed += resumed

    def _exchange_ended(self, task: Task, slot: HostSlot, served: bool = True) -> None:
        task.state = ROUTING
        self.in_flight -= 1
        self.table.exchange_ended(slot, served, self.loop.now)

    def _keep_or_close(self, conn: Connection) -> None:
        """After a response: back to the idle pool, unless it may not serve another request."""
        if self.stopping or not conn.http.next_cycle():
            conn.close()
            return
        if conn.reuse_deadline <= self.loop.now:
            self.closed_service_time += 1
            conn.close()
            return
        most = self.config.max_requests_per_connection
        if most is not None and conn.requests_done >= most:
            conn.close()
            return
        conn.make_idle()
        self.table.connection_idle(conn, self.loop.now)

    # -- redirects and results ----------------------------------------------

    def _redirect(self, task: Task, status: int, location: str) -> None:
        url = urljoin(task.url, location.strip())
        url = url.split("#", 1)[0] if "#" in url else url
        scheme = urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            failure = FetchFailure(ErrorKind.PROTOCOL_ERROR, f"redirect to a non-http(s) URL: {url}")
            self._finish_error(task, failure, status=status)
            return
        if len(task.redirects) >= self.config.max_redirects:
            detail = f"more than max_redirects={self.config.max_redirects}"
            self._finish_error(task, FetchFailure(ErrorKind.TOO_MANY_REDIRECTS, detail), status=status)
            return
        if url == task.bean.url or any(url == seen for _, seen in task.redirects):
            loop = FetchFailure(ErrorKind.TOO_MANY_REDIRECTS, f"redirect loop at {url}")
            self._finish_error(task, loop, status=status)
            return
        try:
            target = parse_target(url)
        except ValueError as exc:
            self._finish_error(task, FetchFailure(ErrorKind.PROTOCOL_ERROR, f"bad redirect: {exc}"), status=status)
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
        conn: Connection | None = None, failure: FetchFailure | None = None,
    ) -> None:
        if task.state == DONE:
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
        )
        self._finished.append(result)
        task.state = DONE
        self._live.discard(task)

    def _finish_error(
        self, task: Task, failure: FetchFailure, conn: Connection | None = None, status: int | None = None
    ) -> None:
        self._finish(task, status, "", [], b"", conn=conn, failure=failure)  # type: ignore[arg-type]

    def _deliver_finished(self) -> None:
        finished, self._finished = self._finished, []
        self._deliver(finished)

    # -- shutdown -------------------------------------------------------------

    def cancel_pending(self, detail: str = "cancelled before it started") -> None:
        """Loop thread: cancel what waits in the inbox and the host queues; in-flight work goes on."""
        cancelled = FetchFailure(ErrorKind.CANCELLED, detail)
        for task in self.table.drain_pending():
            self._finish_error(task, cancelled)
        while self.inbox:
            self._finish_error(self.inbox.popleft(), cancelled)

    def _cancel_everything(self, cancelled: FetchFailure) -> None:
        self.cancel_pending(cancelled.detail)
        for conn in list(self.connections):
            if conn.state == IDLE or conn.task is None:
                conn.close()
            else:
                conn.fail(cancelled)


def _resolved_callback(conn: Connection) -> Callable[..., None]:
    def resolved(addresses: list[Address] | None, failure: FetchFailure | None) -> None:
        try:
            if failure is not None:
                conn.fail(failure)
            else:
                conn.connect(addresses)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - a fault in connecting costs this connection only
            conn.on_internal_error(exc)

    return resolved


def _describe(exc: BaseException) -> str:
    """``TypeName: message`` for an error detail: a message alone (a KeyError's key) says little."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _base_headers(config: FetcherConfig) -> dict[str, tuple[str, str]]:
    headers = {
        "user-agent": ("User-Agent", config.user_agent),
        "accept": ("Accept", "*/*"),
    }
    if config.decode_content:
        headers["accept-encoding"] = ("Accept-Encoding", ACCEPT_ENCODING)
    for name, value in config.headers.items():
        headers[name.lower()] = (name, value)
    return headers


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None

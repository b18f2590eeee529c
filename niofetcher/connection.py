"""One connection: a channel (channel.py: socket, connect, TLS, tunnel) and a driver over it.

Theory of operation.  A connection is born bound to the request that caused
it.  Its channel opens (resolved addresses, TCP, a proxy's tunnel, TLS) and
tells it ``channel_open``; from then on the connection hands its driver's
bytes to the channel and the channel's bytes to its driver.  The driver is
HTTP/1.1 (http11.ClientHTTP11 over h11: a request in, bytes out; bytes in, a
complete response or a FetchFailure out; ``capacity``, the requests it can
take now) and knows no socket; the channel knows no HTTP.  After a response
the connection is either idle (kept for reuse, its channel still watched for
readability so that a server closing it is noticed at once) or closed, as
its driver's capacity says.

Through a proxy, plain http goes with the request target in absolute form
(``GET http://host:port/path``); a 407 then is the proxy's own answer.

It reports to its owner, the engine, through ``ConnectionOwner``:
``exchange_done`` (with the ``Response``) and ``exchange_failed`` (with the
head, if one came) for the request it carried, ``connection_closed``
exactly once when it goes away, and ``idle_expired`` when its idle or
service time runs out.

Timeouts use one timer per connection, armed lazily: receiving data only
moves the channel's ``last_activity``; when the timer fires it compares the
real deadline with the clock and re-arms if the deadline has moved.  So the
timer heap is not touched per received packet.  The timer is armed with the
channel, the handler the selector knows: the loop holds back a due timer
whose handler's event waits for a later batch (loop.py), so that a response
already in the socket is read before its deadline is judged.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar, cast

from .channel import CLOSED, OPEN, Channel
from .config import Address, FetcherConfig, IPNetwork
from .errors import ErrorKind, FetchFailure
from .http11 import ClientHTTP11, Response
from .loop import Loop
from .models import Counters
from .request import Task
from .timers import Timer
from .transport import TLSSessions
from .urls import Origin, Proxy

_INF = float("inf")


class Host(Protocol):
    """What a connection knows of its host (the host table's slot): its origin, and its TLS session."""

    @property
    def origin(self) -> Origin:
        """The (scheme, host, port) connected to."""

    @property
    def tls_sessions(self) -> TLSSessions:
        """Where the session for its next TLS connection waits."""


H = TypeVar("H", bound=Host)


class ConnectionOwner(Protocol):
    """What a connection reports to: the engine."""

    counters: Counters

    def exchange_done(self, conn: Connection[Any], task: Task, response: Response) -> None:
        """``task``'s response is complete; ``conn`` waits to be made idle or closed."""

    def exchange_failed(
        self, conn: Connection[Any], task: Task, failure: FetchFailure, replayable: bool, head: Response | None
    ) -> None:
        """``task`` failed and ``conn`` is closed; ``replayable``: no byte of a response came on a reused one."""

    def connection_closed(self, conn: Connection[Any], was_idle: bool) -> None:
        """``conn`` closed: told exactly once."""

    def connection_crashed(self, conn: Connection[Any], exc: Exception) -> None:
        """A handler of ``conn`` raised ``exc``: a bug, to cost this connection and its request only."""

    def idle_expired(self, conn: Connection[Any], service_time: bool) -> None:
        """Idle ``conn`` reached its idle timeout, or its service time (``service_time``)."""

    def tls_context(self) -> ssl.SSLContext:
        """The client context for https connections."""

    def tls_handshake_done(self, resumed: bool) -> None:
        """A handshake completed; ``resumed``: it resumed an earlier session."""


class Connection(Generic[H]):
    """A channel and an HTTP/1.1 driver, and the request they carry; ``slot`` is its host's."""

    __slots__ = (
        "_absolute_form",
        "_counters",
        "_speed_mark_at",
        "_speed_mark_bytes",
        "_timer",
        "carried",
        "channel",
        "config",
        "established_at",
        "http",
        "idle_since",
        "loop",
        "owner",
        "proxy",
        "requests_done",
        "reuse_deadline",
        "reused",
        "session_reused",
        "slot",
        "task",
    )

    def __init__(
        self, owner: ConnectionOwner, loop: Loop, config: FetcherConfig, slot: H, task: Task,
        denied: Sequence[IPNetwork],
    ) -> None:
        self.owner = owner
        self._counters = owner.counters
        self.loop = loop
        self.config = config
        self.slot = slot
        self.proxy: Proxy | None = task.proxy
        origin = slot.origin
        self.channel = Channel(self, loop, config, origin, self.proxy, slot.tls_sessions, owner.tls_context,
                               owner.counters, denied)
        self.http = ClientHTTP11(config.max_header_size, config.max_body_size, config.decode_content,
                                 config.record_exchanges)
        self.task: Task | None = task
        # The task this connection answers for until the owner has routed it.  ``task``
        # is cleared before the owner hears of the outcome; this is not, so that a
        # fault in the owner's handling still finds the task it must end.
        self.carried: Task | None = task
        self.established_at = 0.0
        self.reuse_deadline = _INF
        self.requests_done = 0
        self.reused = False
        self.idle_since = 0.0
        self._timer: Timer | None = None
        self._speed_mark_at = 0.0
        self._speed_mark_bytes = 0
        self.session_reused = False  # the TLS handshake resumed an earlier session
        self._absolute_form = self.proxy is not None and origin.scheme == "http"
        self._arm(self._deadline())

    @property
    def idle(self) -> bool:
        """Kept for reuse, with no request."""
        return self.channel.idle

    @property
    def peer(self) -> str | None:
        """The "ip:port" connected to (a proxy's, through one): FetchResult.peer."""
        return self.channel.peer

    def __repr__(self) -> str:
        via = f" via {self.proxy.authority}" if self.proxy is not None else ""
        state = "IDLE" if self.channel.idle else self.channel.state.name
        return f"<Connection {self.slot.origin}{via} {state} served={self.requests_done}>"

    # -- opening (the channel's reports: channel.ChannelUser) ----------------

    def resolved(self, addresses: Sequence[Address] | None, failure: FetchFailure | None) -> None:
        """The name lookup's answer (the resolver's callback): connect, or fail with its failure."""
        try:
            if failure is not None:
                self.fail(failure)
            else:
                self.channel.connect(addresses)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - a fault in connecting costs this connection only
            self.on_internal_error(exc)

    def tls_established(self, resumed: bool) -> None:
        """Its TLS handshake completed (transport.SecureUser); ``resumed``: an earlier session's."""
        self.session_reused = resumed
        self.owner.tls_handshake_done(resumed)

    def channel_open(self) -> None:
        """Connected: the request it was born for goes."""
        self.established_at = self.loop.now
        service_time = self.config.connection_service_time
        if service_time is not None:
            self.reuse_deadline = self.established_at + service_time
        task = self.task
        assert task is not None
        self._begin(task)

    def channel_failed(self, failure: FetchFailure, head: Response | None = None) -> None:
        """The channel could not open (``failure`` is attributed already)."""
        self._end(failure, head)

    # -- exchanges ----------------------------------------------------------

    def start(self, task: Task) -> None:
        """Send ``task``'s request on this idle connection."""
        self.task = task
        self.carried = task
        self.channel.idle = False
        self._begin(task)

    def _begin(self, task: Task) -> None:
        self.reused = self.requests_done > 0
        channel = self.channel
        now = self.loop.now
        channel.last_activity = now
        self._speed_mark_at = now
        self._speed_mark_bytes = channel.received
        target = task.target
        # Through a proxy, plain http names the whole URL (RFC 9112 3.2.2): the proxy connects on.
        path = f"http://{target.host_header}{target.path}" if self._absolute_form else target.path
        try:
            data = self.http.start_request(task.method, path, task.wire_headers(), task.body)
        except FetchFailure as failure:
            self.fail(failure)
            return
        self._arm(self._deadline())
        channel.send(data)

    def channel_data(self, data: bytes) -> bool:
        """Bytes of the response (``b""``: the server closed): True once the exchange has ended."""
        http = self.http
        if not data and not http.response_started and self.reused:
            self._fail_replayable("the server closed a reused connection before responding")
            return True
        try:
            complete = http.receive(data)
        except FetchFailure as failure:
            self.fail(failure)
            return True
        if complete:
            self._exchange_complete(http.response)  # type: ignore[arg-type]
        return complete

    def _exchange_complete(self, response: Response) -> None:
        if self._absolute_form and response.status == 407:
            # The proxy's own answer, not the origin's: the credentials are missing or wrong.
            answer = f"{response.status} {response.reason}".rstrip()
            self.fail(FetchFailure(ErrorKind.PROXY_ERROR, f"proxy {self.proxy}: answered {answer}"), response)
            return
        task = self.task
        assert task is not None
        self.task = None
        self.requests_done += 1
        if self.config.record_exchanges:  # the engine copies them into the result
            task.exchanges = (*task.exchanges, self.http.exchange(task.url, self.peer))
        if self.requests_done == 1:
            self.channel.transport.served(self.slot.tls_sessions)  # type: ignore[union-attr]
        self.owner.exchange_done(self, task, response)

    def channel_broken(self, exc: OSError, sending: bool) -> None:
        """The socket failed: the request fails, or is replayed when a reused connection answered nothing."""
        if not self.http.response_started and self.reused:
            # Before the TLS check: a reset kept-alive TLS connection raises an SSLError (an EOF in
            # violation of the protocol) where a plain one raises ECONNRESET, and it is as stale.
            self._fail_replayable(f"reused connection broken: {exc.strerror or exc}")
            return
        if isinstance(exc, ssl.SSLError):
            self.fail(FetchFailure(ErrorKind.TLS_ERROR, f"TLS failure: {exc.reason or exc}"))
            return
        verb = "sending the request" if sending else "reading the response"
        self.fail(FetchFailure(ErrorKind.CONNECTION_CLOSED, f"{exc.strerror or exc} while {verb}"))

    def _fail_replayable(self, detail: str) -> None:
        task = self.task
        self.task = None
        self.close()
        if task is not None:
            failure = FetchFailure(ErrorKind.CONNECTION_CLOSED, detail)
            self.owner.exchange_failed(self, task, failure, True, self.http.head())

    def next_cycle(self) -> int:
        """After a complete response: how many more requests it can take (its driver's answer; 0: it closes)."""
        if self.channel.sending:
            # The server answered before the request's body was all sent (a 413, a 401): the rest
            # of the body would go out ahead of the next request, which the server would read as
            # body bytes.  Closing drops it, as curl does.
            return 0
        self.http.next_cycle()
        return self.http.capacity

    def make_idle(self) -> None:
        """Keep the connection for reuse; the owner has checked its service time and request count."""
        self.channel.idle = True
        self.idle_since = self.loop.now
        self._arm(self._deadline())

    # -- timing -------------------------------------------------------------

    def _deadline(self) -> float:
        """The next moment something may have expired, in the current state."""
        channel = self.channel
        config = self.config
        if channel.idle:
            return min(self.idle_since + config.idle_timeout, self.reuse_deadline)
        state = channel.state
        if state is CLOSED:
            return _INF
        task = self.task
        deadline = task.deadline if task is not None else _INF
        if state is OPEN:
            deadline = min(deadline, channel.last_activity + config.read_timeout)
            if config.low_speed_limit:
                deadline = min(deadline, self._speed_mark_at + config.low_speed_time)
            return deadline
        return min(deadline, channel.connect_deadline)

    def _arm(self, deadline: float) -> None:
        timer = self._timer
        if timer is not None:
            if timer.callback is not None and timer.when <= deadline:
                return  # fires early, then re-arms: cheaper than a heap update now
            timer.cancel()
        self._timer = None if deadline == _INF else self.loop.timers.call_at(deadline, _channel_deadline, self.channel)

    def _on_timer(self) -> None:
        try:
            self._check_deadlines()
        except Exception as exc:  # noqa: BLE001 - as for readiness events: one connection's fault, not the loop's
            self.on_internal_error(exc)

    def _check_deadlines(self) -> None:
        self._timer = None
        now = self.loop.now
        channel = self.channel
        if channel.state is CLOSED:
            return
        if channel.idle:
            if now >= self.idle_since + self.config.idle_timeout:
                self.owner.idle_expired(self, service_time=False)
                return
            if now >= self.reuse_deadline:
                self.owner.idle_expired(self, service_time=True)
                return
        else:
            failure = self._expired(now)
            if failure is not None:
                self.fail(failure)
                return
        self._arm(self._deadline())

    def _expired(self, now: float) -> FetchFailure | None:
        config = self.config
        task = self.task
        channel = self.channel
        if task is not None and now >= task.deadline:
            return FetchFailure(ErrorKind.TIMEOUT, f"request_timeout of {config.request_timeout} s passed")
        if channel.state is not OPEN:
            return channel.expired(now)
        if now - channel.last_activity >= config.read_timeout:
            return FetchFailure(ErrorKind.READ_TIMEOUT, f"no data for {config.read_timeout} s")
        if config.low_speed_limit and now - self._speed_mark_at >= config.low_speed_time:
            rate = (channel.received - self._speed_mark_bytes) / (now - self._speed_mark_at)
            if rate < config.low_speed_limit:
                return FetchFailure(
                    ErrorKind.READ_TIMEOUT,
                    f"below low_speed_limit: {rate:.0f} B/s for {config.low_speed_time} s",
                )
            self._speed_mark_at = now
            self._speed_mark_bytes = channel.received
        return None

    # -- ending -------------------------------------------------------------

    def fail(self, failure: FetchFailure, head: Response | None = None) -> None:
        """End the connection and the request it carries with ``failure`` (after ``head``, else the exchange's).

        Before a proxy's tunnel stands, the failure is the proxy's, and its detail says which.
        """
        self._end(self.channel.attributed(failure), head)

    def _end(self, failure: FetchFailure, head: Response | None = None) -> None:
        task = self.task
        self.task = None
        self.close()
        if task is not None:
            if self.config.record_exchanges:  # a response cut off after its head is archived as far as it came
                cut = self.http.cut_exchange(task.url, self.peer, failure.kind)
                if cut is not None:
                    task.exchanges = (*task.exchanges, cut)
            self.owner.exchange_failed(self, task, failure, False, head if head is not None else self.http.head())

    def close(self) -> None:
        """Release the channel and the timer; tells the owner once."""
        channel = self.channel
        if channel.state is CLOSED:
            return
        was_idle = channel.idle
        channel.idle = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        channel.close()
        self.owner.connection_closed(self, was_idle)

    def on_internal_error(self, exc: Exception) -> None:
        """A bug in a handler must cost one request, never the loop."""
        self.owner.connection_crashed(self, exc)


def _channel_deadline(channel: Channel) -> None:
    """A connection's timer, which carries its channel (see the module's docstring)."""
    cast("Connection[Any]", channel.user)._on_timer()

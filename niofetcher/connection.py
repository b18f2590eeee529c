"""One connection: a non-blocking socket, its transport and its HTTP/1.1 state.

Theory of operation.  A connection is born bound to the request that caused
it and walks RESOLVING -> CONNECTING -> HANDSHAKING -> ACTIVE; after a
response it is either IDLE (kept for reuse, still watched for readability so
that a server closing it is noticed at once) or CLOSED.

Through a proxy (``proxy``, taken from the task that opens it: a connection
only ever carries requests of one route) the name looked up and the address
connected to are the proxy's.  Plain http then goes on as above, with the
request target in absolute form (``GET http://host:port/path``).  https
takes one more step, TUNNELING, between CONNECTING and HANDSHAKING: a
``CONNECT host:port`` is sent and the proxy's answer read (http11's
TunnelRequest); after a 2xx the TLS handshake with the origin runs over the
same socket, as it would have on a direct one.  The connect timeout covers
TCP, CONNECT and TLS together.  Until the tunnel stands, every failure's
detail starts with "proxy host:port", never the credentials; a proxy's
error answer (a 407, or a CONNECT refused with any status) is ``proxy_error``
with that status and head in the result.  It reports to its
owner, the engine, through four calls: ``exchange_done`` (with the
``Response``) and ``exchange_failed`` (with the head, if one came) for the
request it carried, ``connection_closed`` exactly once when it goes away,
and ``idle_expired`` when its idle or service time runs out.

This file is the one boundary where OSError and friends become ErrorKinds.

Timeouts use one timer per connection, armed lazily: receiving data only
moves ``last_activity``; when the timer fires it compares the real deadline
with the clock and re-arms if the deadline has moved.  So the timer heap is
not touched per received packet.
"""

from __future__ import annotations

import enum
import errno
import ipaddress
import os
import socket
import ssl
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

from .config import Address, FetcherConfig, IPNetwork, Sockaddr
from .errors import ErrorKind, FetchFailure
from .http11 import ClientHTTP11, Response, TunnelRequest
from .loop import READ, WRITE, Loop
from .models import Counters
from .request import Task
from .timers import Timer
from .transport import WANT_READ, WANT_WRITE, PlainTransport, TLSSessions, TLSTransport, Transport
from .urls import Origin, Proxy, bracketed


class ConnectionState(enum.IntEnum):
    """Where a connection is in its life (see the module docstring)."""

    RESOLVING = 0
    CONNECTING = 1
    HANDSHAKING = 2
    ACTIVE = 3
    IDLE = 4
    CLOSED = 5
    TUNNELING = 6  # through a proxy: CONNECT sent, its answer awaited (between CONNECTING and HANDSHAKING)


# The states as globals, for the per-event paths: on Python 3.11 an Enum member read
# through its class goes through EnumType.__getattr__, six times the cost of a global.
RESOLVING, CONNECTING, HANDSHAKING = ConnectionState.RESOLVING, ConnectionState.CONNECTING, ConnectionState.HANDSHAKING
ACTIVE, IDLE, CLOSED = ConnectionState.ACTIVE, ConnectionState.IDLE, ConnectionState.CLOSED
TUNNELING = ConnectionState.TUNNELING
_BEFORE_TUNNEL = frozenset((RESOLVING, CONNECTING, TUNNELING))  # a failure then is the proxy's
_IN_PROGRESS = {errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN, errno.EALREADY}
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
    """A socket plus h11 state, driven by readiness events from the loop; ``slot`` is its host's."""

    __slots__ = (
        "_absolute_form",
        "_address_index",
        "_addresses",
        "_connect_deadline",
        "_counters",
        "_denied",
        "_last_connect_error",
        "_out",
        "_received",
        "_refusals",
        "_speed_mark_at",
        "_speed_mark_bytes",
        "_timer",
        "_tunnel",
        "carried",
        "config",
        "established_at",
        "http",
        "idle_since",
        "interest",
        "last_activity",
        "loop",
        "owner",
        "peer",
        "proxy",
        "requests_done",
        "reuse_deadline",
        "reused",
        "session_reused",
        "slot",
        "sock",
        "state",
        "task",
        "transport",
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
        self.state = RESOLVING
        self.interest = 0
        self.sock: socket.socket | None = None
        self.peer: str | None = None  # "ip:port" connected to (a proxy's, through one): FetchResult.peer
        self.transport: Transport | None = None
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
        self.last_activity = loop.now
        self.idle_since = 0.0
        self._connect_deadline = loop.now + config.connect_timeout
        self._addresses: Sequence[Address] = ()
        self._refusals = 0
        self._address_index = 0
        self._last_connect_error = ""
        self._out: memoryview | None = None
        self._timer: Timer | None = None
        self._speed_mark_at = 0.0
        self._speed_mark_bytes = 0
        self._received = 0
        self._denied = denied
        self.session_reused = False  # the TLS handshake resumed an earlier session
        self.proxy: Proxy | None = task.proxy
        self._absolute_form = self.proxy is not None and slot.origin.scheme == "http"
        self._tunnel: TunnelRequest | None = None
        self._arm(self._deadline())

    @property
    def idle(self) -> bool:
        """Kept for reuse, with no request: an event of its is an EOF or stray bytes (Loop.run_once)."""
        return self.state is IDLE

    def __repr__(self) -> str:
        via = f" via {self.proxy.authority}" if self.proxy is not None else ""
        return f"<Connection {self.slot.origin}{via} {self.state.name} served={self.requests_done}>"

    # -- opening ------------------------------------------------------------

    def connect(self, addresses: Sequence[Address]) -> None:
        """Try the resolved addresses in turn until one accepts."""
        if self.state is not RESOLVING:
            return  # timed out or cancelled while the lookup ran
        self._addresses = addresses
        self._address_index = 0
        self._refusals = 0  # addresses the network-safety settings forbade
        self._try_next_address()

    def _try_next_address(self) -> None:
        while self._address_index < len(self._addresses):
            family, sockaddr = self._addresses[self._address_index]
            self._address_index += 1
            refusal = self._refusal(sockaddr)
            if refusal:
                self._last_connect_error = refusal
                self._refusals += 1
                continue
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                self._last_connect_error = f"socket(): {exc.strerror or exc}"
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            err = sock.connect_ex(sockaddr)
            if err == 0 or err in _IN_PROGRESS:
                self.sock = sock
                self.state = CONNECTING
                if err == 0:
                    self._on_tcp_connected()
                else:
                    self.loop.set_interest(self, sock, WRITE)
                return
            sock.close()
            self._last_connect_error = f"{_address_text(sockaddr)}: {os.strerror(err)}"
        refused = 0 < self._refusals == len(self._addresses)  # every address forbidden, none tried
        self.fail(FetchFailure(ErrorKind.CONNECT_ERROR, self._last_connect_error or "no address to connect to",
                               refused=refused))

    def _refusal(self, sockaddr: Sockaddr) -> str:
        """Why the network-safety settings forbid this resolved address, or ''.

        Through a proxy, allowed_ports holds for the origin's port, and deny_networks
        cannot be checked here at all: the proxy resolves the origin's name, not us.
        """
        allowed = self.config.allowed_ports
        if self.proxy is not None:
            port = self.slot.origin.port
            return f"port {port} of {self.slot.origin} is not in allowed_ports" if allowed and port not in allowed else ""
        if allowed is not None and sockaddr[1] not in allowed:
            return f"port {sockaddr[1]} is not in allowed_ports"
        if self._denied:
            address = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
            mapped = getattr(address, "ipv4_mapped", None)
            for network in self._denied:
                if address in network or (mapped is not None and mapped in network):
                    return f"address {address} is in denied network {network}"
        return ""

    def _finish_connect(self) -> None:
        sock = self.sock
        assert sock is not None
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self.loop.set_interest(self, sock, 0)
            sock.close()
            self.sock = None
            sockaddr = self._addresses[self._address_index - 1][1]
            self._last_connect_error = f"{_address_text(sockaddr)}: {os.strerror(err)}"
            self._try_next_address()
            return
        self._on_tcp_connected()

    def _on_tcp_connected(self) -> None:
        sock = self.sock
        assert sock is not None
        self.peer = _address_text(self._addresses[self._address_index - 1][1])  # the address just connected
        if self.slot.origin.scheme == "https":
            if self.proxy is not None:
                self._start_tunnel(self.proxy)
            else:
                self._start_tls()
            return
        self.transport = PlainTransport(sock)
        self.state = HANDSHAKING
        self._continue_handshake()

    def _start_tls(self) -> None:
        sock = self.sock
        assert sock is not None
        origin = self.slot.origin
        self.loop.set_interest(self, sock, 0)  # the SSL socket takes the descriptor over
        try:
            session = self.slot.tls_sessions.take(self._counters)
            tls = TLSTransport(sock, self.owner.tls_context(), origin.host, session)
        except (OSError, ValueError) as exc:
            self.fail(FetchFailure(ErrorKind.TLS_ERROR, f"cannot start TLS: {exc}"))
            return
        self.sock = tls.sock
        self.transport = tls
        self.state = HANDSHAKING
        self._continue_handshake()

    # -- a tunnel through a proxy -------------------------------------------

    def _start_tunnel(self, proxy: Proxy) -> None:
        assert self.sock is not None
        self.transport = PlainTransport(self.sock)
        self.state = TUNNELING
        origin = self.slot.origin
        headers = [("User-Agent", self.config.user_agent)]
        if proxy.authorization is not None:
            headers.append(("Proxy-Authorization", proxy.authorization))
        tunnel = self._tunnel = TunnelRequest(self.config.max_header_size)
        try:
            data = tunnel.start(f"{bracketed(origin.host)}:{origin.port}", headers)
        except FetchFailure as failure:
            self.fail(failure)
            return
        self._out = memoryview(data)
        self._flush()

    def _read_tunnel_answer(self) -> None:
        transport = self.transport
        tunnel = self._tunnel
        assert transport is not None and tunnel is not None
        try:
            n = transport.recv_into(self.loop.recv_view)
        except OSError as exc:
            self.fail(FetchFailure(ErrorKind.CONNECTION_CLOSED, f"{exc.strerror or exc} before answering CONNECT"))
            return
        if n < 0:
            return
        self._received += n
        self._counters.bytes_received += n
        try:
            head = tunnel.receive(bytes(self.loop.recv_view[:n]))
        except FetchFailure as failure:
            self.fail(failure)
            return
        if head is None:
            return
        self._tunnel = None
        if 200 <= head.status < 300:
            self._start_tls()
            return
        origin = self.slot.origin
        answer = f"{head.status} {head.reason}".rstrip()
        self.fail(FetchFailure(
            ErrorKind.PROXY_ERROR, f"answered {answer} to CONNECT {bracketed(origin.host)}:{origin.port}"
        ), head)

    def _continue_handshake(self) -> None:
        transport = self.transport
        assert transport is not None and self.sock is not None
        try:
            want = transport.handshake()
        except ssl.SSLCertVerificationError as exc:
            self.fail(FetchFailure(ErrorKind.TLS_ERROR, f"certificate verify failed: {exc.verify_message}"))
            return
        except ssl.SSLError as exc:
            self.fail(FetchFailure(ErrorKind.TLS_ERROR, f"TLS handshake failed: {exc.reason or exc}"))
            return
        except OSError as exc:
            self.fail(FetchFailure(ErrorKind.TLS_ERROR, f"{exc.strerror or exc} during the TLS handshake"))
            return
        if want == WANT_READ:
            self.loop.set_interest(self, self.sock, READ)
        elif want == WANT_WRITE:
            self.loop.set_interest(self, self.sock, WRITE)
        else:
            transport.established(self)
            self.established_at = self.loop.now
            service_time = self.config.connection_service_time
            if service_time is not None:
                self.reuse_deadline = self.established_at + service_time
            task = self.task
            assert task is not None
            self._begin(task)

    def tls_established(self, resumed: bool) -> None:
        """Its TLS handshake completed (transport.SecureUser); ``resumed``: an earlier session's."""
        self.session_reused = resumed
        self.owner.tls_handshake_done(resumed)

    # -- exchanges ----------------------------------------------------------

    def start(self, task: Task) -> None:
        """Send ``task``'s request on this idle connection."""
        self.task = task
        self.carried = task
        self._begin(task)

    def _begin(self, task: Task) -> None:
        self.state = ACTIVE
        self.reused = self.requests_done > 0
        now = self.loop.now
        self.last_activity = now
        self._speed_mark_at = now
        self._speed_mark_bytes = self._received
        target = task.target
        # Through a proxy, plain http names the whole URL (RFC 9112 3.2.2): the proxy connects on.
        path = f"http://{target.host_header}{target.path}" if self._absolute_form else target.path
        try:
            data = self.http.start_request(task.method, path, task.wire_headers(), task.body)
        except FetchFailure as failure:
            self.fail(failure)
            return
        self._out = memoryview(data)
        self._arm(self._deadline())
        self._flush()

    def _flush(self) -> None:
        out = self._out
        transport = self.transport
        assert out is not None and transport is not None and self.sock is not None
        while out:
            try:
                sent = transport.send(out)
            except OSError as exc:
                self._broken(exc, sending=True)
                return
            if sent < 0:
                self._out = out
                self.loop.set_interest(self, self.sock, READ | WRITE)
                return
            out = out[sent:]
            self.last_activity = self.loop.now
        self._out = None
        self.loop.set_interest(self, self.sock, READ)

    def on_writable(self) -> None:
        """The socket is writable: send on, or finish the connect or a handshake step."""
        state = self.state
        if state is ACTIVE or state is TUNNELING:
            self._flush()
        elif state is CONNECTING:
            self._finish_connect()
        elif state is HANDSHAKING:
            self._continue_handshake()

    def on_readable(self) -> None:
        """The socket is readable: read what there is into the exchange (an idle one closes)."""
        state = self.state
        if state is HANDSHAKING:
            self._continue_handshake()
            return
        if state is TUNNELING:
            self._read_tunnel_answer()
            return
        transport = self.transport
        assert transport is not None
        if state is IDLE:
            # EOF or stray bytes on an idle connection: it cannot carry another request.
            self.close()
            return
        loop = self.loop
        view = loop.recv_view
        http = self.http
        while True:
            try:
                n = transport.recv_into(view)
            except OSError as exc:
                self._broken(exc, sending=False)
                return
            if n < 0:
                if n == WANT_WRITE:
                    self.loop.set_interest(self, self.sock, READ | WRITE)  # type: ignore[arg-type]
                return
            self._received += n
            self._counters.bytes_received += n
            self.last_activity = loop.now
            if n == 0 and not http.response_started and self.reused:
                self._fail_replayable("the server closed a reused connection before responding")
                return
            try:
                complete = http.receive(bytes(view[:n]) if n else b"")
            except FetchFailure as failure:
                self.fail(failure)
                return
            if complete:
                self._exchange_complete(http.response)  # type: ignore[arg-type]
                return
            # Decrypted bytes waiting inside the SSL object do not make the socket readable.
            if not n or not transport.pending():
                return

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
            self.transport.served(self.slot.tls_sessions)  # type: ignore[union-attr]
        self.owner.exchange_done(self, task, response)

    def _broken(self, exc: OSError, sending: bool) -> None:
        if isinstance(exc, ssl.SSLError):
            self.fail(FetchFailure(ErrorKind.TLS_ERROR, f"TLS failure: {exc.reason or exc}"))
            return
        if not self.http.response_started and self.reused:
            self._fail_replayable(f"reused connection broken: {exc.strerror or exc}")
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
        self.http.next_cycle()
        return self.http.capacity

    def make_idle(self) -> None:
        """Keep the connection for reuse; the owner has checked its service time and request count."""
        self.state = IDLE
        self.idle_since = self.loop.now
        self._arm(self._deadline())

    # -- timing -------------------------------------------------------------

    def _deadline(self) -> float:
        """The next moment something may have expired, in the current state."""
        state = self.state
        config = self.config
        if state is IDLE:
            return min(self.idle_since + config.idle_timeout, self.reuse_deadline)
        if state is CLOSED:
            return _INF
        task = self.task
        deadline = task.deadline if task is not None else _INF
        if state is ACTIVE:
            deadline = min(deadline, self.last_activity + config.read_timeout)
            if config.low_speed_limit:
                deadline = min(deadline, self._speed_mark_at + config.low_speed_time)
            return deadline
        return min(deadline, self._connect_deadline)

    def _arm(self, deadline: float) -> None:
        timer = self._timer
        if timer is not None:
            if timer.callback is not None and timer.when <= deadline:
                return  # fires early, then re-arms: cheaper than a heap update now
            timer.cancel()
        self._timer = None if deadline == _INF else self.loop.timers.call_at(deadline, Connection._on_timer, self)

    def _on_timer(self) -> None:
        try:
            self._check_deadlines()
        except Exception as exc:  # noqa: BLE001 - as for readiness events: one connection's fault, not the loop's
            self.on_internal_error(exc)

    def _check_deadlines(self) -> None:
        self._timer = None
        now = self.loop.now
        state = self.state
        if state is CLOSED:
            return
        if state is IDLE:
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
        if task is not None and now >= task.deadline:
            return FetchFailure(ErrorKind.TIMEOUT, f"request_timeout of {config.request_timeout} s passed")
        if self.state is ACTIVE:
            if now - self.last_activity >= config.read_timeout:
                return FetchFailure(ErrorKind.READ_TIMEOUT, f"no data for {config.read_timeout} s")
            if config.low_speed_limit and now - self._speed_mark_at >= config.low_speed_time:
                rate = (self._received - self._speed_mark_bytes) / (now - self._speed_mark_at)
                if rate < config.low_speed_limit:
                    return FetchFailure(
                        ErrorKind.READ_TIMEOUT,
                        f"below low_speed_limit: {rate:.0f} B/s for {config.low_speed_time} s",
                    )
                self._speed_mark_at = now
                self._speed_mark_bytes = self._received
        elif now >= self._connect_deadline:
            if self.state is RESOLVING and not self._addresses:
                return FetchFailure(ErrorKind.DNS_ERROR, f"name lookup took longer than {config.connect_timeout} s")
            if self.state is TUNNELING:
                return FetchFailure(ErrorKind.CONNECT_TIMEOUT, f"no answer to CONNECT within {config.connect_timeout} s")
            return FetchFailure(ErrorKind.CONNECT_TIMEOUT, f"not connected within {config.connect_timeout} s")
        return None

    # -- ending -------------------------------------------------------------

    def fail(self, failure: FetchFailure, head: Response | None = None) -> None:
        """End the connection and the request it carries with ``failure`` (after ``head``, else the exchange's).

        Before a proxy's tunnel stands, the failure is the proxy's, and its detail says which.
        """
        if self.proxy is not None and self.state in _BEFORE_TUNNEL:
            failure = FetchFailure(failure.kind, f"proxy {self.proxy}: {failure.detail}")
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
        """Release the socket and the timer; tells the owner once."""
        if self.state is CLOSED:
            return
        was_idle = self.state is IDLE
        self.state = CLOSED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        sock = self.sock
        if sock is not None:
            self.loop.set_interest(self, sock, 0)
            sock.close()
            self.sock = None
        self._out = None
        self._tunnel = None
        self.owner.connection_closed(self, was_idle)

    def on_internal_error(self, exc: Exception) -> None:
        """A bug in a handler must cost one request, never the loop."""
        self.owner.connection_crashed(self, exc)


def _address_text(sockaddr: Sockaddr) -> str:
    return f"{bracketed(sockaddr[0])}:{sockaddr[1]}"

"""One channel: a non-blocking socket and its transport, bytes in and out; no HTTP.

Theory of operation.  A channel walks RESOLVING -> CONNECTING -> HANDSHAKING
-> OPEN, then CLOSED.  It connects to the resolved addresses in turn (those
that ``allowed_ports`` or ``deny_networks`` forbid are refused, never tried),
runs the TLS handshake for https (transport.py; the ALPN list is the TLS
context's) and, once OPEN, sends what its user gives it and hands on what
arrives.  The connect timeout covers TCP, the CONNECT and TLS together
(``expired``).

Through a proxy (``proxy``: a channel only ever carries one route) the name
looked up and the address connected to are the proxy's.  Plain http is then
OPEN at once (its user writes the request target in absolute form); https
takes one more step, TUNNELING, between CONNECTING and HANDSHAKING: a
``CONNECT host:port`` is sent and the proxy's answer read (http11's
TunnelRequest, the small codec of that one exchange); after a 2xx the TLS
handshake with the origin runs over the same socket, as it would have on a
direct one.  Until the tunnel stands, every failure's detail starts with
"proxy host:port", never the credentials (``attributed``); a proxy's error
answer (a 407, or a CONNECT refused with any status) is ``proxy_error``
with that status and head.

It reports to its user (connection.py, which drives HTTP over it) through
``ChannelUser``: ``channel_open`` once, ``channel_data`` with each read's
bytes, ``channel_broken`` for a socket error once OPEN, ``channel_failed``
before, and ``tls_established``.  ``idle``, which its user sets, tells the
loop that an event now is the peer's EOF or stray bytes (Loop.run_once).

This file and transport.py are where OSError and friends become ErrorKinds.
"""

from __future__ import annotations

import enum
import errno
import ipaddress
import os
import socket
import ssl
from collections.abc import Callable, Sequence
from typing import Protocol

from .config import Address, FetcherConfig, IPNetwork, Sockaddr
from .errors import ErrorKind, FetchFailure
from .http11 import Response, TunnelRequest
from .loop import READ, WRITE, Loop
from .models import Counters
from .transport import WANT_READ, WANT_WRITE, PlainTransport, TLSSessions, TLSTransport, Transport
from .urls import Origin, Proxy, bracketed


class ChannelState(enum.IntEnum):
    """Where a channel is in its life (see the module docstring)."""

    RESOLVING = 0
    CONNECTING = 1
    HANDSHAKING = 2
    OPEN = 3
    CLOSED = 5
    TUNNELING = 6  # through a proxy: CONNECT sent, its answer awaited (between CONNECTING and HANDSHAKING)


# The states as globals, for the per-event paths: on Python 3.11 an Enum member read
# through its class goes through EnumType.__getattr__, six times the cost of a global.
RESOLVING, CONNECTING, HANDSHAKING = ChannelState.RESOLVING, ChannelState.CONNECTING, ChannelState.HANDSHAKING
OPEN, CLOSED, TUNNELING = ChannelState.OPEN, ChannelState.CLOSED, ChannelState.TUNNELING
_BEFORE_TUNNEL = frozenset((RESOLVING, CONNECTING, TUNNELING))  # a failure then is the proxy's
_IN_PROGRESS = {errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN, errno.EALREADY}


class ChannelUser(Protocol):
    """What a channel reports to: the connection driving a protocol over it."""

    def channel_open(self) -> None:
        """Connected (and through TLS, or the tunnel and TLS): bytes may be sent."""

    def channel_data(self, data: bytes) -> bool:
        """``data`` arrived (``b""``: the peer closed); True when no more is to be read now."""

    def channel_broken(self, exc: OSError, sending: bool) -> None:
        """The socket failed once OPEN, ``sending`` or reading."""

    def channel_failed(self, failure: FetchFailure, head: Response | None = None) -> None:
        """It could not open: connect, tunnel (``head``: the proxy's answer) or TLS handshake."""

    def tls_established(self, resumed: bool) -> None:
        """The TLS handshake completed; ``resumed``: an earlier session's."""

    def close(self) -> None:
        """Close, the channel with it: an idle channel's peer closed or sent stray bytes."""

    def on_internal_error(self, exc: Exception) -> None:
        """A handler raised ``exc``: a bug, to cost this connection and its request only."""


class _Gone:
    """The user of a closed channel once its last event was handled: nothing reaches it."""

    def channel_open(self) -> None:
        pass

    def channel_data(self, data: bytes) -> bool:
        return True

    def channel_broken(self, exc: OSError, sending: bool) -> None:
        pass

    def channel_failed(self, failure: FetchFailure, head: Response | None = None) -> None:
        pass

    def tls_established(self, resumed: bool) -> None:
        pass

    def close(self) -> None:
        pass

    def on_internal_error(self, exc: Exception) -> None:
        pass


GONE: ChannelUser = _Gone()


class Channel:
    """A socket and its transport, driven by readiness events from the loop (a ``loop.Pollable``)."""

    __slots__ = (
        "_address_index",
        "_addresses",
        "_counters",
        "_denied",
        "_last_connect_error",
        "_out",
        "_refusals",
        "_tls_context",
        "_tunnel",
        "config",
        "connect_deadline",
        "idle",
        "interest",
        "last_activity",
        "loop",
        "may_try",
        "origin",
        "peer",
        "proxy",
        "received",
        "sessions",
        "sock",
        "state",
        "transport",
        "user",
    )

    def __init__(
        self, user: ChannelUser, loop: Loop, config: FetcherConfig, origin: Origin, proxy: Proxy | None,
        sessions: TLSSessions, tls_context: Callable[[], ssl.SSLContext], counters: Counters,
        denied: Sequence[IPNetwork],
    ) -> None:
        self.user = user
        self.loop = loop
        self.config = config
        self.origin = origin
        self.proxy = proxy
        self.sessions = sessions
        self._tls_context = tls_context
        self._counters = counters
        self._denied = denied
        self.state = RESOLVING
        self.interest = 0
        self.idle = False
        self.sock: socket.socket | None = None
        self.peer: str | None = None  # "ip:port" connected to (a proxy's, through one): FetchResult.peer
        self.transport: Transport | None = None
        self.last_activity = loop.now  # when a byte last went out or came in
        self.received = 0  # bytes, over its life
        self.connect_deadline = loop.now + config.connect_timeout
        self._addresses: Sequence[Address] = ()
        self._refusals = 0
        self._address_index = 0
        self._last_connect_error = ""
        self._out: memoryview | None = None
        self._tunnel: TunnelRequest | None = None
        # Asked before each address is tried, set by its owner: with per-IP limits the host table's
        # ``may_connect``, which moves the connection's count to the address it falls back to.
        self.may_try: Callable[[Sockaddr], bool] | None = None

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
            may_try = self.may_try
            if may_try is not None and not may_try(sockaddr):
                self._last_connect_error = f"{_address_text(sockaddr)}: no place there under the per-IP limits"
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
        self._fail(FetchFailure(ErrorKind.CONNECT_ERROR, self._last_connect_error or "no address to connect to",
                                refused=refused))

    def _refusal(self, sockaddr: Sockaddr) -> str:
        """Why the network-safety settings forbid this resolved address, or ''.

        Through a proxy, allowed_ports holds for the origin's port, and deny_networks
        cannot be checked here at all: the proxy resolves the origin's name, not us.
        """
        allowed = self.config.allowed_ports
        if self.proxy is not None:
            port = self.origin.port
            return f"port {port} of {self.origin} is not in allowed_ports" if allowed and port not in allowed else ""
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
        if self.origin.scheme == "https":
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
        self.loop.set_interest(self, sock, 0)  # the SSL socket takes the descriptor over
        try:
            session = self.sessions.take(self._counters)
            tls = TLSTransport(sock, self._tls_context(), self.origin.host, session)
        except (OSError, ValueError) as exc:
            self._fail(FetchFailure(ErrorKind.TLS_ERROR, f"cannot start TLS: {exc}"))
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
        origin = self.origin
        headers = [("User-Agent", self.config.user_agent)]
        if proxy.authorization is not None:
            headers.append(("Proxy-Authorization", proxy.authorization))
        tunnel = self._tunnel = TunnelRequest(self.config.max_header_size)
        try:
            data = tunnel.start(f"{bracketed(origin.host)}:{origin.port}", headers)
        except FetchFailure as failure:
            self._fail(failure)
            return
        self.send(data)

    def _read_tunnel_answer(self) -> None:
        transport = self.transport
        tunnel = self._tunnel
        assert transport is not None and tunnel is not None
        try:
            n = transport.recv_into(self.loop.recv_view)
        except OSError as exc:
            self._fail(FetchFailure(ErrorKind.CONNECTION_CLOSED, f"{exc.strerror or exc} before answering CONNECT"))
            return
        if n < 0:
            return
        self.received += n
        self._counters.bytes_received += n
        try:
            head = tunnel.receive(bytes(self.loop.recv_view[:n]))
        except FetchFailure as failure:
            self._fail(failure)
            return
        if head is None:
            return
        self._tunnel = None
        if 200 <= head.status < 300:
            self._start_tls()
            return
        origin = self.origin
        answer = f"{head.status} {head.reason}".rstrip()
        self._fail(FetchFailure(
            ErrorKind.PROXY_ERROR, f"answered {answer} to CONNECT {bracketed(origin.host)}:{origin.port}"
        ), head)

    def _continue_handshake(self) -> None:
        transport = self.transport
        assert transport is not None and self.sock is not None
        try:
            want = transport.handshake()
        except ssl.SSLCertVerificationError as exc:
            self._fail(FetchFailure(ErrorKind.TLS_ERROR, f"certificate verify failed: {exc.verify_message}"))
            return
        except ssl.SSLError as exc:
            self._fail(FetchFailure(ErrorKind.TLS_ERROR, f"TLS handshake failed: {exc.reason or exc}"))
            return
        except OSError as exc:
            self._fail(FetchFailure(ErrorKind.TLS_ERROR, f"{exc.strerror or exc} during the TLS handshake"))
            return
        if want == WANT_READ:
            self.loop.set_interest(self, self.sock, READ)
        elif want == WANT_WRITE:
            self.loop.set_interest(self, self.sock, WRITE)
        else:
            transport.established(self.user)
            self.state = OPEN
            self.user.channel_open()

    def _fail(self, failure: FetchFailure, head: Response | None = None) -> None:
        self.user.channel_failed(self.attributed(failure), head)

    def attributed(self, failure: FetchFailure) -> FetchFailure:
        """``failure`` as its user reports it: before a proxy's tunnel stands, the proxy's, and its detail says which."""
        if self.proxy is not None and self.state in _BEFORE_TUNNEL:
            return FetchFailure(failure.kind, f"proxy {self.proxy}: {failure.detail}")
        return failure

    # -- bytes out and in ---------------------------------------------------

    @property
    def sending(self) -> bool:
        """Whether bytes given to :meth:`send` wait for the socket still."""
        return self._out is not None

    def send(self, data: bytes) -> None:
        """Send ``data``, now as far as the socket takes it, the rest as it becomes writable."""
        self._out = memoryview(data)
        self._flush()

    def _flush(self) -> None:
        out = self._out
        transport = self.transport
        assert out is not None and transport is not None and self.sock is not None
        while out:
            try:
                sent = transport.send(out)
            except OSError as exc:
                self.user.channel_broken(exc, sending=True)
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
        if state is OPEN or state is TUNNELING:
            self._flush()
        elif state is CONNECTING:
            self._finish_connect()
        elif state is HANDSHAKING:
            self._continue_handshake()

    def on_readable(self) -> None:
        """The socket is readable: hand what there is to the user (an idle channel's user closes)."""
        state = self.state
        if state is HANDSHAKING:
            self._continue_handshake()
            return
        if state is TUNNELING:
            self._read_tunnel_answer()
            return
        user = self.user
        if self.idle:
            # EOF or stray bytes on an idle channel: it cannot carry another request.
            user.close()
            return
        transport = self.transport
        assert transport is not None
        loop = self.loop
        view = loop.recv_view
        counters = self._counters
        while True:
            try:
                n = transport.recv_into(view)
            except OSError as exc:
                user.channel_broken(exc, sending=False)
                return
            if n < 0:
                if n == WANT_WRITE:
                    loop.set_interest(self, self.sock, READ | WRITE)  # type: ignore[arg-type]
                return
            self.received += n
            counters.bytes_received += n
            self.last_activity = loop.now
            if user.channel_data(bytes(view[:n]) if n else b""):
                return
            # Decrypted bytes waiting inside the SSL object do not make the socket readable.
            if not n or not transport.pending():
                return

    # -- deadlines and ending -------------------------------------------------

    def expired(self, now: float) -> FetchFailure | None:
        """Before OPEN: the failure of a connect timeout passed (the lookup's, the CONNECT's or the
        connect's); None while there is time."""
        if now < self.connect_deadline:
            return None
        timeout = self.config.connect_timeout
        state = self.state
        if state is RESOLVING and not self._addresses:
            return lookup_too_slow(timeout)
        if state is TUNNELING:
            return FetchFailure(ErrorKind.CONNECT_TIMEOUT, f"no answer to CONNECT within {timeout} s")
        return FetchFailure(ErrorKind.CONNECT_TIMEOUT, f"not connected within {timeout} s")

    def close(self) -> None:
        """Release the socket (its user tells whoever must know)."""
        self.state = CLOSED
        sock = self.sock
        if sock is not None:
            self.loop.set_interest(self, sock, 0)
            sock.close()
            self.sock = None
        self._out = None
        self._tunnel = None
        # The user holds this channel and this channel its user: a cycle that only the cyclic GC
        # would free, with all a connection holds (some 15 objects, and collections of the oldest
        # generation are the loop's longest pauses).  It is cut once the event at hand is handled:
        # a fault in handling it may still reach the user (``on_internal_error``), nothing after.
        self.loop.call_soon(self._let_go)

    def _let_go(self) -> None:
        self.user = GONE

    def on_internal_error(self, exc: Exception) -> None:
        """A bug in a handler must cost one request, never the loop."""
        self.user.on_internal_error(exc)


def lookup_too_slow(connect_timeout: float) -> FetchFailure:
    """A name lookup that outlasted the connect timeout: a connection's own, or the host table's (per-IP limits)."""
    return FetchFailure(ErrorKind.DNS_ERROR, f"name lookup took longer than {connect_timeout} s")


def _address_text(sockaddr: Sockaddr) -> str:
    return f"{bracketed(sockaddr[0])}:{sockaddr[1]}"

"""A channel carries bytes for a user that speaks no HTTP (issue 30: the channel knows no HTTP).

Each test drives a ``Channel`` with a real ``Loop`` in the test's own thread,
against a RawServer handler on 127.0.0.1 that speaks a line protocol: the
user below sends ``ping`` and reads until a newline, through ``ChannelUser``
alone, plain and over TLS (with a session resumed from a closed channel), and
is told of a refused address before any socket is made.
"""

from __future__ import annotations

import socket
import ssl
import time

import pytest
import trustme
from rawserver import ConnInfo, Handler

from niofetcher.channel import OPEN, Channel
from niofetcher.config import FetcherConfig
from niofetcher.errors import ErrorKind, FetchFailure
from niofetcher.http11 import Response
from niofetcher.loop import Loop
from niofetcher.models import Counters
from niofetcher.transport import TLSSessions, tls_context
from niofetcher.urls import Origin

pytestmark = pytest.mark.timeout(30)


def pong(sock: socket.socket, info: ConnInfo) -> None:
    """Answer one line with ``pong``, then wait for the client to close."""
    line = b""
    while not line.endswith(b"\n"):
        more = sock.recv(100)
        if not more:
            return
        line += more
    sock.sendall(b"pong\n")
    sock.recv(100)


class LineUser:
    """A ChannelUser of a line protocol: ``ping`` once open, done at the first newline back."""

    def __init__(self) -> None:
        self.events: list[object] = []
        self.received = b""
        self.channel: Channel | None = None

    @property
    def done(self) -> bool:
        return b"\n" in self.received or any(isinstance(event, tuple) for event in self.events)

    def channel_open(self) -> None:
        self.events.append("open")
        assert self.channel is not None
        self.channel.send(b"ping\n")

    def channel_data(self, data: bytes) -> bool:
        self.received += data
        return self.done or not data

    def channel_broken(self, exc: OSError, sending: bool) -> None:
        self.events.append(("broken", exc, sending))

    def channel_failed(self, failure: FetchFailure, head: Response | None = None) -> None:
        self.events.append(("failed", failure.kind, failure.refused))

    def tls_established(self, resumed: bool) -> None:
        self.events.append(f"tls resumed={resumed}")

    def close(self) -> None:
        assert self.channel is not None
        self.channel.close()

    def on_internal_error(self, exc: Exception) -> None:
        raise exc


def exchange(port: int, config: FetcherConfig, context: ssl.SSLContext | None = None,
             sessions: TLSSessions | None = None, counters: Counters | None = None) -> tuple[LineUser, Channel]:
    """Open a channel to ``port`` (https with ``context``), run the loop until the line came back or the
    channel failed, close it."""
    loop = Loop()
    user = LineUser()
    origin = Origin("https" if context is not None else "http", "127.0.0.1", port)
    channel = user.channel = Channel(
        user, loop, config, origin, None, sessions or TLSSessions(),
        lambda: context,  # type: ignore[arg-type,return-value]
        counters or Counters(), (),
    )
    try:
        channel.connect([(socket.AF_INET, ("127.0.0.1", port))])
        give_up = time.monotonic() + 10  # a bound on a hang, not a measurement
        while not user.done and time.monotonic() < give_up:
            loop.run_once(0.05)
    finally:
        channel.close()
        loop.close()
    return user, channel


def test_a_channel_carries_a_protocol_it_does_not_know(raw_server) -> None:
    srv = raw_server(pong, sock_timeout=3)
    counters = Counters()
    user, channel = exchange(srv.port, FetcherConfig(), counters=counters)
    assert user.events == ["open"] and user.received == b"pong\n"
    assert channel.peer == f"127.0.0.1:{srv.port}" and counters.bytes_received == channel.received == 5
    assert srv.requests == [] and srv.accepted == 1  # no HTTP request went over it


def test_a_forbidden_address_is_refused_before_any_socket(raw_server) -> None:
    srv = raw_server(pong, sock_timeout=3)
    user, channel = exchange(srv.port, FetcherConfig(allowed_ports=[srv.port + 1]))
    assert user.events == [("failed", ErrorKind.CONNECT_ERROR, True)] and channel.sock is None
    assert srv.accepted == 0


def tls(context: ssl.SSLContext, inner: Handler) -> Handler:
    def handler(sock: socket.socket, info: ConnInfo) -> None:
        with context.wrap_socket(sock, server_side=True) as tls_sock:
            inner(tls_sock, info)

    return handler


def test_over_tls_a_closed_channel_leaves_its_session_for_the_next(raw_server, tmp_path) -> None:
    """The TLS session is read once, when the next channel opens, from the first one's SSL object
    although that channel has closed (SSLSocket.session gives None then)."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    srv = raw_server(tls(server, pong), sock_timeout=3)
    config = FetcherConfig(ca_file=str(tmp_path / "ca.pem"))
    context, sessions, counters = tls_context(config), TLSSessions(), Counters()  # one context: sessions are its
    first, channel = exchange(srv.port, config, context, sessions, counters)
    assert first.events == ["tls resumed=False", "open"] and first.received == b"pong\n"
    channel.transport.served(sessions)  # type: ignore[union-attr]  # as a connection does after its first response
    assert channel.state is not OPEN and counters.tls_sessions_read == 0
    second, _ = exchange(srv.port, config, context, sessions, counters)
    assert second.events == ["tls resumed=True", "open"] and second.received == b"pong\n"
    assert counters.tls_sessions_read == 1 and sessions.unread is None

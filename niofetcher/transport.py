"""Byte transports under a connection: plain TCP now, TLS replaces it later.

A transport answers reads and writes with a count, or with WANT_READ /
WANT_WRITE when it cannot go on before the socket is ready for that.  The
connection never looks at BlockingIOError or ssl.SSLWantReadError itself,
so a TLS transport (whose reads may need the socket to be *writable*) slots
in without changing it.  Real failures are raised as OSError.
"""

from __future__ import annotations

import socket

WANT_READ = -1
WANT_WRITE = -2


class PlainTransport:
    """A connected non-blocking TCP socket."""

    __slots__ = ("sock",)

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def handshake(self) -> int:
        """Finish any protocol setup after TCP connects: 0 when done, else WANT_READ/WANT_WRITE."""
        return 0

    def recv_into(self, buffer: memoryview) -> int:
        """Bytes read into ``buffer`` (0 = the peer closed), or WANT_READ."""
        try:
            return self.sock.recv_into(buffer)
        except (BlockingIOError, InterruptedError):
            return WANT_READ

    def send(self, data: memoryview) -> int:
        """Bytes written, or WANT_WRITE."""
        try:
            return self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            return WANT_WRITE

    @property
    def session_reused(self) -> bool:
        return False

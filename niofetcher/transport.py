"""Byte transports under a connection: plain TCP now, TLS replaces it later.

A transport answers reads and writes with a count, or with WANT_READ /
WANT_WRITE when it cannot go on before the socket is ready for that.  The
connection never looks at BlockingIOError or ssl.SSLWantReadError itself,
so a TLS transport (whose reads may need the socket to be *writable*) slots
in without changing it.  Real failures are raised as OSError.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import ssl
import sys
import termios
from typing import TYPE_CHECKING, Any, Protocol

from .config import TLS_VERSIONS, FetcherConfig

if TYPE_CHECKING:
    from .models import Counters

log = logging.getLogger("niofetcher")

WANT_READ = -1
WANT_WRITE = -2
_NO_BYTES = bytes(4)  # FIONREAD's answer (a C int) when the socket holds nothing


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

    def pending(self) -> int:
        """Bytes already received but not yet read: always 0 for plain TCP."""
        return 0

    def established(self, user: SecureUser) -> None:
        """The handshake is done: nothing to tell over plain TCP."""

    def served(self, sessions: TLSSessions) -> None:
        """The first response came: no session to offer over plain TCP."""


class TLSTransport:
    """TLS over a connected non-blocking socket, every step driven by readiness.

    The handshake runs with ``do_handshake_on_connect=False`` and is retried on
    each readiness event until it completes; reads and writes after it may
    also need the *other* direction (a renegotiation or a key update), which
    is why the answers are WANT_READ / WANT_WRITE rather than "would block".
    A TLS record can hold more than one read's worth of data, and what is
    already decrypted inside the SSL object does not make the socket readable
    again: ``pending()`` tells the connection to read on before it waits.

    One SSL read gives one record at most (16 KiB, often less), so ``recv_into``
    reads on while the kernel holds more bytes of the socket (FIONREAD): a
    response that has arrived comes up in one piece per readiness event, as
    over plain TCP, rather than a record per event, each a pass through h11,
    the body buffer and the loop.  The outcome of a read made ahead that ends
    the stream (EOF, an error) is held for the next call, which ``pending()``
    asks for at once, so it reaches the connection as it would have.

    Closing is the socket's plain close, without unwrap(): a close_notify
    exchange would cost more round trips on a non-blocking socket for nothing,
    since HTTP/1.1 frames its own message ends.
    """

    __slots__ = ("_fd", "_held", "_session_of", "_ssl", "sock")

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str,
                 session: ssl.SSLSession | None) -> None:
        # The SSL socket takes over the descriptor; it is what the selector watches from now on.
        self._ssl = context.wrap_socket(
            sock, server_hostname=server_hostname, do_handshake_on_connect=False, session=session
        )
        self.sock: socket.socket = self._ssl
        self._fd = self._ssl.fileno()
        # What the session is read from, later (TLSSessions): the SSLSocket's inner SSL object,
        # which still gives it after the socket is closed, where SSLSocket.session gives None
        # (Python 3.11); the SSLSocket itself where there is no such object.
        self._session_of: Any = getattr(self._ssl, "_sslobj", None) or self._ssl
        self._held: OSError | None | int = None  # a read ahead's end of stream: 0 (EOF) or its error

    def handshake(self) -> int:
        """One step of the TLS handshake: 0 when done, else WANT_READ/WANT_WRITE."""
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            return WANT_READ
        except ssl.SSLWantWriteError:
            return WANT_WRITE
        return 0

    def recv_into(self, buffer: memoryview) -> int:
        """Decrypted bytes read into ``buffer`` (0 = the peer closed), or WANT_READ/WANT_WRITE:
        every whole record the socket holds, up to the buffer's size (see the class docstring)."""
        held = self._held
        if held is not None:
            self._held = None
            if isinstance(held, OSError):
                raise held
            return 0
        tls = self._ssl
        try:
            got = tls.recv_into(buffer)
        except ssl.SSLWantReadError:
            return WANT_READ
        except ssl.SSLWantWriteError:
            return WANT_WRITE
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            # A close without close_notify is how many servers end a read-until-close
            # body; h11 decides whether the response was complete.
            return 0
        size = len(buffer)
        while got and got < size and fcntl.ioctl(self._fd, termios.FIONREAD, _NO_BYTES) != _NO_BYTES:
            try:
                more = tls.recv_into(buffer[got:])
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break  # part of a record, or a write first: the next event's read goes on
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self._held = 0
                break
            except OSError as exc:
                self._held = exc
                break
            if not more:
                self._held = 0
                break
            got += more
        return got

    def send(self, data: memoryview) -> int:
        """Bytes of ``data`` taken, or WANT_WRITE/WANT_READ."""
        try:
            return self._ssl.send(data)
        except ssl.SSLWantWriteError:
            return WANT_WRITE
        except ssl.SSLWantReadError:
            return WANT_READ

    def pending(self) -> int:
        """Bytes decrypted inside the SSL object and not read yet (1 for a held end of stream:
        the next read gives it)."""
        return 1 if self._held is not None else self._ssl.pending()

    def established(self, user: SecureUser) -> None:
        """The handshake is done: tell ``user`` whether it resumed an earlier session."""
        user.tls_established(bool(self._ssl.session_reused))

    def served(self, sessions: TLSSessions) -> None:
        """The first response came (a TLS 1.3 ticket comes after the handshake, before it): after a full
        handshake this connection's session is the one the host's next connection offers."""
        if not self._ssl.session_reused:
            sessions.unread = self._session_of

    @property
    def session(self) -> ssl.SSLSession | None:
        """The TLS session (costly to read: see TLSSessions)."""
        session: ssl.SSLSession | None = self._session_of.session
        return session


Transport = PlainTransport | TLSTransport


class SecureUser(Protocol):
    """What a transport tells of its handshake."""

    def tls_established(self, resumed: bool) -> None:
        """The TLS handshake completed; ``resumed``: it resumed an earlier session."""


class TLSSessions:
    """One host's TLS session for its next connection to resume, read as late as possible.

    Reading a session (``SSLSocket.session``) costs ~0.13 ms and leaks ~6.7 KB each time on
    Python 3.11 (OpenSSL 3.0, CPython gh-116810), and a crawl never opens another connection to
    many hosts.  So a connection that made a full handshake leaves its SSL object here,
    ``unread``, after its first response, and its session is read when the host's next TLS
    connection opens, once: later ones resume that session, read no other, until one of them
    makes a full handshake again (the session expired) and leaves its own.  A host whose
    connection is reused and never replaced reads none.
    """

    __slots__ = ("saved", "unread")

    def __init__(self) -> None:
        self.saved: ssl.SSLSession | None = None
        self.unread: Any = None  # what the session is read from (TLSTransport); None once read

    def take(self, counters: Counters) -> ssl.SSLSession | None:
        """The session for a new connection to offer (None: a full handshake), read now if it is unread."""
        unread = self.unread
        if unread is not None:
            self.unread = None
            counters.tls_sessions_read += 1
            session = unread.session
            if session is not None and session.has_ticket:
                self.saved = session
        return self.saved


def tls_context(config: FetcherConfig) -> ssl.SSLContext:
    """The one client context of a configuration: its trust store, TLS versions and ciphers, ALPN http/1.1.

    A PROTOCOL_TLS_CLIENT context, as ``ssl.create_default_context`` makes a client's (TLS 1.2 and up,
    certificates and host names checked), not that function itself: it opens the environment's
    ``SSLKEYLOGFILE`` and raises when it cannot, which failed every https fetch of the process.
    Here a key log that cannot be written is said once, and TLS goes on without it.  The strict
    X.509 checks that function adds from Python 3.13 on (VERIFY_X509_STRICT) are left out with it,
    as Scrapy's own context leaves them: they refuse certificates that browsers accept.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if config.ca_file is not None:
        context.load_verify_locations(cafile=config.ca_file)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if not config.verify_tls:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.tls_min_version is not None:
        context.minimum_version = TLS_VERSIONS[config.tls_min_version]
    if config.tls_max_version is not None:
        context.maximum_version = TLS_VERSIONS[config.tls_max_version]
    if config.tls_ciphers is not None:
        context.set_ciphers(config.tls_ciphers)
    context.set_alpn_protocols(["http/1.1"])
    _log_keys(context)
    return context


def _log_keys(context: ssl.SSLContext) -> None:
    """Write the TLS secrets to ``SSLKEYLOGFILE`` (for Wireshark), as Python's default context does."""
    filename = os.environ.get("SSLKEYLOGFILE") if not sys.flags.ignore_environment else None
    if not filename:
        return
    try:
        context.keylog_filename = filename
    except OSError as exc:
        log.warning("Cannot write TLS session keys to %s (%s): niofetcher's TLS goes on without a key log",
                    filename, exc.strerror or exc)

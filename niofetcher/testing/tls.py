"""The test site over HTTPS: a server whose sockets are wrapped in TLS, and its contexts.

Given ``tls=`` (an ``ssl.SSLContext`` for the server side, e.g. from
``tls_context_from_files``), every accepted socket is wrapped with
``do_handshake_on_connect=False`` and a separate server class drives the
handshake, reads and writes from readiness events (``SSLWantReadError`` /
``SSLWantWriteError`` become interest changes; a failed handshake just closes
that connection). The plain server's code is not touched by this, so plain
HTTP pays nothing for it.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import time
from typing import Any

from .server import OUTPUT_HIGH_WATER, Origin, Server, ServerConnection

__all__ = ["tls_context_from_files"]


class _TLSConnection(ServerConnection):
    """A connection whose ``sock`` is an ``ssl.SSLSocket`` made with ``do_handshake_on_connect=False``."""

    __slots__ = ("handshake_want", "handshaking", "read_wants_write", "write_wants_read")

    def __init__(self, sock: ssl.SSLSocket, port_index: int, origin: Origin, accepted_at: float) -> None:
        super().__init__(sock, port_index, origin, accepted_at)
        self.handshaking = True
        self.handshake_want = selectors.EVENT_READ  # the ClientHello comes first
        # After the handshake, TLS may need the *other* direction to go on (a key
        # update, a renegotiation): a read that waits for writability, or the reverse.
        self.read_wants_write = False
        self.write_wants_read = False


class TLSServer(Server):
    """``Server`` with every socket wrapped in TLS; the plain class stays as it was.

    Only the socket-facing methods change: accept wraps, the first events drive
    the handshake, reads and writes go through the SSL object and turn its
    WANT_READ / WANT_WRITE into selector interest. Parsing, responding, delays
    and counters are the plain server's.
    """

    def __init__(self, *args: Any, context: ssl.SSLContext) -> None:
        super().__init__(*args)
        self.context = context

    def _adopt(self, sock: socket.socket, index: int, now: float) -> ServerConnection | None:
        try:
            tls_sock = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (ssl.SSLError, OSError, ValueError):  # e.g. the client reset already
            sock.close()
            with self.lock:
                self.counters[index].tls_failed += 1
            return None
        return _TLSConnection(tls_sock, index, self.origins[index], now)

    def _guarded(self, conn: ServerConnection, now: float, mask: int) -> None:
        assert isinstance(conn, _TLSConnection)
        try:
            if conn.handshaking:
                self._handshake(conn, now)
                return
            readable = mask & selectors.EVENT_READ
            writable = mask & selectors.EVENT_WRITE
            if (writable or (readable and conn.write_wants_read)) and not conn.closed:
                self._service(conn, now)
            if (readable or (writable and conn.read_wants_write)) and not conn.closed:
                self._on_readable(conn, now)
        except Exception:  # noqa: BLE001 - the loop must survive its own bugs
            self._fail(conn)

    def _handshake(self, conn: _TLSConnection, now: float) -> None:
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            conn.handshake_want = selectors.EVENT_READ
            self._update_interest(conn)
            return
        except ssl.SSLWantWriteError:
            conn.handshake_want = selectors.EVENT_WRITE
            self._update_interest(conn)
            return
        except (ssl.SSLError, OSError, ValueError):
            # Not TLS (plain HTTP on the HTTPS port), a refused certificate, a reset:
            # that connection ends, the server goes on.
            with self.lock:
                self.counters[conn.port_index].tls_failed += 1
            self._close(conn)
            return
        conn.handshaking = False
        resumed = sock.session_reused
        with self.lock:
            counters = self.counters[conn.port_index]
            counters.tls_handshakes += 1
            if resumed:
                counters.tls_resumed += 1
        self._update_interest(conn)
        # The first request may already sit in the socket (or, decrypted, in the SSL object).
        # A fresh clock: ``now`` is from before the handshake, and a delay counts from the read.
        self._on_readable(conn, time.monotonic())

    def _on_readable(self, conn: ServerConnection, now: float) -> None:
        if conn.draining:
            # Our side is shut down and TLS is off (see _finish): discard raw bytes until EOF.
            super()._on_readable(conn, now)
            return
        assert isinstance(conn, _TLSConnection)
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        while True:
            try:
                received = sock.recv_into(self.recv_buffer)
            except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                if conn.read_wants_write:
                    conn.read_wants_write = False
                    self._update_interest(conn)
                return
            except ssl.SSLWantWriteError:
                conn.read_wants_write = True
                self._update_interest(conn)
                return
            except (ssl.SSLError, OSError):  # a bad record, a reset: nobody is left to answer
                self._close(conn)
                return
            if conn.read_wants_write:
                conn.read_wants_write = False
                self._update_interest(conn)
            if not received:  # close_notify, or a plain EOF (suppress_ragged_eofs)
                conn.peer_eof = True
                self._service(conn, now)
                return
            if not conn.closing:
                conn.inbuf += self.recv_view[:received]
                self._service(conn, time.monotonic())  # a delay counts from the read (no kernel stamps)
            # Decrypted bytes left inside the SSL object do not make the socket readable
            # again: take them now, or they would wait for the client's next packet. At
            # most one record stays there, so this does not defeat the high-water mark.
            if conn.closed or conn.draining or not sock.pending():
                return

    def _send(self, conn: ServerConnection) -> bool:
        assert isinstance(conn, _TLSConnection)
        try:
            # Without partial writes OpenSSL answers WANT_WRITE until all of ``outbuf``
            # is out, remembering how far it got; the retry passes the same bytes
            # (outbuf only grows at its end until then), which is what it requires.
            sent = conn.sock.send(conn.outbuf)
        except (ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            if conn.write_wants_read:
                conn.write_wants_read = False
            return True
        except ssl.SSLWantReadError:
            conn.write_wants_read = True
            return True
        except (ssl.SSLError, OSError):
            self._close(conn)
            return False
        conn.write_wants_read = False
        del conn.outbuf[:sent]
        return True

    # _finish is the plain one: no close_notify (HTTP/1.1 frames its own message
    # ends, and the fetcher does not send one either; a non-blocking unwrap() would
    # also try to read the client's, discarding or choking on pipelined requests).
    # SSLSocket.shutdown(SHUT_WR) drops the SSL object, so while draining whatever
    # the client still sends is read raw and thrown away until its FIN.

    def _update_interest(self, conn: ServerConnection) -> None:
        assert isinstance(conn, _TLSConnection)
        if conn.handshaking:
            want = conn.handshake_want
        else:
            want = 0
            if (not conn.peer_eof and len(conn.outbuf) < OUTPUT_HIGH_WATER) or conn.write_wants_read:
                want = selectors.EVENT_READ
            if conn.outbuf or conn.read_wants_write:
                want |= selectors.EVENT_WRITE
        if want == conn.mask:
            return
        if conn.mask == 0:
            self.selector.register(conn.sock, want, conn)
        elif want == 0:
            self.selector.unregister(conn.sock)
        else:
            self.selector.modify(conn.sock, want, conn)
        conn.mask = want


def tls_context_from_files(certfile: str, keyfile: str | None = None, tickets: bool = True) -> ssl.SSLContext:
    """A server-side ``SSLContext`` for ``TestSite(tls=...)`` from PEM files.

    ``tickets=False`` sends no TLS 1.3 session tickets (``num_tickets = 0``) and
    no TLS 1.2 tickets either (``OP_NO_TICKET``), so that clients cannot resume
    sessions and every new connection costs a full handshake (what a benchmark
    of the handshake wants); the tests check both TLS versions.
    ALPN offers ``http/1.1``, the only protocol the site speaks.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile, keyfile)
    context.set_alpn_protocols(["http/1.1"])
    if not tickets:
        context.num_tickets = 0
        context.options |= ssl.OP_NO_TICKET
    return context

"""Scripted raw-bytes loopback servers for fault tests.

A :class:`RawServer` listens on a loopback port and plays every accepted
connection with a *handler*, a plain function ``handler(sock, info)`` that runs
in its own thread with a blocking socket, as urllib3's ``dummyserver`` does.
Handlers write exactly the bytes a test wants -- well-formed or not -- so the
fetcher's error paths can be driven without any HTTP library on the server
side.  Ready-made handlers are named by behaviour (as Scrapy's mock server
names its resources): :func:`ok`, :func:`truncated_body`, :func:`gzip_bomb`...

Usage::

    with RawServer(ok(b"hi")) as srv:
        fetcher.register(srv.url("/x"))
        ...
    assert srv.accepted == 1 and srv.requests[0].startswith(b"GET /x ")

Test modules import it as ``from rawserver import ...`` (``tests/`` has no
``__init__.py``, so pytest puts ``tests/`` itself on ``sys.path``).

Standard library only: the helpers must not depend on the package they test.
"""

from __future__ import annotations

import functools
import http
import select
import socket
import struct
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from niofetcher.testing import peer_closed

__all__ = [
    "ConnInfo",
    "Handler",
    "RawServer",
    "big_body",
    "body_pattern",
    "broken_chunked",
    "close_after_head",
    "close_before_response",
    "delayed",
    "drop_idle_after_first",
    "garbage_status",
    "get_unused_port",
    "gzip_bomb",
    "gzip_bomb_body",
    "hang",
    "http_response",
    "ok",
    "oversize_header",
    "read_request",
    "redirect",
    "reset",
    "reset_mid_body",
    "respond_raw",
    "routes",
    "running_servers",
    "serve_keepalive",
    "slow_body",
    "truncated_body",
    "wait_for_eof",
]

Handler = Callable[[socket.socket, "ConnInfo"], None]
HeaderPairs = Iterable[tuple[str | bytes, str | bytes]]

# A request head larger than this is a bug in the client under test (or in a
# test), not something to buffer forever.
MAX_REQUEST_HEAD = 1 << 20
_RECV_SIZE = 65536


@dataclass
class ConnInfo:
    """What a handler knows about the connection it plays."""

    index: int  # 0 for the first accepted connection, 1 for the next...
    accepted_at: float  # time.monotonic()
    # The server itself, so that handlers can record requests
    # (``read_request(sock, info)``) and sleep interruptibly.
    server: RawServer | None = field(default=None, repr=False, compare=False)

    @property
    def stopping(self) -> bool:
        """True once the server has begun to stop."""
        return self.server is not None and self.server._stopping.is_set()

    def sleep(self, seconds: float) -> bool:
        """Sleep, but wake at once when the server stops.

        Handlers that wait (slow bodies, delays) must use this rather than
        ``time.sleep`` so that ``stop()`` never waits on them.  Returns True if
        the whole time passed, False if the server is stopping.
        """
        if self.server is None:
            time.sleep(seconds)
            return True
        return not self.server._stopping.wait(seconds)


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    thread: threading.Thread
    info: ConnInfo


# Servers started and not yet stopped, so that a leak check can stop the
# ones a test forgot before it counts file descriptors.
_running: weakref.WeakSet[RawServer] = weakref.WeakSet()
_running_lock = threading.Lock()


def running_servers() -> list[RawServer]:
    """Every RawServer that has been started and has not finished stopping."""
    with _running_lock:
        return list(_running)


class RawServer:
    """A loopback TCP server whose every accepted connection is played by `handler` in its own thread.

    :param handler: ``handler(sock, info)``; runs in a daemon thread per
        connection with a blocking socket (timeout ``sock_timeout``).  The
        server closes the socket after it returns, unless it already did.
    :param host: the address to listen on (``"::1"`` for IPv6).
    :param max_seconds: the server stops by itself this long after
        ``start()``, so a hung test cannot leave it running.
    :param sock_timeout: timeout of each accepted socket.

    Counters (read them at any time; they are kept under a lock):

    - ``accepted``: connections accepted so far.
    - ``open_now``: connections open at both ends right now.  A connection
      whose peer has already sent FIN or RST is *not* counted even if its
      handler has not noticed yet, and neither is one the handler closed.
    - ``max_open``: the peak of ``open_now``, sampled at every accept (the
      only moment it can rise).  Because a peer's FIN is checked with
      ``poll(POLLRDHUP)`` rather than waiting for the handler thread to
      read it, a client that closes one connection and then opens another
      is not counted as holding two -- the limit tests need that.
    - ``requests``: every request head read through :func:`read_request`
      with this server (or its ConnInfo), in order.
    - ``errors``: exceptions raised by handlers (swallowed, never printed);
      ``unexpected_errors`` leaves out the OSErrors of a client going away.
    """

    #: How long ``stop()`` waits for handler threads before closing their
    #: sockets under them.
    STOP_JOIN_SECONDS = 5.0
    #: How often the accept loop looks at the stop flag.
    ACCEPT_POLL_SECONDS = 0.05

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        max_seconds: float = 60.0,
        sock_timeout: float = 10.0,
    ) -> None:
        self.handler = handler
        self.host = host
        self.max_seconds = max_seconds
        self.sock_timeout = sock_timeout
        self.port = 0
        self.requests: list[bytes] = []
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._accepted = 0
        self._max_open = 0
        self._conns: dict[int, _Conn] = {}
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._deadline = 0.0

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> RawServer:
        """Bind, listen and start the accept thread; returns self."""
        if self._accept_thread is not None or self._stopping.is_set():
            raise RuntimeError("a RawServer can be started only once")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, 0))
            # A deep backlog: tests open hundreds of connections at once and
            # must see the fetcher's limits, not the kernel's SYN queue.
            listener.listen(1024)
            # A timeout rather than a blocking accept, so the loop sees the
            # stop flag within ACCEPT_POLL_SECONDS.
            listener.settimeout(self.ACCEPT_POLL_SECONDS)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._deadline = time.monotonic() + self.max_seconds
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"rawserver-{self.port}-accept", daemon=True
        )
        with _running_lock:
            _running.add(self)
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, close the listener and every accepted socket, join
        the threads (bounded by ``STOP_JOIN_SECONDS``).  Idempotent."""
        self._stopping.set()
        thread = self._accept_thread
        if thread is None:
            # Never started: nothing is bound.
            self._stopped.set()
            return
        me = threading.current_thread()
        # A handler (or the accept thread at max_seconds) may stop its own
        # server; it must not wait for itself.
        if me is thread or any(c.thread is me for c in self._snapshot_conns()):
            return
        thread.join(self.STOP_JOIN_SECONDS + 2.0)

    def __enter__(self) -> RawServer:
        if self._accept_thread is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def stopped(self) -> bool:
        """True once the listener is closed and the handler threads joined."""
        return self._stopped.is_set()

    # -- what tests look at ------------------------------------------------

    def url(self, path: str = "/") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def accepted(self) -> int:
        with self._lock:
            return self._accepted

    @property
    def open_now(self) -> int:
        with self._lock:
            return self._count_open_locked()

    @property
    def max_open(self) -> int:
        with self._lock:
            return self._max_open

    @property
    def unexpected_errors(self) -> list[BaseException]:
        """Handler errors other than OSErrors (resets, broken pipes, timeouts):
        those mean the handler or the test has a bug."""
        with self._lock:
            return [e for e in self.errors if not isinstance(e, OSError)]

    def __repr__(self) -> str:
        state = "stopped" if self.stopped else "running" if self._accept_thread else "new"
        return (
            f"<RawServer {self.host}:{self.port} {state} accepted={self.accepted} "
            f"open_now={self.open_now} max_open={self.max_open} requests={len(self.requests)}>"
        )

    # -- internals ---------------------------------------------------------

    def _record_request(self, head: bytes) -> None:
        with self._lock:
            self.requests.append(head)

    def _record_error(self, exc: BaseException) -> None:
        with self._lock:
            self.errors.append(exc)

    def _snapshot_conns(self) -> list[_Conn]:
        with self._lock:
            return list(self._conns.values())

    def _count_open_locked(self) -> int:
        return sum(1 for c in self._conns.values() if not peer_closed(c.sock))

    def _accept_loop(self) -> None:
        assert self._listener is not None
        try:
            while not self._stopping.is_set() and time.monotonic() < self._deadline:
                try:
                    sock, _addr = self._listener.accept()
                except TimeoutError:
                    continue
                except OSError as exc:
                    if self._stopping.is_set():
                        break
                    # EMFILE and friends: note it and keep serving, after a
                    # pause so that a persistent error does not spin.
                    self._record_error(exc)
                    self._stopping.wait(self.ACCEPT_POLL_SECONDS)
                    continue
                self._spawn(sock)
        except BaseException as exc:  # noqa: BLE001 - never a thread traceback
            self._record_error(exc)
        finally:
            self._stopping.set()
            self._teardown()

    def _spawn(self, sock: socket.socket) -> None:
        if self._stopping.is_set():
            sock.close()
            return
        try:
            # The listener's accept timeout must not leak into the handler:
            # handlers see a blocking socket with sock_timeout.
            sock.settimeout(self.sock_timeout)
            # Handlers often write a head and a body in separate sends; without
            # NODELAY, Nagle plus delayed ACK adds 40 ms stalls to every test.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # the peer may already be gone; the handler will find out
        with self._lock:
            index = self._accepted
            self._accepted += 1
            info = ConnInfo(index=index, accepted_at=time.monotonic(), server=self)
            thread = threading.Thread(
                target=self._run_handler,
                args=(sock, info),
                name=f"rawserver-{self.port}-conn-{index}",
                daemon=True,
            )
            # The new connection counts even if its peer is already gone: it
            # was open at connect time.
            live = 1 + self._count_open_locked()
            self._conns[index] = _Conn(sock, thread, info)
            self._max_open = max(self._max_open, live)
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread"
            self._record_error(exc)
            with self._lock:
                self._conns.pop(index, None)
                sock.close()

    def _run_handler(self, sock: socket.socket, info: ConnInfo) -> None:
        try:
            self.handler(sock, info)
        except BaseException as exc:  # noqa: BLE001 - recorded for the test to see
            # Clients going away mid-script (resets, broken pipes, timeouts)
            # are the point of these servers; keep them for tests to inspect,
            # but never let them reach threading.excepthook, which pytest
            # turns into a failure.  OSErrors caused by stop() are just noise.
            if not (self._stopping.is_set() and isinstance(exc, OSError)):
                self._record_error(exc)
        finally:
            _forget_buffer(sock)
            # Closed under the lock so that _teardown never shuts down a
            # descriptor number that has meanwhile been reused.
            with self._lock:
                self._conns.pop(info.index, None)
                sock.close()

    def _teardown(self) -> None:
        with self._lock:
            if self._listener is not None:
                self._listener.close()
            conns = list(self._conns.values())
            # shutdown() rather than close(): on Linux closing a descriptor
            # does not wake a thread blocked in recv() on it, shutdown does
            # (recv returns b"", send raises EPIPE).
            for conn in conns:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        deadline = time.monotonic() + self.STOP_JOIN_SECONDS
        for conn in conns:
            conn.thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            for conn in list(self._conns.values()):
                self.errors.append(
                    RuntimeError(f"handler for connection {conn.info.index} did not end")
                )
                conn.sock.close()
            self._conns.clear()
        with _running_lock:
            _running.discard(self)
        self._stopped.set()


def get_unused_port(host: str = "127.0.0.1") -> int:
    """A loopback port that refuses connections: bound, read and closed again.

    Nobody listens on it afterwards (another process could take it, but on a
    test machine that is unlikely within the test's lifetime).
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
    return port


# -- reading requests --------------------------------------------------------

# Surplus bytes read past one request head (pipelined requests) wait here for
# the next read_request() on the same socket.  Weak keys: a socket that is
# dropped takes its buffer with it.
_buffers: weakref.WeakKeyDictionary[socket.socket, bytearray] = weakref.WeakKeyDictionary()
_buffers_lock = threading.Lock()


def _buffer_for(sock: socket.socket) -> bytearray:
    with _buffers_lock:
        buf = _buffers.get(sock)
        if buf is None:
            buf = _buffers[sock] = bytearray()
        return buf


def _forget_buffer(sock: socket.socket) -> None:
    with _buffers_lock:
        _buffers.pop(sock, None)


def _recv_more(sock: socket.socket, buf: bytearray) -> bool:
    data = sock.recv(_RECV_SIZE)
    buf += data
    return bool(data)


def _read_line(sock: socket.socket, buf: bytearray) -> bytes:
    while True:
        end = buf.find(b"\r\n")
        if end >= 0:
            line = bytes(buf[:end])
            del buf[: end + 2]
            return line
        if len(buf) > MAX_REQUEST_HEAD:
            raise ValueError("request line too long")
        if not _recv_more(sock, buf):
            raise ConnectionAbortedError("peer closed inside a request body")


def _discard(sock: socket.socket, buf: bytearray, n: int) -> None:
    take = min(n, len(buf))
    del buf[:take]
    n -= take
    while n > 0:
        data = sock.recv(min(n, _RECV_SIZE))
        if not data:
            raise ConnectionAbortedError("peer closed inside a request body")
        n -= len(data)


def _header_values(head: bytes, name: bytes) -> list[bytes]:
    values = []
    for line in head.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            values.append(value.strip())
    return values


def read_request(
    sock: socket.socket, server: RawServer | ConnInfo | None = None
) -> bytes | None:
    """Read one request head, up to and including the blank line, and discard its body.

    Bytes read past the head stay buffered for the next call on the same
    socket, so pipelined requests come out one by one.  A body framed by
    Content-Length or by chunked Transfer-Encoding is read and thrown away.
    The head is appended to ``server.requests`` (pass the RawServer, or the
    handler's ConnInfo) as soon as it is complete.

    Returns None on EOF before a complete head; raises ConnectionAbortedError
    on EOF inside a body.
    """
    buf = _buffer_for(sock)
    while True:
        # RFC 9112 section 2.2: a server SHOULD ignore at least one empty line
        # received before the request-line.
        while buf.startswith(b"\r\n"):
            del buf[:2]
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buf) > MAX_REQUEST_HEAD:
            raise ValueError(f"request head larger than {MAX_REQUEST_HEAD} bytes")
        if not _recv_more(sock, buf):
            return None
    head = bytes(buf[: end + 4])
    del buf[: end + 4]
    srv = server.server if isinstance(server, ConnInfo) else server
    if srv is not None:
        srv._record_request(head)
    if any(b"chunked" in v.lower() for v in _header_values(head, b"transfer-encoding")):
        while True:
            size_line = _read_line(sock, buf)
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while _read_line(sock, buf):  # trailers, up to the empty line
                    pass
                break
            _discard(sock, buf, size + 2)  # chunk data and its CRLF
    else:
        lengths = _header_values(head, b"content-length")
        if lengths:
            _discard(sock, buf, int(lengths[0]))
    return head


def wait_for_eof(sock: socket.socket, info: ConnInfo | None = None, timeout: float | None = None) -> bool:
    """Read and discard until the peer closes; True on EOF, False when the
    server stops or ``timeout`` passes first.  Unlike a plain ``recv`` this is
    not cut short by ``sock_timeout``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not (info is not None and info.stopping):
        wait = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
        if wait <= 0:
            return False
        readable, _, _ = select.select([sock], [], [], wait)
        if readable and not sock.recv(_RECV_SIZE):
            return True
    return False


# -- writing responses -------------------------------------------------------


def _b(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("latin-1")


def _chunks(body: bytes, pieces: int = 3) -> list[bytes]:
    size = max(1, -(-len(body) // pieces))
    return [body[i : i + size] for i in range(0, len(body), size)]


def http_response(
    status: int = 200,
    body: bytes = b"",
    headers: HeaderPairs = (),
    reason: str | None = None,
    chunked: bool = False,
    close: bool = False,
) -> bytes:
    """A well-formed HTTP/1.1 response.

    Framing is added unless ``headers`` already holds a Content-Length or
    Transfer-Encoding (so a test can lie about the length on purpose):
    Content-Length normally, or ``Transfer-Encoding: chunked`` with the body
    cut into up to three chunks.  1xx, 204 and 304 get no framing and no body.
    ``close`` adds ``Connection: close``.  ``reason`` defaults to the standard
    phrase.
    """
    if reason is None:
        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
    pairs = [(_b(k), _b(v)) for k, v in headers]
    names = {k.lower() for k, _ in pairs}
    bodiless = status < 200 or status in (204, 304)
    if bodiless and body:
        raise ValueError(f"status {status} cannot have a body")
    payload = body
    if not bodiless and not names & {b"content-length", b"transfer-encoding"}:
        if chunked:
            pairs.append((b"Transfer-Encoding", b"chunked"))
            payload = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in _chunks(body)) + b"0\r\n\r\n"
        else:
            pairs.append((b"Content-Length", b"%d" % len(body)))
    if close and b"connection" not in names:
        pairs.append((b"Connection", b"close"))
    head = b"HTTP/1.1 %d %s\r\n" % (status, _b(reason))
    head += b"".join(b"%s: %s\r\n" % kv for kv in pairs)
    return head + b"\r\n" + payload


def reset(sock: socket.socket) -> None:
    """Close ``sock`` with an RST instead of a FIN (SO_LINGER on, timeout 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        sock.close()


def _wants_close(head: bytes) -> bool:
    tokens = b",".join(_header_values(head, b"connection")).lower()
    if b"close" in tokens:
        return True
    # An HTTP/1.0 peer closes unless it asked for keep-alive.
    first = head.split(b"\r\n", 1)[0]
    return b"HTTP/1.0" in first and b"keep-alive" not in tokens


def _head_only(response: bytes) -> bytes:
    end = response.find(b"\r\n\r\n")
    return response if end < 0 else response[: end + 4]


def serve_keepalive(responses: Callable[[bytes], bytes]) -> Handler:
    """A handler for "good" endpoints: read_request -> send responses(head),
    until the client closes.

    For a HEAD request only the head of the response is sent.  After a
    response (or request) with ``Connection: close`` the server closes, as a
    real server does.
    """

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        while True:
            head = read_request(sock, info)
            if head is None:
                return
            response = responses(head)
            if head.startswith(b"HEAD "):
                response = _head_only(response)
            sock.sendall(response)
            if _wants_close(head) or _wants_close(_head_only(response)):
                return

    return handler


# -- ready-made handlers, named by behaviour ---------------------------------


def ok(body: bytes = b"hello", status: int = 200, headers: HeaderPairs = ()) -> Handler:
    """Keep-alive: the same response to every request."""
    pairs = list(headers)
    if not any(_b(k).lower() == b"content-type" for k, _ in pairs):
        pairs.insert(0, (b"Content-Type", b"text/plain"))
    response = http_response(status, body, pairs)
    return serve_keepalive(lambda head: response)


def routes(responses: Mapping[bytes, bytes]) -> Handler:
    """Keep-alive: the response given for each request's path (``b"/x"``, from the request line as sent),
    a 404 for any other path."""
    missing = http_response(404, b"not here", [(b"Content-Type", b"text/plain")])
    return serve_keepalive(lambda head: responses.get(head.split(b" ", 2)[1], missing))


def respond_raw(data: bytes) -> Handler:
    """Read one request, send ``data`` verbatim, close (urllib3's
    ``start_response_handler``): for one-off scripts."""

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        if read_request(sock, info) is not None:
            sock.sendall(data)

    return handler


def garbage_status() -> Handler:
    """Answer with something that is not HTTP at all."""
    return respond_raw(b"HELLO WORLD\r\n\r\n")


def truncated_body() -> Handler:
    """Promise 100 bytes (Content-Length), send 10, close."""
    return respond_raw(http_response(200, b"0123456789", [(b"Content-Length", b"100")]))


def close_before_response() -> Handler:
    """Read the request, close without a byte of response."""
    return respond_raw(b"")


def close_after_head() -> Handler:
    """Send a complete head announcing 100 bytes, then close with no body."""
    return respond_raw(http_response(200, b"", [(b"Content-Length", b"100")]))


def reset_mid_body(content_length: int = 1000, sent: int = 100, pause: float = 0.1) -> Handler:
    """Send the head and ``sent`` of ``content_length`` body bytes, then RST.

    The pause lets the client read what was sent first: on Linux an RST
    discards data still unread in the receiver's buffer.
    """
    head = http_response(200, b"", [(b"Content-Length", b"%d" % content_length)])

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        if read_request(sock, info) is None:
            return
        sock.sendall(head + b"x" * sent)
        info.sleep(pause)
        reset(sock)

    return handler


def broken_chunked() -> Handler:
    """A chunked body whose second chunk-size line is not hexadecimal."""
    return respond_raw(
        http_response(200, b"", [(b"Transfer-Encoding", b"chunked")])
        + b"5\r\nhello\r\n"
        + b"zz-not-hex\r\nworld\r\n0\r\n\r\n"
    )


def oversize_header(size: int = 200_000) -> Handler:
    """A response head of at least ``size`` bytes, made of many 1 KB header
    lines (no single absurd line), then an empty body."""
    filler = b"a" * 1000
    lines = [b"HTTP/1.1 200 OK\r\n"]
    total = len(lines[0])
    i = 0
    while total < size:
        line = b"X-Filler-%06d: %s\r\n" % (i, filler)
        lines.append(line)
        total += len(line)
        i += 1
    lines.append(b"Content-Length: 0\r\n\r\n")
    return respond_raw(b"".join(lines))


def slow_body(interval: float = 0.5, total_seconds: float = 5.0) -> Handler:
    """Slowloris: the head (Content-Length n), then one byte per ``interval``.

    ``n = round(total_seconds / interval)``, so a patient client does get a
    complete response after about ``total_seconds``; then the server closes.
    """
    n = max(1, round(total_seconds / interval))
    head = http_response(200, b"", [(b"Content-Length", b"%d" % n)])

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        if read_request(sock, info) is None:
            return
        sock.sendall(head)
        for _ in range(n):
            if not info.sleep(interval):
                return
            sock.sendall(b"x")

    return handler


@functools.lru_cache(maxsize=4)
def gzip_bomb_body(decoded_size: int = 1 << 30) -> bytes:
    """A gzip member that inflates to ``decoded_size`` zero bytes; cached.

    Compressing 1 GiB through zlib takes seconds even streamed.  Instead one
    MiB of zeros is deflated once and ended with a *full flush*, which
    byte-aligns the output and forgets the history; such a segment uses no
    back-reference before its own start, so copies of it laid end to end form
    a valid deflate stream (RFC 1951).  The header, a final block for the
    remainder and the trailer (CRC-32 of all the zeros, computed in 1 MiB
    steps, and the size) make it a gzip member (RFC 1952).  Memory stays
    around 2 MiB; 1 GiB gives about 1.04 MB.
    """
    if decoded_size < 0:
        raise ValueError(f"decoded_size must be >= 0, not {decoded_size!r}")
    step = 1 << 20
    zeros = bytes(step)
    whole, rest = divmod(decoded_size, step)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = comp.compress(zeros) + comp.flush(zlib.Z_FULL_FLUSH)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    final = comp.compress(zeros[:rest]) + comp.flush()
    crc = 0
    for _ in range(whole):
        crc = zlib.crc32(zeros, crc)
    crc = zlib.crc32(zeros[:rest], crc)
    # ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL=2 (max compression) OS=255 (unknown)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc, decoded_size & 0xFFFFFFFF)
    return header + segment * whole + final + trailer


def gzip_bomb(decoded_size: int = 1 << 30) -> Handler:
    """Keep-alive: ``Content-Encoding: gzip``, a ~1 MB body that decodes to
    ``decoded_size`` zeros.  The body is built here, not in the handler, so
    the client never waits on it."""
    body = gzip_bomb_body(decoded_size)
    response = http_response(
        200, body, [(b"Content-Type", b"text/plain"), (b"Content-Encoding", b"gzip")]
    )
    return serve_keepalive(lambda head: response)


_PATTERN = b"0123456789abcdef" * 4096  # 64 KiB


def body_pattern(size: int) -> bytes:
    """The exact body :func:`big_body` sends for ``size``."""
    reps, rest = divmod(size, len(_PATTERN))
    return _PATTERN * reps + _PATTERN[:rest]


def big_body(size: int) -> Handler:
    """Keep-alive: a ``size``-byte body (:func:`body_pattern`), streamed in
    64 KiB sends so that a large size costs no memory."""
    head = http_response(
        200, b"", [(b"Content-Type", b"application/octet-stream"), (b"Content-Length", b"%d" % size)]
    )

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        while True:
            request = read_request(sock, info)
            if request is None:
                return
            sock.sendall(head)
            if request.startswith(b"HEAD "):
                continue
            left = size
            while left > 0:
                piece = _PATTERN[: min(left, len(_PATTERN))]
                sock.sendall(piece)
                left -= len(piece)

    return handler


def redirect(location: str, status: int = 302) -> Handler:
    """Keep-alive: every request is redirected to ``location``."""
    response = http_response(status, b"", [(b"Location", location)])
    return serve_keepalive(lambda head: response)


def drop_idle_after_first(idle: float = 0.1, body: bytes = b"first") -> Handler:
    """A stale keep-alive server: one normal response (no ``Connection:
    close``), then after ``idle`` seconds the connection is closed silently.

    A request the client sends within ``idle`` is never answered (and, being
    unread at close, turns the FIN into an RST).
    """
    response = http_response(200, body, [(b"Content-Type", b"text/plain")])

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        if read_request(sock, info) is None:
            return
        sock.sendall(response)
        info.sleep(idle)

    return handler


def delayed(seconds: float, body: bytes = b"delayed") -> Handler:
    """Keep-alive: each response is sent ``seconds`` after its request."""
    response = http_response(200, body, [(b"Content-Type", b"text/plain")])

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        while True:
            head = read_request(sock, info)
            if head is None or not info.sleep(seconds):
                return
            sock.sendall(_head_only(response) if head.startswith(b"HEAD ") else response)
            if _wants_close(head):
                return

    return handler


def hang() -> Handler:
    """Read the request and never answer, until the client closes or the
    server stops (not cut short by ``sock_timeout``): for read timeouts."""

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        if read_request(sock, info) is not None:
            wait_for_eof(sock, info)

    return handler

"""A fast, generated web site on loopback, shared by the tests, the demo and the benchmarks.

Theory of operation
-------------------
A ``TestSite`` listens on K loopback ports ("hosts"). Each host serves N generated
pages whose links make every page of every host reachable from host 0's ``/``:
``/`` links to the first pages, page ``i`` links to ``i+1`` (the chain that makes
everything reachable) and a few others, and, with more than one host, each page
links to the same page of the next host in the ring.

The server must never be what a benchmark measures, so it does as little as it
can per request:

* one thread runs a ``selectors`` loop over non-blocking sockets; no
  ``http.server``, no h11 on this side;
* every response is built once, at start, as bytes keyed by path; serving a
  request is a dict lookup and a copy into the connection's output buffer;
* a request head is parsed by hand, only for what changes the answer: method,
  path, version, ``Connection`` and ``Content-Length`` (bodies are discarded);
* pipelined requests found by one ``recv`` are answered by one ``send``; the
  socket is registered for writing only while output is pending;
* ``delay`` is a timer heap in the loop, never a sleep: a response is released
  ``delay`` seconds after its request arrived, in request order (see "Exact
  delays" below).

Exact delays
------------
A benchmark with 50 ms of latency makes 50 round trips in 2.5 s, so every
millisecond the server adds per response costs a client 2% of its efficiency.
Three things used to add it, and each is dealt with:

* ``epoll_wait`` takes whole milliseconds and ``selectors`` rounds the timeout
  *up*, so a timer fired 0-1 ms late (0.5 ms on average). When a timer is
  pending, the loop waits with ``select()`` on the epoll descriptor itself,
  whose timeout has microsecond resolution, then collects the events with a
  zero-timeout ``epoll_wait``.
* A request's clock started when the loop got round to reading it, which on a
  busy or descheduled server is later than when it arrived. On Linux every
  accepted socket asks for the kernel's receive timestamp (``SO_TIMESTAMPNS``)
  and the delay counts from that; it is clamped to the window in which the
  bytes can have arrived (after the previous wait began, before the read), so
  a clock step cannot make a response early. Elsewhere, and with TLS, it
  counts from the read.
* Timers that fell due while the loop was waiting are run before the batch of
  events that woke it, and again between events of a long batch, so a burst
  of requests does not hold back responses that are already due.

What remains is the kernel's timer slack (about 50 us) and the server being
descheduled on a loaded machine: the response is never early, and at 4,000
responses/s a few tenths of a millisecond late in the median.

Counters are kept per port, because the fetcher's guarantees (connection
limits, service time, "each page exactly once") are only believable when
counted from the server's side.

HTTPS: given ``tls=`` (an ``ssl.SSLContext`` for the server side, e.g. from
``tls_context_from_files``), every accepted socket is wrapped with
``do_handshake_on_connect=False`` and a separate server class drives the
handshake, reads and writes from readiness events (``SSLWantReadError`` /
``SSLWantWriteError`` become interest changes; a failed handshake just closes
that connection). The plain server's code is not touched by this, so plain
HTTP pays nothing for it.

Closing politely: when the server decides to close (``Connection: close``, an
HTTP/1.0 request, a bad request) it sends its response, shuts down its sending
side and keeps reading until the client closes. Closing at once while the
client may still be sending would turn the FIN into a RST, and a RST can make
the client's kernel drop the response it has not read yet.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import ipaddress
import platform
import select
import selectors
import socket
import ssl
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PortCounters", "TestSite", "tls_context_from_files"]

#: Bytes asked of each ``recv``: large, so a burst of pipelined requests is one call.
RECV_SIZE = 256 * 1024
#: A request head longer than this gets the connection closed (h11's client default
#: for response heads is 16 KiB; nginx allows 8 KiB per line; 64 KiB is generous).
MAX_HEAD_SIZE = 64 * 1024
#: Benchmarks open 2,000 connections at once; the kernel caps this by somaxconn.
LISTEN_BACKLOG = 4096
#: Stop reading and parsing a connection while this much output waits for its
#: client, so a client that pipelines without reading cannot grow our memory.
OUTPUT_HIGH_WATER = 4 * 1024 * 1024
#: How long a connection we closed our side of may wait for the client's FIN.
LINGER_SECONDS = 2.0
#: Linux's ``SO_TIMESTAMPNS`` (= ``SCM_TIMESTAMPNS``), which the socket module does not export.
#: 35 on the 64-bit architectures that use the generic socket numbers; elsewhere delays count from the read.
_SO_TIMESTAMPNS = 35 if sys.platform == "linux" and platform.machine() in {"x86_64", "aarch64", "riscv64"} else None
#: A ``struct timespec`` as the kernel hands it over in the control message (64-bit time_t).
_TIMESPEC = struct.Struct("@qq")
#: ``select()`` cannot watch a descriptor at or above FD_SETSIZE.
_FD_SETSIZE = 1024

_Chunk = bytes | memoryview
_FILLER = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
    "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. "
)


@dataclass
class PortCounters:
    """What one listening port saw: the numbers tests assert on, counted server-side."""

    accepted: int = 0
    """Connections accepted."""
    open_now: int = 0
    """Connections currently open."""
    max_open: int = 0
    """Peak of simultaneously open connections (since start or ``reset_counters()``)."""
    requests: int = 0
    """Well-formed requests served (responses sent or scheduled)."""
    max_conn_age_at_request: float = 0.0
    """The oldest age (seconds since accept) any connection had when a request arrived on it."""
    paths: collections.Counter[str] = field(default_factory=collections.Counter)
    """Requests per path, query string dropped (for "each page exactly once" checks)."""
    tls_handshakes: int = 0
    """TLS handshakes completed (full or resumed); 0 for a plain-HTTP site."""
    tls_resumed: int = 0
    """Of those, handshakes that resumed an earlier session (a ticket) instead of a full one."""
    tls_failed: int = 0
    """Accepted connections whose TLS handshake failed (e.g. plain HTTP sent to an HTTPS port)."""
    log: list[tuple[float, str]] = field(default_factory=list)
    """``(time.monotonic() of arrival, path)`` of every request, in order; only with ``log_requests``."""

    def copy(self) -> PortCounters:
        """A snapshot that the server thread will not change under the caller."""
        return dataclasses.replace(self, paths=collections.Counter(self.paths), log=list(self.log))


# --------------------------------------------------------------------------- content


class _Resource:
    """One prebuilt response, as the tuples of chunks to send for each case.

    Both connection flavours are prebuilt so that serving a request never formats
    anything. ``Connection: keep-alive`` is always sent on reusable responses: an
    HTTP/1.1 client ignores it and an HTTP/1.0 client needs it.
    """

    __slots__ = ("close", "close_head_only", "keep_alive", "keep_alive_head_only")

    def __init__(self, status: str, content_type: str, body: Sequence[_Chunk], headers: str = "") -> None:
        length = sum(len(chunk) for chunk in body)
        head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n{headers}"
        keep_alive_head = (head + "Connection: keep-alive\r\n\r\n").encode("ascii")
        close_head = (head + "Connection: close\r\n\r\n").encode("ascii")
        self.keep_alive: tuple[_Chunk, ...] = (keep_alive_head, *body)
        self.close: tuple[_Chunk, ...] = (close_head, *body)
        self.keep_alive_head_only: tuple[_Chunk, ...] = (keep_alive_head,)
        self.close_head_only: tuple[_Chunk, ...] = (close_head,)

    def chunks(self, keep_alive: bool, head_only: bool) -> tuple[_Chunk, ...]:
        if head_only:
            return self.keep_alive_head_only if keep_alive else self.close_head_only
        return self.keep_alive if keep_alive else self.close


class _InTurn(_Resource):
    """A resource whose answer changes: its n-th request gets ``answers[n]`` (the last one from then on).

    A subclass, so the prebuilt resources of every other path keep their one method call.  Only the
    loop thread calls ``chunks``, under the counters' lock.
    """

    __slots__ = ("answers", "served")

    def __init__(self, answers: Sequence[_Resource]) -> None:
        self.answers = list(answers)
        self.served = 0

    def chunks(self, keep_alive: bool, head_only: bool) -> tuple[_Chunk, ...]:
        answer = self.answers[min(self.served, len(self.answers) - 1)]
        self.served += 1
        return answer.chunks(keep_alive, head_only)


_HTML = "text/html; charset=utf-8"
_TEXT = "text/plain; charset=utf-8"
_NOT_FOUND = _Resource("404 Not Found", _TEXT, [b"404 not found\n"])
_BAD_REQUEST = _Resource("400 Bad Request", _TEXT, [b"400 bad request\n"])


def _link_targets(page: int, pages: int, count: int) -> list[int]:
    """The same-host pages that ``page`` links to: ``count`` distinct others when there are that many.

    ``k*i + 1`` for k = 1.. gives the chain i+1 (which alone makes every page
    reachable) and long jumps (2i+1, 3i+1...) so a crawl fans out quickly; the
    neighbours i+2, i+3... fill in where those collide.
    """
    jumps = ((k * page + 1) % pages for k in range(1, count + 1))
    neighbours = ((page + k) % pages for k in range(1, pages))
    targets: list[int] = []
    for target in (*jumps, *neighbours):
        if len(targets) == count:
            break
        if target != page and target not in targets:
            targets.append(target)
    return targets


def _links_html(hrefs: Sequence[tuple[str, str]]) -> str:
    items = "".join(f'<li><a href="{href}">{text}</a></li>\n' for href, text in hrefs)
    return f'<ul class="testsite-links">\n{items}</ul>\n'


def _generated_page(title: str, links: str, page_size: int) -> bytes:
    """An HTML page padded with filler text to about ``page_size`` bytes."""
    start = (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{title}</title></head>\n<body>\n<h1>{title}</h1>\n{links}<p>"
    )
    end = "</p>\n</body></html>\n"
    missing = max(0, page_size - len(start) - len(end))
    filler = (_FILLER * (missing // len(_FILLER) + 1))[:missing]
    return (start + filler + end).encode("utf-8")


def _split_at_body_end(body: bytes) -> tuple[memoryview, memoryview]:
    """A corpus page cut before its last ``</body>`` (or at its end), where the site's links go.

    Memoryview slices, not copies: corpus pages reach 1 MB and are served as many pages.
    """
    cut = body.lower().rfind(b"</body>")
    if cut < 0:
        cut = len(body)
    view = memoryview(body)
    return view[:cut], view[cut:]


def _robots_txt(disallow: Sequence[str], crawl_delay: float | None = None) -> bytes:
    lines = ["User-agent: *"]
    lines += [f"Disallow: {path}" for path in disallow] or ["Disallow:"]
    if crawl_delay is not None:
        lines.append(f"Crawl-delay: {crawl_delay:g}")
    return ("\n".join(lines) + "\n").encode("utf-8")


_REDIRECT_REASONS = {301: "Moved Permanently", 302: "Found", 303: "See Other", 307: "Temporary Redirect",
                     308: "Permanent Redirect"}


# --------------------------------------------------------------------------- server


class _Connection:
    """One accepted socket and its buffers; the server loop owns all of its state."""

    __slots__ = (
        "accepted_at",
        "body_left",
        "closed",
        "closing",
        "draining",
        "inbuf",
        "mask",
        "outbuf",
        "peer_eof",
        "port_index",
        "scheduled",
        "sock",
    )

    def __init__(self, sock: socket.socket, port_index: int, accepted_at: float) -> None:
        self.sock = sock
        self.port_index = port_index
        self.accepted_at = accepted_at
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.body_left = 0  # bytes of a request body still to discard
        # (due, chunks) of delayed responses, in request order; due times only grow.
        self.scheduled: collections.deque[tuple[float, tuple[_Chunk, ...]]] = collections.deque()
        self.mask = 0  # the selector events registered; 0 = not registered
        self.closing = False  # no more requests will be read: close once answered
        self.draining = False  # our side is shut down; waiting for the client's FIN
        self.peer_eof = False  # the client has shut down its sending side
        self.closed = False


def _parse_head(head: bytes) -> tuple[bytes, str, bool, int] | None:
    """``(method, path, keep_alive, content_length)`` of a request head, or None when malformed.

    Only what changes our answer is looked at. Chunked request bodies are not
    supported (no client of this site sends them) and count as malformed.
    """
    line, _, fields = head.partition(b"\r\n")
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[0].isalpha():
        return None
    method, target, version = parts
    if version == b"HTTP/1.1":
        keep_alive = True
    elif version == b"HTTP/1.0":
        keep_alive = False  # HTTP/1.0 closes unless the client asks otherwise
    else:
        return None
    content_length = 0
    if fields:
        for header in fields.split(b"\r\n"):
            name, colon, value = header.partition(b":")
            if not colon:
                return None
            name = name.lower()
            if name == b"connection":
                value = value.lower()
                if b"close" in value:
                    keep_alive = False
                elif b"keep-alive" in value:
                    keep_alive = True
            elif name == b"content-length":
                value = value.strip()
                if not value.isdigit():
                    return None
                content_length = int(value)
            elif name == b"transfer-encoding":
                return None
    if target.startswith((b"http://", b"https://")):  # absolute-form, as sent to proxies
        slash = target.find(b"/", target.index(b"//") + 2)
        target = target[slash:] if slash >= 0 else b"/"
    path = target.partition(b"?")[0].decode("latin-1")
    return method, path, keep_alive, content_length


class _Server:
    """The selectors loop: accepts, parses, answers from the prebuilt table, counts.

    Everything here runs in one thread; other threads only call ``request_stop()``
    and read counters under ``lock``.
    """

    def __init__(
        self,
        listeners: list[socket.socket],
        resources: list[dict[str, _Resource]],
        counters: list[PortCounters],
        lock: threading.Lock,
        delay: float,
        max_seconds: float | None,
        log_requests: bool = False,
    ) -> None:
        self.listeners = listeners
        self.log_requests = log_requests
        self.resources = resources
        self.counters = counters
        self.lock = lock
        self.delay = delay
        self.max_seconds = max_seconds
        self.open_total = 0  # over all ports, for a true global peak
        self.max_open_total = 0
        self.stop_requested = False
        self.closed = False
        self.selector = selectors.DefaultSelector()
        self.connections: set[_Connection] = set()
        self.timers: list[tuple[float, int, _Connection]] = []
        self.timer_seq = 0  # tie-breaker: connections do not compare
        self.recv_buffer = bytearray(RECV_SIZE)
        self.recv_view = memoryview(self.recv_buffer)
        self.recv_buffers = [self.recv_buffer]  # for recvmsg_into
        # Kernel receive timestamps (plain sockets only; see "Exact delays" in the module doc).
        self.timestamps = delay > 0 and _SO_TIMESTAMPNS is not None and type(self) is _Server
        self.ancillary_size = socket.CMSG_SPACE(_TIMESPEC.size)
        self.clock_offset = 0.0  # time.monotonic() - time.time(), taken after each wait
        self.arrival_floor = 0.0  # when the previous wait began: nothing read now arrived before it
        self.wait_began = 0.0
        # Waiting with a timeout: select() on the epoll descriptor has microsecond resolution.
        fileno = getattr(self.selector, "fileno", None)
        epoll_fd = fileno() if fileno is not None else -1
        self.precise_wait: list[int] | None = [epoll_fd] if 0 <= epoll_fd < _FD_SETSIZE else None
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)

    # -- control, from any thread

    def request_stop(self) -> None:
        self.stop_requested = True
        try:
            self.wake_w.send(b"\0")
        except OSError:  # full, or the loop already ended: either way it will see the flag
            pass

    # -- the loop

    def run(self) -> None:
        """Serve until ``request_stop()`` or ``max_seconds``; then close every socket."""
        deadline = None if self.max_seconds is None else time.monotonic() + self.max_seconds
        try:
            for index, listener in enumerate(self.listeners):
                self.selector.register(listener, selectors.EVENT_READ, index)
            self.selector.register(self.wake_r, selectors.EVENT_READ, None)
            timers = self.timers
            monotonic = time.monotonic
            while not self.stop_requested:
                now = monotonic()
                if timers and timers[0][0] <= now:
                    self._run_timers(now)
                    now = monotonic()
                if deadline is not None and now >= deadline:
                    break
                timeout = timers[0][0] - now if timers else None
                if deadline is not None:
                    timeout = deadline - now if timeout is None else min(timeout, deadline - now)
                self.arrival_floor, self.wait_began = self.wait_began, now
                events = self._wait(timeout)
                if events and self.timestamps:
                    # Wall clock first: the offset errs towards late stamps, never early ones.
                    wall = time.time()
                    now = monotonic()
                    self.clock_offset = now - wall
                else:
                    now = monotonic()
                # Responses that fell due during the wait go out before the new requests are read.
                if timers and timers[0][0] <= now:
                    self._run_timers(now)
                if events:
                    self._dispatch(events)
        finally:
            self.close()

    def _wait(self, timeout: float | None) -> list[tuple[selectors.SelectorKey, int]]:
        """``selector.select(timeout)``, without rounding a timeout up to whole milliseconds."""
        if timeout is not None and timeout > 0 and self.precise_wait is not None:
            ready, _, _ = select.select(self.precise_wait, (), (), timeout)
            if not ready:
                return []
            timeout = 0
        return self.selector.select(timeout)

    def _dispatch(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        monotonic = time.monotonic
        now = monotonic()
        timers = self.timers
        accepts = []
        for key, mask in events:
            conn = key.data
            if isinstance(conn, _Connection):
                self._guarded(conn, now, mask)
                # A long batch must not hold back responses that fell due meanwhile.
                if timers and timers[0][0] <= (now := monotonic()):
                    self._run_timers(now)
            elif conn is None:
                self._drain_wakeups()
            else:
                accepts.append(conn)
        # Accept last: a client that closed one connection and opened the next must
        # be seen closing first, or the counted peak would exceed what it really had.
        for index in accepts:
            self._accept(index, now)

    def _guarded(self, conn: _Connection, now: float, mask: int) -> None:
        """Handle one connection's events; a bug here costs that connection, not the server."""
        try:
            if mask & selectors.EVENT_WRITE and not conn.closed:
                self._service(conn, now)
            if mask & selectors.EVENT_READ and not conn.closed:
                self._on_readable(conn, now)
        except Exception:  # noqa: BLE001 - the loop must survive its own bugs
            self._fail(conn)

    def _fail(self, conn: _Connection) -> None:
        traceback.print_exc()
        self._close(conn)

    def _drain_wakeups(self) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _accept(self, index: int, now: float) -> None:
        # One connection per readiness event.  The listener is level-triggered, so
        # select() reports the rest next time, together with the FIN of any
        # connection the client closed before opening them.  Draining the whole
        # accept queue here would take in connections that arrived after select()
        # returned while the close that preceded them is still unread, and count
        # both as open at once: the limit tests read these counters.
        listener = self.listeners[index]
        counters = self.counters[index]
        try:
            sock, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # e.g. out of file descriptors: retried on the next event
            return
        sock.setblocking(False)
        # Responses are written whole, so Nagle would only add latency.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.timestamps:
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)  # type: ignore[arg-type]
        conn = self._adopt(sock, index, now)
        if conn is None:
            with self.lock:
                counters.accepted += 1
            return
        self.connections.add(conn)
        self._update_interest(conn)
        with self.lock:
            counters.accepted += 1
            counters.open_now += 1
            counters.max_open = max(counters.max_open, counters.open_now)
            self.open_total += 1
            self.max_open_total = max(self.max_open_total, self.open_total)

    def _adopt(self, sock: socket.socket, index: int, now: float) -> _Connection | None:
        """The connection state for an accepted socket; None if it is already lost."""
        return _Connection(sock, index, now)

    def _on_readable(self, conn: _Connection, now: float) -> None:
        ancillary: list[tuple[int, int, bytes]] | None = None
        try:
            # Into one reused buffer: a fresh 256 KiB bytes per recv costs more than the recv.
            if self.timestamps:
                received, ancillary, _, _ = conn.sock.recvmsg_into(self.recv_buffers, self.ancillary_size)
            else:
                received = conn.sock.recv_into(self.recv_buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset: nobody is left to answer
            self._close(conn)
            return
        if not received:
            if conn.draining:
                self._close(conn)
            else:
                conn.peer_eof = True  # answer what was asked, then close
                self._service(conn, now)
            return
        if conn.closing:
            return  # after the last request we answer, input is discarded
        conn.inbuf += self.recv_view[:received]
        if ancillary is not None:
            now = self._arrival(ancillary)
        elif self.delay > 0:
            now = time.monotonic()  # a delay counts from the read, not from the start of the batch
        self._service(conn, now)

    def _arrival(self, ancillary: list[tuple[int, int, bytes]]) -> float:
        """When the bytes just read arrived, on the monotonic clock: the kernel's stamp, or now.

        The kernel stamps a read with its last segment's arrival (CLOCK_REALTIME), so
        every request completed by the read had arrived by then. The stamp is kept
        inside [the previous wait began, now]: the bytes cannot be younger than the
        read, nor older than the previous wait (it would have reported them, and they
        would have been read then), so a step of the wall clock cannot make a
        response early.
        """
        read_at = time.monotonic()
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) == _TIMESPEC.size:
                seconds, nanoseconds = _TIMESPEC.unpack(data)
                stamp = seconds + nanoseconds * 1e-9 + self.clock_offset
                return read_at if stamp > read_at else max(stamp, self.arrival_floor)
        return read_at

    def _service(self, conn: _Connection, now: float) -> None:
        """Parse what can be answered, send what is pending, then close or wait."""
        while True:
            stopped_at_high_water = bool(conn.inbuf) and not conn.closing and self._parse(conn, now)
            if conn.closed or (conn.outbuf and not self._send(conn)):
                return
            if not (stopped_at_high_water and len(conn.outbuf) < OUTPUT_HIGH_WATER):
                break
        if conn.outbuf or conn.scheduled:
            self._update_interest(conn)
        elif conn.closing:
            self._finish(conn)
        elif conn.peer_eof:
            self._close(conn)  # whatever is left in inbuf is an incomplete request
        else:
            self._update_interest(conn)

    def _parse(self, conn: _Connection, now: float) -> bool:
        """Answer every complete request in ``inbuf``; True if it stopped at the high-water mark."""
        buf = conn.inbuf
        pos = 0
        high_water = oversize = False
        counters = self.counters[conn.port_index]
        resources = self.resources[conn.port_index]
        with self.lock:
            while not conn.closing:
                if conn.body_left:
                    skipped = min(conn.body_left, len(buf) - pos)
                    pos += skipped
                    conn.body_left -= skipped
                    if conn.body_left:
                        break
                if len(conn.outbuf) >= OUTPUT_HIGH_WATER:
                    high_water = True
                    break
                end = buf.find(b"\r\n\r\n", pos)
                if end < 0 or end - pos > MAX_HEAD_SIZE:
                    oversize = len(buf) - pos > MAX_HEAD_SIZE
                    break
                head = bytes(buf[pos:end]).lstrip(b"\r\n")  # RFC 9112: ignore leading empty lines
                pos = end + 4
                if not head:
                    continue
                request = _parse_head(head)
                if request is None:
                    conn.closing = True
                    self._respond(conn, now, _BAD_REQUEST.close)
                    break
                method, path, keep_alive, conn.body_left = request
                counters.requests += 1
                counters.paths[path] += 1
                if self.log_requests:
                    counters.log.append((now, path))
                age = now - conn.accepted_at
                counters.max_conn_age_at_request = max(counters.max_conn_age_at_request, age)
                resource = resources.get(path, _NOT_FOUND)
                self._respond(conn, now, resource.chunks(keep_alive, method == b"HEAD"))
                if not keep_alive:
                    conn.closing = True
        if oversize:
            self._close(conn)  # a head this big is an attack or a bug (not under the lock)
            return False
        del buf[:pos]
        return high_water

    def _respond(self, conn: _Connection, now: float, chunks: tuple[_Chunk, ...]) -> None:
        if self.delay <= 0:
            for chunk in chunks:
                conn.outbuf += chunk
            return
        due = now + self.delay
        if not conn.scheduled:  # one timer per connection: its earliest response
            self._add_timer(due, conn)
        conn.scheduled.append((due, chunks))

    def _send(self, conn: _Connection) -> bool:
        """Send as much of ``outbuf`` as the socket takes; False if the connection died."""
        try:
            sent = conn.sock.send(conn.outbuf)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            self._close(conn)
            return False
        del conn.outbuf[:sent]
        return True

    def _finish(self, conn: _Connection) -> None:
        """Every answer is sent and no more will be read: close, politely (see the module doc)."""
        if conn.peer_eof:
            self._close(conn)
            return
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.draining = True
        self._add_timer(time.monotonic() + LINGER_SECONDS, conn)
        self._update_interest(conn)

    def _update_interest(self, conn: _Connection) -> None:
        """Read unless the client is done or too far behind; write only while output waits."""
        want = 0
        if not conn.peer_eof and len(conn.outbuf) < OUTPUT_HIGH_WATER:
            want = selectors.EVENT_READ
        if conn.outbuf:
            want |= selectors.EVENT_WRITE
        if want == conn.mask:
            return
        if conn.mask == 0:
            self.selector.register(conn.sock, want, conn)
        elif want == 0:  # e.g. the client is done and only delayed answers remain
            self.selector.unregister(conn.sock)
        else:
            self.selector.modify(conn.sock, want, conn)
        conn.mask = want

    # -- timers

    def _add_timer(self, due: float, conn: _Connection) -> None:
        self.timer_seq += 1
        heapq.heappush(self.timers, (due, self.timer_seq, conn))

    def _run_timers(self, now: float) -> None:
        timers = self.timers
        while timers and timers[0][0] <= now:
            _, _, conn = heapq.heappop(timers)
            if conn.closed:
                continue
            if conn.draining:  # the client never closed its side: give up on it
                self._close(conn)
                continue
            try:
                self._release_due(conn, now)
            except Exception:  # noqa: BLE001 - as in _guarded
                self._fail(conn)

    def _release_due(self, conn: _Connection, now: float) -> None:
        scheduled = conn.scheduled
        while scheduled and scheduled[0][0] <= now:
            for chunk in scheduled.popleft()[1]:
                conn.outbuf += chunk
        if scheduled:  # the one timer of this connection moves to its next response
            self._add_timer(scheduled[0][0], conn)
        self._service(conn, now)

    # -- closing

    def _close(self, conn: _Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        if conn.mask:
            self.selector.unregister(conn.sock)
            conn.mask = 0
        conn.sock.close()
        self.connections.discard(conn)
        with self.lock:
            self.counters[conn.port_index].open_now -= 1
            self.open_total -= 1

    def close(self) -> None:
        """Close every socket the loop owns (not ``wake_w``: other threads may still poke it)."""
        if self.closed:
            return
        self.closed = True
        for conn in list(self.connections):
            self._close(conn)
        for sock in (*self.listeners, self.wake_r):
            sock.close()
        self.selector.close()


# --------------------------------------------------------------------------- TLS


class _TLSConnection(_Connection):
    """A connection whose ``sock`` is an ``ssl.SSLSocket`` made with ``do_handshake_on_connect=False``."""

    __slots__ = ("handshake_want", "handshaking", "read_wants_write", "write_wants_read")

    def __init__(self, sock: ssl.SSLSocket, port_index: int, accepted_at: float) -> None:
        super().__init__(sock, port_index, accepted_at)
        self.handshaking = True
        self.handshake_want = selectors.EVENT_READ  # the ClientHello comes first
        # After the handshake, TLS may need the *other* direction to go on (a key
        # update, a renegotiation): a read that waits for writability, or the reverse.
        self.read_wants_write = False
        self.write_wants_read = False


class _TLSServer(_Server):
    """``_Server`` with every socket wrapped in TLS; the plain class stays as it was.

    Only the socket-facing methods change: accept wraps, the first events drive
    the handshake, reads and writes go through the SSL object and turn its
    WANT_READ / WANT_WRITE into selector interest. Parsing, responding, delays
    and counters are the plain server's.
    """

    def __init__(self, *args: Any, context: ssl.SSLContext) -> None:
        super().__init__(*args)
        self.context = context

    def _adopt(self, sock: socket.socket, index: int, now: float) -> _Connection | None:
        try:
            tls_sock = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (ssl.SSLError, OSError, ValueError):  # e.g. the client reset already
            sock.close()
            with self.lock:
                self.counters[index].tls_failed += 1
            return None
        return _TLSConnection(tls_sock, index, now)

    def _guarded(self, conn: _Connection, now: float, mask: int) -> None:
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

    def _on_readable(self, conn: _Connection, now: float) -> None:
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

    def _send(self, conn: _Connection) -> bool:
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

    def _update_interest(self, conn: _Connection) -> None:
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


# --------------------------------------------------------------------------- public API


class TestSite:
    """A generated web site on K loopback ports, served by one fast selectors loop.

    Use it as a context manager (``with TestSite(hosts=3) as site:``), or call
    ``start()``/``stop()``, or ``serve_forever()`` from a command line.

    Args:
        hosts: listening ports, one per simulated host.
        pages: generated pages per host, at ``/page/0`` .. ``/page/{pages-1}``.
        delay: seconds between reading a request and sending its response.
        page_size: approximate size of a generated page in bytes (filler pads it).
        links_per_page: same-host links on each page (fewer when there are fewer pages).
        cross_host_links: link each page to the same page of the next host, so a
            crawl from host 0's ``/`` reaches every host.
        host: a loopback IP literal to bind; nothing else is accepted, so the
            site can never be reached from off the machine.
        port: 0 for ephemeral ports, or P for P, P+1, ... P+hosts-1.
        robots_disallow: paths for ``Disallow:`` lines in ``/robots.txt``.
        robots_crawl_delay: a ``Crawl-delay:`` line for ``/robots.txt``; None = none.
        robots_redirects: ``/robots.txt`` of host j answers with a redirect to
            ``/robots/j/1``, which redirects to ``/robots/j/2`` ... up to
            ``/robots/j/{robots_redirects}``, which holds host j's rules.
        robots_redirect_status: the status of those redirects (301, 302, 303, 307, 308).
        robots_redirect_cross_host: hop k of host j's chain is on host j+k (of the
            ring) instead of host j, so every hop changes host.
        robots_unavailable: the first N requests of each host's ``/robots.txt``
            get ``503 Service Unavailable``; the rules (or the redirect) after that.
        log_requests: record ``(arrival time, path)`` of every request in
            ``PortCounters.log`` (off by default: a benchmark's millions of
            requests would pile up).
        bodies: real pages to serve instead of generated ones (page i gets
            ``bodies[i % len(bodies)]`` with the site's links inserted).
        max_seconds: the loop stops by itself after this long, so a forgotten
            site cannot outlive a test run; None = no bound.
        tls: a server-side ``ssl.SSLContext`` (see ``tls_context_from_files``) to
            serve HTTPS on every port; the URLs are then ``https://``. None = plain HTTP.
    """

    __test__ = False  # the name starts with "Test"; stop pytest collecting it

    def __init__(
        self,
        hosts: int = 1,
        pages: int = 100,
        delay: float = 0.0,
        page_size: int = 2048,
        links_per_page: int = 5,
        cross_host_links: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        robots_disallow: Sequence[str] = (),
        bodies: Sequence[bytes] | None = None,
        max_seconds: float | None = 600.0,
        tls: ssl.SSLContext | None = None,
        robots_crawl_delay: float | None = None,
        robots_redirects: int = 0,
        robots_redirect_status: int = 301,
        robots_redirect_cross_host: bool = False,
        robots_unavailable: int = 0,
        log_requests: bool = False,
    ) -> None:
        if hosts < 1 or pages < 1 or links_per_page < 1:
            raise ValueError(
                f"hosts, pages and links_per_page must be >= 1, not {hosts!r}, {pages!r}, {links_per_page!r}"
            )
        if delay < 0 or page_size < 0:
            raise ValueError(f"delay and page_size must be >= 0, not {delay!r}, {page_size!r}")
        if not 0 <= port <= 65536 - hosts:
            raise ValueError(f"port must leave room for {hosts} ports below 65536, not {port!r}")
        if max_seconds is not None and max_seconds <= 0:
            raise ValueError(f"max_seconds must be > 0 or None, not {max_seconds!r}")
        if bodies is not None and not bodies:
            raise ValueError("bodies must not be empty")
        if tls is not None and not isinstance(tls, ssl.SSLContext):
            raise ValueError(f"tls must be an ssl.SSLContext or None, not {tls!r}")
        if robots_crawl_delay is not None and not robots_crawl_delay >= 0:
            raise ValueError(f"robots_crawl_delay must be >= 0 or None, not {robots_crawl_delay!r}")
        if robots_redirects < 0 or robots_unavailable < 0:
            raise ValueError(
                f"robots_redirects and robots_unavailable must be >= 0, not {robots_redirects!r}, {robots_unavailable!r}"
            )
        if robots_redirect_status not in _REDIRECT_REASONS:
            raise ValueError(f"robots_redirect_status must be one of {sorted(_REDIRECT_REASONS)}, "
                             f"not {robots_redirect_status!r}")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"host must be a loopback IP literal, not {host!r}") from None
        if not address.is_loopback:
            raise ValueError(f"host must be a loopback IP literal, not {host!r}")
        self.hosts = hosts
        self.pages = pages
        self.delay = delay
        self.page_size = page_size
        self.links_per_page = links_per_page
        self.cross_host_links = cross_host_links
        self.host = host
        self.port = port
        self.robots_disallow = tuple(robots_disallow)
        self.robots_crawl_delay = robots_crawl_delay
        self.robots_redirects = robots_redirects
        self.robots_redirect_status = robots_redirect_status
        self.robots_redirect_cross_host = robots_redirect_cross_host
        self.robots_unavailable = robots_unavailable
        self.log_requests = log_requests
        self.bodies = None if bodies is None else list(bodies)
        self._body_parts = [_split_at_body_end(body) for body in self.bodies or ()]
        self.max_seconds = max_seconds
        self.tls = tls
        self.scheme = "http" if tls is None else "https"
        self._family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        self._url_host = f"[{host}]" if address.version == 6 else host
        self._lock = threading.Lock()
        self._counters = [PortCounters() for _ in range(hosts)]
        self._ports: list[int] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    # -- lifecycle

    def start(self) -> TestSite:
        """Bind every port and start the loop in a daemon thread; all ports listen on return."""
        if self._server is not None or self._stopped:
            raise RuntimeError("a TestSite can be started only once")
        server = self._bind()
        self._thread = threading.Thread(target=server.run, name="niofetcher-testsite", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the loop, close every socket and join the thread. Safe to call twice."""
        self._stopped = True
        server, thread = self._server, self._thread
        if server is None:
            return
        server.request_stop()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
            server.wake_w.close()

    def serve_forever(self, on_ready: Callable[[TestSite], None] | None = None) -> None:
        """Serve in the calling thread until Ctrl-C or ``max_seconds`` (for the command line).

        ``on_ready`` is called once the ports are bound (so it can print ``base_urls``).
        """
        if self._server is not None or self._stopped:
            raise RuntimeError("a TestSite can be started only once")
        server = self._bind()
        try:
            if on_ready is not None:
                on_ready(self)
            server.run()
        except KeyboardInterrupt:
            pass
        finally:
            self._stopped = True
            server.close()
            server.wake_w.close()

    def __enter__(self) -> TestSite:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running" if self._server else "new"
        tls = " tls" if self.tls is not None else ""
        return f"<TestSite hosts={self.hosts} pages={self.pages} ports={self._ports}{tls} {state}>"

    # -- addresses

    @property
    def ports(self) -> list[int]:
        """The listening ports, host 0 first. Known before ``start()`` only for a fixed ``port``."""
        if self._ports:
            return list(self._ports)
        if self.port:
            return [self.port + i for i in range(self.hosts)]
        raise RuntimeError("ephemeral ports are assigned by start()")

    @property
    def base_urls(self) -> list[str]:
        """``http://127.0.0.1:{port}/`` (``https://`` with TLS) for each host, host 0 first."""
        return [f"{self.scheme}://{self._url_host}:{port}/" for port in self.ports]

    def page_urls(self) -> list[str]:
        """Every page of every host (what a full crawl must fetch), each host's index first."""
        return [
            url
            for base in self.base_urls
            for url in (base, *(f"{base}page/{i}" for i in range(self.pages)))
        ]

    # -- counters

    def counters(self, port: int | None = None) -> PortCounters:
        """A copy of one port's counters; ``None`` sums all ports (peaks are true global peaks, and
        the logs are merged in time order)."""
        with self._lock:
            if port is not None:
                return self._counters[self.ports.index(port)].copy()
            total = PortCounters()
            for counters in self._counters:
                total.accepted += counters.accepted
                total.open_now += counters.open_now
                total.requests += counters.requests
                total.tls_handshakes += counters.tls_handshakes
                total.tls_resumed += counters.tls_resumed
                total.tls_failed += counters.tls_failed
                total.max_conn_age_at_request = max(
                    total.max_conn_age_at_request, counters.max_conn_age_at_request
                )
                total.paths.update(counters.paths)
                total.log.extend(counters.log)
            total.log.sort()
            total.max_open = self._server.max_open_total if self._server else 0
            return total

    def reset_counters(self) -> None:
        """Zero the counters; open connections stay counted as open (and as the new peak)."""
        with self._lock:
            for counters in self._counters:  # in place: the loop holds references to them
                counters.accepted = counters.requests = 0
                counters.tls_handshakes = counters.tls_resumed = counters.tls_failed = 0
                counters.max_conn_age_at_request = 0.0
                counters.paths.clear()
                counters.log.clear()
                counters.max_open = counters.open_now
            if self._server is not None:
                self._server.max_open_total = self._server.open_total

    # -- internals

    def _bind(self) -> _Server:
        listeners: list[socket.socket] = []
        try:
            for i in range(self.hosts):
                sock = socket.socket(self._family, socket.SOCK_STREAM)
                listeners.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((self.host, self.port + i if self.port else 0))
                sock.listen(LISTEN_BACKLOG)
                sock.setblocking(False)
        except BaseException:
            for sock in listeners:
                sock.close()
            raise
        self._ports = [sock.getsockname()[1] for sock in listeners]
        resources = [self._build_host(i) for i in range(self.hosts)]
        args = (listeners, resources, self._counters, self._lock, self.delay, self.max_seconds, self.log_requests)
        self._server = _Server(*args) if self.tls is None else _TLSServer(*args, context=self.tls)
        return self._server

    def _build_host(self, index: int) -> dict[str, _Resource]:
        """The prebuilt responses of one host, keyed by path."""
        pages, count = self.pages, self.links_per_page
        cross = self.cross_host_links and self.hosts > 1
        next_base = self.base_urls[(index + 1) % self.hosts]
        index_links = [(f"/page/{j}", f"page {j}") for j in range(min(count, pages))]
        if cross:
            index_links.append((next_base, "next host"))
        table = {
            "/": _Resource("200 OK", _HTML, [
                _generated_page(f"Test site host {index}", _links_html(index_links), self.page_size)
            ]),
            **self._robots_resources(index),
        }
        for i in range(pages):
            hrefs = [(f"/page/{j}", f"page {j}") for j in _link_targets(i, pages, count)]
            if cross:
                hrefs.append((f"{next_base}page/{i}", f"page {i} on the next host"))
            links = _links_html(hrefs)
            body: list[_Chunk]
            if self.bodies is None:
                body = [_generated_page(f"Test site host {index} page {i}", links, self.page_size)]
            else:
                before, after = self._body_parts[i % len(self._body_parts)]
                body = [before, links.encode("utf-8"), after]
            table[f"/page/{i}"] = _Resource("200 OK", _HTML, body)
        return table

    def _robots_resources(self, index: int) -> dict[str, _Resource]:
        """``/robots.txt`` of host ``index`` and the hops of every host's redirect chain (each host
        serves them all: which host a hop is asked of is the chain's business)."""
        rules = _Resource("200 OK", _TEXT, [_robots_txt(self.robots_disallow, self.robots_crawl_delay)])
        status = self.robots_redirect_status
        hops = self.robots_redirects

        def hop(j: int, k: int) -> _Resource:
            """Hop ``k`` of host ``j``'s chain: the rules at its end, a redirect to hop k+1 before."""
            if k == hops:
                return rules
            host = (j + k + 1) % self.hosts if self.robots_redirect_cross_host else j
            location = f"{self.base_urls[host]}robots/{j}/{k + 1}"
            return _Resource(f"{status} {_REDIRECT_REASONS[status]}", _TEXT, [b"moved\n"], f"Location: {location}\r\n")

        table = {f"/robots/{j}/{k}": hop(j, k) for j in range(self.hosts) for k in range(1, hops + 1)}
        table["/robots.txt"] = hop(index, 0)
        if self.robots_unavailable:
            busy = _Resource("503 Service Unavailable", _TEXT, [b"503 busy\n"])
            table["/robots.txt"] = _InTurn([busy] * self.robots_unavailable + [table["/robots.txt"]])
        return table

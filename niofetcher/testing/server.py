"""The test site's server: one ``selectors`` loop that accepts, parses, answers and counts.

The server must never be what a benchmark measures, so it does as little as it
can per request:

* one thread runs a ``selectors`` loop over non-blocking sockets; no
  ``http.server``, no h11 on this side;
* every response is built once, at start, as bytes keyed by path (``pages``);
  serving a request is a dict lookup and a copy into the connection's output
  buffer;
* a request head is parsed by hand, only for what changes the answer
  (``messages``);
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

Every request is counted, per port, in a ``PortCounters`` (``counters.py``,
which says what each figure means, turnaround among them).

Closing politely: when the server decides to close (``Connection: close``, an
HTTP/1.0 request, a bad request) it sends its response, shuts down its sending
side and keeps reading until the client closes. Closing at once while the
client may still be sending would turn the FIN into a RST, and a RST can make
the client's kernel drop the response it has not read yet.
"""

from __future__ import annotations

import collections
import heapq
import platform
import select
import selectors
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence

from .counters import PortCounters
from .messages import BAD_REQUEST, NOT_FOUND, Chunk, parse_head
from .pages import Resources

__all__ = [
    "LINGER_SECONDS", "LISTEN_BACKLOG", "MAX_HEAD_SIZE", "OUTPUT_HIGH_WATER", "RECV_SIZE",
]

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


class Origin:
    """One served host: its responses, the counters its requests go to, and its delay.

    A plain site has one per port. A site of many host names has one per name too
    (``Server``'s ``names``), and a connection moves from its port's to its name's
    with its first request.
    """

    __slots__ = ("by_target", "counters", "delay", "resources")

    def __init__(self, resources: Resources, counters: PortCounters, delay: float = 0.0, *,
                 by_target: bool = False) -> None:
        self.resources = resources
        self.counters = counters
        self.delay = delay
        # Whether ``resources`` is asked for the whole request target, query included (the trap
        # site's pagination and session IDs), instead of the path.
        self.by_target = by_target


class ServerConnection:
    """One accepted socket and its buffers; the server loop owns all of its state."""

    __slots__ = (
        "accepted_at",
        "answered_at",
        "body_left",
        "closed",
        "closing",
        "draining",
        "inbuf",
        "mask",
        "origin",
        "outbuf",
        "peer_eof",
        "port_index",
        "scheduled",
        "sock",
        "unbound",
    )

    def __init__(self, sock: socket.socket, port_index: int, origin: Origin, accepted_at: float) -> None:
        self.sock = sock
        self.port_index = port_index
        self.origin = origin  # whose responses, counters and delay its requests get
        self.unbound = False  # True while its first request may still bind it to a host name
        self.accepted_at = accepted_at
        self.answered_at: float | None = None  # when every response owed was written; None while one is owed
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.body_left = 0  # bytes of a request body still to discard
        # (due, chunks) of delayed responses, in request order; due times only grow.
        self.scheduled: collections.deque[tuple[float, tuple[Chunk, ...]]] = collections.deque()
        self.mask = 0  # the selector events registered; 0 = not registered
        self.closing = False  # no more requests will be read: close once answered
        self.draining = False  # our side is shut down; waiting for the client's FIN
        self.peer_eof = False  # the client has shut down its sending side
        self.closed = False


class Server:
    """The selectors loop: accepts, parses, answers from the prebuilt table, counts.

    Everything here runs in one thread; other threads only call ``request_stop()``
    and read counters under ``lock``. ``origins`` holds each listener's host; with
    ``names`` (``Host`` field, lowercased, to its host), a connection belongs to the
    host its first request names, or stays its port's when the name is unknown.
    """

    def __init__(
        self,
        listeners: list[socket.socket],
        origins: Sequence[Origin],
        lock: threading.Lock,
        max_seconds: float | None,
        log_requests: bool = False,
        names: Mapping[bytes, Origin] | None = None,
    ) -> None:
        self.listeners = listeners
        self.log_requests = log_requests
        self.origins = origins
        self.counters = [origin.counters for origin in origins]
        self.names = names
        self.lock = lock
        self.max_seconds = max_seconds
        self.open_total = 0  # over all ports, for a true global peak
        self.max_open_total = 0
        self.stop_requested = False
        self.closed = False
        self.selector = selectors.DefaultSelector()
        self.connections: set[ServerConnection] = set()
        self.timers: list[tuple[float, int, ServerConnection]] = []
        self.timer_seq = 0  # tie-breaker: connections do not compare
        self.recv_buffer = bytearray(RECV_SIZE)
        self.recv_view = memoryview(self.recv_buffer)
        self.recv_buffers = [self.recv_buffer]  # for recvmsg_into
        # Kernel receive timestamps (plain sockets only; see "Exact delays" in the module doc).
        delayed = any(origin.delay > 0 for origin in (*origins, *(names or {}).values()))
        self.timestamps = delayed and _SO_TIMESTAMPNS is not None and type(self) is Server
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
        """Ask the loop, from any thread, to end: it sees the flag at its next wake-up."""
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
            if isinstance(conn, ServerConnection):
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

    def _guarded(self, conn: ServerConnection, now: float, mask: int) -> None:
        """Handle one connection's events; a bug here costs that connection, not the server."""
        try:
            if mask & selectors.EVENT_WRITE and not conn.closed:
                self._service(conn, now)
            if mask & selectors.EVENT_READ and not conn.closed:
                self._on_readable(conn, now)
        except Exception:  # noqa: BLE001 - the loop must survive its own bugs
            self._fail(conn)

    def _fail(self, conn: ServerConnection) -> None:
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
        conn.unbound = self.names is not None
        self.connections.add(conn)
        self._update_interest(conn)
        with self.lock:
            counters.accepted += 1
            counters.open_now += 1
            counters.max_open = max(counters.max_open, counters.open_now)
            self.open_total += 1
            self.max_open_total = max(self.max_open_total, self.open_total)

    def _adopt(self, sock: socket.socket, index: int, now: float) -> ServerConnection | None:
        """The connection state for an accepted socket; None if it is already lost."""
        return ServerConnection(sock, index, self.origins[index], now)

    def _on_readable(self, conn: ServerConnection, now: float) -> None:
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
        else:
            now = time.monotonic()  # a delay or a turnaround counts from the read, not from the start of the batch
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

    def _service(self, conn: ServerConnection, now: float) -> None:
        """Parse what can be answered, send what is pending, then close or wait."""
        while True:
            stopped_at_high_water = bool(conn.inbuf) and not conn.closing and self._parse(conn, now)
            sending = bool(conn.outbuf)
            # Stamped before the write: the client cannot have the bytes sooner, so the turnaround is
            # never shorter than its wait (stamped after, a server thread descheduled between the two
            # made a 50 ms wait read as 48 ms on a loaded machine).
            sent_at = time.monotonic() if sending else 0.0
            if conn.closed or (sending and not self._send(conn)):
                return
            if sending and not conn.outbuf and not conn.scheduled:  # the last byte owed is written
                conn.answered_at = sent_at
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

    def _parse(self, conn: ServerConnection, now: float) -> bool:
        """Answer every complete request in ``inbuf``; True if it stopped at the high-water mark."""
        buf = conn.inbuf
        pos = 0
        high_water = oversize = False
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
                request = parse_head(head)
                if request is None:
                    conn.closing = True
                    self._respond(conn, now, BAD_REQUEST.close, conn.origin.delay)
                    break
                method, path, keep_alive, conn.body_left, host, target = request
                if conn.unbound:
                    self._bind_to_host(conn, host)
                origin = conn.origin
                counters = origin.counters
                if conn.answered_at is not None:  # the client's turnaround (module doc)
                    counters.turnaround.add(now - conn.answered_at)
                    conn.answered_at = None
                counters.requests += 1
                counters.paths[path] += 1
                if self.log_requests:
                    counters.log.append((now, path))
                age = now - conn.accepted_at
                counters.max_conn_age_at_request = max(counters.max_conn_age_at_request, age)
                resource = origin.resources.get(target.decode("latin-1") if origin.by_target else path, NOT_FOUND)
                self._respond(conn, now, resource.chunks(keep_alive, method == b"HEAD"), origin.delay)
                if not keep_alive:
                    conn.closing = True
        if oversize:
            self._close(conn)  # a head this big is an attack or a bug (not under the lock)
            return False
        del buf[:pos]
        return high_water

    def _bind_to_host(self, conn: ServerConnection, host: bytes) -> None:
        """Give the connection to the host its first request names (under ``lock``), counted there."""
        conn.unbound = False
        origin = self.names.get(host) if self.names is not None else None
        if origin is None:
            return
        conn.origin = origin
        counters = origin.counters
        counters.accepted += 1
        counters.open_now += 1
        counters.max_open = max(counters.max_open, counters.open_now)

    def _respond(self, conn: ServerConnection, now: float, chunks: tuple[Chunk, ...], delay: float) -> None:
        if delay <= 0:
            for chunk in chunks:
                conn.outbuf += chunk
            return
        due = now + delay
        if not conn.scheduled:  # one timer per connection: its earliest response
            self._add_timer(due, conn)
        conn.scheduled.append((due, chunks))

    def _send(self, conn: ServerConnection) -> bool:
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

    def _finish(self, conn: ServerConnection) -> None:
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

    def _update_interest(self, conn: ServerConnection) -> None:
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

    def _add_timer(self, due: float, conn: ServerConnection) -> None:
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

    def _release_due(self, conn: ServerConnection, now: float) -> None:
        scheduled = conn.scheduled
        while scheduled and scheduled[0][0] <= now:
            for chunk in scheduled.popleft()[1]:
                conn.outbuf += chunk
        if scheduled:  # the one timer of this connection moves to its next response
            self._add_timer(scheduled[0][0], conn)
        self._service(conn, now)

    # -- closing

    def _close(self, conn: ServerConnection) -> None:
        if conn.closed:
            return
        conn.closed = True
        if conn.mask:
            self.selector.unregister(conn.sock)
            conn.mask = 0
        conn.sock.close()
        self.connections.discard(conn)
        with self.lock:
            port_counters = self.counters[conn.port_index]
            port_counters.open_now -= 1
            if conn.origin.counters is not port_counters:
                conn.origin.counters.open_now -= 1
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


def peer_closed(sock: socket.socket) -> bool:
    """Whether the peer has closed ``sock`` (its FIN or RST has come), without reading from it.

    POLLRDHUP is raised as soon as the FIN arrives, even with request bytes unread, and
    polling consumes nothing, so the thread serving the socket is not disturbed.  The servers
    count open connections with it: a client that closes one connection and opens another is
    not seen holding both because a handler has not read the close yet.  Where there
    is no POLLRDHUP (not Linux), every connection not yet shut down counts as open.
    """
    fd = sock.fileno()
    if fd < 0:
        return True
    rdhup = getattr(select, "POLLRDHUP", 0)
    if not rdhup:
        return False
    poller = select.poll()
    poller.register(fd, rdhup | select.POLLHUP | select.POLLERR)
    try:
        events = poller.poll(0)
    except OSError:
        return True
    return any(event & (rdhup | select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, event in events)

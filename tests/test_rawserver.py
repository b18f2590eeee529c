"""The scripted servers do what they say: counts, framing, each fault, stop()."""

from __future__ import annotations

import http.client
import io
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable

import pytest
import rawserver
from conftest import LeakBaseline, MakeServer, check_leaks, fd_count, take_baseline
from rawserver import (
    ConnInfo,
    RawServer,
    big_body,
    body_pattern,
    broken_chunked,
    close_after_head,
    close_before_response,
    delayed,
    drop_idle_after_first,
    garbage_status,
    get_unused_port,
    gzip_bomb,
    gzip_bomb_body,
    hang,
    http_response,
    ok,
    oversize_header,
    read_request,
    redirect,
    reset,
    reset_mid_body,
    serve_keepalive,
    slow_body,
    truncated_body,
)

GET = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"


def wait_for(predicate: Callable[[], bool], timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def connect(srv: RawServer) -> socket.socket:
    return socket.create_connection(srv.address, timeout=5)


def exchange(srv: RawServer, request: bytes = GET) -> bytes:
    """Send ``request`` on a new connection, return all bytes until EOF."""
    with connect(srv) as sock:
        sock.sendall(request)
        return recv_all(sock)


def recv_all(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while True:
        data = sock.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def parse(raw: bytes, method: str = "GET") -> http.client.HTTPResponse:
    """Parse response bytes with http.client, the reference parser here."""

    class FakeSock:
        def makefile(self, mode: str) -> io.BytesIO:
            return io.BytesIO(raw)

    resp = http.client.HTTPResponse(FakeSock(), method=method)  # type: ignore[arg-type]
    resp.begin()
    return resp


def rawserver_threads(srv: RawServer) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"rawserver-{srv.port}-")]


# -- the server --------------------------------------------------------------


@pytest.mark.timeout(20)
def test_counts_and_keepalive(raw_server: MakeServer) -> None:
    srv = raw_server(ok(b"hello"))
    assert srv.url("/x") == f"http://127.0.0.1:{srv.port}/x"
    conns = [http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5) for _ in range(3)]
    try:
        for conn in conns:
            for _ in range(2):  # keep-alive: two requests, one connection
                conn.request("GET", "/a")
                resp = conn.getresponse()
                assert (resp.status, resp.read()) == (200, b"hello")
        assert srv.accepted == 3
        assert srv.open_now == 3
        assert srv.max_open == 3
        assert len(srv.requests) == 6
        assert all(r.startswith(b"GET /a HTTP/1.1\r\n") for r in srv.requests)
    finally:
        for conn in conns:
            conn.close()
    assert wait_for(lambda: srv.open_now == 0)
    assert srv.max_open == 3
    assert srv.unexpected_errors == []


@pytest.mark.timeout(20)
def test_max_open_does_not_count_connections_the_client_closed(raw_server: MakeServer) -> None:
    srv = raw_server(hang())
    a, b = connect(srv), connect(srv)
    assert wait_for(lambda: srv.accepted == 2)
    a.close()  # the FIN reaches the server before the next SYN
    c = connect(srv)
    assert wait_for(lambda: srv.accepted == 3)
    b.close()
    c.close()
    assert srv.max_open == 2
    assert wait_for(lambda: srv.open_now == 0)


@pytest.mark.timeout(20)
def test_handler_errors_are_recorded_not_raised(raw_server: MakeServer) -> None:
    def broken(sock: socket.socket, info: ConnInfo) -> None:
        read_request(sock, info)
        raise RuntimeError("bug in handler")

    seen: list[threading.ExceptHookArgs] = []
    old_hook = threading.excepthook
    threading.excepthook = seen.append
    try:
        srv = raw_server(broken)
        assert exchange(srv) == b""
        assert wait_for(lambda: len(srv.errors) == 1)
    finally:
        threading.excepthook = old_hook
    assert seen == []
    assert [str(e) for e in srv.unexpected_errors] == ["bug in handler"]


@pytest.mark.timeout(20)
def test_stop_ends_all_threads_and_closes_everything() -> None:
    before = fd_count()
    srv = RawServer(hang()).start()
    clients = [connect(srv) for _ in range(5)]
    for c in clients:
        c.sendall(GET)
    assert wait_for(lambda: len(srv.requests) == 5)
    assert len(rawserver_threads(srv)) == 6  # the acceptor and one per connection
    t0 = time.monotonic()
    srv.stop()
    assert time.monotonic() - t0 < 2.0
    assert srv.stopped
    assert rawserver_threads(srv) == []
    srv.stop()  # idempotent
    for c in clients:
        assert c.recv(1) == b""  # the server closed its end
        c.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(srv.address, timeout=5).close()
    assert fd_count() == before
    assert srv not in rawserver.running_servers()
    assert srv.unexpected_errors == []


@pytest.mark.timeout(20)
def test_stop_interrupts_sleeping_handlers() -> None:
    with RawServer(slow_body(interval=5, total_seconds=50)) as srv:
        sock = connect(srv)
        sock.sendall(GET)
        assert wait_for(lambda: len(srv.requests) == 1)
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 2.0
    assert rawserver_threads(srv) == []
    sock.close()


@pytest.mark.timeout(20)
def test_max_seconds_stops_the_server() -> None:
    srv = RawServer(ok(), max_seconds=0.3).start()
    try:
        assert exchange(srv, GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")).startswith(
            b"HTTP/1.1 200 OK\r\n"
        )
        assert wait_for(lambda: srv.stopped)
        assert rawserver_threads(srv) == []
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(srv.address, timeout=5).close()
    finally:
        srv.stop()


@pytest.mark.timeout(20)
def test_start_twice_raises() -> None:
    with RawServer(ok()) as srv, pytest.raises(RuntimeError):
        srv.start()


@pytest.mark.timeout(20)
def test_get_unused_port_refuses() -> None:
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", get_unused_port()), timeout=5).close()


# -- read_request --------------------------------------------------------------


@pytest.mark.timeout(20)
def test_read_request_pipelined_with_bodies(raw_server: MakeServer) -> None:
    heads: list[bytes | None] = []

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        while True:
            head = read_request(sock, info)
            heads.append(head)
            if head is None:
                return
            sock.sendall(http_response(200, head.split(b" ")[1]))

    srv = raw_server(handler)
    r1 = b"POST /one HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n"
    r2 = b"POST /two HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    r2_body = b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nTrailer: x\r\n\r\n"
    r3 = b"GET /three HTTP/1.1\r\nHost: t\r\n\r\n"
    with connect(srv) as sock:
        # All three in one send, then split at awkward places: the buffering
        # must not care where the segments end.
        sock.sendall(b"\r\n" + r1 + b"hello" + r2 + r2_body[:5])
        time.sleep(0.05)
        sock.sendall(r2_body[5:] + r3)
        sock.shutdown(socket.SHUT_WR)
        data = recv_all(sock)
    assert heads == [r1, r2, r3, None]
    assert srv.requests == [r1, r2, r3]
    assert data == http_response(200, b"/one") + http_response(200, b"/two") + http_response(200, b"/three")
    assert srv.errors == []


@pytest.mark.timeout(20)
def test_read_request_eof_mid_head_is_none(raw_server: MakeServer) -> None:
    heads: list[bytes | None] = []

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        heads.append(read_request(sock, info.server))  # the RawServer form

    srv = raw_server(handler)
    with connect(srv) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHo")
        sock.shutdown(socket.SHUT_WR)
        assert recv_all(sock) == b""
    assert heads == [None]
    assert srv.requests == []


# -- http_response -------------------------------------------------------------


@pytest.mark.timeout(20)
def test_http_response_framing() -> None:
    raw = http_response(404, b"nope", [("X-A", "1")])
    assert raw == b"HTTP/1.1 404 Not Found\r\nX-A: 1\r\nContent-Length: 4\r\n\r\nnope"
    resp = parse(http_response(200, b"abcdefghij", chunked=True, close=True))
    assert resp.getheader("Transfer-Encoding") == "chunked"
    assert resp.getheader("Connection") == "close"
    assert resp.read() == b"abcdefghij"
    assert http_response(200, b"x" * 10, chunked=True) == (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\nxxxx\r\n4\r\nxxxx\r\n2\r\nxx\r\n0\r\n\r\n"
    )
    assert http_response(204) == b"HTTP/1.1 204 No Content\r\n\r\n"
    assert http_response(299, reason="Odd").startswith(b"HTTP/1.1 299 Odd\r\n")
    # A header given by the caller wins: lying on purpose is allowed.
    assert b"Content-Length: 7\r\n\r\nab" in http_response(200, b"ab", [(b"Content-Length", b"7")])
    with pytest.raises(ValueError):
        http_response(304, b"body")


# -- reset ---------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_reset_sends_rst(raw_server: MakeServer) -> None:
    # The server resets only once the client has written: a reset at once can beat the client's
    # connect() back to it on a busy machine, and connect() then raises it instead of recv().
    def handler(sock: socket.socket, info: ConnInfo) -> None:
        sock.recv(1)
        reset(sock)

    srv = raw_server(handler)
    with connect(srv) as sock:
        sock.sendall(b"x")
        assert wait_for(lambda: srv.accepted == 1 and srv.open_now == 0)
        with pytest.raises(ConnectionResetError):
            sock.recv(10)


# -- the ready-made handlers ---------------------------------------------------


@pytest.mark.timeout(20)
def test_ok_keepalive_and_head(raw_server: MakeServer) -> None:
    srv = raw_server(ok(b"body!"))
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        conn.request("HEAD", "/")
        resp = conn.getresponse()
        assert resp.getheader("Content-Length") == "5"
        assert resp.read() == b""
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"body!"
    finally:
        conn.close()
    assert srv.accepted == 1


@pytest.mark.timeout(20)
def test_garbage_status(raw_server: MakeServer) -> None:
    assert exchange(raw_server(garbage_status())) == b"HELLO WORLD\r\n\r\n"


@pytest.mark.timeout(20)
def test_truncated_body(raw_server: MakeServer) -> None:
    raw = exchange(raw_server(truncated_body()))
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"Content-Length: 100" in head
    assert len(body) == 10
    with pytest.raises(http.client.IncompleteRead):
        parse(raw).read()


@pytest.mark.timeout(20)
def test_close_before_response(raw_server: MakeServer) -> None:
    srv = raw_server(close_before_response())
    assert exchange(srv) == b""
    assert srv.requests == [GET]


@pytest.mark.timeout(20)
def test_close_after_head(raw_server: MakeServer) -> None:
    raw = exchange(raw_server(close_after_head()))
    assert raw.endswith(b"Content-Length: 100\r\n\r\n")
    assert parse(raw).status == 200


@pytest.mark.timeout(20)
def test_reset_mid_body(raw_server: MakeServer) -> None:
    srv = raw_server(reset_mid_body(content_length=1000, sent=100))
    got = b""
    with connect(srv) as sock:
        sock.sendall(GET)
        with pytest.raises(ConnectionResetError):
            while True:
                data = sock.recv(65536)
                assert data, "clean EOF instead of a reset"
                got += data
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"Content-Length: 1000" in head
    assert body == b"x" * 100


@pytest.mark.timeout(20)
def test_broken_chunked(raw_server: MakeServer) -> None:
    raw = exchange(raw_server(broken_chunked()))
    assert b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz-not-hex\r\n" in raw
    with pytest.raises((http.client.IncompleteRead, ValueError)):
        parse(raw).read()


@pytest.mark.timeout(20)
def test_oversize_header(raw_server: MakeServer) -> None:
    raw = exchange(raw_server(oversize_header(size=200_000)))
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep and body == b""
    assert 200_000 <= len(head) < 202_000
    assert max(len(line) for line in head.split(b"\r\n")) < 1100
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"Content-Length: 0")


@pytest.mark.timeout(20)
def test_slow_body(raw_server: MakeServer) -> None:
    srv = raw_server(slow_body(interval=0.05, total_seconds=0.5))
    with connect(srv) as sock:
        sock.sendall(GET)
        t0 = time.monotonic()
        raw = recv_all(sock)
        took = time.monotonic() - t0
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"Content-Length: 10" in head
    assert body == b"x" * 10
    assert 0.45 <= took < 3.0


@pytest.mark.timeout(20)
def test_gzip_bomb_size_and_content(raw_server: MakeServer) -> None:
    srv = raw_server(gzip_bomb())
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        conn.request("GET", "/")
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    assert resp.getheader("Content-Encoding") == "gzip"
    assert body == gzip_bomb_body(1 << 30)
    assert 900_000 < len(body) < 1_200_000  # about 1 MB
    # Inflate it the way a careful client does: never more than 1 MiB at once.
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    total, pending = 0, body
    while pending and not inflater.eof:
        out = inflater.decompress(pending, 1 << 20)
        assert len(out) <= 1 << 20 and out.count(0) == len(out)
        total += len(out)
        pending = inflater.unconsumed_tail
    assert inflater.eof and inflater.unused_data == b""  # CRC and size checked
    assert total == 1 << 30


@pytest.mark.timeout(20)
def test_gzip_bomb_body_is_built_without_the_decoded_bytes() -> None:
    size = (256 << 20) + 12345  # not cached by the other test; odd remainder
    tracemalloc.start()
    try:
        body = gzip_bomb_body(size)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    assert gzip_bomb_body(size) is body  # cached
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    total, pending = 0, body
    while pending:
        total += len(inflater.decompress(pending, 4 << 20))
        pending = inflater.unconsumed_tail
    assert inflater.eof and total == size


@pytest.mark.timeout(20)
def test_big_body(raw_server: MakeServer) -> None:
    size = 3_000_017
    srv = raw_server(big_body(size))
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        for _ in range(2):
            conn.request("GET", "/")
            assert conn.getresponse().read() == body_pattern(size)
    finally:
        conn.close()
    assert srv.accepted == 1
    assert len(body_pattern(size)) == size


@pytest.mark.timeout(20)
def test_redirect(raw_server: MakeServer) -> None:
    resp = parse(exchange(raw_server(redirect("http://example.test/next", status=301)),
                          GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")))
    assert resp.status == 301
    assert resp.getheader("Location") == "http://example.test/next"
    assert resp.read() == b""


@pytest.mark.timeout(20)
def test_drop_idle_after_first(raw_server: MakeServer) -> None:
    srv = raw_server(drop_idle_after_first(idle=0.1))
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    try:
        conn.request("GET", "/")
        resp = conn.getresponse()
        assert (resp.status, resp.read(), resp.getheader("Connection")) == (200, b"first", None)
        assert not resp.will_close  # looks reusable...
        assert wait_for(lambda: srv.open_now == 0)  # ...but the server dropped it
        assert conn.sock is not None
        assert conn.sock.recv(1) == b""  # a FIN, no Connection: close
    finally:
        conn.close()
    assert srv.accepted == 1


@pytest.mark.timeout(20)
def test_delayed(raw_server: MakeServer) -> None:
    srv = raw_server(delayed(0.3, b"late"))
    t0 = time.monotonic()
    raw = exchange(srv, GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    assert time.monotonic() - t0 >= 0.3
    assert parse(raw).read() == b"late"


@pytest.mark.timeout(20)
def test_hang_outlives_sock_timeout(raw_server: MakeServer) -> None:
    srv = raw_server(hang(), sock_timeout=0.2)
    with connect(srv) as sock:
        sock.sendall(GET)
        sock.settimeout(0.5)
        with pytest.raises(socket.timeout):
            sock.recv(1)
        assert srv.open_now == 1
    assert wait_for(lambda: srv.open_now == 0)
    assert srv.errors == []


@pytest.mark.timeout(20)
def test_serve_keepalive_closes_after_connection_close(raw_server: MakeServer) -> None:
    srv = raw_server(serve_keepalive(lambda head: http_response(200, b"x", close=True)))
    assert exchange(srv) == http_response(200, b"x", close=True)


# -- the leak check ------------------------------------------------------------


@pytest.mark.timeout(20)
def test_no_leaks_fixture_passes_and_stops_forgotten_servers(
    no_leaks: LeakBaseline, raw_server: MakeServer
) -> None:
    srv = raw_server(ok())
    with connect(srv) as sock:
        sock.sendall(GET)
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
    RawServer(hang()).start()  # forgotten on purpose: no_leaks stops it


@pytest.mark.timeout(20)
def test_check_leaks_reports_fds_and_threads() -> None:
    baseline = take_baseline()
    leaked = socket.socket()
    try:
        with pytest.raises(AssertionError, match=r"1 file descriptor\(s\) leaked .*socket:\["):
            check_leaks(baseline, wait=0.1)
    finally:
        leaked.close()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="niofetcher-loop")
    thread.start()
    try:
        with pytest.raises(AssertionError, match="niofetcher-loop"):
            check_leaks(baseline, wait=0.1)
    finally:
        stop.set()
        thread.join()
    check_leaks(baseline, wait=1.0)

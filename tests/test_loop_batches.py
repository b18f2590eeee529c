"""Loop batches (EVENT_BATCH): an idle connection whose EOF came in the same select() as
other events is closed before the scheduler, running between batches, can hand it a request."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter

import pytest
from conftest import wait_until
from rawserver import RawServer, delayed

import niofetcher.loop
from niofetcher import FetcherConfig, NIOFetcher

N = 70
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def read_head(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError
        data += chunk


def listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    s.settimeout(15)  # a server thread never waits past the test for a connection that does not come
    return s


@pytest.mark.timeout(30)
@pytest.mark.parametrize("batch", [niofetcher.loop.EVENT_BATCH, 10_000])
def test_an_idle_connection_whose_eof_the_loop_saw_takes_no_request(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(niofetcher.loop, "EVENT_BATCH", batch)
    a, b = listener(), listener()
    release_b, close_a = threading.Event(), threading.Event()

    def serve_a() -> None:
        conn, _ = a.accept()
        read_head(conn)
        conn.sendall(RESPONSE)
        close_a.wait(10)
        conn.close()  # the server ends its kept-alive connection
        conn2, _ = a.accept()
        read_head(conn2)
        conn2.sendall(RESPONSE)
        time.sleep(1)
        conn2.close()

    def serve_b() -> None:
        conns = []
        for _ in range(N):
            conn, _ = b.accept()
            read_head(conn)
            conns.append(conn)
        release_b.wait(10)
        for conn in conns:
            conn.sendall(RESPONSE)
        time.sleep(0.05)
        close_a.set()
        time.sleep(1)
        for conn in conns:
            conn.close()

    threads = [threading.Thread(target=serve_a, daemon=True), threading.Thread(target=serve_b, daemon=True)]
    for t in threads:
        t.start()
    try:
        _fetch_through_a_busy_loop(a, b, release_b)
    finally:
        for t in threads:
            t.join(timeout=10)
        a.close()
        b.close()


def _fetch_through_a_busy_loop(a: socket.socket, b: socket.socket, release_b: threading.Event) -> None:
    url_a = f"http://127.0.0.1:{a.getsockname()[1]}/"
    url_b = f"http://127.0.0.1:{b.getsockname()[1]}/"
    with NIOFetcher(FetcherConfig(max_connections_per_host=N)) as fetcher:
        fetcher.set_host_delay(url_a, 1.0)  # A/2 becomes startable by a timer, after the select() below
        fetcher.register(url_a + "1")
        first = fetcher.get(timeout=5)
        assert first is not None and first.ok
        for i in range(N):
            fetcher.register(url_b + str(i))
        fetcher.register(url_a + "2")  # due at A/1's start + 1 s
        time.sleep(0.5)  # all of B's requests are in

        def pause() -> None:  # the loop is busy while B answers and A closes its idle connection
            release_b.set()
            time.sleep(0.6)

        fetcher._engine.post(pause)
        results = [fetcher.get(timeout=5) for _ in range(N + 1)]
    second = next(r for r in results if r is not None and r.url == url_a + "2")
    assert second.ok
    assert not second.replayed, "sent on a connection whose EOF was already among the select()'s events"


@pytest.mark.timeout(30)
def test_a_response_in_a_later_batch_is_read_before_its_deadline_is_judged() -> None:
    """120 responses arrive while the loop stands still for longer than the read timeout: a select()
    then returns more events than a batch, and the timers of the connections whose events wait for a
    later batch are held until those events are handled (loop.py), so every response is read.  With
    the timers not held (as when they carried the connection, not the channel the selector knows),
    the 56 past the first batch end in read_timeout."""
    n = 120
    with RawServer(delayed(0.2)) as server:
        port = server.address[1]
        fetcher = NIOFetcher(FetcherConfig(max_connections_per_host=n, max_connections=n, read_timeout=0.5))
        with fetcher:
            for i in range(n):
                fetcher.register(f"http://127.0.0.1:{port}/{i}")
            assert wait_until(lambda: len(server.requests) >= n, timeout=10)
            fetcher._engine.post(time.sleep, 2.0)  # the loop stalls (a long collection, a busy CPU) as they arrive
            results = [fetcher.get(timeout=10) for _ in range(n)]
    assert Counter((r.status, r.error) for r in results if r is not None) == {(200, None): n}

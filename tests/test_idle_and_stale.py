"""Idle keep-alive connections, and the guarantee "stale keep-alive" (docs/guarantees.md):
when a reused connection proves closed before any response byte, an idempotent
request is retried once on a new connection -- and only then.

Also ``idle_timeout`` (our side closes idle connections) and a server that
closes idle connections itself (noticed at once, never costs a request).
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trustme
from conftest import MakeServer
from rawserver import (
    ConnInfo,
    Handler,
    RawServer,
    drop_idle_after_first,
    http_response,
    ok,
    read_request,
)

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher, URLBean

WAIT = 5.0  # the longest any single fetch may take here


def fetch(fetcher: NIOFetcher, url_or_bean: str | URLBean) -> FetchResult:
    """Register one URL and wait for its result."""
    assert fetcher.register(url_or_bean)
    result = fetcher.get(timeout=WAIT)
    assert result is not None, f"no result for {url_or_bean!r} within {WAIT} s"
    return result


def wait_until(condition: Callable[[], bool], timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


# -- idle connections ---------------------------------------------------------


@pytest.mark.timeout(10)
def test_idle_timeout_closes_idle_connections(no_leaks: object, raw_server: MakeServer) -> None:
    srv = raw_server(ok(b"hi"))
    with NIOFetcher(FetcherConfig(idle_timeout=0.3)) as fetcher:
        first = fetch(fetcher, srv.url("/1"))
        assert first.ok
        assert srv.open_now == 1  # kept alive, not closed after the response
        assert wait_until(lambda: srv.open_now == 0), "the idle connection was never closed"
        stats = fetcher.stats()
        assert stats.closed_idle >= 1
        assert stats.open_connections == 0
        second = fetch(fetcher, srv.url("/2"))
    assert second.ok and not second.connection_reused
    assert srv.accepted == 2


@pytest.mark.timeout(10)
def test_server_closing_an_idle_connection_is_noticed(no_leaks: object, raw_server: MakeServer) -> None:
    srv = raw_server(drop_idle_after_first(idle=0.1))
    with NIOFetcher(FetcherConfig(idle_timeout=30.0)) as fetcher:
        assert fetch(fetcher, srv.url("/1")).ok
        # Noticed while idle, not when the next request is sent on it.
        assert wait_until(lambda: fetcher.stats().open_connections == 0), "the dropped connection is still held"
        second = fetch(fetcher, srv.url("/2"))
        stats = fetcher.stats()
    assert second.ok and not second.connection_reused and not second.replayed
    assert stats.replayed_requests == 0
    assert srv.accepted == 2


# -- stale keep-alive ----------------------------------------------------------


def first_ok_then(second_answer: bytes | None) -> Handler:
    """Every connection answers its first request normally (keep-alive, body
    ``conn-<index>``, after a short pause so that concurrent first requests get
    connections of their own).  On the next request, the connection sends
    ``second_answer`` (b"" = not a byte) and closes; with ``second_answer=None``
    connections after the first close on their first request already."""

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        if read_request(sock, info) is None:
            return
        if second_answer is None and info.index > 0:
            return  # closes the replay's fresh connection too
        info.sleep(0.05)
        sock.sendall(http_response(200, b"conn-%d" % info.index))
        if read_request(sock, info) is None:
            return
        if second_answer:
            sock.sendall(second_answer)

    return handler


def warm_up(fetcher: NIOFetcher, srv: RawServer, connections: int) -> None:
    """Leave ``connections`` idle keep-alive connections to ``srv`` in the fetcher."""
    for i in range(connections):
        assert fetcher.register(srv.url(f"/first/{i}"))
    for _ in range(connections):
        result = fetcher.get(timeout=WAIT)
        assert result is not None and result.ok
    assert srv.accepted == connections


@pytest.mark.timeout(10)
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
@pytest.mark.parametrize("idle", [1, 2], ids=["one-idle", "two-idle"])
def test_stale_connection_is_retried_once_on_a_fresh_one(
    no_leaks: object, raw_server: MakeServer, method: str, idle: int
) -> None:
    """With two idle connections both stale, the retry must not go to the other idle
    one (just as stale) but to a new connection."""
    srv = raw_server(first_ok_then(b""))
    with NIOFetcher(FetcherConfig(max_connections_per_host=2)) as fetcher:
        warm_up(fetcher, srv, idle)
        second = fetch(fetcher, URLBean(srv.url("/second"), method=method))
        stats = fetcher.stats()
    assert second.ok, second.error_detail
    assert second.replayed
    assert second.body == b"conn-%d" % idle  # answered by a connection opened for the retry
    assert stats.replayed_requests == 1
    assert srv.accepted == idle + 1
    assert [head.split(b" ", 2)[:2] for head in srv.requests[idle:]] == [[method.encode(), b"/second"]] * 2


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "method, second_answer, connections",
    [
        pytest.param("POST", b"", 1, id="POST-not-idempotent"),
        pytest.param("PATCH", b"", 1, id="PATCH-not-idempotent"),
        pytest.param("GET", b"HTTP/1.1 20", 1, id="part-of-the-status-line"),
        pytest.param("GET", http_response(200, b"", [("Content-Length", "100")]) + b"x" * 10, 1, id="part-of-the-body"),
        pytest.param("GET", None, 2, id="the-fresh-connection-fails-too"),
    ],
)
def test_no_replay(
    no_leaks: object, raw_server: MakeServer, method: str, second_answer: bytes | None, connections: int
) -> None:
    """Not replayed: a non-idempotent request, a request that got part of a response,
    and a request already replayed once (at most one retry)."""
    srv = raw_server(first_ok_then(second_answer))
    with NIOFetcher() as fetcher:
        warm_up(fetcher, srv, 1)
        second = fetch(fetcher, URLBean(srv.url("/second"), method=method, body=b"payload"))
        stats = fetcher.stats()
    assert second.error == ErrorKind.CONNECTION_CLOSED, (second.error, second.error_detail)
    assert not second.ok
    assert srv.accepted == connections
    assert stats.replayed_requests == connections - 1
    assert second.replayed == (connections == 2)


def reset_after_one_answer(context: ssl.SSLContext | None) -> Handler:
    """Answer one request (over TLS with ``context``), stay idle 0.2 s, then reset the connection."""

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        conn = sock if context is None else context.wrap_socket(sock, server_side=True)
        with conn:  # the TLS socket is another object than the one the server closes
            if read_request(conn, info) is None:
                return
            conn.sendall(http_response(200, b"conn-%d" % info.index))
            info.sleep(0.2)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, not a FIN

    return handler


@pytest.mark.timeout(15)
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_reset_found_by_the_next_send_is_replayed_over_tls_too(
    no_leaks: object, raw_server: MakeServer, tmp_path: Path, scheme: str
) -> None:
    """The server resets an idle connection while the loop is busy, so the reset is first seen
    when the next request is sent: over TLS too (where the socket raises an SSLError, not a plain
    OSError) the request is replayed on a fresh connection, not failed as tls_error."""
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    srv = raw_server(reset_after_one_answer(context if scheme == "https" else None))
    base = f"{scheme}://127.0.0.1:{srv.address[1]}"
    with NIOFetcher(FetcherConfig(ca_file=str(ca_file))) as fetcher:
        assert fetch(fetcher, f"{base}/first").ok
        fetcher._engine.post(time.sleep, 0.6)  # busy (a long collection, a burst) while the reset comes
        second = fetch(fetcher, f"{base}/second")
    assert (second.status, second.error) == (200, None), second.error_detail
    assert second.replayed and second.body == b"conn-1"
    assert srv.accepted == 2

"""The guarantee "no head-of-line blocking" (docs/guarantees.md): a host at its limit delays
no other host's URLs, and time spent queued behind a host's limit never counts
towards ``request_timeout``.  Also the URLBean contract "higher priority is
fetched first; equal priorities are FIFO", within a host and across hosts,
checked in the order the servers received the requests.
"""

from __future__ import annotations

import itertools
import random
import socket
import threading
import time

import pytest
from conftest import MakeServer
from rawserver import (
    ConnInfo,
    Handler,
    RawServer,
    delayed,
    http_response,
    ok,
    read_request,
)

from niofetcher import FetcherConfig, FetchResult, NIOFetcher, Origin, URLBean


def origin(srv: RawServer) -> Origin:
    return Origin("http", srv.host, srv.port)


# -- head-of-line blocking ----------------------------------------------------------


@pytest.mark.timeout(15)
@pytest.mark.parametrize("max_connections", [256, 3], ids=["total-unbound", "total-leaves-one-for-others"])
def test_saturated_slow_host_does_not_delay_a_fast_host(
    no_leaks: object, raw_server: MakeServer, max_connections: int
) -> None:
    slow = raw_server(delayed(1.0))
    fast = raw_server(ok(b"fast"))
    config = FetcherConfig(max_connections=max_connections, max_connections_per_host=2)
    with NIOFetcher(config) as fetcher:
        for i in range(20):  # registered first, at the same priority: first in line
            assert fetcher.register(slow.url(f"/slow/{i}"))
        for i in range(50):
            assert fetcher.register(fast.url(f"/fast/{i}"))
        fast_done, slow_done = 0, 0
        while fast_done < 50:
            result = fetcher.get(timeout=5.0)
            assert result is not None, f"fast host stalled: {fast_done}/50 done"
            assert result.ok, (result.url, result.error, result.error_detail)
            if f":{fast.port}/" in result.url:
                fast_done += 1
            else:
                slow_done += 1
        slow_stats = fetcher.host_stats()[origin(slow)]
        fetcher.shutdown(wait=False)  # the slow host's remaining URLs are not this test's business
    # The slow host answers 2 per second; it has served at most a couple by now.
    assert slow_done <= 4
    assert slow_stats.pending >= 14
    assert slow_stats.peak_connections == 2
    assert slow.max_open <= 2
    assert len(fast.requests) == 50


@pytest.mark.timeout(15)
def test_time_queued_behind_a_host_limit_is_not_a_timeout(no_leaks: object, raw_server: MakeServer) -> None:
    request_timeout, answer_after, count = 0.6, 0.25, 6  # the last one waits ~1.25 s in the queue
    srv = raw_server(delayed(answer_after))
    config = FetcherConfig(max_connections_per_host=1, request_timeout=request_timeout)
    with NIOFetcher(config) as fetcher:
        for i in range(count):
            assert fetcher.register(srv.url(f"/{i}"))
        results = sorted(fetcher.results(), key=lambda r: r.url)
        stats = fetcher.host_stats()[origin(srv)]
    assert [r.error for r in results] == [None] * count
    assert all(r.ok for r in results)
    assert results[-1].queue_wait > request_timeout
    assert stats.peak_connections == 1
    assert stats.max_queue_wait > request_timeout
    assert 0 < stats.mean_queue_wait < stats.max_queue_wait
    assert stats.requests_served == count
    assert srv.max_open == 1


# -- priorities --------------------------------------------------------------------


class RequestLog:
    """The order in which requests reached any of several servers: (port, path)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.entries: list[tuple[int, str]] = []

    def handler(self, hold_first: float) -> Handler:
        """Keep-alive; records every request; the very first request of all is answered
        only after ``hold_first`` seconds, so that the one connection stays busy."""
        response = http_response(200, b"ok")

        def handle(sock: socket.socket, info: ConnInfo) -> None:
            assert info.server is not None
            while (head := read_request(sock, info)) is not None:
                path = head.split(b" ", 2)[1].decode()
                with self._lock:
                    self.entries.append((info.server.port, path))
                    first = len(self.entries) == 1
                if first and not info.sleep(hold_first):
                    return
                sock.sendall(response)

        return handle


@pytest.mark.timeout(15)
@pytest.mark.parametrize("hosts", [1, 3])
def test_priority_order_with_one_connection(no_leaks: object, raw_server: MakeServer, hosts: int) -> None:
    """With a single connection slot, requests leave by descending priority, FIFO among equals
    -- across hosts too (max_connections=1 makes the order global)."""
    log = RequestLog()
    servers = [raw_server(log.handler(hold_first=0.5)) for _ in range(hosts)]
    rng = random.Random(4)
    wanted = [  # (server, path, priority) in registration order, priorities shuffled with many ties
        (servers[i % hosts], f"/p{priority}/n{i}", priority)
        for i, priority in enumerate(rng.choice([-3, 0, 0, 1, 2, 2, 7]) for _ in range(40))
    ]
    config = FetcherConfig(max_connections=1, max_connections_per_host=1)
    with NIOFetcher(config) as fetcher:
        assert fetcher.register(servers[0].url("/hold"))
        deadline = time.monotonic() + 3.0
        while not log.entries:  # the only connection is now busy with /hold
            assert time.monotonic() < deadline, "the first request never arrived"
            time.sleep(0.005)
        for srv, path, priority in wanted:
            assert fetcher.register(URLBean(srv.url(path), priority=priority))
        assert len(log.entries) == 1, "the held request ended before all URLs were registered"
        results: list[FetchResult] = list(fetcher.results())
    assert len(results) == len(wanted) + 1 and all(r.ok for r in results)
    # sorted() is stable: equal priorities keep their registration order.
    expected = [(srv.port, path) for srv, path, _ in sorted(wanted, key=lambda w: -w[2])]
    assert log.entries == [(servers[0].port, "/hold"), *expected]


# -- a host delay set just before its URLs are registered ---------------------------------


@pytest.mark.timeout(30)
def test_a_host_delay_set_before_its_urls_are_registered_holds_for_the_first_of_them(
    no_leaks: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crawler sets a host's Crawl-delay, then registers its pages.  Both land between the loop's
    running of posted calls and its taking of the inbox (forced here: the loop itself does both right
    after a run_once); the pages still start a delay apart, not together."""
    from niofetcher.loop import Loop
    from niofetcher.testing import TestSite

    original = Loop.run_once
    armed: list[NIOFetcher] = []
    with TestSite(hosts=1, pages=3, log_requests=True, max_seconds=30) as site:
        urls = [f"{site.base_urls[0]}page/{i}" for i in range(3)]

        def run_once(self: Loop, max_wait: float | None) -> None:
            original(self, max_wait)
            if armed:
                fetcher = armed.pop()
                fetcher.set_host_delay(site.base_urls[0], 0.5)
                for url in urls:
                    assert fetcher.register(url)

        monkeypatch.setattr(Loop, "run_once", run_once)
        with NIOFetcher(FetcherConfig(max_connections_per_host=4)) as fetcher:
            armed.append(fetcher)
            fetcher._engine.loop.wake()
            results = [fetcher.get(timeout=20) for _ in urls]
        starts = [at for at, _ in site.counters().log]
    assert all(r is not None and r.ok for r in results), results
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert len(gaps) == 2 and min(gaps) >= 0.45, gaps

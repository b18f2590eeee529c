"""The guarantee "service time" (docs/guarantees.md): no request starts on a connection
older than ``connection_service_time``; such a connection is closed after its
response.  Also ``max_requests_per_connection``.  Both counted by the server.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest

from niofetcher import FetcherConfig, FetchResult, NIOFetcher
from niofetcher.testing import TestSite

SERVICE_TIME = 0.5
SLACK = 0.15  # connect, scheduling and loopback latency between the client's check and the server's clock
STREAM_SECONDS = 2.0


def feeder_stream(fetcher: NIOFetcher, urls: list[str]) -> None:
    """A URL every few ms for STREAM_SECONDS: connections sit idle between requests
    and reach their service time while idle."""
    deadline = time.monotonic() + STREAM_SECONDS
    i = 0
    while time.monotonic() < deadline:
        assert fetcher.register(urls[i % len(urls)])
        i += 1
        time.sleep(0.005)


def burst_stream(fetcher: NIOFetcher, urls: list[str]) -> None:
    """Enough URLs at once to keep both connections busy for STREAM_SECONDS against a
    site that answers after 50 ms: connections reach their service time mid-response."""
    for i in range(int(STREAM_SECONDS / 0.05) * 2):
        assert fetcher.register(urls[i % len(urls)])


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "stream, site_delay", [(feeder_stream, 0.0), (burst_stream, 0.05)], ids=["idle-between-requests", "always-busy"]
)
def test_no_request_on_a_connection_older_than_the_service_time(
    no_leaks: object, stream: Callable[[NIOFetcher, list[str]], None], site_delay: float
) -> None:
    config = FetcherConfig(max_connections_per_host=2, connection_service_time=SERVICE_TIME)
    with TestSite(hosts=1, pages=50, delay=site_delay, max_seconds=30) as site:
        with NIOFetcher(config) as fetcher:
            stream(fetcher, site.page_urls())
            results = list(fetcher.results())
            stats = fetcher.stats()
        counters = site.counters()

    assert results and all(r.ok for r in results)
    assert counters.requests == len(results)
    # The limit held, from the server's side ...
    assert counters.max_conn_age_at_request <= SERVICE_TIME + SLACK
    assert counters.accepted >= 4
    assert stats.closed_service_time > 0
    # ... and it was the service time that closed them: connections were reused and lived
    # close to the limit (a fetcher that never reused a connection would pass the above).
    assert stats.reused_requests > len(results) // 2
    assert counters.max_conn_age_at_request >= SERVICE_TIME / 2
    assert counters.max_open <= 2


@pytest.mark.timeout(10)
@pytest.mark.parametrize("requests, per_connection", [(23, 5), (10, 5), (3, 1)])
def test_max_requests_per_connection(no_leaks: object, requests: int, per_connection: int) -> None:
    config = FetcherConfig(max_connections_per_host=1, max_requests_per_connection=per_connection)
    with TestSite(hosts=1, pages=requests, max_seconds=30) as site:
        with NIOFetcher(config) as fetcher:
            for url in site.page_urls()[1 : requests + 1]:
                assert fetcher.register(url)
            results: list[FetchResult] = list(fetcher.results())
        counters = site.counters()

    assert len(results) == requests and all(r.ok for r in results)
    assert counters.requests == requests
    assert counters.accepted == math.ceil(requests / per_connection)
    assert counters.max_open == 1

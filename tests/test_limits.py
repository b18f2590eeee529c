"""The guarantee "limits" (docs/guarantees.md): never more than ``max_connections_per_host``
sockets to one (scheme, host, port), never more than ``max_connections`` in all
-- counted from the server's side, on a 20-host TestSite where both limits bind.
"""

from __future__ import annotations

import pytest

from niofetcher import FetcherConfig, NIOFetcher, Origin
from niofetcher.testing import TestSite

HOSTS = 20
URLS_PER_HOST = 150  # 3,000 URLs in all
PER_HOST = 3
TOTAL = 40  # less than HOSTS * PER_HOST = 60, so the total limit binds as well


@pytest.mark.timeout(40)
def test_per_host_and_total_limits_hold_under_load(no_leaks: object) -> None:
    # pages=URLS_PER_HOST-1: page_urls() lists "/" plus every page of each host.
    with TestSite(hosts=HOSTS, pages=URLS_PER_HOST - 1, max_seconds=60) as site:
        urls = site.page_urls()
        assert len(urls) == HOSTS * URLS_PER_HOST
        config = FetcherConfig(max_connections=TOTAL, max_connections_per_host=PER_HOST)
        with NIOFetcher(config) as fetcher:
            for url in urls:  # host by host: the first hosts want all PER_HOST sockets at once
                assert fetcher.register(url)
            results = list(fetcher.results())
            host_stats = fetcher.host_stats()
        per_port = {port: site.counters(port) for port in site.ports}
        total = site.counters()

    assert len(results) == len(urls)
    assert [r for r in results if not r.ok] == []
    assert total.requests == len(urls)

    # The server's view: the limits held ...
    for port, counters in per_port.items():
        assert counters.max_open <= PER_HOST, f"port {port} saw {counters.max_open} connections at once"
        assert counters.requests == URLS_PER_HOST
    assert total.max_open <= TOTAL
    # ... and were reached, so that the test cannot pass by running one connection at a time.
    assert max(c.max_open for c in per_port.values()) == PER_HOST
    assert total.max_open >= TOTAL - 2, f"the total limit was never approached: peak {total.max_open}"

    # The fetcher's own account agrees with the server's.
    assert set(host_stats) == {Origin("http", "127.0.0.1", port) for port in site.ports}
    for origin, stats in host_stats.items():
        # The client counts a socket from connect(); the server only from accept().
        assert per_port[origin.port].max_open <= stats.peak_connections <= PER_HOST, origin
        assert stats.requests_served == URLS_PER_HOST, origin
        assert (stats.pending, stats.in_flight) == (0, 0), origin
    assert max(s.peak_connections for s in host_stats.values()) == PER_HOST
    assert sum(s.requests_served for s in host_stats.values()) == len(urls)

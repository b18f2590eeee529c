"""Per-IP limits across PostgreSQL workers when the hosts are names (issue 28, item 3): shared
hosting, many host names on one address that only resolving them tells.

Twelve names under ``.test``, six on 127.0.0.1 and six on 127.0.0.2 (a ``SyntheticWeb`` on each:
names sharing ports, told apart by the ``Host`` field), reached through ``--resolve`` alone.  The
servers count, per address over all its names, the requests in service at once.

Every process is bounded in time and killed by its pid in a ``finally``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_distributed_crawl import Workers, assert_every_page_done_once, done_by_worker, peak_at_address

from niofetcher.crawl.frontier.postgres import NO_ADDRESS_GROUPS
from niofetcher.testing import SyntheticWeb

pytest_plugins = ["pg_cluster"]

ADDRESSES = ("127.0.0.1", "127.0.0.2")


def shared_host(address: str, domain: str) -> SyntheticWeb:
    """Six names on two ports of ``address``, 51 pages each (``/`` and 50), 0.05 s a request."""
    return SyntheticWeb(hosts=6, pages=300, ports=2, zipf=0, delay=0.05, domain=domain, host=address,
                        log_requests=True, max_seconds=140)


def learnt_addresses(crew: Workers) -> dict[str, set[str]]:
    """Address -> the host names the frontier keeps with it (``hosts.address``)."""
    groups: dict[str, set[str]] = {}
    for origin, address in crew.rows("SELECT origin, address FROM hosts"):
        groups.setdefault(str(address), set()).add(origin.split("://")[1].rpartition(":")[0])
    return groups


@pytest.mark.timeout(150)
def test_names_on_one_address_keep_its_per_ip_limit_across_three_workers(postgres_dsn: str, tmp_path: Path) -> None:
    """Three workers at --per-ip 2: each address's names together never serve more than 2 requests
    at once, every page is fetched once, and the frontier learnt each name's address from the
    answers.  One worker starts alone and the others join once every name's address is known, so
    that no name is in the window before its first answer (docs/distributed.md: then an address
    may serve twice --per-ip; three started together, the servers counted 4, on robots.txt).  The
    control, the address groups switched off (the test-only switch), has each worker keep its own
    2 at an address, and the check fails."""
    peaks = {}
    for env in ({}, {NO_ADDRESS_GROUPS: "1"}):
        with shared_host(ADDRESSES[0], "one.test") as first, shared_host(ADDRESSES[1], "two.test") as second:
            resolve = [arg for web in (first, second) for name_port, address in web.resolve.items()
                       for arg in ("--resolve", f"{name_port}:{address}")]
            # --connections 16: a window of 12 hosts, so that the first worker takes every name at once.
            crew = Workers(postgres_dsn, tmp_path, (first, second), "--lease", "3", "--per-ip", "2", "--connections",
                           "16", *resolve)
            try:
                crawl_joined(crew, env, known=not env)
                log = assert_every_page_done_once(crew, first, second)
                assert {url: len(times) for url, times in log.items() if len(times) > 1} == {}
                shares = done_by_worker(crew)
                assert len(shares) >= 2, shares  # names changed hands between workers
                if not env:
                    assert learnt_addresses(crew) == {web.host: set(web.names) for web in (first, second)}
            finally:
                crew.kill_all()
            peaks["grouped" if not env else "control"] = max(peak_at_address(first), peak_at_address(second))
            print(f"{'grouped' if not env else 'control'}: pages per worker {sorted(shares.values())}")
    print(f"peak requests at once per address, names at --per-ip 2: {peaks}")
    assert peaks["grouped"] <= 2 < peaks["control"], peaks


def crawl_joined(crew: Workers, env: dict[str, str], known: bool) -> None:
    """One worker, then two more once it holds the names (``known``: and knows their addresses)."""
    first = crew.start(env)
    first_id = crew.worker_id(first)
    ready = "SELECT COUNT(*) FROM hosts WHERE owner = %s" + (" AND address IS NOT NULL" if known else "")
    deadline = time.monotonic() + 60
    while crew.rows(ready, first_id) != [(12,)]:
        assert time.monotonic() < deadline and first.poll() is None, crew.stderr(0)
        time.sleep(0.02)
    crew.start(env)
    crew.start(env)
    crew.wait(100)

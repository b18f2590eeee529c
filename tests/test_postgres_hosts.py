"""A PostgreSQL worker with a full hand of hosts makes room as soon as it is done with one.

A worker holds at most ``max_hosts`` hosts (the crawler gives it what its window keeps busy).
One it has finished with (nothing waiting, nothing in flight) goes back at the next claim, and
the free host with work is taken in the same call: not a third of a lease later, at the next
renewal, which left a worker of a small window idle with work to take (17 pages/s against 134
in benchmarks/distributed.py --quick --workers 1).  No clock in the test: the lease is long.
"""

from __future__ import annotations

import itertools

import pytest

pytestmark = pytest.mark.timeout(60)
pytest_plugins = ["pg_cluster"]

_crawls = itertools.count()


def test_a_full_hand_gives_back_a_finished_host_and_takes_the_next_in_one_claim(postgres_dsn: str) -> None:
    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    with PostgresFrontier(postgres_dsn, f"full_hand_{next(_crawls)}", max_hosts=1, lease_seconds=60.0) as frontier:
        first = [f"http://127.0.0.1:9001/page/{i}" for i in range(3)]
        second = [f"http://127.0.0.1:9002/page/{i}" for i in range(3)]
        frontier.add(first)
        frontier.add(second)
        claimed = frontier.claim(10)
        held = {item.host for item in claimed}
        assert len(held) == 1 and len(claimed) == 3, "one host held: its three URLs"
        frontier.complete_many([(item.url, 200) for item in claimed])
        after = frontier.claim(10)
        assert {item.host for item in after} == {"http://127.0.0.1:9001", "http://127.0.0.1:9002"} - held
        assert len(after) == 3

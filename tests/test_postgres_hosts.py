"""A PostgreSQL worker with a full hand of hosts makes room as soon as it is done with one.

A worker holds at most ``max_hosts`` hosts (the crawler gives it what its window keeps busy).
One it has finished with (nothing waiting, nothing in flight) goes back at the next claim, and
the free host with work is taken in the same call: not a third of a lease later, at the next
renewal, which left a worker of a small window idle with work to take (17 pages/s against 134
in benchmarks/distributed.py --quick --workers 1).  No clock in the test: the lease is long.
"""

from __future__ import annotations

import itertools
from typing import Any

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


def test_start_deadlines_give_each_host_its_lease_deadline_then_only_what_changed(postgres_dsn: str) -> None:
    """The gates the coordinator hands the fetcher: a taken host gets the deadline ``holds()`` counts,
    each renewal moves every held host's, a host given back is lifted (None), a host lost to another
    worker stays closed (minus infinity); nothing changed, nothing to say."""
    import math
    import time

    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    crawl = f"gates_{next(_crawls)}"
    lease = 60.0
    with PostgresFrontier(postgres_dsn, crawl, lease_seconds=lease) as old:
        old.add(["http://127.0.0.1:9001/page/0", "http://127.0.0.1:9002/page/0"])
        before = time.monotonic()
        claimed = {item.host: item for item in old.claim(10)}
        assert set(claimed) == {"http://127.0.0.1:9001", "http://127.0.0.1:9002"}
        gates = old.start_deadlines()
        assert set(gates) == set(claimed)
        deadline = gates["http://127.0.0.1:9001"]
        assert deadline is not None and before < deadline <= time.monotonic() + lease * 2 / 3
        assert gates["http://127.0.0.1:9002"] == deadline and old.holds("http://127.0.0.1:9001")
        assert old.start_deadlines() == {}
        old._renew_at = 0.0  # a renewal is due
        assert old.lost_hosts() == []
        renewed = old.start_deadlines()
        assert set(renewed) == set(claimed) and renewed["http://127.0.0.1:9001"] > deadline  # type: ignore[operator]
        old.complete_many([(claimed["http://127.0.0.1:9001"].url, 200)])
        old._renew_at = 0.0  # gives back the host with nothing to do
        old.lost_hosts()
        assert old.start_deadlines()["http://127.0.0.1:9001"] is None
        with PostgresFrontier(postgres_dsn, crawl, lease_seconds=lease) as new:
            new._conn.execute("UPDATE hosts SET lease_until = 0")  # type: ignore[union-attr]  # its lease ran out
            new._conn.commit()  # type: ignore[union-attr]
            new._take_soon = True
            assert [item.url for item in new.claim(10)] == [claimed["http://127.0.0.1:9002"].url]
            old._renew_at = 0.0
            assert old.lost_hosts() == ["http://127.0.0.1:9002"]
            assert old.start_deadlines()["http://127.0.0.1:9002"] == -math.inf


def test_the_connection_notices_a_dead_server_within_a_lease_and_a_statement_runs_no_longer(
    postgres_dsn: str,
) -> None:
    """TCP keepalives and tcp_user_timeout from the lease (a DSN's own setting kept), and a
    statement_timeout of one lease, at least 5 s, unless one is given."""
    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    sep = "&" if "?" in postgres_dsn else "?"
    cases: list[tuple[str, dict[str, Any], dict[str, str], str]] = [
        (postgres_dsn, {}, {"keepalives": "1", "keepalives_idle": "3", "keepalives_interval": "2",
                            "keepalives_count": "3", "tcp_user_timeout": "9000"}, "9s"),
        (f"{postgres_dsn}{sep}keepalives_idle=7", {"statement_timeout": 30.0}, {"keepalives_idle": "7"}, "30s"),
    ]
    for dsn, given, settings, timeout in cases:
        with PostgresFrontier(dsn, f"keepalive_{next(_crawls)}", lease_seconds=9.0, **given) as frontier:
            conn = frontier._conn
            assert conn is not None
            parameters = conn.info.get_parameters()
            assert {name: parameters.get(name) for name in settings} == settings
            assert conn.execute("SHOW statement_timeout").fetchone() == (timeout,)
    with PostgresFrontier(postgres_dsn, f"keepalive_{next(_crawls)}", lease_seconds=2.0) as frontier:
        assert frontier._conn.execute("SHOW statement_timeout").fetchone() == ("5s",)  # type: ignore[union-attr]


def _rows_read(node: dict[str, Any]) -> int:
    """Rows every scan of an EXPLAIN (ANALYZE, FORMAT JSON) plan read: those it returned and those
    its filter removed, in all its loops."""
    read = 0
    if "Scan" in node["Node Type"]:
        read += (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * node.get("Actual Loops", 1)
    return read + sum(_rows_read(child) for child in node.get("Plans", []))


def test_taking_hosts_reads_nothing_of_the_hosts_whose_urls_are_all_done(postgres_dsn: str) -> None:
    """Late in a broad crawl most hosts are finished.  TAKE and the fair share (SHARE) find the hosts
    with work through their URLs, so 20,000 finished hosts add nothing to what they read: walking
    the hosts with a probe of urls for each read 60,304 and 20,154 rows here, and took 0.6-0.9 s a
    TAKE at 100,000 (6 ms now)."""
    import psycopg

    from niofetcher.crawl.frontier.postgres import PostgresFrontier
    from niofetcher.crawl.frontier.postgres_schema import SHARE, TAKE

    crawl = f"finished_{next(_crawls)}"
    PostgresFrontier(postgres_dsn, crawl).close()
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute(f"SET search_path TO {crawl}")
        conn.execute("INSERT INTO hosts (origin) SELECT 'http://done' || g || '.test' FROM generate_series(1, 20000) g")
        conn.execute("INSERT INTO hosts (origin) SELECT 'http://busy' || g || '.test' FROM generate_series(1, 50) g")
        conn.execute("""
            INSERT INTO urls (url, state, discovered_at, next_attempt_at, host_id)
            SELECT origin || '/', CASE WHEN origin LIKE 'http://done%%' THEN 'done' ELSE 'waiting' END, 0, 0, id
            FROM hosts""")
        conn.execute("ANALYZE")
        conn.execute("""
            INSERT INTO workers (id, host_name, pid, backend_pid, started_at, heartbeat_at)
            VALUES ('me', 'test', 1, pg_backend_pid(), 0, extract(epoch FROM clock_timestamp()))""")
        take: dict[str, Any] = {"me": "me", "lease": 60.0, "most": 256, "held": 0, "fenced": True}
        statements: dict[str, tuple[str, dict[str, Any]]] = {"TAKE": (TAKE, take), "SHARE": (SHARE, {"lease": 60.0})}
        read = {}
        for name, (sql, params) in statements.items():
            conn.execute("SAVEPOINT explained")  # EXPLAIN ANALYZE runs the statement: TAKE takes
            row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
            conn.execute("ROLLBACK TO SAVEPOINT explained")
            assert row is not None
            read[name] = _rows_read(row[0][0]["Plan"])
        taken = conn.execute(TAKE, take).fetchall()
        conn.rollback()
    assert read["TAKE"] < 2000 and read["SHARE"] < 2000, read
    assert sorted(origin for _id, origin, _epoch in taken) == sorted(f"http://busy{g}.test" for g in range(1, 51))

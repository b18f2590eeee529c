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
        old.store._renew_at = 0.0  # a renewal is due
        assert old.lost_hosts() == []
        renewed = old.start_deadlines()
        assert set(renewed) == set(claimed) and renewed["http://127.0.0.1:9001"] > deadline  # type: ignore[operator]
        old.complete_many([(claimed["http://127.0.0.1:9001"].url, 200)])
        old.store._renew_at = 0.0  # gives back the host with nothing to do
        old.lost_hosts()
        assert old.start_deadlines()["http://127.0.0.1:9001"] is None
        with PostgresFrontier(postgres_dsn, crawl, lease_seconds=lease) as new:
            new.store._conn.execute("UPDATE hosts SET lease_until = 0")  # type: ignore[union-attr]  # its lease ran out
            new.store._conn.commit()  # type: ignore[union-attr]
            new.store._take_soon = True
            assert [item.url for item in new.claim(10)] == [claimed["http://127.0.0.1:9002"].url]
            old.store._renew_at = 0.0
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
            conn = frontier.store._conn
            assert conn is not None
            parameters = conn.info.get_parameters()
            assert {name: parameters.get(name) for name in settings} == settings
            assert conn.execute("SHOW statement_timeout").fetchone() == (timeout,)
    with PostgresFrontier(postgres_dsn, f"keepalive_{next(_crawls)}", lease_seconds=2.0) as frontier:
        assert frontier.store._conn.execute("SHOW statement_timeout").fetchone() == ("5s",)  # type: ignore[union-attr]


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
        # With addresses (per-IP limits): each busy host's is also that of 2 finished ones.
        conn.execute("INSERT INTO hosts (origin, address) SELECT 'http://done' || g || '.test', '10.0.' || (g % 50)"
                     " || '.1' FROM generate_series(1, 20000) g")
        conn.execute("INSERT INTO hosts (origin, address) SELECT 'http://busy' || g || '.test', '10.0.' || g || '.1'"
                     " FROM generate_series(1, 50) g")
        conn.execute("""
            INSERT INTO urls (url, state, discovered_at, next_attempt_at, host_id)
            SELECT origin || '/', CASE WHEN origin LIKE 'http://done%%' THEN 'done' ELSE 'waiting' END, 0, 0, id
            FROM hosts""")
        conn.execute("ANALYZE")
        conn.execute("""
            INSERT INTO workers (id, host_name, pid, backend_pid, started_at, heartbeat_at)
            VALUES ('me', 'test', 1, pg_backend_pid(), 0, extract(epoch FROM clock_timestamp()))""")
        take: dict[str, Any] = {"me": "me", "lease": 60.0, "most": 256, "held": 0, "fenced": True, "by_address": False}
        statements: dict[str, tuple[str, dict[str, Any]]] = {
            "TAKE": (TAKE, take), "TAKE by address": (TAKE, {**take, "by_address": True}),
            "SHARE": (SHARE, {"lease": 60.0})}
        read = {}
        for name, (sql, params) in statements.items():
            conn.execute("SAVEPOINT explained")  # EXPLAIN ANALYZE runs the statement: TAKE takes
            row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
            conn.execute("ROLLBACK TO SAVEPOINT explained")
            assert row is not None
            read[name] = _rows_read(row[0][0]["Plan"])
        taken = conn.execute(TAKE, take).fetchall()
        conn.rollback()
    assert max(read.values()) < 2000, read
    assert sorted(origin for _id, origin, _epoch, _address in taken) == sorted(f"http://busy{g}.test" for g in range(1, 51))


def test_with_per_ip_limits_a_host_whose_address_another_worker_holds_is_not_taken(postgres_dsn: str) -> None:
    """Address groups, IP literals (their address known when taken): a worker holding a host of
    127.0.0.1 keeps the other hosts of 127.0.0.1 from a second worker, which takes 127.0.0.2's.
    Without the groups (the control), the second takes a host of 127.0.0.1 too."""
    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    urls = [f"http://{ip}:{port}/page/{i}" for ip, port in (("127.0.0.1", 9001), ("127.0.0.1", 9002),
                                                            ("127.0.0.2", 9003)) for i in range(2)]
    for grouped, second_takes in ((True, {"http://127.0.0.2:9003"}),
                                  (False, {"http://127.0.0.1:9002", "http://127.0.0.2:9003"})):
        crawl = f"groups_{next(_crawls)}"
        with PostgresFrontier(postgres_dsn, crawl, max_hosts=1, lease_seconds=60.0, group_by_address=grouped) as one:
            one.add(urls)
            assert {item.host for item in one.claim(10)} == {"http://127.0.0.1:9001"}
            with PostgresFrontier(postgres_dsn, crawl, lease_seconds=60.0, group_by_address=grouped) as two:
                assert {item.host for item in two.claim(10)} == second_takes
                if grouped:
                    assert two.store._conn.execute(  # type: ignore[union-attr]
                        "SELECT origin, address FROM hosts WHERE owner IS NOT NULL ORDER BY origin").fetchall() == [
                        ("http://127.0.0.1:9001", "127.0.0.1"), ("http://127.0.0.2:9003", "127.0.0.2")]


def test_a_worker_that_learns_an_address_another_worker_holds_gives_its_host_way(postgres_dsn: str) -> None:
    """Address groups, names (their address learnt from answers): two workers hold a.test and b.test;
    a.test's answers came from 127.0.0.5 first, so b.test's from there too make its worker give way:
    nothing more of b.test starts or is claimed there, the host goes back once its last claim is
    recorded, and it is not taken again while the other holds the address; the first keeps
    crawling a.test."""
    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    crawl = f"learnt_{next(_crawls)}"
    a_urls = [f"http://a.test:9001/page/{i}" for i in range(4)]
    b_urls = [f"http://b.test:9002/page/{i}" for i in range(4)]
    with PostgresFrontier(postgres_dsn, crawl, max_hosts=1, lease_seconds=60.0, group_by_address=True) as one, \
            PostgresFrontier(postgres_dsn, crawl, max_hosts=1, lease_seconds=60.0, group_by_address=True) as two:
        one.add(a_urls + b_urls)
        first = one.claim(1)
        two.store._take_soon = True  # the URLs came in after it opened (from another worker)
        second = two.claim(2)
        assert [item.host for item in first] == ["http://a.test:9001"]
        assert [item.host for item in second] == ["http://b.test:9002"] * 2
        one.note_addresses({"http://a.test:9001": "127.0.0.5:9001"})
        two.note_addresses({"http://b.test:9002": "127.0.0.5:9002"})
        assert one.holds("http://a.test:9001") and not two.holds("http://b.test:9002")  # nothing more of b.test starts
        owner = "SELECT owner IS NOT NULL, address FROM hosts WHERE origin = %s"
        assert two.store._conn.execute(owner, ("http://b.test:9002",)).fetchone() == (True, "127.0.0.5")  # type: ignore[union-attr]
        two.complete_many([(second[0].url, 200)])
        assert two.claim(5) == []  # b.test gets no more claims: one of its URLs is still in flight
        two.complete_many([(second[1].url, 200)])
        two.note_addresses({"http://b.test:9002": "127.0.0.5:9002"})  # known: nothing to settle
        two.store._renew_at = 0.0  # the renewal gives back what has nothing in flight
        two.lost_hosts()
        assert two.store._conn.execute(owner, ("http://b.test:9002",)).fetchone() == (False, "127.0.0.5")  # type: ignore[union-attr]
        two.store._take_soon = True
        assert two.claim(5) == []  # the address is another's: b.test stays free
        assert [item.host for item in one.claim(5)] == ["http://a.test:9001"] * 3
        assert one.start_deadlines() and two.start_deadlines()["http://b.test:9002"] is None


def test_a_crawl_made_before_address_groups_gets_the_column_when_opened(postgres_dsn: str) -> None:
    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    crawl = f"old_hosts_{next(_crawls)}"
    with PostgresFrontier(postgres_dsn, crawl) as frontier:
        frontier.store._conn.execute("ALTER TABLE hosts DROP COLUMN address")  # type: ignore[union-attr]  # as it was
        frontier.store._conn.commit()  # type: ignore[union-attr]
    with PostgresFrontier(postgres_dsn, crawl, group_by_address=True) as frontier:
        frontier.add(["http://127.0.0.1:9001/"])
        assert [item.host for item in frontier.claim(5)] == ["http://127.0.0.1:9001"]
        assert frontier.store._conn.execute("SELECT address FROM hosts").fetchall() == [("127.0.0.1",)]  # type: ignore[union-attr]
        assert frontier.store._conn.execute(  # type: ignore[union-attr]
            "SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexname = 'hosts_address'", (crawl,)
        ).fetchone() == (1,)


def test_a_crawl_with_per_ip_limits_keeps_where_each_named_hosts_answers_came_from(postgres_dsn: str) -> None:
    """A name's address is learnt from its answers (the crawler tells the frontier each peer):
    a.test, mapped to 127.0.0.2 through ``resolve``, gets that address on its row.  Without per-IP
    limits nothing is kept."""
    import psycopg

    from niofetcher.config import FetcherConfig
    from niofetcher.crawl import CrawlConfig, Crawler
    from niofetcher.testing import TestSite

    with TestSite(hosts=1, pages=2, host="127.0.0.2", max_seconds=50) as site:
        seed = f"http://a.test:{site.ports[0]}/"
        for per_ip, address in ((2, "127.0.0.2"), (None, None)):
            crawl = f"peers_{next(_crawls)}"
            fetcher = FetcherConfig(resolve={"a.test": "127.0.0.2"}, max_connections_per_ip=per_ip)
            config = CrawlConfig(seeds=[seed], frontier=postgres_dsn, crawl_name=crawl, allowed_domains=["a.test"],
                                 parse_mode="thread", fetcher=fetcher)
            assert Crawler(config).run().counts["done"] == 3  # / and its two pages
            with psycopg.connect(postgres_dsn) as conn:
                conn.execute(f"SET search_path TO {crawl}")
                assert conn.execute("SELECT origin, address FROM hosts").fetchall() == [
                    (f"http://a.test:{site.ports[0]}", address)]


def test_a_worker_that_takes_a_host_of_an_address_another_is_settling_gives_it_back_at_once(
    postgres_dsn: str,
) -> None:
    """Two workers settling one address at the same moment are put in order by the address's
    advisory lock, which neither waits for: the one that finds it taken gives the host back in the
    same transaction, before claiming anything of it."""
    import psycopg

    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    crawl = f"settling_{next(_crawls)}"
    with PostgresFrontier(postgres_dsn, crawl, lease_seconds=60.0, group_by_address=True) as frontier, \
            psycopg.connect(postgres_dsn) as other:
        frontier.add(["http://127.0.0.1:9001/", "http://127.0.0.2:9002/"])
        other.execute("SELECT pg_advisory_xact_lock(1852403553, hashtext('127.0.0.1'))")  # settling 127.0.0.1
        frontier.store._take_soon = True
        assert [item.host for item in frontier.claim(5)] == ["http://127.0.0.2:9002"]
        assert frontier.store._conn.execute(  # type: ignore[union-attr]
            "SELECT origin FROM hosts WHERE owner IS NULL").fetchall() == [("http://127.0.0.1:9001",)]
        other.rollback()  # settled elsewhere (here: nothing holds it now): the next take keeps it
        frontier.store._take_soon = True
        assert [item.host for item in frontier.claim(5)] == ["http://127.0.0.1:9001"]


def test_a_worker_over_its_share_lets_whole_address_groups_go(postgres_dsn: str) -> None:
    """A worker alone takes six hosts, four on 127.0.0.1 and two on 127.0.0.2; a second joins and
    the first's share falls to three.  It lets one whole address go and keeps the other whole: the
    hosts of an address can only move together (letting the three least busy go split an address,
    which then neither worker could finish alone)."""
    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    crawl = f"shed_groups_{next(_crawls)}"
    hosts = ["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003", "127.0.0.1:9004", "127.0.0.2:9005", "127.0.0.2:9006"]
    with PostgresFrontier(postgres_dsn, crawl, lease_seconds=60.0, group_by_address=True) as first:
        first.add([f"http://{host}/" for host in hosts])
        first.store._take_soon = True
        first.lost_hosts()
        owners = "SELECT DISTINCT owner IS NOT NULL, address FROM hosts ORDER BY 1, 2"
        assert first.store._conn.execute(owners).fetchall() == [(True, "127.0.0.1"), (True, "127.0.0.2")]  # type: ignore[union-attr]
        with PostgresFrontier(postgres_dsn, crawl, lease_seconds=60.0, group_by_address=True):
            first.store._renew_at = 0.0  # the renewal finds the share: three hosts
            first.lost_hosts()
            held = first.store._conn.execute(owners).fetchall()  # type: ignore[union-attr]
            assert sorted(held) in ([(False, "127.0.0.1"), (True, "127.0.0.2")],
                                    [(False, "127.0.0.2"), (True, "127.0.0.1")]), held

"""Trap rules (issue 29, item 1): ``CrawlConfig(max_pages_per_host, max_url_length, max_path_repeats,
strip_query_params)``, applied where the frontier admits URLs, each refusal counted by cause.

Real crawls of the trap site (``niofetcher.testing.TrapSite``) on 127.0.0.1, each trap alone, with
the SQLite frontier (and one on PostgreSQL); what was fetched is counted by the server:

- each option is shown to matter by a negative control: the same crawl with the option off runs
  into its trap up to ``max_pages``, with it every real page is fetched and the trap is bounded;
- the refusals are in ``CrawlSummary.refused`` by cause, in the frontier's ``refusals`` table, the
  CLI's summary table and ``niofetcher status``;
- a resumed crawl keeps each host's count of admitted URLs (also counted afresh when a crawl that
  did not keep it turns the limit on), and a file of schema version 6 is upgraded in place;
- seeds are cleaned, never refused;
- the URL rules alone: ``QueryCleaner`` (globs, case, path parameters, nothing else touched),
  ``path_repeats``; bad options are one-line ValueErrors (CrawlConfig) or usage errors (CLI).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_cli_crawl import crawl as cli_crawl
from test_cli_crawl import niofetcher, summary_rows

from niofetcher.cli.display import _numbers
from niofetcher.crawl import CrawlConfig, Crawler, CrawlSummary
from niofetcher.crawl.frontier import Frontier
from niofetcher.crawl.frontier.schema import SCHEMA_VERSION
from niofetcher.crawl.frontier.traps import TrapRules, stored_refusals
from niofetcher.testing import TrapSite
from niofetcher.urls import QueryCleaner, path_repeats

pytest_plugins = ["pg_cluster"]

OFF = {"max_url_length": None, "max_path_repeats": None, "strip_query_params": ()}
BUDGET = 150


def run(site: TrapSite, db: Path, **options: object) -> CrawlSummary:
    config = CrawlConfig(seeds=[site.base_url], db_path=str(db), parse_mode="thread", **options)  # type: ignore[arg-type]
    return Crawler(config).run()


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql).fetchall()


def admitted_matches_rows(db: Path) -> bool:
    """The admitted count of each host is its number of URL rows."""
    counted = rows(db, "SELECT hosts.origin, admitted.n FROM admitted JOIN hosts ON hosts.id = admitted.host_id")
    stored = rows(db, "SELECT hosts.origin, COUNT(*) FROM urls JOIN hosts ON hosts.id = urls.host_id GROUP BY 1")
    return sorted(counted) == sorted(stored)


# -- each option against its trap, with its negative control -----------------------------------------


@pytest.mark.timeout(60)
def test_stripped_session_ids_mint_no_urls_and_without_stripping_the_shop_takes_the_budget(tmp_path: Path) -> None:
    with TrapSite(traps=["sessions"]) as site:
        summary = run(site, tmp_path / "on.db", max_pages=BUDGET)
        assert not summary.stopped and site.real_fetched() == set(site.real_urls())
        assert site.trap_fetches() == 0  # not one URL with a session ID or a utm_ tag was asked for
        stored = [url for (url,) in rows(tmp_path / "on.db", "SELECT url FROM urls")]
        assert not [url for url in stored if "sid" in url.lower() or "utm_" in url]
    with TrapSite(traps=["sessions"]) as site:
        summary = run(site, tmp_path / "off.db", max_pages=BUDGET, strip_query_params=())
        assert summary.stopped and summary.counts["done"] == BUDGET
        assert site.fetches()["sessions"] >= BUDGET - len(site.real_urls())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("trap", ["paths", "soft404"])
def test_growing_paths_stop_at_max_path_repeats_and_without_it_run_to_the_budget(tmp_path: Path, trap: str) -> None:
    with TrapSite(traps=[trap]) as site:
        summary = run(site, tmp_path / "on.db", max_pages=BUDGET)
        assert not summary.stopped and site.real_fetched() == set(site.real_urls())
        # Paths over {a, b} (or {blog, news}) with each at most twice: 2 + 4 + 6 + 6 below the door.
        assert 0 < site.fetches()[trap] <= 19
        assert summary.refused["max_path_repeats"] > 0 and set(summary.refused) == {"max_path_repeats"}
        assert rows(tmp_path / "on.db", "SELECT cause, n FROM refusals") == [
            ("max_path_repeats", summary.refused["max_path_repeats"])]
    with TrapSite(traps=[trap]) as site:
        summary = run(site, tmp_path / "off.db", max_pages=BUDGET, max_path_repeats=None)
        assert summary.stopped and summary.counts["done"] == BUDGET and summary.refused == {}
        assert site.fetches()[trap] >= BUDGET - len(site.real_urls())


@pytest.mark.timeout(60)
def test_a_path_that_never_repeats_stops_at_max_url_length_and_without_it_runs_to_the_budget(tmp_path: Path) -> None:
    with TrapSite(traps=["archive"]) as site:
        summary = run(site, tmp_path / "on.db", max_pages=BUDGET, max_url_length=100)
        assert not summary.stopped and site.real_fetched() == set(site.real_urls())
        assert 0 < site.fetches()["archive"] < 40 and summary.refused == {"max_url_length": 1}
        longest = max(len(url) for (url,) in rows(tmp_path / "on.db", "SELECT url FROM urls"))
        assert 90 < longest <= 100
    with TrapSite(traps=["archive"]) as site:
        summary = run(site, tmp_path / "off.db", max_pages=BUDGET, max_url_length=None)
        assert summary.stopped and summary.counts["done"] == BUDGET
        assert site.fetches()["archive"] >= BUDGET - len(site.real_urls())


@pytest.mark.timeout(60)
def test_max_pages_per_host_bounds_a_calendar_and_endless_pagination(tmp_path: Path) -> None:
    with TrapSite(traps=["calendar", "pagination"]) as site:
        summary = run(site, tmp_path / "on.db", max_pages=BUDGET, max_pages_per_host=60)
        assert not summary.stopped and site.real_fetched() == set(site.real_urls())
        assert summary.counts["done"] == 60 and site.trap_fetches() == 60 - len(site.real_urls())
        assert summary.refused["max_pages_per_host"] > 0
        assert rows(tmp_path / "on.db", "SELECT n FROM admitted") == [(60,)] and admitted_matches_rows(tmp_path / "on.db")
    with TrapSite(traps=["calendar", "pagination"]) as site:
        summary = run(site, tmp_path / "off.db", max_pages=BUDGET)  # the defaults: no per-host limit
        assert summary.stopped and summary.counts["done"] == BUDGET
        assert site.trap_fetches() == BUDGET - len(site.real_urls())


@pytest.mark.timeout(60)
def test_the_defaults_leave_every_trap_but_the_calendar_and_pagination_bounded(tmp_path: Path) -> None:
    with TrapSite() as site:
        summary = run(site, tmp_path / "defaults.db", max_pages=400)
        fetched = site.fetches()
        assert site.real_fetched() == set(site.real_urls())
        assert "sessions" not in fetched and fetched["paths"] <= 19 and fetched["soft404"] <= 19
        assert summary.refused["max_path_repeats"] > 0
    with TrapSite() as site:
        run(site, tmp_path / "off.db", max_pages=400, **OFF)
        assert site.fetches()["sessions"] > fetched["calendar"]  # stripping off: the shop takes the most


# -- seeds, resume, upgrade --------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_seeds_are_cleaned_and_never_refused(tmp_path: Path) -> None:
    with TrapSite(traps=["paths"]) as site:
        deep = f"{site.base_url}docs/a/a/a/a/?sid=S1&x=1"
        config = CrawlConfig(seeds=[deep, site.base_url], db_path=str(tmp_path / "seeds.db"), parse_mode="thread",
                             max_url_length=20, max_pages_per_host=1)
        summary = Crawler(config).run()
        done = {url for (url,) in rows(tmp_path / "seeds.db", "SELECT url FROM urls WHERE state = 'done'")}
        assert done == {f"{site.base_url}docs/a/a/a/a/?x=1", site.base_url}
        assert summary.refused["max_url_length"] > 0 and summary.counts["done"] == 2  # its links were longer


@pytest.mark.timeout(90)
def test_a_resumed_crawl_keeps_the_per_host_count_and_counts_what_an_earlier_run_left_uncounted(tmp_path: Path) -> None:
    db = tmp_path / "resume.db"
    with TrapSite(traps=["calendar", "pagination"]) as site:
        first = run(site, db, max_pages=10)  # no per-host limit: the counts are not kept
        assert first.stopped
        known = rows(db, "SELECT COUNT(*) FROM urls")[0][0]
        assert isinstance(known, int) and 10 < known < 40
        second = run(site, db, max_pages=20, max_pages_per_host=40)  # counted afresh on opening
        assert second.stopped and admitted_matches_rows(db)
        third = run(site, db, max_pages_per_host=40)
        assert not third.stopped and rows(db, "SELECT COUNT(*) FROM urls") == [(40,)]
        assert rows(db, "SELECT n FROM admitted") == [(40,)] and third.refused["max_pages_per_host"] > 0
        served = sum(site.fetches().values())
        again = run(site, db, max_pages_per_host=40)  # nothing left: the budget holds across runs
        assert again.pages == 0 and sum(site.fetches().values()) == served
    assert stored_refusals(db)["max_pages_per_host"] >= third.refused["max_pages_per_host"]


def test_a_version_6_file_is_upgraded_with_its_hosts_counted(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with Frontier(db) as frontier:
        frontier.add([f"http://a.test/{i}" for i in range(5)] + ["http://b.test/"])
    with contextlib.closing(sqlite3.connect(db)) as conn:  # the file as version 6 left it
        conn.executescript("DROP TABLE admitted; DROP TABLE refusals; DELETE FROM meta WHERE key = 'admitted_through';"
                           "DROP TABLE fingerprints; ALTER TABLE urls DROP COLUMN duplicate_of;"  # version 8's
                           "DROP INDEX urls_revisit; ALTER TABLE urls DROP COLUMN etag;"  # version 9's
                           "ALTER TABLE urls DROP COLUMN last_modified; ALTER TABLE urls DROP COLUMN digest;"
                           "ALTER TABLE urls DROP COLUMN visits; ALTER TABLE urls DROP COLUMN changes;"
                           "ALTER TABLE urls DROP COLUMN next_due; ALTER TABLE urls DROP COLUMN captured_at;"  # 10's
                           "ALTER TABLE urls DROP COLUMN changed_time; ALTER TABLE urls DROP COLUMN unchanged_time;"  # 11's
                           "UPDATE meta SET value = '6' WHERE key = 'schema_version';")
    with Frontier(db, traps=TrapRules(max_pages_per_host=6)) as frontier:
        assert frontier.add([f"http://a.test/x{i}" for i in range(3)], depth=1, parent="http://a.test/0") == 1
        assert frontier.not_followed == {"max_pages_per_host": 2}
    assert dict(rows(db, "SELECT hosts.origin, n FROM admitted JOIN hosts ON hosts.id = host_id")) == {
        "http://a.test": 6, "http://b.test": 1}
    assert stored_refusals(db) == {"max_pages_per_host": 2}
    assert rows(db, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]


def test_known_urls_cost_no_budget_and_refusals_are_counted_once() -> None:
    with Frontier(traps=TrapRules(max_pages_per_host=3, max_path_repeats=2)) as frontier:
        frontier.add(["http://a.test/"])
        links = ["http://a.test/1", "http://a.test/2", "http://a.test/3", "http://a.test/x/x/x"]
        assert frontier.add(links, depth=1, parent="http://a.test/") == 2
        assert frontier.not_followed == {"max_pages_per_host": 1, "max_path_repeats": 1}
        assert frontier.add(links, depth=1, parent="http://a.test/") == 0  # found again: known or refused
        assert frontier.add(["http://a.test/1"], depth=0) == 0  # known: its depth goes down, no budget used
        assert frontier.not_followed == {"max_pages_per_host": 1, "max_path_repeats": 1}


# -- what a user sees: the summary table, status ------------------------------------------------------


@pytest.mark.timeout(90)
def test_the_command_line_shows_the_refusals_and_turns_the_defaults_off(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    with TrapSite(traps=["paths", "calendar"]) as site:
        done = cli_crawl(site.base_url, db, "--max-pages-per-host", "50")
        assert done.returncode == 0, done.stderr
        table = summary_rows(done.stdout)
        assert int(table["not followed: max_path_repeats"]) > 0 and int(table["not followed: max_pages_per_host"]) > 0
        assert site.real_fetched() == set(site.real_urls()) and table["done"] == "50"
        status = niofetcher("status", "--db", str(db))
        assert status.returncode == 0 and "links not followed (traps):" in status.stdout
        assert re.search(rf"^  max_path_repeats +{table['not followed: max_path_repeats']}$", status.stdout, re.MULTILINE)
    with TrapSite(traps=["sessions", "paths"]) as site:
        off = cli_crawl(site.base_url, tmp_path / "off.db", "--strip-param", "none", "--max-path-repeats", "0",
                        "--max-url-length", "0", "--max-pages", "200")
        assert off.returncode == 0, off.stderr
        assert "not followed" not in off.stdout, off.stdout
        stored = [url for (url,) in rows(tmp_path / "off.db", "SELECT url FROM urls")]
        assert site.fetches()["sessions"] > 100 and any(path_repeats(url) > 2 for url in stored)
    with TrapSite(traps=["sessions"]) as site:
        own = cli_crawl(site.base_url, tmp_path / "own.db", "--strip-param", "JSESSION*", "--max-pages", "60")
        assert own.returncode == 0, own.stderr
        stored = [url for (url,) in rows(tmp_path / "own.db", "SELECT url FROM urls")]
        assert any("?sid=" in url for url in stored) and not any("jsessionid" in url for url in stored)
    bad = niofetcher("crawl", "http://127.0.0.1:1/", "--db", str(tmp_path / "bad.db"), "--strip-param", "a=b")
    assert bad.returncode == 2 and "parameter name pattern" in bad.stderr and "Traceback" not in bad.stderr
    bad = niofetcher("crawl", "http://127.0.0.1:1/", "--max-path-repeats", "-1")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test__numbers_fits_80_columns_with_refusals() -> None:
    assert _numbers(5, 0, 7, 0, 2, 1) == "5 done, 0 failed, 7 waiting; 2 fetching, 1 queued or parsing"
    assert _numbers(5, 0, 7, 3, 2, 1) == "5 done, 0 failed, 7 waiting, 3 refused; 2 fetching, 1 queued"
    assert len(_numbers(99_999_999, 99_999_999, 99_999_999, 99_999_999, 9_999, 99_999)) <= 80


# -- PostgreSQL ----------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_on_postgres_the_budget_holds_and_the_refusals_are_kept(postgres_dsn: str) -> None:
    import psycopg

    with TrapSite(traps=["calendar", "pagination", "sessions"]) as site:
        config = CrawlConfig(seeds=[site.base_url], frontier=postgres_dsn, crawl_name="traps_budget",
                             parse_mode="thread", max_pages_per_host=60, max_pages=BUDGET)
        summary = Crawler(config).run()
        assert not summary.stopped and site.real_fetched() == set(site.real_urls())
        assert summary.counts["done"] == 60 and "sessions" not in site.fetches()
        assert summary.refused["max_pages_per_host"] > 0
        site.reset_counters()
        again = Crawler(config).run()  # resumed: the host's budget is spent
        assert again.pages == 0 and again.counts["done"] == 60 and site.fetches().get("real", 0) <= 1
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("SET search_path TO traps_budget")
        assert conn.execute("SELECT sum(n) FROM admitted").fetchone() == (60,)
        assert conn.execute("SELECT count(*) FROM urls").fetchone() == (60,)
    assert stored_refusals(postgres_dsn, crawl="traps_budget") == summary.refused
    status = niofetcher("status", "--frontier", postgres_dsn, "--crawl", "traps_budget")
    assert status.returncode == 0 and "links not followed (traps):" in status.stdout


@pytest.mark.timeout(60)
def test_a_postgres_crawl_without_the_count_tables_gets_them_counted_when_opened(postgres_dsn: str) -> None:
    import psycopg

    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    with PostgresFrontier(postgres_dsn, "traps_upgrade") as frontier:
        frontier.add([f"http://a.test/{i}" for i in range(5)] + ["http://b.test/"])
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # a crawl made before the trap rules
        conn.execute("DROP TABLE traps_upgrade.admitted, traps_upgrade.refusals")
    with PostgresFrontier(postgres_dsn, "traps_upgrade", traps=TrapRules(max_pages_per_host=6)) as frontier:
        assert frontier.add([f"http://a.test/x{i}" for i in range(3)], depth=1, parent="http://a.test/0") == 1
        assert frontier.not_followed == {"max_pages_per_host": 2}
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        counted = conn.execute("SELECT h.origin, sum(a.n) FROM traps_upgrade.admitted AS a "
                               "JOIN traps_upgrade.hosts AS h ON h.id = a.host_id GROUP BY h.origin").fetchall()
    assert dict(counted) == {"http://a.test": 6, "http://b.test": 1}
    assert stored_refusals(postgres_dsn, crawl="traps_upgrade") == {"max_pages_per_host": 2}


# -- the URL rules alone --------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "cleaned"), [
    ("http://h/a?sid=1", "http://h/a"),
    ("http://h/a?x=1&SID=2&utm_source=3&a=1&a=2", "http://h/a?x=1&a=1&a=2"),
    ("http://h/a;jsessionid=ZZ?x=1", "http://h/a?x=1"),
    ("http://h/a;JSESSIONID=ZZ/b;v=1", "http://h/a/b;v=1"),
    ("http://h/a?xutm_a=1&sidx=2&utm=3", "http://h/a?xutm_a=1&sidx=2&utm=3"),
    ("http://h/a?&&b", "http://h/a?&&b"),
    ("http://h/a?PHPSESSID=9&utm_medium", "http://h/a"),
    ("http://h/a?", "http://h/a?"),
    ("http://h/sid=1/a", "http://h/sid=1/a"),
])
def test_query_cleaner(url: str, cleaned: str) -> None:
    cleaner = QueryCleaner(CrawlConfig.strip_query_params)
    assert cleaner.clean(url) == cleaned
    assert QueryCleaner(()).clean(url) == url


def test_query_cleaner_refuses_what_no_name_can_be() -> None:
    for bad in ("", "a=b", "a&b", "a b", "a/b", "a?"):
        with pytest.raises(ValueError, match="parameter name pattern"):
            QueryCleaner([bad])
    with pytest.raises(ValueError, match="sequence"):
        QueryCleaner("sid")


@pytest.mark.parametrize(("url", "repeats"), [
    ("http://h/", 0), ("http://h/a", 1), ("http://h/a/b/c/", 1), ("http://h/a/b/a/b/a/b/", 3), ("http://h/a/a/a", 3),
    ("http://h/a/x/a/y/a/", 3), ("http://h/x/1/y/1/?q=/1/1/1", 2), ("http://h/a//a///", 2), ("http://h:8/a/a#/a/a", 2),
])
def test_path_repeats(url: str, repeats: int) -> None:
    assert path_repeats(url) == repeats


@pytest.mark.parametrize(("option", "value"), [
    ("max_pages_per_host", 0), ("max_url_length", -1), ("max_path_repeats", 0), ("max_path_repeats", True),
    ("max_url_length", 1.5), ("strip_query_params", "sid"), ("strip_query_params", ["a=b"]),
])
def test_bad_trap_options_are_value_errors(option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option if option != "strip_query_params" or value == "sid" else "pattern"):
        CrawlConfig(seeds=["http://a.test/"], **{option: value})  # type: ignore[arg-type]
    off: dict[str, Any] = {option: None if option != "strip_query_params" else []}
    assert CrawlConfig(seeds=["http://a.test/"], **off)

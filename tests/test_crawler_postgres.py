"""A crawl on a PostgreSQL frontier: ``CrawlConfig(frontier=URL, crawl_name=NAME)`` and
``niofetcher crawl --frontier URL --crawl NAME`` (issue 12, first increment: one worker).

- A crawl over a multi-host TestSite fetches every page exactly once -- counted by the server --
  and ends with every URL 'done' in the crawl's ``urls`` table, read with psycopg as a user would;
  run again it fetches nothing.
- The command line crawls the same way and exits 0; a --frontier that cannot be reached is one
  line on stderr and a non-zero exit, nothing fetched; so are --db with --frontier, and
  --frontier without --crawl.
- CrawlConfig refuses what cannot be a PostgreSQL frontier with one-line ValueErrors.
- robots.txt is fetched once per host: a crawl resumed by a new worker reads it from the
  frontier (on SQLite, the control, it is fetched again).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_crawl import ROBOTS, page_requests

from niofetcher.crawl import CrawlConfig, CrawledPage, Crawler
from niofetcher.testing import TestSite
from niofetcher.testing.pages import LASTMOD

pytest_plugins = ["pg_cluster"]



@pytest.fixture
def read(postgres_dsn: str) -> Iterator[object]:
    import psycopg
    from psycopg import sql as psql

    def rows(crawl: str, sql: str) -> list[tuple[object, ...]]:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(psql.SQL("SET search_path TO {}").format(psql.Identifier(crawl)))
            return conn.execute(sql).fetchall()  # type: ignore[call-overload,no-any-return]

    yield rows


@pytest.mark.timeout(90)
def test_a_crawl_on_postgres_fetches_every_page_once_and_marks_it_done(postgres_dsn: str, read) -> None:
    with TestSite(hosts=3, pages=150, max_seconds=80) as site:
        config = CrawlConfig(seeds=[site.base_urls[0]], frontier=postgres_dsn, crawl_name="crawl_once",
                             allowed_domains=["127.0.0.1"], parse_mode="thread")
        summary = Crawler(config).run()
        everything = set(site.page_urls())
        seen = page_requests(site)
        assert set(seen) == everything and set(seen.values()) == {1}
        assert summary.counts == {"waiting": 0, "processing": 0, "done": len(everything), "error": 0}
        assert not summary.stopped and summary.pages == len(everything)
        assert read("crawl_once", "SELECT state, COUNT(*) FROM urls GROUP BY state") == [("done", len(everything))]
        (seed,) = read("crawl_once", f"SELECT depth, parent, status FROM urls WHERE url = '{site.base_urls[0]}'")
        assert seed == (0, None, 200)
        again = Crawler(config).run()  # resumed: nothing left to fetch
        assert page_requests(site) == seen and again.pages == 0


@pytest.mark.timeout(90)
def test_a_resumed_sitemap_crawl_on_postgres_has_the_lastmods(postgres_dsn: str, read) -> None:
    with TestSite(pages=2, sitemap="urlset", orphan_pages=3) as site:
        pages: list[CrawledPage] = []
        config = CrawlConfig(seeds=[site.base_urls[0]], frontier=postgres_dsn, crawl_name="crawl_lastmod",
                             parse_mode="thread", sitemaps=True, max_pages=2)
        assert Crawler(config, on_page=pages.append).run().stopped
        assert [page.url for page in pages if "/orphan/" in page.url] == []
        Crawler(dataclasses.replace(config, max_pages=None), on_page=pages.append).run()
    orphans_seen = {page.url: page.lastmod for page in pages if "/orphan/" in page.url}
    assert len(orphans_seen) == 3 and set(orphans_seen.values()) == {LASTMOD}
    dated = dict(read("crawl_lastmod", "SELECT url, lastmod FROM urls WHERE url LIKE '%/orphan/%'"))
    assert dated == orphans_seen


def niofetcher(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "niofetcher", *args], capture_output=True, text=True, timeout=80,
                          check=False)


@pytest.mark.timeout(90)
def test_the_crawl_command_on_postgres(postgres_dsn: str, read, tmp_path: Path) -> None:
    with TestSite(hosts=2, pages=40, max_seconds=80) as site:
        seed = site.base_urls[0]
        done = niofetcher("crawl", seed, "--frontier", postgres_dsn, "--crawl", "t", "--allowed-domain", "127.0.0.1",
                          "--progress", "none", "--parse-mode", "thread", "--out", str(tmp_path / "pages.jsonl"))
        assert done.returncode == 0, done.stderr
        everything = set(site.page_urls())
        assert set(page_requests(site)) == everything
        assert read("t", "SELECT COUNT(*) FROM urls WHERE state = 'done'") == [(len(everything),)]
        assert len((tmp_path / "pages.jsonl").read_text().splitlines()) == len(everything)

        port = postgres_dsn.rsplit(":", 1)[1].split("/")[0]
        for args, words in (
            (["--frontier", "postgresql://postgres:secret@127.0.0.1:1/postgres", "--crawl", "t"], "127.0.0.1:1/postgres"),
            (["--frontier", f"postgresql://postgres@127.0.0.1:{port}/nosuchdb", "--crawl", "t"], "does not exist"),
            (["--frontier", postgres_dsn], "needs --crawl"),
            (["--frontier", postgres_dsn, "--crawl", "bad name"], "crawl name"),
            (["--frontier", postgres_dsn, "--crawl", "t", "--db", str(tmp_path / "x.db")], "not both"),
            (["--crawl", "t"], "give --frontier too"),
            (["--frontier", "mysql://h/db", "--crawl", "t"], "postgresql://"),
        ):
            refused = niofetcher("crawl", seed, "--progress", "none", *args)
            assert refused.returncode != 0 and refused.stdout == "", args
            (line,) = refused.stderr.splitlines()
            assert line.startswith("niofetcher: error: ") and words in line and "secret" not in line, line
        assert set(page_requests(site).values()) == {1}  # nothing fetched by the refused ones


def test_crawl_config_says_what_a_postgres_frontier_needs() -> None:
    seeds = ["http://a.test/"]
    postgres_dsn = "postgresql://crawler@db.test:5432/crawls"
    assert CrawlConfig(seeds=seeds, frontier=postgres_dsn, crawl_name="c").frontier == postgres_dsn
    assert CrawlConfig(seeds=seeds, frontier="postgres://h/db", crawl_name="c").crawl_name == "c"
    for kwargs, words in (
        ({"frontier": postgres_dsn}, "needs crawl_name"),
        ({"crawl_name": "c"}, "give frontier too"),
        ({"frontier": "sqlite:///x.db", "crawl_name": "c"}, "postgresql://"),
        ({"frontier": postgres_dsn, "crawl_name": "c", "db_path": "x.db"}, "not both"),
        ({"frontier": postgres_dsn, "crawl_name": "pg_catalog"}, "crawl name"),
        ({"frontier": postgres_dsn, "crawl_name": 3}, "crawl must be a str"),
    ):
        with pytest.raises(ValueError, match=words) as refused:
            CrawlConfig(seeds=seeds, **kwargs)  # type: ignore[arg-type]
        assert "\n" not in str(refused.value)


def test_only_a_postgres_frontier_loads_psycopg() -> None:
    """The crawler, the crawl command and a SQLite crawl do not import psycopg; opening a PostgreSQL frontier does."""
    script = (
        "import sys\n"
        "import niofetcher.cli.crawl, niofetcher.crawl.frontier.postgres_schema\n"
        "from niofetcher.crawl import CrawlConfig, Crawler\n"
        "from niofetcher.crawl.frontier import Frontier\n"
        "CrawlConfig(seeds=['http://a.test/'], frontier='postgresql://u@h/db', crawl_name='c')\n"
        "Frontier().close()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'psycopg'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.timeout(90)
def test_a_new_owner_of_a_host_reads_its_robots_txt_from_the_frontier(postgres_dsn: str, read, tmp_path: Path) -> None:
    """A crawl stopped by max_pages and resumed by a new worker fetches each robots.txt once, on
    PostgreSQL and on SQLite alike: both keep the answers with the hosts."""
    for frontier in ({"frontier": postgres_dsn, "crawl_name": "robots_once"}, {"db_path": str(tmp_path / "r.db")}):
        with TestSite(hosts=3, pages=20, robots_disallow=["/page/1"], robots_crawl_delay=0.01, max_seconds=80) as site:
            config = CrawlConfig(seeds=site.base_urls, allowed_domains=["127.0.0.1"], parse_mode="thread",
                                 max_pages=6, **frontier)  # type: ignore[arg-type]
            assert Crawler(config).run().stopped
            first = [site.counters(port).paths[ROBOTS] for port in site.ports]
            resumed = Crawler(dataclasses.replace(config, max_pages=None)).run()
            assert not resumed.stopped and set(resumed.errors) == {"robots_disallowed"}  # the stored rules apply
            robots = [site.counters(port).paths[ROBOTS] for port in site.ports]
        assert first == robots == [1, 1, 1], (first, robots)
        if "frontier" in frontier:
            assert read("robots_once", "SELECT robots_status, position('Disallow' in convert_from(robots, 'UTF8')) > 0"
                                       " FROM hosts ORDER BY id") == [(200, True)] * 3


@pytest.mark.timeout(90)
def test_the_crawl_command_on_postgres_lists_the_failed_urls_of_the_run(postgres_dsn: str) -> None:
    """The summary's list of failed URLs, read from the PostgreSQL frontier as from SQLite's."""
    with TestSite(hosts=1, pages=5, max_seconds=80) as site:
        missing = site.base_urls[0] + "missing"
        done = niofetcher("crawl", site.base_urls[0], missing, "--frontier", postgres_dsn, "--crawl", "failures",
                          "--progress", "none", "--parse-mode", "thread", "--fail-on-error")
    assert done.returncode == 1, done.stderr
    assert f"failed URLs:\n    {missing}  HTTP 404 Not Found\n" in done.stdout, done.stdout

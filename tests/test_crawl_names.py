"""PostgreSQL crawl names (issue 24): 1 to 63 letters, digits, ``_`` and ``-``, in lower case.

- ``check_crawl_name`` takes ``my-crawl``, a digit first and upper case (folded: the name of the
  schema is lower case, as PostgreSQL folds a name given unquoted), and refuses, in one line,
  anything else: empty, too long, a space, a dot, a quote, non-ASCII, PostgreSQL's own names
  (``pg_*``, ``public``, ``information_schema``) in any case.  CrawlConfig keeps the folded name.
- Against a throwaway PostgreSQL cluster: crawls named ``my-crawl`` and ``2nd-Crawl`` run end to
  end (the name quoted wherever it reaches SQL: schema, tables, sequence default, search_path,
  the advisory lock, status); ``2ND-crawl`` resumes ``2nd-Crawl``'s crawl; the command line takes
  ``--crawl my-crawl`` for ``crawl`` and ``status``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_cli_crawl import page_requests

from niofetcher.crawl import CrawlConfig, Crawler
from niofetcher.crawl.frontier.postgres_schema import check_crawl_name
from niofetcher.testing import TestSite

pytest_plugins = ["pg_cluster"]

ACCEPTED = {
    "mycrawl": "mycrawl", "my-crawl": "my-crawl", "my_crawl": "my_crawl", "MyCrawl": "mycrawl", "2nd-Crawl": "2nd-crawl",
    "-": "-", "_x": "_x", "x" * 63: "x" * 63, "pg-crawl": "pg-crawl", "publics": "publics",
}
REFUSED = ["", "x" * 64, "my crawl", "my.crawl", 'my"crawl', "my'crawl", "bücher", "crawl\n", "pg_crawl", "PG_Crawl",
           "public", "Public", "information_schema", "INFORMATION_SCHEMA"]


@pytest.mark.parametrize("name, schema", ACCEPTED.items())
def test_a_crawl_name_is_letters_digits_underscores_and_dashes_in_lower_case(name: str, schema: str) -> None:
    assert check_crawl_name(name) == schema
    assert CrawlConfig(seeds=["http://a.test/"], frontier="postgresql://u@db.test/crawls", crawl_name=name).crawl_name \
        == schema


@pytest.mark.parametrize("name", REFUSED)
def test_anything_else_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValueError, match="crawl name") as refused:
        CrawlConfig(seeds=["http://a.test/"], frontier="postgresql://u@db.test/crawls", crawl_name=name)
    assert "\n" not in str(refused.value)


def schema_states(dsn: str, schema: str) -> list[tuple[object, ...]]:
    """URLs per state in the crawl's schema, read with psycopg as a user would (the name quoted)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        return conn.execute("SELECT state, COUNT(*) FROM urls GROUP BY state").fetchall()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name, again, schema", [("my-crawl", "my-crawl", "my-crawl"),
                                                 ("2nd-Crawl", "2ND-crawl", "2nd-crawl")])
def test_a_crawl_with_such_a_name_runs_end_to_end_and_resumes(postgres_dsn: str, name: str, again: str,
                                                              schema: str) -> None:
    from niofetcher.crawl.frontier.postgres import crawl_status

    with TestSite(hosts=1, pages=20, max_seconds=80) as site:
        config = CrawlConfig(seeds=site.base_urls, frontier=postgres_dsn, crawl_name=name, parse_mode="thread")
        summary = Crawler(config).run()
        everything = set(site.page_urls())
        assert set(page_requests(site)) == everything and set(page_requests(site).values()) == {1}
        assert summary.counts["done"] == len(everything) and not summary.stopped
        resumed = CrawlConfig(seeds=site.base_urls, frontier=postgres_dsn, crawl_name=again, parse_mode="thread")
        assert Crawler(resumed).run().pages == 0  # the same crawl: nothing left to fetch
        assert set(page_requests(site).values()) == {1}
    assert schema_states(postgres_dsn, schema) == [("done", len(everything))]
    assert crawl_status(postgres_dsn, again).counts["done"] == len(everything)


@pytest.mark.timeout(90)
def test_the_command_line_takes_a_crawl_name_with_a_dash(postgres_dsn: str) -> None:
    def niofetcher(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "niofetcher", *args], capture_output=True, text=True,
                              timeout=80, check=False, input="")

    with TestSite(hosts=1, pages=10, max_seconds=80) as site:
        done = niofetcher("crawl", site.base_urls[0], "--frontier", postgres_dsn, "--crawl", "cli-crawl",
                          "--progress", "none", "--parse-mode", "thread")
        assert done.returncode == 0, done.stderr
        assert set(page_requests(site)) == set(site.page_urls())
    status = niofetcher("status", "--frontier", postgres_dsn, "--crawl", "CLI-crawl")
    assert status.returncode == 0, status.stderr
    assert schema_states(postgres_dsn, "cli-crawl") == [("done", len(site.page_urls()))]
    refused = niofetcher("crawl", site.base_urls[0], "--frontier", postgres_dsn, "--crawl", "my crawl",
                         "--progress", "none")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "crawl name 'my crawl'" in refused.stderr

"""How ``niofetcher fetch`` and ``crawl`` end and what they say (issue 14, items 1-5; docs/cli.md).

- A run that ended exits 0, whatever its URLs answered (a 404, a robots.txt
  refusal), unless not one page could be fetched (tests/test_cli_files.py);
  ``--fail-on-error`` makes a failed URL exit 1.
- The summary lists the first failed URLs of the run with why; a policy
  refusal (--deny-private) is tried once, not ``--max-attempts`` times.
- ``--max-pages`` reached says "page budget of N reached", not "rerun to
  resume" (a rerun with the same budget does nothing).
- A parser error is one line with a pointer to --help; a --db that cannot be
  opened is named once; a failing --out or --warc leaves no --db behind.
- ``--progress lines`` shows done, failed, fetching, connections and this
  run's rate apart.

Every command runs in a subprocess against a TestSite, as a user runs it.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from rawserver import get_unused_port
from test_cli_crawl import crawl, niofetcher, page_requests, summary_rows

from niofetcher import FetcherConfig, NIOFetcher
from niofetcher.cli.args import build_parser
from niofetcher.cli.display import Display
from niofetcher.crawl.config import CrawlProgress
from niofetcher.crawl.policy import is_final
from niofetcher.errors import ErrorKind
from niofetcher.models import FetchResult
from niofetcher.testing import TestSite

# -- exit status -----------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_crawl_with_a_missing_page_exits_0_and_lists_it_and_fail_on_error_exits_1(tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=5, max_seconds=60) as site:
        missing = site.base_urls[0] + "missing"
        done = crawl(site.base_urls[0], tmp_path / "a.sqlite", "--seeds-file", "-", "--parse-mode", "thread",
                     stdin=f"{missing}\n")
        strict = niofetcher("crawl", site.base_urls[0], missing, "--db", str(tmp_path / "b.sqlite"), "--fail-on-error",
                            "--parse-mode", "thread", "--progress", "none")
    assert done.returncode == 0, done.stderr
    rows = summary_rows(done.stdout)
    assert "crawl complete" in done.stdout and rows["HTTP 404"] == "1" and "error: http_404" not in rows
    assert f"failed URLs:\n    {missing}  HTTP 404 Not Found\n" in done.stdout
    assert strict.returncode == 1, strict.stderr
    assert strict.stderr == ""  # a result, not an error message


@pytest.mark.timeout(60)
def test_fetch_exits_0_on_a_404_and_1_with_fail_on_error() -> None:
    with TestSite(hosts=1, pages=1) as site:
        urls = [site.base_urls[0], site.base_urls[0] + "missing"]
        done = niofetcher("fetch", *urls)
        strict = niofetcher("fetch", *urls, "--fail-on-error")
        good = niofetcher("fetch", urls[0], "--fail-on-error")
    assert (done.returncode, strict.returncode, good.returncode) == (0, 1, 0)
    assert " 404 " in done.stdout and " 404 " in strict.stdout


@pytest.mark.timeout(60)
def test_a_deny_private_refusal_is_tried_once_and_named_in_the_summary(tmp_path: Path) -> None:
    """Without the rule the URL is fetched --max-attempts times, a retry delay apart, to the same refusal.
    The seed refused, the crawl fetched nothing: exit status 1, and why in one line."""
    db = tmp_path / "c.sqlite"
    with TestSite(hosts=1, pages=1) as site:
        done = crawl(site.base_urls[0], db, "--deny-private", "--no-robots", "--max-attempts", "3")
        assert site.counters().accepted == 0
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("niofetcher: error: not one page could be fetched: 1 connect_error; first: ")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT state, attempts FROM urls").fetchall() == [("error", 1)]
    assert f"    {site.base_urls[0]}  connect_error: address 127.0.0.1 is in denied network" in done.stdout


def test_a_policy_refusal_is_marked_on_the_result_and_final_at_the_first_attempt() -> None:
    """The fetcher marks what its own settings refused (FetchResult.refused), and that, not the
    words of the detail, makes it final; a refused connection is an ordinary, retried error."""
    with TestSite(hosts=1, pages=1) as site:
        denied = fetch_one(FetcherConfig(deny_networks=("loopback",)), site.base_urls[0])
        port = fetch_one(FetcherConfig(allowed_ports=(1,)), site.base_urls[0])
        assert site.counters().accepted == 0
    refused = fetch_one(FetcherConfig(), f"http://127.0.0.1:{get_unused_port()}/")
    assert [r.error for r in (denied, port, refused)] == [ErrorKind.CONNECT_ERROR] * 3
    assert (denied.refused, port.refused, refused.refused) == (True, True, False)
    assert [is_final(r, 1, (503,), 3) for r in (denied, port, refused)] == [True, True, False]


def fetch_one(config: FetcherConfig, url: str) -> FetchResult:
    with NIOFetcher(config) as fetcher:
        assert fetcher.register(url)
        result = fetcher.get(timeout=20)
    assert result is not None
    return result


# -- the page budget ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_max_pages_reached_says_the_budget_was_reached(tmp_path: Path) -> None:
    db = tmp_path / "d.sqlite"
    with TestSite(hosts=1, pages=30, max_seconds=60) as site:
        first = crawl(site.base_urls[0], db, "--max-pages", "10", "--parse-mode", "thread")
        site.reset_counters()
        again = crawl(site.base_urls[0], db, "--max-pages", "10", "--parse-mode", "thread")
        assert page_requests(site) == {}  # why the message does not say "rerun to resume"
    for run in (first, again):
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith("page budget of 10 reached: ")
        assert "larger --max-pages" in run.stdout and "rerun with the same --db to resume" not in run.stdout


def test_every_option_with_a_default_shows_it_in_help() -> None:
    parser = build_parser()
    for name, command in parser.commands.items():
        text = command.format_help()
        for action in command._actions:
            if action.option_strings and action.default not in (None, False, [], "==SUPPRESS=="):
                assert "default" in (command._get_formatter()._get_help_string(action) or ""), (
                    name, action.option_strings)
        if name == "crawl":
            assert "--max-pages N         the page budget" in text and "--max-depth D         follow links" in text


# -- messages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["crawl", "http://a.test/", "--per-host", "0"], "argument --per-host: must be at least 1: '0'"),
    (["fetch", "http://a.test/", "--max-body-size", "lots"], "argument --max-body-size: not a positive number"),
    (["crawl", "http://a.test/", "--no-such-option"], "unrecognized arguments: --no-such-option"),
])
def test_a_parser_error_is_one_line_with_a_pointer_to_help(argv: list[str], message: str) -> None:
    done = niofetcher(*argv)
    assert done.returncode == 2
    assert done.stderr.startswith(f"niofetcher: error: {message}")
    assert done.stderr.endswith(f" (see niofetcher {argv[0]} --help)\n")
    assert done.stderr.count("\n") == 1 and "usage:" not in done.stderr


def test_a_db_in_a_missing_directory_is_named_once(tmp_path: Path) -> None:
    db = tmp_path / "missing" / "c.sqlite"
    done = niofetcher("crawl", "http://127.0.0.1:9/", "--db", str(db))
    assert done.returncode == 2
    assert done.stderr == f"niofetcher: error: cannot open --db {db}: directory {db.parent} does not exist\n"


@pytest.mark.parametrize("option", ["--out", "--warc"])
def test_a_failing_out_or_warc_leaves_no_db_behind(tmp_path: Path, option: str) -> None:
    target = tmp_path / "no" / "file"
    done = niofetcher("crawl", "http://127.0.0.1:9/", "--db", str(tmp_path / "c.sqlite"), option, str(target))
    assert done.returncode == 2
    assert done.stderr == f"niofetcher: error: cannot write {option} {target}: No such file or directory\n"
    assert list(tmp_path.iterdir()) == []


# -- progress ---------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_the_progress_line_shows_each_number_apart(tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=40, delay=0.1, max_seconds=60) as site:
        done = niofetcher("crawl", site.base_urls[0], "--db", str(tmp_path / "p.sqlite"), "--progress", "lines",
                          "--parse-mode", "thread")
    assert done.returncode == 0, done.stderr
    line = done.stderr.splitlines()[0]
    for part in (" done, ", " failed | ", " fetching, ", " queued or parsing | ", " waiting | ", " connections | ",
                 " pages/s this run"):
        assert part in line, line


def test__display_rate_leaves_out_the_pages_of_earlier_runs(capsys: pytest.CaptureFixture[str]) -> None:
    class Resumed:
        def progress(self) -> CrawlProgress:
            return CrawlProgress(done=1050, errors=0, in_flight=5, waiting=10, seconds=10.0, fetching=3,
                                 open_connections=2)

    display = Display("lines", finished_before=1000)
    display._next_line = 0.0
    display.update(Resumed())  # type: ignore[arg-type]
    assert capsys.readouterr().err == ("1050 done, 0 failed | 3 fetching, 2 queued or parsing | 10 waiting | "
                                       "2 connections | 5 pages/s this run\n")

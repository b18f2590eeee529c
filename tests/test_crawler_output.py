"""Outputs exactly once, and storage failures reported as they are (docs/crawler.md).

- A ``CrawlOutput`` given to the Crawler holds exactly one record per
  recorded URL whatever stops the crawl: after a SIGKILL and a resume,
  every 'done' URL has one record and no URL has two.
- An I/O error of the frontier (``FrontierError``, "database or disk is
  full") or of the output (``OSError``) ends the crawl with what was in
  progress given back, and ``run()`` raises that very exception, with no
  traceback logged for it.  A bug still gets its traceback.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import LeakBaseline, sigkill_after_requests

from niofetcher import FetcherConfig
from niofetcher.cli.output import PageWriter
from niofetcher.crawl import CrawlConfig, CrawledPage, Crawler
from niofetcher.crawl.frontier import Frontier, FrontierError
from niofetcher.testing import TestSite


class JsonLines:
    """The simplest CrawlOutput: one JSON line per page in one file."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "ab")  # noqa: SIM115 - closed by close()
        self.prepared: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def prepare(self, page: CrawledPage) -> None:
        line = (json.dumps({"url": page.url, "status": page.result.status}) + "\n").encode()
        with self.lock:
            self.prepared[page.url] = line

    def commit(self, urls: Sequence[str]) -> dict[str, int]:
        with self.lock:
            lines = [self.prepared.pop(url) for url in urls]
        self.file.write(b"".join(lines))
        self.file.flush()
        os.fsync(self.file.fileno())
        return {"out": self.file.tell()}

    def restore(self, offsets: Mapping[str, int]) -> None:
        self.file.truncate(offsets.get("out", 0))
        self.file.seek(0, os.SEEK_END)

    def close(self) -> None:
        self.file.close()


# The child crawls with the JsonLines above (its source, so both sides use one class).
CRAWL_SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from niofetcher import FetcherConfig
    from niofetcher.crawl import CrawlConfig, Crawler
    from test_crawler_output import JsonLines
    seed, db, out = sys.argv[1:]
    output = JsonLines(Path(out))
    config = CrawlConfig(seeds=[seed], db_path=db, parse_mode="thread",
                         fetcher=FetcherConfig(max_connections_per_host=4))
    Crawler(config, output=output).run()
    output.close()
""")


def states(db: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return dict(conn.execute("SELECT url, state FROM urls"))


def records(out: Path) -> Counter[str]:
    return Counter(json.loads(line)["url"] for line in out.read_bytes().splitlines())


@pytest.mark.timeout(90)
def test_after_a_sigkill_and_a_resume_every_done_url_has_exactly_one_record(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    db, out = tmp_path / "crawl.sqlite", tmp_path / "pages.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.getcwd()])}
    with TestSite(hosts=1, pages=600, delay=0.005, max_seconds=90) as site:
        seed = site.base_urls[0]
        for kill_at in (150, 400):  # killed twice, at different points, before the run that finishes
            child = subprocess.Popen([sys.executable, "-c", CRAWL_SCRIPT, seed, str(db), str(out)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            sigkill_after_requests(child, lambda: site.counters().requests, kill_at)
            killed = states(db)
            assert "processing" in killed.values() and "done" in killed.values()  # killed half-way
        finished = subprocess.run([sys.executable, "-c", CRAWL_SCRIPT, seed, str(db), str(out)], env=env,
                                  capture_output=True, timeout=60, check=False)
        assert finished.returncode == 0, finished.stderr.decode()
    final = states(db)
    assert set(final.values()) == {"done"} and len(final) == len(site.page_urls())
    written = records(out)
    assert set(written) == set(final) and set(written.values()) == {1}


@pytest.mark.timeout(30)
def test_records_are_written_once_per_page_across_a_graceful_stop(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    out = tmp_path / "pages.jsonl"
    db = str(tmp_path / "crawl.sqlite")
    with TestSite(hosts=1, pages=200, max_seconds=30) as site:
        config = CrawlConfig(seeds=[site.base_urls[0]], db_path=db, parse_mode="thread")
        seen = itertools.count()

        def stop_after_50(page: CrawledPage) -> None:
            if next(seen) == 50:
                crawler.stop()

        output = JsonLines(out)
        crawler = Crawler(config, on_page=stop_after_50, output=output)
        assert crawler.run().stopped
        output.close()
        output = JsonLines(out)
        Crawler(config, output=output).run()
        output.close()
    written = records(out)
    assert set(written) == set(site.page_urls()) and set(written.values()) == {1}


# -- I/O errors (case 7) -------------------------------------------------------------------


def full_disk_after(calls: int) -> Any:
    """A Frontier.complete_many that fails like SQLite on a full disk from its ``calls``-th call on."""
    real = Frontier.complete_many
    count = itertools.count()

    def complete_many(self: Frontier, *args: Any, **kwargs: Any) -> None:
        if next(count) >= calls:
            raise FrontierError(f"frontier {self.path}: database or disk is full")
        real(self, *args, **kwargs)

    return complete_many


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.exc_info]


@pytest.mark.timeout(30)
def test_a_full_disk_under_the_frontier_ends_the_crawl_with_that_error_and_no_traceback(
    tmp_path: Path, no_leaks: LeakBaseline, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = str(tmp_path / "crawl.sqlite")
    with TestSite(hosts=1, pages=200, max_seconds=30) as site:
        config = CrawlConfig(seeds=[site.base_urls[0]], db_path=db, parse_mode="thread")
        monkeypatch.setattr(Frontier, "complete_many", full_disk_after(3))
        with pytest.raises(FrontierError, match="database or disk is full$"):
            Crawler(config, on_page=lambda page: None).run()
        assert not tracebacks(caplog)
        assert "processing" not in states(Path(db)).values()  # given back: the database still works
        monkeypatch.undo()
        summary = Crawler(config).run()
    assert summary.counts["done"] == len(site.page_urls())


@pytest.mark.timeout(30)
def test_when_the_disk_stays_full_the_first_error_is_the_one_raised(
    tmp_path: Path, no_leaks: LeakBaseline, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Giving the in-progress URLs back fails too: that second failure must not hide the first."""

    def release(self: Frontier, urls: Any) -> None:
        raise FrontierError(f"frontier {self.path}: database or disk is full (again)")

    db = str(tmp_path / "crawl.sqlite")
    with TestSite(hosts=1, pages=200, max_seconds=30) as site:
        config = CrawlConfig(seeds=[site.base_urls[0]], db_path=db, parse_mode="thread")
        monkeypatch.setattr(Frontier, "complete_many", full_disk_after(3))
        monkeypatch.setattr(Frontier, "release", release)
        with pytest.raises(FrontierError, match="database or disk is full$"):
            Crawler(config).run()
    assert not tracebacks(caplog)


class FullDisk(JsonLines):
    """A JsonLines whose disk fills up at its third commit."""

    commits = 0

    def commit(self, urls: Sequence[str]) -> dict[str, int]:
        self.commits += 1
        if self.commits >= 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "pages.jsonl")
        return super().commit(urls)


@pytest.mark.timeout(30)
def test_a_full_disk_under_the_output_ends_the_crawl_with_that_error_and_loses_nothing(
    tmp_path: Path, no_leaks: LeakBaseline, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "pages.jsonl"
    db = str(tmp_path / "crawl.sqlite")
    with TestSite(hosts=1, pages=200, max_seconds=30) as site:
        config = CrawlConfig(seeds=[site.base_urls[0]], db_path=db, parse_mode="thread")
        output: JsonLines = FullDisk(out)
        with pytest.raises(OSError, match="No space left on device") as raised:
            Crawler(config, output=output).run()
        output.close()
        assert raised.value.errno == errno.ENOSPC
        assert not tracebacks(caplog)
        assert "processing" not in states(Path(db)).values()
        output = JsonLines(out)
        Crawler(config, output=output).run()
        output.close()
    written = records(out)
    assert set(written) == set(site.page_urls()) and set(written.values()) == {1}


@pytest.mark.timeout(30)
def test_a_bug_in_the_output_is_still_logged_with_its_traceback(
    tmp_path: Path, no_leaks: LeakBaseline, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(JsonLines):
        def prepare(self, page: CrawledPage) -> None:
            raise KeyError("a bug")

    output = Broken(tmp_path / "pages.jsonl")
    with TestSite(hosts=1, pages=20, max_seconds=30) as site:
        config = CrawlConfig(seeds=[site.base_urls[0]], db_path=str(tmp_path / "crawl.sqlite"), parse_mode="thread")
        with pytest.raises(RuntimeError, match="KeyError"):
            Crawler(config, output=output).run()
    output.close()
    assert tracebacks(caplog)


@pytest.mark.timeout(60)
def test_records_the_frontier_will_not_accept_do_not_stay_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A shared frontier's recordable() drops the pages whose hosts changed hands: here, every other one.
    monkeypatch.setattr(Frontier, "recordable", lambda self, urls: list(urls)[::2])
    with TestSite(hosts=1, pages=20) as site:
        writer = PageWriter(str(tmp_path / "out.jsonl"), str(tmp_path / "out.warc.gz"), "t")
        config = CrawlConfig(seeds=[site.base_urls[0]], db_path=str(tmp_path / "db"), parse_mode="thread",
                             fetcher=FetcherConfig(record_exchanges=True))
        with writer:
            Crawler(config, output=writer).run()
            assert writer._prepared == {}, f"{len(writer._prepared)} pages' records kept after the crawl"

"""``niofetcher crawl`` output exactly once, and I/O failures as one line (issue 9, cases 6 and 7).

- After any stop -- SIGTERM (graceful), SIGKILL, a full disk -- every URL
  the frontier calls ``done`` has exactly one record in ``--out`` (JSONL) and
  one request and one response record in ``--warc``, and no URL has two;
  rerun with the same ``--db``, the crawl completes with the same guarantee
  for every page.  (Before, ``--out`` lines sat in a buffer while the
  frontier already said ``done``, and a resumed crawl wrote again what a
  killed one had written.)
- A resume whose ``--out`` is shorter than what the ``--db`` recorded (not
  this crawl's file) is refused with one line, and nothing is fetched.  A new
  crawl appends to an existing ``--out``.
- A full disk or any other I/O error of ``--db``, ``--out`` or ``--warc``
  ends the crawl with one line naming the cause and the file, exit status 1,
  never a traceback.  Full disks are real: /dev/full, and a tmpfs of a few
  hundred KiB mounted for the test (skipped where mounting is not allowed).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_cli_crawl import (
    crawl,
    end_of,
    page_requests,
    start_crawl,
    states,
    urls_in_state,
    wait_for_requests,
    warc_records,
)

from niofetcher.testing import TestSite


def jsonl_urls(path: Path) -> Counter[str]:
    """URL -> records of it in a --out file (every line must be a whole JSON record)."""
    return Counter(json.loads(line)["url"] for line in path.read_text().splitlines())


def warc_urls(path: Path) -> tuple[Counter[str], Counter[str]]:
    """URL -> request records, URL -> response records of a --warc file."""
    records = warc_records(path)
    return (Counter(uri for kind, uri, _, _ in records if kind == "request"),
            Counter(uri for kind, uri, _, _ in records if kind == "response"))


def assert_each_done_url_once(db: Path, out: Path, warc: Path | None = None) -> set[str]:
    """Every done URL has one record in each file, no URL has two; returns the done URLs."""
    done = urls_in_state(db, "done")
    files = [jsonl_urls(out)]
    if warc is not None:
        files += warc_urls(warc)
    for records in files:
        assert {url for url, n in records.items() if n > 1} == set()
        assert done - set(records) == set()
    return done


def non_progress_lines(stderr: str) -> list[str]:
    """stderr without the periodic progress lines of --progress lines (cli/display.py's format)."""
    return [line for line in stderr.splitlines() if " pages/s this run" not in line]


# -- exactly once across stops and resumes ------------------------------------------------------

STOPS = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("signum", STOPS.values(), ids=STOPS.keys())
def test_after_a_stop_and_a_resume_each_page_has_one_record_in_out_and_warc(tmp_path: Path, signum: int) -> None:
    db, out, warc = tmp_path / "crawl.sqlite", tmp_path / "pages.jsonl", tmp_path / "crawl.warc.gz"
    files = ("--out", str(out), "--warc", str(warc))
    with TestSite(hosts=1, pages=300, delay=0.02, max_seconds=90) as site:
        child = start_crawl(site.base_urls[0], db, "--progress", "none", *files)
        wait_for_requests(site, 60, child)
        os.killpg(child.pid, signum)  # the parse processes too, as an OOM killer or systemd would
        end_of(child)
        done_at_stop = assert_each_done_url_once(db, out, warc)
        assert done_at_stop and len(done_at_stop) < len(site.page_urls())  # stopped mid-way

        # A second stop in the middle of the resume, then a resume to the end.
        site.reset_counters()
        child = start_crawl(site.base_urls[0], db, "--progress", "none", *files)
        wait_for_requests(site, 60, child)
        os.killpg(child.pid, signum)
        end_of(child)
        assert_each_done_url_once(db, out, warc)

        rerun = crawl(site.base_urls[0], db, *files)
        pages = set(site.page_urls())
    assert rerun.returncode == 0 and "crawl complete" in rerun.stdout, rerun.stdout + rerun.stderr
    assert assert_each_done_url_once(db, out, warc) == pages
    assert jsonl_urls(out) == Counter(pages)
    archived = Counter([*pages, site.base_urls[0] + "robots.txt"])  # robots.txt once: read back by each resume
    assert warc_urls(warc) == (archived, archived)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_resume_with_an_output_file_shorter_than_recorded_is_refused(tmp_path: Path, damage: str) -> None:
    db, out = tmp_path / "crawl.sqlite", tmp_path / "pages.jsonl"
    with TestSite(hosts=1, pages=50, max_seconds=60) as site:
        first = crawl(site.base_urls[0], db, "--max-pages", "20", "--out", str(out))
        assert first.returncode == 0, first.stderr
        if damage == "missing":
            out.unlink()
        else:
            out.write_bytes(out.read_bytes()[:100])
        before = states(db)
        site.reset_counters()
        again = crawl(site.base_urls[0], db, "--out", str(out))
        assert page_requests(site) == Counter()
    assert again.returncode == 2
    assert again.stderr.startswith(f"niofetcher: error: cannot resume: --out {out} ")
    assert len(again.stderr.splitlines()) == 1 and "Traceback" not in again.stderr
    assert states(db) == before


@pytest.mark.timeout(60)
def test_a_new_crawl_appends_to_an_existing_out_file(tmp_path: Path) -> None:
    out = tmp_path / "pages.jsonl"
    out.write_text('{"url": "from before"}\n')
    with TestSite(hosts=1, pages=10, max_seconds=60) as site:
        done = crawl(site.base_urls[0], tmp_path / "crawl.sqlite", "--out", str(out))
        pages = site.page_urls()
    assert done.returncode == 0, done.stderr
    assert jsonl_urls(out) == Counter(["from before", *pages])


# -- full disks and other I/O errors ------------------------------------------------------------


def fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` up, then free ``leave`` bytes of it again."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(b"\0" * 4096)
    os.truncate(filler, max(0, filler.stat().st_size - leave))


@pytest.mark.timeout(60)
def test_out_to_dev_full_is_one_line_and_no_page_is_done_without_its_record(tmp_path: Path) -> None:
    db = tmp_path / "crawl.sqlite"
    with TestSite(hosts=1, pages=50, max_seconds=60) as site:
        done = crawl(site.base_urls[0], db, "--out", "/dev/full")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == "niofetcher: error: No space left on device: /dev/full\n"
    assert urls_in_state(db, "done") == set()  # nothing could be written, so nothing is done
    assert states(db)["processing"] == 0


@pytest.mark.timeout(90)
def test_a_full_disk_under_out_and_warc_ends_the_crawl_with_one_line(tmp_path: Path, small_disk: Path) -> None:
    db, out, warc = tmp_path / "crawl.sqlite", small_disk / "pages.jsonl", small_disk / "crawl.warc.gz"
    with TestSite(hosts=1, pages=1000, page_size=4096, max_seconds=90) as site:
        done = crawl(site.base_urls[0], db, "--out", str(out), "--warc", str(warc), "--progress", "lines")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert non_progress_lines(done.stderr) in (
            [f"niofetcher: error: No space left on device: {out}"],
            [f"niofetcher: error: No space left on device: {warc}"],
        )
        # The files hold whole records only, one per done URL; the rest waits for a resume.
        done_urls = assert_each_done_url_once(db, out, warc)
        assert done_urls and states(db)["processing"] == 0

        # Resumed with the files moved to a disk with room, the crawl completes them.
        out_elsewhere, warc_elsewhere = tmp_path / "pages.jsonl", tmp_path / "crawl.warc.gz"
        out_elsewhere.write_bytes(out.read_bytes())
        warc_elsewhere.write_bytes(warc.read_bytes())
        rerun = crawl(site.base_urls[0], db, "--out", str(out_elsewhere), "--warc", str(warc_elsewhere))
        pages = set(site.page_urls())
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert jsonl_urls(out_elsewhere) == Counter(pages)
    archived = Counter([*pages, site.base_urls[0] + "robots.txt"])
    assert warc_urls(warc_elsewhere) == (archived, archived)


@pytest.mark.timeout(90)
def test_a_full_disk_under_the_db_ends_the_crawl_with_one_line(tmp_path: Path, small_disk: Path) -> None:
    db, out = small_disk / "crawl.sqlite", tmp_path / "pages.jsonl"
    fill(small_disk, leave=160 * 1024)
    with TestSite(hosts=1, pages=3000, max_seconds=90) as site:
        done = crawl(site.base_urls[0], db, "--out", str(out), "--progress", "lines")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    [line] = non_progress_lines(done.stderr)
    assert line.startswith("niofetcher: error: database or disk is full: ") and line.endswith(str(db)), line
    assert_each_done_url_once(db, out)


# Runs the command with a fault injected on the fetcher's loop thread: its 30th dispatch raises.
_LOOP_DIES = """
import itertools, sys
from niofetcher.cli import main
from niofetcher.engine import Engine

real_dispatch = Engine._dispatch
calls = itertools.count()

def dispatch_failing_once(self):
    if next(calls) == 30:
        raise RuntimeError("a bug on the loop thread")
    real_dispatch(self)

Engine._dispatch = dispatch_failing_once
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(60)
def test_a_crawl_whose_fetcher_loop_died_ends_with_one_line(tmp_path: Path) -> None:
    db, out = tmp_path / "crawl.sqlite", tmp_path / "pages.jsonl"
    with TestSite(hosts=1, pages=200, delay=0.002, max_seconds=60) as site:
        done = subprocess.run(
            [sys.executable, "-c", _LOOP_DIES, "crawl", site.base_urls[0], "--db", str(db), "--out", str(out),
             "--progress", "none"],
            capture_output=True, text=True, timeout=50, check=False,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == "niofetcher: error: niofetcher loop failed: RuntimeError: a bug on the loop thread\n"
    assert states(db)["processing"] == 0
    assert_each_done_url_once(db, out)


def test_a_batch_that_fails_in_one_file_is_cut_from_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--out took the batch, --warc did not (a full disk): both go back to before the batch, whose
    outcomes will not be recorded, so that the next batch's checkpoint does not cover its records."""
    import errno

    from niofetcher.cli import output as cli_output
    from niofetcher.crawl import CrawledPage
    from niofetcher.models import FetchResult, URLBean

    def page(url: str) -> CrawledPage:
        result = FetchResult(
            bean=URLBean(url), url=url, final_url=url, status=200, reason="OK",
            headers=[("Content-Type", "text/html")], body=b"<a>", redirects=[], elapsed=0.0, queue_wait=0.0,
            connection_reused=False, session_reused=False, replayed=False, error=None, error_detail="",
        )
        return CrawledPage(result, 1, None, None)

    out, warc = tmp_path / "pages.jsonl", tmp_path / "crawl.warc"
    original = cli_output._OutputFile.append
    failures = [OSError(errno.ENOSPC, "No space left on device")]

    def warc_fails_once(self: cli_output._OutputFile, data: bytes) -> None:
        if self.option == "--warc" and failures:
            raise failures.pop()
        original(self, data)

    monkeypatch.setattr(cli_output._OutputFile, "append", warc_fails_once)
    with cli_output.PageWriter(str(out), str(warc), "ua") as writer:
        writer.restore({})
        writer.prepare(page("http://a.test/A"))
        with pytest.raises(OSError, match="No space left"):
            writer.commit(["http://a.test/A"])
        assert out.read_bytes() == b"" and warc.read_bytes() == b""
        writer.prepare(page("http://a.test/B"))
        offsets = writer.commit(["http://a.test/B"])
    assert list(jsonl_urls(out)) == ["http://a.test/B"]
    # Each file known by its absolute path (a rerun with another --out starts that file).
    assert offsets == {f"out {os.path.realpath(out)}": out.stat().st_size,
                       f"warc {os.path.realpath(warc)}": warc.stat().st_size}

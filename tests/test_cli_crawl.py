"""``niofetcher crawl`` and ``niofetcher demo`` end to end, as a user runs them (docs/cli.md).

- A crawl exits 0 with a summary table, writes one JSONL record per page and
  a WARC file (read back with warcio) holding a request and a response record
  per page with the body exactly as the server sent it.
- Run again with the same ``--db`` it resumes: after a complete crawl nothing
  is fetched again; after ``--max-pages`` (run again without it) or Ctrl-C
  (SIGINT) the rest is fetched and nothing done before is fetched twice.
- Ctrl-C (SIGINT) and SIGTERM stop gracefully, exit status 0: no traceback,
  nothing left 'processing', no page turned into an 'error' by the
  interruption.  A second signal within a moment of the first (one keypress
  forwarded twice) is the same stop; one after that abandons (status 130).
- Bad input (a malformed seed, a corrupt or unopenable ``--db``, an unwritable
  ``--out`` or ``--warc``) gets one line on stderr and exit status 2, never a
  traceback, and nothing is fetched.
- ``demo`` crawls its own test site completely.

Every command runs in a subprocess against a TestSite started by the test;
the site's per-path counters prove what was (not) fetched.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from warcio.archiveiterator import ArchiveIterator

from niofetcher.testing import TestSite

ROBOTS = "/robots.txt"
JSONL_FIELDS = {"url", "final_url", "status", "reason", "content_type", "bytes", "sha256", "elapsed", "fetched_at",
                "redirects", "error", "error_detail", "title", "links", "link_urls", "depth", "parent", "canonical",
                "noindex", "lastmod", "duplicate_of", "changed"}


def niofetcher(*args: str, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "niofetcher", *args], capture_output=True, text=True, timeout=timeout, check=False,
        input=stdin if stdin is not None else "",
    )


def crawl(seed: str, db: Path, *options: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return niofetcher("crawl", seed, "--db", str(db), "--progress", "none", *options, stdin=stdin)


def page_requests(site: TestSite) -> Counter[str]:
    """URL -> requests the site served for it, robots.txt left out."""
    seen: Counter[str] = Counter()
    for base, port in zip(site.base_urls, site.ports, strict=True):
        for path, n in site.counters(port).paths.items():
            if path != ROBOTS:
                seen[base + path[1:]] += n
    return seen


def states(db: Path) -> Counter[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return Counter(dict(conn.execute("SELECT state, COUNT(*) FROM urls GROUP BY state").fetchall()))


def urls_in_state(db: Path, state: str) -> set[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return {url for (url,) in conn.execute("SELECT url FROM urls WHERE state = ?", (state,))}


def summary_rows(stdout: str) -> dict[str, str]:
    """The summary table printed at the end: name -> value."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^  (\S.*?)\s{2,}(\S+)$", stdout, re.MULTILINE)}


def assert_one_clean_line(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def served_body(url: str) -> bytes:
    """The body the site serves for ``url``, asked with the standard library (not the code under test)."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        conn.request("GET", parts.path)
        return conn.getresponse().read()
    finally:
        conn.close()


def warc_records(path: Path) -> list[tuple[str, str, int | None, bytes]]:
    """(type, target URI, HTTP status, payload) of every record, read back with warcio."""
    records = []
    with open(path, "rb") as stream:
        for record in ArchiveIterator(stream):
            status = record.http_headers.get_statuscode() if record.rec_type == "response" else None
            records.append((
                record.rec_type, record.rec_headers.get_header("WARC-Target-URI"),
                int(status) if status else None, record.content_stream().read(),
            ))
    return records


# -- a crawl, its files, and a rerun ---------------------------------------------------------


@pytest.mark.timeout(60)
def test_crawl_writes_jsonl_and_warc_prints_a_summary_and_a_rerun_fetches_nothing(tmp_path: Path) -> None:
    db, out, warc = tmp_path / "crawl.sqlite", tmp_path / "pages.jsonl", tmp_path / "crawl.warc.gz"
    with TestSite(hosts=1, pages=50, max_seconds=60) as site:
        pages = set(site.page_urls())
        started = time.time()
        done = niofetcher("crawl", site.base_urls[0], "--db", str(db), "--out", str(out), "--warc", str(warc),
                          "--progress", "lines")
        ended = time.time()
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        seen = page_requests(site)
        assert set(seen) == pages and set(seen.values()) == {1}
        assert site.counters().paths[ROBOTS] == 1
        bodies = {url: served_body(url) for url in pages}

        site.reset_counters()
        again = niofetcher("crawl", site.base_urls[0], "--db", str(db), "--out", str(out), "--warc", str(warc),
                           "--progress", "none")
        assert page_requests(site) == Counter()
        assert site.counters().paths[ROBOTS] <= 1

    assert "crawl complete" in done.stdout
    table = summary_rows(done.stdout)
    assert (table["done"], table["waiting"], table["processing"], table["error"]) == (str(len(pages)), "0", "0", "0")

    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == len(pages) and {r["url"] for r in records} == pages
    by_url = {r["url"]: r for r in records}
    for r in records:
        assert set(r) == JSONL_FIELDS
        assert (r["final_url"], r["status"], r["error"], r["links"]) == (r["url"], 200, None, 5)
        assert r["content_type"].startswith("text/html")
        assert started - 1 <= r["fetched_at"] <= ended + 1
        if r["url"] == site.base_urls[0]:
            assert (r["depth"], r["parent"]) == (0, None)
        else:
            assert r["depth"] == by_url[r["parent"]]["depth"] + 1

    warc_seen = warc_records(warc)
    robots = site.base_urls[0] + "robots.txt"  # archived too, once: the rerun reads its answer back
    assert Counter(uri for kind, uri, _, _ in warc_seen if kind == "request") == Counter([*pages, robots])
    responses = {uri: (status, body) for kind, uri, status, body in warc_seen if kind == "response" and uri != robots}
    assert len(responses) + 1 == len([kind for kind, *_ in warc_seen if kind == "response"])
    assert responses == {url: (200, body) for url, body in bodies.items()}

    assert again.returncode == 0, again.stderr
    assert "crawl complete" in again.stdout and summary_rows(again.stdout)["done"] == str(len(pages))
    assert len(out.read_text().splitlines()) == len(pages)  # nothing appended


@pytest.mark.timeout(60)
def test_a_crawl_cut_short_by_max_pages_resumes_when_run_again(tmp_path: Path) -> None:
    db = tmp_path / "crawl.sqlite"
    with TestSite(hosts=2, pages=60, max_seconds=60) as site:
        first = crawl(site.base_urls[0], db, "--max-pages", "50", "--parse-mode", "thread")
        first_run = page_requests(site)
        site.reset_counters()
        second = crawl(site.base_urls[0], db, "--parse-mode", "thread")
        second_run = page_requests(site)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert sum(first_run.values()) == 50
    assert "page budget of 50 reached" in first.stdout
    assert "crawl complete" in second.stdout
    both = first_run + second_run
    assert set(both) == set(site.page_urls()) and set(both.values()) == {1}
    assert states(db) == {"done": len(site.page_urls())}


# -- Ctrl-C and SIGTERM ---------------------------------------------------------------------------


def start_crawl(seed: str, db: Path, *options: str) -> subprocess.Popen[str]:
    """A crawl in a process group of its own, as a terminal or a service manager starts one."""
    return subprocess.Popen(
        [sys.executable, "-m", "niofetcher", "crawl", seed, "--db", str(db), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def wait_for_requests(site: TestSite, n: int, child: subprocess.Popen[str]) -> None:
    """Until the site has read ``n`` requests (so that fetches are in flight), or the crawl ended."""
    deadline = time.monotonic() + 30
    while site.counters().requests < n and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def end_of(child: subprocess.Popen[str], timeout: float = 20) -> tuple[str, str]:
    """The crawl's stdout and stderr once it has exited; killed (with its parse processes) if it does not."""
    try:
        return child.communicate(timeout=timeout)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()


def two_signals(child: subprocess.Popen[str], first: int, second: int) -> None:
    """Two signals 50 ms apart: one keypress forwarded twice (by the terminal to the group, and by a wrapper to
    its child), or a Ctrl-C followed by a SIGTERM."""
    child.send_signal(first)
    time.sleep(0.05)
    child.send_signal(second)


STOPS: dict[str, Callable[[subprocess.Popen[str]], None]] = {
    "sigint-to-the-process": lambda child: child.send_signal(signal.SIGINT),
    "ctrl-c-to-the-process-group": lambda child: os.killpg(child.pid, signal.SIGINT),
    "sigterm-to-the-process": lambda child: child.send_signal(signal.SIGTERM),  # docker stop, kubectl delete
    "sigterm-to-the-process-group": lambda child: os.killpg(child.pid, signal.SIGTERM),  # systemctl stop
    "two-sigints-50ms-apart": lambda child: two_signals(child, signal.SIGINT, signal.SIGINT),
    "sigint-then-sigterm-50ms-apart": lambda child: two_signals(child, signal.SIGINT, signal.SIGTERM),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stop", STOPS.values(), ids=STOPS.keys())
def test_a_signal_stops_the_crawl_gracefully_and_a_rerun_completes_it(
    tmp_path: Path, stop: Callable[[subprocess.Popen[str]], None]
) -> None:
    """SIGINT or SIGTERM, to the crawl process or to its whole process group (the parse processes get
    it too), once or twice within a moment: one graceful stop, exit status 0, nothing 'processing'."""
    db = tmp_path / "crawl.sqlite"
    with TestSite(hosts=1, pages=300, delay=0.02, max_seconds=60) as site:
        child = start_crawl(site.base_urls[0], db, "--progress", "lines")
        wait_for_requests(site, 30, child)
        stop(child)
        stdout, stderr = end_of(child)
        interrupted_run = page_requests(site)
        after_interrupt = states(db)
        done_before = urls_in_state(db, "done")

        site.reset_counters()
        rerun = crawl(site.base_urls[0], db, "--per-host", "8", "--parse-mode", "thread")
        rerun_seen = page_requests(site)

    assert "Traceback" not in stderr, stderr[:3000]
    assert "abandoned" not in stderr, stderr[:3000]
    assert child.returncode == 0, stderr[:3000]
    assert "crawl stopped" in stdout
    assert after_interrupt["processing"] == 0 and after_interrupt["waiting"] > 0
    assert after_interrupt["error"] == 0  # an interruption is no page's fault
    assert done_before and not done_before & set(rerun_seen)
    assert rerun.returncode == 0 and "crawl complete" in rerun.stdout, rerun.stdout + rerun.stderr
    assert set(interrupted_run + rerun_seen) == set(site.page_urls())
    assert states(db) == {"done": len(site.page_urls())}


@pytest.mark.timeout(60)
def test_a_second_signal_well_after_the_first_abandons_the_fetches_in_flight(tmp_path: Path) -> None:
    """Past the moment in which a repeat counts as the same keypress, a second signal leaves at once."""
    db = tmp_path / "crawl.sqlite"
    with TestSite(hosts=1, pages=5, delay=10.0, max_seconds=60) as site:  # robots.txt alone takes 10 s
        child = start_crawl(site.base_urls[0], db, "--progress", "none")
        wait_for_requests(site, 1, child)
        child.send_signal(signal.SIGTERM)
        time.sleep(1.5)
        child.send_signal(signal.SIGINT)
        stdout, stderr = end_of(child, timeout=8)  # well before robots.txt could have come
    assert child.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr, stderr
    # (After it, multiprocessing's resource tracker may warn of the semaphores of a pool never shut down.)
    assert "niofetcher: abandoned; rerun with the same --db to resume" in stderr.splitlines()


# -- bad input ---------------------------------------------------------------------------------

BadInput = Callable[[Path, str], list[str]]  # (tmp_path, a good seed) -> crawl arguments


def _corrupt_db(tmp_path: Path, seed: str) -> list[str]:
    db = tmp_path / "corrupt.sqlite"
    db.write_bytes(os.urandom(8192))
    return [seed, "--db", str(db)]


def _directory_as_warc(tmp_path: Path, seed: str) -> list[str]:
    (tmp_path / "a-directory.warc.gz").mkdir()
    return [seed, "--db", str(tmp_path / "db"), "--warc", str(tmp_path / "a-directory.warc.gz")]


BAD_INPUTS: dict[str, BadInput] = {
    "malformed-seed": lambda tmp, seed: ["http://exa mple.test/", "--db", str(tmp / "db")],
    "not-http": lambda tmp, seed: ["ftp://127.0.0.1/", "--db", str(tmp / "db")],
    "bad-port": lambda tmp, seed: ["http://127.0.0.1:99999/", "--db", str(tmp / "db")],
    "corrupt-db": _corrupt_db,
    "db-is-a-directory": lambda tmp, seed: [seed, "--db", str(tmp)],
    "db-in-missing-directory": lambda tmp, seed: [seed, "--db", str(tmp / "missing" / "db")],
    "out-in-missing-directory": lambda tmp, seed: [seed, "--db", str(tmp / "db"), "--out", str(tmp / "no" / "x")],
    "warc-is-a-directory": _directory_as_warc,
    "warc-in-missing-directory": lambda tmp, seed: [seed, "--db", str(tmp / "db"), "--warc", str(tmp / "no" / "w")],
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("make_args", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_one_line_on_stderr_exit_2_and_nothing_fetched(tmp_path: Path, make_args: BadInput) -> None:
    with TestSite(hosts=1, pages=5, max_seconds=30) as site:
        args = make_args(tmp_path, site.base_urls[0])
        files_before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        done = niofetcher("crawl", *args, "--progress", "none")
        assert site.counters().requests == 0
    assert done.returncode == 2, done.stdout + done.stderr
    assert_one_clean_line(done.stderr)
    assert done.stderr.startswith("niofetcher: error: ")
    assert all(p.read_bytes() == data for p, data in files_before.items())  # a corrupt --db is left as it was


# -- demo ----------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_demo_crawls_every_page_of_its_site_once() -> None:
    done = niofetcher("demo", "--hosts", "2", "--pages", "50", "--progress", "none")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "crawl complete" in done.stdout
    table = summary_rows(done.stdout)
    assert (table["done"], table["error"], table["waiting"]) == ("102", "0", "0")
    served = re.search(r"the site served (\d+) requests \((\d+) pages \+ (\d+) robots\.txt\)", done.stdout)
    assert served is not None and served.groups() == ("104", "102", "2")

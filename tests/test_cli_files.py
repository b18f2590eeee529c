"""What ``crawl`` and ``fetch`` do with the files and pipes a user names, and the status they exit with
(issue 24; docs/cli.md).

- A SQLite crawl knows its output files by their absolute path: a rerun with
  another ``--out`` appends the rest there, and a file the crawl never wrote
  is never cut back -- not even by an offset an older version kept under the
  name "out".
- ``--out``, ``--warc`` and ``--db`` (with SQLite's -wal, -shm and -journal
  files) naming one file, by any name of it, is one line, exit 2, and nothing
  touched.
- ``--out -`` (or ``/dev/stdout``) sends the records through a pipe, the
  summary and fetch's lines going to stderr; a stream is never fsynced, cut
  back or checkpointed; a reader that goes away ends the command with one
  line, exit 1.
- ``fetch --warc`` archives what fetch got, as ``crawl --warc`` does.
- A crawl that could not fetch one page exits 1, naming why; a 404, a
  robots.txt Disallow, a rerun with nothing to do exit 0.
- ``user:pass@`` in a fetch URL is sent as Basic auth, and printed, recorded
  and archived nowhere.

Every command runs in a subprocess against servers the test starts on 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rawserver import ConnInfo, RawServer, get_unused_port, hang, http_response, read_request, routes
from test_cli_crawl import (
    assert_one_clean_line,
    crawl,
    end_of,
    niofetcher,
    served_body,
    start_crawl,
    states,
    summary_rows,
    urls_in_state,
    warc_records,
)

from niofetcher.crawl.frontier import Frontier
from niofetcher.testing import TestSite

HTML = b"<html><body><a href='/a'>a</a></body></html>"
BROKEN_PIPE = "niofetcher: error: standard output was closed by its reader (broken pipe)"


def jsonl_urls(data: bytes) -> list[str]:
    return [json.loads(line)["url"] for line in data.splitlines()]


def checkpoint_names(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [name for (name,) in conn.execute("SELECT name FROM checkpoints")]


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    """A site of 31 URLs for the tests that only need something to crawl."""
    with TestSite(hosts=1, pages=30, max_seconds=300) as running:
        yield running


# -- output files known by their path ---------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("second_file", ["new", "unrelated"])
def test_a_rerun_with_another_out_writes_the_rest_there_and_cuts_nothing_it_never_wrote(
    site: TestSite, tmp_path: Path, second_file: str
) -> None:
    """Before: a new b.jsonl was refused as "missing"; an unrelated one was cut to a.jsonl's length."""
    db, first, second = tmp_path / "c.sqlite", tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    # Longer than a.jsonl will be: the length recorded for a.jsonl must not cut it.
    unrelated = b"".join(b'{"line": %d}\n' % i for i in range(2000)) if second_file == "unrelated" else b""
    if unrelated:
        second.write_bytes(unrelated)
    budget = crawl(site.base_urls[0], db, "--out", str(first), "--max-pages", "10", "--parse-mode", "thread")
    rest = crawl(site.base_urls[0], db, "--out", str(second), "--parse-mode", "thread")
    assert budget.returncode == 0, budget.stderr
    assert rest.returncode == 0, rest.stderr
    data = second.read_bytes()
    assert data.startswith(unrelated)
    first_urls = jsonl_urls(first.read_bytes())
    assert len(first_urls) == 10
    assert Counter(first_urls + jsonl_urls(data[len(unrelated):])) == Counter(urls_in_state(db, "done"))
    assert states(db)["done"] == 31


@pytest.mark.timeout(60)
def test_an_offset_an_older_version_kept_under_the_name_out_is_never_applied(site: TestSite, tmp_path: Path) -> None:
    db, out = tmp_path / "c.sqlite", tmp_path / "pages.jsonl"
    assert crawl(site.base_urls[0], db, "--out", str(out), "--parse-mode", "thread").returncode == 0
    with Frontier(str(db)) as frontier:  # what a version that keyed files by option left in the frontier
        frontier.complete_many([], {"out": 10})
    before = out.read_bytes()
    again = crawl(site.base_urls[0], db, "--out", str(out), "--parse-mode", "thread")
    assert again.returncode == 0, again.stderr
    assert out.read_bytes() == before


# -- one file named twice ------------------------------------------------------------------------

KEPT = b'{"kept": true}\n'
SameFile = Callable[[Path], list[str]]  # the test's directory -> the options that name one file twice


def _symlink(tmp: Path) -> list[str]:
    (tmp / "link.warc").symlink_to(tmp / "kept.jsonl")
    return ["--db", str(tmp / "c.sqlite"), "--out", str(tmp / "kept.jsonl"), "--warc", str(tmp / "link.warc")]


def _hard_link(tmp: Path) -> list[str]:
    os.link(tmp / "kept.jsonl", tmp / "hard.warc")
    return ["--db", str(tmp / "c.sqlite"), "--out", str(tmp / "kept.jsonl"), "--warc", str(tmp / "hard.warc")]


CRAWL_SAME_FILE: dict[str, SameFile] = {
    "out-and-warc": lambda t: ["--db", f"{t}/c.sqlite", "--out", f"{t}/kept.jsonl", "--warc", f"{t}/kept.jsonl"],
    "through-dot": lambda t: ["--db", f"{t}/c.sqlite", "--out", f"{t}/./kept.jsonl", "--warc", f"{t}/kept.jsonl"],
    "through-dotdot": lambda t: ["--db", f"{t}/c.sqlite", "--out", f"{t}/sub/../kept.jsonl",
                                 "--warc", f"{t}/kept.jsonl"],
    "symlink": _symlink,
    "hard-link": _hard_link,
    "a-new-file-twice": lambda t: ["--db", f"{t}/c.sqlite", "--out", f"{t}/new.jsonl", "--warc", f"{t}/sub/../new.jsonl"],
    "out-is-db": lambda t: ["--db", f"{t}/c.sqlite", "--out", f"{t}/./c.sqlite"],
    "warc-is-db-wal": lambda t: ["--db", f"{t}/c.sqlite", "--warc", f"{t}/c.sqlite-wal"],
    "out-is-db-shm": lambda t: ["--db", f"{t}/c.sqlite", "--out", f"{t}/c.sqlite-shm"],
    "out-is-db-journal": lambda t: ["--db", f"{t}/c.sqlite", "--out", f"{t}/c.sqlite-journal"],
    "stdout-twice": lambda t: ["--db", f"{t}/c.sqlite", "--out", "-", "--warc", "-"],
    "stdout-and-dev-stdout": lambda t: ["--db", f"{t}/c.sqlite", "--out", "-", "--warc", "/dev/stdout"],
}
FETCH_SAME_FILE: dict[str, SameFile] = {
    "out-and-warc": lambda t: ["--out", f"{t}/kept.jsonl", "--warc", f"{t}/sub/../kept.jsonl"],
    "stdout-twice": lambda t: ["--out", "-", "--warc", "-"],
}
SAME_FILE = [("crawl", name, options) for name, options in CRAWL_SAME_FILE.items()] + [
    ("fetch", name, options) for name, options in FETCH_SAME_FILE.items()]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("command, options", [(c, o) for c, _, o in SAME_FILE], ids=[f"{c}-{n}" for c, n, _ in SAME_FILE])
def test_one_file_named_twice_is_one_line_exit_2_and_nothing_touched(
    site: TestSite, tmp_path: Path, command: str, options: SameFile
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "kept.jsonl").write_bytes(KEPT)
    args = options(tmp_path)
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    requests = site.counters().requests
    extra = ["--progress", "none"] if command == "crawl" else []
    done = niofetcher(command, site.base_urls[0], *args, *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert_one_clean_line(done.stderr)
    assert done.stderr.startswith("niofetcher: error: ") and "are the same file" in done.stderr
    assert done.stdout == ""
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before
    assert site.counters().requests == requests


# -- standard output and other streams ------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("out", ["-", "/dev/stdout"])
def test_crawl_out_to_standard_output_goes_through_a_pipe_and_the_summary_to_stderr(
    site: TestSite, tmp_path: Path, out: str
) -> None:
    db = tmp_path / "c.sqlite"
    # Standard output is a pipe; in tmp_path, where a file named "-" would show.
    done = subprocess.run([sys.executable, "-m", "niofetcher", "crawl", site.base_urls[0], "--db", str(db), "--out", out,
                           "--progress", "none", "--parse-mode", "thread"],
                          capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert Counter(jsonl_urls(done.stdout.encode())) == Counter(urls_in_state(db, "done"))
    assert done.stderr.startswith("crawl complete\n") and summary_rows(done.stderr)["done"] == "31"
    assert checkpoint_names(db) == []  # a stream cannot be cut back: no length of it is kept
    assert not (tmp_path / "-").exists()


@pytest.mark.timeout(60)
def test_a_resumed_crawl_writes_to_a_character_device_again(site: TestSite, tmp_path: Path) -> None:
    """/dev/null is a stream: not fsynced (which it refuses), nor cut back on the resume."""
    db = tmp_path / "c.sqlite"
    budget = crawl(site.base_urls[0], db, "--out", os.devnull, "--max-pages", "5", "--parse-mode", "thread")
    rest = crawl(site.base_urls[0], db, "--out", os.devnull, "--parse-mode", "thread")
    assert (budget.returncode, rest.returncode) == (0, 0), budget.stderr + rest.stderr
    assert states(db)["done"] == 31


@pytest.mark.timeout(60)
def test_fetch_out_to_standard_output_puts_the_result_lines_on_stderr(site: TestSite) -> None:
    urls = [f"{site.base_urls[0]}page/{i}" for i in range(3)]
    done = niofetcher("fetch", *urls, "--out", "-")
    assert done.returncode == 0, done.stderr
    assert sorted(jsonl_urls(done.stdout.encode())) == sorted(urls)
    assert len(done.stderr.splitlines()) == 3 and all(" 200 " in line for line in done.stderr.splitlines())


def read_and_go_away(argv: list[str], lines: int = 1) -> tuple[bytes, int, str]:
    """Run ``niofetcher argv`` with standard output a pipe; read ``lines`` lines of it and close the
    pipe, as ``| head -1`` does.  What was read, the exit status and stderr."""
    # Standard output block-buffered, as a user's is: PYTHONUNBUFFERED (set by some CI) would hide what
    # the interpreter does with a buffer it cannot flush at exit.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    child = subprocess.Popen([sys.executable, "-m", "niofetcher", *argv], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert child.stdout is not None and child.stderr is not None
    read = b"".join(child.stdout.readline() for _ in range(lines))
    child.stdout.close()
    try:
        stderr = child.stderr.read().decode()
        child.wait(timeout=30)
    finally:
        child.kill()
        child.stderr.close()
    return read, child.returncode, stderr


@pytest.mark.timeout(90)
def test_a_reader_that_goes_away_ends_the_crawl_with_one_line_and_the_frontier_consistent(tmp_path: Path) -> None:
    db, out = tmp_path / "c.sqlite", tmp_path / "rest.jsonl"
    # More records than a pipe's buffer holds: the crawl is still writing when the reader leaves.
    with TestSite(hosts=1, pages=400) as site:
        line, status, stderr = read_and_go_away(
            ["crawl", site.base_urls[0], "--db", str(db), "--out", "-", "--progress", "none", "--parse-mode", "thread"])
        done_before = urls_in_state(db, "done")
        rerun = crawl(site.base_urls[0], db, "--out", str(out), "--parse-mode", "thread")
    assert json.loads(line)["url"] == site.base_urls[0]
    assert status == 1
    assert stderr == BROKEN_PIPE + "\n"  # no "Exception ignored ... BrokenPipeError" at exit
    assert 0 < len(done_before) < 401
    assert rerun.returncode == 0, rerun.stderr
    assert Counter(jsonl_urls(out.read_bytes())) == Counter(urls_in_state(db, "done") - done_before)
    assert states(db) == Counter(done=401)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("options", [["--out", "-"], []], ids=["records", "lines"])
def test_a_reader_that_goes_away_ends_fetch_with_one_line(options: list[str]) -> None:
    with TestSite(hosts=1, pages=300) as site:
        urls = [f"{site.base_urls[0]}page/{i}" for i in range(300)]
        line, status, stderr = read_and_go_away(["fetch", *urls, *options])
    assert line.strip()
    assert status == 1
    assert stderr.splitlines()[-1] == BROKEN_PIPE
    assert "Traceback" not in stderr and "Exception ignored" not in stderr


@pytest.mark.timeout(60)
def test_a_reader_gone_before_the_summary_is_one_line_not_an_exception_at_exit(site: TestSite, tmp_path: Path) -> None:
    """The summary is still buffered when the crawl ends: flushed at exit, into the closed pipe, it
    would be "Exception ignored ... BrokenPipeError" and exit status 120."""
    _, status, stderr = read_and_go_away(
        ["crawl", site.base_urls[0], "--db", str(tmp_path / "c.sqlite"), "--progress", "none"], lines=0)
    assert (status, stderr) == (1, BROKEN_PIPE + "\n")
    assert states(tmp_path / "c.sqlite")["done"] == 31


# -- fetch --warc ---------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["fetched.warc", "fetched.warc.gz"])
def test_fetch_warc_archives_each_result_as_crawl_does(site: TestSite, tmp_path: Path, name: str) -> None:
    warc = tmp_path / name
    urls = [f"{site.base_urls[0]}page/{i}" for i in range(3)]
    first = niofetcher("fetch", *urls[:2], "--warc", str(warc))
    again = niofetcher("fetch", urls[2], "--warc", str(warc))  # appended to, after a warcinfo of its own
    assert (first.returncode, again.returncode) == (0, 0), first.stderr + again.stderr
    records = warc_records(warc)
    assert [kind for kind, *_ in records] == [
        "warcinfo", *["response", "request"] * 2, "warcinfo", "response", "request"]
    responses = {uri: (status, payload) for kind, uri, status, payload in records if kind == "response"}
    assert responses == {url: (200, served_body(url)) for url in urls}
    assert {uri for kind, uri, _, _ in records if kind == "request"} == set(urls)
    assert warc.read_bytes().startswith(b"\x1f\x8b") == name.endswith(".gz")


# -- exit status: not one page fetched -------------------------------------------------------------


def robots_unavailable() -> RawServer:
    return RawServer(routes({
        b"/robots.txt": http_response(503, b"down", [("Content-Type", "text/plain")]),
        b"/": http_response(200, HTML, [("Content-Type", "text/html")]),
    }))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("options, kind", [([], "robots_unavailable"), (["--no-robots"], "connect_error")],
                         ids=["its-robots-txt", "no-robots"])
def test_a_crawl_whose_every_seed_is_unreachable_exits_1_naming_why(
    tmp_path: Path, options: list[str], kind: str
) -> None:
    db = tmp_path / "c.sqlite"
    seed = f"http://127.0.0.1:{get_unused_port()}/"
    done = crawl(seed, db, "--max-attempts", "1", *options)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("crawl complete\n") and summary_rows(done.stdout)[f"error: {kind}"] == "1"
    assert_one_clean_line(done.stderr)
    assert done.stderr.startswith(f"niofetcher: error: not one page could be fetched: 1 {kind}; first: {seed} (")
    assert "Connection refused" in done.stderr
    rerun = crawl(seed, db, "--max-attempts", "1", *options)  # nothing left to do: not a failure to fetch
    assert rerun.returncode == 0, rerun.stderr


@pytest.mark.timeout(60)
def test_a_crawl_refused_by_an_unavailable_robots_txt_exits_1(tmp_path: Path) -> None:
    with robots_unavailable() as server:
        done = crawl(server.url("/"), tmp_path / "c.sqlite", "--max-attempts", "1")
        asked = [head.split(b" ")[1] for head in server.requests]
    assert asked == [b"/robots.txt"]
    assert done.returncode == 1, done.stderr
    assert_one_clean_line(done.stderr)
    assert done.stderr.startswith(
        f"niofetcher: error: not one page could be fetched: 1 robots_unavailable; first: {server.url('/')} (")


@pytest.mark.timeout(60)
def test_a_404_and_a_robots_disallow_are_results_exit_0(tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=1) as missing_site, TestSite(hosts=1, pages=1, robots_disallow=["/"]) as closed:
        missing = crawl(missing_site.base_urls[0] + "missing", tmp_path / "a.sqlite", "--no-robots")
        disallowed = crawl(closed.base_urls[0], tmp_path / "b.sqlite")
    assert (missing.returncode, missing.stderr) == (0, "")
    assert summary_rows(missing.stdout)["HTTP 404"] == "1"
    assert (disallowed.returncode, disallowed.stderr) == (0, "")
    assert summary_rows(disallowed.stdout)["error: robots_disallowed"] == "1"


@pytest.mark.timeout(60)
def test_a_crawl_a_signal_stopped_is_not_one_that_fetched_nothing(tmp_path: Path) -> None:
    """The one URL it finished failed, the other was in flight when SIGTERM came: the user stopped a
    crawl that had not failed, and it says so, exit status 0, as any stopped crawl."""
    db, dead = tmp_path / "c.sqlite", f"http://127.0.0.1:{get_unused_port()}/"
    with RawServer(hang()) as server:
        (tmp_path / "seeds.txt").write_text(server.url("/slow") + "\n")
        child = start_crawl(dead, db, "--seeds-file", str(tmp_path / "seeds.txt"), "--no-robots", "--max-attempts", "1",
                            "--stop-grace", "0", "--progress", "lines")
        try:
            assert child.stderr is not None
            # The progress line that says so, every two seconds: "0 done, 1 failed | 1 fetching, ..."
            progress = iter(child.stderr.readline, "")
            assert any(line.startswith("0 done, 1 failed | 1 fetching") for line in progress)
            child.send_signal(signal.SIGTERM)
        finally:
            stdout, stderr = end_of(child)
    assert child.returncode == 0, stderr
    assert stdout.startswith("crawl stopped; rerun with the same --db to resume\n")
    assert summary_rows(stdout)["error: connect_error"] == "1"
    assert "not one page" not in stderr


# -- credentials in a URL ----------------------------------------------------------------------

USER, PASSWORD = "user", "s3cret"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def needs_basic_auth(sock: socket.socket, info: ConnInfo) -> None:
    """200 to a request with USER:PASSWORD as Basic auth, 401 to any other."""
    head = read_request(sock, info)
    if head is None:
        return
    authorized = f"\r\nauthorization: {BASIC}\r\n".lower().encode() in head.lower()
    sock.sendall(http_response(200 if authorized else 401, b"private", [("Content-Type", "text/plain")], close=True))


@pytest.mark.timeout(60)
def test_fetch_sends_user_and_password_as_basic_auth_and_keeps_them_out_of_lines_records_and_warc(
    tmp_path: Path,
) -> None:
    out, warc = tmp_path / "out.jsonl", tmp_path / "out.warc"
    with RawServer(needs_basic_auth) as server:
        bare = server.url("/private")
        done = niofetcher("fetch", bare.replace("://", f"://{USER}:{PASSWORD}@"), "--out", str(out),
                          "--warc", str(warc))
    assert done.returncode == 0, done.stderr
    assert " 200 " in done.stdout and done.stdout.rstrip().endswith(bare)
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (record["url"], record["status"]) == (bare, 200)
    assert [(kind, uri) for kind, uri, _, _ in warc_records(warc)] == [
        ("warcinfo", None), ("response", bare), ("request", bare)]
    for text in (done.stdout + done.stderr, out.read_text(), warc.read_bytes().decode("latin-1")):
        assert PASSWORD not in text and BASIC.split()[1] not in text

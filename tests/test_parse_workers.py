"""ParseProcessPool: parse processes on niofetcher's own entry point, never the user's ``__main__``.

Real processes throughout. Proven here:

- jobs run in other processes and come back in order, on both workers; ``Future``
  callbacks run on the pool's reader thread;
- an argument wrapped in ``PickleBuffer`` arrives as a read-only memoryview (plain bytes as
  bytes), whatever the number and sizes of the buffers (empty, more than one writev takes,
  larger than a reader's buffer), and a job that keeps its view keeps its bytes: later jobs
  do not write over them; ``parsing.jobs`` cuts pages by their bytes and by their count;
- a job's exception comes back (with the worker's traceback as ``__cause__``), and one that
  cannot travel comes back as a RuntimeError with its text; nothing a job does to its
  stdout or to pickling spoils the stream for the next job;
- a worker that dies fails the jobs it held with BrokenProcessPool, and every later
  ``submit()``; the other worker's job still finishes; nothing is left behind;
- workers ignore SIGINT and SIGTERM and exit when their parent is SIGKILLed, even mid-job;
- ``shutdown()`` finishes (or cancels) the queued jobs and leaves no process, thread or fd;
- a script without ``if __name__ == "__main__":`` runs once, however many workers it
  starts, and its workers import the parent's niofetcher, not one in their working
  directory; a crawl from such a script (issue 9, case 4) runs once and hands every page
  over once.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from pickle import PickleBuffer

import psutil
import pytest
from conftest import LeakBaseline, wait_until
from test_parse import installed

import niofetcher
from niofetcher.crawl.workers import ParseProcessPool, RemoteTraceback
from niofetcher.testing import TestSite

pytestmark = pytest.mark.timeout(60)

REPO = str(Path(niofetcher.__file__).resolve().parents[1])


# -- jobs: module-level functions, which the workers import from this module -----------------


def wait_for(path: str) -> str:
    """Block until ``path`` exists: a job the test ends when it chooses."""
    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)
    return f"released by {path}"


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def echo(*args: object, **kwargs: object) -> tuple[tuple[object, ...], dict[str, object]]:
    return args, kwargs


def imported(module: str) -> bool:
    """Whether the process running this has imported ``module``."""
    return module in sys.modules


def fail(message: str) -> None:
    raise ValueError(message)


class NeedsKeyword(Exception):
    """Pickles, but cannot be rebuilt from its args: unpickling calls NeedsKeyword("code 7")."""

    def __init__(self, *, code: int) -> None:
        super().__init__(f"code {code}")


def fail_with_keyword_exception() -> None:
    raise NeedsKeyword(code=7)


def fail_with_unpicklable_exception() -> None:
    raise ValueError("holding a lock", threading.Lock())


def unpicklable_result() -> object:
    return threading.Lock()


def noisy() -> int:
    print("a job that prints")  # the worker's stdout is stderr: the reply stream stays clean
    sys.stdout.flush()
    return 42


def exits() -> None:
    sys.exit(3)


def package_file() -> str:
    return str(niofetcher.__file__)


def describe(*args: object) -> list[tuple[str, bool, bytes]]:
    """Each argument's type, whether it is read-only, and its bytes."""
    return [(type(a).__name__, isinstance(a, memoryview) and a.readonly, bytes(a)) for a in args]  # type: ignore[call-overload]


def sizes(buffers: list[memoryview]) -> list[int]:
    return [len(buffer) for buffer in buffers]


KEPT: list[memoryview] = []


def keep(view: memoryview) -> int:
    """A job that keeps its argument's view past its end."""
    KEPT.append(view)
    return len(view)


def kept() -> list[bytes]:
    return [bytes(view) for view in KEPT]


# -- helpers ---------------------------------------------------------------------------------


def worker_processes() -> list[psutil.Process]:
    """This process's parse workers (alive or not yet reaped)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "niofetcher.crawl.workers" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaps counts: an orphan's reaper may be lazy)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def worker_pids(pool: ParseProcessPool, workers: int, tmp_path: Path) -> list[int]:
    """The pid of each worker: one blocking job per worker, so each answers one."""
    release = tmp_path / "release-pids"
    held = [pool.submit(wait_for, str(release)) for _ in range(workers)]
    pids = [pool.submit(os.getpid) for _ in range(workers)]
    release.touch()
    for future in held:
        future.result()
    found = [future.result() for future in pids]
    release.unlink()
    return found


# -- jobs and results --------------------------------------------------------------------------


def test_jobs_run_in_both_workers_and_come_back_in_order(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    with ParseProcessPool(2) as pool:
        pids = worker_pids(pool, 2, tmp_path)
        futures = [pool.submit(echo, i, "x" * i, key=i) for i in range(200)]
        results = [future.result() for future in futures]
        big = pool.submit(echo, b"\xff" * 5_000_000).result()  # several pipe-fulls each way
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert results == [((i, "x" * i), {"key": i}) for i in range(200)]
    assert big == ((b"\xff" * 5_000_000,), {})
    assert not worker_processes()


def test_pickle_buffers_travel_out_of_band_and_arrive_as_read_only_views(no_leaks: LeakBaseline) -> None:
    large = os.urandom(5_000_000)  # larger than the reader's buffer, and than the pipe
    many = [PickleBuffer(bytes([i % 256]) * (i % 7)) for i in range(2500)]  # empty ones, and more than IOV_MAX
    with ParseProcessPool(1) as pool:
        described = pool.submit(describe, PickleBuffer(b"body"), b"plain", PickleBuffer(bytearray(b"mutable"))).result()
        assert pool.submit(describe, PickleBuffer(large)).result() == [("memoryview", True, large)]
        assert pool.submit(sizes, many).result() == [i % 7 for i in range(2500)]
        assert pool.submit(echo, large).result() == ((large,), {})  # in band, both ways
    assert described == [("memoryview", True, b"body"), ("bytes", False, b"plain"), ("memoryview", False, b"mutable")]


def test_a_job_that_keeps_its_view_keeps_its_bytes(no_leaks: LeakBaseline) -> None:
    bodies = [bytes([i]) * 300_000 for i in range(12)]  # several buffers-full: the reader must reuse its buffer
    with ParseProcessPool(1) as pool:
        assert [f.result() for f in [pool.submit(keep, PickleBuffer(body)) for body in bodies]] == [300_000] * 12
        assert pool.submit(kept).result() == bodies


def test_parse_jobs_are_cut_by_bytes_and_by_pages() -> None:
    from niofetcher.crawl import parsing

    def cut(page_sizes: list[int], workers: int) -> list[list[int]]:
        return parsing.jobs(page_sizes, workers, lambda size: size)

    kib = 1024
    assert cut([], 2) == []
    assert cut([100 * kib] * 12, 1) == [[100 * kib] * 9, [100 * kib] * 3]  # 960 KiB at most
    assert cut([2000 * kib, 10, 10], 2) == [[2000 * kib], [10, 10]]  # a large page is a job of its own
    assert cut([kib] * 100, 1) == [[kib] * 32] * 3 + [[kib] * 4]  # 32 pages at most
    assert cut([kib] * 4, 2) == [[kib] * 2] * 2  # few pages: one job per worker ...
    assert cut([300 * kib, 100, 100], 2) == [[300 * kib], [100, 100]]  # ... by bytes too


def test_done_callbacks_run_on_the_reader_thread(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    release = tmp_path / "release"
    threads: list[str] = []
    with ParseProcessPool(1) as pool:
        futures = [pool.submit(wait_for, str(release)) for _ in range(5)]
        for future in futures:
            future.add_done_callback(lambda _: threads.append(threading.current_thread().name))
        release.touch()
        concurrent.futures.wait(futures)
    assert threads == ["niofetcher-parse-reader"] * 5


def test_a_job_exception_comes_back_with_the_worker_traceback(no_leaks: LeakBaseline) -> None:
    with ParseProcessPool(1) as pool:
        future = pool.submit(fail, "bad page")
        with pytest.raises(ValueError, match="bad page") as raised:
            future.result()
        assert isinstance(raised.value.__cause__, RemoteTraceback)
        assert "in fail" in str(raised.value.__cause__)
        assert pool.submit(echo, 1).result() == ((1,), {})  # the worker goes on


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (fail_with_keyword_exception, "NeedsKeyword: code 7"),
        (fail_with_unpicklable_exception, "ValueError: ('holding a lock', <unlocked _thread.lock"),
        (unpicklable_result, "cannot pickle '_thread.lock' object"),
    ],
    ids=["exception-not-rebuilt", "exception-not-pickled", "result-not-pickled"],
)
def test_what_cannot_travel_comes_back_as_an_error_with_its_text(
    no_leaks: LeakBaseline, job: object, expected: str
) -> None:
    with ParseProcessPool(1) as pool:
        future = pool.submit(job)  # type: ignore[arg-type,var-annotated]
        assert expected in str(future.exception()), repr(future.exception())
        assert pool.submit(echo, 2).result() == ((2,), {})


def test_an_unpicklable_job_fails_its_future_and_the_pool_goes_on(no_leaks: LeakBaseline) -> None:
    with ParseProcessPool(1) as pool:
        future = pool.submit(lambda: 1)
        assert future.exception() is not None and "lambda" in str(future.exception())
        assert pool.submit(echo, 3).result() == ((3,), {})


def test_printing_and_exiting_are_a_job_outcome(no_leaks: LeakBaseline) -> None:
    with ParseProcessPool(1) as pool:
        assert pool.submit(noisy).result() == 42
        with pytest.raises(SystemExit):
            pool.submit(exits).result()
        assert pool.submit(echo, 4).result() == ((4,), {})


def test_bad_worker_counts() -> None:
    for workers in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="positive int"):
            ParseProcessPool(workers)  # type: ignore[arg-type]


# -- a worker that dies ------------------------------------------------------------------------


def test_a_worker_that_dies_breaks_the_pool_once_and_leaves_nothing(
    tmp_path: Path, no_leaks: LeakBaseline, caplog: pytest.LogCaptureFixture
) -> None:
    release = tmp_path / "release"
    pool = ParseProcessPool(2)
    try:
        survivor = pool.submit(wait_for, str(release))  # worker 0
        dying = pool.submit(die)  # worker 1
        with pytest.raises(BrokenProcessPool, match=r"a parse process \(pid \d+\) was killed by SIGKILL") as raised:
            dying.result()
        with pytest.raises(BrokenProcessPool) as later:
            pool.submit(echo, 5)
        assert str(later.value) == str(raised.value)  # one cause, told the same way everywhere
        release.touch()
        assert survivor.result() == f"released by {release}"  # good work is not thrown away
        assert "broken" in repr(pool)
    finally:
        pool.shutdown()
    assert not worker_processes()
    assert not caplog.records


def test_a_worker_killed_from_outside_fails_its_jobs_and_the_queued_ones(
    tmp_path: Path, no_leaks: LeakBaseline
) -> None:
    release = tmp_path / "release"
    pool = ParseProcessPool(1)
    try:
        (pid,) = worker_pids(pool, 1, tmp_path)
        futures = [pool.submit(wait_for, str(release)) for _ in range(4)]  # 2 held by the worker, 2 queued
        os.kill(pid, signal.SIGKILL)
        for future in futures:
            with pytest.raises(BrokenProcessPool, match=f"pid {pid}"):
                future.result()
    finally:
        pool.shutdown()
    assert not worker_processes()


def test_a_dead_worker_breaks_the_pool_even_while_idle(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    pool = ParseProcessPool(1)
    try:
        (pid,) = worker_pids(pool, 1, tmp_path)
        os.kill(pid, signal.SIGKILL)

        def refused() -> bool:
            try:
                pool.submit(echo, 6).cancel()
            except BrokenProcessPool:
                return True
            return False

        assert wait_until(refused, 30)
    finally:
        pool.shutdown()


# -- signals and orphans -----------------------------------------------------------------------


def test_workers_ignore_sigint_and_sigterm(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    with ParseProcessPool(1) as pool:
        (pid,) = worker_pids(pool, 1, tmp_path)
        os.kill(pid, signal.SIGINT)
        os.kill(pid, signal.SIGTERM)
        assert pool.submit(os.getpid).result() == pid


ORPHANING_PARENT = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from niofetcher.crawl.workers import ParseProcessPool
    from test_parse_workers import wait_for

    pool = ParseProcessPool(2)
    busy = pool.submit(wait_for, sys.argv[2])  # worker 0 is mid-job when its parent is killed
    idle = pool.submit(os.getpid)  # worker 1: the least loaded
    print(idle.result(), flush=True)
    time.sleep(120)
""")


def test_workers_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
    release = tmp_path / "release"
    tests_dir = str(Path(__file__).parent)
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHANING_PARENT, REPO, str(release)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": tests_dir},
    )
    try:
        assert parent.stdout is not None
        int(parent.stdout.readline())  # the workers are up and serving
        workers = [child.pid for child in psutil.Process(parent.pid).children()]
        assert len(workers) == 2
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    assert wait_until(lambda: any(map(gone, workers)), 30)  # the idle one sees EOF at once ...
    release.touch()
    assert wait_until(lambda: all(map(gone, workers)), 30)  # ... the busy one after its job


# -- shutdown ----------------------------------------------------------------------------------


def test_shutdown_waits_for_every_submitted_job(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    release = tmp_path / "release"
    pool = ParseProcessPool(2)
    futures = [pool.submit(wait_for, str(release)) for _ in range(8)]  # 4 held, 4 queued
    stopper = threading.Thread(target=pool.shutdown, name="test-shutdown")
    stopper.start()
    try:
        assert wait_until(lambda: "shut down" in repr(pool), 30)
        with pytest.raises(RuntimeError, match="after shutdown"):
            pool.submit(echo, 7)
    finally:
        release.touch()
        stopper.join(30)
    assert not stopper.is_alive()
    assert all(future.done() for future in futures)
    assert [future.result() for future in futures] == [f"released by {release}"] * 8
    assert not worker_processes()


def test_shutdown_cancel_futures_cancels_the_queued_jobs(tmp_path: Path, no_leaks: LeakBaseline) -> None:
    release = tmp_path / "release"
    pool = ParseProcessPool(1)
    futures = [pool.submit(wait_for, str(release)) for _ in range(5)]  # 2 held, 3 queued
    pool.shutdown(wait=False, cancel_futures=True)
    release.touch()
    pool.shutdown()
    assert [future.cancelled() for future in futures] == [False, False, True, True, True]
    assert futures[0].result() == futures[1].result() == f"released by {release}"
    assert not worker_processes()


def test_shutdown_without_wait_still_cleans_up(no_leaks: LeakBaseline) -> None:
    pool = ParseProcessPool(2)
    futures = [pool.submit(echo, i) for i in range(10)]
    pool.shutdown(wait=False)
    assert [future.result(timeout=30) for future in futures] == [((i,), {}) for i in range(10)]
    assert wait_until(lambda: not worker_processes(), 30)


def test_a_failing_reader_fails_every_job_instead_of_hanging(
    tmp_path: Path, no_leaks: LeakBaseline, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_complete(*args: object) -> None:
        raise MemoryError("injected")

    monkeypatch.setattr(ParseProcessPool, "_complete", broken_complete)
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the reader's death is expected
    pool = ParseProcessPool(1)
    futures = [pool.submit(echo, i) for i in range(4)]
    for future in futures:
        with pytest.raises(BrokenProcessPool, match="reader failed: MemoryError: injected"):
            future.result(timeout=30)
    pool.shutdown()
    assert not worker_processes()


# -- no __main__ guard (issue 9, case 4) ---------------------------------------------------------

# Each run of this script appends a line to runs.txt; the decoy niofetcher in its working
# directory would be what a worker started with the working directory on sys.path imports.
UNGUARDED_POOL_SCRIPT = """\
import os, sys
sys.path.insert(0, {repo!r})
import niofetcher
from niofetcher.crawl.workers import ParseProcessPool

with open("runs.txt", "a") as runs:
    print(os.getpid(), file=runs)
pool = ParseProcessPool(2)
files = [pool.submit(eval, "__import__('niofetcher').__file__") for _ in range(6)]
pids = [pool.submit(os.getpid) for _ in range(6)]
print(all(f.result() == niofetcher.__file__ for f in files), os.getpid() not in {{p.result() for p in pids}})
pool.shutdown()
"""


def run_script(tmp_path: Path, source: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script" / "crawl_me.py"
    script.parent.mkdir()
    script.write_text(source)
    work = tmp_path / "work"
    (work / "niofetcher").mkdir(parents=True)
    (work / "niofetcher" / "__init__.py").write_text("raise ImportError('the decoy niofetcher was imported')\n")
    return subprocess.run(
        [sys.executable, str(script)], cwd=work, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, **env},
    )


def test_a_script_without_main_guard_runs_once_and_its_workers_import_our_niofetcher(tmp_path: Path) -> None:
    done = run_script(tmp_path, UNGUARDED_POOL_SCRIPT.format(repo=REPO))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
    assert len((tmp_path / "work" / "runs.txt").read_text().splitlines()) == 1


UNGUARDED_CRAWL_SCRIPT = """\
import os, sys
sys.path.insert(0, {repo!r})
from niofetcher.crawl import CrawlConfig, Crawler

with open("runs.txt", "a") as runs:
    print(os.getpid(), file=runs)

def on_page(page):
    with open("pages.txt", "a") as pages:
        print(page.result.url, file=pages)

config = CrawlConfig(seeds=[os.environ["SEED"]], db_path="crawl.sqlite", parse_mode="process", parse_workers=2)
summary = Crawler(config, on_page=on_page).run()
print(summary.counts["done"], summary.counts["error"])
"""


def test_a_crawl_script_without_main_guard_crawls_once(tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=60, max_seconds=60) as site:
        done = run_script(tmp_path, UNGUARDED_CRAWL_SCRIPT.format(repo=REPO), SEED=site.base_urls[0])
        pages = site.page_urls()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(len(pages)), "0"]
    assert len((tmp_path / "work" / "runs.txt").read_text().splitlines()) == 1
    handed_over = Counter((tmp_path / "work" / "pages.txt").read_text().split())
    assert set(handed_over) == set(pages) and set(handed_over.values()) == {1}


def test_the_parents_read_buffer_is_reused_between_replies(monkeypatch: pytest.MonkeyPatch) -> None:
    """One buffer per pipe: no view of a reply outlives its completion, so the reader never has to
    give its buffer up for a new one (it did for nearly every reply when the loop kept the last view)."""
    from niofetcher.crawl import workers

    replaced = [0]
    reclaim = workers._FrameReader._reclaim

    def counting(self: workers._FrameReader) -> None:
        before = self._buffer
        reclaim(self)
        replaced[0] += self._buffer is not before

    monkeypatch.setattr(workers._FrameReader, "_reclaim", counting)
    with ParseProcessPool(1) as pool:
        assert [f.result(timeout=30) for f in [pool.submit(len, b"x" * 1000) for _ in range(300)]] == [1000] * 300
    assert replaced[0] == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("extractor", ["lxml", "bs4", pytest.param("selectolax", marks=installed("selectolax"))])
def test_a_parse_process_imports_beautiful_soup_only_for_its_extractor(extractor: str, no_leaks: LeakBaseline) -> None:
    """A crawl that parses with lxml spares each parse process bs4's import (0.14 s of its start); one that
    parses with bs4 has it imported before its first page, while robots.txt and the seeds are fetched."""
    from niofetcher.crawl.parsing import ParseExecutor, ParseInput, ParseOutput
    from niofetcher.crawl.policy import LinkScope

    pages: list[ParseInput] = [(b"<a href='/x'>x</a>", "http://a.test/", "text/html")]
    failures: list[BaseException] = []
    parsed: concurrent.futures.Future[list[ParseOutput]] = concurrent.futures.Future()
    with ParseExecutor("process", 1, extractor, LinkScope(("a.test",)), failed=failures.append) as executor:
        before = executor._executor.submit(imported, "bs4").result(timeout=30)
        executor.submit(pages, True, parsed.set_result)
        links = parsed.result(timeout=30)[0][0]
        after = executor._executor.submit(imported, "bs4").result(timeout=30)
    assert (before, after) == ((extractor == "bs4"),) * 2  # (this module, which the workers import, imports no bs4)
    assert links == ["http://a.test/x"] and not failures


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_an_extractor_that_cannot_be_imported_stops_the_parsing_before_its_first_page(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """links_bs4 checks at import that bs4 drives its builder as it expects: a failure must stop the
    crawl at its start, not fail every page quietly later (the parse processes would fall back)."""
    from niofetcher.crawl.parsing import ParseExecutor
    from niofetcher.crawl.policy import LinkScope

    monkeypatch.setitem(sys.modules, "niofetcher.crawl.parse.links_bs4", None)  # its import raises ImportError
    with pytest.raises(ImportError):
        ParseExecutor(mode, 1, "bs4", LinkScope(("a.test",)), failed=lambda exc: None)
    with ParseExecutor(mode, 1, "lxml", LinkScope(("a.test",)), failed=lambda exc: None):
        pass  # the other extractor needs nothing of bs4

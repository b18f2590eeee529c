"""Shared fixtures: scripted raw servers and a resource-leak check.

Helpers importable by test modules (``tests/`` is on ``sys.path``):
``from conftest import fd_count, fd_table``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from rawserver import Handler, RawServer, running_servers

if TYPE_CHECKING:
    from niofetcher import FetchResult, NIOFetcher

MakeServer = Callable[..., RawServer]


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A tmpfs of 512 KiB, mounted for the test: a real filesystem that really fills up."""
    with tempfile.TemporaryDirectory(prefix="niofetcher-small-disk-") as folder:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", folder],
                                 capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
        try:
            yield Path(folder)
        finally:
            subprocess.run(["umount", "-l", folder], check=False)


@pytest.fixture
def raw_server() -> Iterator[MakeServer]:
    """A factory: ``srv = raw_server(handler, **RawServer_kwargs)`` returns a
    started server; every server it made is stopped at teardown."""
    servers: list[RawServer] = []

    def make(handler: Handler, **kwargs: Any) -> RawServer:
        srv = RawServer(handler, **kwargs)
        servers.append(srv)
        return srv.start()

    yield make
    for srv in servers:
        srv.stop()


# -- leak checking -----------------------------------------------------------


def fd_table() -> dict[int, str]:
    """This process's open descriptors and what they point at
    (``socket:[123]``, ``pipe:[45]``, ``anon_inode:[eventpoll]``, a path)."""
    table: dict[int, str] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except FileNotFoundError:  # no procfs: psutil knows only the count
        import psutil  # type: ignore[import-untyped,unused-ignore]

        return {i: "?" for i in range(psutil.Process().num_fds())}
    for name in names:
        try:
            table[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            # The descriptor listdir() itself used, already closed again.
            continue
    return table


def fd_count() -> int:
    """How many file descriptors this process has open."""
    return len(fd_table())


@dataclass
class LeakBaseline:
    """What was open before the test; ``no_leaks`` yields it."""

    fds: dict[int, str]
    threads: set[threading.Thread]
    servers: set[RawServer]


def take_baseline() -> LeakBaseline:
    return LeakBaseline(fd_table(), set(threading.enumerate()), set(running_servers()))


def check_leaks(baseline: LeakBaseline, wait: float = 3.0) -> None:
    """Fail unless threads and descriptors are back to ``baseline``.

    RawServers started since the baseline are stopped first: their listener
    and sockets are the test's scaffolding, not the code under test, and
    fixture teardown order would otherwise decide whether they count.
    Closing is asynchronous (a loop thread finishing its shutdown, a
    resolver worker exiting), so this waits up to ``wait`` seconds for the
    numbers to settle before it judges.
    """
    for srv in running_servers():
        if srv not in baseline.servers:
            srv.stop()
    deadline = time.monotonic() + wait
    while True:
        extra_threads = [t for t in threading.enumerate() if t not in baseline.threads]
        fds = fd_table()
        if (not extra_threads and len(fds) <= len(baseline.fds)) or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    ours = [t.name for t in threading.enumerate() if t.name.startswith("niofetcher")]
    assert not ours, f"niofetcher threads still alive after the test: {ours}"
    if len(fds) > len(baseline.fds):
        extra = {fd: target for fd, target in fds.items() if baseline.fds.get(fd) != target}
        listing = ", ".join(f"{fd} -> {target}" for fd, target in sorted(extra.items()))
        raise AssertionError(
            f"{len(fds) - len(baseline.fds)} file descriptor(s) leaked "
            f"({len(baseline.fds)} before, {len(fds)} after): {listing}"
        )


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel does it) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


@pytest.fixture
def no_leaks() -> Iterator[LeakBaseline]:
    """Fail the test if it leaves threads named ``niofetcher*`` alive or more
    file descriptors open than it found (waiting up to 3 s to settle)."""
    baseline = take_baseline()
    yield baseline
    check_leaks(baseline)


# -- helpers shared by the thread, exactly-once and frontier tests ----------


def results_by_url(fetcher: NIOFetcher, urls: Iterable[str], timeout: float = 10.0) -> dict[str, FetchResult]:
    """Register ``urls`` (all distinct) and return their results by URL, failing on a missing or doubled one."""
    urls = list(urls)
    for url in urls:
        assert fetcher.register(url)
    results: dict[str, FetchResult] = {}
    while len(results) < len(urls):
        result = fetcher.get(timeout=timeout)
        assert result is not None, f"no result within {timeout} s for {sorted(set(urls) - set(results))}"
        assert result.url not in results, f"two results for one registration of {result.url}"
        results[result.url] = result
    return results


def collect(fetcher: NIOFetcher, count: int, within: float) -> list[FetchResult]:
    """Up to ``count`` results through get(), waiting at most ``within`` seconds in all."""
    got: list[FetchResult] = []
    deadline = time.monotonic() + within
    while len(got) < count:
        result = fetcher.get(timeout=max(0.0, deadline - time.monotonic()))
        if result is None:
            break
        got.append(result)
    return got


def run_threads(targets: Iterable[Callable[[], None]]) -> None:
    """Run each target in its own thread, all released at once; re-raise the first failure."""
    targets = list(targets)
    barrier = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def run(target: Callable[[], None]) -> None:
        try:
            barrier.wait(10)
            target()
        except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,), name=f"test-worker-{n}") for n, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads), "a worker thread is stuck"
    if errors:
        raise errors[0]


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` passes; its last answer."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return predicate()
        time.sleep(interval)
    return True


def sigkill_after_requests(child: subprocess.Popen[bytes], served: Callable[[], int], requests: int) -> None:
    """SIGKILL ``child`` (a crawl) once the site has read ``requests`` requests -- or after 30 s, or at
    once if it has ended -- and check that the kill is what ended it (its stderr says why not)."""
    try:
        wait_until(lambda: served() >= requests or child.poll() is not None, timeout=30, interval=0.005)
    finally:
        child.send_signal(signal.SIGKILL)
        _, stderr = child.communicate(timeout=10)
    assert child.returncode == -signal.SIGKILL, stderr.decode()

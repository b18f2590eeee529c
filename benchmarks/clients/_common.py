"""What every benchmark client shares: its command line, the job file, the meter and the report line.

A client is a small script run in a fresh process by ``benchmarks/compare.py``::

    python benchmarks/clients/<name>_client.py --urls JOB.tsv --total 64 --per-host 64

``JOB.tsv`` has one ``URL<TAB>expected body length`` per line, in the order the
URLs are to be fetched. The client fetches every line, checks that each
response has status 200 and exactly the expected body length, and prints one
JSON line on stdout::

    {"client": ..., "pages": N, "ok": N, "errors": E, "seconds": S, "cpu": C,
     "peak_rss_mb": M, "error_samples": [...], ...}

``seconds`` and ``cpu`` (user + system of the whole client process, every thread
included) cover the fetch only: from just before the client object (session,
pool, multi handle, fetcher) is made until the last response has been checked.
Imports and reading the job file are outside; ``peak_rss_mb`` is the process's
peak resident set over its whole life (``VmHWM``), which includes them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")

#: Every client waits at most this long for one response (a stuck client is killed by compare.py anyway).
TIMEOUT = 60.0


def raise_nofile() -> int:
    """Raise this process's open-file soft limit to its hard limit (scenario C opens 2,000 sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft
    return hard


def parse_args(description: str, argv: list[str] | None = None,
               extra: Any = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--urls", required=True, metavar="JOB.tsv",
                        help="one 'URL<TAB>expected body length' per line")
    parser.add_argument("--total", type=int, required=True, help="connections in total")
    parser.add_argument("--per-host", type=int, required=True, help="connections per host")
    parser.add_argument("--deadline", type=float, default=None, metavar="S",
                        help="stop taking new URLs after S seconds of fetching and report what was done "
                             "(marked incomplete): a very slow client then costs S, not hours")
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    if args.total < 1 or args.per_host < 1:
        parser.error("--total and --per-host must be >= 1")
    return args



def parse_loop_args(description: str) -> argparse.Namespace:
    """parse_args plus ``--loop asyncio|uvloop``: the arguments of a client run on an asyncio loop."""
    return parse_args(description, extra=lambda p: p.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio"))


def run_on_loop(loop: str, coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine`` to its end on asyncio's own event loop or on uvloop's (``--loop``)."""
    if loop == "uvloop":
        import uvloop

        return uvloop.run(coroutine)
    return asyncio.run(coroutine)


def load_job(path: str) -> list[tuple[str, int]]:
    """The (url, expected body length) pairs of a job file, in order."""
    jobs = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            line = line.rstrip("\n")
            if line:
                url, _, size = line.partition("\t")
                jobs.append((url, int(size)))
    return jobs


class Meter:
    """Wall time and process CPU (user + sys, all threads) of the fetch, and the deadline."""

    def __init__(self, deadline: float | None = None) -> None:
        self.t0 = self.cpu0 = 0.0
        self.seconds = self.cpu = 0.0
        self.stopped = False
        self.deadline_seconds = deadline
        self.deadline = float("inf")  # a time.monotonic() value once started

    def start(self) -> None:
        times = os.times()
        self.cpu0 = times.user + times.system
        self.t0 = time.perf_counter()
        if self.deadline_seconds is not None:
            self.deadline = time.monotonic() + self.deadline_seconds

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def stop(self) -> None:
        self.stopped = True
        self.seconds = time.perf_counter() - self.t0
        times = os.times()
        self.cpu = times.user + times.system - self.cpu0


class Tally:
    """Counts responses and keeps a few error samples."""

    def __init__(self) -> None:
        self.ok = 0
        self.errors = 0
        self.samples: list[str] = []

    def check(self, url: str, status: int | None, length: int, expected: int) -> None:
        if status == 200 and length == expected:
            self.ok += 1
        else:
            self.fail(url, f"status {status}, {length} bytes (expected 200, {expected} bytes)")

    def fail(self, url: str, what: str) -> None:
        self.errors += 1
        if len(self.samples) < 5:
            self.samples.append(f"{url}: {what}")


async def run_workers(worker: Callable[[], Awaitable[None]], count: int, meter: Meter) -> None:
    """Run ``count`` workers to the end, or until the deadline, when those still busy are cancelled."""
    tasks = [asyncio.ensure_future(worker()) for _ in range(count)]
    limit = meter.deadline_seconds
    _, pending = await asyncio.wait(tasks, timeout=None if limit is None else limit + 0.5)
    meter.stop()
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def peak_rss_mb() -> float:
    """This process's peak resident set in MB: ``VmHWM`` of /proc/self/status.

    Not ``ru_maxrss``: Linux carries that over an ``execve`` from the forked parent, so a
    client started from a big parent would report at least the parent's size.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


_report_lock = threading.Lock()
_reported = False

#: How long past the deadline the watchdog waits for the client to stop by itself.
WATCHDOG_GRACE = 3.0


def arm_watchdog(client: str, pages: int, tally: Tally, meter: Meter, **extra: Any) -> None:
    """Past the deadline (plus a grace), report what was done and end the process, whatever the client does.

    Stopping at the deadline is cooperative (no new URL is taken); a client whose
    event loop is stuck for a long time (httpx's pool with 2,000 connections) would
    not get there. Call right after ``meter.start()``.
    """
    if meter.deadline_seconds is None:
        return

    def fire() -> None:
        if not meter.stopped:
            meter.stop()
        if report(client, pages, tally, meter, watchdog=True, **extra):
            os._exit(0)

    timer = threading.Timer(meter.deadline_seconds + WATCHDOG_GRACE, fire)
    timer.daemon = True
    timer.start()


def report(client: str, pages: int, tally: Tally, meter: Meter, **extra: Any) -> bool:
    """Print the one JSON result line on stdout.

    ``pages`` is how many URLs the job had. Past the deadline the URLs never
    started are ``not_done`` (the run is ``incomplete``); without a deadline a
    URL with no checked response is an error.
    """
    global _reported
    with _report_lock:
        if _reported:
            return False
        _reported = True
    done = tally.ok + tally.errors
    incomplete = meter.deadline_seconds is not None and done < pages
    line = {
        "client": client,
        "pages": pages,
        "done": done if incomplete else pages,
        "ok": tally.ok,
        "errors": tally.errors + (0 if incomplete else pages - done),
        "incomplete": incomplete,
        "not_done": pages - done if incomplete else 0,
        "seconds": meter.seconds,
        "cpu": meter.cpu,
        "peak_rss_mb": peak_rss_mb(),
        "error_samples": tally.samples,
        "python": sys.version.split()[0],
    }
    line.update(extra)
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()
    return True

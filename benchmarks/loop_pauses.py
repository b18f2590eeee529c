"""How long the loop thread stands still while many URLs wait: loop iterations and GC passes.

    python benchmarks/loop_pauses.py                       # 100,000 then 1,000,000 pending URLs
    python benchmarks/loop_pauses.py --pending 100000 --steady 5
    python benchmarks/loop_pauses.py --batch 1000          # register_many() of 1,000 URLs a call

For each size: a fetcher with ``--connections`` connections to one test-site
host (in its own process) answering after ``--delay`` ms, so that the
registered URLs stay pending while responses keep the loop busy.  Phases:

1. register: ``--pending`` URLs from this thread, as fast as register() goes
   (or register_many() with ``--batch`` URLs a call);
2. steady: ``--steady`` seconds with the URLs pending and responses flowing,
   the results taken by this thread;
3. forced full collections (``gc.collect()``, the best of three, wall and
   CPU time): what one full pass costs with this many URLs pending, whenever
   the collector decides to make one; the loop thread stands still meanwhile.
   On a shared machine the CPU time is the steadier figure.

Reported per phase: the loop's busy stretches (from select() returning to
the next select() call: one iteration's work; while this thread registers
flat out, that includes waiting for the GIL it holds) as max and p99, and every GC
pass seen by ``gc.callbacks`` (any thread: a pass in the registering thread
holds the GIL and stops the loop just as well) as count and max per
generation.  Also the GC-tracked objects per pending URL
(``len(gc.get_objects())`` before and after, the loop idle between).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _site import site_process

from niofetcher import FetcherConfig, NIOFetcher


class Recorder:
    """Busy stretches of the loop (around its selector's select()) and GC passes (gc.callbacks)."""

    def __init__(self) -> None:
        self.busy: list[float] = []
        self.gc: list[tuple[int, float]] = []
        self._returned: float | None = None
        self._gc_start = 0.0

    def wrap_selector(self, fetcher: NIOFetcher) -> None:
        """Time the loop's iterations: the work between one select() and the next."""
        loop = fetcher._engine.loop
        selector = loop._selector
        select = selector.select
        clock = time.perf_counter

        def timed_select(timeout: float | None = None) -> Any:
            if self._returned is not None:
                self.busy.append(clock() - self._returned)
            events = select(timeout)
            self._returned = clock()
            return events

        selector.select = timed_select  # type: ignore[method-assign]

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        """gc.callbacks: time each pass."""
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc.append((info["generation"], time.perf_counter() - self._gc_start))

    def take(self) -> tuple[list[float], list[tuple[int, float]]]:
        """What was recorded since the last take()."""
        busy, self.busy = self.busy, []
        passes, self.gc = self.gc, []
        return busy, passes


def summary(name: str, busy: list[float], passes: list[tuple[int, float]]) -> str:
    """One line: iterations (max, p99) and GC passes per generation (count, max)."""
    busy = sorted(busy)
    if busy:
        p99 = busy[min(len(busy) - 1, int(len(busy) * 0.99))]
        loop = f"{len(busy):7d} iterations, max {busy[-1] * 1e3:7.1f} ms, p99 {p99 * 1e3:6.2f} ms"
    else:
        loop = "no iterations"
    by_gen = []
    for gen in range(3):
        times = [t for g, t in passes if g == gen]
        if times:
            by_gen.append(f"gen{gen}: {len(times)} x, max {max(times) * 1e3:.1f} ms")
    return f"  {name:<9} {loop} | GC {'; '.join(by_gen) or 'none'}"


def wait_until(predicate: Any, timeout: float) -> None:
    """Poll ``predicate`` until it holds or ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)


def register_all(fetcher: NIOFetcher, base: str, pending: int, batch: int) -> None:
    """``pending`` URLs through register() (``batch`` 0) or register_many() of ``batch`` a call."""
    # Made one by one, or a batch at a time, not held in a list: a list of a million strs would
    # cost the collector as much as the fetcher's own queues, and be this script's cost.
    if batch:
        register_many = fetcher.register_many
        for start in range(0, pending, batch):
            register_many([f"{base}page/{i % 100}?n={i}" for i in range(start, min(pending, start + batch))])
        return
    register = fetcher.register
    for i in range(pending):
        register(f"{base}page/{i % 100}?n={i}")


def run(base: str, pending: int, connections: int, steady: float, batch: int = 0) -> None:
    """One size: register, steady, forced full collection; prints the three lines."""
    gc.collect()
    config = FetcherConfig(max_connections=connections, max_connections_per_host=connections,
                           request_timeout=None)
    fetcher = NIOFetcher(config)
    recorder = Recorder()
    recorder.wrap_selector(fetcher)
    gc.callbacks.append(recorder.on_gc)
    try:
        fetcher.start()
        gc.collect()
        objects_before = len(gc.get_objects())
        recorder.take()
        t0 = time.perf_counter()
        register = fetcher.register
        # Made one by one, not held in a list: a list of a million strs would cost the
        # collector as much as the fetcher's own queues, and be this script's cost.
        for i in range(pending):
            register(f"{base}page/{i % 100}?n={i}")
        elapsed = time.perf_counter() - t0
        engine = fetcher._engine
        wait_until(lambda: not engine._inbox, 60)
        per_url = (len(gc.get_objects()) - objects_before) / pending
        print(f"{pending:,} pending: register {pending / elapsed:,.0f}/s, "
              f"{per_url:.2f} GC-tracked objects per pending URL")
        print(summary("register", *recorder.take()))
        done = 0
        t_end = time.monotonic() + steady
        while time.monotonic() < t_end:
            done += len(fetcher.drain())
            time.sleep(0.005)
        busy, passes = recorder.take()
        print(summary("steady", busy, passes) + f" | {done / steady:,.0f} results/s")
        walls, cpus = [], []
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.thread_time()
            gc.collect()
            walls.append(time.perf_counter() - t0)
            cpus.append(time.thread_time() - c0)
            time.sleep(0.1)
        busy, passes = recorder.take()
        print(summary("collect", busy, passes)
              + f" | gc.collect() {min(walls) * 1e3:.1f} ms wall, {min(cpus) * 1e3:.1f} ms CPU")
    finally:
        gc.callbacks.remove(recorder.on_gc)
        fetcher.cancel_pending()
        fetcher.shutdown(wait=False)


def main() -> None:
    """Parse the options and run each size."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, action="append", help="URLs pending (repeatable)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--delay", type=float, default=20.0, metavar="MS", help="the site's latency")
    parser.add_argument("--steady", type=float, default=10.0, metavar="S", help="seconds of steady state")
    parser.add_argument("--batch", type=int, default=0, metavar="N",
                        help="register with register_many() of N URLs a call (0: register() one by one)")
    args = parser.parse_args()
    sizes = args.pending or [100_000, 1_000_000]
    print(f"python {sys.version.split()[0]}, gc thresholds {gc.get_threshold()}")
    with site_process(hosts=1, pages=100, delay_ms=args.delay, page_size=1024) as bases:
        for pending in sizes:
            run(bases[0], pending, args.connections, args.steady, args.batch)


if __name__ == "__main__":
    main()

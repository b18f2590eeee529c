"""How long the loop thread stands still while many URLs wait: loop iterations and GC passes.

    python benchmarks/loop_pauses.py                       # 100,000 then 1,000,000 pending URLs
    python benchmarks/loop_pauses.py --pending 100000 --steady 5
    python benchmarks/loop_pauses.py --batch 1000          # register_many() of 1,000 URLs a call
    python benchmarks/loop_pauses.py --tail B              # compare.py's scenario B (or C): the slow iterations

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

``--tail B`` (or ``C``) runs compare.py's scenario instead, its site in its own
process and one NIOFetcher here consuming ``results()`` as the benchmark client
does, and profiles the loop's slow iterations (over ``--slow`` ms, from select()
returning to the next select() call): for each, what it handled — ready events,
timers run (heap entries popped), inbox items taken, requests started, results
delivered, GC passes in any thread — and where its wall time went (events,
posted calls, timers, inbox, scheduler, delivery) against the loop thread's own
CPU time: a slow iteration with little CPU waited for the GIL or for a core.
The instruments are wrappers this script puts on one fetcher's objects: the
library itself carries no profiling code, so it costs nothing when not asked for.
The site's server-timed turnaround (``PortCounters.turnaround``) is printed beside.
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
from niofetcher import loop as loop_module
from niofetcher.timers import TimerHeap

#: The phases of one loop iteration that ``Tail`` times, in the order they run.
PHASES = ("events", "calls", "timers", "inbox", "dispatch", "deliver")


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


class Tail:
    """One fetcher's loop iterations, each with what it handled and where its time went (``--tail``)."""

    def __init__(self, fetcher: NIOFetcher, slow: float) -> None:
        self.slow = slow
        self.iterations = 0
        self.busy: list[float] = []
        self.records: list[dict[str, Any]] = []  # the slow iterations
        self.gc_all: list[tuple[int, float]] = []
        self._current: dict[str, Any] | None = None
        self._gc_start = 0.0
        self._schedstat: int | None = None
        self.totals = {"wall": 0.0, "cpu": 0.0, "runq": 0.0}  # over every iteration
        self._engine = engine = fetcher._engine
        loop = engine.loop
        select = loop._selector.select

        def timed_select(timeout: float | None = None) -> Any:
            self._close_iteration()
            events = select(timeout)
            self._open_iteration(len(events))
            return events

        run_once = loop.run_once

        def timed_run_once(max_wait: float | None) -> None:
            # Events left from an earlier select() (loop.EVENT_BATCH): an iteration without a select().
            left = getattr(loop, "_ready", None)
            if left:
                self._close_iteration()
                self._open_iteration(len(left))
            run_once(max_wait)

        loop._selector.select = timed_select  # type: ignore[method-assign]
        loop.run_once = timed_run_once  # type: ignore[method-assign]
        # Each phase ends where the next begins; "events" is select() returning -> run_calls().
        self._wrap(loop, "run_calls", "events")
        self._wrap(engine, "_take_inbox", None, count=("taken", lambda: -len(engine._inbox)))
        self._wrap(engine, "_dispatch", None,
                   count=("started", lambda: engine.counters.connections_opened + engine.counters.reused_requests))
        self._wrap(engine, "_deliver_finished", None, count=("delivered", lambda: -len(engine._finished)))
        heap_run_due = TimerHeap.run_due
        heap = loop.timers

        def run_due(timers: TimerHeap, now: float, *deferred: Any) -> None:
            if timers is not heap:
                heap_run_due(timers, now, *deferred)
                return
            self._phase_end("calls")
            before = len(timers)
            heap_run_due(timers, now, *deferred)
            if self._current is not None:  # pushes by re-arming timers make this a lower bound
                self._current["timers_run"] += max(0, before - len(timers))
            self._phase_end("timers")

        TimerHeap.run_due = run_due  # type: ignore[method-assign,assignment]  # this benchmark process only
        gc.callbacks.append(self._on_gc)

    def _wrap(self, owner: Any, name: str, before: str | None,
              count: tuple[str, Any] | None = None) -> None:
        """Time ``owner.name()`` as its own phase (closing ``before`` first); count a delta of ``count``."""
        method = getattr(owner, name)
        phase = {"_take_inbox": "inbox", "_dispatch": "dispatch", "_deliver_finished": "deliver"}.get(name)

        def wrapped() -> None:
            if before is not None:
                self._phase_end(before)
            else:
                self._mark()
            start = count[1]() if count is not None else 0
            method()
            if count is not None and self._current is not None:
                key, measure = count
                self._current[key] += measure() - start
            if phase is not None:
                self._phase_end(phase)

        setattr(owner, name, wrapped)

    def _open_iteration(self, ready: int) -> None:
        """An iteration begins, with ``ready`` events ready (it handles ``loop.EVENT_BATCH`` of them at most)."""
        batch = getattr(loop_module, "EVENT_BATCH", ready)  # none before the batches came
        self._current = {"start": time.perf_counter(), "cpu": time.thread_time(), "runq": self._runq(),
                         "ready": min(ready, batch), "timers_run": 0, "taken": 0, "started": 0, "delivered": 0, "gc": [],
                         **{phase: 0.0 for phase in PHASES}, "mark": time.perf_counter()}

    def _runq(self) -> float:
        """Seconds the loop thread has so far been runnable but not running (Linux schedstat; else 0)."""
        if self._schedstat is None:
            try:  # opened from the loop thread: "thread-self" is the thread that opens it
                self._schedstat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
            except OSError:
                self._schedstat = -1
        if self._schedstat < 0:
            return 0.0
        return int(os.pread(self._schedstat, 100, 0).split()[1]) * 1e-9

    def _mark(self) -> None:
        if self._current is not None:
            self._current["mark"] = time.perf_counter()

    def _phase_end(self, phase: str) -> None:
        current = self._current
        if current is not None:
            now = time.perf_counter()
            current[phase] += now - current["mark"]
            current["mark"] = now

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        spent = time.perf_counter() - self._gc_start
        self.gc_all.append((info["generation"], spent))
        if self._current is not None:  # a pass in any thread stops the loop just as well
            self._current["gc"].append((info["generation"], spent))

    def _close_iteration(self) -> None:
        current, self._current = self._current, None
        if current is None:
            return
        wall = time.perf_counter() - current["start"]
        self.iterations += 1
        self.busy.append(wall)
        current["wall"] = wall
        current["cpu"] = time.thread_time() - current["cpu"]
        current["runq"] = self._runq() - current["runq"]
        for key in ("wall", "cpu", "runq"):
            self.totals[key] += current[key]
        if wall > self.slow:
            self.records.append(current)

    def stop(self) -> None:
        """Stop counting GC passes (the wrappers die with the fetcher)."""
        gc.callbacks.remove(self._on_gc)
        if self._schedstat is not None and self._schedstat >= 0:
            os.close(self._schedstat)

    def report(self, shown: int) -> list[str]:
        """The summary, then the ``shown`` slowest iterations, one line each."""
        busy = sorted(self.busy)
        lines = [(f"  {self.iterations:,} iterations: p50 {_ms(busy, 0.5)}, p99 {_ms(busy, 0.99)}, "
                  f"max {_ms(busy, 1.0)} ms; {len(self.records)} over {self.slow * 1e3:g} ms, "
                  f"{sum(r['wall'] for r in self.records) * 1e3:.0f} ms in all")]
        wall = self.totals["wall"] or 1.0
        cpu, runq = self.totals["cpu"] / wall, self.totals["runq"] / wall
        lines.append(f"  all iterations: {wall:.2f} s busy; the loop thread ran {cpu:.0%}, waited for a core "
                     f"{runq:.0%}, waited otherwise (the GIL) {1 - cpu - runq:.0%}")
        by_gen = [sum(1 for g, _ in self.gc_all if g == gen) for gen in range(3)]
        worst = max((t for _, t in self.gc_all), default=0.0)
        lines.append(f"  GC passes (any thread): gen0 {by_gen[0]}, gen1 {by_gen[1]}, gen2 {by_gen[2]}, "
                     f"longest {worst * 1e3:.1f} ms")
        if self.records:
            total = sum(r["wall"] for r in self.records)
            shares = ", ".join(f"{phase} {sum(r[phase] for r in self.records) / total:.0%}" for phase in PHASES)
            cpu = sum(r["cpu"] for r in self.records) / total
            runq = sum(r["runq"] for r in self.records) / total
            with_gc = sum(1 for r in self.records if r["gc"])
            lines.append(f"  slow iterations' wall time: {shares}; of it the loop thread ran {cpu:.0%}, "
                         f"waited for a core {runq:.0%}, waited otherwise (the GIL) {1 - cpu - runq:.0%}; "
                         f"{with_gc} of {len(self.records)} had a GC pass")
        for r in sorted(self.records, key=lambda r: -r["wall"])[:shown]:
            gcs = " ".join(f"gen{g} {t * 1e3:.1f}" for g, t in r["gc"]) or "-"
            phases = " ".join(f"{phase} {r[phase] * 1e3:.1f}" for phase in PHASES)
            lines.append(f"    {r['wall'] * 1e3:6.1f} ms (cpu {r['cpu'] * 1e3:5.1f}, runq {r['runq'] * 1e3:5.1f}): "
                         f"{r['ready']:4d} events, "
                         f"{r['timers_run']:3d} timers, {r['taken']:5d} inbox, {r['started']:4d} started, "
                         f"{r['delivered']:4d} delivered, GC {gcs} | ms: {phases}")
        return lines


def _ms(ordered: list[float], fraction: float) -> str:
    if not ordered:
        return "-"
    return f"{ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] * 1e3:.2f}"


def tail(key: str, slow_ms: float, shown: int) -> None:
    """Compare.py's scenario ``key`` with one instrumented fetcher; prints efficiency, turnaround, the tail."""
    from comparison.scenarios import SCENARIOS, FetchScenario

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients"))
    from _common import raise_nofile
    from _site import SiteProcess

    scenario = SCENARIOS[key]
    assert isinstance(scenario, FetchScenario) and scenario.ideal
    raise_nofile()
    with SiteProcess(scenario.hosts, scenario.pages_per_host, scenario.delay_ms, scenario.page_size) as site:
        urls = scenario.urls(site.bases)
        site.reset_when_idle()
        config = FetcherConfig(max_connections=scenario.total, max_connections_per_host=scenario.per_host)
        fetcher = NIOFetcher(config)
        recorder = Tail(fetcher, slow_ms / 1000.0)
        cpu0 = os.times()
        t0 = time.perf_counter()
        errors = 0
        try:
            with fetcher:
                for url in urls:
                    fetcher.register(url)
                for result in fetcher.results():
                    errors += not result.ok
        finally:
            recorder.stop()
        wall = time.perf_counter() - t0
        cpu1 = os.times()
        turnaround = site.counters()["turnaround"]
    cpu = cpu1.user - cpu0.user + cpu1.system - cpu0.system
    print(f"{scenario.describe()}\n  efficiency {len(urls) / wall / scenario.ideal:.3f} ({wall:.2f} s, "
          f"{errors} errors, {cpu * 1e3 / len(urls):.3f} CPU ms/page, instrumented); turnaround "
          f"p50/p90/p99 {turnaround['p50']:.3g} / {turnaround['p90']:.3g} / {turnaround['p99']:.3g} ms")
    for line in recorder.report(shown):
        print(line)


def main() -> None:
    """Parse the options and run each size."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, action="append", help="URLs pending (repeatable)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--delay", type=float, default=20.0, metavar="MS", help="the site's latency")
    parser.add_argument("--steady", type=float, default=10.0, metavar="S", help="seconds of steady state")
    parser.add_argument("--batch", type=int, default=0, metavar="N",
                        help="register with register_many() of N URLs a call (0: register() one by one)")
    parser.add_argument("--tail", choices=["B", "C"], type=str.upper,
                        help="profile the slow iterations of compare.py's scenario B or C instead")
    parser.add_argument("--slow", type=float, default=10.0, metavar="MS", help="with --tail: what is slow")
    parser.add_argument("--show", type=int, default=15, metavar="N", help="with --tail: the N slowest, one line each")
    args = parser.parse_args()
    if args.tail:
        tail(args.tail, args.slow, args.show)
        return
    sizes = args.pending or [100_000, 1_000_000]
    print(f"python {sys.version.split()[0]}, gc thresholds {gc.get_threshold()}")
    with site_process(hosts=1, pages=100, delay_ms=args.delay, page_size=1024) as bases:
        for pending in sizes:
            run(bases[0], pending, args.connections, args.steady, args.batch)


if __name__ == "__main__":
    main()

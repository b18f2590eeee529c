"""A crawl run from the terminal: in a thread, its progress shown, stop signals taken, its summary printed."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from tqdm import tqdm

from ..crawl import CrawlConfig, Crawler, CrawlSummary
from .output import PageWriter
from .signals import StopSignals


def run_crawl(config: CrawlConfig, output: PageWriter | None, progress: str = "auto") -> CrawlSummary:
    """Run a crawl in a thread while this one shows progress; Ctrl-C or SIGTERM stops it gracefully.

    The signals are taken by a handler (StopSignals), not as a KeyboardInterrupt
    out of ``Thread.join()``: on CPython before 3.13 a join interrupted that
    way can mark the still-running thread as stopped (threading.py,
    bpo-45274), and the crawl is then cut off at interpreter exit.  A later
    signal abandons the fetches in flight by leaving at once: the frontier is
    made for that (their rows are 'processing' and go back to 'waiting' on
    the next open).
    """
    # Without an output the parse processes send back only the links the crawl follows.
    crawler = Crawler(config, output=output if output is not None and output.writes else None)
    outcome: dict[str, object] = {}
    finished = threading.Event()

    def crawl() -> None:
        try:
            outcome["summary"] = crawler.run()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            outcome["error"] = exc
        finally:
            finished.set()

    display = _Display(progress)

    def stop() -> None:
        crawler.stop()
        display.note("stopping: letting fetches in flight finish (Ctrl-C again to abandon them)")

    thread = threading.Thread(target=crawl, name="niofetcher-crawl")
    with StopSignals(stop, "niofetcher: abandoned; rerun with the same --db to resume"):
        thread.start()
        while not finished.wait(0.25):
            display.update(crawler)
        thread.join()
    display.close(crawler)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["summary"]  # type: ignore[return-value]


class _Display:
    """A tqdm bar on a terminal, a line every few seconds otherwise, or nothing."""

    def __init__(self, mode: str) -> None:
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.mode = mode
        self._bar: tqdm | None = tqdm(unit="page", dynamic_ncols=True) if mode == "bar" else None
        self._next_line = time.monotonic() + 2.0

    def update(self, crawler: Crawler) -> None:
        p = crawler.progress()
        finished = p.done + p.errors
        if self._bar is not None:
            self._bar.total = finished + p.in_flight + p.waiting
            self._bar.n = finished
            self._bar.set_postfix(in_flight=p.in_flight, errors=p.errors, refresh=False)
            self._bar.refresh()
        elif self.mode == "lines" and time.monotonic() >= self._next_line:
            rate = finished / p.seconds if p.seconds else 0.0
            print(f"{finished} pages ({p.errors} errors), {p.in_flight} in flight, {p.waiting} waiting, "
                  f"{rate:.0f} pages/s", file=sys.stderr, flush=True)
            self._next_line = time.monotonic() + 2.0

    def note(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        elif self.mode != "none":
            print(text, file=sys.stderr, flush=True)

    def close(self, crawler: Crawler) -> None:
        if self._bar is not None:
            self.update(crawler)
            self._bar.close()


def print_summary(summary: CrawlSummary, file: TextIO = sys.stdout) -> None:
    """The table printed at the end of a crawl."""
    rows = [(state, str(n)) for state, n in summary.counts.items()]
    rows += [(f"error: {kind}", str(n)) for kind, n in sorted(summary.errors.items())]
    rows += [
        ("pages this run", str(summary.pages)),
        ("pages/s", f"{summary.pages_per_second:.0f}"),
        ("MB received", f"{summary.bytes / 1e6:.1f}"),
        ("seconds", f"{summary.seconds:.2f}"),
    ]
    width = max(len(name) for name, _ in rows)
    print("crawl stopped; rerun with the same --db to resume" if summary.stopped else "crawl complete", file=file)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>10}", file=file)

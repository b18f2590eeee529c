"""A crawl run from the terminal: in a thread, its progress shown, stop signals taken, its summary printed."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple, TextIO

from ..crawl import CrawlConfig, Crawler, CrawlSummary
from .display import Display
from .output import PageWriter
from .signals import StopSignals


class CrawlRun(NamedTuple):
    """How a crawl run from the terminal ended."""

    summary: CrawlSummary
    interrupted: bool  # a signal stopped it (rather than the end of the crawl or its page budget)


def run_crawl(
    config: CrawlConfig, output: PageWriter | None, progress: str = "auto", finished_before: int = 0,
    stop_grace: float | None = None,
) -> CrawlRun:
    """Run a crawl in a thread while this one shows progress; Ctrl-C or SIGTERM stops it gracefully.

    ``finished_before``: the URLs done or failed in the frontier before this run (a resumed crawl),
    so that the rate shown is this run's.  ``stop_grace``: how long a stop lets fetches in flight
    finish before it gives them back to the frontier (``Crawler.stop(grace)``; None: as long as
    they take).

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

    display = Display(progress, finished_before)
    interrupted = threading.Event()

    def stop() -> None:
        interrupted.set()
        crawler.stop(stop_grace)
        within = "" if stop_grace is None else f" for up to {stop_grace:g} s"
        display.note(f"stopping: letting fetches in flight finish{within} (Ctrl-C again to abandon them)")

    thread = threading.Thread(target=crawl, name="niofetcher-crawl")
    with StopSignals(stop, "niofetcher: abandoned; rerun with the same --db to resume"):
        thread.start()
        while not finished.wait(0.25):
            display.update(crawler)
        thread.join()
    display.close(crawler)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return CrawlRun(outcome["summary"], interrupted.is_set())  # type: ignore[arg-type]


def print_summary(
    run: CrawlRun, max_pages: int | None = None, failures: Sequence[tuple[str, str]] = (), file: TextIO = sys.stdout,
) -> None:
    """The table printed at the end of a crawl: a headline that says why it ended, the counts (URLs that
    ended on an HTTP status as ``HTTP 404`` rows, apart from the ``error:`` rows), and ``failures``, the
    first URLs (url, why) that failed in this run."""
    summary = run.summary
    if not summary.stopped:
        headline = "crawl complete"
    elif max_pages is not None and not run.interrupted:
        # A rerun with the same budget would do nothing: it counts the URLs of every run.
        headline = (f"page budget of {max_pages} reached: {summary.counts['waiting']} URLs still waiting; "
                    f"rerun with the same --db and a larger --max-pages (or none) to go on")
    else:
        headline = "crawl stopped; rerun with the same --db to resume"
    rows = [(state, str(n)) for state, n in summary.counts.items()]
    # The URLs in 'error', by why: the server's answer ("http_404", a status the crawl keeps no page
    # of) apart from the errors proper, which got no usable answer -- as a record says it: a 404's
    # has status 404 and error null.
    rows += [(f"HTTP {kind.removeprefix('http_')}", str(n)) for kind, n in sorted(summary.errors.items())
             if kind.startswith("http_")]
    rows += [(f"error: {kind}", str(n)) for kind, n in sorted(summary.errors.items()) if not kind.startswith("http_")]
    # Links the trap rules refused (never URLs of the frontier: they are not among the states above),
    # by the option that refused them.
    rows += [(f"not followed: {cause}", str(n)) for cause, n in sorted(summary.refused.items())]
    if summary.duplicates:  # done, among the states above, with their links not followed
        rows.append(("duplicates this run", str(summary.duplicates)))
    if summary.unchanged:  # revisits that found their page unchanged: done again, not parsed
        rows.append(("unchanged this run", str(summary.unchanged)))
    if summary.due or summary.next_due is not None:  # a kept crawl (--revisit): when the next run has work
        rows.append(("due again now", str(summary.due)))
        if summary.next_due is not None:
            rows.append(("next due (UTC)", time.strftime("%Y-%m-%d %H:%M", time.gmtime(summary.next_due))))
    rows += [
        ("pages this run", str(summary.pages)),
        ("pages/s", f"{summary.pages_per_second:.0f}"),
        ("MB received", f"{summary.bytes / 1e6:.1f}"),
        ("seconds", f"{summary.seconds:.2f}"),
    ]
    width = max(len(name) for name, _ in rows)
    print(headline, file=file)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>10}", file=file)
    if failures:
        failed = max(sum(summary.errors.values()), len(failures))
        print(f"failed URLs (the first {len(failures)} of {failed} this run):" if failed > len(failures)
              else "failed URLs:", file=file)
        for url, why in failures:
            print(f"    {url}  {why}", file=file)

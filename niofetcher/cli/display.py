"""What a crawl run from the terminal shows while it runs: a progress bar, periodic lines, or nothing."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from ..crawl import Crawler


class Display:
    """A tqdm bar on a terminal, a line every few seconds otherwise, or nothing.

    Each shows, apart: URLs done, URLs failed, requests on the wire, the rest of what is in
    progress (claimed, not on the wire: queued in the fetcher for a connection, waiting for
    robots.txt, being parsed or recorded), URLs waiting in the frontier, and open connections.
    The rate is this run's: the URLs finished before it (``finished_before``) are left out.
    """

    def __init__(self, mode: str, finished_before: int = 0) -> None:
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.mode = mode
        self._before = finished_before
        # initial: tqdm's rate counts from it, not from 0.
        self._bar: tqdm | None = (
            tqdm(unit="page", dynamic_ncols=True, initial=finished_before) if mode == "bar" else None
        )
        self._next_line = time.monotonic() + 2.0

    def update(self, crawler: Crawler) -> None:
        p = crawler.progress()
        finished = p.done + p.errors
        other = max(0, p.in_flight - p.fetching)
        if self._bar is not None:
            self._bar.total = finished + p.in_flight + p.waiting
            self._bar.n = max(finished, self._before)  # counts arrive a moment after the start
            self._bar.set_postfix(errors=p.errors, fetching=p.fetching, queued_or_parsing=other,
                                  connections=p.open_connections, refresh=False)
            self._bar.refresh()
        elif self.mode == "lines" and time.monotonic() >= self._next_line:
            rate = max(0, finished - self._before) / p.seconds if p.seconds else 0.0
            print(f"{p.done} done, {p.errors} failed | {p.fetching} fetching, {other} queued or parsing | "
                  f"{p.waiting} waiting | {p.open_connections} connections | {rate:.0f} pages/s this run",
                  file=sys.stderr, flush=True)
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

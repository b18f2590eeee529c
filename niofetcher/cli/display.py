"""What a crawl run from the terminal shows while it runs: a progress bar, periodic lines, or nothing."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from ..crawl import Crawler

# The bar's line: the URLs finished (done or failed) of all those known, this run's rate and the
# open connections (the postfix).  The other numbers go on a line of their own below it: all of
# them as the bar's postfix left the bar one character at 80 columns (tqdm gives the bar what the
# rest of the line leaves).  No time left: the total grows as links are found, so an estimate
# would only mislead.
_BAR = "{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"


def _compact(n: int) -> str:
    """``n`` as it fits a line of 80 columns: ``9999`` as it is, ``12345`` as ``12.3k``."""
    return str(n) if n < 10_000 else tqdm.format_sizeof(n)


def _numbers(done: int, errors: int, waiting: int, refused: int, fetching: int, other: int) -> str:
    """The line below the bar.  The links the trap rules refused join it once there are some, in
    room the words "or parsing" make, and the queued go when even that is too long for 80 columns."""
    line = f"{_compact(done)} done, {_compact(errors)} failed, {_compact(waiting)} waiting"
    if not refused:
        return f"{line}; {fetching} fetching, {other} queued or parsing"
    line = f"{line}, {_compact(refused)} refused; {fetching} fetching"
    queued = f", {other} queued"
    return line + queued if len(line) + len(queued) < _COLUMNS else line


#: The narrowest terminal the lines must fit.
_COLUMNS = 80


class Display:
    """Two tqdm lines on a terminal (a bar, and the numbers below it), a line every few seconds
    otherwise, or nothing.

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
        self._bar: tqdm | None = None
        self._details: tqdm | None = None
        if mode == "bar":
            # initial: tqdm's rate counts from it, not from 0.
            self._bar = tqdm(unit=" pages", unit_scale=True, dynamic_ncols=True, initial=finished_before,
                             bar_format=_BAR, position=0)
            self._details = tqdm(bar_format="{desc}", dynamic_ncols=True, position=1)
        self._next_line = time.monotonic() + 2.0

    def update(self, crawler: Crawler) -> None:
        """Show where ``crawler`` stands: the bar redrawn, or a line when the last is 2 s old."""
        p = crawler.progress()
        finished = p.done + p.errors
        other = max(0, p.in_flight - p.fetching)
        if self._bar is not None and self._details is not None:
            self._bar.total = finished + p.in_flight + p.waiting
            self._bar.n = max(finished, self._before)  # counts arrive a moment after the start
            self._bar.set_postfix_str(f"{p.open_connections} connections", refresh=False)
            self._details.set_description_str(_numbers(p.done, p.errors, p.waiting, p.refused, p.fetching, other),
                                              refresh=False)
            self._bar.refresh()
            self._details.refresh()
        elif self.mode == "lines" and time.monotonic() >= self._next_line:
            rate = max(0, finished - self._before) / p.seconds if p.seconds else 0.0
            refused = f" | {p.refused} links not followed (traps)" if p.refused else ""
            print(f"{p.done} done, {p.errors} failed | {p.fetching} fetching, {other} queued or parsing | "
                  f"{p.waiting} waiting | {p.open_connections} connections | {rate:.0f} pages/s this run{refused}",
                  file=sys.stderr, flush=True)
            self._next_line = time.monotonic() + 2.0

    def note(self, text: str) -> None:
        """Print ``text`` as a line of its own on stderr (above the bar, which is drawn again below it)."""
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        elif self.mode != "none":
            print(text, file=sys.stderr, flush=True)

    def close(self, crawler: Crawler) -> None:
        """Draw the bar a last time with ``crawler``'s final numbers, and leave it on the screen."""
        if self._bar is not None and self._details is not None:
            self.update(crawler)
            self._bar.close()
            self._details.close()

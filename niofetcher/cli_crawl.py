"""The crawl command's side of a crawl: progress display, JSONL and WARC output, the summary table."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Optional, TextIO

from tqdm import tqdm
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from .crawler import CrawlConfig, CrawledPage, Crawler, CrawlSummary
from .urls import parse_target

_NOT_IN_WARC = frozenset(("content-encoding", "transfer-encoding", "content-length"))


class PageWriter:
    """Writes every crawled page to JSONL and/or WARC; called from the crawler's worker threads.

    WARC response records hold the body as the fetcher delivered it, decoded:
    Content-Encoding and Transfer-Encoding are left out of the stored head and
    Content-Length is the decoded length, so the record stays self-consistent.
    Raises OSError when a file cannot be opened.
    """

    def __init__(self, out_path: Optional[str], warc_path: Optional[str], user_agent: str) -> None:
        self._lock = threading.Lock()
        self._user_agent = user_agent
        self._out: Optional[TextIO] = None
        self._warc_file: Optional[io.BufferedWriter] = None
        self._warc: Optional[WARCWriter] = None
        try:
            if out_path:
                self._out = open(out_path, "a", encoding="utf-8")
            if warc_path:
                self._warc_file = open(warc_path, "ab")
                self._warc = WARCWriter(self._warc_file, gzip=warc_path.endswith(".gz"))
        except OSError:
            self.close()
            raise

    @property
    def writes(self) -> bool:
        """False when there is no file to write to: then the crawl needs no on_page at all."""
        return self._out is not None or self._warc is not None

    def __call__(self, page: CrawledPage) -> None:
        with self._lock:
            if self._out is not None:
                self._out.write(json.dumps(page_record(page)) + "\n")
            if self._warc is not None and page.result.status is not None:
                self._write_warc(page)

    def _write_warc(self, page: CrawledPage) -> None:
        assert self._warc is not None
        result = page.result
        target = parse_target(result.final_url)
        request_head = StatusAndHeaders(
            f"{result.bean.method} {target.path} HTTP/1.1",
            [("Host", target.host_header), ("User-Agent", self._user_agent)],
            is_http_request=True,
        )
        headers = [(k, v) for k, v in result.headers if k.lower() not in _NOT_IN_WARC]
        headers.append(("Content-Length", str(len(result.body))))
        response_head = StatusAndHeaders(f"{result.status} {result.reason}".strip(), headers, protocol="HTTP/1.1")
        request = self._warc.create_warc_record(result.final_url, "request", payload=io.BytesIO(b""),
                                                http_headers=request_head)
        response = self._warc.create_warc_record(result.final_url, "response", payload=io.BytesIO(result.body),
                                                 http_headers=response_head)
        self._warc.write_request_response_pair(request, response)

    def close(self) -> None:
        for handle in (self._out, self._warc_file):
            if handle is not None:
                handle.close()
        self._out = self._warc_file = None
        self._warc = None

    def __enter__(self) -> PageWriter:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()


def page_record(page: CrawledPage) -> dict[str, object]:
    """The JSONL record of one page."""
    result = page.result
    return {
        "url": result.url,
        "final_url": result.final_url,
        "status": result.status,
        "content_type": result.header("content-type"),
        "depth": page.depth,
        "parent": page.parent,
        "links": len(page.links.links) if page.links is not None else 0,
        "error": result.error.value if result.error is not None else None,
        "fetched_at": round(time.time(), 3),
    }


def run_crawl(config: CrawlConfig, on_page: Optional[PageWriter], progress: str = "auto") -> CrawlSummary:
    """Run a crawl in a thread while this one shows progress; Ctrl-C or SIGTERM stops it gracefully.

    The signals are taken by a handler (StopSignals), not as a KeyboardInterrupt
    out of ``Thread.join()``: on CPython before 3.13 a join interrupted that
    way can mark the still-running thread as stopped (threading.py,
    bpo-45274), and the crawl is then cut off at interpreter exit.  A later
    signal abandons the fetches in flight by leaving at once: the frontier is
    made for that (their rows are 'processing' and go back to 'waiting' on
    the next open).
    """
    # Without an on_page the parse processes send back only the links the crawl follows.
    crawler = Crawler(config, on_page if on_page is not None and on_page.writes else None)
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


_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None  # as signal.signal() has it


class StopSignals:
    """SIGINT and SIGTERM while a command runs: the first stops it, a later one abandons it.

    SIGTERM is what systemd, Docker and Kubernetes send to stop a service, so
    it means what Ctrl-C means.  A signal within REPEAT_WINDOW seconds of the
    first is the same stop, not a second one: ``timeout``, ``make`` and other
    wrappers forward a terminal's Ctrl-C to their whole process group, so one
    keypress can arrive twice.  A signal after that prints ``abandon`` and
    leaves at once, with status 130 as a KeyboardInterrupt would.  ``stop``
    runs in the main thread, between two bytecodes of whatever it was doing;
    it may raise (KeyboardInterrupt, for a command that unwinds on it).
    Outside the main thread (where Python cannot take signals) it does nothing.
    """

    REPEAT_WINDOW = 1.0
    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, stop: Callable[[], None], abandon: str) -> None:
        self._stop = stop
        self._abandon = abandon
        self._first: float | None = None  # time.monotonic() of the first signal
        self._previous: dict[int, _Handler] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = now
            self._stop()
        elif now - self._first >= self.REPEAT_WINDOW:
            print(self._abandon, file=sys.stderr, flush=True)
            os._exit(130)


class _Display:
    """A tqdm bar on a terminal, a line every few seconds otherwise, or nothing."""

    def __init__(self, mode: str) -> None:
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.mode = mode
        self._bar: Optional[tqdm] = tqdm(unit="page", dynamic_ncols=True) if mode == "bar" else None
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

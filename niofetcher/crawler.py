"""The crawler: frontier -> fetcher -> parse -> frontier, with fetching and parsing side by side.

Theory of operation.  Three kinds of thread take part:

- the fetcher's loop thread downloads;
- ``parse_workers`` worker threads drain the fetcher's results: each decides
  whether a result is final, parses HTML (in a process pool by default, so
  that parsing uses every core instead of fighting the loop for the GIL),
  calls ``on_page`` and reports back;
- the coordinator -- the thread that called ``run()`` -- owns the frontier
  (SQLite) and robots.txt state, claims URLs, registers them and records what
  the workers report.  Only it touches the database.

A URL becomes ``done`` only after ``on_page`` returned for it, so a crash never
loses a fetched page that the embedding program did not see.  The crawl ends
when the frontier has nothing waiting and nothing is in progress (claimed and
not yet reported); a URL waiting for a retry delay keeps it alive.

Politeness: robots.txt is fetched per (scheme, host, port) through the
fetcher itself before the first page of that origin; URLs of an origin wait
(in memory, still ``processing`` in the frontier) until it has arrived.  Its
Crawl-delay becomes that origin's host delay.  A robots.txt that cannot be
fetched (network error, 5xx) allows everything, as Scrapy does; a 4xx means
"no rules" (RFC 9309 2.3.1.3).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import email.utils
import logging
import multiprocessing
import queue
import re
import signal
import threading
import time
from collections import Counter
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence
from urllib.parse import urlsplit

from protego import Protego

from .config import FetcherConfig
from .errors import ErrorKind
from .fetcher import NIOFetcher
from .frontier import Frontier, FrontierURL
from .models import FetchResult, URLBean
from .parse import PageLinks, absolute_url, extract
from .urls import Origin, parse_target

log = logging.getLogger("niofetcher")

PARSE_MODES = ("process", "thread")
_ROBOTS_PRIORITY = 1 << 30  # robots.txt jumps every queue: pages of its host wait for it


@dataclass(frozen=True)
class CrawlConfig:
    """What to crawl and how.  Invalid values raise ValueError."""

    seeds: Sequence[str]
    db_path: str = ":memory:"
    max_pages: Optional[int] = None
    max_depth: Optional[int] = None
    allowed_domains: Optional[Sequence[str]] = None  # None: the seeds' hosts; subdomains included
    include: Sequence[str] = ()  # regexes; when given, a URL must match one to be followed
    exclude: Sequence[str] = ()  # regexes; a URL matching one is not followed
    max_attempts: int = 3
    retry_statuses: Sequence[int] = (429, 500, 502, 503, 504)
    retry_delay: float = 1.0
    obey_robots: bool = True
    follow_nofollow: bool = False
    parse_workers: int = 2
    parse_mode: str = "process"
    extractor: str = "bs4"
    fetcher: FetcherConfig = field(default_factory=FetcherConfig)

    def __post_init__(self) -> None:
        if isinstance(self.seeds, str) or not self.seeds:
            raise ValueError("seeds must be a non-empty sequence of URLs")
        for seed in self.seeds:
            parse_target(seed)  # raises ValueError for a bad seed
        for name in ("max_pages", "max_depth"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a non-negative int or None, not {value!r}")
        for name in ("max_attempts", "parse_workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, not {value!r}")
        if self.parse_mode not in PARSE_MODES:
            raise ValueError(f"parse_mode must be one of {PARSE_MODES}, not {self.parse_mode!r}")
        if self.extractor not in ("bs4", "lxml"):
            raise ValueError(f"extractor must be 'bs4' or 'lxml', not {self.extractor!r}")
        if not self.retry_delay > 0:
            raise ValueError(f"retry_delay must be positive, not {self.retry_delay!r}")
        for pattern in (*self.include, *self.exclude):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad include/exclude pattern {pattern!r}: {exc}") from None
        if not isinstance(self.fetcher, FetcherConfig):
            raise ValueError("fetcher must be a FetcherConfig")


@dataclass(slots=True)
class CrawledPage:
    """What ``on_page`` receives: the final fetch of one URL, its place in the crawl and its links."""

    result: FetchResult
    depth: int
    parent: Optional[str]
    links: Optional[PageLinks]  # None unless the page was HTML and fetched

    @property
    def url(self) -> str:
        return self.result.url


@dataclass(frozen=True, slots=True)
class CrawlSummary:
    """How a run ended: URLs per frontier state, errors per kind, speed."""

    counts: dict[str, int]
    errors: dict[str, int]
    pages: int  # pages finished (done or error) in this run
    bytes: int
    seconds: float
    stopped: bool  # URLs are still waiting (stop() or max_pages): rerun with the same db_path to go on

    @property
    def pages_per_second(self) -> float:
        return self.pages / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class CrawlProgress:
    """A snapshot for progress displays."""

    done: int
    errors: int
    in_flight: int
    waiting: int
    seconds: float


# Reports from the workers to the coordinator.
@dataclass(slots=True)
class _Finished:
    url: str
    result: FetchResult
    links: Optional[PageLinks]
    final: bool  # False: a retryable failure, try again later
    failure: str = ""  # parsing or on_page raised: the URL ends in 'error' with this reason


@dataclass(slots=True)
class _Robots:
    origin: Origin
    result: FetchResult


class Crawler:
    """Crawls from ``config.seeds`` until nothing is left (or ``max_pages``, or ``stop()``)."""

    def __init__(self, config: CrawlConfig, on_page: Optional[Callable[[CrawledPage], None]] = None) -> None:
        self.config = config
        self.on_page = on_page
        self._stop = threading.Event()
        self._fetcher_closed = threading.Event()  # set once every result has been delivered
        self._reports: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._include = [re.compile(p) for p in config.include]
        self._exclude = [re.compile(p) for p in config.exclude]
        domains = config.allowed_domains
        if domains is None:
            domains = [parse_target(seed).origin.host for seed in config.seeds]
        self._domains = tuple(d.lower().lstrip(".") for d in domains)
        self._robots: dict[Origin, Optional[Protego]] = {}
        self._held: dict[Origin, list[FrontierURL]] = {}  # URLs waiting for their origin's robots.txt
        self._in_progress: dict[str, FrontierURL] = {}
        self._started = 0.0
        self._finished = 0
        self._bytes = 0
        self._errors: Counter[str] = Counter()
        self._counts: dict[str, int] = {}
        self._fetcher: Optional[NIOFetcher] = None  # while run() runs

    # -- any thread -----------------------------------------------------------

    def stop(self) -> None:
        """Graceful stop, from any thread: in-flight fetches finish, the rest stays waiting for a resume."""
        self._stop.set()
        fetcher = self._fetcher
        if fetcher is not None:
            fetcher.cancel_pending()  # registered but not started: cancelled, then released by _record

    def progress(self) -> CrawlProgress:
        counts = self._counts
        return CrawlProgress(
            done=counts.get("done", 0), errors=counts.get("error", 0), in_flight=len(self._in_progress),
            waiting=counts.get("waiting", 0), seconds=time.monotonic() - self._started if self._started else 0.0,
        )

    # -- the run ----------------------------------------------------------------

    def run(self) -> CrawlSummary:
        config = self.config
        self._started = time.monotonic()
        with Frontier(config.db_path, max_attempts=config.max_attempts, retry_delay=config.retry_delay) as frontier:
            frontier.add(config.seeds, depth=0)
            # Redirects are links the crawler follows itself, through scope and robots.txt like any other.
            fetcher_config = dataclasses.replace(config.fetcher, follow_redirects=False)
            window = min(5000, max(64, 2 * fetcher_config.max_connections))
            with self._parse_pool() as pool, NIOFetcher(fetcher_config) as fetcher:
                self._fetcher = fetcher
                # With parse processes, a worker thread mostly waits for its parse: two per process keep
                # every process busy while the other thread ships a page or hands one to on_page.
                threads = config.parse_workers * (2 if pool is not None else 1)
                workers = [
                    threading.Thread(target=self._work, args=(fetcher, pool), name=f"niofetcher-crawl-worker-{i}")
                    for i in range(threads)
                ]
                for worker in workers:
                    worker.start()
                try:
                    self._coordinate(frontier, fetcher, window)
                finally:
                    self._stop.set()
                    fetcher.shutdown(wait=False)
                    self._fetcher_closed.set()
                    for worker in workers:
                        worker.join()
                    self._drain_reports(frontier, fetcher)
                    if self._in_progress:  # only after a failure: give them back, nothing fetched is lost
                        frontier.release(list(self._in_progress))
                        self._in_progress.clear()
            self._counts = frontier.counts()
            stopped = self._counts["waiting"] > 0
        return CrawlSummary(
            counts=dict(self._counts), errors=dict(self._errors), pages=self._finished, bytes=self._bytes,
            seconds=time.monotonic() - self._started, stopped=stopped,
        )

    def _parse_pool(self) -> contextlib.AbstractContextManager[Optional[concurrent.futures.Executor]]:
        """Processes for parsing, or None: in thread mode each worker parses in its own thread."""
        if self.config.parse_mode == "thread":
            return contextlib.nullcontext(None)
        # forkserver, not fork: forking a process whose other threads hold locks can hang the child.
        context = multiprocessing.get_context("forkserver")
        # The parse processes share the terminal's process group: Ctrl-C reaches them too, and is the
        # parent's to handle (a graceful stop), not a KeyboardInterrupt that kills a parse process.
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=self.config.parse_workers, mp_context=context, initializer=_ignore_sigint
        )
        for future in [pool.submit(_warm_up) for _ in range(self.config.parse_workers)]:
            future.result()  # start the processes now, before the fetcher's threads exist
        return pool

    def _coordinate(self, frontier: Frontier, fetcher: NIOFetcher, window: int) -> None:
        config = self.config
        budget = None
        self._counts = frontier.counts()
        if config.max_pages is not None:
            budget = max(0, config.max_pages - self._counts["done"] - self._counts["error"])
        counted_at = time.monotonic()
        cancelled = False
        while True:
            if self._stop.is_set() and not cancelled:
                fetcher.cancel_pending()  # again: what _start registered while stop() was being called
                cancelled = True
            if not self._stop.is_set():
                room = window - len(self._in_progress)
                if budget is not None:
                    room = min(room, budget)
                # Claim in batches, not one URL per report: a claim is a transaction.
                if room > 0 and (room >= window // 4 or not self._in_progress):
                    claimed = frontier.claim(room, max_depth=self._layer(frontier))
                    if budget is not None:
                        budget -= len(claimed)
                    for item in claimed:
                        self._start(item, frontier, fetcher)
            if time.monotonic() - counted_at > 0.5:  # counts() commits pending outcomes: not per report
                self._counts = frontier.counts()
                counted_at = time.monotonic()
            if not self._in_progress:
                if self._stop.is_set() or budget == 0:
                    return
                due = frontier.next_due()
                if due is None:
                    return  # nothing waiting, nothing in progress: the crawl is complete
                wait = min(1.0, max(0.0, due - time.time()))
            else:
                wait = 0.2
            try:
                report = self._reports.get(timeout=wait)
            except queue.Empty:
                continue
            self._drain_reports(frontier, fetcher, [report])

    def _layer(self, frontier: Frontier) -> Optional[int]:
        """With max_depth, the deepest depth that may be claimed now: the crawl goes breadth-first in
        layers, so that no page of depth d+1 starts before every page of depth d has reported its links,
        and each URL is first found on a shortest path (its depth is its distance from the seeds)."""
        if self.config.max_depth is None:
            return None
        if self._in_progress:
            return min(item.depth for item in self._in_progress.values())
        return frontier.min_due_depth()

    def _drain_reports(self, frontier: Frontier, fetcher: NIOFetcher, reports: Optional[list[object]] = None) -> None:
        """Record every report that has arrived, in one frontier transaction for all their new links."""
        reports = reports or []
        while True:
            try:
                reports.append(self._reports.get_nowait())
            except queue.Empty:
                break
        links: list[tuple[str, int, Optional[str], int]] = []
        finished: list[_Finished] = []
        for report in reports:
            if isinstance(report, _Robots):
                self._robots_arrived(report, frontier, fetcher)
            else:
                assert isinstance(report, _Finished)
                item = self._in_progress.get(report.url)
                if item is not None and report.links is not None and report.final and not report.failure:
                    links.extend(self._followed(report.links, item))
                finished.append(report)
        if links:
            frontier.add_many(links)  # before the pages complete: a crash re-fetches, never loses
        for report in finished:
            self._record(report, frontier)

    # -- coordinator: starting URLs ---------------------------------------------

    def _start(self, item: FrontierURL, frontier: Frontier, fetcher: NIOFetcher) -> None:
        origin = parse_target(item.url).origin
        if self.config.obey_robots:
            if origin not in self._robots:
                self._in_progress[item.url] = item
                held = self._held.get(origin)
                if held is not None:
                    held.append(item)
                    return
                self._held[origin] = [item]
                robots_url = f"{origin.scheme}://{_host_port(origin)}/robots.txt"
                if not fetcher.register(URLBean(robots_url, priority=_ROBOTS_PRIORITY, meta={"robots": origin})):
                    self._release_held(origin, frontier, fetcher)
                return
            rules = self._robots[origin]
            if rules is not None and not rules.can_fetch(item.url, self.config.fetcher.user_agent):
                self._in_progress.pop(item.url, None)
                frontier.fail(item.url, "disallowed by robots.txt", retry=False)
                self._errors["robots_disallowed"] += 1
                return
        if self._stop.is_set() or not fetcher.register(
            URLBean(item.url, priority=item.priority, meta={"frontier": item})
        ):
            self._in_progress.pop(item.url, None)
            frontier.release([item.url])  # stopping: the URL waits for a resume
            return
        self._in_progress[item.url] = item

    def _release_held(self, origin: Origin, frontier: Frontier, fetcher: NIOFetcher) -> None:
        """robots.txt of ``origin`` is known (or given up on): start what waited for it."""
        self._robots.setdefault(origin, None)
        for item in self._held.pop(origin, ()):
            del self._in_progress[item.url]
            self._start(item, frontier, fetcher)

    # -- workers ----------------------------------------------------------------

    def _work(self, fetcher: NIOFetcher, pool: Optional[concurrent.futures.Executor]) -> None:
        """Worker thread: drain results, parse, hand pages to on_page, report to the coordinator."""
        config = self.config
        while True:
            result = fetcher.get(timeout=0.1)
            if result is None:
                if self._fetcher_closed.is_set():
                    return  # shut down and drained: nothing can come any more
                continue
            meta = result.bean.meta
            if "robots" in meta:
                self._reports.put(_Robots(meta["robots"], result))
                continue
            item: FrontierURL = meta["frontier"]
            retryable = result.error is not None and result.error is not ErrorKind.CANCELLED
            retryable = retryable or (result.status in config.retry_statuses)
            if result.error is ErrorKind.CANCELLED or (retryable and item.attempts < config.max_attempts):
                self._reports.put(_Finished(item.url, result, None, final=False))
                continue
            try:
                links = self._parse(result, pool)
                if self.on_page is not None:
                    self.on_page(CrawledPage(result, item.depth, item.parent, links))
            except Exception as exc:  # noqa: BLE001 - the coordinator must hear of every URL, whatever breaks
                log.exception("crawling %s failed after the fetch", item.url)
                failure = f"{type(exc).__name__}: {exc}"
                self._reports.put(_Finished(item.url, result, None, final=True, failure=failure))
                continue
            self._reports.put(_Finished(item.url, result, links, final=True))

    def _parse(self, result: FetchResult, pool: Optional[concurrent.futures.Executor]) -> Optional[PageLinks]:
        if _is_redirect(result):
            target = absolute_url(result.header("location") or "", result.url)
            return PageLinks([target] if target else [], [], [], [], [], [], None, frozenset())
        if not (result.ok and _is_html(result)):
            return None
        args = (result.body, result.final_url, result.header("content-type"), self.config.extractor)
        if pool is not None:
            try:
                return pool.submit(extract, *args).result()
            except (BrokenProcessPool, RuntimeError) as exc:  # a parse process died, or the pool was shut
                log.error("parse pool unusable (%s); parsing %s in this thread", exc, result.final_url)
        return extract(*args)

    # -- coordinator: recording outcomes ------------------------------------------

    def _record(self, report: _Finished, frontier: Frontier) -> None:
        item = self._in_progress.pop(report.url, None)
        if item is None:
            return
        result = report.result
        if not report.final:
            if result.error is ErrorKind.CANCELLED:
                frontier.release([item.url])  # not the URL's fault: the attempt does not count
            else:
                frontier.fail(item.url, _error_text(result), status=result.status, retry=True,
                              retry_after=_retry_after(result))
            return
        self._finished += 1
        self._bytes += len(result.body)
        if report.failure:
            self._errors["on_page_failed"] += 1
            frontier.fail(item.url, report.failure, status=result.status, retry=False)
        elif result.ok or _is_redirect(result):
            frontier.complete(item.url, result.status)
        else:
            self._errors[result.error.value if result.error is not None else f"http_{result.status}"] += 1
            frontier.fail(item.url, _error_text(result), status=result.status, retry=False)

    def _robots_arrived(self, report: _Robots, frontier: Frontier, fetcher: NIOFetcher) -> None:
        result = report.result
        rules = None
        if result.ok:
            rules = Protego.parse(result.text)
            delay = rules.crawl_delay(self.config.fetcher.user_agent)
            if delay:
                fetcher.set_host_delay(f"{report.origin.scheme}://{_host_port(report.origin)}/", float(delay))
        self._robots[report.origin] = rules
        self._release_held(report.origin, frontier, fetcher)

    def _followed(self, links: PageLinks, item: FrontierURL) -> list[tuple[str, int, Optional[str], int]]:
        """The frontier entries for the links of ``item`` that the crawl follows."""
        depth = item.depth + 1
        max_depth = self.config.max_depth
        if max_depth is not None and depth > max_depth:
            return []
        skip = frozenset() if self.config.follow_nofollow else links.nofollow
        return [
            (url, depth, item.url, 0)
            for url in (*links.links, *links.areas, *links.frames)
            if url not in skip and self._in_scope(url)
        ]

    def _in_scope(self, url: str) -> bool:
        host = (urlsplit(url).hostname or "").rstrip(".")
        if not any(host == d or host.endswith("." + d) for d in self._domains):
            return False
        if self._include and not any(p.search(url) for p in self._include):
            return False
        return not any(p.search(url) for p in self._exclude)


def _ignore_sigint() -> None:
    """Runs first in each parse process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _warm_up() -> None:
    """Runs once in each parse process so that it is started (and has imported bs4) before the crawl."""


def _is_redirect(result: FetchResult) -> bool:
    return result.error is None and result.status in (301, 302, 303, 307, 308) and bool(result.header("location"))


def _is_html(result: FetchResult) -> bool:
    content_type = (result.header("content-type") or "").lower()
    if content_type:
        return "html" in content_type
    return result.body.lstrip()[:1] == b"<"


def _retry_after(result: FetchResult) -> Optional[float]:
    """Seconds from a Retry-After header: delta-seconds or an HTTP date (RFC 9110 10.2.3)."""
    value = result.header("retry-after")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_text(result: FetchResult) -> str:
    if result.error is not None:
        return f"{result.error.value}: {result.error_detail}"
    return f"HTTP {result.status} {result.reason}".strip()


def _host_port(origin: Origin) -> str:
    host = f"[{origin.host}]" if ":" in origin.host else origin.host
    return f"{host}:{origin.port}"

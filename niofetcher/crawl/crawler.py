"""The crawler: frontier -> fetcher -> parse -> frontier, with fetching and parsing side by side.

Theory of operation.  Pages travel through the crawler in batches, never one
at a time: handing one page from a thread to another costs a wake-up and a
GIL hand-off (and, to a parse process, a pickling round trip and a future),
and at a thousand pages a second those hand-offs, not the work, set the pace.
The threads are:

- the fetcher's loop thread downloads;
- the *pump* takes every result the fetcher has finished, in one go, and
  sends each on its way: robots.txt answers and fetches to retry go straight
  to the coordinator, HTML pages to the parse executor in a few chunks (one
  job per chunk, so that every parse worker gets a share), redirects and
  other final pages on without parsing;
- the parse executor -- ``parse_workers`` processes by default, so that
  parsing uses every core instead of fighting the loop for the GIL, or
  threads -- extracts each page's links and filters them there: scope,
  include/exclude patterns, nofollow, duplicates.  A job carries only the
  bodies, final URLs and Content-Types of its pages; it brings back the
  followed URLs, and the whole PageLinks only when an ``on_page`` will see it;
- ``parse_workers`` delivery threads call ``on_page`` for every page of a
  batch, then ``output.prepare`` (a CrawlOutput builds its records in
  memory), and pass the batch on (without an ``on_page`` or an ``output``
  there are none, and batches go to the coordinator directly);
- the coordinator -- the thread that called ``run()`` -- owns the frontier
  (SQLite) and robots.txt state, claims URLs, registers them and records the
  batches that came back: the new links of all of them in one frontier call,
  their completions in another.  Only it touches the database.

A URL becomes ``done`` only after ``on_page`` returned for it, so a crash never
loses a fetched page that the embedding program did not see; a page's links
are in the frontier before it is ``done``, so a crash never loses them
either.  Outputs are exactly once: the coordinator has the output write and
fsync a batch's records (``commit``) before it records the batch's outcomes,
and stores the files' lengths with those outcomes, in the same transaction
(``complete_many(checkpoint=...)``); a run starts by cutting each file back
to the stored lengths (``restore``).  Whatever stops a crawl, a URL is
``done`` exactly when its record is within the committed length: a record
written for a URL not yet ``done`` is cut away, and written again when the
URL is.

Errors: an I/O error of the frontier (``FrontierError``: "database or disk
is full: ...") or of the output (``OSError``) ends the crawl with what is in
progress given back (where the database still works), and ``run()`` raises
that very exception, logged nowhere: it is a condition to report in one
line, not a bug.  Anything else that breaks a crawl thread is logged with its
traceback and raised as a RuntimeError.  The crawl ends when the frontier has nothing waiting and nothing is
in progress (claimed and not yet recorded: in the fetcher, in a parse job or
with ``on_page``); a URL waiting for a retry delay keeps it alive.

Politeness: robots.txt is fetched per (scheme, host, port) through the
fetcher itself before the first page of that origin, and read as RFC 9309
says (see ``robots.py``): its redirects are followed, up to five, even to
another host; a 4xx means "no rules"; a 5xx or a network error means
"complete disallow" for now.  URLs of an origin wait (in memory, still
``processing`` in the frontier) until its robots.txt has been settled.  An
unreachable robots.txt is fetched again with the crawl's own retry policy
(``retry_delay``, doubling, never sooner than a Retry-After), up to
``max_attempts`` fetches; then every URL of that origin ends ``error``
("robots.txt unavailable: HTTP 503").  Its Crawl-delay becomes that origin's
host delay, capped at ``max_crawl_delay`` (as Heritrix's
``respectCrawlDelayUpToSeconds``): a ``Crawl-delay: 3600`` must not stall a
crawl for an hour a page.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import email.utils
import functools
import heapq
import logging
import queue
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import (
    NamedTuple,
    Protocol,
)
from urllib.parse import urlsplit

from ..config import FetcherConfig
from ..errors import ErrorKind
from ..fetcher import NIOFetcher
from ..models import FetchResult, URLBean
from ..urls import Origin, normal_host, parse_target
from .frontier import Frontier, FrontierError, FrontierURL
from .parse import PageLinks, absolute_url, extract, is_html_type
from .robots import Redirect, RobotsRules, RobotsTable, interpret
from .workers import ParseProcessPool

log = logging.getLogger("niofetcher")

PARSE_MODES = ("process", "thread")
_ROBOTS_PRIORITY = 1 << 30  # robots.txt jumps every queue: pages of its host wait for it
# Origins whose robots.txt rules are kept (and that have nothing in progress): a few thousand
# Protego parsers are a few MB; a crawl of more hosts than that fetches an aged-out one again.
_ROBOTS_ORIGINS = 4096
# The failures of storage that end a crawl as they are (one line for the user), without a traceback.
_IO_ERRORS = (FrontierError, sqlite3.Error, OSError)


@dataclass(frozen=True)
class CrawlConfig:
    """What to crawl and how.  Invalid values raise ValueError."""

    seeds: Sequence[str]
    db_path: str = ":memory:"
    max_pages: int | None = None
    max_depth: int | None = None
    allowed_domains: Sequence[str] | None = None  # None: the seeds' hosts; subdomains included
    include: Sequence[str] = ()  # regexes; when given, a URL must match one to be followed
    exclude: Sequence[str] = ()  # regexes; a URL matching one is not followed
    max_attempts: int = 3
    retry_statuses: Sequence[int] = (429, 500, 502, 503, 504)
    retry_delay: float = 1.0
    obey_robots: bool = True
    max_crawl_delay: float = 30.0  # seconds; a longer robots.txt Crawl-delay is capped to it
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
        max_crawl_delay = self.max_crawl_delay
        if isinstance(max_crawl_delay, bool) or not isinstance(max_crawl_delay, (int, float)) or not (
            0 <= max_crawl_delay < float("inf")
        ):
            raise ValueError(f"max_crawl_delay must be a non-negative number of seconds, not {max_crawl_delay!r}")
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
    parent: str | None
    links: PageLinks | None  # None unless the page was HTML and fetched

    @property
    def url(self) -> str:
        return self.result.url


class CrawlOutput(Protocol):
    """Files that must hold exactly one record per recorded URL, whatever stops the crawl."""

    def prepare(self, page: CrawledPage) -> None:
        """A delivery thread: build this page's record and keep it in memory (no I/O)."""

    def commit(self, urls: Sequence[str]) -> dict[str, int]:
        """The coordinator: write the prepared records of these URLs (one batch), flush and fsync;
        return each file's end offset (the checkpoint stored with the batch's outcomes)."""

    def restore(self, offsets: Mapping[str, int]) -> None:
        """Once, in run() before anything is fetched: cut each file back to its committed offset
        (what to do with a file missing from ``offsets`` -- a first run -- is the output's choice)."""


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


@dataclass(frozen=True, slots=True)
class LinkScope:
    """Which links of a page the crawl follows.  Plain data: it travels to the parse processes."""

    domains: tuple[str, ...]  # a link's host must be one of these or a subdomain of one
    include: tuple[str, ...] = ()  # regexes; when given, a link must match one
    exclude: tuple[str, ...] = ()  # regexes; a link matching one is not followed
    follow_nofollow: bool = False

    def followed(self, links: PageLinks) -> list[str]:
        """The page's links, image-map areas and frames that the crawl follows, each once, in page order."""
        skip = frozenset() if self.follow_nofollow else links.nofollow
        candidates = dict.fromkeys((*links.links, *links.areas, *links.frames))
        return [url for url in candidates if url not in skip and self.in_scope(url)]

    def in_scope(self, url: str) -> bool:
        netloc = _NETLOC.match(url)
        if netloc is None or not _host_allowed(self.domains, netloc.group(1)):
            return False
        include = _compiled(self.include)
        if include and not any(p.search(url) for p in include):
            return False
        return not any(p.search(url) for p in _compiled(self.exclude))


# A real page links to a few hosts a hundred times: the host check is made once per netloc.
_NETLOC = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://([^/?#]*)")


@functools.lru_cache(maxsize=4096)
def _host_allowed(domains: tuple[str, ...], netloc: str) -> bool:
    try:
        # A-labels on both sides: a page may spell its links' hosts in Unicode or in punycode.
        host = normal_host(urlsplit("//" + netloc).hostname or "")
    except ValueError:  # a broken IPv6 literal, a name IDNA cannot encode
        return False
    return any(host == d or host.endswith("." + d) for d in domains)


@functools.lru_cache(maxsize=16)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


# A parse job's page: what extract() needs of a FetchResult and nothing else (body, final URL, Content-Type) ...
ParseInput = tuple[bytes, str, str | None]
# ... and what comes back: the followed URLs, the PageLinks when asked for, why parsing failed ("": it did not).
ParseOutput = tuple[list[str], PageLinks | None, str]


def parse_pages(pages: list[ParseInput], extractor: str, scope: LinkScope, keep_links: bool) -> list[ParseOutput]:
    """One parse job, run in a parse process (or thread): the links of each page, filtered by ``scope``.

    Without ``keep_links`` only the links are extracted (no images, forms, tables, title): nobody
    would see the rest.  A page that cannot be parsed fails alone, with its reason; the rest of
    the job goes on.
    """
    outputs: list[ParseOutput] = []
    for body, url, content_type in pages:
        try:
            links = extract(body, url, content_type, extractor, links_only=not keep_links)
            outputs.append((scope.followed(links), links if keep_links else None, ""))
        except Exception as exc:
            log.exception("parsing %s failed", url)
            outputs.append(([], None, f"{type(exc).__name__}: {exc}"))
    return outputs


@dataclass(slots=True)
class _Page:
    """One fetch of a claimed URL, on its way from the fetcher to the coordinator."""

    item: FrontierURL
    result: FetchResult
    final: bool  # False: cancelled, or a retryable failure with attempts left -- it is tried again later
    links: PageLinks | None = None  # what on_page sees
    followed: list[str] = field(default_factory=list)  # links the crawl follows (in scope)
    failure: str = ""  # parsing or on_page raised: the URL ends in 'error' with this reason


@dataclass(slots=True)
class _Robots:
    origin: Origin  # whose robots.txt this is
    result: FetchResult
    hops: int  # redirects followed to get here


class _Job(NamedTuple):
    """The arguments of one parse_pages() call."""

    pages: list[ParseInput]
    extractor: str
    scope: LinkScope
    keep_links: bool


# Reports to the coordinator: a robots.txt fetch, or a batch of pages.
@dataclass(slots=True)
class _Broken:
    """A crawl thread or a parse callback died: the coordinator must end the crawl, not wait for ever."""

    where: str
    error: BaseException


_Report = _Robots | list[_Page] | _Broken

# Pages per parse job, at most: enough to make a job's overhead small, few enough that a job of
# large real pages (bs4: tens of ms each) does not hold its pages back for long.
_MAX_JOB_PAGES = 32


class Crawler:
    """Crawls from ``config.seeds`` until nothing is left (or ``max_pages``, or ``stop()``)."""

    def __init__(
        self, config: CrawlConfig, on_page: Callable[[CrawledPage], None] | None = None,
        output: CrawlOutput | None = None,
    ) -> None:
        self.config = config
        self.on_page = on_page
        self.output = output
        self._stop = threading.Event()
        self._fetcher_closed = threading.Event()  # set once every result has been delivered
        self._reports: queue.SimpleQueue[_Report] = queue.SimpleQueue()
        self._deliveries: queue.SimpleQueue[list[_Page] | None] = queue.SimpleQueue()  # None: stop
        domains = config.allowed_domains
        if domains is None:
            domains = [parse_target(seed).origin.host for seed in config.seeds]
        self._scope = LinkScope(
            domains=tuple(normal_host(d.lstrip(".")) for d in domains), include=tuple(config.include),
            exclude=tuple(config.exclude), follow_nofollow=config.follow_nofollow,
        )
        self._active: Counter[Origin] = Counter()  # URLs of each origin in the fetcher or after it
        self._robots = RobotsTable(_ROBOTS_ORIGINS, busy=self._active.__contains__)
        self._held: dict[Origin, list[FrontierURL]] = {}  # URLs waiting for their origin's robots.txt
        self._robots_fetches: dict[Origin, int] = {}  # fetches of an unreachable robots.txt so far
        self._robots_retries: list[tuple[float, Origin]] = []  # heap: when to fetch robots.txt again
        self._in_progress: dict[str, FrontierURL] = {}
        self._started = 0.0
        self._finished = 0
        self._bytes = 0
        self._errors: Counter[str] = Counter()
        self._counts: dict[str, int] = {}
        self._fetcher: NIOFetcher | None = None  # while run() runs
        self._pool_broken = False  # a parse process died: parsing goes on in this process

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
            if self.output is not None:
                self.output.restore(frontier.checkpoint())
                # Recorded now, not with the first batch: an output that appends to what it found must
                # not see this run's first records appended a second time after a crash.
                frontier.complete_many([], checkpoint=self.output.commit([]))
            frontier.add(config.seeds, depth=0)
            # Redirects are links the crawler follows itself, through scope and robots.txt like any other.
            fetcher_config = dataclasses.replace(config.fetcher, follow_redirects=False)
            window = min(5000, max(64, 2 * fetcher_config.max_connections))
            with self._parse_executor() as executor, NIOFetcher(fetcher_config) as fetcher:
                self._fetcher = fetcher
                threads = [self._thread("niofetcher-crawl-pump", self._pump, fetcher, executor)]
                if self._delivering:
                    threads += [
                        self._thread(f"niofetcher-crawl-deliver-{i}", self._deliver)
                        for i in range(config.parse_workers)
                    ]
                for thread in threads:
                    thread.start()
                error: BaseException | None = None
                try:
                    self._coordinate(frontier, fetcher, window)
                except BaseException as exc:
                    error = exc
                    raise
                finally:
                    try:
                        with _cleaning_up_after(error):
                            self._wind_down(fetcher, executor, threads)
                            self._drain_reports(frontier, fetcher)
                    finally:
                        if self._in_progress:  # only after a failure: give them back, nothing fetched is lost
                            with _cleaning_up_after(error):
                                frontier.release(list(self._in_progress))
                            self._in_progress.clear()
            self._counts = frontier.counts()
            stopped = self._counts["waiting"] > 0
        return CrawlSummary(
            counts=dict(self._counts), errors=dict(self._errors), pages=self._finished, bytes=self._bytes,
            seconds=time.monotonic() - self._started, stopped=stopped,
        )

    def _thread(self, name: str, work: Callable[..., None], *args: object) -> threading.Thread:
        """A crawl thread that, should it die, tells the coordinator at once instead of leaving it waiting."""

        def guarded() -> None:
            try:
                work(*args)
            except BaseException as exc:
                if not isinstance(exc, _IO_ERRORS):  # an I/O error is raised by run() as it is
                    log.exception("%s died", name)
                self._reports.put(_Broken(name, exc))

        return threading.Thread(target=guarded, name=name)

    def _parse_executor(self) -> concurrent.futures.Executor:
        """Processes for parsing, or threads in thread mode."""
        workers = self.config.parse_workers
        if self.config.parse_mode == "thread":
            return concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="niofetcher-crawl-parse")
        # Processes on niofetcher's own entry point: they never import the user's __main__, so a
        # crawl script needs no __main__ guard.  They start now and import this module (and so
        # bs4 and lxml) while robots.txt and the seeds are fetched.
        return ParseProcessPool(workers, preload=(__name__,))

    def _wind_down(
        self, fetcher: NIOFetcher, executor: concurrent.futures.Executor, threads: list[threading.Thread]
    ) -> None:
        """Stop fetching, and let every page fetched so far reach the reports queue."""
        self._stop.set()
        fetcher.shutdown(wait=False)  # whatever was not fetched yet comes back cancelled
        self._fetcher_closed.set()
        pump, *deliverers = threads
        try:
            pump.join()
            executor.shutdown(wait=True)  # every job submitted is parsed, and its pages handed over
        finally:
            # Even when a second Ctrl-C breaks the wait above: a delivery thread left waiting
            # for its sentinel would keep the interpreter from ever exiting.
            for _ in deliverers:
                self._deliveries.put(None)
        for thread in deliverers:
            thread.join()

    def _coordinate(self, frontier: Frontier, fetcher: NIOFetcher, window: int) -> None:
        config = self.config
        budget = None
        self._counts = frontier.counts()
        if config.max_pages is not None:
            budget = max(0, config.max_pages - self._counts["done"] - self._counts["error"])
        counted_at = time.monotonic()
        cancelled = False
        while True:
            failure = fetcher.failure
            if failure is not None:
                # The loop thread died: every URL it held comes back cancelled, nothing more will
                # be fetched, and run() gives back what is in progress.
                raise RuntimeError(f"niofetcher loop failed: {type(failure).__name__}: {failure}")
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
            robots_due = self._retry_robots(frontier, fetcher)
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
                wait = 0.2 if robots_due is None else min(0.2, max(0.0, robots_due - time.monotonic()))
            try:
                report = self._reports.get(timeout=wait)
            except queue.Empty:
                continue
            self._drain_reports(frontier, fetcher, [report])

    def _layer(self, frontier: Frontier) -> int | None:
        """With max_depth, the deepest depth that may be claimed now: the crawl goes breadth-first in
        layers, so that no page of depth d+1 starts before every page of depth d has reported its
        links, and each URL is first found on a shortest path -- max_depth cuts by distance from the
        seeds, never by the order parses finished in.

        Only with max_depth: a layer waits for its slowest page, so one host's 30-second Crawl-delay
        would hold every other host back.  Without it a URL found again on a shorter path takes the
        shorter depth (add_many), which leaves a depth too deep only below a page already done.
        URLs waiting for their host's robots.txt do not hold a layer back either: a robots.txt
        answering 503 may be retried minutes later."""
        if self.config.max_depth is None:
            return None
        held = {item.url for items in self._held.values() for item in items}
        depths = [item.depth for url, item in self._in_progress.items() if url not in held]
        if depths:
            return min(depths)
        return frontier.min_due_depth()

    def _drain_reports(self, frontier: Frontier, fetcher: NIOFetcher, reports: list[_Report] | None = None) -> None:
        """Record every report that has arrived: robots.txt rules, then all the pages at once."""
        reports = reports or []
        while True:
            try:
                reports.append(self._reports.get_nowait())
            except queue.Empty:
                break
        pages: list[_Page] = []
        broken: list[_Broken] = []
        for report in reports:
            if isinstance(report, _Robots):
                self._robots_arrived(report, frontier, fetcher)
            elif isinstance(report, _Broken):
                broken.append(report)
            else:
                pages.extend(report)
        if pages:
            self._record(pages, frontier)
        if broken:  # what did arrive is recorded; run() gives what is still in progress back to the frontier
            for report in broken:
                if isinstance(report.error, _IO_ERRORS):
                    raise report.error
            raise RuntimeError(
                "crawl stopped: " + "; ".join(f"{b.where} died ({type(b.error).__name__}: {b.error})" for b in broken)
            )

    # -- coordinator: starting URLs ---------------------------------------------

    def _start(self, item: FrontierURL, frontier: Frontier, fetcher: NIOFetcher) -> None:
        origin = parse_target(item.url).origin
        if self.config.obey_robots:
            rules = self._robots.get(origin)
            if rules is None:
                self._hold(item, origin, frontier, fetcher)
                return
            refusal = rules.refuses(item.url, self.config.fetcher.user_agent)
            if refusal:
                self._in_progress.pop(item.url, None)
                frontier.fail(item.url, refusal, retry=False)
                self._errors["robots_unavailable" if rules.refusal else "robots_disallowed"] += 1
                return
        if self._stop.is_set() or not fetcher.register(
            URLBean(item.url, priority=item.priority, meta={"frontier": item, "origin": origin})
        ):
            self._in_progress.pop(item.url, None)
            frontier.release([item.url])  # stopping: the URL waits for a resume
            return
        self._in_progress[item.url] = item
        self._active[origin] += 1

    def _hold(self, item: FrontierURL, origin: Origin, frontier: Frontier, fetcher: NIOFetcher) -> None:
        """``item`` waits for its origin's robots.txt, which is fetched unless it is on its way already."""
        self._in_progress[item.url] = item
        held = self._held.get(origin)
        if held is not None:
            held.append(item)
            return
        self._held[origin] = [item]
        self._fetch_robots(origin, f"{origin}/robots.txt", 0, frontier, fetcher)

    def _fetch_robots(self, origin: Origin, url: str, hops: int, frontier: Frontier, fetcher: NIOFetcher) -> None:
        bean = URLBean(url, priority=_ROBOTS_PRIORITY, meta={"robots": origin, "hops": hops})
        if self._stop.is_set() or not fetcher.register(bean):
            self._give_back_held(origin, frontier)

    def _give_back_held(self, origin: Origin, frontier: Frontier) -> None:
        """The URLs waiting for ``origin``'s robots.txt go back to 'waiting' (stopping): nothing is settled."""
        held = self._held.pop(origin, [])
        self._robots_fetches.pop(origin, None)
        for item in held:
            del self._in_progress[item.url]
        frontier.release([item.url for item in held])

    def _release_held(self, origin: Origin, frontier: Frontier, fetcher: NIOFetcher) -> None:
        """robots.txt of ``origin`` is settled: start what waited for it."""
        for item in self._held.pop(origin, ()):
            del self._in_progress[item.url]
            self._start(item, frontier, fetcher)

    def _robots_arrived(self, report: _Robots, frontier: Frontier, fetcher: NIOFetcher) -> None:
        origin, result = report.origin, report.result
        if result.error is ErrorKind.CANCELLED:  # stopping: no answer, no attempt counted
            self._give_back_held(origin, frontier)
            return
        answer = interpret(result, report.hops, self.config.fetcher.user_agent)
        if isinstance(answer, Redirect):
            self._fetch_robots(origin, answer.url, answer.hops, frontier, fetcher)
            return
        if answer is None:  # unreachable: complete disallow, and fetch it again later
            fetches = self._robots_fetches[origin] = self._robots_fetches.get(origin, 0) + 1
            if self._stop.is_set():
                self._give_back_held(origin, frontier)
                return
            if fetches < self.config.max_attempts:
                # The same policy as a page's: retry_delay, doubling, never sooner than a Retry-After.
                delay = frontier.retry_delay_after(fetches, _retry_after(result))
                heapq.heappush(self._robots_retries, (time.monotonic() + delay, origin))
                return
            answer = RobotsRules(refusal=f"robots.txt unavailable: {_error_text(result)}")
        self._robots_fetches.pop(origin, None)
        self._apply_crawl_delay(origin, answer, fetcher)
        self._robots.put(origin, answer)
        self._release_held(origin, frontier, fetcher)

    def _apply_crawl_delay(self, origin: Origin, rules: RobotsRules, fetcher: NIOFetcher) -> None:
        delay = rules.crawl_delay
        if not delay or delay <= 0:  # none, 0, or NaN
            return
        cap = self.config.max_crawl_delay
        if delay > cap:
            log.warning("%s asks for Crawl-delay %g s; using max_crawl_delay, %g s", origin, delay, cap)
            delay = cap
        if delay:
            fetcher.set_host_delay(f"{origin}/", delay)

    def _retry_robots(self, frontier: Frontier, fetcher: NIOFetcher) -> float | None:
        """Fetch again each unreachable robots.txt whose retry is due; when the next one is due."""
        retries = self._robots_retries
        now = time.monotonic()
        while retries and (retries[0][0] <= now or self._stop.is_set()):
            _, origin = heapq.heappop(retries)
            if self._stop.is_set():
                self._give_back_held(origin, frontier)
            else:
                self._fetch_robots(origin, f"{origin}/robots.txt", 0, frontier, fetcher)
        return retries[0][0] if retries else None

    # -- pump: from the fetcher to the parse executor -------------------------------

    def _pump(self, fetcher: NIOFetcher, executor: concurrent.futures.Executor) -> None:
        """Pump thread: take the fetcher's results a batch at a time and send each on its way."""
        while True:
            # Read before get(): a fetcher that had ended before get() came back empty has nothing
            # more to give once join() agrees (read after get(), a shutdown between the two could
            # leave its last results behind).
            ended = self._fetcher_closed.is_set() or fetcher.failure is not None
            first = fetcher.get(timeout=0.1)
            if first is not None:
                self._sort([first, *fetcher.drain()], executor)
            elif ended and fetcher.join(timeout=0):
                rest = fetcher.drain()  # what was delivered between get() and join()
                if not rest:
                    return
                self._sort(rest, executor)

    def _sort(self, results: list[FetchResult], executor: concurrent.futures.Executor) -> None:
        again: list[_Page] = []  # to be tried again: no parsing, no on_page
        ready: list[_Page] = []  # final, nothing to parse
        to_parse: list[_Page] = []
        for result in results:
            meta = result.bean.meta
            if "robots" in meta:
                self._reports.put(_Robots(meta["robots"], result, meta["hops"]))
                continue
            item: FrontierURL = meta["frontier"]
            page = _Page(item, result, final=self._is_final(result, item))
            if not page.final:
                again.append(page)
            elif _is_redirect(result):
                target = absolute_url(result.header("location") or "", result.url)
                page.links = PageLinks([target] if target else [], [], [], [], [], [], None, frozenset())
                page.followed = self._scope.followed(page.links)
                ready.append(page)
            elif result.ok and _is_html(result):
                to_parse.append(page)
            else:
                ready.append(page)
        if again:
            self._reports.put(again)
        if ready:
            self._hand_over(ready)
        for job in _jobs(to_parse, self.config.parse_workers):
            self._submit(job, executor)

    def _is_final(self, result: FetchResult, item: FrontierURL) -> bool:
        """False for a fetch to try again: cancelled (not the URL's fault), or a retryable failure with
        attempts left."""
        if result.error is ErrorKind.CANCELLED:
            return False
        retryable = result.error is not None or result.status in self.config.retry_statuses
        return not (retryable and item.attempts < self.config.max_attempts)

    def _submit(self, pages: list[_Page], executor: concurrent.futures.Executor) -> None:
        """Send one parse job; its pages are handed over when it is done."""
        inputs = [(page.result.body, page.result.final_url, page.result.header("content-type")) for page in pages]
        job = _Job(inputs, self.config.extractor, self._scope, self._delivering)
        try:
            future = executor.submit(parse_pages, *job)
        except (BrokenProcessPool, RuntimeError) as exc:  # a parse process died, or the pool was shut
            self._parse_here(pages, job, exc)
            return
        future.add_done_callback(lambda done: self._parse_done(pages, job, done))

    def _parse_done(self, pages: list[_Page], job: _Job, future: concurrent.futures.Future[list[ParseOutput]]) -> None:
        """Runs where the job ended: in the process pool's reader thread, or in the parse thread."""
        # exception(), not result() in a try: raising it again would tie the exception, through the
        # frames of its traceback, to the pool's pipes (a cycle only the garbage collector breaks).
        try:
            exc = future.exception()
            if exc is not None:  # BrokenProcessPool: a parse process died; parse_pages itself raises for nothing
                self._parse_here(pages, job, exc)
                return
            self._parsed(pages, future.result())
        except BaseException as exc:
            log.exception("handing over a parse job failed")
            self._reports.put(_Broken("a parse job's hand-over", exc))

    def _parse_here(self, pages: list[_Page], job: _Job, exc: BaseException) -> None:
        """The parse pool is broken: parse in this thread (slower, but nothing is lost)."""
        if not self._pool_broken:
            self._pool_broken = True
            # str(exc): a log record keeping the exception would keep its traceback's frames alive.
            log.error("parse pool unusable (%s); parsing in the crawler's own threads from now on", str(exc))
        self._parsed(pages, parse_pages(*job))

    def _parsed(self, pages: list[_Page], outputs: list[ParseOutput]) -> None:
        for page, (followed, links, failure) in zip(pages, outputs, strict=True):
            page.followed, page.links, page.failure = followed, links, failure
        self._hand_over(pages)

    def _hand_over(self, pages: list[_Page]) -> None:
        """Final pages go to on_page and the output (a delivery thread), then to the coordinator."""
        if self._delivering:
            self._deliveries.put(pages)
        else:
            self._reports.put(pages)

    @property
    def _delivering(self) -> bool:
        """Whether pages go through delivery threads (someone will see them)."""
        return self.on_page is not None or self.output is not None

    def _deliver(self) -> None:
        """Delivery thread: hand every page of a batch to on_page, then to the output, then report the batch.

        An exception from on_page fails that page (the embedding program's bug or choice); one from
        the output ends the crawl (its records could not be kept): the batch is not reported, and
        run() gives its URLs back.
        """
        on_page, output = self.on_page, self.output
        while (pages := self._deliveries.get()) is not None:
            for page in pages:
                if page.failure:
                    continue
                crawled = CrawledPage(page.result, page.item.depth, page.item.parent, page.links)
                if on_page is not None:
                    try:
                        on_page(crawled)
                    except Exception as exc:
                        log.exception("on_page failed for %s", page.item.url)
                        page.failure = f"{type(exc).__name__}: {exc}"
                        continue
                if output is not None:
                    output.prepare(crawled)
            self._reports.put(pages)

    # -- coordinator: recording outcomes ------------------------------------------

    def _record(self, pages: list[_Page], frontier: Frontier) -> None:
        """Record a batch of pages: their links first, in one call, then their outcomes, so that a crash
        in between fetches a page again rather than losing its links."""
        pages = [page for page in pages if page.item.url in self._in_progress]
        links = [entry for page in pages for entry in self._link_entries(page)]
        if links:
            frontier.add_many(links)
        # The records first, durable, then the outcomes with the files' lengths: a crash in between
        # leaves records past the stored lengths, which the next run cuts away.
        offsets = None
        if self.output is not None:
            delivered = [page.item.url for page in pages if page.final and not page.failure]
            if delivered:
                offsets = self.output.commit(delivered)
        completed: list[tuple[str, int | None]] = []
        active = self._active
        # One commit for the batch: a failure committed alone, before the checkpoint that covers its
        # record, would have that record cut away on resume and never written again.
        with frontier.batch():
            for page in pages:
                origin = page.result.bean.meta["origin"]
                active[origin] -= 1
                if not active[origin]:
                    del active[origin]
                if page.final:
                    self._finished += 1
                    self._bytes += len(page.result.body)
                if page.final and not page.failure and (page.result.ok or _is_redirect(page.result)):
                    completed.append((page.item.url, page.result.status))
                else:
                    self._record_failure(page, frontier)
                    del self._in_progress[page.item.url]
            frontier.complete_many(completed, checkpoint=offsets)
        # Only now: should recording them fail, they are still in progress, and run() gives them back.
        for url, _ in completed:
            del self._in_progress[url]

    def _link_entries(self, page: _Page) -> list[tuple[str, int, str | None, int]]:
        """The frontier entries for the links ``page`` leads to: (url, depth, parent, priority)."""
        if not page.final or page.failure:
            return []
        depth = page.item.depth + 1
        if self.config.max_depth is not None and depth > self.config.max_depth:
            return []
        return [(url, depth, page.item.url, 0) for url in page.followed]

    def _record_failure(self, page: _Page, frontier: Frontier) -> None:
        result = page.result
        url = page.item.url
        if not page.final:
            if result.error is ErrorKind.CANCELLED:
                frontier.release([url])  # not the URL's fault: the attempt does not count
            else:
                frontier.fail(url, _error_text(result), status=result.status, retry=True,
                              retry_after=_retry_after(result))
        elif page.failure:
            self._errors["on_page_failed"] += 1
            frontier.fail(url, page.failure, status=result.status, retry=False)
        else:
            self._errors[result.error.value if result.error is not None else f"http_{result.status}"] += 1
            frontier.fail(url, _error_text(result), status=result.status, retry=False)


@contextlib.contextmanager
def _cleaning_up_after(error: BaseException | None) -> Iterator[None]:
    """Clean-up after ``error`` ended the crawl: an I/O error of its own (the disk is still full)
    must not hide the one that ended it, which run() raises."""
    try:
        yield
    except _IO_ERRORS:
        if error is None:
            raise


def _jobs(pages: list[_Page], workers: int) -> list[list[_Page]]:
    """``pages`` cut into parse jobs: one per worker when they are few, of at most _MAX_JOB_PAGES."""
    if not pages:
        return []
    size = min(_MAX_JOB_PAGES, -(-len(pages) // workers))
    return [pages[i:i + size] for i in range(0, len(pages), size)]


def _is_redirect(result: FetchResult) -> bool:
    return result.error is None and result.status in (301, 302, 303, 307, 308) and bool(result.header("location"))


def _is_html(result: FetchResult) -> bool:
    """Whether the page goes to the parser: the parser's own rule, so that no page is sent there to
    give nothing back."""
    return is_html_type(result.header("content-type"))


def _retry_after(result: FetchResult) -> float | None:
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


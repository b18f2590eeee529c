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
says; the URLs of an origin wait until it is settled (``robots_gate.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..errors import ErrorKind
from ..fetcher import NIOFetcher
from ..models import FetchResult, URLBean
from ..urls import Origin, normal_host, parse_target
from .config import CrawlConfig, CrawledPage, CrawlOutput, CrawlProgress, CrawlSummary
from .frontier import Frontier, FrontierBackend, FrontierError, FrontierURL
from .parse import PageLinks, absolute_url, is_html_type
from .parsing import ParseExecutor, ParseOutput, jobs
from .policy import LinkScope, error_text, is_final, is_redirect, retry_after
from .robots_gate import RobotsGate, RobotsReply

__all__ = ["CrawlConfig", "CrawlOutput", "CrawlProgress", "CrawlSummary", "CrawledPage", "Crawler"]

log = logging.getLogger("niofetcher")

# The failures of storage that end a crawl as they are (one line for the user), without a traceback.
_IO_ERRORS = (FrontierError, sqlite3.Error, OSError)


@dataclass(slots=True)
class _Page:
    """One fetch of a claimed URL, on its way from the fetcher to the coordinator."""

    item: FrontierURL
    result: FetchResult
    final: bool  # False: cancelled, or a retryable failure with attempts left -- it is tried again later
    links: PageLinks | None = None  # what on_page sees
    followed: list[str] = field(default_factory=list)  # links the crawl follows (in scope)
    failure: str = ""  # parsing or on_page raised: the URL ends in 'error' with this reason


# Reports to the coordinator: a robots.txt fetch, or a batch of pages.
@dataclass(slots=True)
class _Broken:
    """A crawl thread or a parse callback died: the coordinator must end the crawl, not wait for ever."""

    where: str
    error: BaseException


_Report = RobotsReply | list[_Page] | _Broken


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
        self._robots = RobotsGate(
            config.fetcher.user_agent, config.max_attempts, config.max_crawl_delay,
            busy=self._active.__contains__, stopping=self._stop,
        )
        self._in_progress: dict[str, FrontierURL] = {}
        self._started = 0.0
        self._finished = 0
        self._bytes = 0
        self._errors: Counter[str] = Counter()
        self._counts: dict[str, int] = {}
        self._fetcher: NIOFetcher | None = None  # while run() runs

    # -- any thread -----------------------------------------------------------

    def stop(self) -> None:
        """Graceful stop, from any thread: in-flight fetches finish, the rest stays waiting for a resume."""
        self._stop.set()
        fetcher = self._fetcher
        if fetcher is not None:
            fetcher.cancel_pending()  # registered but not started: cancelled, then released by _record

    def progress(self) -> CrawlProgress:
        """A snapshot of the crawl so far, from any thread (for progress displays)."""
        counts = self._counts
        return CrawlProgress(
            done=counts.get("done", 0), errors=counts.get("error", 0), in_flight=len(self._in_progress),
            waiting=counts.get("waiting", 0), seconds=time.monotonic() - self._started if self._started else 0.0,
        )

    # -- the run ----------------------------------------------------------------

    def run(self) -> CrawlSummary:
        """Crawl until nothing is left (or ``max_pages``, or :meth:`stop`); the summary of this run.

        Raises:
            FrontierError, OSError: the frontier or the output failed (a full disk), as they are.
            RuntimeError: a crawl thread or the fetcher's loop died (logged with its traceback).
        """
        config = self.config
        self._started = time.monotonic()
        with _open_frontier(config) as frontier:
            if self.output is not None:
                self.output.restore(frontier.checkpoint())
                # Recorded now, not with the first batch: an output that appends to what it found must
                # not see this run's first records appended a second time after a crash.
                frontier.complete_many([], checkpoint=self.output.commit([]))
            frontier.add(config.seeds, depth=0)
            # Redirects are links the crawler follows itself, through scope and robots.txt like any other.
            fetcher_config = dataclasses.replace(config.fetcher, follow_redirects=False)
            window = min(5000, max(64, 2 * fetcher_config.max_connections))
            parser = ParseExecutor(config.parse_mode, config.parse_workers, config.extractor, self._scope,
                                   failed=lambda exc: self._reports.put(_Broken("a parse job's hand-over", exc)))
            with parser, NIOFetcher(fetcher_config) as fetcher:
                self._fetcher = fetcher
                threads = [self._thread("niofetcher-crawl-pump", self._pump, fetcher, parser)]
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
                            self._wind_down(fetcher, parser, threads)
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

    def _wind_down(
        self, fetcher: NIOFetcher, parser: ParseExecutor, threads: list[threading.Thread]
    ) -> None:
        """Stop fetching, and let every page fetched so far reach the reports queue."""
        self._stop.set()
        fetcher.shutdown(wait=False)  # whatever was not fetched yet comes back cancelled
        self._fetcher_closed.set()
        pump, *deliverers = threads
        try:
            pump.join()
            parser.shutdown()  # every job submitted is parsed, and its pages handed over
        finally:
            # Even when a second Ctrl-C breaks the wait above: a delivery thread left waiting
            # for its sentinel would keep the interpreter from ever exiting.
            for _ in deliverers:
                self._deliveries.put(None)
        for thread in deliverers:
            thread.join()

    def _coordinate(self, frontier: FrontierBackend, fetcher: NIOFetcher, window: int) -> None:
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
            self._give_back(self._robots.retry_due(fetcher), frontier)
            robots_due = self._robots.next_retry()
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

    def _layer(self, frontier: FrontierBackend) -> int | None:
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
        held = self._robots.held_urls()
        depths = [item.depth for url, item in self._in_progress.items() if url not in held]
        if depths:
            return min(depths)
        return frontier.min_due_depth()

    def _drain_reports(self, frontier: FrontierBackend, fetcher: NIOFetcher, reports: list[_Report] | None = None) -> None:
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
            if isinstance(report, RobotsReply):
                start, give_back = self._robots.arrived(report, frontier, fetcher)
                self._give_back(give_back, frontier)
                for item in start:
                    del self._in_progress[item.url]
                    self._start(item, frontier, fetcher)
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

    def _start(self, item: FrontierURL, frontier: FrontierBackend, fetcher: NIOFetcher) -> None:
        origin = parse_target(item.url).origin
        if self.config.obey_robots:
            rules = self._robots.rules(origin)
            if rules is None:  # it waits for its origin's robots.txt, in progress meanwhile
                self._in_progress[item.url] = item
                self._give_back(self._robots.hold(item, origin, fetcher), frontier)
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

    def _give_back(self, held: list[FrontierURL], frontier: FrontierBackend) -> None:
        """URLs that waited for their origin's robots.txt go back to 'waiting' (stopping): nothing is settled."""
        if not held:
            return
        for item in held:
            del self._in_progress[item.url]
        frontier.release([item.url for item in held])

    # -- pump: from the fetcher to the parse executor -------------------------------

    def _pump(self, fetcher: NIOFetcher, parser: ParseExecutor) -> None:
        """Pump thread: take the fetcher's results a batch at a time and send each on its way."""
        while True:
            # Read before get(): a fetcher that had ended before get() came back empty has nothing
            # more to give once join() agrees (read after get(), a shutdown between the two could
            # leave its last results behind).
            ended = self._fetcher_closed.is_set() or fetcher.failure is not None
            first = fetcher.get(timeout=0.1)
            if first is not None:
                self._sort([first, *fetcher.drain()], parser)
            elif ended and fetcher.join(timeout=0):
                rest = fetcher.drain()  # what was delivered between get() and join()
                if not rest:
                    return
                self._sort(rest, parser)

    def _sort(self, results: list[FetchResult], parser: ParseExecutor) -> None:
        again: list[_Page] = []  # to be tried again: no parsing, no on_page
        ready: list[_Page] = []  # final, nothing to parse
        to_parse: list[_Page] = []
        config = self.config
        for result in results:
            robots = RobotsReply.of(result)
            if robots is not None:
                self._reports.put(robots)
                continue
            item: FrontierURL = result.bean.meta["frontier"]
            page = _Page(item, result, final=is_final(result, item.attempts, config.retry_statuses, config.max_attempts))
            if not page.final:
                again.append(page)
            elif is_redirect(result):
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
        for job in jobs(to_parse, config.parse_workers):
            self._submit(job, parser)

    def _submit(self, pages: list[_Page], parser: ParseExecutor) -> None:
        """Send one parse job; its pages are handed over when it is done."""
        inputs = [(page.result.body, page.result.final_url, page.result.header("content-type")) for page in pages]
        parser.submit(inputs, self._delivering, lambda outputs: self._parsed(pages, outputs))

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

    def _record(self, pages: list[_Page], frontier: FrontierBackend) -> None:
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
                if page.final and not page.failure and (page.result.ok or is_redirect(page.result)):
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

    def _record_failure(self, page: _Page, frontier: FrontierBackend) -> None:
        result = page.result
        url = page.item.url
        if not page.final:
            if result.error is ErrorKind.CANCELLED:
                frontier.release([url])  # not the URL's fault: the attempt does not count
            else:
                frontier.fail(url, error_text(result), status=result.status, retry=True,
                              retry_after=retry_after(result))
        elif page.failure:
            self._errors["on_page_failed"] += 1
            frontier.fail(url, page.failure, status=result.status, retry=False)
        else:
            self._errors[result.error.value if result.error is not None else f"http_{result.status}"] += 1
            frontier.fail(url, error_text(result), status=result.status, retry=False)


@contextlib.contextmanager
def _cleaning_up_after(error: BaseException | None) -> Iterator[None]:
    """Clean-up after ``error`` ended the crawl: an I/O error of its own (the disk is still full)
    must not hide the one that ended it, which run() raises."""
    try:
        yield
    except _IO_ERRORS:
        if error is None:
            raise


def _open_frontier(config: CrawlConfig) -> FrontierBackend:
    """The frontier of a crawl: the one place that names a backend (SQLite, at ``config.db_path``)."""
    return Frontier(config.db_path, max_attempts=config.max_attempts, retry_delay=config.retry_delay)


def _is_html(result: FetchResult) -> bool:
    """Whether the page goes to the parser: the parser's own rule, so that no page is sent there to
    give nothing back."""
    return is_html_type(result.header("content-type"))

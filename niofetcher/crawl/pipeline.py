"""The crawl's threads between the fetcher and the coordinator: the pump and the delivery threads.

- the *pump* takes every result the fetcher has finished, in one go, and sends each on its way:
  robots.txt answers and fetches to retry go straight to the coordinator, HTML pages to the parse
  executor in a few chunks (one job per chunk, so that every parse worker gets a share), redirects
  and other final pages on without parsing; with a revisit policy, it hashes each 2xx body, and a
  page found unchanged (a 304, or the digest of the visit before) goes on unparsed too;
- as a parse job comes back, with duplicate detection on, each page is checked against its host's
  index (``dedup.Duplicates``): a duplicate keeps its fingerprint and the URL it duplicates, and
  loses the links it would have added;
- ``parse_workers`` delivery threads call ``on_page`` for every page of a batch, then
  ``output.prepare`` (a CrawlOutput builds its records in memory), and pass the batch on (without
  an ``on_page`` or an ``output`` there are none, and batches go to the coordinator directly).

Everything ends up in :attr:`Pipeline.reports`, which only the coordinator reads: a robots.txt
fetch, a batch of pages, or the news that a crawl thread died.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..fetcher import NIOFetcher
from ..models import FetchResult
from ..urls import absolute_url
from .config import CrawlConfig, CrawledPage, CrawlOutput
from .dedup import Duplicates, Fingerprint
from .frontier import FrontierError, FrontierURL
from .parse import PageLinks, is_html_type
from .parsing import ParseExecutor, ParseOutput, jobs
from .policy import LinkScope, is_final, is_redirect
from .robots_gate import RobotsReply

__all__ = ["IO_ERRORS", "Broken", "Page", "Pipeline", "Report"]

log = logging.getLogger("niofetcher")

#: The most results the pump takes at once: every one finished, in practice (a thousand pages a
#: second make a hundred in the pump's 0.1 s), but a bound on the lists a burst can make.
_PUMP_BATCH = 10_000

#: The failures of storage that end a crawl as they are (one line for the user), without a traceback:
#: every backend raises its database's errors as FrontierError.
IO_ERRORS = (FrontierError, OSError)


@dataclass(slots=True)
class Page:
    """One fetch of a claimed URL, on its way from the fetcher to the coordinator."""

    item: FrontierURL
    result: FetchResult
    final: bool  # False: cancelled, or a retryable failure with attempts left -- it is tried again later
    links: PageLinks | None = None  # what on_page sees
    followed: list[str] = field(default_factory=list)  # links the crawl follows (in scope)
    failure: str = ""  # parsing or on_page raised: the URL ends in 'error' with this reason
    fingerprint: Fingerprint | None = None  # with duplicate detection: its text's, kept by the frontier
    duplicate_of: str | None = None  # the done page of its host it duplicates: its links are not followed
    # With a revisit policy: False for a revisit that found the page unchanged (a 304, or the body
    # whose digest the frontier kept), which is done again, not parsed, its links not added ...
    changed: bool = True
    digest: str | None = None  # ... and the sha256 of a 2xx body (hex), which the frontier keeps


@dataclass(slots=True)
class Broken:
    """A crawl thread or a parse callback died: the coordinator must end the crawl, not wait for ever."""

    where: str
    error: BaseException


#: What the coordinator reads: a robots.txt fetch, a batch of pages, or a dead crawl thread.
Report = RobotsReply | list[Page] | Broken


class Pipeline:
    """The pump and the delivery threads of one crawl, and the queue of their reports.

    Args:
        config: the crawl's retry rules and its number of delivery threads.
        scope: the links a redirect may lead to.
    """

    def __init__(self, config: CrawlConfig, scope: LinkScope, duplicates: Duplicates | None = None) -> None:
        self._config = config
        self._scope = scope
        self._duplicates = duplicates
        self.reports: queue.SimpleQueue[Report] = queue.SimpleQueue()  # read by the coordinator only
        self._deliveries: queue.SimpleQueue[list[Page] | None] = queue.SimpleQueue()  # None: stop
        self._fetcher_closed = threading.Event()  # set once every result has been delivered
        self._abandoned = threading.Event()  # a stop's grace ran out: no more on_page calls
        self._on_page: Callable[[CrawledPage], None] | None = None
        self._output: CrawlOutput | None = None
        self._delivering = False  # whether pages go through delivery threads (someone will see them)
        self._threads: list[threading.Thread] = []

    def start(
        self, fetcher: NIOFetcher, parser: ParseExecutor, on_page: Callable[[CrawledPage], None] | None,
        output: CrawlOutput | None,
    ) -> None:
        """Start the pump on ``fetcher``'s results, and the delivery threads when someone will see
        the pages (``on_page`` or ``output``)."""
        self._on_page, self._output = on_page, output
        self._delivering = on_page is not None or output is not None
        threads = [self._thread("niofetcher-crawl-pump", self._pump, fetcher, parser)]
        if self._delivering:
            threads += [
                self._thread(f"niofetcher-crawl-deliver-{i}", self._deliver)
                for i in range(self._config.parse_workers)
            ]
        self._threads = []
        for thread in threads:
            thread.start()  # may fail (no threads left): wind_down() then stops the ones that run
            self._threads.append(thread)

    def report_broken(self, where: str, error: BaseException) -> None:
        """Tell the coordinator that ``where`` died: it must end the crawl, not wait for ever."""
        self.reports.put(Broken(where, error))

    def _thread(self, name: str, work: Callable[..., None], *args: object) -> threading.Thread:
        """A crawl thread that, should it die, tells the coordinator at once instead of leaving it waiting."""

        def guarded() -> None:
            try:
                work(*args)
            except BaseException as exc:
                if not isinstance(exc, IO_ERRORS):  # an I/O error is raised by run() as it is
                    log.exception("%s died", name)
                self.reports.put(Broken(name, exc))

        return threading.Thread(target=guarded, name=name)

    def wind_down(self, fetcher: NIOFetcher, parser: ParseExecutor, abandon: bool = False) -> None:
        """Stop fetching, and let every page fetched so far reach :attr:`reports` (the crawl is stopping).

        ``abandon``: a stop's grace has run out, and the pages waiting for a parse worker or for
        ``on_page`` are dropped instead: a long queue of them, or a slow ``on_page``, must not hold
        the stop.  Only the ``on_page`` calls already running are waited for.  The pages dropped
        never reach :attr:`reports`; the crawl gives them back to the frontier with what else is in
        progress, and a resumed crawl fetches them again.
        """
        if abandon:
            self._abandoned.set()
        fetcher.shutdown(wait=False)  # whatever was not fetched yet comes back cancelled
        self._fetcher_closed.set()
        pump, deliverers = self._threads[:1], self._threads[1:]  # none, should the pump have failed to start
        try:
            for thread in pump:
                thread.join()
            parser.shutdown(cancel_pending=abandon)  # every job submitted (not dropped) is parsed, and handed over
        finally:
            if abandon:
                _drop_all(self._deliveries)
            # Even when a second Ctrl-C breaks the wait above: a delivery thread left waiting
            # for its sentinel would keep the interpreter from ever exiting.
            for _ in deliverers:
                self._deliveries.put(None)
        for thread in deliverers:
            thread.join()

    # -- pump: from the fetcher to the parse executor -------------------------------

    def _pump(self, fetcher: NIOFetcher, parser: ParseExecutor) -> None:
        """Pump thread: take the fetcher's results a batch at a time and send each on its way."""
        while True:
            # Read before get(): a fetcher that had ended before get() came back empty has nothing
            # more to give once join() agrees (read after get(), a shutdown between the two could
            # leave its last results behind).
            ended = self._fetcher_closed.is_set() or fetcher.failure is not None
            results = fetcher.get_batch(_PUMP_BATCH, timeout=0.1)
            if results:
                self._sort(results, parser)
            elif ended and fetcher.join(timeout=0):
                rest = fetcher.drain()  # what was delivered between get() and join()
                if not rest:
                    return
                self._sort(rest, parser)

    def _sort(self, results: list[FetchResult], parser: ParseExecutor) -> None:
        again: list[Page] = []  # to be tried again: no parsing, no on_page
        ready: list[Page] = []  # final, nothing to parse
        to_parse: list[Page] = []
        config = self._config
        for result in results:
            robots = RobotsReply.of(result)
            if robots is not None:
                self.reports.put(robots)
                continue
            item: FrontierURL = result.bean.meta["frontier"]
            page = Page(item, result, final=is_final(result, item.attempts, config.retry_statuses, config.max_attempts))
            if config.revisit is not None and page.final:
                _check_change(page)
            if not page.final:
                again.append(page)
            elif not page.changed:
                ready.append(page)  # nothing to parse: its links are those of the visit before
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
            self.reports.put(again)
        if ready:
            self._hand_over(ready)
        for job in jobs(to_parse, config.parse_workers, _body_size):
            self._submit(job, parser)

    def _submit(self, pages: list[Page], parser: ParseExecutor) -> None:
        """Send one parse job; its pages are handed over when it is done."""
        inputs = [(page.result.body, page.result.final_url, page.result.header("content-type")) for page in pages]
        parser.submit(inputs, self._delivering, lambda outputs: self._parsed(pages, outputs))

    def _parsed(self, pages: list[Page], outputs: list[ParseOutput]) -> None:
        duplicates = self._duplicates
        for page, (followed, links, failure, printed) in zip(pages, outputs, strict=True):
            page.followed, page.links, page.failure, page.fingerprint = followed, links, failure, printed
            if duplicates is not None and printed is not None and not failure:
                page.duplicate_of = duplicates.check(page.item.host, page.item.url, printed)
                if page.duplicate_of is not None:
                    page.followed = []  # a soft 404's or a printer version's links are the original's
        self._hand_over(pages)

    def _hand_over(self, pages: list[Page]) -> None:
        """Final pages go to on_page and the output (a delivery thread), then to the coordinator."""
        if self._delivering:
            self._deliveries.put(pages)
        else:
            self.reports.put(pages)

    def _deliver(self) -> None:
        """Delivery thread: hand every page of a batch to on_page, then to the output, then report the batch.

        An exception from on_page fails that page (the embedding program's bug or choice); one from
        the output ends the crawl (its records could not be kept): the batch is not reported, and
        run() gives its URLs back.
        """
        on_page, output = self._on_page, self._output
        while (pages := self._deliveries.get()) is not None:
            for page in pages:
                if self._abandoned.is_set():
                    break  # the batch is not reported: run() gives its URLs back
                if page.failure:
                    continue
                crawled = CrawledPage(page.result, page.item.depth, page.item.parent, page.links, page.duplicate_of,
                                      page.changed, None if page.changed else page.item.captured_at)
                if on_page is not None:
                    try:
                        on_page(crawled)
                    except Exception as exc:
                        log.exception("on_page failed for %s", page.item.url)
                        page.failure = f"{type(exc).__name__}: {exc}"
                        if self._duplicates is not None and page.fingerprint is not None and page.duplicate_of is None:
                            self._duplicates.withdraw(page.item.host, page.item.url, page.fingerprint)
                        continue
                if output is not None:
                    output.prepare(crawled)
            else:
                self.reports.put(pages)


def _check_change(page: Page) -> None:
    """Whether a final fetch found its page changed since the visit before (a revisit policy): a
    304 (the answer to the conditional GET the stored validators made; never an error) is
    unchanged, and so is a 2xx whose body has the digest the frontier kept, or a redirect to the
    same place; a first visit is a change.  A 2xx and a redirect get their digest."""
    result, item = page.result, page.item
    if result.error is not None:
        return
    if result.status == 304:
        page.changed = False
    elif result.ok:
        page.digest = hashlib.sha256(result.body).hexdigest()
        page.changed = page.digest != item.digest
    elif is_redirect(result):  # what a redirect says is where it leads
        page.digest = hashlib.sha256(b"Location: " + (result.header("location") or "").encode()).hexdigest()
        page.changed = page.digest != item.digest


def _drop_all(batches: queue.SimpleQueue[list[Page] | None]) -> None:
    """Take every batch still waiting for a delivery thread out of ``batches``, unseen."""
    while True:
        try:
            batches.get_nowait()
        except queue.Empty:
            return


def _body_size(page: Page) -> int:
    return len(page.result.body)


def _is_html(result: FetchResult) -> bool:
    """Whether the page goes to the parser: the parser's own rule, so that no page is sent there to
    give nothing back."""
    return is_html_type(result.header("content-type"))

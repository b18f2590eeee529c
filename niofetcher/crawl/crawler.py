"""The crawler: frontier -> fetcher -> parse -> frontier, with fetching and parsing side by side.

Theory of operation.  Pages travel through the crawler in batches, never one
at a time: handing one page from a thread to another costs a wake-up and a
GIL hand-off (and, to a parse process, a pickling round trip and a future),
and at a thousand pages a second those hand-offs, not the work, set the pace.
The threads are:

- the fetcher's loop thread downloads;
- the *pump* (``pipeline.py``) takes every result the fetcher has finished,
  in one go, and sends each on its way: robots.txt answers and fetches to
  retry go straight to the coordinator, HTML pages to the parse executor
  (``parsing.py``) in a few jobs, other final pages on without parsing;
- the parse executor -- ``parse_workers`` processes by default, so that
  parsing uses every core instead of fighting the loop for the GIL, or
  threads -- extracts each page's links and filters them there: scope,
  include/exclude patterns, nofollow, duplicates.  A job carries only the
  bodies, final URLs and Content-Types of its pages; it brings back the
  followed URLs, and the whole PageLinks only when an ``on_page`` will see it;
- ``parse_workers`` delivery threads (``pipeline.py``) call ``on_page`` for
  every page of a batch, then ``output.prepare``, and pass the batch on;
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
URL is.  Fetches of robots.txt, which are no URLs of the frontier, are
archived the same way (an output's ``commit_robots``): written before the
answer they bring is stored, and the files' lengths stored with it.

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

Stopping: ``stop(grace)`` starts nothing new and lets what is in flight finish
for ``grace`` seconds; then the coordinator returns and run() shuts the
fetcher down without waiting, the path a failure takes: each fetch still in
flight, robots.txt's too, comes back ``cancelled`` and goes back to 'waiting'
with its attempt not counted, and so do the URLs held for their robots.txt.
Pages fetched by then are still parsed, delivered and recorded.  A service
manager kills a process that takes too long to stop (Docker after 10 s):
an unanswered fetch must not hold the stop for its read timeout.

Revisits: with ``CrawlConfig.revisit`` a run first moves the done and error URLs that are due
again back to 'waiting' (``frontier.wake()``), and then crawls as any run does, ending when nothing
waits -- or, with ``keep_running``, waking what falls due every half second and sleeping between
revisits until stopped.  Each claim carries what the last visit left (validators, digest, the interval), which
makes its request a conditional GET; a 304, or a body of the stored digest, is *unchanged*: done
again, not parsed, no links added.  Every completed page tells the frontier its
:class:`~niofetcher.crawl.frontier.Visit`, with the wait the policy gives; an 'error' is due again
after the longest interval.

Credentials: a seed's ``user:pass@`` is taken out of it as the Crawler is
made (``self.config.seeds`` are bare), and sent to that seed's origin alone
(``headers.py``).  The frontier is opened by ``opening.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping

from ..errors import ErrorKind
from ..fetcher import NIOFetcher
from ..models import FetchResult, URLBean
from ..urls import Origin, host_key, parse_target
from .config import CrawlConfig, CrawledPage, CrawlOutput, CrawlProgress, CrawlSummary
from .dedup import Duplicates, Fingerprint
from .frontier import FrontierBackend, FrontierError, FrontierURL, Visit
from .headers import RequestHeaders, take_credentials
from .inflight import InProgress, windows
from .opening import groups_by_address, open_crawl_frontier
from .parsing import ParseExecutor
from .pipeline import IO_ERRORS, Broken, Page, Pipeline, Report
from .policy import LinkScope, error_text, is_redirect, retry_after
from .robots_gate import RobotsGate, RobotsReply
from .sitemaps import Sitemaps
from .visits import visit_of

log = logging.getLogger("niofetcher")


class Crawler:
    """Crawls from ``config.seeds`` until nothing is left (or ``max_pages``, or ``stop()``)."""

    def __init__(
        self, config: CrawlConfig, on_page: Callable[[CrawledPage], None] | None = None,
        output: CrawlOutput | None = None,
    ) -> None:
        seeds, credentials = take_credentials(config.seeds)
        if credentials:  # the frontier, the records and the logs get the seeds without them
            config = dataclasses.replace(config, seeds=seeds)
        self._headers = RequestHeaders(credentials, conditional=config.revisit is not None)
        self.config = config
        self.on_page = on_page
        self.output = output
        self._stop = threading.Event()
        self._stop_deadline: float | None = None  # time.monotonic() when a stop's grace ends
        # Bare hosts: CrawlConfig read each allowed domain as its host (urls.domain_host).
        domains = config.allowed_domains
        if domains is None:
            domains = [parse_target(seed).origin.host for seed in config.seeds]
        self._scope = LinkScope(
            domains=tuple(domains), include=tuple(config.include),
            exclude=tuple(config.exclude), follow_nofollow=config.follow_nofollow,
        )
        # With duplicate detection: each host's index of its done pages (crawl/dedup.py), read from
        # the frontier when its URLs are claimed, and dropped once idle.
        self._duplicates = None if config.dedup is None else Duplicates(
            near=config.dedup == "near", in_progress=lambda host: self._in_progress.has_host(host))
        self._duplicates_found = 0  # pages of this run done as duplicates
        self._unchanged = 0  # revisits of this run that found their page unchanged
        self._pipeline = Pipeline(config, self._scope, self._duplicates)
        self._reports = self._pipeline.reports  # what the pipeline's threads send the coordinator
        self._active: Counter[Origin] = Counter()  # URLs of each origin in the fetcher or after it
        self._robots = RobotsGate(
            config.fetcher.user_agent, config.retries, config.max_crawl_delay,
            busy=self._active.__contains__, stopping=self._stop, headers=self._headers,
        )
        self._window, per_host = windows(
            config.fetcher.max_connections, config.fetcher.max_connections_per_host, config.fetcher.host_delay
        )
        self._in_progress = InProgress(per_host)  # claimed, not yet recorded
        self._started = 0.0
        self._finished = 0
        self._responses = 0
        self._bytes = 0
        self._errors: Counter[str] = Counter()
        self._counts: dict[str, int] = {}
        self._refused_now = 0  # links the trap rules refused, as the coordinator last read them
        self._fetcher: NIOFetcher | None = None  # while run() runs
        # The frontier's note_addresses, in a crawl whose hosts of one address are one worker's (while run() runs).
        self._note_addresses: Callable[[Mapping[str, str]], None] | None = None
        self._sitemaps = Sitemaps(self._scope, config.seeds, self._errors) if config.sitemaps else None

    # -- any thread -----------------------------------------------------------

    def stop(self, grace: float | None = None) -> None:
        """Graceful stop, from any thread: nothing new starts, the rest stays waiting for a resume.

        Fetches in flight may finish within ``grace`` seconds (None: however long they take); those
        still in flight then are cancelled and go back to 'waiting' without counting an attempt,
        as do URLs still waiting for their robots.txt.  A second call may shorten the grace, never
        lengthen it.
        """
        if grace is not None:
            if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not grace >= 0:
                raise ValueError(f"grace must be a non-negative number of seconds or None, not {grace!r}")
            deadline = time.monotonic() + grace
            if self._stop_deadline is None or deadline < self._stop_deadline:
                self._stop_deadline = deadline
        self._stop.set()
        fetcher = self._fetcher
        if fetcher is not None:
            fetcher.cancel_pending()  # registered but not started: cancelled, then released by _record

    def progress(self) -> CrawlProgress:
        """A snapshot of the crawl so far, from any thread (for progress displays)."""
        counts = self._counts
        fetcher = self._fetcher
        stats = fetcher.stats() if fetcher is not None else None
        return CrawlProgress(
            done=counts.get("done", 0), errors=counts.get("error", 0), in_flight=len(self._in_progress),
            waiting=counts.get("waiting", 0), seconds=time.monotonic() - self._started if self._started else 0.0,
            fetching=stats.in_flight if stats is not None else 0,
            open_connections=stats.open_connections if stats is not None else 0, refused=self._refused_now,
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
        with open_crawl_frontier(config) as frontier:
            self._note_addresses = getattr(frontier, "note_addresses", None) if groups_by_address(config) else None
            if self.output is not None:
                self.output.restore(frontier.checkpoint())
                # Recorded now, not with the first batch: an output that appends to what it found must
                # not see this run's first records appended a second time after a crash.
                frontier.complete_many([], checkpoint=self.output.commit([]))
            frontier.add(config.seeds, depth=0)
            if config.revisit is not None:
                # What is due now, and only that: a URL that falls due while this run goes on waits
                # for the next run (nothing is fetched twice in one due period).
                frontier.wake()
            if self._sitemaps is not None:
                frontier.add_many(self._sitemaps.roots())
            # Redirects are links the crawler follows itself, through scope and robots.txt like any other.
            fetcher_config = dataclasses.replace(config.fetcher, follow_redirects=False)
            pipeline = self._pipeline
            parser = ParseExecutor(config.parse_mode, config.parse_workers, config.extractor, self._scope,
                                   failed=lambda exc: pipeline.report_broken("a parse job's hand-over", exc),
                                   fingerprints=self._duplicates is not None)
            with parser, NIOFetcher(fetcher_config) as fetcher:
                self._fetcher = fetcher
                self._robots.use(frontier, fetcher)
                error: BaseException | None = None
                try:
                    pipeline.start(fetcher, parser, self.on_page, self.output)
                    self._coordinate(frontier, fetcher)
                except BaseException as exc:
                    error = exc
                    raise
                finally:
                    # A frontier that failed rolled back all it had not committed, the claims of
                    # the round included: pages in progress may no longer be 'processing' there,
                    # so none is recorded; they are given back (release() leaves rows that are not
                    # 'processing' alone), and a resumed crawl fetches them again (an output cut
                    # back to its checkpoint).
                    recording = not isinstance(error, FrontierError)
                    try:
                        with _cleaning_up_after(error):
                            self._stop.set()
                            pipeline.wind_down(fetcher, parser, abandon=self._grace_over())
                            if recording:
                                self._drain_reports(frontier, fetcher)
                    finally:
                        if self._in_progress:  # a failure, or a stop's grace ran out: give them back
                            with _cleaning_up_after(error):
                                frontier.release(list(self._in_progress))
                            self._in_progress.clear()
            self._counts = frontier.counts()
            stopped = self._counts["waiting"] > 0
            refused = {cause: n for cause, n in frontier.not_followed.items() if n}
            self._refused_now = sum(refused.values())
            revisits = frontier.revisits() if config.revisit is not None else None
        return CrawlSummary(
            counts=dict(self._counts), errors=dict(self._errors), pages=self._finished, bytes=self._bytes,
            seconds=time.monotonic() - self._started, stopped=stopped,
            sitemaps=dict(self._sitemaps.report) if self._sitemaps is not None else {}, responses=self._responses,
            refused=refused, duplicates=self._duplicates_found, unchanged=self._unchanged,
            due=revisits.due if revisits is not None else 0, next_due=revisits.next_due if revisits is not None else None,
        )

    def _coordinate(self, frontier: FrontierBackend, fetcher: NIOFetcher) -> None:
        config = self.config
        window = self._window
        budget = None
        self._counts = frontier.counts()
        if config.max_pages is not None:
            budget = max(0, config.max_pages - self._counts["done"] - self._counts["error"])
        counted_at = time.monotonic()
        cancelled = False
        reports: list[Report] = []  # arrived since the last round
        while True:
            if frontier.lost_hosts() and not cancelled:
                # Hosts this worker no longer owns (see PostgresFrontier): none of their registered
                # URLs may start.  The fetcher cancels by registration, not by host, so all of them
                # come back cancelled and those of hosts still held wait to be claimed again.
                fetcher.cancel_pending()
            self._gate(frontier, fetcher)  # what lost_hosts() renewed, took and let go
            # A round's records and claims in one commit: a claim moves the rows next to those
            # that were just completed (their hosts' queues, the in-progress index), and one commit
            # writes each page once, not twice (a third fewer pages written, measured).
            with frontier.batch():
                if reports:
                    self._drain_reports(frontier, fetcher, reports)
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
                    # Claim in batches, not one URL per report: a claim is a transaction.  Only hosts
                    # with room in their window, so that the claim is of URLs the fetcher can start.
                    if room > 0 and (room >= window // 4 or not self._in_progress):
                        claimed = frontier.claim(
                            room, max_depth=self._layer(frontier), host_room=self._in_progress.room
                        )
                        if budget is not None:
                            budget -= len(claimed)
                        self._start(claimed, frontier, fetcher)
                self._give_back(self._robots.retry_due(fetcher), frontier)
                # Again as this round changed them, before its commit: a host it gives back has its
                # idle connections closed before another worker can take it (not after this
                # coordinator's next wait), and the hosts it took get their gates.
                self._gate(frontier, fetcher)
            robots_due = self._robots.next_retry()
            if time.monotonic() - counted_at > 0.5:  # counts() commits pending outcomes: not per report
                if config.keep_running:
                    # What fell due while this run goes on is fetched in it.  A URL is woken once a
                    # due period: done again, it is due an interval later.
                    frontier.wake()
                self._counts = frontier.counts()
                self._refused_now = sum(frontier.not_followed.values())
                counted_at = time.monotonic()
            if not self._in_progress:
                if self._stop.is_set() or budget == 0:
                    return
                due = frontier.next_due()
                if due is not None:
                    wait = min(1.0, max(0.0, due - time.time()))
                elif not config.keep_running:
                    return  # nothing waiting, nothing in progress: the crawl is complete
                elif frontier.wake():
                    wait = 0.0  # claimed in the next round
                else:
                    # Asleep until the next revisit: a second at most, for stop() and a worker's
                    # leases; never a spin, should PostgreSQL's clock (the frontier's) lag ours.
                    due = frontier.revisits().next_due
                    wait = 1.0 if due is None else min(1.0, max(0.05, due - time.time()))
            elif self._grace_over():
                return  # run() cancels what is still in flight and gives it back, no attempt counted
            else:
                wait = 0.2 if robots_due is None else min(0.2, max(0.0, robots_due - time.monotonic()))
            try:
                reports = [self._reports.get(timeout=wait)]
            except queue.Empty:
                reports = []

    def _grace_over(self) -> bool:
        """Whether a stop's grace for the fetches in flight has run out."""
        deadline = self._stop_deadline
        return deadline is not None and time.monotonic() >= deadline

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

    def _drain_reports(self, frontier: FrontierBackend, fetcher: NIOFetcher, reports: list[Report] | None = None) -> None:
        """Record every report that has arrived: robots.txt rules, then all the pages at once."""
        reports = reports or []
        while True:
            try:
                reports.append(self._reports.get_nowait())
            except queue.Empty:
                break
        robots: list[RobotsReply] = []
        pages: list[Page] = []
        broken: list[Broken] = []
        for report in reports:
            if isinstance(report, RobotsReply):
                robots.append(report)
            elif isinstance(report, Broken):
                broken.append(report)
            else:
                pages.extend(report)
        if robots:
            self._record_robots(robots, frontier, fetcher)
        if pages:
            self._record(pages, frontier)
        if broken:  # what did arrive is recorded; run() gives what is still in progress back to the frontier
            for report in broken:
                if isinstance(report.error, IO_ERRORS):
                    raise report.error
            raise RuntimeError(
                "crawl stopped: " + "; ".join(f"{b.where} died ({type(b.error).__name__}: {b.error})" for b in broken)
            )

    def _record_robots(self, replies: list[RobotsReply], frontier: FrontierBackend, fetcher: NIOFetcher) -> None:
        """Archive fetches of robots.txt, then settle their origins, in one commit: an answer stored
        (RobotsGate.arrived) is in the same transaction as the files' lengths that hold its records,
        and written after them, so that a crash, or an output that fails, keeps both or neither."""
        with frontier.batch():
            self._learn_addresses(reply.result for reply in replies)
            offsets = self._archive_robots(replies)
            for reply in replies:
                self._robots_arrived(reply, frontier, fetcher)
            if offsets is not None:
                frontier.complete_many([], checkpoint=offsets)

    def _archive_robots(self, replies: list[RobotsReply]) -> dict[str, int] | None:
        """Have the output write the records of these fetches of robots.txt (``commit_robots``, which
        an output may leave out); the files' lengths then, None when nothing was written.

        Every fetch is archived but a cancelled one, which has no answer: a redirect hop and an
        attempt that answered 5xx are captures too (one that failed before any response has none,
        and the output writes nothing of it).  On a shared frontier, also when the host changed
        hands meanwhile: the exchange was this worker's alone, and leaving it out on holds()'s word
        would lose it whenever the frontier still took the answer (the lease not yet taken over).
        """
        output = self.output
        commit_robots = getattr(output, "commit_robots", None)
        if commit_robots is None:
            return None
        fetches = [reply.result for reply in replies if reply.result.error is not ErrorKind.CANCELLED]
        if not fetches:
            return None
        offsets: dict[str, int] = commit_robots(fetches)
        return offsets

    def _robots_arrived(self, reply: RobotsReply, frontier: FrontierBackend, fetcher: NIOFetcher) -> None:
        """Settle what a fetch of robots.txt says, and start the URLs that waited for it."""
        released, give_back = self._robots.arrived(reply, frontier, fetcher)
        # Its host may have changed hands while robots.txt was fetched: then nothing of it starts.
        start: list[FrontierURL] = []
        lost: list[FrontierURL] = []
        for item in released:
            (start if frontier.holds(item.host) else lost).append(item)
        self._give_back(give_back + lost, frontier)
        if self._sitemaps is not None:
            frontier.add_many(self._sitemaps.from_robots(reply.origin, self._robots.rules(reply.origin)))
        for item in start:
            self._in_progress.pop(item.url)
        self._start(start, frontier, fetcher)

    # -- coordinator: starting URLs ---------------------------------------------

    def _start(self, items: list[FrontierURL], frontier: FrontierBackend, fetcher: NIOFetcher) -> None:
        """Register claimed URLs, those that robots.txt lets through, with one ``register_many()``.

        Each URL gets its own robots.txt decision first: it waits for its origin's rules, is
        refused, or goes to the fetcher.  What the fetcher does not take (stopping) waits for a resume.
        """
        if items:
            self._gate(frontier, fetcher)  # the claim may have taken hosts: their gates before their URLs
            duplicates = self._duplicates
            if duplicates is not None:  # each host's done pages known before any of its pages is parsed
                for host in {item.host for item in items}:
                    if duplicates.needs(host):
                        duplicates.load(host, ((url, Fingerprint(digest, simhash))
                                               for url, digest, simhash in frontier.fingerprints(host)))
        beans: list[URLBean] = []
        for item in items:
            origin = parse_target(item.url).origin
            if self.config.obey_robots:
                rules = self._robots.rules(origin)
                if rules is None:  # it waits for its origin's robots.txt, in progress meanwhile
                    self._in_progress.add(item)
                    self._give_back(self._robots.hold(item, origin, fetcher), frontier)
                    continue
                if self._robots.crawl_delay(rules):
                    self._in_progress.slow_down(item.host)
                refusal = rules.refuses(item.url, self.config.fetcher.user_agent)
                if refusal:
                    self._in_progress.pop(item.url)
                    self._give_up(frontier, item.url, refusal)
                    self._errors["robots_unavailable" if rules.refusal else "robots_disallowed"] += 1
                    continue
            beans.append(URLBean(item.url, priority=item.priority, headers=self._headers(origin, item),
                                 meta={"frontier": item, "origin": origin, "lastmod": item.lastmod}))
        if not beans:
            return
        accepted = 0 if self._stop.is_set() else fetcher.register_many(beans)  # the first ones, in order
        for bean in beans[:accepted]:
            self._in_progress.add(bean.meta["frontier"])
            self._active[bean.meta["origin"]] += 1
        refused = beans[accepted:]
        if refused:
            for bean in refused:
                self._in_progress.pop(bean.url)
            frontier.release([bean.url for bean in refused])  # stopping: the URLs wait for a resume

    @staticmethod
    def _gate(frontier: FrontierBackend, fetcher: NIOFetcher) -> None:
        """Bring the fetcher's start gates up to date with the hosts' leases: a worker that cannot
        renew a lease stops starting requests to that host before the lease ends by its own clock,
        even when its fetcher's loop runs first after a pause (docs/distributed.md)."""
        gates = frontier.start_deadlines()
        if gates:
            fetcher.set_host_deadlines(gates)

    def _give_back(self, held: list[FrontierURL], frontier: FrontierBackend) -> None:
        """URLs that waited for their origin's robots.txt go back to 'waiting' (stopping): nothing is settled."""
        if not held:
            return
        for item in held:
            self._in_progress.pop(item.url)
        frontier.release([item.url for item in held])

    # -- coordinator: recording outcomes ------------------------------------------

    def _record(self, pages: list[Page], frontier: FrontierBackend) -> None:
        """Record a batch of pages, links and outcomes in one commit: a crash keeps both or neither
        (a page fetched again rather than its links lost)."""
        pages = [page for page in pages if page.item.url in self._in_progress]
        lastmods: dict[str, str] = {}  # what the sitemaps among them date
        links = [entry for page in pages for entry in self._link_entries(page, lastmods)]
        completed: list[tuple[str, int | None]] = []
        visits: dict[str, Visit] = {}  # with a revisit policy: what each completed page leaves for the next visit
        printed: list[tuple[str, bytes, int, str | None]] = []  # what duplicate detection keeps of them
        active = self._active
        # One commit for the batch: a failure committed alone, before the checkpoint that covers its
        # record, would have that record cut away on resume and never written again; and one commit
        # rather than two writes each page of the frontier's indexes that both touch once.
        with frontier.batch():
            self._learn_addresses(page.result for page in pages)
            if links and lastmods and self.config.revisit is not None:
                # A page its sitemap dates after its last visit is due now, in this run.
                frontier.add_many(links, lastmods, wake_modified=True)
            elif links:
                frontier.add_many(links, lastmods or None)
            # The records first, durable, then the outcomes with the files' lengths: a crash in between
            # leaves records past the stored lengths, which the next run cuts away.
            offsets = None
            if self.output is not None:
                delivered = [page.item.url for page in pages if page.final and not page.failure]
                if delivered:
                    # Only where the outcome will count: a page whose host changed hands since its
                    # claim is another worker's, and that worker writes its record.
                    recorded = frontier.recordable(delivered)
                    offsets = self.output.commit(recorded)
                    # The others' records are never to be written.  discard() is optional (the CLI's
                    # writer has it): an output without it keeps those few, only when hosts changed hands.
                    discard = getattr(self.output, "discard", None)
                    if discard is not None and len(recorded) < len(delivered):
                        discard(set(delivered).difference(recorded))
            for page in pages:
                origin = page.result.bean.meta["origin"]
                active[origin] -= 1
                if not active[origin]:
                    del active[origin]
                if page.final:
                    self._finished += 1
                    self._responses += page.result.status is not None
                    self._bytes += len(page.result.body)
                if page.final and not page.failure and (
                    page.result.ok or is_redirect(page.result) or not page.changed or self._no_sitemap_there(page)
                ):
                    completed.append((page.item.url, page.result.status))
                    if self.config.revisit is not None:
                        visits[page.item.url] = visit_of(page, self.config.revisit)
                        self._unchanged += not page.changed
                    if page.fingerprint is not None:
                        printed.append((page.item.url, *page.fingerprint, page.duplicate_of))
                        self._duplicates_found += page.duplicate_of is not None
                else:
                    self._record_failure(page, frontier)
                    self._in_progress.pop(page.item.url)
            if printed:
                frontier.store_fingerprints(printed)
            if visits:
                frontier.complete_many(completed, checkpoint=offsets, visits=visits)
            else:
                frontier.complete_many(completed, checkpoint=offsets)
        # Only now: should recording them fail, they are still in progress, and run() gives them back.
        for url, _ in completed:
            self._in_progress.pop(url)

    def _learn_addresses(self, results: Iterable[FetchResult]) -> None:
        """In a crawl whose hosts of one address are one worker's: tell the frontier where these
        answers came from (docs/distributed.md, "One worker per address")."""
        note = self._note_addresses
        if note is not None:
            peers = {host_key(result.url): result.peer for result in results if result.peer is not None}
            if peers:
                note(peers)

    def _link_entries(self, page: Page, lastmods: dict[str, str]) -> list[tuple[str, int, str | None, int]]:
        """The frontier entries for the links ``page`` leads to: (url, depth, parent, priority);
        a sitemap's ``<lastmod>`` of them goes in ``lastmods``.  A page found unchanged adds none:
        its links are those its visit before added."""
        if not page.final or page.failure or not page.changed:
            return []
        if self._sitemaps is not None and self._sitemaps.is_sitemap(page.item):
            return self._sitemaps.entries(page.item, page.result, self.config.max_depth, lastmods)
        depth = page.item.depth + 1
        if self.config.max_depth is not None and depth > self.config.max_depth:
            return []
        return [(url, depth, page.item.url, 0) for url in self._scope.after_headers(page.result, page.followed)]

    def _no_sitemap_there(self, page: Page) -> bool:
        """Whether ``page`` is a sitemap probe's 4xx: an answer (no sitemap there), not a failure."""
        return self._sitemaps is not None and self._sitemaps.found_none(page.item, page.result)

    def _record_failure(self, page: Page, frontier: FrontierBackend) -> None:
        result = page.result
        url = page.item.url
        if not page.final:
            if result.error is ErrorKind.CANCELLED:
                frontier.release([url])  # not the URL's fault: the attempt does not count
            else:
                frontier.fail(url, error_text(result), result.status,
                              self.config.retries.retry_in(page.item.attempts, retry_after(result)))
        elif page.failure:
            self._errors["on_page_failed"] += 1
            self._give_up(frontier, url, page.failure, result.status)
        else:
            self._errors[result.error.value if result.error is not None else f"http_{result.status}"] += 1
            self._give_up(frontier, url, error_text(result), result.status)


    def _give_up(self, frontier: FrontierBackend, url: str, error: str, status: int | None = None) -> None:
        """A claimed URL ends 'error': with a revisit policy, due again after its longest interval
        (a site that was down may be back)."""
        policy = self.config.revisit
        if policy is None:
            frontier.fail(url, error, status)
        else:
            frontier.fail(url, error, status, revisit_in=policy.error_revisit_in())


@contextlib.contextmanager
def _cleaning_up_after(error: BaseException | None) -> Iterator[None]:
    """Clean-up after ``error`` ended the crawl: an I/O error of its own (the disk is still full)
    must not hide the one that ended it, which run() raises."""
    try:
        yield
    except IO_ERRORS:
        if error is None:
            raise


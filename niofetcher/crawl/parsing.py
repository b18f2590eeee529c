"""The parse executor of a crawl: parse jobs in parse processes, or in threads, and in the crawl's
own threads once a parse process has died.

A job is a list of pages -- only the bodies, final URLs and Content-Types, see :data:`ParseInput`
-- and :func:`parse_pages` runs it wherever it goes: it brings back the followed links of each
page, and the whole PageLinks only when an ``on_page`` will see it.  Pages travel in jobs, not
one by one, because a hand-over to a process costs a pickling round trip and a future: at a
thousand pages a second those costs, not the parsing, would set the pace.  A job is cut by the
pages' bytes (:func:`jobs`), and its bodies go to a parse process out of band (``PickleBuffer``):
written from the fetcher's bytes, not copied into a pickle first.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from pickle import PickleBuffer
from typing import NamedTuple, TypeVar

from .dedup import Fingerprint, page_fingerprint
from .parse import PageLinks, extract, extractor_module
from .policy import LinkScope
from .workers import ParseProcessPool

__all__ = ["ParseExecutor", "ParseInput", "ParseOutput", "jobs", "parse_pages"]

log = logging.getLogger("niofetcher")

_T = TypeVar("_T")

# A parse job's page: what extract() needs of a FetchResult and nothing else (body, final URL, Content-Type) ...
ParseInput = tuple[bytes, str, str | None]
# ... as parse_pages() takes it: the body may be a buffer of the bytes (a PickleBuffer on its way to a
# parse process arrives there as a memoryview of the job read from the pipe).
_Received = tuple[bytes | memoryview | PickleBuffer, str, str | None]
# ... and what comes back: the followed URLs, the PageLinks when asked for, why parsing failed ("": it did not),
# and with duplicate detection the page's fingerprints (None: without it, or a page of no words).
ParseOutput = tuple[list[str], PageLinks | None, str, Fingerprint | None]

# A parse job's bodies, at most (a single larger page is a job of its own): enough to make a job's
# overhead small (measured: 512 KiB cost the parent a third more CPU per page), few enough that the
# job, with its pickle, fits in the parse process's pipe (1 MiB, see workers.py), and that a job of large real pages (bs4: tens of ms each) does not
# hold its pages back for long.
_MAX_JOB_BYTES = 960 * 1024
# ... and its pages, at most: small pages still cost a parse each.
_MAX_JOB_PAGES = 32


def parse_pages(
    pages: Sequence[_Received], extractor: str, scope: LinkScope, keep_links: bool, fingerprints: bool = False,
) -> list[ParseOutput]:
    """One parse job, run in a parse process (or thread): the links of each page, filtered by ``scope``.

    Without ``keep_links`` only the links (and the title) are extracted (no images, forms, tables): nobody
    would see the rest.  With ``fingerprints`` (duplicate detection, crawl/dedup.py) each page's text
    is fingerprinted too, here beside the download as its links are.  A page that cannot be parsed
    fails alone, with its reason; the rest of the job goes on.
    """
    outputs: list[ParseOutput] = []
    for body, url, content_type in pages:
        try:
            # bytes() copies a view out of the pipe's buffer (and is the bytes themselves otherwise).
            page = bytes(body)
            links = extract(page, url, content_type, extractor, links_only=not keep_links)
            printed = page_fingerprint(page, content_type) if fingerprints else None
            outputs.append((scope.followed(links), links if keep_links else None, "", printed))
        except Exception as exc:
            log.exception("parsing %s failed", url)
            outputs.append(([], None, f"{type(exc).__name__}: {exc}", None))
    return outputs


def jobs(pages: list[_T], workers: int, size: Callable[[_T], int]) -> list[list[_T]]:
    """``pages`` (of ``size(page)`` bytes) cut in order into parse jobs of at most _MAX_JOB_BYTES and
    _MAX_JOB_PAGES, and into one per worker when they are few (by count and by bytes)."""
    sizes = [size(page) for page in pages]
    most_bytes = min(_MAX_JOB_BYTES, -(-sum(sizes) // workers))
    most_pages = min(_MAX_JOB_PAGES, -(-len(pages) // workers))
    cut: list[list[_T]] = []
    job: list[_T] = []
    job_bytes = 0
    for page, page_bytes in zip(pages, sizes):
        if job and (job_bytes + page_bytes > most_bytes or len(job) == most_pages):
            cut.append(job)
            job, job_bytes = [], 0
        job.append(page)
        job_bytes += page_bytes
    if job:
        cut.append(job)
    return cut


class _Job(NamedTuple):
    """The arguments of one parse_pages() call."""

    pages: list[ParseInput]
    extractor: str
    scope: LinkScope
    keep_links: bool
    fingerprints: bool


class ParseExecutor:
    """Runs the parse jobs of one crawl: ``workers`` processes (``mode="process"``) or threads.

    A job's outputs go to its ``done`` callback, in the thread where the job ended: the process
    pool's reader thread, or the parse thread.  When a parse process dies the pool is broken for
    good, and every job from then on -- those it held included -- is parsed in the thread that
    finds out (slower, but nothing is lost).  A ``done`` that raises is logged and handed to
    ``failed``: a job's pages must not vanish without the crawl hearing of it.
    """

    def __init__(
        self, mode: str, workers: int, extractor: str, scope: LinkScope, failed: Callable[[BaseException], None],
        fingerprints: bool = False,
    ) -> None:
        # The extractor's module, here too, whatever the mode: a bs4 that no longer drives its builder
        # as links_bs4 expects (its check at import) stops the crawl now, not every page later.
        importlib.import_module(extractor_module(extractor))
        self._extractor = extractor
        self._scope = scope
        self._fingerprints = fingerprints  # each page's text fingerprinted too (duplicate detection)
        self._failed = failed
        self._pool_broken = False  # a parse process died: parsing goes on in this process
        self._executor: concurrent.futures.Executor
        self._out_of_band = mode != "thread"  # bodies as PickleBuffers: written to the process, not pickled
        if mode == "thread":
            self._executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="niofetcher-crawl-parse")
        else:
            # Processes on niofetcher's own entry point: they never import the user's __main__, so a
            # crawl script needs no __main__ guard.  They start now and import this module and the
            # extractor's (lxml, and bs4 for its extractor) while robots.txt and the seeds are fetched.
            self._executor = ParseProcessPool(workers, preload=(__name__, extractor_module(extractor)))

    def submit(self, pages: list[ParseInput], keep_links: bool, done: Callable[[list[ParseOutput]], None]) -> None:
        """Send one parse job; ``done(outputs)`` gets its outputs, one per page, in order."""
        job = _Job(pages, self._extractor, self._scope, keep_links, self._fingerprints)
        sent = [(PickleBuffer(body), url, content_type) for body, url, content_type in pages] if self._out_of_band else pages
        try:
            future = self._executor.submit(parse_pages, sent, *job[1:])
        except (BrokenProcessPool, RuntimeError) as exc:  # a parse process died, or the pool was shut
            self._parse_here(job, exc, done)
            return
        future.add_done_callback(lambda finished: self._job_done(job, finished, done))

    def shutdown(self, cancel_pending: bool = False) -> None:
        """Wait until every job submitted is parsed and handed to its ``done``, and stop the workers.

        ``cancel_pending``: the jobs no worker has started yet are dropped instead, and their
        ``done`` is never called (a crawl whose stop's grace ran out gives their pages back)."""
        self._executor.shutdown(wait=True, cancel_futures=cancel_pending)

    def __enter__(self) -> ParseExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _job_done(
        self, job: _Job, future: concurrent.futures.Future[list[ParseOutput]],
        done: Callable[[list[ParseOutput]], None],
    ) -> None:
        # exception(), not result() in a try: raising it again would tie the exception, through the
        # frames of its traceback, to the pool's pipes (a cycle only the garbage collector breaks).
        if future.cancelled():  # shutdown(cancel_pending=True): its pages are given back, not parsed
            return
        try:
            exc = future.exception()
            if exc is not None:  # BrokenProcessPool: a parse process died; parse_pages itself raises for nothing
                self._parse_here(job, exc, done)
                return
            done(future.result())
        except BaseException as exc:
            log.exception("handing over a parse job failed")
            self._failed(exc)

    def _parse_here(self, job: _Job, exc: BaseException, done: Callable[[list[ParseOutput]], None]) -> None:
        """The parse pool is broken: parse in this thread (slower, but nothing is lost)."""
        if not self._pool_broken:
            self._pool_broken = True
            # str(exc): a log record keeping the exception would keep its traceback's frames alive.
            log.error("parse pool unusable (%s); parsing in the crawler's own threads from now on", str(exc))
        done(parse_pages(*job))

"""What a crawl is given and what it gives back: CrawlConfig, CrawledPage, CrawlOutput, CrawlSummary, CrawlProgress."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..config import FetcherConfig
from ..extractor_names import check_extractor
from ..models import FetchResult
from ..urls import QueryCleaner, domain_host, parse_target
from .directives import canonical_header, header_directives
from .frontier.base import check_crawl_name
from .frontier.locations import check_shared_location
from .schedule import RetrySchedule, RevisitPolicy

if TYPE_CHECKING:  # a program that reads CrawlConfig need not load bs4 and lxml
    from .parse import PageLinks

__all__ = ["DEDUP_MODES", "PARSE_MODES", "CrawlConfig", "CrawlOutput", "CrawlProgress", "CrawlSummary", "CrawledPage"]

#: The values of ``CrawlConfig.parse_mode``: parse processes, or threads of the crawl's own process.
PARSE_MODES = ("process", "thread")
#: What ``CrawlConfig.dedup`` may be besides None: which fingerprint finds a duplicate (crawl/dedup.py).
DEDUP_MODES = ("exact", "near")


@dataclass(frozen=True)
class CrawlConfig:
    """What to crawl and how.  Invalid values raise ValueError."""

    seeds: Sequence[str]
    db_path: str = ":memory:"
    max_pages: int | None = None
    max_depth: int | None = None
    # None: the seeds' hosts; subdomains included.  Each entry as urls.domain_host reads it (example.com,
    # *.example.com, host:port, a URL), kept as the bare host it names: the scope is by host, not port.
    allowed_domains: Sequence[str] | None = None
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
    # A PostgreSQL frontier (postgresql://user@host:port/db) instead of the SQLite file at db_path,
    # and the name of the crawl in that database (one database holds several crawls).
    frontier: str | None = None
    crawl_name: str | None = None
    # Seed also from each seed host's robots.txt Sitemap: lines and /sitemap.xml (sitemaps.py).
    sitemaps: bool = False
    # Seconds a worker of a PostgreSQL frontier owns a host after each renewal (renewed every third).
    lease_seconds: float = 10.0
    # Traps (crawl/frontier/traps.py): None turns a limit off.  Once a host has max_pages_per_host URLs
    # in the frontier its further links are not followed; a link whose stored form is longer than
    # max_url_length, or whose path has one segment more than max_path_repeats times, is not followed;
    # the query (and ;path) parameters named by strip_query_params (case-insensitive, * a wildcard)
    # are dropped from every URL stored.  Seeds are cleaned, never refused.
    max_pages_per_host: int | None = None
    max_url_length: int | None = 2048
    max_path_repeats: int | None = 2
    strip_query_params: Sequence[str] = ("jsessionid", "phpsessid", "sid", "sessionid", "utm_*")
    # Duplicates (crawl/dedup.py): "exact" (the same words) or "near" (a simhash within 3 bits) of a
    # page already done on its host: the page is done with duplicate_of set, its links not followed.
    dedup: str | None = None
    # Revisits (crawl/schedule.py): a done URL is due again after the policy's interval and fetched
    # with a conditional GET; a run claims what is due now and ends when nothing is.  None: done is done.
    revisit: RevisitPolicy | None = None
    # With a revisit policy: instead of ending when nothing is due, sleep until the next URL falls
    # due and fetch it, until stopped; URLs that fall due while the run goes on are fetched in it.
    keep_running: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.seeds, str) or not self.seeds:
            raise ValueError("seeds must be a non-empty sequence of URLs")
        for seed in self.seeds:
            parse_target(seed)  # raises ValueError for a bad seed
        self._check_allowed_domains()
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
        check_extractor(self.extractor)  # one of EXTRACTORS, and its library installed
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
        self._check_frontier()
        self._check_traps()
        if self.dedup is not None and self.dedup not in DEDUP_MODES:
            raise ValueError(f"dedup must be None, 'exact' or 'near', not {self.dedup!r}")
        if self.revisit is not None and not isinstance(self.revisit, RevisitPolicy):
            raise TypeError(f"revisit must be a RevisitPolicy or None, not {self.revisit!r}")
        if not isinstance(self.keep_running, bool):
            raise TypeError(f"keep_running must be a bool, not {self.keep_running!r}")
        if self.keep_running and self.revisit is None:
            raise ValueError("keep_running needs a revisit policy: without one a crawl has nothing to wait for")

    @property
    def retries(self) -> RetrySchedule:
        """The retry policy of ``max_attempts`` and ``retry_delay`` (doubling up to 300 s), which
        the crawler asks how long a failed URL waits: the frontier is told, and decides nothing."""
        return RetrySchedule(self.max_attempts, self.retry_delay)

    def _check_allowed_domains(self) -> None:
        """Read each allowed domain as its host (a tuple of them); ValueError for an entry that
        names none, and for no entry at all, which would follow no link: never a crawl of the
        seeds alone by accident."""
        domains = self.allowed_domains
        if domains is None:
            return
        if isinstance(domains, str) or not domains:
            raise ValueError(f"allowed_domains must be a non-empty sequence of domains (None: the seeds' hosts; "
                             f"max_depth=0 fetches the seeds alone), not {domains!r}")
        object.__setattr__(self, "allowed_domains", tuple(domain_host(entry) for entry in domains))

    def _check_traps(self) -> None:
        for name in ("max_pages_per_host", "max_url_length", "max_path_repeats"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int or None (no limit), not {value!r}")
        params = self.strip_query_params
        if isinstance(params, str) or not isinstance(params, Sequence):
            raise ValueError(f"strip_query_params must be a sequence of parameter names (() strips none), "
                             f"not {params!r}")
        QueryCleaner(params)  # ValueError for a name no URL can have
        object.__setattr__(self, "strip_query_params", tuple(params))

    def _check_frontier(self) -> None:
        lease = self.lease_seconds
        if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not 0 < lease < float("inf"):
            raise ValueError(f"lease_seconds must be a positive number of seconds, not {lease!r}")
        if self.frontier is None:
            if self.crawl_name is not None:
                raise ValueError("crawl_name names a crawl in a PostgreSQL frontier: give frontier too")
            return
        check_shared_location(self.frontier)
        if self.db_path != ":memory:":
            raise ValueError("give db_path (a SQLite frontier) or frontier (a PostgreSQL one), not both")
        if self.crawl_name is None:
            raise ValueError("a PostgreSQL frontier needs crawl_name: the crawl's name in that database")
        try:  # kept as the name of its schema, in lower case (frontier.base.check_crawl_name says why)
            object.__setattr__(self, "crawl_name", check_crawl_name(self.crawl_name))
        except TypeError as exc:
            raise ValueError(str(exc)) from None


@dataclass(slots=True)
class CrawledPage:
    """What ``on_page`` receives: the final fetch of one URL, its place in the crawl and its links."""

    result: FetchResult
    depth: int
    parent: str | None
    links: PageLinks | None  # None unless the page was HTML and fetched
    # With CrawlConfig.dedup: the done page of its host whose text it repeats; its links are not followed.
    duplicate_of: str | None = None
    # False for a revisit that found the page unchanged (a 304, or the same body): not parsed, its
    # links not added again; True for a first visit and a changed page (CrawlConfig.revisit).
    changed: bool = True
    # For an unchanged page: when the response of the capture it repeats came in (unix seconds), the
    # last visit that found it changed; None for a changed page, or when that time was never kept.
    repeats: float | None = None

    @property
    def url(self) -> str:
        """The URL as the frontier stores it, which was fetched (``result.url``)."""
        return self.result.url

    @property
    def robots(self) -> frozenset[str]:
        """The page's robots directives: ``<meta name="robots">`` and ``X-Robots-Tag`` together."""
        meta = self.links.robots if self.links is not None else frozenset()
        return meta | header_directives(self.result) if self.result.headers else meta

    @property
    def noindex(self) -> bool:
        """The page asks not to be indexed (``noindex`` or ``none``).  It was fetched and is recorded
        all the same, flagged: what an index leaves out is the indexer's call (docs/crawler.md)."""
        return "noindex" in self.robots

    @property
    def canonical(self) -> str | None:
        """The page's canonical URL, absolute: its ``Link: <...>; rel="canonical"`` header, else its
        ``<link rel="canonical">``; None when it names none."""
        return canonical_header(self.result) or (self.links.canonical if self.links is not None else None)

    @property
    def lastmod(self) -> str | None:
        """The ``<lastmod>`` of the sitemap entry that led to this URL, as written there (kept in the frontier)."""
        lastmod: str | None = self.result.bean.meta.get("lastmod")
        return lastmod


class CrawlOutput(Protocol):
    """Files that must hold exactly one record per recorded URL, whatever stops the crawl.

    Two methods are optional, and looked for by name: ``discard(urls)``, which forgets the prepared
    records of URLs whose hosts went to another worker (a shared frontier), and
    ``commit_robots(fetches: Sequence[FetchResult]) -> dict[str, int]``, which writes the records of
    fetches of robots.txt as commit() writes a batch's -- each redirect hop and each attempt that got
    a response, archived once, before what they said is stored, with the offsets it returns.  An
    output without it archives no robots.txt.
    """

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
    # With CrawlConfig.sitemaps: sitemap files read, URLs added from them, invalid, cut (see Sitemaps).
    sitemaps: dict[str, int] = field(default_factory=dict)
    # Of ``pages``, those an HTTP response came for (any status): none with every seed unreachable.
    responses: int = 0
    # Links not followed in this run because a trap rule refused them, by the option that did
    # (max_url_length, max_path_repeats, max_pages_per_host).
    refused: dict[str, int] = field(default_factory=dict)
    # Pages of this run done as duplicates of a page done before on their host (CrawlConfig.dedup).
    duplicates: int = 0
    # With CrawlConfig.revisit: pages of this run found unchanged (a 304, or the same body) ...
    unchanged: int = 0
    # ... and, at its end, the done and error URLs due again now, and when the next falls due
    # (unix time; None when none will).
    due: int = 0
    next_due: float | None = None

    @property
    def pages_per_second(self) -> float:
        """Pages finished per second of the run."""
        return self.pages / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class CrawlProgress:
    """A snapshot for progress displays."""

    done: int
    errors: int
    in_flight: int  # claimed from the frontier and not yet recorded (fetching, parsing, delivering)
    waiting: int
    seconds: float
    fetching: int = 0  # requests the fetcher has on the wire now
    open_connections: int = 0  # the fetcher's sockets, idle keep-alive ones included
    refused: int = 0  # links the trap rules refused in this run (CrawlSummary.refused has them by cause)

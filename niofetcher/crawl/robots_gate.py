"""robots.txt in a crawl: fetched per (scheme, host, port) before the first page of that origin,
and the URLs of an origin held until it is settled.

``robots.py`` says what one fetch of robots.txt means; this module fetches it through the crawl's
fetcher and keeps the books.  Its redirects are followed, up to five, even to another host; a 4xx
means "no rules"; a 5xx or a network error means "complete disallow" for now.  URLs of an origin
wait (in memory, still ``processing`` in the frontier) until its robots.txt has been settled.  An
unreachable robots.txt is fetched again with the crawl's own retry policy (``retry_delay``,
doubling, never sooner than a Retry-After), up to ``max_attempts`` fetches; then every URL of that
origin ends ``error`` ("robots.txt unavailable: HTTP 503").  Its Crawl-delay becomes that origin's
host delay, capped at ``max_crawl_delay`` (as Heritrix's ``respectCrawlDelayUpToSeconds``): a
``Crawl-delay: 3600`` must not stall a crawl for an hour a page.

Every final answer fetched (a 2xx or a 4xx) is stored in the frontier with its host (a 2xx as its
text, decoded by the charset its Content-Type names: ``robots.stored_body``), and kept there for a
day: the rules of an origin aged out of memory are read back from there rather than
fetched again, and so are they by a resumed crawl, and, on PostgreSQL, by a worker that takes the
host over (``use()`` gives the gate the frontier).  Rules are used for a day from their fetch at
most (RFC 9309 2.4), in memory too.

The gate keeps the books and says what to do, the coordinator does it: each method returns the
held URLs that the coordinator must start now (their robots.txt is settled) or give back to the
frontier (the crawl is stopping and nothing was settled).  Only the coordinator's thread calls it.

Each fetch of robots.txt that got a response is a capture of the crawl's, archived as Heritrix
archives every fetch: each redirect hop, each attempt that answered 5xx.  The coordinator has the
crawl's output write a fetch's records before it calls :meth:`RobotsGate.arrived`, in the frontier
transaction that stores the files' lengths: an answer is never stored without its records, and a
crash before that commit leaves records that the next run cuts away, and fetches again.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

from ..errors import ErrorKind
from ..fetcher import NIOFetcher
from ..models import FetchResult, URLBean
from ..urls import Origin, host_key, normalize_url, parse_target
from .frontier import FrontierBackend, FrontierURL
from .frontier.base import ROBOTS_SECONDS
from .policy import error_text, retry_after
from .robots import Redirect, RobotsRules, RobotsTable, interpret, stored_body, stored_rules
from .schedule import RetrySchedule

__all__ = ["Released", "RobotsGate", "RobotsReply"]

log = logging.getLogger("niofetcher")

_ROBOTS_PRIORITY = 1 << 30  # robots.txt jumps every queue: pages of its host wait for it
# The weight of the robots.txt rules kept in memory (of origins with nothing in progress), in units
# of LINES_PER_UNIT rule lines: 16,384 robots.txt of up to 7 rules, 2,000 of sixty, 45 MB at most.
# A crawl of more hosts than that reads an aged-out one's answer back from the frontier (a lookup
# and a parse: 10 us for two lines), or fetches it again when the frontier kept none.
_ROBOTS_CAPACITY = 16384


@dataclass(slots=True)
class RobotsReply:
    """A fetch of robots.txt, on its way from the pump to the coordinator."""

    origin: Origin  # whose robots.txt this is
    result: FetchResult
    hops: int  # redirects followed to get here

    @staticmethod
    def of(result: FetchResult) -> RobotsReply | None:
        """The reply that ``result`` is, when it is a fetch of robots.txt that the gate asked for."""
        meta = result.bean.meta
        if "robots" not in meta:
            return None
        return RobotsReply(meta["robots"], result, meta["hops"])


class Released(NamedTuple):
    """Held URLs that the gate lets go of."""

    start: list[FrontierURL]  # their robots.txt is settled: start them (its rules may refuse them)
    give_back: list[FrontierURL]  # stopping: back to 'waiting', nothing is settled


_NOTHING = Released([], [])


class RobotsGate:
    """The robots.txt rules of each origin, the URLs that wait for them, and the fetches of robots.txt.

    Args:
        user_agent: whose rules apply, and whose Crawl-delay.
        retries: the crawl's retry policy, which an unreachable robots.txt follows as a page does
            (its ``max_attempts`` fetches, then its origin's URLs end 'error'); an int: that many
            attempts, with the default waits.
        max_crawl_delay: the longest Crawl-delay applied, in seconds.
        busy: whether an origin has URLs in progress (its rules are never aged out then).
        stopping: set when the crawl stops: no robots.txt is fetched from then on.
        headers: the headers of a request to an origin (its credentials): robots.txt is asked for
            as the origin's pages are -- a site behind Basic auth answers 401 otherwise -- and each
            redirect hop gets its own origin's.
    """

    def __init__(
        self, user_agent: str, retries: RetrySchedule | int, max_crawl_delay: float,
        busy: Callable[[Origin], bool], stopping: threading.Event,
        headers: Callable[[Origin], dict[str, str]] = lambda origin: {},
    ) -> None:
        self._user_agent = user_agent
        self._headers = headers
        self._schedule = retries if isinstance(retries, RetrySchedule) else RetrySchedule(retries)
        self._max_crawl_delay = max_crawl_delay
        self._stop = stopping
        self._rules = RobotsTable(_ROBOTS_CAPACITY, busy=busy)
        self._held: dict[Origin, list[FrontierURL]] = {}  # URLs waiting for their origin's robots.txt
        self._fetches: dict[Origin, int] = {}  # fetches of an unreachable robots.txt so far
        self._retries: list[tuple[float, Origin]] = []  # heap: when to fetch robots.txt again
        self._shared: tuple[FrontierBackend, NIOFetcher] | None = None  # where stored answers are read
        self._asked: set[Origin] = set()  # origins the frontier had no stored answer for

    def __len__(self) -> int:
        """How many origins' rules are kept (bounded: see :class:`RobotsTable`)."""
        return len(self._rules)

    def use(self, frontier: FrontierBackend, fetcher: NIOFetcher) -> None:
        """Read the answers stored in ``frontier`` (by this crawl before, or by another worker)
        before fetching robots.txt (the Crawl-delay of one goes to ``fetcher``)."""
        self._shared = (frontier, fetcher)

    def rules(self, origin: Origin) -> RobotsRules | None:
        """The rules of ``origin``, None while they are not known: then :meth:`hold` its URLs."""
        rules = self._rules.get(origin)
        if rules is None and self._shared is not None and origin not in self._held and origin not in self._asked:
            frontier, fetcher = self._shared
            stored = frontier.robots(_host(origin))
            if stored is None:
                if len(self._asked) >= _ROBOTS_CAPACITY:
                    self._asked.clear()  # bounded: an origin asked about again costs one look
                self._asked.add(origin)
                return None
            answer = stored_rules(stored.status, stored.body, self._user_agent)
            self._apply_crawl_delay(origin, answer, fetcher)
            rules = self._keep(origin, answer, stored.age)
        return rules

    def held_urls(self) -> set[str]:
        """The URLs waiting for their origin's robots.txt."""
        return {item.url for items in self._held.values() for item in items}

    def next_retry(self) -> float | None:
        """When (``time.monotonic()``) the next unreachable robots.txt is due to be fetched again."""
        return self._retries[0][0] if self._retries else None

    def hold(self, item: FrontierURL, origin: Origin, fetcher: NIOFetcher) -> list[FrontierURL]:
        """``item`` waits for its origin's robots.txt, which is fetched unless it is on its way already.

        Returns the URLs to give back (stopping: robots.txt could not be asked for), else [].
        """
        held = self._held.get(origin)
        if held is not None:
            held.append(item)
            return []
        self._held[origin] = [item]
        return self._fetch(origin, f"{origin}/robots.txt", 0, fetcher)

    def arrived(self, reply: RobotsReply, frontier: FrontierBackend, fetcher: NIOFetcher) -> Released:
        """A robots.txt fetch came back: settle its origin, fetch the next hop, or retry later.

        A final answer is stored in ``frontier`` here: the caller has the fetch archived first.
        """
        origin, result = reply.origin, reply.result
        if result.error is ErrorKind.CANCELLED:  # stopping: no answer, no attempt counted
            return Released([], self._give_back(origin))
        answer = interpret(result, reply.hops, self._user_agent)
        if isinstance(answer, Redirect):
            return Released([], self._fetch(origin, answer.url, answer.hops, fetcher))
        if answer is None:  # unreachable: complete disallow, and fetch it again later
            fetches = self._fetches[origin] = self._fetches.get(origin, 0) + 1
            if self._stop.is_set():
                return Released([], self._give_back(origin))
            delay = None if result.refused else self._schedule.retry_in(fetches, retry_after(result))
            if delay is not None:
                # The same policy as a page's: retry_delay, doubling, never sooner than a Retry-After.
                heapq.heappush(self._retries, (time.monotonic() + delay, origin))
                return _NOTHING
            answer = RobotsRules(refusal=f"robots.txt unavailable: {error_text(result)}")
        self._fetches.pop(origin, None)
        status = result.status
        if answer.refusal == "" and status is not None and (200 <= status < 300 or 400 <= status < 500):
            frontier.store_robots(_host(origin), status, stored_body(result))  # for when its rules age out
            self._asked.discard(origin)  # ... so that the frontier is asked again then
        self._apply_crawl_delay(origin, answer, fetcher)
        self._keep(origin, answer, 0.0)
        return Released(self._held.pop(origin, []), [])

    def _keep(self, origin: Origin, rules: RobotsRules, age: float) -> RobotsRules:
        """Keep ``rules``, fetched ``age`` seconds ago, in memory until they are a day old."""
        kept = replace(rules, expires=time.monotonic() + ROBOTS_SECONDS - age)
        self._rules.put(origin, kept)
        return kept

    def retry_due(self, fetcher: NIOFetcher) -> list[FrontierURL]:
        """Fetch again each unreachable robots.txt whose retry is due (or give its URLs back when
        stopping); the URLs to give back."""
        retries = self._retries
        given_back: list[FrontierURL] = []
        now = time.monotonic()
        while retries and (retries[0][0] <= now or self._stop.is_set()):
            _, origin = heapq.heappop(retries)
            if self._stop.is_set():
                given_back += self._give_back(origin)
            else:
                given_back += self._fetch(origin, f"{origin}/robots.txt", 0, fetcher)
        return given_back

    def _fetch(self, origin: Origin, url: str, hops: int, fetcher: NIOFetcher) -> list[FrontierURL]:
        bean = URLBean(url, priority=_ROBOTS_PRIORITY, headers=self._headers(parse_target(url).origin),
                       meta={"robots": origin, "hops": hops})
        if self._stop.is_set() or not fetcher.register(bean):
            return self._give_back(origin)
        return []

    def _give_back(self, origin: Origin) -> list[FrontierURL]:
        """The URLs waiting for ``origin``'s robots.txt, let go of (stopping): nothing is settled."""
        self._fetches.pop(origin, None)
        return self._held.pop(origin, [])

    def crawl_delay(self, rules: RobotsRules) -> float:
        """The delay between two requests to an origin that ``rules`` give: their Crawl-delay,
        capped at max_crawl_delay; 0 for none."""
        delay = rules.crawl_delay
        if not delay or delay <= 0:  # none, 0, or NaN
            return 0.0
        return min(delay, self._max_crawl_delay)

    def _apply_crawl_delay(self, origin: Origin, rules: RobotsRules, fetcher: NIOFetcher) -> None:
        delay = self.crawl_delay(rules)
        if delay and rules.crawl_delay is not None and rules.crawl_delay > delay:
            log.warning("%s asks for Crawl-delay %g s; using max_crawl_delay, %g s", origin, rules.crawl_delay, delay)
        if delay > fetcher.config.host_delay:  # a Crawl-delay raises the crawl's own delay, never lowers it
            fetcher.set_host_delay(f"{origin}/", delay)


def _host(origin: Origin) -> str:
    """The frontier's name of ``origin``'s host (``host_key()`` of its URLs as stored)."""
    return host_key(normalize_url(f"{origin}/"))

"""Name resolution off the loop thread: a small thread pool with a TTL cache.

getaddrinfo() blocks, sometimes for seconds, so the loop never calls it.
Lookups go to up to ``workers`` threads, started when first needed; answers
come back to the loop through ``post`` (the loop's call_soon_threadsafe).
Several connections waiting for the same name share one lookup.

Answers are kept for ``dns_cache_ttl`` seconds: getaddrinfo does not tell
the record's real TTL.  A resolver that knows it returns a ResolvedAddresses,
kept for its ``ttl`` but never longer than ``dns_cache_ttl`` (the ceiling: a
record of a day must not pin an address for a day of crawling), and not at
all when its ``ttl`` is 0.  Failures are cached too, for NEGATIVE_TTL, so that
a crawl of a thousand URLs on a dead host does not ask a thousand times.

The cache holds DNS_CACHE_SIZE names at most, so that a crawl of a million
hosts does not keep a million answers.  With a TTL per answer, arrival order
is not the order answers expire in, so a heap of (expiry, key) beside the
answers gives the one that expires first: each lookup pops the expired ones
off its top, and a full cache drops its top -- which beats least-recently-used
for a TTL cache, where a hit does not extend an answer's life.  O(log n) per
answer kept, nothing scanned per lookup.  A name is asked for only when it is
not cached (the purge leaves nothing expired behind), so an answer never
replaces a cached one and each cached key has exactly one heap entry.

Address order: getaddrinfo already sorts by RFC 6724; we interleave the
families (RFC 8305 section 4) so that a broken IPv6 route costs one attempt
before an IPv4 address is tried, not all of them.
"""

from __future__ import annotations

import heapq
import ipaddress
import math
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from .config import Address, FetcherConfig, Resolver
from .errors import ErrorKind, FetchFailure

Answer = Callable[[Sequence[Address] | None, FetchFailure | None], None]
Post = Callable[..., None]

NEGATIVE_TTL = 5.0
DNS_CACHE_SIZE = 10_000


class ResolvedAddresses(list[Address]):
    """A resolver's answer that says how long it holds: ``ttl`` seconds, the DNS record's TTL.

    A ``resolver`` returns it instead of a plain list when it knows the TTL;
    the pool keeps the answer for ``ttl`` seconds, at most ``dns_cache_ttl``,
    and not at all for 0.  A ``ttl`` that is not a finite number of seconds
    >= 0 raises ValueError here, in the resolver: that lookup is a dns_error.
    """

    __slots__ = ("_ttl",)

    def __init__(self, addresses: Iterable[Address], *, ttl: float) -> None:
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl < 0:
            raise ValueError(f"ttl must be a finite number of seconds >= 0, not {ttl!r}")
        super().__init__(addresses)
        self._ttl = float(ttl)

    @property
    def ttl(self) -> float:
        """Seconds the answer holds, as the resolver said; the pool keeps it at most ``dns_cache_ttl``."""
        return self._ttl


def system_resolver(host: str, port: int) -> list[Address]:
    """The default resolver: getaddrinfo for TCP."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(family, sockaddr) for family, _, _, _, sockaddr in infos]


def well_formed(answer: Sequence[Address]) -> list[Address]:
    """A resolver's answer as a list, each item checked: (family, sockaddr) with an int family and a
    tuple sockaddr of an IP address (a str) and an int port.  Anything else raises ValueError, so a
    wrong answer from a user's resolver is a failed lookup (dns_error), found here on a worker, and
    neither a fault where the loop reads it (the host table's per-IP limits, the connect) nor a name
    that ``connect`` would look up on the loop thread."""
    found = list(answer)
    for item in found:
        family, sockaddr = item if isinstance(item, tuple) and len(item) == 2 else (None, None)
        if (not isinstance(family, int) or isinstance(family, bool) or not isinstance(sockaddr, tuple)
                or len(sockaddr) < 2 or not isinstance(sockaddr[0], str) or type(sockaddr[1]) is not int):
            raise ValueError(f"not a (family, (address, port, ...)): {item!r:.80}")
        ipaddress.ip_address(sockaddr[0].split("%", 1)[0])  # a name, or garbage: ValueError
    return found


def interleave_families(addresses: Sequence[Address]) -> list[Address]:
    """Alternate address families, keeping each family's order, first family first (RFC 8305 4)."""
    if not addresses:
        return []
    first = addresses[0][0]
    same = [a for a in addresses if a[0] == first]
    other = [a for a in addresses if a[0] != first]
    merged: list[Address] = []
    for i in range(max(len(same), len(other))):
        merged.extend(x[i] for x in (same, other) if i < len(x))
    return merged


def literal_address(host: str, port: int) -> list[Address] | None:
    """The address of an IP literal host, or None for a name."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.version == 6:
        return [(socket.AF_INET6, (host, port, 0, 0))]
    return [(socket.AF_INET, (host, port))]


class ResolverPool:
    """Asynchronous lookups for the loop thread."""

    def __init__(self, config: FetcherConfig, post: Post, workers: int = 4) -> None:
        self._overrides = config.resolve
        self._ttl = config.dns_cache_ttl
        self._resolve: Resolver = config.resolver or system_resolver
        self._post = post
        self._max_workers = workers
        # key -> (addresses, failure, when it expires): the answer, and how long it holds
        self._cache: dict[tuple[str, int], tuple[list[Address] | None, FetchFailure | None, float]] = {}
        self._expiries: list[tuple[float, tuple[str, int]]] = []  # a heap: the cached key that expires first on top
        self._waiting: dict[tuple[str, int], list[Answer]] = {}
        self._jobs: queue.SimpleQueue[tuple[str, int] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle_workers = 0
        self._queued = 0  # jobs put and not yet taken by a worker
        self._lock = threading.Lock()

    def _fixed(self, host: str, port: int) -> list[Address] | None:
        """The address of an IP literal or of a ``resolve`` entry: never looked up, never expiring."""
        override = self._overrides.get(f"{host}:{port}") or self._overrides.get(host)
        return literal_address(override or host, port)

    def lookup(self, host: str, port: int, answer: Answer, now: float) -> None:
        """Call ``answer(addresses, None)`` or ``answer(None, failure)``, maybe at once, maybe later."""
        addresses = self._fixed(host, port)
        if addresses is not None:
            answer(addresses, None)
            return
        key = (host, port)
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            del self._cache[heapq.heappop(expiries)[1]]
        cached = self._cache.get(key)
        if cached is not None:
            answer(cached[0], cached[1])
            return
        waiters = self._waiting.get(key)
        if waiters is not None:
            waiters.append(answer)
            return
        self._waiting[key] = [answer]
        self._submit(key)

    def _submit(self, key: tuple[str, int]) -> None:
        # A burst of new names (one dispatch round) must not queue behind one
        # worker: start another while queued jobs outnumber idle workers.
        thread = None
        with self._lock:
            self._queued += 1
            if self._queued > self._idle_workers and len(self._threads) < self._max_workers:
                name = f"niofetcher-resolver-{len(self._threads)}"
                thread = threading.Thread(target=self._work, name=name, daemon=True)
                self._threads.append(thread)
        self._jobs.put(key)
        if thread is not None:
            thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle_workers += 1
            key = self._jobs.get()
            with self._lock:
                self._idle_workers -= 1
                if key is not None:
                    self._queued -= 1
            if key is None:
                return
            host, port = key
            ttl = min(self._ttl, NEGATIVE_TTL)  # a failure's
            try:
                given = self._resolve(host, port)
                found = interleave_families(well_formed(given))
                if found:
                    failure = None
                    ttl = min(self._ttl, given.ttl) if isinstance(given, ResolvedAddresses) else self._ttl
                else:
                    failure = FetchFailure(ErrorKind.DNS_ERROR, f"{host}: no addresses")
            except Exception as exc:  # noqa: BLE001 - the resolver may be user code: any failure is a failed lookup
                reason = getattr(exc, "strerror", None) or exc
                found, failure = [], FetchFailure(ErrorKind.DNS_ERROR, f"{host}: {reason}")
            self._post(self._answered, key, found or None, failure, ttl)

    def _answered(
        self, key: tuple[str, int], found: list[Address] | None, failure: FetchFailure | None, ttl: float
    ) -> None:
        if ttl > 0:
            expiry = (time.monotonic() + ttl, key)
            self._cache[key] = (found, failure, expiry[0])
            if len(self._cache) > DNS_CACHE_SIZE:  # drop the answer that expires first: maybe this one
                del self._cache[heapq.heappushpop(self._expiries, expiry)[1]]
            else:
                heapq.heappush(self._expiries, expiry)
        for answer in self._waiting.pop(key, ()):
            answer(found, failure)

    def holds_until(self, host: str, port: int) -> float:
        """Until when (the loop's clock) the answer ``lookup`` gave for ``host:port`` holds: its
        expiry in the cache, never for an answer not kept (a TTL of 0: ``-inf``), for ever for an IP
        literal or a ``resolve`` entry.  What the host table's per-IP limits keep an address for."""
        if self._fixed(host, port) is not None:
            return math.inf
        cached = self._cache.get((host, port))
        return -math.inf if cached is None else cached[2]

    def close(self, timeout: float = 2.0) -> None:
        """Stop the workers.  A worker stuck in getaddrinfo cannot be interrupted; it is a daemon."""
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._waiting.clear()

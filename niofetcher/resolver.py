"""Name resolution off the loop thread: a small thread pool with a TTL cache.

getaddrinfo() blocks, sometimes for seconds, so the loop never calls it.
Lookups go to up to ``workers`` threads, started when first needed; answers
come back to the loop through ``post`` (the loop's call_soon_threadsafe).
Several connections waiting for the same name share one lookup.

Answers are cached for ``dns_cache_ttl`` seconds (getaddrinfo does not tell
the record's real TTL).  Failures are cached too, briefly, so that a crawl
of a thousand URLs on a dead host does not ask a thousand times.

The cache holds DNS_CACHE_SIZE names at most, so that a crawl of a million
hosts does not keep a million answers.  It is kept in the order answers
arrived, which (one TTL for answers, a shorter one for failures) is nearly
the order they expire in: each lookup purges expired answers from the old
end, and a full cache drops its oldest answer, the one that expires first
-- which beats least-recently-used for a TTL cache, where a hit does not
extend an answer's life.  A failure cached behind a younger answer outlives
its NEGATIVE_TTL until that answer expires: at most ``dns_cache_ttl``.

Address order: getaddrinfo already sorts by RFC 6724; we interleave the
families (RFC 8305 section 4) so that a broken IPv6 route costs one attempt
before an IPv4 address is tried, not all of them.
"""

from __future__ import annotations

import ipaddress
import queue
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from .config import Address, FetcherConfig, Resolver
from .errors import ErrorKind, FetchFailure

Answer = Callable[[Sequence[Address] | None, FetchFailure | None], None]
Post = Callable[..., None]

NEGATIVE_TTL = 5.0
DNS_CACHE_SIZE = 10_000


def system_resolver(host: str, port: int) -> list[Address]:
    """The default resolver: getaddrinfo for TCP."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(family, sockaddr) for family, _, _, _, sockaddr in infos]


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
        self._cache: OrderedDict[tuple[str, int], tuple[float, list[Address] | None, FetchFailure | None]]
        self._cache = OrderedDict()  # oldest answer first
        self._waiting: dict[tuple[str, int], list[Answer]] = {}
        self._jobs: queue.SimpleQueue[tuple[str, int] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle_workers = 0
        self._queued = 0  # jobs put and not yet taken by a worker
        self._lock = threading.Lock()

    def lookup(self, host: str, port: int, answer: Answer, now: float) -> None:
        """Call ``answer(addresses, None)`` or ``answer(None, failure)``, maybe at once, maybe later."""
        override = self._overrides.get(f"{host}:{port}") or self._overrides.get(host)
        addresses = literal_address(override or host, port)
        if addresses is not None:
            answer(addresses, None)
            return
        key = (host, port)
        cache = self._cache
        while cache:
            oldest = next(iter(cache.values()))
            if oldest[0] > now:
                break
            cache.popitem(last=False)
        cached = cache.get(key)
        if cached is not None and cached[0] > now:  # a failure behind a younger answer may have expired
            answer(cached[1], cached[2])
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
            try:
                found = interleave_families(list(self._resolve(host, port)))
                failure = None if found else FetchFailure(ErrorKind.DNS_ERROR, f"{host}: no addresses")
            except Exception as exc:  # noqa: BLE001 - the resolver may be user code: any failure is a failed lookup
                reason = getattr(exc, "strerror", None) or exc
                found, failure = [], FetchFailure(ErrorKind.DNS_ERROR, f"{host}: {reason}")
            self._post(self._answered, key, found or None, failure)

    def _answered(self, key: tuple[str, int], found: list[Address] | None, failure: FetchFailure | None) -> None:
        ttl = self._ttl if failure is None else min(self._ttl, NEGATIVE_TTL)
        if ttl > 0:
            cache = self._cache
            cache[key] = (time.monotonic() + ttl, found, failure)
            cache.move_to_end(key)  # a refreshed answer expires last
            if len(cache) > DNS_CACHE_SIZE:
                cache.popitem(last=False)
        for answer in self._waiting.pop(key, ()):
            answer(found, failure)

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

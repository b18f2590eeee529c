"""The guarantee "exactly once" (docs/guarantees.md), and the shutdown contract.

Every ``register()`` that returned True yields exactly one FetchResult --
success or error, through ``get()``, ``drain()`` or ``results()`` -- whether
the URL is fetched, fails, or is cancelled by ``shutdown(wait=False)``, by a
``shutdown(wait=True, timeout=...)`` that runs out of time, or by the
shutdown of a fetcher that never started.  After ``shutdown()`` returns the
loop thread has ended and every socket of the fetcher is closed.

Each registration carries a unique id (in ``URLBean.meta`` and in the URL),
so a result can be matched to its registration, and where possible the
servers' side confirms that each request reached the wire exactly once.
"""

from __future__ import annotations

import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pytest
from conftest import LeakBaseline, MakeServer, check_leaks, collect, wait_until
from rawserver import (
    RawServer,
    close_before_response,
    delayed,
    garbage_status,
    get_unused_port,
    hang,
    reset_mid_body,
    truncated_body,
)

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher, URLBean
from niofetcher.testing import TestSite

OK = "ok"  # the expected outcome of a good URL, in place of an ErrorKind
UNKNOWN_HOST = "nohost.invalid"
_ID_IN_REQUEST = re.compile(rb"[?&]id=(\d+)[ &]")


# -- helpers ------------------------------------------------------------------


def refusing_resolver(asked: list[str]) -> Callable[[str, int], list]:
    """A stub resolver: every name is unknown (no lookup ever leaves the machine)."""

    def resolve(host: str, port: int) -> list:
        asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    return resolve


@dataclass
class Registrations:
    """What was registered: id -> URL and id -> expected outcome."""

    urls: dict[int, str] = field(default_factory=dict)
    expected: dict[int, str] = field(default_factory=dict)

    def add(self, url: str, outcome: str) -> None:
        i = len(self.urls)
        sep = "&" if "?" in url else "?"
        self.urls[i] = f"{url}{sep}id={i}"
        self.expected[i] = outcome

    def register_all(self, fetcher: NIOFetcher, seed: int = 0) -> None:
        """Register every URL once, in a shuffled order (good and faulty mixed)."""
        ids = list(self.urls)
        random.Random(seed).shuffle(ids)
        for i in ids:
            assert fetcher.register(URLBean(self.urls[i], meta={"id": i})), f"register({self.urls[i]}) refused"

    def ids(self, outcome: str) -> set[int]:
        return {i for i, o in self.expected.items() if o == outcome}


def by_id(results: Iterable[FetchResult]) -> dict[int, FetchResult]:
    """Results keyed by registration id; fails on a second result for one registration."""
    seen: dict[int, FetchResult] = {}
    for result in results:
        i = result.bean.meta["id"]
        assert i not in seen, f"two results for registration {i}: {seen[i]!r} and {result!r}"
        assert result.url == result.bean.url
        seen[i] = result
    return seen


def register(fetcher: NIOFetcher, urls: list[str], start: int) -> None:
    """Register ``urls`` with ids ``start``, ``start + 1``..."""
    for n, url in enumerate(urls, start=start):
        assert fetcher.register(URLBean(url, meta={"id": n})), url


def outcome(result: FetchResult) -> str:
    if result.error is not None:
        return result.error.value
    return OK if result.ok else f"status {result.status}"


def ids_requested(srv: RawServer) -> Counter[int]:
    """How many times each registration id reached ``srv`` (from its request lines)."""
    found = Counter[int]()
    for head in list(srv.requests):
        match = _ID_IN_REQUEST.search(head.split(b"\r\n", 1)[0])
        assert match, f"a request without an id: {head[:80]!r}"
        found[int(match.group(1))] += 1
    return found




def fetcher_threads() -> list[str]:
    """Names of live niofetcher threads (loop, resolvers), the TestSite's own thread aside."""
    return [t.name for t in threading.enumerate() if t.name.startswith("niofetcher") and t.name != "niofetcher-testsite"]


def assert_released_on_return(
    fetcher: NIOFetcher, reg: Registrations, early: list[FetchResult],
    site: TestSite, servers: list[RawServer], baseline: LeakBaseline,
) -> dict[int, FetchResult]:
    """What must hold the moment ``shutdown()`` has returned; returns every result by id.

    The loop and resolver threads have ended, no socket of the fetcher is
    left (the servers' side sees every connection closed after a short
    settle; once the servers are stopped the descriptor table is exactly
    the baseline, with no settle at all), registration is refused, and every
    registration has exactly one result already waiting.
    """
    assert not fetcher_threads(), f"threads alive after shutdown() returned: {fetcher_threads()}"
    stats = fetcher.stats()
    assert (stats.pending, stats.in_flight, stats.open_connections) == (0, 0, 0), stats
    assert fetcher.register(URLBean(site.base_urls[0], meta={"id": -1})) is False
    results = by_id([*early, *fetcher.drain()])
    assert fetcher.get(timeout=5) is None, "a result beyond one per registration"
    assert results.keys() == reg.urls.keys(), (
        f"missing: {sorted(reg.urls.keys() - results.keys())[:10]}, extra: {sorted(results.keys() - reg.urls.keys())[:10]}"
    )
    assert stats.registered == stats.completed == len(reg.urls), stats
    # The servers' side: every connection was closed by the client (a short
    # settle for FINs to be read; the TestSite closes once a delayed answer is due).
    assert wait_until(lambda: all(srv.open_now == 0 for srv in servers) and site.counters().open_now == 0, 3.0), (
        f"connections still open at the servers: {servers}, testsite {site.counters().open_now}"
    )
    site.stop()
    for srv in servers:
        srv.stop()
    check_leaks(baseline, wait=0.0)  # the servers are gone: every extra descriptor would be the fetcher's
    return results


# -- thousands of URLs, good and faulty ----------------------------------------------


@pytest.mark.timeout(40)
def test_thousands_of_good_and_faulty_urls_each_yield_exactly_one_result(
    raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    faults = {
        ErrorKind.CONNECTION_CLOSED: [close_before_response(), reset_mid_body(pause=0.01), truncated_body()],
        ErrorKind.PROTOCOL_ERROR: [garbage_status()],
    }
    asked: list[str] = []
    config = FetcherConfig(max_connections_per_host=8, resolver=refusing_resolver(asked))
    reg = Registrations()
    with TestSite(hosts=4, pages=500, page_size=256) as site:
        for base in site.base_urls:
            for page in range(site.pages):
                reg.add(f"{base}page/{page}", OK)
        servers: dict[RawServer, str] = {}
        for kind, handlers in faults.items():
            for handler in handlers:
                srv = raw_server(handler)
                servers[srv] = kind.value
                for n in range(200):
                    reg.add(srv.url(f"/f{n}"), kind.value)
        refused = get_unused_port()
        for n in range(100):
            reg.add(f"http://127.0.0.1:{refused}/r{n}", ErrorKind.CONNECT_ERROR.value)
            reg.add(f"http://{UNKNOWN_HOST}:8080/u{n}", ErrorKind.DNS_ERROR.value)
        assert len(reg.urls) == 3000

        fetcher = NIOFetcher(config)
        fetcher.start()
        reg.register_all(fetcher)
        fetcher.shutdown(wait=True)  # finishes everything first: nothing is cancelled
        results = by_id(fetcher.drain())

        assert results.keys() == reg.urls.keys()
        wrong = {i: (reg.urls[i], reg.expected[i], outcome(r)) for i, r in results.items() if outcome(r) != reg.expected[i]}
        assert not wrong, f"{len(wrong)} unexpected outcomes, e.g. {list(wrong.values())[:5]}"
        # Each good result carries its own page, not another registration's.
        for i in reg.ids(OK):
            host, page = divmod(i, site.pages)
            assert f"Test site host {host} page {page}<".encode() in results[i].body, reg.urls[i]
        stats = fetcher.stats()
        assert (stats.registered, stats.completed, stats.failed) == (3000, 3000, 1000), stats
        assert (stats.pending, stats.in_flight, stats.open_connections) == (0, 0, 0), stats

        # The servers' side: each request went out exactly once (no fresh connection is ever replayed).
        for port in site.ports:
            paths = site.counters(port).paths
            assert paths == Counter({f"/page/{p}": 1 for p in range(site.pages)}), f"port {port}"
        for srv, fault in servers.items():
            assert ids_requested(srv) == Counter({i: 1 for i, url in reg.urls.items() if f":{srv.port}/" in url}), fault
        assert asked and set(asked) == {UNKNOWN_HOST}, "only the unknown name is looked up"
        assert not fetcher_threads()


# -- shutdown cuts work short ----------------------------------------------------------


class SlowResolver:
    """A stub resolver: every name is ``ip``, after ``seconds``; counts lookups in progress."""

    def __init__(self, ip: str, seconds: float) -> None:
        self.ip, self.seconds = ip, seconds
        self.in_progress = 0
        self._lock = threading.Lock()

    def __call__(self, host: str, port: int) -> list:
        with self._lock:
            self.in_progress += 1
        time.sleep(self.seconds)
        with self._lock:
            self.in_progress -= 1
        return [(socket.AF_INET, (self.ip, port))]


@pytest.mark.timeout(30)
def test_shutdown_without_waiting_cancels_the_unfinished_and_releases_everything_on_return(
    raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    """Work in every stage is cut short: queued, resolving (a slow stub
    resolver, no DNS cache, a new connection per request), connected and
    waiting for an answer."""
    hanging, slow = raw_server(hang()), raw_server(delayed(0.1))
    resolver = SlowResolver("127.0.0.1", 0.3)
    with TestSite(hosts=2, pages=100, page_size=256, delay=0.2) as site:
        reg = Registrations()
        for base in site.base_urls:
            for page in range(site.pages):
                reg.add(f"{base}page/{page}", OK)
        for n in range(30):
            reg.add(hanging.url(f"/h{n}"), ErrorKind.CANCELLED.value)
            reg.add(f"http://slow.test:{slow.port}/s{n}", OK)
        config = FetcherConfig(
            max_connections_per_host=4, max_requests_per_connection=1, resolver=resolver, dns_cache_ttl=0
        )
        fetcher = NIOFetcher(config)
        fetcher.start()
        reg.register_all(fetcher)
        early = collect(fetcher, 10, within=15)
        assert len(early) == 10 and all(r.ok for r in early), early
        assert hanging.accepted > 0, "some requests are in flight on the hanging server"
        assert wait_until(lambda: resolver.in_progress > 0, 5), "a lookup is in progress"

        fetcher.shutdown(wait=False)
        results = assert_released_on_return(fetcher, reg, early, site, [hanging, slow], no_leaks)

    outcomes = Counter(outcome(r) for r in results.values())
    assert set(outcomes) <= {OK, ErrorKind.CANCELLED.value}, outcomes
    assert all(outcome(results[i]) == ErrorKind.CANCELLED.value for i in reg.ids(ErrorKind.CANCELLED.value))
    assert outcomes[ErrorKind.CANCELLED.value] > 30, f"mid-flight means good URLs were cut short too: {outcomes}"


@pytest.mark.timeout(30)
def test_shutdown_with_a_timeout_finishes_what_it_can_then_cancels_the_rest(
    raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    hanging = raw_server(hang())
    with TestSite(hosts=2, pages=10, page_size=256) as site:
        reg = Registrations()
        for base in site.base_urls:
            for page in range(site.pages):
                reg.add(f"{base}page/{page}", OK)
        for n in range(10):  # never answered; read_timeout (30 s) is far away
            reg.add(hanging.url(f"/h{n}"), ErrorKind.CANCELLED.value)
        fetcher = NIOFetcher(FetcherConfig(max_connections_per_host=4))
        fetcher.start()
        reg.register_all(fetcher)

        started = time.monotonic()
        fetcher.shutdown(wait=True, timeout=0.5)
        took = time.monotonic() - started
        assert 0.5 <= took < 10, f"shutdown(wait=True, timeout=0.5) took {took:.2f} s"
        results = assert_released_on_return(fetcher, reg, [], site, [hanging], no_leaks)

    wrong = {reg.urls[i]: outcome(r) for i, r in results.items() if outcome(r) != reg.expected[i]}
    assert not wrong, wrong


@pytest.mark.timeout(10)
@pytest.mark.parametrize("wait", [True, False])
def test_shutdown_of_a_fetcher_never_started_cancels_its_registrations(wait: bool, no_leaks: LeakBaseline) -> None:
    fetcher = NIOFetcher()  # owns a selector and a wake-up socketpair already
    urls = [f"http://127.0.0.1:9/never/{n}" for n in range(10)]
    for n, url in enumerate(urls):
        assert fetcher.register(URLBean(url, meta={"id": n}))

    fetcher.shutdown(wait=wait)

    check_leaks(no_leaks, wait=0.0)
    assert fetcher.register(urls[0]) is False
    results = by_id(fetcher.drain())
    assert results.keys() == set(range(10))
    assert all(r.error is ErrorKind.CANCELLED and r.status is None for r in results.values()), results
    assert fetcher.get(timeout=5) is None
    with pytest.raises(RuntimeError):
        fetcher.start()
    stats = fetcher.stats()
    assert (stats.registered, stats.completed, stats.failed, stats.pending) == (10, 10, 10, 0), stats


# -- every way out together ----------------------------------------------------------


@pytest.mark.timeout(30)
def test_get_drain_and_results_together_deliver_each_result_exactly_once(no_leaks: LeakBaseline) -> None:
    with TestSite(hosts=3, pages=200, page_size=256) as site:
        urls = [f"{base}page/{page}" for base in site.base_urls for page in range(site.pages)]
        first, second = urls[:300], urls[300:]
        taken: dict[str, list[FetchResult]] = {"get": [], "drain": [], "results": []}
        with NIOFetcher(FetcherConfig(max_connections_per_host=4)) as fetcher:
            register(fetcher, first, start=0)
            taken["get"] += collect(fetcher, 100, within=15)
            assert wait_until(lambda: fetcher.stats().completed == len(first), 15)
            taken["drain"] += fetcher.drain()
            assert len(taken["drain"]) == len(first) - 100 and fetcher.drain() == []

            register(fetcher, second[:150], start=len(first))
            taken["get"] += collect(fetcher, 1, within=15)
            taken["drain"] += fetcher.drain()
            register(fetcher, second[150:], start=len(first) + 150)
            taken["results"] += fetcher.results()  # at least the 150 registered last

            assert fetcher.drain() == [] and fetcher.get(timeout=0.1) is None
            stats = fetcher.stats()
        assert (stats.registered, stats.completed, stats.failed) == (len(urls), len(urls), 0), stats

    assert len(taken["get"]) == 101 and len(taken["results"]) >= 150, {k: len(v) for k, v in taken.items()}
    results = by_id(r for way in taken.values() for r in way)
    assert results.keys() == set(range(len(urls)))
    assert all(r.ok and r.url == urls[i] for i, r in results.items())

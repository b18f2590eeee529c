"""Name resolution off the loop thread (niofetcher/resolver.py), and the ``resolve`` map end to end.

Proves docs/guarantees.md, "the loop never blocks" for DNS (lookups run in the resolver pool and
come back through ``post``; IP literals and ``resolve`` overrides never reach
a resolver), the ``dns_cache_ttl`` and ``resolver`` settings, a resolver's own
TTL (``ResolvedAddresses``: kept that long, at most ``dns_cache_ttl``), and the rule
that no test sends a name lookup off the machine: every resolver here is a
stub.  The pool's ``post`` is a queue, so callbacks run in the test thread,
as they would in the loop thread.
"""

from __future__ import annotations

import math
import queue
import random
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from conftest import MakeServer
from rawserver import ok

import niofetcher.resolver as resolver_module
from niofetcher import FetcherConfig, NIOFetcher, ResolvedAddresses
from niofetcher.config import Address
from niofetcher.errors import ErrorKind, FetchFailure
from niofetcher.resolver import NEGATIVE_TTL, ResolverPool, interleave_families

V4 = socket.AF_INET
V6 = socket.AF_INET6


class StubResolver:
    """Answers from a table, counts calls per name, and can be held until released."""

    def __init__(self, answer: Callable[[str, int], Sequence[Address]] | None = None, hold: bool = False) -> None:
        self._answer = answer or (lambda host, port: [(V4, ("127.0.0.1", port))])
        self.calls: list[tuple[str, int]] = []
        self.entered = threading.Semaphore(0)  # released once per call that has begun
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self._lock = threading.Lock()

    def __call__(self, host: str, port: int) -> Sequence[Address]:
        with self._lock:
            self.calls.append((host, port))
        self.entered.release()
        assert self.release.wait(5), "the test never released the stub resolver"
        return self._answer(host, port)

    def count(self, host: str) -> int:
        with self._lock:
            return sum(1 for h, _ in self.calls if h == host)


class Answers:
    """An ``answer`` callback that records what it was given."""

    def __init__(self) -> None:
        self.got: list[tuple[Sequence[Address] | None, FetchFailure | None]] = []

    def __call__(self, addresses: Sequence[Address] | None, failure: FetchFailure | None) -> None:
        self.got.append((addresses, failure))


class PoolHarness:
    """A ResolverPool whose ``post`` fills a queue that the test drains in its own thread."""

    def __init__(self, resolver: StubResolver, **config: Any) -> None:
        self.posted: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]]] = queue.SimpleQueue()
        self.pool = ResolverPool(FetcherConfig(resolver=resolver, **config), self._post)

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        self.posted.put((callback, args))

    def lookup(self, host: str, port: int = 80, now: float | None = None) -> Answers:
        answers = Answers()
        self.pool.lookup(host, port, answers, time.monotonic() if now is None else now)
        return answers

    def run_posted(self, count: int = 1, timeout: float = 3.0) -> None:
        """Run ``count`` posted callbacks, waiting for each as the loop would."""
        for _ in range(count):
            try:
                callback, args = self.posted.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"no answer was posted within {timeout} s: the lookup was lost")
            callback(*args)

    def resolve(self, host: str, port: int = 80, now: float | None = None) -> Answers:
        """A lookup that must go to a worker: run its posted answer."""
        answers = self.lookup(host, port, now)
        assert not answers.got, "answered at once: the resolver was never asked"
        self.run_posted()
        return answers


@pytest.fixture
def harness_factory(no_leaks: Any) -> Any:
    """Makes PoolHarnesses and closes their pools before the leak check."""
    made: list[PoolHarness] = []

    def make(resolver: StubResolver, **config: Any) -> PoolHarness:
        made.append(PoolHarness(resolver, **config))
        return made[-1]

    yield make
    for harness in made:
        harness.pool.close()


def resolver_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("niofetcher-resolver")]


# -- answered without asking -------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize("host, port, expected", [
    ("127.0.0.1", 8080, [(V4, ("127.0.0.1", 8080))]),
    ("::1", 443, [(V6, ("::1", 443, 0, 0))]),
    ("site.test", 8080, [(V4, ("10.0.0.1", 8080))]),  # "host:port" beats "host"
    ("site.test", 9090, [(V4, ("10.0.0.2", 9090))]),  # other ports fall back to "host"
    ("six.test", 80, [(V6, ("2001:db8::1", 80, 0, 0))]),
])
def test__literals_and_overrides_never_call_the_resolver(
    harness_factory: Any, host: str, port: int, expected: list[Address]
) -> None:
    stub = StubResolver()
    overrides = {"site.test:8080": "10.0.0.1", "site.test": "10.0.0.2", "six.test": "2001:db8::1"}
    harness = harness_factory(stub, resolve=overrides)
    answers = harness.lookup(host, port)
    assert answers.got == [(expected, None)], "a literal or override is answered at once"
    assert stub.calls == []
    assert resolver_threads() == [], "no worker thread is needed"


# -- one lookup per name, cached ---------------------------------------------


@pytest.mark.timeout(10)
def test__concurrent_lookups_of_one_name_share_one_call(harness_factory: Any) -> None:
    stub = StubResolver(hold=True)
    harness = harness_factory(stub)
    waiting = [harness.lookup("shared.test", 80) for _ in range(5)]
    other = harness.lookup("other.test", 80)
    for _ in range(2):
        assert stub.entered.acquire(timeout=5)
    stub.release.set()
    harness.run_posted(2)
    expected = [(V4, ("127.0.0.1", 80))]
    assert all(w.got == [(expected, None)] for w in waiting)
    assert other.got == [(expected, None)]
    assert stub.count("shared.test") == 1
    assert stub.count("other.test") == 1


@pytest.mark.timeout(10)
def test__answers_are_cached_for_the_ttl_then_asked_again(harness_factory: Any) -> None:
    ttl = 0.5
    stub = StubResolver()
    harness = harness_factory(stub, dns_cache_ttl=ttl)
    first = harness.resolve("cached.test")
    answered_at = time.monotonic()
    again = harness.lookup("cached.test", now=answered_at)
    assert again.got == first.got, "within the TTL the cache answers at once"
    assert stub.count("cached.test") == 1

    expired = harness.resolve("cached.test", now=answered_at + ttl + 0.01)
    assert expired.got == first.got
    assert stub.count("cached.test") == 2


@pytest.mark.timeout(10)
def test__zero_ttl_caches_nothing(harness_factory: Any) -> None:
    stub = StubResolver()
    harness = harness_factory(stub, dns_cache_ttl=0)
    harness.resolve("uncached.test")
    harness.resolve("uncached.test")
    assert stub.count("uncached.test") == 2


def _raise(exc: BaseException) -> Callable[[str, int], Sequence[Address]]:
    def answer(host: str, port: int) -> Sequence[Address]:
        raise exc

    return answer


@pytest.mark.timeout(10)
@pytest.mark.parametrize("answer", [
    _raise(socket.gaierror(socket.EAI_NONAME, "Name or service not known")),
    _raise(UnicodeError("label too long")),
    lambda host, port: [],
    _raise(RuntimeError("a buggy resolver")),
], ids=["gaierror", "unicode-error", "no-addresses", "any-exception"])
def test__failures_are_dns_error_and_cached_briefly(harness_factory: Any, answer: Any) -> None:
    stub = StubResolver(answer)
    harness = harness_factory(stub, dns_cache_ttl=300.0)
    (addresses, failure), = harness.resolve("dead.test").got
    assert addresses is None
    assert failure is not None and failure.kind is ErrorKind.DNS_ERROR
    assert "dead.test" in failure.detail

    now = time.monotonic()
    cached = harness.lookup("dead.test", now=now + NEGATIVE_TTL / 2)
    assert cached.got == [(None, failure)], "a failure is cached for a while"
    assert stub.count("dead.test") == 1

    harness.resolve("dead.test", now=now + NEGATIVE_TTL + 0.1)
    assert stub.count("dead.test") == 2, "but only briefly, not for dns_cache_ttl"

    assert harness.resolve("next.test").got[0][1].kind is ErrorKind.DNS_ERROR, "the pool keeps working"


@pytest.mark.timeout(10)
@pytest.mark.parametrize("item", [
    (V4, None), (V4, "127.0.0.1"), (V4, ("127.0.0.1",)), (V4, (None, 80)), (V4, ("127.0.0.1", "80")),
    ("inet", ("127.0.0.1", 80)), (V4, ("localhost", 80)), (V4, ["127.0.0.1", 80]), (V4,), "127.0.0.1", None,
], ids=["no-sockaddr", "str-sockaddr", "no-port", "no-address", "str-port", "str-family", "a-name",
        "list-sockaddr", "no-pair", "a-str", "none"])
def test__an_answer_of_the_wrong_shape_is_a_dns_error(harness_factory: Any, item: Any) -> None:
    # One bad item among good ones fails the lookup: the loop reads every one (the connect, the
    # per-IP limits' address) and must not be where a user's resolver's bug is found.
    stub = StubResolver(lambda host, port: [(V4, ("127.0.0.1", port)), item])
    harness = harness_factory(stub)
    (addresses, failure), = harness.resolve("odd.test").got
    assert addresses is None
    assert failure is not None and failure.kind is ErrorKind.DNS_ERROR and "odd.test" in failure.detail


# -- a TTL per answer (ResolvedAddresses) -----------------------------------


def _with_ttls(ttls: dict[str, float]) -> Callable[[str, int], Sequence[Address]]:
    """A resolver that knows its records' TTLs: a name without one gets a plain list."""

    def answer(host: str, port: int) -> Sequence[Address]:
        found = [(V4, ("127.0.0.1", port))]
        return ResolvedAddresses(found, ttl=ttls[host]) if host in ttls else found

    return answer


def _resolve_between(harness: PoolHarness, host: str) -> tuple[float, float]:
    """Resolve ``host`` through a worker; the answer was cached at a time between the two returned."""
    before = time.monotonic()
    harness.resolve(host)
    return before, time.monotonic()


@pytest.mark.timeout(10)
def test__an_answer_is_kept_for_its_own_ttl(harness_factory: Any) -> None:
    ttl = 0.3
    stub = StubResolver(_with_ttls({"short.test": ttl}))
    harness = harness_factory(stub, dns_cache_ttl=300.0)
    before, after = _resolve_between(harness, "short.test")
    harness.resolve("plain.test")

    assert harness.lookup("short.test", now=before + ttl - 0.01).got, "before its TTL ends the cache answers"
    assert stub.count("short.test") == 1
    harness.resolve("short.test", now=after + ttl + 0.01)
    assert stub.count("short.test") == 2, "after its TTL the name is asked again"
    assert harness.lookup("plain.test", now=after + ttl + 0.01).got, "a plain list keeps dns_cache_ttl"
    assert stub.count("plain.test") == 1


@pytest.mark.timeout(10)
def test__a_ttl_above_dns_cache_ttl_is_cut_to_it(harness_factory: Any) -> None:
    ceiling = 10.0
    stub = StubResolver(_with_ttls({"day.test": 86_400.0}))
    harness = harness_factory(stub, dns_cache_ttl=ceiling)
    before, after = _resolve_between(harness, "day.test")
    assert harness.lookup("day.test", now=before + ceiling - 0.01).got
    harness.resolve("day.test", now=after + ceiling + 0.01)
    assert stub.count("day.test") == 2, "a record of a day is kept for dns_cache_ttl, not a day"


@pytest.mark.timeout(10)
def test__a_ttl_of_zero_is_never_cached(harness_factory: Any) -> None:
    stub = StubResolver(_with_ttls({"zero.test": 0}))
    harness = harness_factory(stub, dns_cache_ttl=300.0)
    first = harness.resolve("zero.test")
    assert first.got == [([(V4, ("127.0.0.1", 80))], None)], "the answer is used"
    harness.resolve("zero.test")
    assert stub.count("zero.test") == 2
    assert harness.pool._cache == {}


@pytest.mark.timeout(10)
def test__a_full_cache_drops_the_answer_that_expires_first_not_the_oldest(
    harness_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resolver_module, "DNS_CACHE_SIZE", 3)
    ttls = {"long.test": 200.0, "soon.test": 10.0, "mid1.test": 50.0, "mid2.test": 60.0, "brief.test": 1.0}
    stub = StubResolver(_with_ttls(ttls))
    harness = harness_factory(stub, dns_cache_ttl=300.0)
    for name in ("long.test", "soon.test", "mid1.test", "mid2.test"):  # the fourth makes room
        harness.resolve(name)
    assert sorted(host for host, _ in harness.pool._cache) == ["long.test", "mid1.test", "mid2.test"]
    assert harness.lookup("long.test").got, "the oldest answer, which expires last, stays"
    harness.resolve("soon.test")  # dropped: asked again, and dropped again as the soonest to expire
    assert stub.count("soon.test") == 2

    harness.resolve("brief.test")
    assert "brief.test" not in {host for host, _ in harness.pool._cache}, "a newcomer that expires first is the one dropped"
    assert len(harness.pool._cache) == 3


@pytest.mark.timeout(10)
def test__an_expired_failure_is_purged_though_younger_answers_outlive_it(harness_factory: Any) -> None:
    def answer(host: str, port: int) -> Sequence[Address]:
        if host == "dead.test":
            raise OSError("no such host")
        return [(V4, ("127.0.0.1", port))]

    harness = harness_factory(StubResolver(answer), dns_cache_ttl=300.0)
    harness.resolve("alive.test")
    harness.resolve("dead.test")  # behind a younger answer in arrival order, it expires first
    harness.lookup("alive.test", now=time.monotonic() + NEGATIVE_TTL + 1)
    assert list(harness.pool._cache) == [("alive.test", 80)]


@pytest.mark.timeout(20)
def test__the_expiry_heap_holds_exactly_the_cached_answers(
    harness_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many names with TTLs of every size, failures among them, a full cache and time passing:
    every cached answer has one heap entry and nothing else is in the heap."""
    monkeypatch.setattr(resolver_module, "DNS_CACHE_SIZE", 20)
    rng = random.Random(28)
    names = [f"n{i}.test" for i in range(60)]
    ttls = {name: rng.choice([0, 0.5, 2.0, 30.0, 500.0]) for name in names[::2]}

    def answer(host: str, port: int) -> Sequence[Address]:
        if host.endswith("7.test"):
            raise OSError("no such host")
        return _with_ttls(ttls)(host, port)

    stub = StubResolver(answer)
    harness = harness_factory(stub, dns_cache_ttl=60.0)
    now = time.monotonic()
    for _ in range(300):
        now += rng.choice([0.0, 0.1, 1.0, 10.0])
        answers = harness.lookup(rng.choice(names), now=now)
        if not answers.got:
            harness.run_posted()
        pool = harness.pool
        assert sorted(key for _, key in pool._expiries) == sorted(pool._cache)
        assert len(pool._cache) <= 20
    assert len(stub.calls) > 60, "names were asked again: the run saw answers expire and be dropped"


@pytest.mark.timeout(10)
@pytest.mark.parametrize("ttl", [-1.0, math.nan, math.inf, "300", None, True])
def test__a_garbage_ttl_fails_that_lookup_as_a_dns_error(harness_factory: Any, ttl: Any) -> None:
    stub = StubResolver(_with_ttls({"bad.test": ttl}))
    harness = harness_factory(stub, dns_cache_ttl=300.0)
    (addresses, failure), = harness.resolve("bad.test").got
    assert addresses is None
    assert failure is not None and failure.kind is ErrorKind.DNS_ERROR
    assert failure.detail == f"bad.test: ttl must be a finite number of seconds >= 0, not {ttl!r}"
    assert "\n" not in failure.detail
    assert harness.resolve("good.test").got[0][1] is None, "the pool keeps working"


@pytest.mark.timeout(5)
def test__resolved_addresses_is_the_list_it_was_given() -> None:
    given = [_a(V6, 1), _a(V4, 1)]
    resolved = ResolvedAddresses(given, ttl=30)
    assert resolved == given and isinstance(resolved, list)
    assert resolved.ttl == 30.0
    with pytest.raises(AttributeError):
        resolved.ttl = 5.0  # type: ignore[misc]


# -- address order -----------------------------------------------------------


def _a(family: int, n: int) -> Address:
    return (family, (f"2001:db8::{n}", 80, 0, 0)) if family == V6 else (family, (f"192.0.2.{n}", 80))


@pytest.mark.timeout(5)
@pytest.mark.parametrize("given, expected", [
    ([], []),
    ([_a(V4, 1), _a(V4, 2)], [_a(V4, 1), _a(V4, 2)]),
    ([_a(V6, 1), _a(V6, 2), _a(V6, 3), _a(V4, 1), _a(V4, 2)],
     [_a(V6, 1), _a(V4, 1), _a(V6, 2), _a(V4, 2), _a(V6, 3)]),
    ([_a(V4, 1), _a(V6, 1), _a(V6, 2), _a(V6, 3)],
     [_a(V4, 1), _a(V6, 1), _a(V6, 2), _a(V6, 3)]),
    ([_a(V4, 1), _a(V4, 2), _a(V4, 3), _a(V6, 1)],
     [_a(V4, 1), _a(V6, 1), _a(V4, 2), _a(V4, 3)]),
])
def test__interleave_families_alternates_keeping_order(given: list[Address], expected: list[Address]) -> None:
    assert interleave_families(given) == expected


@pytest.mark.timeout(10)
def test__pool_answers_in_interleaved_order(harness_factory: Any) -> None:
    given = [_a(V6, 1), _a(V6, 2), _a(V4, 1), _a(V4, 2)]
    harness = harness_factory(StubResolver(lambda host, port: given))
    (addresses, failure), = harness.resolve("dual.test").got
    assert failure is None
    assert addresses == [_a(V6, 1), _a(V4, 1), _a(V6, 2), _a(V4, 2)]


# -- shutting down -----------------------------------------------------------


@pytest.mark.timeout(10)
def test__close_ends_the_worker_threads(harness_factory: Any) -> None:
    stub = StubResolver(hold=True)
    harness = harness_factory(stub)
    names = [f"n{i}.test" for i in range(3)]
    for name in names:
        harness.lookup(name)
        assert stub.entered.acquire(timeout=5), "a name gets a worker while the others are busy"
    assert len(resolver_threads()) == len(names)
    stub.release.set()
    harness.run_posted(len(names))
    harness.pool.close()
    assert resolver_threads() == []


@pytest.mark.timeout(10)
def test__a_burst_of_names_is_resolved_in_parallel(harness_factory: Any) -> None:
    """An idle worker must not make the next names queue behind one slow lookup."""
    stub = StubResolver(lambda host, port: [(V4, ("127.0.0.1", port))])
    harness = harness_factory(stub)
    harness.resolve("warm.test")  # leaves one idle worker behind
    assert stub.entered.acquire(timeout=5)
    stub.release.clear()  # from now on every lookup hangs until released
    burst = ["a.test", "b.test", "c.test"]
    for name in burst:
        harness.lookup(name)
    try:
        started = sum(stub.entered.acquire(timeout=1) for _ in burst)
        assert started == len(burst), f"only {started} of {len(burst)} lookups ran; the rest queued behind them"
    finally:
        stub.release.set()
        harness.run_posted(len(burst))


@pytest.mark.timeout(10)
def test__close_does_not_wait_forever_for_a_stuck_lookup(harness_factory: Any) -> None:
    stub = StubResolver(hold=True)
    harness = harness_factory(stub)
    harness.lookup("stuck.test")
    assert stub.entered.acquire(timeout=5)
    started = time.monotonic()
    harness.pool.close(timeout=0.2)
    assert time.monotonic() - started < 2.0
    stub.release.set()  # let the daemon worker finish before the leak check


# -- end to end: the fetcher connects where ``resolve`` says -----------------


def _refuse_lookups(host: str, port: int) -> Sequence[Address]:
    raise AssertionError(f"the resolver was asked for {host}:{port}")


@pytest.mark.timeout(15)
@pytest.mark.parametrize("resolve", [
    {"site.test": "127.0.0.1"},
    # "host:port" beats "host"; 192.0.2.1 (TEST-NET-1) would never answer.
    {"site.test:{port}": "127.0.0.1", "site.test": "192.0.2.1"},
], ids=["host", "host-port"])
def test_resolve_map_fetch_sends_the_name_in_host(no_leaks: Any, raw_server: MakeServer, resolve: dict[str, str]) -> None:
    srv = raw_server(ok(b"resolved"), max_seconds=15)
    config = FetcherConfig(
        resolve={k.format(port=srv.port): v for k, v in resolve.items()},
        resolver=_refuse_lookups, connect_timeout=2.0, read_timeout=5.0,
    )
    url = f"http://site.test:{srv.port}/page"
    with NIOFetcher(config) as fetcher:
        assert fetcher.register(url)
        (result,) = list(fetcher.results())
    assert (result.error, result.status, result.body) == (None, 200, b"resolved")
    assert result.final_url == url
    assert srv.accepted == 1
    (head,) = srv.requests
    assert f"\r\nHost: site.test:{srv.port}\r\n".encode() in head


@pytest.mark.timeout(15)
def test_stub_resolver_is_asked_once_for_concurrent_connections(no_leaks: Any, raw_server: MakeServer) -> None:
    srv = raw_server(ok(b"stubbed"), max_seconds=15)
    stub = StubResolver()
    config = FetcherConfig(resolver=stub, max_connections_per_host=3, connect_timeout=2.0, read_timeout=5.0)
    urls = [f"http://stub.test:{srv.port}/{i}" for i in range(3)]
    fetcher = NIOFetcher(config)
    try:
        for url in urls:  # registered before the loop starts: three connections look the name up at once
            assert fetcher.register(url)
        fetcher.start()
        results = list(fetcher.results())
    finally:
        fetcher.shutdown()
    assert sorted(r.url for r in results if r.ok) == urls
    assert srv.accepted == 3
    assert stub.calls == [("stub.test", srv.port)]
    assert all(f"\r\nHost: stub.test:{srv.port}\r\n".encode() in head for head in srv.requests)


# -- bounded (docs/guarantees.md, "memory does not grow") ------------------------------------------


@pytest.mark.timeout(20)
def test__the_cache_keeps_at_most_DNS_CACHE_SIZE_names_dropping_the_oldest(
    harness_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resolver_module, "DNS_CACHE_SIZE", 50)
    stub = StubResolver()
    harness = harness_factory(stub)
    for i in range(200):
        harness.resolve(f"h{i}.test")
    assert len(harness.pool._cache) == 50
    assert harness.lookup("h199.test").got, "the newest answers stay cached"
    harness.resolve("h0.test")  # the oldest went: asked again
    assert stub.count("h0.test") == 2


@pytest.mark.timeout(20)
def test__expired_answers_are_purged_not_only_replaced(harness_factory: Any) -> None:
    ttl = 10.0
    stub = StubResolver()
    harness = harness_factory(stub, dns_cache_ttl=ttl)
    for i in range(100):
        harness.resolve(f"h{i}.test")
    assert len(harness.pool._cache) == 100
    # One lookup of another name after they expired clears every one of them.
    harness.resolve("later.test", now=time.monotonic() + ttl + 1)
    assert list(harness.pool._cache) == [("later.test", 80)]

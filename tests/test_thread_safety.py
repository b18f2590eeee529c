"""The thread-safe face of the fetcher (docs/fetcher.md: the NIOFetcher
methods, and "exactly once" under concurrency).

``register()``, ``get()``, ``drain()`` and ``set_host_delay()`` may be called
from any thread while the loop runs: nothing is lost or doubled, the counters
agree, every registration wakes an idle loop (no lost wake-ups), and the two
backpressure limits -- ``max_pending`` on the way in, ``max_completed`` on
the way out -- hold and release.  Counted from the servers' side where the
claim is about the wire.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from conftest import LeakBaseline, MakeServer, collect, run_threads, wait_until
from rawserver import ConnInfo, Handler, http_response, read_request, serve_keepalive

from niofetcher import FetcherConfig, FetchResult, NIOFetcher, URLBean
from niofetcher.testing import TestSite


def without_timers(**settings: Any) -> FetcherConfig:
    """A config under which no timer of the fetcher fires within a test: only a
    wake-up can restart an idle loop."""
    return FetcherConfig(
        connect_timeout=300.0, read_timeout=300.0, idle_timeout=300.0,
        request_timeout=None, connection_service_time=None, **settings,
    )


# -- helpers ------------------------------------------------------------------




def registerer(fetcher: NIOFetcher, beans: list[URLBean]) -> Callable[[], None]:
    def register_all() -> None:
        for bean in beans:
            assert fetcher.register(bean), bean.url

    return register_all


def ids_of(results: Iterable[FetchResult]) -> Counter[int]:
    return Counter(r.bean.meta["id"] for r in results)


def stamping(arrivals: list[float]) -> Handler:
    """Keep-alive, 200 to everything; records when each request head arrived."""
    response = http_response(200, b"ok", [("Content-Type", "text/plain")])

    def respond(head: bytes) -> bytes:
        arrivals.append(time.monotonic())
        return response

    return serve_keepalive(respond)


def gated(permits: threading.Semaphore) -> Handler:
    """Keep-alive, 200 to everything, but each response waits for a permit.

    ``serve_keepalive`` cannot wait interruptibly, hence this loop: it gives up
    when the server stops.
    """
    response = http_response(200, b"ok", [("Content-Type", "text/plain")])

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        while read_request(sock, info) is not None:
            while not permits.acquire(timeout=0.05):
                if info.stopping:
                    return
            sock.sendall(response)

    return handler


# -- many threads in, many threads out --------------------------------------------


@pytest.mark.timeout(40)
def test_eight_registering_and_two_draining_threads_lose_and_double_nothing(no_leaks: LeakBaseline) -> None:
    writers, per_writer = 8, 500
    total = writers * per_writer
    with TestSite(hosts=2, pages=total // 2, page_size=256) as site:
        bases = site.base_urls
        beans = [URLBean(f"{bases[i % 2]}page/{i // 2}", meta={"id": i}) for i in range(total)]
        taken: list[list[FetchResult]] = [[], []]
        enough = threading.Event()
        with NIOFetcher(FetcherConfig(max_connections_per_host=4)) as fetcher:

            def drainer(into: list[FetchResult]) -> Callable[[], None]:
                def drain() -> None:
                    while not enough.is_set():
                        result = fetcher.get(timeout=0.05)
                        if result is not None:
                            into.append(result)
                            if sum(map(len, taken)) >= total:
                                enough.set()

                return drain

            drainers = [threading.Thread(target=drainer(into), name=f"test-drainer-{n}") for n, into in enumerate(taken)]
            for thread in drainers:
                thread.start()
            try:
                run_threads(registerer(fetcher, beans[w::writers]) for w in range(writers))
                assert fetcher.join(timeout=30), fetcher.stats()
                enough.wait(10)
            finally:
                enough.set()
                for thread in drainers:
                    thread.join(10)
            stats = fetcher.stats()
            leftover = fetcher.drain()

        counts = ids_of([*taken[0], *taken[1], *leftover])
        assert counts == Counter(range(total)), (
            f"missing {sorted(set(range(total)) - set(counts))[:10]}, doubled {[i for i, n in counts.items() if n > 1][:10]}"
        )
        assert not leftover and all(taken), f"each drainer took some: {[len(t) for t in taken]}"
        assert all(r.ok for r in (*taken[0], *taken[1]))
        assert (stats.registered, stats.completed, stats.failed) == (total, total, 0), stats
        assert (stats.pending, stats.in_flight) == (0, 0), stats
        # The servers' side: every page was asked for exactly once.
        for port in site.ports:
            assert site.counters(port).paths == Counter({f"/page/{p}": 1 for p in range(site.pages)}), port


@pytest.mark.timeout(30)
def test_registrations_from_many_threads_always_wake_an_idle_loop(no_leaks: LeakBaseline) -> None:
    """No timer can wake the loop (without_timers): a wake-up lost while the loop
    drains the wake-up pipe would leave the next burst unstarted for good, so
    each burst must complete within a bound that is generous for loopback.
    (Against the bug once in loop.py, clearing the flag before reading the
    pipe, this stalls within about ten bursts.)"""
    bursts, writers, per_writer = 60, 8, 10
    with TestSite(hosts=2, pages=bursts * writers * per_writer // 2 + 1, page_size=64) as site:
        bases = site.base_urls
        with NIOFetcher(without_timers(max_connections_per_host=4)) as fetcher:
            next_id = 0
            # The last burst, one URL from one thread, catches a wake-up lost in the one before.
            for burst, (threads, each) in enumerate([(writers, per_writer)] * bursts + [(1, 1)]):
                time.sleep(0.01)  # the loop is idle in select(), with no timeout
                ids = range(next_id, next_id + threads * each)
                next_id += len(ids)
                beans = [URLBean(f"{bases[i % 2]}page/{i // 2}", meta={"id": i}) for i in ids]
                run_threads(registerer(fetcher, beans[w::threads]) for w in range(threads))
                got = collect(fetcher, len(ids), within=10)
                assert ids_of(got) == Counter(ids), (
                    f"burst {burst}: {len(got)} of {len(ids)} results after 10 s -- a lost wake-up; {fetcher.stats()}"
                )
                assert all(r.ok for r in got)


# -- backpressure ------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_max_pending_refuses_past_the_limit_and_accepts_again_once_work_drains(
    raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    limit = 5
    permits = threading.Semaphore(0)
    srv = raw_server(gated(permits))
    accepted: list[int] = []
    refused: list[int] = []

    def register(i: int) -> bool:
        time.sleep(0.02)  # let the loop take the previous one off its inbox first
        ok = fetcher.register(URLBean(srv.url(f"/?id={i}"), meta={"id": i}))
        (accepted if ok else refused).append(i)
        return ok

    config = FetcherConfig(max_connections_per_host=1, max_pending=limit)
    with NIOFetcher(config) as fetcher:
        try:
            assert register(0)
            assert wait_until(lambda: len(srv.requests) == 1, 10), "request 0 is in flight, not pending"
            assert all(register(i) for i in range(1, 1 + limit))
            assert not register(100), "one more than max_pending is refused"
            assert fetcher.stats().pending == limit

            permits.release()  # request 0 is answered; request 1 leaves the queue
            assert wait_until(lambda: len(srv.requests) == 2, 10)
            assert wait_until(lambda: fetcher.stats().pending == limit - 1, 10)
            assert register(6), "there is room again"
            assert not register(101)
        finally:
            permits.release(100)
        results = list(fetcher.results())

    assert sorted(ids_of(results).elements()) == sorted(accepted) == list(range(7))
    assert all(r.ok for r in results)
    # The refused URLs never reached the wire.
    assert not [h for h in srv.requests if b"id=10" in h]
    assert len(srv.requests) == len(accepted)


@pytest.mark.timeout(20)
def test_max_completed_stops_new_requests_until_results_are_taken(no_leaks: LeakBaseline) -> None:
    limit, per_host, total = 10, 2, 60
    with TestSite(hosts=1, pages=total, page_size=256) as site:
        port = site.ports[0]
        # Once stalled, only the wake-up sent by drain() can restart the loop.
        config = without_timers(max_connections_per_host=per_host, max_completed=limit)
        with NIOFetcher(config) as fetcher:
            for i in range(total):
                assert fetcher.register(URLBean(f"{site.base_urls[0]}page/{i}", meta={"id": i}))

            def served() -> int:
                return site.counters(port).requests

            assert wait_until(lambda: fetcher.stats().completed >= limit, 10)
            seen = served()
            time.sleep(0.5)  # nobody drains: nothing new may start
            stalled = served()
            assert stalled == seen, f"requests kept starting with {limit} results waiting: {seen} -> {stalled}"
            assert limit <= stalled <= limit + per_host, stalled
            assert fetcher.stats().pending == total - stalled

            first = fetcher.drain()
            assert wait_until(lambda: served() > stalled, 5), "taking results lets requests start again"
            rest = list(fetcher.results())
        counters = site.counters(port)

    assert ids_of([*first, *rest]) == Counter(range(total))
    assert all(r.ok for r in (*first, *rest))
    assert counters.paths == Counter({f"/page/{i}": 1 for i in range(total)})


@pytest.mark.timeout(20)
def test_shutdown_waiting_for_the_work_is_not_held_back_by_undrained_results(no_leaks: LeakBaseline) -> None:
    """``shutdown(wait=True)`` finishes all registered work, as ``with NIOFetcher(...)``
    does on leaving: no one can drain any more, so ``max_completed`` must not
    keep the remaining requests from starting (it would wait forever, or here
    until the timeout, and cancel URLs it could have fetched)."""
    limit, total = 10, 60
    with TestSite(hosts=1, pages=total, page_size=256) as site:
        fetcher = NIOFetcher(without_timers(max_completed=limit))
        fetcher.start()
        for i in range(total):
            assert fetcher.register(URLBean(f"{site.base_urls[0]}page/{i}", meta={"id": i}))
        fetcher.shutdown(wait=True, timeout=5)
        results = fetcher.drain()
        served = site.counters().requests

    assert ids_of(results) == Counter(range(total))
    cancelled = [r.url for r in results if not r.ok]
    assert not cancelled, f"{len(cancelled)} of {total} cancelled; the server was asked for only {served}"
    assert served == total


@pytest.mark.timeout(20)
def test_shutdown_of_a_fetcher_never_started_ends_a_get_already_waiting(no_leaks: LeakBaseline) -> None:
    fetcher = NIOFetcher()
    taken: list[object] = []
    waiters = [threading.Thread(target=lambda: taken.append(fetcher.get()), daemon=True),
               threading.Thread(target=lambda: taken.append(fetcher.get_batch(3)), daemon=True)]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.2)  # both wait inside get() by now; a get() begun after shutdown() never waited
    fetcher.shutdown()
    for waiter in waiters:
        waiter.join(5)
    assert not any(waiter.is_alive() for waiter in waiters), "a get() waits for ever on a fetcher shut down unstarted"
    assert sorted(map(repr, taken)) == ["None", "[]"]


@pytest.mark.timeout(20)
def test_cancel_pending_before_start_cancels_what_was_registered(no_leaks: LeakBaseline) -> None:
    with TestSite(hosts=1) as site:
        fetcher = NIOFetcher()
        assert fetcher.register_many([site.base_urls[0] + "page/1", URLBean(site.base_urls[0] + "page/2")]) == 2
        fetcher.cancel_pending()
        with fetcher:
            results = list(fetcher.results())
        served = site.counters().requests
    assert [(r.error, r.error_detail) for r in results] == [("cancelled", "cancelled before it started")] * 2
    assert served == 0


@pytest.mark.timeout(30)
def test_join_finishes_the_work_held_back_by_max_completed_and_the_limit_holds_again(no_leaks: LeakBaseline) -> None:
    """docs/fetcher.md's register, ``join()``, ``drain()`` with ``max_completed``: join() waited for ever."""
    limit, total = 5, 20
    with TestSite(hosts=1, pages=total, page_size=256) as site, NIOFetcher(without_timers(max_completed=limit)) as fetcher:
        assert fetcher.register_many(f"{site.base_urls[0]}page/{i}" for i in range(total)) == total
        assert fetcher.join(timeout=10), f"join() stalled: {fetcher.stats()}"
        assert site.counters().requests == total
        # The limit is back once join() returns: with 20 results untaken, nothing more starts.
        assert fetcher.register(f"{site.base_urls[0]}page/0")
        time.sleep(0.3)
        assert site.counters().requests == total
        first = fetcher.drain()
        rest = list(fetcher.results())
    assert len(first) == total and len(rest) == 1
    assert all(r.ok for r in (*first, *rest))


# -- politeness from another thread ----------------------------------------------


@pytest.mark.timeout(20)
def test_set_host_delay_from_another_thread_spaces_the_following_requests(
    raw_server: MakeServer, no_leaks: LeakBaseline
) -> None:
    delay, total = 0.2, 10
    arrivals: list[float] = []
    srv = raw_server(stamping(arrivals))
    config = FetcherConfig(max_connections_per_host=1, host_delay=0.05)
    with NIOFetcher(config) as fetcher:
        for i in range(total):
            assert fetcher.register(URLBean(srv.url(f"/{i}"), meta={"id": i}))
        assert wait_until(lambda: len(arrivals) >= 2, 10)
        setter = threading.Thread(target=fetcher.set_host_delay, args=(srv.url("/robots.txt"), delay))
        setter.start()
        setter.join(10)
        set_at = time.monotonic()
        results = list(fetcher.results())

    assert ids_of(results) == Counter(range(total)) and all(r.ok for r in results)
    later = [t for t in arrivals if t > set_at]
    # The first two may still have been started under the old delay.
    gaps = [b - a for a, b in itertools.pairwise(later[1:])]
    assert len(gaps) >= 3, f"the delay was set too late to be seen: {len(later)} requests after it"
    # 0.05 s of slack: an arrival is stamped by the server thread, a little after the request started.
    assert min(gaps) >= delay - 0.05, f"gaps between requests after set_host_delay({delay}): {gaps}"

"""The batch calls of NIOFetcher: ``register_many()`` and ``get_batch()`` (docs/fetcher.md).

``register_many`` checks each URL as ``register`` does (a bad one raises
ValueError, and none of the batch is queued), takes the lock once and wakes the
loop once per call, and under ``max_pending`` accepts the first ones in order,
as many as there is room for.  ``get_batch`` waits at most ``timeout`` for the
first result and never after it has one.  Against the real test site and real
sockets; no assertion on time.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import LeakBaseline, MakeServer, run_threads, wait_until
from test_thread_safety import gated, ids_of

from niofetcher import FetcherConfig, FetchResult, NIOFetcher, URLBean
from niofetcher.testing import TestSite

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def site() -> Iterator[TestSite]:
    # Per test: no_leaks counts every thread named niofetcher*, the site's included.
    with TestSite(hosts=2, pages=50, page_size=256) as test_site:
        yield test_site


def take(fetcher: NIOFetcher, count: int) -> list[FetchResult]:
    """``count`` results through get_batch(), failing if they do not come within 10 s each."""
    got: list[FetchResult] = []
    while len(got) < count:
        batch = fetcher.get_batch(count - len(got), timeout=10)
        assert batch, f"{count - len(got)} results missing"
        got += batch
    return got


class CountingLock:
    """The fetcher's registration lock, counting how often it is taken."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self.taken = 0

    def __enter__(self) -> bool:
        self.taken += 1
        return bool(self._lock.__enter__())

    def __exit__(self, *exc_info: object) -> None:
        self._lock.__exit__(*exc_info)


# -- register_many ---------------------------------------------------------------


def test_register_many_queues_strs_and_beans_and_each_yields_one_result(no_leaks: LeakBaseline, site: TestSite) -> None:
    a, b = site.base_urls
    beans = [URLBean(f"{b}page/{i}", priority=i % 3, meta={"id": i}) for i in range(20)]
    strs = [f"{a}page/{i}" for i in range(20)]
    with NIOFetcher(FetcherConfig(max_connections_per_host=4)) as fetcher:
        # The same URL twice is two registrations, and two results.
        assert fetcher.register_many([*strs, *beans, strs[0]]) == 41
        assert fetcher.register_many([]) == 0
        results = take(fetcher, 41)
        assert fetcher.get_batch(10, timeout=0.05) == []
        assert fetcher.stats().registered == 41
    assert all(r.ok for r in results)
    assert Counter(r.url for r in results) == Counter([*strs, *(bean.url for bean in beans), strs[0]])
    assert ids_of(r for r in results if r.bean.meta) == Counter(range(20))
    assert {r.bean.priority for r in results if r.bean.meta} == {0, 1, 2}  # a bean keeps its own priority


def test_register_many_takes_the_lock_once_and_wakes_the_loop_once(no_leaks: LeakBaseline, site: TestSite) -> None:
    fetcher = NIOFetcher()
    engine = fetcher._engine
    wakes = 0
    wake = engine.wake

    def counting_wake() -> None:
        nonlocal wakes
        wakes += 1
        wake()

    engine.wake = counting_wake  # type: ignore[method-assign]
    lock = CountingLock(fetcher._lock)
    fetcher._lock = lock  # type: ignore[assignment]
    with fetcher:
        urls = [f"{site.base_urls[0]}page/{i}" for i in range(50)]
        assert fetcher.register_many(urls) == 50
        assert (lock.taken, wakes) == (1, 1)
        assert fetcher.register_many(urls[:10]) == 10
        assert (lock.taken, wakes) == (2, 2)
        for url in urls[:5]:  # register(), for comparison: once each
            assert fetcher.register(url)
        assert (lock.taken, wakes) == (7, 7)
        assert fetcher.register_many([]) == 0
        assert wakes == 7, "nothing queued: no wake-up"
        assert len(take(fetcher, 65)) == 65


def test_under_max_pending_the_first_ones_in_order_are_accepted(no_leaks: LeakBaseline, site: TestSite) -> None:
    base = site.base_urls[0]
    fetcher = NIOFetcher(FetcherConfig(max_pending=5))  # not started: every URL stays pending, counted exactly
    try:
        assert fetcher.register(URLBean(f"{base}page/0", meta={"id": 0}))
        batch = [URLBean(f"{base}page/{i}", meta={"id": i}) for i in range(1, 11)]
        assert fetcher.register_many(batch) == 4, "room for 4: the first 4 of the batch"
        assert fetcher.register_many(batch) == 0
        assert not fetcher.register(f"{base}page/20")
        assert fetcher.stats().pending == 5
        fetcher.start()
        results = take(fetcher, 5)
        assert ids_of(results) == Counter(range(5)), "the accepted ones, and only they, are fetched"
        assert all(r.ok for r in results)
        assert fetcher.register_many(batch[:3]) == 3, "room again once the work drained"
        assert ids_of(take(fetcher, 3)) == Counter(range(1, 4))
    finally:
        fetcher.shutdown()
    assert fetcher.register_many(batch) == 0, "shut down: none accepted"
    assert fetcher.stats().registered == 8


@pytest.mark.parametrize("bad", [
    "ftp://example.test/", "/relative/path", "http:///no-host", "not a url", 42, None,
    URLBean("http://example.test/", method="GE T"), URLBean("mailto:someone@example.test"),
    # Checked by the caller: the loop makes a bean's Task, and a bad proxy there would end the loop.
    URLBean("http://example.test/", proxy="socks5://proxy.test:1080"),
    # So are the headers and the method the Task reads: before the fix, these ended the loop thread
    # and the sweep after it (which makes the same Task again) lost the results of the rest.
    URLBean("http://example.test/", headers=[("X-A", "1")]),  # type: ignore[arg-type]
    URLBean("http://example.test/", headers={1: "x"}),  # type: ignore[dict-item]
    URLBean("http://example.test/", method=("G", "E", "T")),  # type: ignore[arg-type]
], ids=repr)
def test_a_bad_url_in_a_batch_raises_as_register_does_and_queues_none(
    no_leaks: LeakBaseline, bad: Any, site: TestSite) -> None:
    good = [f"{site.base_urls[0]}page/{i}" for i in range(3)]
    with NIOFetcher() as fetcher:
        with pytest.raises(ValueError) as by_register:
            fetcher.register(bad)
        with pytest.raises(ValueError) as by_batch:
            fetcher.register_many([good[0], bad, good[1]])
        assert str(by_batch.value) == str(by_register.value), "the same check, the same message"
        assert fetcher.stats().registered == 0, "nothing of the batch was queued"
        assert fetcher.register_many(good) == 3
        assert [r.url for r in take(fetcher, 3)].count(good[0]) == 1
        assert fetcher.get_batch(5, timeout=0.05) == []


def test_a_batch_bigger_than_the_loops_slice_is_queued_and_cancelled_exactly_once(
    silent_port: int, no_leaks: LeakBaseline) -> None:
    urls = [f"http://127.0.0.1:{silent_port}/page/{i}" for i in range(20_000)]  # the loop takes 1,024 a turn
    config = FetcherConfig(max_connections=1, max_connections_per_host=1)
    with NIOFetcher(config) as fetcher:
        assert fetcher.register_many(urls) == len(urls)
        engine = fetcher._engine
        assert wait_until(lambda: not engine._inbox, 30), "the loop takes the whole batch, slice by slice"
        assert fetcher.stats().pending + fetcher.stats().in_flight == len(urls)
        fetcher.shutdown(wait=False)
        results = fetcher.drain()
    assert Counter(r.url for r in results) == Counter(urls)
    assert {r.error for r in results} == {"cancelled"}


def test_threads_registering_batches_and_draining_batches_lose_and_double_nothing(
    no_leaks: LeakBaseline, site: TestSite) -> None:
    writers, per_writer, batch = 4, 300, 25
    a, b = site.base_urls
    beans = [URLBean(f"{(a, b)[i % 2]}page/{i % 50}", meta={"id": i}) for i in range(writers * per_writer)]
    taken: list[FetchResult] = []
    with NIOFetcher(FetcherConfig(max_connections_per_host=4)) as fetcher:

        def writer(mine: list[URLBean]) -> Any:
            def register() -> None:
                for start in range(0, len(mine), batch):
                    assert fetcher.register_many(mine[start:start + batch]) == len(mine[start:start + batch])

            return register

        def reader() -> None:
            while len(taken) < len(beans):
                taken.extend(fetcher.get_batch(64, timeout=10) or pytest.fail("results stopped coming"))

        run_threads([*(writer(beans[w::writers]) for w in range(writers)), reader])
    assert ids_of(taken) == Counter(range(len(beans)))


# -- get_batch -----------------------------------------------------------------


def test_get_batch_returns_at_most_max_items_oldest_first(no_leaks: LeakBaseline, site: TestSite) -> None:
    urls = [f"{site.base_urls[0]}page/{i}" for i in range(10)]
    with NIOFetcher(FetcherConfig(max_connections_per_host=1)) as fetcher:  # one connection: results in order
        assert fetcher.register_many(urls) == 10
        assert fetcher.join(timeout=30)
        first = fetcher.get_batch(4)
        rest = fetcher.get_batch(100, timeout=0)
        assert fetcher.get_batch(100, timeout=0) == []
    assert [r.url for r in first + rest] == urls
    assert len(first) == 4


def test_get_batch_does_not_wait_for_more_once_it_has_one(
    no_leaks: LeakBaseline, site: TestSite, raw_server: MakeServer) -> None:
    permits = threading.Semaphore(0)
    held = raw_server(gated(permits))
    with NIOFetcher() as fetcher:
        assert fetcher.register_many([held.url("/held"), f"{site.base_urls[0]}page/1"]) == 2
        # No timeout: were it to wait for a second result, the test would hang until its time runs out.
        batch = fetcher.get_batch(10)
        assert [r.url for r in batch] == [f"{site.base_urls[0]}page/1"]
        permits.release()
        assert [r.url for r in fetcher.get_batch(10)] == [held.url("/held")]


def test_get_batch_gives_up_after_its_timeout_and_returns_at_once_after_shutdown(
    silent_port: int, no_leaks: LeakBaseline) -> None:
    with NIOFetcher() as fetcher:
        assert fetcher.register(f"http://127.0.0.1:{silent_port}/")
        assert fetcher.get_batch(5, timeout=0.05) == [], "nothing came: empty after the timeout"
        fetcher.shutdown(wait=False)
        assert [r.error for r in fetcher.get_batch(5)] == ["cancelled"]
        # Shut down with nothing left: no timeout, and no waiting for ever either.
        assert fetcher.get_batch(5) == []
        assert fetcher.get() is None


@pytest.mark.parametrize("max_items", [0, -1, True, 2.0, None])
def test_get_batch_takes_a_positive_int(max_items: Any) -> None:
    fetcher = NIOFetcher()  # never started
    with pytest.raises(ValueError, match="max_items"):
        fetcher.get_batch(max_items, timeout=0)
    fetcher.shutdown()

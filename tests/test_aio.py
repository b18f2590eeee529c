"""niofetcher.aio.AsyncFetcher (docs/asyncio.md): the fetcher from asyncio code, on asyncio and on uvloop.

Results cross into the event loop a batch per ``call_soon_threadsafe``, each to
the ``fetch()`` that awaits it (the same bean twice: two results), the others
to ``results()``; a cancelled fetch leaks nothing; nothing blocks the event
loop; leaving ``async with`` on an exception shuts the fetcher down, and no
thread is left behind.  Against the real test site; no assertion on time
beyond loose bounds on the event loop's stalls.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

import pytest
from conftest import LeakBaseline

from niofetcher import FetcherConfig, FetchResult, URLBean
from niofetcher.aio import AsyncFetcher
from niofetcher.testing import TestSite

pytestmark = pytest.mark.timeout(90)


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed")
    # uvloop's first loop opens a pipe it keeps for the process: opened here, before no_leaks counts.
    loop = uvloop.new_event_loop()
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    return uvloop.new_event_loop  # type: ignore[no-any-return]


LOOPS = {"asyncio": lambda: asyncio.new_event_loop, "uvloop": _uvloop_factory}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """Run a coroutine to its end on a new event loop of the parametrised kind (before ``no_leaks``
    in a test's arguments, so that what the kind opens once per process is not counted)."""
    factory = LOOPS[request.param]()

    def run_on_loop(coro: Coroutine[Any, Any, Any]) -> Any:
        loop = factory()
        try:
            return loop.run_until_complete(coro)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    return run_on_loop


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite(hosts=2, pages=50, page_size=512) as test_site:
        yield test_site


async def ticking_while(work: Awaitable[Any], every: float = 0.01) -> tuple[Any, int, float]:
    """Run ``work`` beside a task ticking every ``every`` s: its value, the ticks, the longest gap."""
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(every)

    ticker = asyncio.ensure_future(tick())
    try:
        value = await work
    finally:
        ticker.cancel()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    return value, len(ticks), max(gaps, default=0.0)


def test_fetch_returns_each_urls_own_result_and_the_event_loop_keeps_ticking(
    run: Any, no_leaks: LeakBaseline, site: TestSite
) -> None:
    a, b = site.base_urls
    urls = [f"{(a, b)[i % 2]}page/{i % 50}?n={i}" for i in range(1000)]

    async def main() -> tuple[list[FetchResult], int, float, int]:
        async with AsyncFetcher(FetcherConfig(max_connections_per_host=4)) as fetcher:
            results, ticks, gap = await ticking_while(asyncio.gather(*(fetcher.fetch(url) for url in urls)))
            return results, ticks, gap, fetcher.stats().registered

    results, ticks, gap, registered = run(main())
    assert [r.url for r in results] == urls, "each fetch() got its own URL's result"
    assert all(r.ok for r in results)
    assert registered == 1000
    assert ticks > 1
    # Loose: a 2-core machine shared with other work may stall any thread for a while, but a
    # blocking call on the event loop (a join, a get(), a shutdown) would stall it for the whole run.
    assert gap < 2.0, f"the event loop stood still for {gap:.2f} s"


def test_no_callback_on_the_event_loop_blocks_and_results_come_in_batches(
    no_leaks: LeakBaseline, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio's debug mode reports every callback slower than slow_callback_duration: none may be.

    The site answers after 50 ms, so that the fetches take seconds: a blocking wait on the event
    loop (a join, a get(), a shutdown) would be one callback as long as the whole run.
    """
    slow = TestSite(hosts=2, pages=50, page_size=512, delay=0.05)
    urls: list[str] = []
    posts = 0

    async def main() -> list[FetchResult]:
        nonlocal posts
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = 1.0  # loose (a shared machine, debug mode's own costs); the run takes 2.5 s
        post = loop.call_soon_threadsafe

        def counting(callback: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal posts
            posts += 1
            return post(callback, *args, **kwargs)

        monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
        urls.extend(f"{slow.base_urls[i % 2]}page/{i % 50}?n={i}" for i in range(400))
        async with AsyncFetcher(FetcherConfig(max_connections_per_host=4)) as fetcher:
            results = await asyncio.gather(*(fetcher.fetch(url) for url in urls))
            await fetcher.shutdown()
        return results

    with slow, caplog.at_level(logging.WARNING, logger="asyncio"):
        loop = asyncio.new_event_loop()
        try:
            results = loop.run_until_complete(main())
        finally:
            loop.close()
    assert [r.url for r in results] == urls and all(r.ok for r in results)
    stalls = [record.getMessage() for record in caplog.records if "took" in record.getMessage()]
    assert not stalls, stalls
    # One post per batch (and one for the delivery's end, one for shutdown's): fewer than the results.
    assert 2 < posts < len(urls)


def test_the_same_bean_fetched_twice_gets_two_results_and_register_goes_to_results(
    run: Any, no_leaks: LeakBaseline, site: TestSite
) -> None:
    a, b = site.base_urls
    bean = URLBean(f"{a}page/3", meta={"id": "twice"})

    async def main() -> tuple[list[FetchResult], list[FetchResult]]:
        async with AsyncFetcher() as fetcher:
            assert fetcher.register(f"{b}page/1")
            assert fetcher.register_many([f"{b}page/{i}" for i in range(2, 6)]) == 4
            fetched = list(await asyncio.gather(fetcher.fetch(bean), fetcher.fetch(bean), fetcher.fetch(f"{a}page/4")))
            others = [result async for result in fetcher.results()]
        return fetched, others

    fetched, others = run(main())
    assert fetched[0].bean is bean and fetched[1].bean is bean and fetched[0] is not fetched[1]
    assert fetched[2].url == f"{a}page/4"
    assert sorted(r.url for r in others) == [f"{b}page/{i}" for i in range(1, 6)], "not awaited: to results()"


def test_a_cancelled_fetch_leaks_nothing_and_its_result_is_dropped(
    run: Any, no_leaks: LeakBaseline, site: TestSite
) -> None:
    slow = TestSite(hosts=1, pages=5, delay=0.3)

    async def main() -> tuple[int, int, list[FetchResult]]:
        with slow:
            async with AsyncFetcher() as fetcher:
                task = asyncio.ensure_future(fetcher.fetch(f"{slow.base_urls[0]}page/1"))
                await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                fine = await fetcher.fetch(f"{site.base_urls[0]}page/1")  # the fetcher goes on
                left = [result async for result in fetcher.results()]  # waits for the cancelled one's result
                assert fine.ok
            return len(fetcher._waiting), fetcher._outstanding, left

    waiting, outstanding, left = run(main())
    assert (waiting, outstanding) == (0, 0), "the cancelled fetch's future went with its result"
    assert left == [], "its result was dropped, not handed to results()"


def test_leaving_async_with_on_an_exception_cancels_and_shuts_down(run: Any, no_leaks: LeakBaseline) -> None:
    slow = TestSite(hosts=1, pages=5, delay=30)
    seen: list[FetchResult] = []

    async def main() -> AsyncFetcher:
        with slow:
            fetcher = AsyncFetcher()
            with pytest.raises(KeyError):
                async with fetcher:
                    assert fetcher.register_many([f"{slow.base_urls[0]}page/{i}" for i in range(3)]) == 3
                    pending = asyncio.ensure_future(fetcher.fetch(f"{slow.base_urls[0]}page/4"))
                    await asyncio.sleep(0.05)
                    raise KeyError("the caller's bug")
            seen.append(await pending)
            seen.extend([result async for result in fetcher.results()])
            return fetcher

    fetcher = run(main())
    assert Counter(r.error for r in seen) == Counter({"cancelled": 4}), "wait=False: everything cancelled at once"
    assert fetcher.fetcher.stats().registered == 4
    with pytest.raises(RuntimeError):
        asyncio.run(fetcher.fetch(f"{slow.base_urls[0]}page/1"))


def test_shutdown_with_wait_finishes_the_work_first_and_refuses_more(
    run: Any, no_leaks: LeakBaseline, site: TestSite
) -> None:
    async def main() -> tuple[list[FetchResult], bool]:
        fetcher = AsyncFetcher()
        await fetcher.start()
        assert fetcher.register_many([f"{site.base_urls[0]}page/{i}" for i in range(20)]) == 20
        await asyncio.gather(fetcher.shutdown(), fetcher.shutdown())  # twice: both wait for the one shutdown
        results = [result async for result in fetcher.results()]
        return results, fetcher.register(f"{site.base_urls[0]}page/1")

    results, accepted_after = run(main())
    assert len(results) == 20 and all(r.ok for r in results)
    assert not accepted_after


def niofetcher_threads() -> list[str]:
    """The fetcher's threads alive now (the test site's own are scaffolding)."""
    return sorted(
        t.name for t in threading.enumerate() if t.name.startswith("niofetcher-") and "testsite" not in t.name
    )


@pytest.mark.parametrize("ending", ["cancelled", "refused"])
def test_a_shutdown_that_ends_early_leaves_no_thread_of_the_fetcher(
    run: Any, no_leaks: LeakBaseline, ending: str,
) -> None:
    """Cancelled while it waits for a page 30 s away (Ctrl-C under asyncio.run(), an outer timeout),
    or refused by NIOFetcher (timeout=NaN: a ValueError, which it raises, not returns): the fetcher
    stops at once, and no thread of it outlives the exception."""
    slow = TestSite(hosts=1, pages=5, delay=30)

    async def end_early(fetcher: AsyncFetcher) -> None:
        if ending == "refused":
            with pytest.raises(ValueError, match="timeout"):
                await fetcher.shutdown(timeout=math.nan)
            return
        closing = asyncio.ensure_future(fetcher.shutdown())
        await asyncio.sleep(0)  # it runs up to its wait for the page
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing

    async def main() -> tuple[list[str], list[FetchResult]]:
        with slow:
            fetcher = AsyncFetcher()
            await fetcher.start()
            assert fetcher.register(f"{slow.base_urls[0]}page/1")
            await end_early(fetcher)
            alive = niofetcher_threads()
            return alive, [result async for result in fetcher.results()]

    alive, results = run(main())
    assert alive == [], f"a thread of the fetcher outlived the {ending} shutdown"
    assert [r.error for r in results] == ["cancelled"]


def test_max_completed_holds_back_the_results_nobody_takes(run: Any, no_leaks: LeakBaseline, site: TestSite) -> None:
    """With max_completed, at most that many results wait on the event loop untaken: the fetcher's
    own backlog fills, and its loop stops starting requests, as NIOFetcher's does for get().
    Taking them through results() lets it go on; fetch()'s results count as taken."""
    limit = 10
    urls = [f"{site.base_urls[i % 2]}page/{i % 50}?n={i}" for i in range(300)]

    async def main() -> tuple[int, list[FetchResult], list[FetchResult]]:
        async with AsyncFetcher(FetcherConfig(max_completed=limit)) as fetcher:
            assert fetcher.register_many(urls) == len(urls)
            stopped = 0  # looks in a row that found the loop starting nothing with URLs still pending
            while stopped < 20:
                await asyncio.sleep(0.01)
                stats = fetcher.stats()
                assert len(fetcher._unclaimed) <= limit, "results nobody took piled up on the event loop"
                assert stats.completed < len(urls), "every URL was fetched though nobody took a result"
                stopped = stopped + 1 if stats.in_flight == 0 and stats.pending > 0 else 0
            held_back = fetcher.stats().completed
            taken = []
            async for result in fetcher.results():
                assert len(fetcher._unclaimed) <= limit
                taken.append(result)
            # Only fetch() now: what it awaits is taken as it arrives, never held against the limit.
            fetched = await asyncio.gather(*(fetcher.fetch(f"{url}&again") for url in urls[:100]))
        return held_back, taken, list(fetched)

    held_back, taken, fetched = run(main())
    assert held_back < len(urls)
    assert sorted(r.url for r in taken) == sorted(urls) and all(r.ok for r in taken)
    assert [r.url for r in fetched] == [f"{url}&again" for url in urls[:100]] and all(r.ok for r in fetched)


def test_shutdown_lifts_max_completed_for_results_nobody_took_yet(
    run: Any, no_leaks: LeakBaseline, site: TestSite
) -> None:
    """Leaving ``async with`` before reading results() finishes the work, as NIOFetcher's
    shutdown(wait=True) does: it cannot wait on a reader who comes only after it."""
    urls = [f"{site.base_urls[0]}page/{i}" for i in range(50)]

    async def main() -> list[FetchResult]:
        async with AsyncFetcher(FetcherConfig(max_completed=5)) as fetcher:
            assert fetcher.register_many(urls) == len(urls)
        return [result async for result in fetcher.results()]

    results = run(main())
    assert sorted(r.url for r in results) == sorted(urls) and all(r.ok for r in results)

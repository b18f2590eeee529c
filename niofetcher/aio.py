"""AsyncFetcher: the fetcher's face to asyncio code (uvloop included).

Theory of operation.  The fetching is NIOFetcher's, on its own selectors loop
thread, exactly as without asyncio; this module only carries results across
into the event loop and routes them.

- In: ``register()``, ``register_many()`` and ``fetch()`` call NIOFetcher's
  registration directly on the event loop thread.  That is no blocking call:
  the fetcher's lock is held for an ``extend`` of its inbox, never while
  anything waits.
- Out: one *delivery thread* takes results with ``get_batch()`` and hands each
  batch to the event loop with ONE ``call_soon_threadsafe``, never one per
  result.  A thread rather than a hook in the engine's hand-off: the results
  then go through NIOFetcher's own bookkeeping (exactly once, ``join``, the
  counters) and the loop thread never calls into a foreign event loop, whose
  ``call_soon_threadsafe`` takes a lock and writes to its self-pipe -- a cost
  and a failure (an event loop closed under it) that must stay out of the
  loop thread.  While the event loop is busy the results pile up in the
  fetcher and the next batch is simply bigger.
- Back-pressure: with ``max_completed`` the delivery thread takes at most that
  many results the program has not taken yet (from ``results()``, or routed to
  a ``fetch()``), so that the rest stay in the fetcher, whose loop then stops
  starting requests as it does for a slow ``get()``.  Once it is full it waits
  until half are taken: a batch per hand-over, not a hand-over per result.
  Shutdown lifts it, as NIOFetcher's ``shutdown(wait=True)`` lifts its own.
- Routing, on the event loop: ``fetch()`` registers a URLBean of its own
  (``FetchResult.bean`` is the very object registered), and its future waits
  under that bean's identity; the same bean fetched twice is two
  registrations and two futures, served in order.  A result nobody awaits
  goes to ``results()``.  A cancelled ``fetch()`` leaves its future behind
  until its result arrives, which is then dropped: nothing outlives the
  registration.
- Shutdown runs NIOFetcher's (blocking) shutdown and the delivery thread's end
  in a thread of its own, and the event loop awaits its future; the last
  batches are routed before that future resolves, since they were posted first.
  A shutdown whose awaiter is cancelled stops the fetcher without waiting, on
  the event loop, before it lets the cancel go on: the event loop may close next.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from types import TracebackType
from typing import Any

from .config import FetcherConfig
from .fetcher import NIOFetcher
from .models import FetcherStats, FetchResult, URLBean

__all__ = ["AsyncFetcher"]

#: The most results one hand-over to the event loop carries.
DELIVERY_BATCH = 4096


class AsyncFetcher:
    """NIOFetcher for asyncio: ``async with AsyncFetcher(config) as f: result = await f.fetch(url)``.

    Every registration that is accepted yields exactly one FetchResult: to the
    ``fetch()`` that made it, or else through ``results()``.
    """

    def __init__(self, config: FetcherConfig | None = None) -> None:
        self.fetcher = NIOFetcher(config)  # the same fetcher and loop thread, for what this face lacks
        self._loop: asyncio.AbstractEventLoop | None = None
        self._delivery: threading.Thread | None = None
        # id(bean) -> (the bean, kept alive so that its id stays its own; the futures awaiting it, in order).
        self._waiting: dict[int, tuple[URLBean, collections.deque[asyncio.Future[FetchResult]]]] = {}
        self._unclaimed: collections.deque[FetchResult] = collections.deque()  # for results()
        self._outstanding = 0  # registrations accepted and not yet routed
        self._arrival: asyncio.Event | None = None  # set when results are routed or delivery ends
        self._delivery_over = False
        limit = self.fetcher.config.max_completed
        self._allowance = None if limit is None else _Allowance(limit)
        self._shutdown: asyncio.Future[None] | None = None
        self._shutdown_thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<AsyncFetcher [outstanding: {self._outstanding} | awaited: {len(self._waiting)}] {self.fetcher!r}>"

    # -- life -----------------------------------------------------------------

    async def start(self) -> None:
        """Start the loop thread and the delivery thread, bound to the running event loop."""
        if self._loop is not None:
            raise RuntimeError("AsyncFetcher.start() may be called only once")
        self._loop = asyncio.get_running_loop()
        self._arrival = asyncio.Event()
        self.fetcher.start()
        self._delivery = threading.Thread(target=self._deliver, name="niofetcher-aio-delivery", daemon=True)
        self._delivery.start()

    async def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """NIOFetcher.shutdown() without blocking the event loop; every result is routed when it returns.

        ``wait=True`` finishes the registered work (at most ``timeout`` s, then the rest is
        cancelled), ``wait=False`` cancels it at once; unfinished URLs come back ``cancelled``,
        to their ``fetch()`` or to ``results()``.  Calling it again waits for the first call's end.
        Cancelled (Ctrl-C under ``asyncio.run()``, an outer timeout), it stops the fetcher as
        ``wait=False`` does before the CancelledError goes on: no thread of it outlives the cancel.
        What NIOFetcher.shutdown() raises (a ``timeout`` it refuses) it raises, the fetcher stopped
        as ``wait=False`` stops it.
        """
        loop = self._loop
        if loop is None:  # never started: nothing runs, nothing to wait for
            self.fetcher.shutdown()
            return
        if self._shutdown is None:
            if self._allowance is not None:
                self._allowance.lift()  # the delivery thread must take everything to end
            self._shutdown = loop.create_future()
            done = self._shutdown

            def blocking() -> None:
                try:
                    self._stop(wait, timeout)
                except BaseException as error:  # noqa: BLE001 - raised by the awaiting shutdown()
                    _post(loop, _fail, done, error)
                else:
                    _post(loop, _resolve, done)

            self._shutdown_thread = threading.Thread(target=blocking, name="niofetcher-aio-shutdown", daemon=True)
            self._shutdown_thread.start()
        try:
            await asyncio.shield(self._shutdown)
        except asyncio.CancelledError:
            # Ctrl-C under asyncio.run() or an outer timeout: the program is leaving, perhaps closing
            # the event loop next, so the fetcher stops now, not after the registered work.  Stopping
            # without waiting takes the loop thread a moment; the joins then do not wait either.
            self.fetcher.shutdown(wait=False)
            raise
        finally:  # also when it raises what NIOFetcher.shutdown() raised: the thread posts it just before it ends
            self._join_shutdown_thread()

    def _stop(self, wait: bool, timeout: float | None) -> None:
        """Shutdown thread: NIOFetcher.shutdown(), then the delivery thread's end."""
        try:
            self.fetcher.shutdown(wait, timeout)
        finally:
            # Even when that raised (a timeout it refuses), no thread outlives shutdown().
            self.fetcher.shutdown(wait=False)
            if self._delivery is not None:
                self._delivery.join()

    def _join_shutdown_thread(self) -> None:
        # It has posted its last word and only returns now: a join that does not wait, and no
        # thread left behind when shutdown() returns.
        if self._shutdown_thread is not None:
            self._shutdown_thread.join()

    async def __aenter__(self) -> AsyncFetcher:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown(wait=exc_type is None)

    # -- in -------------------------------------------------------------------

    def register(self, url_or_bean: str | URLBean, priority: int = 0) -> bool:
        """NIOFetcher.register(): its result comes through ``results()``."""
        accepted = self.fetcher.register(url_or_bean, priority)
        self._outstanding += accepted
        return accepted

    def register_many(self, urls_or_beans: Iterable[str | URLBean]) -> int:
        """NIOFetcher.register_many(): their results come through ``results()``."""
        accepted = self.fetcher.register_many(urls_or_beans)
        self._outstanding += accepted
        return accepted

    async def fetch(self, url_or_bean: str | URLBean, priority: int = 0) -> FetchResult:
        """Fetch one URL and return its result (an error result, not an exception, when it fails).

        Raises ValueError for a URL ``register()`` refuses, and RuntimeError when the fetcher
        is not started, is shut down or has ``max_pending`` URLs waiting.
        """
        loop = self._loop
        if loop is None:
            raise RuntimeError("AsyncFetcher.fetch() before start(): use `async with AsyncFetcher(...)`")
        bean = url_or_bean if isinstance(url_or_bean, URLBean) else URLBean(url_or_bean, priority=priority)
        future: asyncio.Future[FetchResult] = loop.create_future()
        # Registered, then waited for: its result cannot be routed in between, routing runs on this thread.
        if not self.fetcher.register(bean):
            raise RuntimeError(f"{bean.url} not accepted: the fetcher is shut down or max_pending URLs wait")
        self._outstanding += 1
        key = id(bean)
        waiting = self._waiting.get(key)
        if waiting is None:
            self._waiting[key] = (bean, collections.deque([future]))
        else:
            waiting[1].append(future)
        return await future

    # -- out ------------------------------------------------------------------

    async def results(self) -> AsyncIterator[FetchResult]:
        """Yield the results no ``fetch()`` awaits, until nothing is registered and unrouted."""
        arrival = self._arrival
        if arrival is None:
            return
        allowance = self._allowance
        while True:
            while self._unclaimed:
                result = self._unclaimed.popleft()
                if allowance is not None:
                    allowance.taken(1)
                yield result
            if self._outstanding == 0 or self._delivery_over:
                return
            arrival.clear()
            await arrival.wait()

    def stats(self) -> FetcherStats:
        """NIOFetcher.stats()."""
        return self.fetcher.stats()

    def _deliver(self) -> None:
        """Delivery thread: hand the fetcher's results to the event loop, a batch per call."""
        loop = self._loop
        assert loop is not None
        fetcher = self.fetcher
        allowance = self._allowance
        try:
            # Empty only once the fetcher is shut down with everything delivered.
            while batch := fetcher.get_batch(DELIVERY_BATCH if allowance is None else allowance.room()):
                if allowance is not None:
                    allowance.hold(len(batch))
                if not _post(loop, self._route, batch):
                    return
        finally:
            _post(loop, self._delivery_ended)

    def _route(self, batch: list[FetchResult]) -> None:
        """Event loop: each result to its fetch(), or to results()."""
        waiting = self._waiting
        unclaimed_before = len(self._unclaimed)
        for result in batch:
            key = id(result.bean)
            entry = waiting.get(key)
            if entry is not None and entry[0] is result.bean:
                futures = entry[1]
                future = futures.popleft()
                if not futures:
                    del waiting[key]
                if not future.done():  # a cancelled fetch(): its result is dropped
                    future.set_result(result)
            else:
                self._unclaimed.append(result)
        if self._allowance is not None:
            self._allowance.taken(len(batch) - (len(self._unclaimed) - unclaimed_before))  # by their fetch()
        self._outstanding -= len(batch)
        assert self._arrival is not None
        self._arrival.set()

    def _delivery_ended(self) -> None:
        """Event loop: nothing more will come; a fetch() still waiting (a loop that died) is told so."""
        self._delivery_over = True
        for _, futures in self._waiting.values():
            for future in futures:
                if not future.done():
                    future.set_exception(RuntimeError("the fetcher ended without a result for this URL"))
        self._waiting.clear()
        assert self._arrival is not None
        self._arrival.set()


class _Allowance:
    """max_completed across the threads: results the delivery thread took and the program has not.

    The delivery thread asks for ``room()`` and ``hold()``s what it took; the event loop says what
    was ``taken()``.  The lock is held for arithmetic only, so the event loop never waits on it.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._resume = limit // 2  # once full, the delivery thread waits until held this few or fewer
        self._held = 0
        self._lifted = False
        self._cond = threading.Condition()

    def room(self) -> int:
        """Delivery thread: how many results it may take now, waiting while ``limit`` are held."""
        with self._cond:
            if self._held >= self._limit:
                self._cond.wait_for(lambda: self._held <= self._resume or self._lifted)
            return DELIVERY_BATCH if self._lifted else min(DELIVERY_BATCH, self._limit - self._held)

    def hold(self, count: int) -> None:
        """Delivery thread: it took ``count`` results."""
        with self._cond:
            self._held += count

    def taken(self, count: int) -> None:
        """Event loop: the program took ``count`` results."""
        with self._cond:
            before = self._held
            self._held -= count
            # Only the delivery thread adds, so a waiting one saw held fall past this point once.
            if before > self._resume >= self._held:
                self._cond.notify()

    def lift(self) -> None:
        """Event loop, at shutdown: no more waiting, whatever is held."""
        with self._cond:
            self._lifted = True
            self._cond.notify()


def _post(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> bool:
    """Any thread: run ``callback`` on ``loop``; False when that loop is closed (nobody is left to tell)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        return False
    return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _fail(future: asyncio.Future[None], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)

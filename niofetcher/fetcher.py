"""NIOFetcher: the thread-safe face of the loop.

Other threads register URLs and take results here; the loop thread lives in
``engine.py``, and this class reaches it only through the engine's face
(``submit``, ``pending``, ``wake``, ``post``, ``stats``, ``host_stats``,
``failure``, and the calls it posts).  Results cross over in batches under
one condition variable, so the loop takes the lock once per loop iteration,
not once per result.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from .config import FetcherConfig
from .engine import Engine, InboxEntry
from .models import FetcherStats, FetchResult, HostStats, URLBean
from .request import bean_proxy
from .urls import Origin, parse_target

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

_METHOD_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class NIOFetcher:
    """Fetches registered URLs on one selectors loop thread.

    Every ``register()`` that returns True yields exactly one FetchResult,
    through ``get()``, ``drain()`` or ``results()``, whatever happens.
    """

    def __init__(self, config: FetcherConfig | None = None) -> None:
        self.config = config if config is not None else FetcherConfig()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._completed: collections.deque[FetchResult] = collections.deque()
        self._joining = 0  # join() calls waiting: max_completed does not hold while they do
        self._engine = Engine(self.config, self._deliver, self._backlog, self._close_intake)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._loop_ended = False
        self._registered = 0
        self._delivered = 0
        self._failed = 0
        self._unfinished = 0

    def __repr__(self) -> str:
        return (
            f"<NIOFetcher [registered: {self._registered} | unfinished: {self._unfinished} "
            f"| ready: {len(self._completed)}]>"
        )

    # -- life ---------------------------------------------------------------

    def start(self) -> None:
        """Start the loop thread.  Raises RuntimeError when called twice or after shutdown."""
        with self._cond:
            if self._thread is not None or self._closed:
                raise RuntimeError("NIOFetcher.start() may be called only once")
            self._thread = threading.Thread(target=self._run_loop, name="niofetcher-loop", daemon=True)
        self._thread.start()

    def _run_loop(self) -> None:
        try:
            self._engine.run()
        finally:
            # The engine delivers every unfinished URL as it ends, even after a failure.  Should
            # even that fail, waiting on the results it could not make must still end.
            with self._cond:
                self._loop_ended = True
                self._cond.notify_all()

    def _close_intake(self) -> None:
        """Loop thread as it ends, or shutdown() of a fetcher never started: refuse registrations from now on."""
        with self._cond:
            self._closed = True
            # A get() waiting with nothing registered must see it: no result will come to wake it.
            self._cond.notify_all()

    @property
    def failure(self) -> BaseException | None:
        """The exception that ended the loop thread; None while it runs, and after a normal shutdown.

        When it is set, every URL registered was (or is being) delivered with error
        ``cancelled`` and ``register()`` returns False.
        """
        return self._engine.failure

    @property
    def cookie_jar(self) -> CookieJar | None:
        """With ``FetcherConfig(cookies=True)``, the fetcher's one ``http.cookiejar.CookieJar``:
        the cookies responses set, sent on the requests (redirect hops included) their domain,
        path, ``Secure`` and expiry let them go to.  It locks itself: read it, add to it or clear
        it from any thread.  None without cookies."""
        return self._engine.cookie_jar

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop accepting URLs; finish them (``wait=True``, at most ``timeout`` s) or cancel them at once.

        Every unfinished URL is delivered with error ``cancelled``.  On return the loop
        thread has ended and every socket is closed; results stay available.
        """
        timeout = _wait_limit(timeout)
        with self._cond:
            already = self._closed
            self._closed = True
            thread = self._thread
        if thread is None:
            if not already:
                self._engine.close_unstarted()
            return
        engine = self._engine
        if wait:
            # "Finish all registered work" must not wait on results nobody drains (max_completed).
            engine.post(engine.finish_up)
            self.join(timeout)
        if thread.is_alive():
            engine.post(engine.stop)
        thread.join()

    def __enter__(self) -> NIOFetcher:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown(wait=exc_type is None)

    # -- in -----------------------------------------------------------------

    def register(self, url_or_bean: str | URLBean, priority: int = 0) -> bool:
        """Queue a URL (any thread).  False when shut down or ``max_pending`` URLs wait.

        Raises ValueError for anything but an absolute http(s) URL with a host.
        """
        return self._admit([self._entry(url_or_bean, priority, time.monotonic())]) == 1

    def register_many(self, urls_or_beans: Iterable[str | URLBean]) -> int:
        """Queue many URLs (any thread) with one lock and one wake-up; how many were accepted.

        Each is checked as ``register()`` checks it: a bad one raises ValueError and none of
        the batch is queued.  A str has priority 0, a URLBean its own.  Accepted are the
        first ones in order, as many as ``max_pending`` leaves room for (all without it);
        none when shut down.  A URL not accepted is not queued, and yields no result.

        The lock is held only to append the prepared entries, so a batch of any size
        stalls neither the loop nor other callers; the loop takes a large batch in slices.
        """
        entry = self._entry
        now = time.monotonic()  # one registration time for the batch
        return self._admit([entry(url_or_bean, 0, now) for url_or_bean in urls_or_beans])

    def _entry(self, url_or_bean: str | URLBean, priority: int, now: float) -> InboxEntry:
        """Check one registration and make its inbox entry: the one rule of register() and register_many()."""
        # A caller registering a million URLs holds the GIL the loop thread needs,
        # so this path is kept short: exact-type checks first, the general ones after.
        # A str makes no URLBean here: the engine keeps it as atoms until it starts (request.py).
        if type(url_or_bean) is str:
            url = url_or_bean
        elif isinstance(url_or_bean, URLBean):
            url = url_or_bean.url
            priority = url_or_bean.priority
            method = url_or_bean.method
            if method != "GET" and (not isinstance(method, str) or not method or not set(method) <= _METHOD_CHARS):
                raise ValueError(f"invalid HTTP method {method!r}")
            # What the loop's Task reads of a bean is checked here: there a fault would end the loop.
            headers = url_or_bean.headers
            if headers and (not isinstance(headers, Mapping) or not all(isinstance(name, str) for name in headers)):
                # Not shown: the values may be credentials.
                raise ValueError(f"URLBean.headers must be a dict of str names to values (got a {type(headers).__name__})")
            if url_or_bean.proxy:
                bean_proxy(url_or_bean.proxy)
        elif isinstance(url_or_bean, str):  # a str subclass: kept as it came, in a URLBean
            url_or_bean = URLBean(url_or_bean, priority=priority)
            url = url_or_bean.url
        else:
            raise ValueError(f"register() takes a URL str or a URLBean, not {type(url_or_bean).__name__}")
        target = parse_target(url)
        if type(priority) is not int:
            if isinstance(priority, bool) or not isinstance(priority, int):
                raise ValueError(f"priority must be an int, not {priority!r}")
            if type(url_or_bean) is str:  # an int subclass (an IntEnum) stays what it was, in a URLBean
                url_or_bean = URLBean(url_or_bean, priority=priority)
        if type(url_or_bean) is str:
            origin = target.origin
            return url_or_bean, priority, origin.scheme, origin.host, origin.port, target.host_header, target.path, now
        return url_or_bean, priority, target, now  # type: ignore[return-value]  # not a str: a URLBean, made above

    def _admit(self, entries: list[InboxEntry]) -> int:
        """Queue the first of ``entries`` that ``max_pending`` has room for, under one lock; how many."""
        engine = self._engine
        with self._lock:  # the condition's own lock: nobody waits on a registration
            if self._closed:
                return 0
            limit = self.config.max_pending
            if limit is not None:
                room = max(0, limit - engine.pending())
                if room < len(entries):
                    del entries[room:]
            engine.submit(entries)
            accepted = len(entries)
            self._registered += accepted
            self._unfinished += accepted
        if accepted:
            engine.wake()
        return accepted

    def cancel_pending(self) -> None:
        """Cancel every registered URL that has not been dispatched yet (any thread).

        Each is delivered with error ``cancelled``; fetches already in flight go on.  Before
        ``start()`` it is done as the loop starts, before it takes any URL: every URL registered
        by then is cancelled.
        """
        with self._cond:
            if self._closed:  # everything unfinished is (being) cancelled anyway
                return
        engine = self._engine
        engine.post(engine.cancel_pending)

    def set_host_delay(self, url: str, seconds: float) -> None:
        """From now on, at least ``seconds`` between request starts to this URL's (scheme, host, port)."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < math.inf:
            raise ValueError(f"host delay must be a non-negative finite number of seconds, not {seconds!r}")
        origin = parse_target(url).origin
        engine = self._engine
        engine.post(engine.set_host_delay, origin, float(seconds))

    def set_host_deadlines(self, deadlines: Mapping[str, float | None]) -> None:
        """Gate request starts: none to a URL's (scheme, host, port) starts at or after its deadline.

        ``deadlines`` maps a URL of each origin (its scheme://host:port is enough) to a
        ``time.monotonic()`` of this process, or to None to lift that origin's gate; the others
        keep theirs.  The gate is checked as each request would get a connection, new or
        kept-alive: requests of a closed origin stay registered and waiting (a later deadline
        reopens it; ``cancel_pending()`` takes them back), fetches in flight go on -- and
        ``shutdown(wait=True)`` waits for them too: cancel or lift first.  For a crawler
        that holds hosts by a lease it may fail to renew: its requests stop in time even when
        the process was stopped and its loop runs before anything else can react.  An origin
        whose gate is lifted (its host given back) or set to a time already past (lost) has its
        idle connections closed at once: another worker may own that server now.  Any thread;
        one call for many origins, which take their gates together.
        """
        gates = []
        for url, start_until in deadlines.items():
            if start_until is not None and (
                isinstance(start_until, bool) or not isinstance(start_until, (int, float)) or math.isnan(start_until)
            ):
                raise ValueError(f"a host deadline must be a number (time.monotonic()) or None, not {start_until!r}")
            gates.append((parse_target(url).origin, None if start_until is None else float(start_until)))
        if gates:
            engine = self._engine
            engine.post(engine.set_host_gates, gates)

    # -- out ----------------------------------------------------------------

    def _deliver(self, results: list[FetchResult]) -> None:
        """Loop thread: hand over a batch of finished results."""
        if not results:
            return
        failed = sum(1 for r in results if r.error is not None)
        with self._cond:
            self._completed.extend(results)
            self._delivered += len(results)
            self._failed += failed
            self._unfinished -= len(results)
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> FetchResult | None:
        """The next completed result (any thread); None when ``timeout`` passes first."""
        batch = self.get_batch(1, timeout)
        return batch[0] if batch else None

    def get_batch(self, max_items: int, timeout: float | None = None) -> list[FetchResult]:
        """Up to ``max_items`` completed results, oldest first (any thread).

        Waits at most ``timeout`` seconds (None: for ever) for the first one, and not at all
        once there is one: what has completed by then is the batch.  Empty when ``timeout``
        passes first, or when the fetcher is shut down with nothing left to deliver.
        """
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
            raise ValueError(f"max_items must be a positive int, not {max_items!r}")
        timeout = _wait_limit(timeout)
        completed = self._completed
        with self._cond:
            # After shutdown with nothing left, waiting could only hang.
            self._cond.wait_for(
                lambda: completed or (self._closed and self._unfinished == 0) or self._loop_ended, timeout
            )
            if not completed:
                return []
            if max_items >= len(completed):
                batch = list(completed)
                completed.clear()
            else:
                batch = [completed.popleft() for _ in range(max_items)]
        self._after_take()
        return batch

    def drain(self) -> list[FetchResult]:
        """Every result completed so far, without waiting."""
        with self._cond:
            results = list(self._completed)
            self._completed.clear()
        self._after_take()
        return results

    def results(self) -> Iterator[FetchResult]:
        """Yield results until nothing is pending, in flight or completed."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._completed or self._unfinished == 0 or self._loop_ended)
                if not self._completed:
                    return
                batch = list(self._completed)
                self._completed.clear()
            self._after_take()
            yield from batch

    def join(self, timeout: float | None = None) -> bool:
        """Wait until nothing is pending or in flight; False if ``timeout`` passed first.

        While it waits, ``max_completed`` does not stop requests from starting: waiting for all
        the work to finish is waiting for all its results, taken or not.
        """
        timeout = _wait_limit(timeout)
        with self._cond:
            self._joining += 1
            try:
                self._engine.wake()  # a loop held back by max_completed starts the rest
                return self._cond.wait_for(lambda: self._unfinished == 0 or self._loop_ended, timeout)
            finally:
                self._joining -= 1

    def _backlog(self) -> int:
        """Loop thread: the results waiting to be taken, as ``max_completed`` counts them (none while a join() waits)."""
        return 0 if self._joining else len(self._completed)

    def _after_take(self) -> None:
        # The loop stops starting requests while max_completed results wait; tell it there is room.
        limit = self.config.max_completed
        if limit is not None and len(self._completed) < limit:
            self._engine.wake()

    # -- numbers ------------------------------------------------------------

    def stats(self) -> FetcherStats:
        """A snapshot of the counters, taken without stopping the loop."""
        return FetcherStats(
            registered=self._registered, completed=self._delivered, failed=self._failed, **self._engine.stats()
        )

    def host_stats(self) -> dict[Origin, HostStats]:
        """Per (scheme, host, port) numbers.  A snapshot taken without stopping the loop.

        Hosts with work queued, in flight or connections open are all here; of the
        hosts done with (their state freed), the last 1,024 (``pool.RECENT_HOSTS``).
        """
        return self._engine.host_stats()


def _wait_limit(timeout: float | None) -> float | None:
    """A caller's ``timeout`` as ``Condition.wait_for`` takes it: None, inf (and anything past
    ``threading.TIMEOUT_MAX``, centuries) wait without limit.

    NaN or a negative number raises ValueError: wait_for would spin on NaN at full CPU for ever,
    and a lock's timeout overflows past TIMEOUT_MAX.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ValueError(f"timeout must be a non-negative number of seconds or None, not {timeout!r}")
    return None if timeout >= threading.TIMEOUT_MAX else timeout

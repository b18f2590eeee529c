"""The selectors loop: readiness events, a timer heap and a thread-safe wake-up.

Theory of operation.  One thread owns everything in here.  Other threads
talk to it only through ``call_soon_threadsafe``, which appends to a deque
(atomic under the GIL) and writes one byte to a socketpair unless a wake-up
is already pending, so a burst of registrations costs one syscall, not one
each.  Interest in read/write readiness is changed only when it changes:
``set_interest`` compares with the mask the selector already has.

One ``run_once`` handles at most ``EVENT_BATCH`` ready events; the rest of
what one select() returned waits for the next call, without a select()
in between.  The caller runs its scheduler after each call, and the scheduler
is what sends a connection's next request: with 1,000 responses ready at once
(2,000 connections, scenario C), a connection whose response came first would
otherwise idle until the other 999 were handled, and its server with it.
The events left keep the rules of one whole batch: the clock stays at the
select()'s return, and a due timer of a handler whose event is still waiting
is held until the batch's last call (a connect or a response that was ready
when the loop looked is handled before its timeout can fire).
"""

from __future__ import annotations

import collections
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

from .timers import TimerHeap

READ = selectors.EVENT_READ
WRITE = selectors.EVENT_WRITE
RECV_BUFFER_SIZE = 256 * 1024
#: Ready events one ``run_once`` handles (see the module doc): enough that the scheduler's
#: per-call cost stays small beside theirs, few enough that a connection's wait stays short.
EVENT_BATCH = 64
#: The longest one select() waits: epoll takes at most about 24.8 days in milliseconds (and no
#: infinity), and a timer that far away (a huge Crawl-delay, an idle connection kept for a month)
#: must not end the loop; waking once an hour to find nothing due costs nothing.
MAX_WAIT = 3600.0


class Pollable(Protocol):
    """What the loop calls on a ready file descriptor."""

    interest: int

    def on_readable(self) -> None:
        """The descriptor is readable (and READ is in ``interest``)."""

    def on_writable(self) -> None:
        """The descriptor is writable (and WRITE is in ``interest``)."""

    def on_internal_error(self, exc: Exception) -> None:
        """One of the calls above raised ``exc``: a bug that must cost this handler only."""


class Loop:
    """One selector, one timer heap, one wake-up socketpair, a shared receive buffer."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self.timers = TimerHeap()
        self.now = time.monotonic()
        self.recv_buffer = bytearray(RECV_BUFFER_SIZE)
        self.recv_view = memoryview(self.recv_buffer)
        self._calls: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = collections.deque()
        self._ready: list[tuple[selectors.SelectorKey, int]] = []  # a select()'s events beyond EVENT_BATCH
        self._waiting: set[int] = set()  # id() of the handlers of those events: their timers wait
        self._wake_pending = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, READ, None)

    # -- any thread ---------------------------------------------------------

    def call_soon_threadsafe(self, callback: Callable[..., None], *args: Any) -> None:
        """Any thread: run ``callback(*args)`` on the loop thread soon, in the order posted."""
        self._calls.append((callback, args))
        self.wake()

    def call_soon(self, callback: Callable[..., None], *args: Any) -> None:
        """Loop thread: run ``callback(*args)`` once the events and timers at hand are handled."""
        self._calls.append((callback, args))

    def wake(self) -> None:
        """Interrupt a select() in progress; cheap when a wake-up is already on its way."""
        if not self._wake_pending:
            self._wake_pending = True
            try:
                self._wake_w.send(b"\0")
            except (BlockingIOError, OSError):
                pass  # the pipe is full (a wake-up is pending anyway) or the loop is closed

    # -- loop thread --------------------------------------------------------

    def set_interest(self, handler: Pollable, sock: socket.socket, mask: int) -> None:
        """Watch ``sock`` for ``mask`` (0 = not at all) on behalf of ``handler``."""
        old = handler.interest
        if mask == old:
            return
        if old == 0:
            self._selector.register(sock, mask, handler)
        elif mask == 0:
            self._selector.unregister(sock)
        else:
            self._selector.modify(sock, mask, handler)
        handler.interest = mask

    def run_once(self, max_wait: float | None) -> None:
        """Wait for readiness (at most until the next timer or ``max_wait``), then handle up to
        ``EVENT_BATCH`` events, the posted calls and the due timers; no wait while events are left."""
        events = self._ready
        waiting = self._waiting
        batch = EVENT_BATCH
        if not events:
            timeout = max_wait
            deadline = self.timers.next_deadline()
            if deadline is not None:
                until_timer = max(0.0, deadline - time.monotonic())
                timeout = until_timer if timeout is None else min(timeout, until_timer)
            if self._calls:
                timeout = 0.0
            events = self._selector.select(MAX_WAIT if timeout is None else min(timeout, MAX_WAIT))
            self.now = time.monotonic()  # for every batch of this select()'s events (module doc)
            if len(events) > EVENT_BATCH:
                # Every idle handler's event (a kept-alive connection's EOF or stray bytes) in the first
                # batch: the scheduler runs between batches and would hand such a connection a request.
                idle: list[tuple[selectors.SelectorKey, int]] = []
                others: list[tuple[selectors.SelectorKey, int]] = []
                for event in events:  # one pass, once a select() gave more than a batch
                    (idle if getattr(event[0].data, "idle", False) else others).append(event)
                if idle:
                    events = idle + others
                    batch += len(idle)
                waiting.update(id(key.data) for key, _ in events[batch:])
        if len(events) > batch:
            events, self._ready = events[:batch], events[batch:]
        else:
            self._ready = []
        for key, mask in events:
            handler = key.data
            if waiting:
                waiting.discard(id(handler))
            if handler is None:
                self._drain_wakeups()
                continue
            # A handler may have been closed by an earlier event of this batch, or of an earlier
            # call's (its interest is 0 then: closing unregisters it).
            try:
                if mask & READ and handler.interest & READ:
                    handler.on_readable()
                if mask & WRITE and handler.interest & WRITE:
                    handler.on_writable()
            except Exception as exc:  # noqa: BLE001 - one broken handler must not stop the loop
                handler.on_internal_error(exc)
        self.run_calls()
        self.timers.run_due(self.now, waiting)

    def _drain_wakeups(self) -> None:
        # Read first, clear the flag after: a wake() that saw the flag still set
        # appended its work before we clear it, so the caller's processing of
        # calls and inbox (which comes after this) sees that work.  Clearing
        # first would let a concurrent wake() send a byte we swallow here while
        # its flag stays set, and every later wake-up would be lost.
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._wake_pending = False

    def run_calls(self) -> None:
        """Run the callbacks posted so far (call_soon, call_soon_threadsafe), in order."""
        calls = self._calls
        while calls:
            callback, args = calls.popleft()
            callback(*args)

    def close(self) -> None:
        """Loop thread, once it is done: release the selector and the wake-up pair."""
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

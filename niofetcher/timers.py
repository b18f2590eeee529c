"""A heap of timers with lazy deletion.

Cancelling a timer only marks it; the heap drops it when it reaches the top.
That keeps cancel O(1) and avoids re-heapifying on every read-timeout reset,
which is the common case: connections push their deadline forward on every
receive, so the loop does not touch the heap at all then, and only when an
old entry fires does the owner look at its real deadline and re-arm.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Container
from typing import Any


class Timer:
    """A scheduled call; ``cancel()`` is O(1)."""

    __slots__ = ("arg", "callback", "when")

    def __init__(self, when: float, callback: Callable[[Any], None], arg: Any) -> None:
        self.when = when
        self.callback: Callable[[Any], None] | None = callback
        self.arg = arg

    def cancel(self) -> None:
        """The callback will not run; the heap drops the entry when it surfaces."""
        self.callback = None
        self.arg = None


class TimerHeap:
    """Timers ordered by deadline, FIFO among equal deadlines."""

    __slots__ = ("_heap", "_held", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._held: list[tuple[float, int, Timer]] = []  # due, but deferred by run_due()
        self._seq = itertools.count()

    def call_at(self, when: float, callback: Callable[[Any], None], arg: Any = None) -> Timer:
        """Call ``callback(arg)`` once ``when`` has passed (the loop's monotonic clock)."""
        timer = Timer(when, callback, arg)
        heapq.heappush(self._heap, (when, next(self._seq), timer))
        return timer

    def next_deadline(self) -> float | None:
        """The earliest live deadline, or None when nothing is scheduled."""
        heap = self._heap
        while heap and heap[0][2].callback is None:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def run_due(self, now: float, deferred: Container[int] = ()) -> None:
        """Call every live timer whose deadline has passed, except those whose ``arg``'s ``id()``
        is in ``deferred``: they are held aside (once each, not popped again by every call) and
        come back, due, at the first call without ``deferred``."""
        heap = self._heap
        if not deferred and self._held:
            for entry in self._held:
                heapq.heappush(heap, entry)
            self._held = []
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            timer = entry[2]
            callback = timer.callback
            if callback is None:
                continue
            if deferred and id(timer.arg) in deferred:
                self._held.append(entry)
                continue
            timer.callback = None
            callback(timer.arg)

    def __len__(self) -> int:
        return len(self._heap) + len(self._held)

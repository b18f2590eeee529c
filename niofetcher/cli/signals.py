"""SIGINT and SIGTERM while a command runs: the first stops it, a later one abandons it."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType

_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None  # as signal.signal() has it


class StopSignals:
    """SIGINT and SIGTERM while a command runs: the first stops it, a later one abandons it.

    SIGTERM is what systemd, Docker and Kubernetes send to stop a service, so
    it means what Ctrl-C means.  A signal within REPEAT_WINDOW seconds of the
    first is the same stop, not a second one: ``timeout``, ``make`` and other
    wrappers forward a terminal's Ctrl-C to their whole process group, so one
    keypress can arrive twice, even after the command has finished its stop
    (then signals are ignored until it exits).  A signal after that prints
    ``abandon`` and leaves at once, with status 130 as a KeyboardInterrupt
    would.  ``stop``
    runs in the main thread, between two bytecodes of whatever it was doing;
    it may raise (KeyboardInterrupt, for a command that unwinds on it).
    Outside the main thread (where Python cannot take signals) it does nothing.
    """

    REPEAT_WINDOW = 1.0
    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, stop: Callable[[], None], abandon: str) -> None:
        self._stop = stop
        self._abandon = abandon
        self._first: float | None = None  # time.monotonic() of the first signal
        self._previous: dict[int, _Handler] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        stopped = self._first is not None
        for signum, handler in self._previous.items():
            # Once stopped, the command only winds up and exits: the repeat of a forwarded keypress,
            # arriving a moment late, must not kill it then (SIGTERM, or SIGINT once the interpreter
            # has put back the default handlers at exit) nor raise a KeyboardInterrupt into its summary.
            signal.signal(signum, signal.SIG_IGN if stopped else handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = now
            self._stop()
        elif now - self._first >= self.REPEAT_WINDOW:
            print(self._abandon, file=sys.stderr, flush=True)
            os._exit(130)

"""When a URL is due again: the crawl's schedule, a small frozen value the crawler asks, never the frontier.

A frontier stores when each URL is due and hands out the URLs that are; it decides nothing about
when.  The crawler asks a schedule value and tells the frontier the answer as a wait in seconds, by
the frontier's own clock, and no store grows an option: :class:`RetrySchedule` after a failed fetch
(``fail(url, error, status, retry_in)``), :class:`RevisitPolicy` after a page is done
(``complete_many(..., visits=...)`` is told each page's :class:`~niofetcher.crawl.frontier.Visit`,
whose ``revisit_in`` the policy gave).

Like urllib3's ``Retry``, a schedule holds no state: the attempts so far come with each question
(a claimed URL carries its own, :attr:`~niofetcher.crawl.frontier.FrontierURL.attempts`), so one
value serves every URL, every thread and every worker of a crawl.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["RetrySchedule", "RevisitPolicy"]

# Exponents past this would overflow a float; the delay is long capped by then.
_MAX_BACKOFF_EXPONENT = 64


def _seconds(name: str, value: object) -> float:
    """``value`` as a float, checked to be a finite number of seconds >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    """How often a URL is fetched before a retryable failure ends it, and the waits between.

    Args:
        max_attempts: fetches of a URL at most: after the ``max_attempts``-th failed one there is
            no retry (the URL ends 'error').
        first: seconds before the first retry; the wait doubles with each further attempt
            (``first * 2**(attempts-1)``) ...
        most: ... up to this.  A server's Retry-After can make the wait longer still.

    Raises:
        TypeError, ValueError: for a bool, a non-number, an attempt count below 1, a negative or
            infinite wait, or ``most`` below ``first`` -- in one line.
    """

    max_attempts: int = 3
    first: float = 1.0
    most: float = 300.0

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise TypeError(f"max_attempts must be an int, not {attempts!r}")
        if attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {attempts!r}")
        object.__setattr__(self, "first", _seconds("first", self.first))
        object.__setattr__(self, "most", _seconds("most", self.most))
        if self.most < self.first:
            raise ValueError(f"most ({self.most!r}) is less than first ({self.first!r})")

    def delay_after(self, attempts: int, retry_after: float | None = None) -> float:
        """Seconds to wait after the ``attempts``-th failed fetch: ``first``, doubling up to
        ``most``, never sooner than a server's Retry-After (``retry_after``, when given and finite)."""
        delay = min(self.first * 2.0 ** min(max(attempts - 1, 0), _MAX_BACKOFF_EXPONENT), self.most)
        if retry_after is not None and math.isfinite(retry_after):
            # A Retry-After date already past gives a negative number: no wait.
            delay = max(delay, retry_after)
        return delay

    def retry_in(self, attempts: int, retry_after: float | None = None) -> float | None:
        """The wait before the next fetch of a URL whose ``attempts``-th fetch failed and may be
        retried (what ``fail()`` is told), None when its attempts are used up: it ends 'error'."""
        if attempts >= self.max_attempts:
            return None
        return self.delay_after(attempts, retry_after)


@dataclass(frozen=True, slots=True)
class RevisitPolicy:
    """When a done URL is due again: a fixed interval, or one that adapts to how often the page changes.

    A done URL is due again ``interval`` after its first fetch.  With ``adaptive``, each later visit
    moves its interval as Nutch's AdaptiveFetchSchedule does, with that class's default rates
    (``db.fetch.schedule.adaptive.inc_rate`` and ``dec_rate``, 0.2 each): times ``1 - DEC_RATE``
    when the page changed since the visit before, times ``1 + INC_RATE`` when it did not, never
    below ``min_interval`` nor above ``max_interval``.  Without it every interval is ``interval``.
    A URL that ended 'error' comes round again after ``max_interval`` (a site that was down may
    be back).

    Like :class:`RetrySchedule` it holds no state: the interval a URL had comes with each question
    (the frontier keeps ``next_due`` and ``fetched_at``; a claimed URL carries their difference,
    :attr:`~niofetcher.crawl.frontier.FrontierURL.interval`).

    Args:
        interval: seconds between visits at first (and always, without ``adaptive``).
        min_interval, max_interval: the bounds of an adaptive interval, ``min_interval <= interval
            <= max_interval``.
        adaptive: whether intervals follow the changes.

    Raises:
        TypeError, ValueError: for a bool or a non-number, a negative or infinite interval, an
            interval of 0, or bounds that do not hold ``interval`` -- in one line.
    """

    interval: float = 86400.0
    min_interval: float = 3600.0
    max_interval: float = 30 * 86400.0
    adaptive: bool = True

    #: Nutch's AdaptiveFetchSchedule defaults: how much an interval grows after a visit that found
    #: the page unchanged, and shrinks after one that found it changed.
    INC_RATE: ClassVar[float] = 0.2
    DEC_RATE: ClassVar[float] = 0.2

    def __post_init__(self) -> None:
        for name in ("interval", "min_interval", "max_interval"):
            value = _seconds(name, getattr(self, name))
            if value == 0:
                raise ValueError(f"{name} must be more than 0 seconds")
            object.__setattr__(self, name, value)
        if not isinstance(self.adaptive, bool):
            raise TypeError(f"adaptive must be a bool, not {self.adaptive!r}")
        if not self.min_interval <= self.interval <= self.max_interval:
            raise ValueError(
                f"the revisit interval ({self.interval!r} s) must be between min_interval "
                f"({self.min_interval!r} s) and max_interval ({self.max_interval!r} s)")

    def revisit_in(self, previous: float | None, changed: bool) -> float:
        """Seconds from a visit to the next: ``interval`` after a first visit (``previous`` None)
        or without ``adaptive``; else ``previous`` (the interval that led to this visit) shrunk
        when the page ``changed``, grown when not, within the bounds."""
        if previous is None or not self.adaptive or not math.isfinite(previous) or previous <= 0:
            return self.interval
        factor = 1.0 - self.DEC_RATE if changed else 1.0 + self.INC_RATE
        return min(max(previous * factor, self.min_interval), self.max_interval)

    def error_revisit_in(self) -> float:
        """Seconds from a fetch that ended 'error' to the next try: ``max_interval``."""
        return self.max_interval

"""When a URL is due again: the crawl's schedule, a small frozen value the crawler asks, never the frontier.

A frontier stores when each URL is due and hands out the URLs that are; it decides nothing about
when.  The crawler asks a schedule value -- today :class:`RetrySchedule`, after a failed fetch --
and tells the frontier the answer as a wait in seconds (``fail(url, error, status, retry_in)``), by
the frontier's own clock.  The same shape takes revisits (issue 27): a revisit policy joins this
module as another frozen value, the crawler asks it when a page is done, and the frontier records
the wait it is told beside the outcome, as it records ``retry_in`` today -- no store grows an option.

Like urllib3's ``Retry``, a schedule holds no state: the attempts so far come with each question
(a claimed URL carries its own, :attr:`~niofetcher.crawl.frontier.FrontierURL.attempts`), so one
value serves every URL, every thread and every worker of a crawl.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RetrySchedule"]

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

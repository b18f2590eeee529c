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
from typing import ClassVar, NamedTuple

__all__ = ["ChangeHistory", "RetrySchedule", "RevisitPolicy", "change_rate", "freshness_gain", "gain_inverse"]

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


def freshness_gain(x: float) -> float:
    """g(x) = 1 - (1 + x) e^(-x): for a page changing at rate L fetched every I = x / L, L times the
    freshness one more fetch per unit of time gains (Cho and Garcia-Molina, "Effective page refresh
    policies for Web crawlers", TODS 2003).  It rises from 0 at x = 0 towards 1."""
    return -math.expm1(-x) - x * math.exp(-x)


def gain_inverse(c: float) -> float:
    """The x > 0 where :func:`freshness_gain` reaches ``c`` (0 < c < 1), by bisection: g is
    increasing, so the bracket [0, hi] doubles until it holds ``c`` and then halves to a float's
    precision."""
    if not 0 < c < 1:
        raise ValueError(f"freshness_gain takes values in (0, 1) only, not {c!r}")
    low, high = 0.0, 1.0
    while freshness_gain(high) < c:
        low, high = high, 2 * high
    while True:
        middle = (low + high) / 2
        if not low < middle < high:
            return middle
        low, high = (middle, high) if freshness_gain(middle) < c else (low, middle)


class ChangeHistory(NamedTuple):
    """What the visits of a URL after its first saw, as its row keeps it: the visits that found it
    changed, and the seconds that led to those visits (``changed_time``) and to the others
    (``unchanged_time``).  A visit's seconds run from the fetch before to its claim."""

    changes: int = 0
    changed_time: float = 0.0
    unchanged_time: float = 0.0

    def after(self, elapsed: float, changed: bool) -> ChangeHistory:
        """This history and one more visit, ``elapsed`` seconds after the fetch before, that found
        the page ``changed`` or not."""
        if changed:
            return self._replace(changes=self.changes + 1, changed_time=self.changed_time + elapsed)
        return self._replace(unchanged_time=self.unchanged_time + elapsed)


def change_rate(history: ChangeHistory, prior: float) -> float:
    """Changes a second of a page, estimated from its ``history``, plus one changed and one unchanged
    visit ``prior`` seconds long each, so that a page seen a few times is not taken for one that
    always or never changes.

    A visit sees only whether a Poisson process of rate L changed the page since the fetch before:
    probability 1 - e^(-L d) for a visit d after it.  Taking each changed visit's d as their mean
    (d = changed_time / changes), the likelihood is highest at
    L = (changes / changed_time) ln(1 + changed_time / unchanged_time); with visits at one regular
    interval it is Cho and Garcia-Molina's estimator ("Estimating frequency of change", TOIT 2003),
    -ln(unchanged visits / visits) / interval.
    """
    changes = history.changes + 1
    changed_time = history.changed_time + prior
    unchanged_time = history.unchanged_time + prior
    return changes / changed_time * math.log1p(changed_time / unchanged_time)


@dataclass(frozen=True, slots=True)
class RevisitPolicy:
    """When a done URL is due again: a fixed interval, or one that follows how often the page changes.

    A done URL is due again ``interval`` after its first fetch.  With ``adaptive``, each later visit
    moves its interval as Nutch's AdaptiveFetchSchedule does, with that class's default rates
    (``db.fetch.schedule.adaptive.inc_rate`` and ``dec_rate``, 0.2 each): times ``1 - DEC_RATE``
    when the page changed since the visit before, times ``1 + INC_RATE`` when it did not.

    With ``estimate_rate`` (which takes the place of ``adaptive``) each later visit estimates the
    page's rate of change L from its :class:`ChangeHistory` (:func:`change_rate`, ``interval`` the
    length of the prior's visits) and gives it the interval of the optimal allocation for freshness
    of Cho and Garcia-Molina: I = x / L where ``freshness_gain(x) = mu * L``, one ``mu`` for every
    page, so that the last fetch of each page gains as much freshness; ``mu`` (:attr:`gain`) is the
    one that gives a page changing once every ``interval`` exactly ``interval``.  A page with
    ``mu * L >= 1`` changes too often for any fetch to gain that much and gets ``max_interval``.
    Such a policy fetches the slow and middling pages more often than Nutch's rule does and the
    fastest ones less (docs/benchmarks.md, "Freshness").

    Either way an interval stays within ``min_interval`` and ``max_interval``; without either every
    interval is ``interval``.  A URL that ended 'error' comes round again after ``max_interval`` (a
    site that was down may be back).

    Like :class:`RetrySchedule` it holds no state: the interval a URL had and its history come with
    each question (the frontier keeps ``next_due``, ``fetched_at`` and the history's sums; a claimed
    URL carries them, :class:`~niofetcher.crawl.frontier.FrontierURL`).

    Args:
        interval: seconds between visits at first (and always, without ``adaptive`` or
            ``estimate_rate``).
        min_interval, max_interval: the bounds of an interval that moves, ``min_interval <=
            interval <= max_interval``.
        adaptive: whether intervals follow the changes by Nutch's rule.
        estimate_rate: whether intervals follow each page's estimated rate of change.

    Raises:
        TypeError, ValueError: for a bool or a non-number, a negative or infinite interval, an
            interval of 0, or bounds that do not hold ``interval`` -- in one line.
    """

    interval: float = 86400.0
    min_interval: float = 3600.0
    max_interval: float = 30 * 86400.0
    adaptive: bool = True
    estimate_rate: bool = False

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
        for name in ("adaptive", "estimate_rate"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, not {getattr(self, name)!r}")
        if not self.min_interval <= self.interval <= self.max_interval:
            raise ValueError(
                f"the revisit interval ({self.interval!r} s) must be between min_interval "
                f"({self.min_interval!r} s) and max_interval ({self.max_interval!r} s)")

    @property
    def gain(self) -> float:
        """``mu`` of ``estimate_rate``: the freshness the last fetch of every page gains, per fetch
        a second, ``freshness_gain(1) * interval``."""
        return freshness_gain(1.0) * self.interval

    def revisit_in(self, previous: float | None, changed: bool, history: ChangeHistory | None = None) -> float:
        """Seconds from a visit to the next.  With ``estimate_rate``, the interval of the page's rate
        estimated from its ``history`` (this visit included; None for a first visit: ``interval``),
        :meth:`interval_for`.  Otherwise ``interval`` after a first visit (``previous`` None) or
        without ``adaptive``; else ``previous`` (the interval that led to this visit) shrunk when
        the page ``changed``, grown when not, within the bounds."""
        if self.estimate_rate:
            return self.interval if history is None else self.interval_for(change_rate(history, self.interval))
        if previous is None or not self.adaptive or not math.isfinite(previous) or previous <= 0:
            return self.interval
        factor = 1.0 - self.DEC_RATE if changed else 1.0 + self.INC_RATE
        return self._bounded(previous * factor)

    def interval_for(self, rate: float) -> float:
        """The optimal allocation's interval of a page changing ``rate`` times a second (> 0), within
        the bounds: ``x / rate`` where ``freshness_gain(x) = gain * rate``, or ``max_interval`` when
        ``gain * rate >= 1``."""
        target = self.gain * rate
        if target >= 1.0:
            return self.max_interval
        return self._bounded(gain_inverse(target) / rate)

    def _bounded(self, interval: float) -> float:
        return min(max(interval, self.min_interval), self.max_interval)

    def error_revisit_in(self) -> float:
        """Seconds from a fetch that ended 'error' to the next try: ``max_interval``."""
        return self.max_interval

"""Throttle: per-host delays that follow the server's latency and its 429/503 answers.

A host's throttled delay moves toward ``latency / target_concurrency`` (halfway
at each answer, so one slow answer does not set it alone) while answers are
good.  A backoff status (429, 503) begins an *episode*: the delay that was too
short (the larger of the delay and the spacing the requests actually had while
more of them waited, at most half max_delay) is remembered and the delay set
to twice it (four times while backoffs come within a few answers of each
other, as when a limit is first sought), and the whole host pauses until its
``Retry-After`` has passed; the answers to requests sent before the episode
began belong to it and back off no further (their Retry-After still holds),
as TCP halves its window once per loss.  Later good answers bring the delay
down in small steps (5% an answer), never below 1.25 times the delay that was
too short -- which itself is forgotten slowly (1% a hundred answers), so that a
limit that was lifted is found again.  Halving toward the latency instead, a
server that answers in a millisecond would be hammered into its limit again
within a few answers (benchmarks/throttle.py).  It is one floor among the
others of a host's delay (``host_delay``, a robots.txt Crawl-delay set through
``set_host_delay``): the host table starts requests at the largest of them.  The arithmetic is here; the
host table (``pool``) keeps each host's figures and the engine feeds it.
"""

from __future__ import annotations

import datetime
import email.utils
import math
from dataclasses import dataclass

#: The longest a Retry-After pauses a host, whatever it says (DESIGN.md: "up to an hour").
MAX_PAUSE = 3600.0
_PAUSE_DIGITS = len(str(int(MAX_PAUSE)))

# The least delay a backoff takes as too short: doubling nothing would leave it at 0.
LEAST_TOO_FAST = 0.001
STEP_DOWN = 0.05  # after a backoff, a good answer lowers the delay by this share ...
MARGIN = 1.25  # ... down to this many times the delay that was too short ...
FORGET = 0.0001  # ... which shrinks by this share at each good answer
# A backoff within this many answers of the last one: the limit is still far off, so x 4
QUICK_REPEAT = 8


@dataclass(frozen=True)
class Throttle:
    """Politeness that listens (FetcherConfig.throttle); times in seconds.  Invalid values raise ValueError.

    Attributes:
        target_concurrency: how many requests the server should be serving for us at once, on
            average: the delay goes toward ``latency / target_concurrency``.
        min_delay: the throttled delay's floor.
        max_delay: its ceiling; a longer Retry-After still pauses the host that long (up to an hour).
        backoff_statuses: the statuses that say "slow down".
    """

    target_concurrency: float = 1.0
    min_delay: float = 0.0
    max_delay: float = 60.0
    backoff_statuses: tuple[int, ...] = (429, 503)

    def __post_init__(self) -> None:
        if not _finite_number(self.target_concurrency) or self.target_concurrency <= 0:
            raise ValueError(f"target_concurrency must be a positive number, not {self.target_concurrency!r}")
        for name in ("min_delay", "max_delay"):
            value = getattr(self, name)
            if not _finite_number(value) or value < 0:
                raise ValueError(f"{name} must be a non-negative number of seconds, not {value!r}")
        if self.min_delay > self.max_delay:
            raise ValueError(f"min_delay {self.min_delay!r} is above max_delay {self.max_delay!r}")
        statuses = self.backoff_statuses
        if (not isinstance(statuses, tuple)
                or not all(type(status) is int and 100 <= status <= 599 for status in statuses)):
            raise ValueError(f"backoff_statuses must be a tuple of HTTP status codes, not {statuses!r}")

    def eased(self, delay: float, too_fast: float, latency: float, good: bool) -> tuple[float, float]:
        """The delay after an answer that took ``latency`` seconds, and the delay a backoff found
        too short (``too_fast``, 0 before any) as it is now (see the module docstring).

        An answer that is not good (a 5xx not among the backoff statuses, a failure) may raise the
        delay toward a slow server's latency but never lowers it.
        """
        target = latency / self.target_concurrency
        if too_fast:
            if good:
                too_fast *= 1 - FORGET
            target = max(target, too_fast * MARGIN)
            eased = max(target, delay * (1 - STEP_DOWN)) if delay > target else (delay + target) / 2
        else:
            eased = (delay + target) / 2
        if not good and eased < delay:
            eased = delay
        return min(max(eased, self.min_delay), self.max_delay), too_fast

    def backed_off(self, delay: float, spacing: float, good_since: int) -> tuple[float, float]:
        """The delay after a backoff status that begins an episode, and the delay found too short:
        the larger of ``delay`` and the ``spacing`` the host's requests had (at most half
        max_delay), doubled -- four times when the last backoff was at most QUICK_REPEAT good
        answers ago, as while the limit is first sought -- within [min_delay, max_delay]."""
        # At most half max_delay: a spacing of an hour (a Retry-After's pause) would otherwise make
        # a floor of 1.25 hours, and hold the delay at max_delay for as long as FORGET takes.
        too_fast = min(max(delay, spacing, LEAST_TOO_FAST), self.max_delay / 2)
        factor = 4 if good_since <= QUICK_REPEAT else 2
        return min(max(factor * too_fast, self.min_delay), self.max_delay), too_fast


def retry_after(value: str | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` value asks to wait from ``now`` (wall-clock time), at most MAX_PAUSE.

    RFC 9110 10.2.3: a number of seconds or an HTTP-date.  A date in the past is 0; a negative
    number, a fraction, digits other than ASCII's, garbage or nothing is None (the backoff delay
    alone applies).  It never raises: the value is the server's.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # str.isdigit alone takes '²', which int() refuses
        # int() of a few thousand digits raises, and float() of one above 1e308: every number
        # longer than MAX_PAUSE's is MAX_PAUSE anyway.
        digits = text.lstrip("0")
        return MAX_PAUSE if len(digits) > _PAUSE_DIGITS else min(float(digits or 0), MAX_PAUSE)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000", a zone not known: HTTP-dates are GMT
        when = when.replace(tzinfo=datetime.timezone.utc)
    return min(max(when.timestamp() - now, 0.0), MAX_PAUSE)


def _finite_number(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]

"""The crawl's retry schedule (crawl/schedule.py), which the frontier no longer holds (issue 26).

- ``RetrySchedule.delay_after``: ``first``, doubling, capped at ``most``; a Retry-After beats the cap.
- ``retry_in``: the wait while attempts are left, None once they are used up.
- Its values are checked at the edge, in one line; ``CrawlConfig.retries`` is built from
  ``max_attempts`` and ``retry_delay``.
"""

from __future__ import annotations

import dataclasses

import pytest

from niofetcher.crawl import CrawlConfig
from niofetcher.crawl.schedule import RetrySchedule


def test_delays_double_up_to_the_cap_and_a_retry_after_wins() -> None:
    schedule = RetrySchedule(max_attempts=7, first=2.0, most=20.0)
    assert [schedule.delay_after(n) for n in range(1, 8)] == [2.0, 4.0, 8.0, 16.0, 20.0, 20.0, 20.0]
    assert schedule.delay_after(1, 120.0) == 120.0  # a server's Retry-After beats our backoff
    assert schedule.delay_after(5, 1000.0) == 1000.0  # and the cap
    assert schedule.delay_after(3, 0.25) == 8.0  # but never shortens it
    assert schedule.delay_after(1, -5.0) == 2.0  # a Retry-After date already past: no wait of its own
    assert schedule.delay_after(1, float("nan")) == 2.0
    assert schedule.delay_after(10_000) == 20.0  # no overflow


def test_retry_in_is_none_once_the_attempts_are_used_up() -> None:
    schedule = RetrySchedule(max_attempts=3)
    assert [schedule.retry_in(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, None, None]
    assert schedule.retry_in(1, 30.0) == 30.0
    assert RetrySchedule(max_attempts=1).retry_in(1) is None  # one fetch, no retry


def test_values_are_checked_in_one_line() -> None:
    bad: tuple[dict[str, object], ...] = ({"max_attempts": 0}, {"first": -1.0}, {"first": float("nan")}, {"most": float("inf")},
                                          {"first": 2.0, "most": 1.0})
    for kwargs in bad:
        with pytest.raises(ValueError) as info:
            RetrySchedule(**kwargs)  # type: ignore[arg-type]
        assert "\n" not in str(info.value)
    wrong: tuple[dict[str, object], ...] = ({"max_attempts": True}, {"max_attempts": 2.0}, {"first": "1"},
                                            {"most": True})
    for kwargs in wrong:
        with pytest.raises(TypeError):
            RetrySchedule(**kwargs)  # type: ignore[arg-type]
    schedule = RetrySchedule(first=1, most=10)
    assert (type(schedule.first), type(schedule.most)) == (float, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.first = 5.0  # type: ignore[misc]


def test_a_crawl_config_gives_its_schedule() -> None:
    config = CrawlConfig(seeds=["http://a.test/"], max_attempts=5, retry_delay=0.5)
    assert config.retries == RetrySchedule(max_attempts=5, first=0.5, most=300.0)
    assert CrawlConfig(seeds=["http://a.test/"]).retries == RetrySchedule()

"""Revisits that follow each page's estimated rate of change: ``RevisitPolicy(estimate_rate=True)``.

- the arithmetic against values worked by hand: Cho and Garcia-Molina's freshness gain g and its
  inverse, the policy's gain mu, the estimator on made-up sums (and its regular-interval case),
  the prior, the bounds, a page that changes too often to keep fresh;
- real crawls of a loopback site (tests/test_revisits.py's ``KeptSite``) on SQLite and on
  PostgreSQL: a page that changes at every visit and one that never does each keep the seconds
  that led to their visits, as long as the fetches were apart, and get the intervals the rule
  gives for them -- the changing one the shorter;
- the command line: ``--estimate-rate`` and the options it goes with.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from test_cli_crawl import crawl as cli_crawl
from test_revisits import KeptSite, later, links, site_of

from niofetcher.crawl import CrawlConfig, Crawler
from niofetcher.crawl.frontier import open_frontier
from niofetcher.crawl.schedule import ChangeHistory, RevisitPolicy, change_rate, freshness_gain, gain_inverse

pytest_plugins = ["pg_cluster"]
pytestmark = pytest.mark.timeout(60)

POLICY = RevisitPolicy(interval=0.05, min_interval=0.01, max_interval=1.0, estimate_rate=True)


# -- the arithmetic -----------------------------------------------------------------


def test_the_freshness_gain_and_its_inverse_against_values_worked_by_hand() -> None:
    assert freshness_gain(0.0) == 0.0
    assert freshness_gain(1.0) == pytest.approx(1 - 2 / math.e)  # 0.264
    assert freshness_gain(2.0) == pytest.approx(1 - 3 / math.e**2)  # 0.594
    assert freshness_gain(50.0) == pytest.approx(1.0)
    for x in (0.01, 0.5, 1.0, 3.0, 20.0):
        assert gain_inverse(freshness_gain(x)) == pytest.approx(x, rel=1e-9)
    for outside in (0.0, 1.0, -0.5, 2.0):
        with pytest.raises(ValueError):
            gain_inverse(outside)


def test_the_estimator_on_made_up_sums() -> None:
    # (changes / changed_time) ln(1 + changed_time / unchanged_time), the prior added: one changed
    # and one unchanged visit of 10 s.
    assert change_rate(ChangeHistory(3, 30.0, 70.0), 10.0) == pytest.approx(4 / 40 * math.log(1 + 40 / 80))
    # Visits at one interval I: Cho and Garcia-Molina's -ln(unchanged / visits) / I, the prior as
    # one visit of each kind more: 10 visits of 5 s, 4 changed -> ln(12 / 7) / 5.
    regular = ChangeHistory().after(5.0, True)
    for changed in (True, True, True, False, False, False, False, False, False):
        regular = regular.after(5.0, changed)
    assert regular == ChangeHistory(4, 20.0, 30.0)
    assert change_rate(regular, 5.0) == pytest.approx(math.log(12 / 7) / 5)
    # The prior alone (no visit after the first): ln 2 / prior.
    assert change_rate(ChangeHistory(), 10.0) == pytest.approx(math.log(2) / 10)
    # A page that always changed and one that never did get finite rates, thanks to the prior.
    assert change_rate(ChangeHistory(20, 200.0, 0.0), 10.0) == pytest.approx(21 / 210 * math.log(1 + 210 / 10))
    assert change_rate(ChangeHistory(0, 0.0, 200.0), 10.0) == pytest.approx(1 / 10 * math.log(1 + 10 / 210))


def test_the_optimal_allocation_interval_within_the_bounds() -> None:
    policy = RevisitPolicy(interval=100.0, min_interval=10.0, max_interval=1000.0, estimate_rate=True)
    assert policy.gain == pytest.approx((1 - 2 / math.e) * 100.0)
    assert policy.interval_for(1 / 100.0) == pytest.approx(100.0)  # a change per interval: the interval
    # A page changing every 200 s: g(x) = mu / 200 = 0.132 -> x = 0.631, I = 126.1 s.
    slower = gain_inverse((1 - 2 / math.e) / 2)
    assert slower == pytest.approx(0.6307, abs=1e-4)
    assert policy.interval_for(1 / 200.0) == pytest.approx(slower * 200.0)
    # Faster: every 50 s, g(x) = 0.528 -> x = 1.803, I = 90.2 s: shorter, not in proportion.
    assert policy.interval_for(1 / 50.0) == pytest.approx(gain_inverse(2 * (1 - 2 / math.e)) * 50.0)
    assert 50.0 < policy.interval_for(1 / 50.0) < 100.0
    # Too fast to keep fresh (mu * rate >= 1: every 26.4 s or more often): max_interval.
    assert policy.interval_for(1 / 26.0) == 1000.0 and policy.interval_for(1.0) == 1000.0
    # The bounds: a page all but still would get more than max_interval; none gets less than
    # about 0.8 interval here, so the lower bound shows with a tighter policy.
    assert policy.interval_for(1e-9) == 1000.0
    assert policy.interval_for(1 / 1e5) == 1000.0
    assert policy.interval_for(1 / 26.5) > 10.0
    tight = RevisitPolicy(interval=100.0, min_interval=95.0, max_interval=105.0, estimate_rate=True)
    assert tight.interval_for(1 / 50.0) == 95.0 and tight.interval_for(1 / 200.0) == 105.0


def test_revisit_in_with_estimate_rate_follows_the_history_not_nutchs_rule() -> None:
    policy = RevisitPolicy(interval=100.0, min_interval=10.0, max_interval=1000.0, estimate_rate=True)
    assert policy.adaptive  # the default, which estimate_rate takes the place of
    assert policy.revisit_in(None, True) == 100.0  # a first visit: no history
    history = ChangeHistory(2, 150.0, 300.0)
    expected = policy.interval_for(change_rate(history, 100.0))
    assert policy.revisit_in(100.0, True, history) == pytest.approx(expected)
    assert policy.revisit_in(100.0, False, history) == pytest.approx(expected)  # the history says it all
    assert expected != pytest.approx(80.0) and expected != pytest.approx(120.0)
    # Without estimate_rate the history is not asked.
    nutch = RevisitPolicy(interval=100.0, min_interval=10.0, max_interval=1000.0)
    assert nutch.revisit_in(100.0, True, history) == pytest.approx(80.0)
    with pytest.raises(TypeError):
        RevisitPolicy(estimate_rate=1)  # type: ignore[arg-type]


# -- real crawls ----------------------------------------------------------------------


def stored_times(db: Path) -> dict[str, tuple[Any, ...]]:
    """path -> (visits, changes, changed_time, unchanged_time, fetched_at, interval) as the file keeps them."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        found = conn.execute("SELECT url, visits, changes, changed_time, unchanged_time, fetched_at,"
                             " next_due - fetched_at FROM urls")
        return {"/" + url.split("/", 3)[3]: tuple(row) for url, *row in found}


def crawl_and_check(site: KeptSite, run: Any, read: Any) -> None:
    """Five runs, each a little later than the one before, /a changed before each, / and /b never:
    each row's sums grow by the seconds between its fetches (no less than the pause, no more than
    the fetches were apart), and its interval is the rule's for the sums it keeps."""
    run()
    before = read()
    for turn in range(4):
        later()
        site.change("/a", links("/", f"/a?{turn}"))
        site.pages[f"/a?{turn}"] = links()
        run()
        after = read()
        for path in ("/a", "/b"):
            visits, changes, changed_time, unchanged_time, fetched_at, interval = after[path]
            _, _, changed_before, unchanged_before, fetched_before, _ = before[path]
            grew = (changed_time - changed_before) + (unchanged_time - unchanged_before)
            assert 0.1 < grew <= fetched_at - fetched_before + 1e-6, (path, turn)
            assert visits == turn + 2 and changes == (turn + 1 if path == "/a" else 0)
            if path == "/a":
                assert unchanged_time == 0.0 and changed_time > 0.0
            else:
                assert changed_time == 0.0 and unchanged_time > 0.0
            history = ChangeHistory(changes, changed_time, unchanged_time)
            assert interval == pytest.approx(POLICY.revisit_in(1.0, path == "/a", history), abs=1e-6), (path, turn)
        assert after["/a"][5] < after["/b"][5]  # the page that changes comes round sooner
        before = after


def test_a_changing_page_and_a_still_one_get_the_intervals_of_their_rates(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    with site_of().running() as site:
        config = CrawlConfig(seeds=[site.base_url], db_path=str(db), parse_mode="thread", revisit=POLICY)
        crawl_and_check(site, lambda: Crawler(config).run(), lambda: stored_times(db))


def test_on_postgresql_the_same_intervals(postgres_dsn: str) -> None:
    with site_of().running() as site:
        config = CrawlConfig(seeds=[site.base_url], frontier=postgres_dsn, parse_mode="thread", revisit=POLICY,
                             crawl_name=f"estimate_{int(time.time() * 1000)}")

        def read() -> dict[str, tuple[Any, ...]]:
            with contextlib.closing(open_frontier(postgres_dsn, crawl=config.crawl_name)) as frontier:
                found = {}
                for path in ("/", "/a", "/b"):
                    row = frontier.lookup(site.base_url + path.lstrip("/"))
                    assert row is not None and row.fetched_at is not None and row.next_due is not None
                    found[path] = (row.visits, row.changes, row.changed_time, row.unchanged_time, row.fetched_at,
                                   row.next_due - row.fetched_at)
                return found

        crawl_and_check(site, lambda: Crawler(config).run(), read)


# -- the command line -------------------------------------------------------------


def test_crawl_estimate_rate_on_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    with site_of().running() as site:
        options = ("--revisit", "0.05s", "--min-revisit", "0.01s", "--max-revisit", "1s", "--estimate-rate")
        assert cli_crawl(site.base_url, db, *options).returncode == 0
        later()
        second = cli_crawl(site.base_url, db, *options)
        assert second.returncode == 0, second.stderr
    kept = stored_times(db)["/b"]
    visits, changes, changed_time, unchanged_time, _, interval = kept
    assert (visits, changes, changed_time) == (2, 0, 0.0) and unchanged_time > 0.1
    assert interval == pytest.approx(POLICY.revisit_in(1.0, False, ChangeHistory(0, 0.0, unchanged_time)), abs=1e-6)
    assert interval != pytest.approx(0.06)  # not Nutch's x1.2


@pytest.mark.parametrize(("options", "says"), [
    (("--estimate-rate",), "--estimate-rate goes with --revisit"),
    (("--revisit", "1h", "--estimate-rate", "--fixed-revisit"), "--fixed-revisit and --estimate-rate exclude"),
])
def test_a_bad_estimate_rate_option_is_a_one_line_usage_error(tmp_path: Path, options: tuple[str, ...],
                                                              says: str) -> None:
    done = cli_crawl("http://127.0.0.1:9/", tmp_path / "crawl.db", *options)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "crawl.db").exists()

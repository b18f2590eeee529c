"""Keeping a crawl fresh (issue 27, item 5): fixed revisit intervals against adaptive ones and
ones that follow each page's estimated rate, at one request budget, measured against a site whose
every change is known, beside the theory.

    python benchmarks/freshness.py                      # 200 pages, 28 simulated days of 2 s, 5 policies: ~5 minutes
    python benchmarks/freshness.py --quick              # a smoke run of a few seconds
    python benchmarks/freshness.py --json benchmarks/results/freshness.json

The site is ``niofetcher.testing.ChangingSite`` on 127.0.0.1 (a thread of this process): ``--pages``
pages, each changing as a Poisson process with a rate drawn log-uniform over ``--rates`` (changes a
simulated day), every change time drawn up front from ``--seed``; a simulated day lasts
``--seconds-per-day`` real seconds.  Each policy crawls a fresh site of the same seed (the same
changes, at the same moments after its start) from the seed page ``/``, which links every page,
for ``--days`` simulated days:

- ``adaptive``: ``RevisitPolicy`` with its defaults scaled to the simulated clock (interval 1 day,
  between 1 hour and 30 days, Nutch's rates), run first;
- ``fixed``: one interval for every page, chosen so that it makes as many requests as
  ``adaptive`` made over the measured window on paper: ``pages x window / adaptive's requests``;
- ``fixed-matched``: ``fixed``'s interval scaled by the requests ``fixed`` really made over
  adaptive's, so that it makes as many, measured (each fetch comes a little after it falls due,
  and ``fixed`` makes fewer than on paper).  The goal "adaptive above fixed at the same budget"
  is judged on this one.
- ``estimate-rate``: ``RevisitPolicy(estimate_rate=True)``, each page's rate estimated from its
  visits and given the optimal allocation's interval; its interval (which sets its gain a fetch,
  and so its budget) is the one whose gain is the optimal allocation's at adaptive's budget, its
  bounds adaptive's;
- ``fixed-matched-estimate``: ``fixed-matched``'s interval scaled to ``estimate-rate``'s requests,
  the fixed interval it is judged against.

The crawl keeps running (:func:`keep_crawl`, ``CrawlConfig(keep_running=True)``): one run that
sleeps until the next URL falls due and fetches it, stopped when the span ends.  robots.txt is
off: it is not a page that changes.

Reported per policy, over the window after ``--warmup`` simulated days (the adaptive intervals
start at 1 day and move 20 % a visit): average freshness (the share of time a stored copy equals
the live page, time-averaged over the pages: a copy is fresh from its fetch until the page's next
change, by the site's log and the drawn change times), average age (how long a stale copy has been
stale, 0 while fresh), the page requests and what they cost the server in bytes, and the share of
the bytes of unchanged pages saved by 304s (a request finding the version it fetched before, whose
full size is the mean size of that page's 200s); then the theory of Cho and Garcia-Molina
("Effective page refresh policies for Web crawlers", TODS 2003) at the same budget: the expected
freshness of a page of rate L fetched every I is (1 - e^(-L I)) / (L I); the uniform allocation
gives every page the same I, the proportional one fetches each page as often as its rate says,
the optimal one solves the Lagrange condition (:func:`optimal_rates`).
Last, where each policy spends its requests, by fifths of the pages ordered by rate.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import datetime as _dt
import itertools
import json
import math
import os
import platform
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from niofetcher.crawl import CrawlConfig, Crawler, CrawlSummary
from niofetcher.crawl.schedule import RevisitPolicy, freshness_gain, gain_inverse
from niofetcher.testing import ChangingSite, LoggedRequest

#: The issue's goals: adaptive within this share of the optimal allocation's freshness ...
OPTIMAL_SHARE = 0.9
#: ... and the bytes of unchanged pages cut by 304s by at least this share.
SAVED_SHARE = 0.9
BANDS = 5


# -- the theory (Cho and Garcia-Molina) --------------------------------------------------------------


def expected_freshness(rate: float, interval: float) -> float:
    """The time-averaged freshness of a page changing as a Poisson process of ``rate`` and fetched
    every ``interval``: (1 - e^(-rate interval)) / (rate interval); 0 for a page never fetched."""
    if math.isinf(interval):
        return 0.0
    x = rate * interval
    return 1.0 if x == 0 else -math.expm1(-x) / x


def _bisect(function: Callable[[float], float], low: float, high: float, target: float, steps: int = 100) -> float:
    """The x in [low, high] where an increasing ``function`` reaches ``target``, by bisection."""
    for _ in range(steps):
        middle = (low + high) / 2
        low, high = (middle, high) if function(middle) < target else (low, middle)
    return (low + high) / 2


def allocation(rates: Sequence[float], mu: float) -> list[float]:
    """Fetches a day of each page at the Lagrange condition of gain ``mu``: each page fetched ``f``
    times a day gains ``mu`` freshness per extra fetch, ``freshness_gain(x) / rate = mu`` with
    ``x = rate / f``; a page with ``mu * rate >= 1`` gains less than ``mu`` even from its first
    fetch and gets none (it changes too often to be worth it)."""
    return [0.0 if mu * rate >= 1.0 else rate / gain_inverse(mu * rate) for rate in rates]


def optimal_gain(rates: Sequence[float], budget: float) -> float:
    """The ``mu`` of :func:`allocation` whose fetches add up to ``budget`` a day, by bisection on
    its logarithm (the total falls as ``mu`` grows)."""
    log_mu = _bisect(lambda m: -sum(allocation(rates, math.exp(m))), -60.0, math.log(1.0 / min(rates)), -budget, 80)
    return math.exp(log_mu)


def optimal_rates(rates: Sequence[float], budget: float) -> list[float]:
    """Fetches a day of each page that maximise the mean expected freshness with ``budget``
    fetches a day in all: :func:`allocation` at :func:`optimal_gain`."""
    if budget <= 0:
        return [0.0 for _ in rates]
    return allocation(rates, optimal_gain(rates, budget))


def mean_freshness(rates: Sequence[float], per_day: Sequence[float]) -> float:
    """The mean expected freshness of pages of these ``rates`` fetched ``per_day`` times a day each."""
    return sum(expected_freshness(rate, 1.0 / f if f > 0 else math.inf) for rate, f in zip(rates, per_day)) / len(rates)


# -- the crawl -----------------------------------------------------------------------------------------


def keep_crawl(config: CrawlConfig, until: float) -> CrawlSummary:
    """Keep a crawl running (``CrawlConfig.keep_running``: it sleeps until the next URL falls due and
    fetches it) until unix time ``until``, then stop it as Ctrl-C would; its summary."""
    crawler = Crawler(dataclasses.replace(config, keep_running=True))
    timer = threading.Timer(max(0.0, until - time.time()), crawler.stop)
    timer.start()
    try:
        return crawler.run()
    finally:
        timer.cancel()


def crawl_site(args: argparse.Namespace, policy: RevisitPolicy) -> tuple[ChangingSite, list[LoggedRequest], int]:
    """A fresh site of the seed, crawled under ``policy`` for ``args.days``: the site, its log and
    how many pages the crawler's summary says it finished."""
    site = ChangingSite(pages=args.pages, rate_range=args.rates, days=args.days, seconds_per_day=args.seconds_per_day,
                        seed=args.seed, page_size=args.page_size)
    with site, tempfile.TemporaryDirectory(prefix="niofetcher-freshness-") as folder:
        config = CrawlConfig(seeds=[site.base_url], db_path=os.path.join(folder, "crawl.sqlite"), parse_mode="thread",
                             parse_workers=1, obey_robots=False, revisit=policy)
        summary = keep_crawl(config, time.time() + args.days * args.seconds_per_day)
        return site, site.log(), summary.pages


# -- what the log says ------------------------------------------------------------------------------


def copy_freshness(fetches: Sequence[float], changes: Sequence[float], start: float, end: float) -> tuple[float, float]:
    """``(fresh, age)`` of one page's stored copy over the days [start, end): the days it equalled
    the live page, and the integral of its age (days since the change that made it stale; day 0
    before its first fetch).  A copy fetched at ``f`` is fresh until the first change after ``f``."""
    fresh = age = 0.0
    held = [-math.inf, *fetches, math.inf]  # before the first fetch nothing is held
    for fetched, next_fetch in itertools.pairwise(held):
        low, high = max(fetched, start), min(next_fetch, end)
        if low >= high:
            continue
        if math.isinf(fetched):
            age += (high * high - low * low) / 2
            continue
        following = bisect.bisect_right(changes, fetched)
        stale_from = changes[following] if following < len(changes) else math.inf
        fresh += max(0.0, min(stale_from, high) - low)
        if stale_from < high:
            since = max(stale_from, low)
            age += ((high - stale_from) ** 2 - (since - stale_from) ** 2) / 2
    return fresh, age


def measure(site: ChangingSite, log: Sequence[LoggedRequest], crawler_pages: int, start: float,
            end: float) -> dict[str, Any]:
    """A policy's figures over the window [start, end) of simulated days, from the site's log."""
    index = {path: i for i, path in enumerate(site.paths)}
    fetches: dict[int, list[float]] = defaultdict(list)
    full_sizes: dict[int, list[int]] = defaultdict(list)
    requests = sent = unchanged = unchanged_304 = unchanged_sent = 0
    unchanged_full = 0.0
    last_version: dict[int, int] = {}
    for entry in log:
        page = index.get(entry.path)
        if page is None or entry.version is None:
            continue
        if entry.status == 200:
            full_sizes[page].append(entry.sent)
    mean_full = {page: sum(sizes) / len(sizes) for page, sizes in full_sizes.items()}
    for entry in log:
        page = index.get(entry.path)
        if page is None or entry.version is None:
            continue
        fetches[page].append(entry.day)
        repeated = last_version.get(page) == entry.version
        last_version[page] = entry.version
        if not start <= entry.day < end:
            continue
        requests += 1
        sent += entry.sent
        if repeated:
            unchanged += 1
            unchanged_304 += entry.status == 304
            unchanged_sent += entry.sent
            unchanged_full += mean_full.get(page, entry.sent)
    window = end - start
    pages = len(site.rates)
    fresh = age = 0.0
    per_page: list[tuple[float, int]] = []  # (freshness, requests in the window) of each page
    for page, changes in enumerate(site.changes):
        page_fresh, page_age = copy_freshness(fetches[page], changes, start, end)
        fresh += page_fresh
        age += page_age
        per_page.append((page_fresh / window, sum(start <= day < end for day in fetches[page])))
    return {
        "freshness": fresh / (pages * window), "age_hours": 24 * age / (pages * window),
        "requests": requests, "requests_per_day": requests / window, "bytes_sent": sent,
        "unchanged": unchanged, "unchanged_304": unchanged_304,
        "unchanged_bytes_sent": unchanged_sent, "unchanged_bytes_full": round(unchanged_full),
        "bytes_saved_share": 1 - unchanged_sent / unchanged_full if unchanged_full else 0.0,
        "site_requests": len(log), "crawler_requests": crawler_pages,
        "seed_requests": sum(entry.path == "/" for entry in log),
        "per_page": per_page,
    }


def bands(rates: Sequence[float], window: float, figures: dict[str, dict[str, Any]],
          optimal: Sequence[float]) -> list[dict[str, Any]]:
    """Fifths of the pages by rate: their lowest and highest rate, and per policy the requests a
    page a day and the freshness; the optimal allocation's the same, by the theory."""
    order = sorted(range(len(rates)), key=rates.__getitem__)
    rows = []
    for band in range(BANDS):
        members = order[band * len(order) // BANDS:(band + 1) * len(order) // BANDS]
        row: dict[str, Any] = {"rate_low": rates[members[0]], "rate_high": rates[members[-1]],
                               "pages": len(members)}
        for name, policy in figures.items():
            per_page = policy["per_page"]
            row[name] = {"per_page_day": sum(per_page[i][1] for i in members) / (len(members) * window),
                         "freshness": sum(per_page[i][0] for i in members) / len(members)}
        row["optimal"] = {"per_page_day": sum(optimal[i] for i in members) / len(members),
                          "freshness": mean_freshness([rates[i] for i in members], [optimal[i] for i in members])}
        rows.append(row)
    return rows


# -- the command ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=200, help="pages of the site (default 200)")
    parser.add_argument("--rates", default="0.1,10", help="lowest,highest changes a simulated day (default 0.1,10)")
    parser.add_argument("--days", type=float, default=28.0, help="simulated days each policy crawls (default 28)")
    parser.add_argument("--warmup", type=float, default=12.0, help="simulated days left out of the figures (default 12)")
    parser.add_argument("--seconds-per-day", type=float, default=2.0, help="real seconds a simulated day lasts (default 2)")
    parser.add_argument("--page-size", type=int, default=8192, help="bytes of a page's body (default 8192)")
    parser.add_argument("--seed", type=int, default=27, help="seed of the rates and change times (default 27)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds: 30 pages, 4 days of 0.5 s")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = parser.parse_args(argv)
    if args.quick:
        args.pages, args.days, args.warmup, args.seconds_per_day = 30, 4.0, 1.5, 0.5
    low, _, high = args.rates.partition(",")
    args.rates = (float(low), float(high or low))
    if not 0 <= args.warmup < args.days:
        parser.error(f"--warmup must be within [0, --days), not {args.warmup!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    day = args.seconds_per_day
    start, end = args.warmup, args.days
    window = end - start
    adaptive = RevisitPolicy(interval=day, min_interval=day / 24, max_interval=30 * day, adaptive=True)
    site, log, crawled = crawl_site(args, adaptive)
    figures = {"adaptive": measure(site, log, crawled, start, end)}
    budget = figures["adaptive"]["requests_per_day"]
    intervals = {"fixed": args.pages / budget}
    site, log, crawled = crawl_site(args, _fixed(intervals["fixed"] * day))
    figures["fixed"] = measure(site, log, crawled, start, end)
    # A fetch comes a little after it falls due (a run's start, the URLs ahead of it): the fixed
    # interval that made adaptive's count of requests on paper made fewer.  Scaled by the count it
    # made, it makes about as many, measured.
    intervals["fixed-matched"] = intervals["fixed"] * figures["fixed"]["requests"] / figures["adaptive"]["requests"]
    site, log, crawled = crawl_site(args, _fixed(intervals["fixed-matched"] * day))
    figures["fixed-matched"] = measure(site, log, crawled, start, end)
    rates = site.rates
    # The estimating policy's one setting, its interval, gives the gain every page's last fetch
    # makes: that of the optimal allocation at adaptive's budget, for a comparable budget.
    mu = optimal_gain(rates, budget)
    intervals["estimate-rate"] = mu / freshness_gain(1.0)
    estimating = RevisitPolicy(interval=intervals["estimate-rate"] * day, min_interval=day / 24, max_interval=30 * day,
                               estimate_rate=True)
    site, log, crawled = crawl_site(args, estimating)
    figures["estimate-rate"] = measure(site, log, crawled, start, end)
    # The fixed interval of its requests, with the shortfall fixed showed against its paper interval.
    intervals["fixed-matched-estimate"] = intervals["fixed-matched"] * (
        figures["adaptive"]["requests"] / figures["estimate-rate"]["requests"])
    site, log, crawled = crawl_site(args, _fixed(intervals["fixed-matched-estimate"] * day))
    figures["fixed-matched-estimate"] = measure(site, log, crawled, start, end)
    optimal = optimal_rates(rates, budget)
    estimate_budget = figures["estimate-rate"]["requests_per_day"]
    theory = {
        "budget_per_day": budget,
        "uniform": mean_freshness(rates, [budget / len(rates)] * len(rates)),
        "proportional": mean_freshness(rates, [budget * rate / sum(rates) for rate in rates]),
        "optimal": mean_freshness(rates, optimal),
        "optimal_unfetched": sum(f == 0 for f in optimal),
        "optimal_gain_days": mu,
        "estimate_budget_per_day": estimate_budget,
        "uniform_at_estimate_budget": mean_freshness(rates, [estimate_budget / len(rates)] * len(rates)),
        "optimal_at_estimate_budget": mean_freshness(rates, optimal_rates(rates, estimate_budget)),
    }
    allocation = bands(rates, window, figures, optimal)
    matched = figures["fixed-matched"]
    estimate = figures["estimate-rate"]["freshness"]
    goals = {
        "adaptive_above_fixed": figures["adaptive"]["freshness"] > matched["freshness"],
        "adaptive_near_optimal": figures["adaptive"]["freshness"] >= OPTIMAL_SHARE * theory["optimal"],
        "estimate_above_fixed": estimate > figures["fixed-matched-estimate"]["freshness"],
        "estimate_near_optimal": estimate >= OPTIMAL_SHARE * theory["optimal_at_estimate_budget"],
        "bytes_saved": all(f["bytes_saved_share"] >= SAVED_SHARE for f in figures.values()),
    }
    report(args, figures, theory, allocation, goals, intervals)
    if args.json:
        settings = {key: value for key, value in vars(args).items() if key != "json"}
        for policy in figures.values():
            del policy["per_page"]
        Path(args.json).write_text(json.dumps({
            "date": _dt.date.today().isoformat(), "machine": machine(), "settings": settings,
            "fixed_interval_days": intervals, "policies": figures, "theory": theory, "bands": allocation,
            "goals": goals}, indent=2) + "\n", encoding="utf-8")
    return 0


def _fixed(seconds: float) -> RevisitPolicy:
    """The same interval for every page and every visit."""
    return RevisitPolicy(interval=seconds, min_interval=seconds, max_interval=seconds, adaptive=False)


def report(args: argparse.Namespace, figures: dict[str, dict[str, Any]], theory: dict[str, Any],
           allocation: list[dict[str, Any]], goals: dict[str, bool], intervals: dict[str, float]) -> None:
    low, high = args.rates
    print(f"{args.pages} pages changing {low:g} to {high:g} times a simulated day, days {args.warmup:g} to "
          f"{args.days:g} measured ({args.seconds_per_day:g} s a day); intervals "
          + ", ".join(f"{name} {24 * days:.2f} h" for name, days in intervals.items()))
    print(f"{'policy':<22} {'freshness':>9} {'age h':>7} {'requests':>8} {'/day':>7} {'MB sent':>8} "
          f"{'unchanged':>9} {'304s':>6} {'bytes saved':>11}")
    for name, f in figures.items():
        print(f"{name:<22} {f['freshness']:>9.3f} {f['age_hours']:>7.2f} {f['requests']:>8} "
              f"{f['requests_per_day']:>7.1f} {f['bytes_sent'] / 1e6:>8.2f} {f['unchanged']:>9} "
              f"{f['unchanged_304']:>6} {f['bytes_saved_share']:>11.1%}")
    for name in ("uniform", "proportional", "optimal"):
        print(f"{'theory: ' + name:<22} {theory[name]:>9.3f} {'':>7} {'':>8} {theory['budget_per_day']:>7.1f}")
    print(f"(the optimal allocation fetches {theory['optimal_unfetched']} pages never; its gain a fetch is "
          f"{theory['optimal_gain_days']:.4f} days; at estimate-rate's {theory['estimate_budget_per_day']:.1f} requests "
          f"a day, uniform {theory['uniform_at_estimate_budget']:.3f} and optimal "
          f"{theory['optimal_at_estimate_budget']:.3f})")
    print("requests a page a day (freshness), by fifths of the pages ordered by rate:")
    names = (*figures, "optimal")
    print(f"{'rates':<12} " + " ".join(f"{name:>16}" for name in names))
    for row in allocation:
        cells = [f"{row[name]['per_page_day']:>6.2f} ({row[name]['freshness']:.2f})" for name in names]
        print(f"{row['rate_low']:>5.2f}-{row['rate_high']:<6.2f} " + " ".join(f"{cell:>16}" for cell in cells))
    adaptive = figures["adaptive"]["freshness"]
    print(f"goal, adaptive above fixed at the same requests: {'met' if goals['adaptive_above_fixed'] else 'MISSED'} "
          f"({adaptive:.3f} against {figures['fixed-matched']['freshness']:.3f})")
    print(f"goal, adaptive within 10 % of the optimal allocation: "
          f"{'met' if goals['adaptive_near_optimal'] else 'MISSED'} ({adaptive / theory['optimal']:.1%} of it)")
    estimate = figures["estimate-rate"]["freshness"]
    print(f"goal, estimate-rate above fixed at the same requests: "
          f"{'met' if goals['estimate_above_fixed'] else 'MISSED'} "
          f"({estimate:.3f} against {figures['fixed-matched-estimate']['freshness']:.3f})")
    print(f"goal, estimate-rate within 10 % of the optimal allocation at its requests: "
          f"{'met' if goals['estimate_near_optimal'] else 'MISSED'} "
          f"({estimate / theory['optimal_at_estimate_budget']:.1%} of {theory['optimal_at_estimate_budget']:.3f})")
    print(f"goal, 304s save >= 90 % of unchanged pages' bytes: {'met' if goals['bytes_saved'] else 'MISSED'}")


def machine() -> dict[str, Any]:
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version()}


if __name__ == "__main__":
    sys.exit(main())

"""The trap site crawled at one page budget: niofetcher without trap rules, with its defaults, with a
per-host budget, and Scrapy -- real pages found, trap fetches, requests, counted by the server.

    python benchmarks/traps.py                      # budget 1,000
    python benchmarks/traps.py --budget 300 --json results/traps.json
    python benchmarks/traps.py --clients niofetcher-defaults,scrapy

The site is ``niofetcher.testing.TrapSite`` (31 real pages and six traps: a calendar, session IDs,
growing relative paths, a soft 404, endless pagination, a path that grows without repeating) on
127.0.0.1, in this process; each client crawls it from its home page after the counters are reset,
and the site says what each asked for (``TrapSite.fetches``).  robots.txt is left out of the counts.

- ``niofetcher-off``: every trap rule off (``strip_query_params=()``, the limits None): the crawl
  as it was before them;
- ``niofetcher-defaults``: CrawlConfig's defaults;
- ``niofetcher-per-host``: the defaults and ``max_pages_per_host`` (``--per-host-budget``, 100);
- ``niofetcher-dedup``: the defaults and ``dedup="near"``;
- ``niofetcher-per-host-dedup``: the defaults, ``max_pages_per_host`` and ``dedup="near"``;
- ``scrapy``: a CrawlSpider following every link (``Rule(LinkExtractor(), follow=True)``), in a
  process of its own, with its default duplicate filter and URL length limit (2,083),
  ``DEPTH_LIMIT`` (``--depth-limit``, 10) and ``CLOSESPIDER_PAGECOUNT`` = the budget, tuned as
  compare.py's Scrapy is (no delay, no AutoThrottle, no cookies).  Scrapy closes the spider after
  the budget's responses and lets what is in flight finish, so it may ask for a few more.

Duplicate detection stops the traps whose pages repeat one page (the soft 404, the pagination);
the calendar's months differ, and only a per-host budget (or ``max_depth``) stops it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from niofetcher.crawl import CrawlConfig, Crawler
from niofetcher.testing import TrapSite

CLIENTS = ("niofetcher-off", "niofetcher-defaults", "niofetcher-per-host", "niofetcher-dedup",
           "niofetcher-per-host-dedup", "scrapy")
OFF: dict[str, Any] = {"max_url_length": None, "max_path_repeats": None, "strip_query_params": ()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=1000, help="pages each client may fetch (default 1000)")
    parser.add_argument("--per-host-budget", type=int, default=100, help="max_pages_per_host of niofetcher-per-host")
    parser.add_argument("--depth-limit", type=int, default=10, help="Scrapy's DEPTH_LIMIT (default 10)")
    parser.add_argument("--pages", type=int, default=20, help="the site's /page/N pages (default 20)")
    parser.add_argument("--clients", default=",".join(CLIENTS), help=f"a comma-separated subset of {CLIENTS}")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    parser.add_argument("--scrapy-child", nargs=3, metavar=("SEED", "BUDGET", "DEPTH"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def crawl_niofetcher(site: TrapSite, budget: int, options: dict[str, Any]) -> float:
    """Crawl the site with niofetcher; the seconds it took."""
    with tempfile.TemporaryDirectory(prefix="niofetcher-traps-") as folder:
        config = CrawlConfig(seeds=[site.base_url], db_path=os.path.join(folder, "crawl.sqlite"),
                             parse_mode="thread", max_pages=budget, **options)
        started = time.perf_counter()
        Crawler(config).run()
        return time.perf_counter() - started


def crawl_scrapy(site: TrapSite, budget: int, depth: int) -> float | None:
    """Crawl the site with Scrapy in a process of its own; the seconds it took, None without Scrapy."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--scrapy-child", site.base_url, str(budget), str(depth)],
                          capture_output=True, text=True, check=False, timeout=600)
    if done.returncode == 3:
        print("scrapy: not installed (pip install -e '.[bench]'): skipped", file=sys.stderr)
        return None
    if done.returncode != 0:
        raise RuntimeError(f"scrapy failed: {done.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - started


def scrapy_child(seed: str, budget: int, depth: int) -> int:
    """The Scrapy crawl itself (``--scrapy-child``)."""
    try:
        from scrapy.crawler import CrawlerProcess
        from scrapy.linkextractors import LinkExtractor
        from scrapy.spiders import CrawlSpider, Rule
    except ImportError:
        return 3

    class TrapSpider(CrawlSpider):  # type: ignore[misc,unused-ignore]  # scrapy is Any without the bench extra
        name = "traps"
        allowed_domains = ["127.0.0.1"]  # noqa: RUF012 - Scrapy declares them lists
        start_urls = [seed]  # noqa: RUF012
        rules = (Rule(LinkExtractor(), follow=True),)

    process = CrawlerProcess({
        "CLOSESPIDER_PAGECOUNT": budget, "DEPTH_LIMIT": depth, "ROBOTSTXT_OBEY": True, "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False, "COOKIES_ENABLED": False, "TELNETCONSOLE_ENABLED": False,
        "MEMUSAGE_ENABLED": False, "LOG_LEVEL": "ERROR", "CONCURRENT_REQUESTS": 16,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 2, "HTTPERROR_ALLOW_ALL": True,
    })
    process.crawl(TrapSpider)
    process.start()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.scrapy_child is not None:
        seed, budget, depth = args.scrapy_child
        return scrapy_child(seed, int(budget), int(depth))
    chosen = [name.strip() for name in args.clients.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in CLIENTS]
    if unknown:
        print(f"unknown client {unknown[0]!r}: choose among {', '.join(CLIENTS)}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    with TrapSite(pages=args.pages) as site:
        real = set(site.real_urls())
        for name in chosen:
            site.reset_counters()
            if name == "scrapy":
                seconds = crawl_scrapy(site, args.budget, args.depth_limit)
                if seconds is None:
                    continue
            else:
                per_host = {"max_pages_per_host": args.per_host_budget}
                options = {"niofetcher-off": OFF, "niofetcher-defaults": {}, "niofetcher-per-host": per_host,
                           "niofetcher-dedup": {"dedup": "near"},
                           "niofetcher-per-host-dedup": {**per_host, "dedup": "near"}}[name]
                seconds = crawl_niofetcher(site, args.budget, options)
            fetched = site.fetches()
            requests = sum(n for kind, n in fetched.items() if kind != "robots")
            traps = site.trap_fetches()
            rows.append({"client": name, "requests": requests, "real_found": len(site.real_fetched() & real),
                         "real_pages": len(real), "trap_fetches": traps,
                         "trap_share": traps / requests if requests else 0.0, "seconds": seconds,
                         "by_kind": {kind: n for kind, n in sorted(fetched.items()) if kind != "robots"}})
    print(f"The trap site, a budget of {args.budget} pages ({len(real)} real pages)")
    print(f"{'client':<22} {'requests':>8} {'real found':>10} {'trap fetches':>12} {'trap share':>10} {'seconds':>8}")
    for row in rows:
        print(f"{row['client']:<22} {row['requests']:>8} {row['real_found']:>5} of {row['real_pages']:<2} "
              f"{row['trap_fetches']:>12} {row['trap_share']:>10.0%} {row['seconds']:>8.1f}")
    for row in rows:
        print(f"  {row['client']}: " + ", ".join(f"{kind} {n}" for kind, n in row["by_kind"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"budget": args.budget, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

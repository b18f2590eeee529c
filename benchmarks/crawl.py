"""A crawl of a generated site beside a plain fetch of the same URLs.

    python benchmarks/crawl.py                       # 4 hosts x 2,500 pages = 10,000 pages
    python benchmarks/crawl.py --hosts 10 --pages 1000 --extractor lxml --parse-mode thread

The test site runs in its own process. First the crawler crawls it from host
0's index (robots.txt, frontier, link extraction, on_page); then a bare
NIOFetcher fetches exactly the URLs the crawl fetched, with the same
connection limits. The gap between the two rates is what parsing and the
frontier cost. No assertions: this measures, the tests judge.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _site import site_process  # noqa: E402

from niofetcher import CrawlConfig, Crawler, FetcherConfig, NIOFetcher  # noqa: E402


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--pages", type=int, default=2500, help="pages per host")
    parser.add_argument("--per-host", type=int, default=16)
    parser.add_argument("--delay", type=float, default=0.0, help="server latency per response, ms")
    parser.add_argument("--page-size", type=int, default=4096)
    parser.add_argument("--extractor", choices=("bs4", "lxml"), default="bs4")
    parser.add_argument("--parse-mode", choices=("process", "thread"), default="process")
    parser.add_argument("--parse-workers", type=int, default=2)
    args = parser.parse_args()

    fetcher_config = FetcherConfig(max_connections_per_host=args.per_host, max_connections=args.per_host * args.hosts)
    with site_process(args.hosts, args.pages, args.delay, args.page_size) as bases, \
            tempfile.TemporaryDirectory() as folder:
        db = os.path.join(folder, "crawl.sqlite")
        config = CrawlConfig(
            seeds=[bases[0]], db_path=db, allowed_domains=["127.0.0.1"], extractor=args.extractor,
            parse_mode=args.parse_mode, parse_workers=args.parse_workers, fetcher=fetcher_config,
        )
        cpu0 = cpu_seconds()
        summary = Crawler(config).run()
        crawl_cpu = cpu_seconds() - cpu0
        with sqlite3.connect(db) as conn:
            urls = [row[0] for row in conn.execute("SELECT url FROM urls WHERE state = 'done'")]

        cpu0 = cpu_seconds()
        started = time.perf_counter()
        errors = 0
        with NIOFetcher(fetcher_config) as fetcher:
            for url in urls:
                fetcher.register(url)
            for result in fetcher.results():
                errors += not result.ok
        fetch_seconds = time.perf_counter() - started
        fetch_cpu = cpu_seconds() - cpu0

    pages = summary.pages
    print(f"site: {args.hosts} hosts x {args.pages} pages of ~{args.page_size} B, {args.delay:g} ms latency, "
          f"{args.per_host} connections per host")
    print(f"crawl ({args.extractor}, {args.parse_workers} {args.parse_mode} workers): {summary.counts}, "
          f"errors {summary.errors or 0}")
    print(f"  crawl      {pages / summary.seconds:8.0f} pages/s   {summary.seconds:6.2f} s   "
          f"{crawl_cpu * 1000 / max(1, pages):6.3f} CPU ms/page (parse processes included)")
    print(f"  fetch only {len(urls) / fetch_seconds:8.0f} pages/s   {fetch_seconds:6.2f} s   "
          f"{fetch_cpu * 1000 / max(1, len(urls)):6.3f} CPU ms/page   ({errors} errors)")


if __name__ == "__main__":
    main()

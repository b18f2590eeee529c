"""The ``demo`` command: start a local test site, crawl all of it, and compare what was served with the summary."""

from __future__ import annotations

import argparse
import os
import tempfile

from ..config import FetcherConfig
from ..crawl import CrawlConfig
from ..testing import TestSite
from .progress import print_summary, run_crawl


def run(args: argparse.Namespace) -> int:
    """Crawl a fresh test site into a temporary frontier; exit status 0 only when every page was crawled."""
    per_host = args.per_host
    with TestSite(hosts=args.hosts, pages=args.pages, delay=args.delay / 1000.0) as site, \
            tempfile.TemporaryDirectory(prefix="niofetcher-demo-") as folder:
        print(f"test site: {args.hosts} hosts x {args.pages} pages on {', '.join(site.base_urls)}, "
              f"{args.delay:g} ms latency", flush=True)
        config = CrawlConfig(
            seeds=[site.base_urls[0]], db_path=os.path.join(folder, "demo.sqlite"),
            fetcher=FetcherConfig(max_connections_per_host=per_host, max_connections=per_host * args.hosts),
        )
        print(f"crawling from {site.base_urls[0]} with {per_host} connections per host, robots.txt obeyed, "
              f"links parsed with beautifulsoup4 in {config.parse_workers} processes", flush=True)
        ran = run_crawl(config, None, args.progress)
        print_summary(ran)
        summary = ran.summary
        expected = args.hosts * (args.pages + 1)
        served = site.counters()
        print(f"the site served {served.requests} requests ({expected} pages + {args.hosts} robots.txt) "
              f"over {served.accepted} connections; peak {served.max_open} open at once")
    return 0 if summary.counts["done"] == expected and not summary.errors else 1

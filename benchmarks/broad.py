"""A broad crawl: many hosts, links mostly between them, every connection meant to be busy.

    python benchmarks/broad.py                                  # 1,000 hosts, 20,000 pages (a quick run)
    python benchmarks/broad.py --hosts 10000 --pages 1000000    # the issue's broad crawl

A ``SyntheticWeb`` (Zipf-like host sizes, most links to other hosts, a delay
per response) runs in its own process; the crawler reaches its host names
through ``FetcherConfig(resolve=...)`` and crawls from host 0's ``/``. Every
``--sample`` seconds it prints pages/s over the interval, connections open
(the fetcher's ``open_connections`` against ``max_connections``; an idle
keep-alive connection counts) and busy (its ``in_flight`` requests, each on
a connection, against the same), the URLs waiting in the frontier and this
process's RSS; at the end, the means of those samples, pages/s in each half of the crawl against the ideal
(``max_connections / delay``), and, counted by the server, the peak
connections of any one host name. No assertions: this measures, the tests
judge.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import psutil

from niofetcher import CrawlConfig, Crawler, FetcherConfig
from niofetcher.crawl.config import CrawlSummary
from niofetcher.testing import SyntheticWeb


def serve(options: dict[str, Any], pipe: Connection) -> None:
    """The web's process: send (resolve, seed URL), serve until told, send the server's figures."""
    with SyntheticWeb(**options, max_seconds=None) as web:
        pipe.send((web.resolve, web.base_urls[0]))
        pipe.recv()
        peaks = web.peak_connections()
        pipe.send({"requests": sum(web.requested_urls().values()), "hosts_asked": len(peaks),
                   "peak_per_host": max(peaks.values(), default=0)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1_000)
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--ports", type=int, default=4)
    parser.add_argument("--zipf", type=float, default=1.0, help="exponent of the host sizes")
    parser.add_argument("--links", type=int, default=10, help="links per page")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="per response")
    parser.add_argument("--max-connections", type=int, default=256)
    parser.add_argument("--per-host", type=int, default=2, help="max_connections_per_host")
    parser.add_argument("--parse-mode", choices=["process", "thread"], default="process")
    parser.add_argument("--extractor", default="lxml")
    parser.add_argument("--sample", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    options = {"hosts": args.hosts, "pages": args.pages, "ports": args.ports, "zipf": args.zipf,
               "links_per_page": args.links, "delay": args.delay_ms / 1000, "seed": args.seed}
    parent, child = multiprocessing.Pipe()
    web = multiprocessing.get_context("spawn").Process(target=serve, args=(options, child), daemon=True)
    web.start()
    resolve, seed = parent.recv()
    with tempfile.TemporaryDirectory() as folder:
        fetcher = FetcherConfig(resolve=resolve, max_connections=args.max_connections,
                                max_connections_per_host=args.per_host)
        config = CrawlConfig(seeds=[seed], db_path=os.path.join(folder, "broad.sqlite"), allowed_domains=["web.test"],
                             parse_mode=args.parse_mode, extractor=args.extractor, fetcher=fetcher)
        crawler = Crawler(config)
        result: list[CrawlSummary] = []
        thread = threading.Thread(target=lambda: result.append(crawler.run()), name="crawl")
        me = psutil.Process()
        print(f"{args.hosts:,} hosts, {args.pages + args.hosts:,} URLs, {args.delay_ms:g} ms a response, "
              f"{args.max_connections} connections, {args.per_host} per host")
        print(f"{'s':>6} {'pages':>9} {'pages/s':>8} {'open':>6} {'busy':>6} {'waiting':>9} {'RSS MB':>7}")
        started = time.monotonic()
        thread.start()
        opened: list[float] = []
        busy: list[float] = []
        timeline: list[tuple[float, int]] = [(0.0, 0)]
        while thread.is_alive():
            thread.join(args.sample)
            progress = crawler.progress()
            now, done = time.monotonic() - started, progress.done + progress.errors
            rate = (done - timeline[-1][1]) / (now - timeline[-1][0])
            timeline.append((now, done))
            opened.append(progress.open_connections / args.max_connections)
            busy.append(progress.fetching / args.max_connections)
            print(f"{now:6.1f} {done:9,} {rate:8,.0f} {opened[-1]:6.0%} {busy[-1]:6.0%} {progress.waiting:9,} "
                  f"{me.memory_info().rss / 2**20:7.0f}")
        parent.send("stop")
        server = parent.recv()
    web.join(10)
    summary = result[0] if result else None
    elapsed, total = timeline[-1]
    half = total / 2
    middle = next(t for t, done in timeline if done >= half)
    ideal = args.max_connections / (args.delay_ms / 1000) if args.delay_ms else float("inf")
    print(f"\n{total:,} pages in {elapsed:.1f} s: {total / elapsed:,.0f} pages/s (ideal {ideal:,.0f})")
    print(f"first half {half / middle:,.0f} pages/s, second half {(total - half) / (elapsed - middle):,.0f} pages/s")
    print(f"connections of {args.max_connections}, mean of {len(busy)} samples: open {statistics.fmean(opened):.0%}, "
          f"busy {statistics.fmean(busy):.0%}")
    print(f"server: {server['requests']:,} requests, {server['hosts_asked']:,} host names, "
          f"at most {server['peak_per_host']} connections to one of them")
    if summary is not None:
        print(f"crawl: {summary.counts}, errors {summary.errors}")


if __name__ == "__main__":
    main()

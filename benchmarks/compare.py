"""niofetcher side by side with the libraries people would use instead (issue 5).

    python benchmarks/compare.py                                # every scenario, 3 rounds
    python benchmarks/compare.py --scenario A --rounds 1 --quick  # smoke check, well under a minute
    python benchmarks/compare.py --scenario B --clients niofetcher,pycurl

For each scenario it starts the test site in its own process on loopback
(``benchmarks/_site.py``: one port per host, its counters readable over a
pipe), learns the exact body length of every URL it will ask for, then runs
every client in a fresh subprocess (``benchmarks/clients/*_client.py``),
alternating clients round by round (A B C A B C ...) so that a drift of the
machine hits all alike. Each client fetches the same URL list with the same
limits, checks the status and body length of every response and prints one
JSON line; after each run the site's counters give the server-side peak of
open connections per host.

It prints one table per scenario — medians over the rounds of pages/s, client
CPU ms per page (user + sys of the client process), peak RSS, efficiency
against the ideal where one exists, the server-timed turnaround where there is
latency (B, C: p50/p90/p99 of the time from a response written to the next
request received on that connection, i.e. how soon the client asks again), the
server-counted peak connections per host, errors, and each client's pages/s as a ratio to niofetcher's — then the
targets of issue 5 met or missed. Raw runs go to ``benchmarks/results/`` as
JSON, the tables as Markdown, and a PNG chart (matplotlib).

Scenarios (``--quick`` divides the GET counts and the crawled pages by 5):

A  throughput: 1 host, 64 connections, 20,000 GETs of 4 KiB pages, keep-alive.
B  latency-bound: 50 hosts, 4 per host, 200 in all, 50 ms latency, 10,000 GETs;
   ideal 50 x 4 / 0.05 = 4,000 pages/s.
C  many connections: 1 host, 2,000 connections, 200 ms latency, 20,000 GETs;
   ideal 2,000 / 0.2 = 10,000 pages/s. Clients and site raise their open-file limit.
D  crawl: the real ``niofetcher crawl`` command (bs4 and lxml extractors) against Scrapy (a CrawlSpider with
   a LinkExtractor, settings tuned) crawling a generated site from host 0's index: 4 hosts x 2,500 pages
   of 4 KiB (10,004 with the indexes), 16 per host, 64 in all, robots.txt obeyed by both.
E  real-page crawl: the same with the real pages of ../shared/corpus/pages as the bodies (the site's
   links added to each), both crawlers following only the site's own pages, niofetcher with each extractor
   (bs4, lxml, selectolax when installed); skipped without the corpus.
   Each crawl runs under ``clients/run_tree.py``, which counts the CPU of the whole process tree
   (niofetcher's parse processes included) and the wall time of the whole command; the site's
   counters check that every page was fetched. ``--quick`` divides the pages per host by 5.

A client whose library cannot be imported is skipped with a line saying so; a
client with errors is reported as such, and gets no ratio.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys

from comparison import BASELINE, report
from comparison.clients import ALL_NAMES, CRAWL_CLIENTS, FETCH_CLIENTS
from comparison.measure import machine
from comparison.runner import run_scenario
from comparison.scenarios import SCENARIOS


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the scenarios asked for, write the results; 1 when niofetcher had errors."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="all", type=str.upper, choices=[*SCENARIOS, "ALL"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="GET counts and crawled pages / 5: a smoke check")
    parser.add_argument("--clients", type=lambda s: [c.strip() for c in s.split(",") if c.strip()], default=None,
                        help="comma-separated subset of: " + ", ".join(c.name for c in FETCH_CLIENTS)
                        + " (A-C); " + ", ".join(c.name for c in CRAWL_CLIENTS)
                        + " (D, E; the scrapy-* variants run only when named)")
    parser.add_argument("--deadline", type=float, default=None, metavar="S",
                        help="a client stops taking URLs after S s of fetching and its run is marked incomplete "
                             "(its rate is that of the part done), so that a very slow peer (httpx with "
                             "2,000 connections) costs S per round, not an hour (default 60, with --quick 5; "
                             "0 = none)")
    parser.add_argument("--run-timeout", type=float, default=600.0, metavar="S",
                        help="kill a client process after this long (default 600)")
    parser.add_argument("--profile", action="store_true",
                        help="after the rounds, one extra niofetcher run with its loop thread under cProfile "
                             "(not counted): prints the top costs, writes results/profile-<scenario>.pstats")
    parser.add_argument("--replot", metavar="RAW.json",
                        help="run nothing: rewrite the tables (.md) and the chart (.png) from a raw-runs JSON file")
    parser.add_argument("--no-write", action="store_true", help="print only; write nothing to benchmarks/results")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.deadline is None:
        args.deadline = 5.0 if args.quick else 60.0
    known = set(ALL_NAMES)
    if args.clients and not set(args.clients) <= known:
        parser.error(f"unknown client(s): {', '.join(sorted(set(args.clients) - known))}")
    if args.clients and BASELINE not in args.clients:
        print(f"note: {BASELINE} is not among --clients, so there are no ratios")

    if args.replot:
        return report.replot(args.replot)
    started = _dt.datetime.now().isoformat(timespec="seconds")
    info = machine()
    print(f"niofetcher side-by-side benchmark, {started}")
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['platform']}, Python {info['python']}")
    keys = list(SCENARIOS) if args.scenario == "ALL" else [args.scenario]
    records = []
    for key in keys:
        scenario = SCENARIOS[key]
        if args.quick:
            scenario = scenario.shrink(5)
        records.append(run_scenario(scenario, args))
    if not args.no_write:
        report.write_results(records, args, info, started)
    # Non-zero when niofetcher itself failed or had errors: the smoke check's verdict.
    bad = [r["key"] for r in records if r.get("status") == "ran"
           and BASELINE in r["summary"] and not r["summary"][BASELINE]["clean"]]
    if bad:
        print(f"niofetcher had errors or failed in scenario(s) {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

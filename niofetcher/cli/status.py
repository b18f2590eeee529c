"""The ``status`` command: where a crawl on a PostgreSQL frontier stands, read as no worker."""

from __future__ import annotations

import argparse

from ..crawl.frontier import FrontierError
from .errors import UsageError


def run(args: argparse.Namespace) -> int:
    """Print the crawl's URLs per state, its live workers and its busiest hosts; exit status 0."""
    try:
        from ..crawl.frontier.postgres import crawl_status

        status = crawl_status(args.frontier, args.crawl, top=args.top)
    except ImportError as exc:
        raise UsageError(f"cannot use --frontier: {exc}") from None
    except (FrontierError, ValueError) as exc:  # one line: it names the crawl and host:port/db, never a password
        raise UsageError(f"cannot use --frontier: {exc}") from None
    print(f"crawl {args.crawl}")
    for state, n in status.counts.items():
        print(f"  {state:<10}  {n:>12}")
    print(f"workers: {len(status.workers)} live")
    if status.workers:
        print(f"  {'id':<32}  {'host':<20}  {'pid':>7}  {'hosts':>6}  {'pages/min':>9}  {'heartbeat':>9}")
        for worker in status.workers:
            print(f"  {worker.id:<32}  {worker.host_name:<20}  {worker.pid:>7}  {worker.hosts_held:>6}  "
                  f"{worker.pages_last_minute:>9}  {worker.heartbeat_age:>8.1f}s")
    print(f"hosts with the most URLs waiting: {len(status.busiest)}")
    for host, waiting, owner in status.busiest:
        print(f"  {waiting:>10}  {host}  {owner or '(free)'}")
    return 0

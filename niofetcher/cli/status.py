"""The ``status`` command: where a crawl stands, read as no worker, in a SQLite ``--db`` or on a
PostgreSQL ``--frontier``."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from ..crawl.frontier import frontier_status
from ..crawl.frontier.traps import stored_refusals
from .args import check_frontier_options
from .errors import UsageError

if TYPE_CHECKING:
    from ..crawl.frontier.base import CrawlStatus


def run(args: argparse.Namespace) -> int:
    """Print the crawl's URLs per state, the links its trap rules refused by cause (when any), its
    busiest hosts and, on a shared frontier, its live workers; exit status 0."""
    _check_where(args)
    shared = args.db is None
    try:
        status = (frontier_status(args.frontier, top=args.top, crawl=args.crawl) if shared
                  else frontier_status(args.db, top=args.top))
    except ValueError as exc:  # a FrontierError, or a bad crawl name: one line, naming the file, or the
        # crawl and host:port/db (never a password)
        raise UsageError(f"cannot use --frontier: {exc}" if shared else f"--db {exc}") from None
    print(f"crawl {args.crawl if shared else args.db}")
    for state, n in status.counts.items():
        print(f"  {state:<10}  {n:>12}")
    refused = stored_refusals(args.frontier, crawl=args.crawl) if shared else stored_refusals(args.db)
    if refused:  # over every run (and worker): links the trap rules did not let in, by the option that refused them
        print(f"links not followed (traps): {sum(refused.values())}")
        for cause, n in sorted(refused.items()):
            print(f"  {cause:<18}  {n:>12}")
    due, later = status.revisits
    if due or later is not None:  # a kept crawl (crawl --revisit)
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(later)) if later is not None else "none"
        print(f"revisits: {due} due now; next due {when}")
    if shared:
        _print_workers(status)
    print(f"hosts with the most URLs waiting: {len(status.busiest)}")
    for host, waiting, owner in status.busiest:
        print(f"  {waiting:>10}  {host}  {owner or '(free)'}" if shared else f"  {waiting:>10}  {host}")
    return 0


def _check_where(args: argparse.Namespace) -> None:
    """Exactly one frontier: a --db, or a --frontier with its --crawl."""
    if args.db is None and args.frontier is None:
        raise UsageError("status needs --db FILE (a SQLite crawl) or --frontier URL --crawl NAME (a PostgreSQL one)")
    check_frontier_options(args)


def _print_workers(status: CrawlStatus) -> None:
    """The live workers of a shared frontier, as their last heartbeats say."""
    print(f"workers: {len(status.workers)} live")
    if status.workers:
        print(f"  {'id':<32}  {'host':<20}  {'pid':>7}  {'hosts':>6}  {'pages/min':>9}  {'heartbeat':>9}")
        for worker in status.workers:
            print(f"  {worker.id:<32}  {worker.host_name:<20}  {worker.pid:>7}  {worker.hosts_held:>6}  "
                  f"{worker.pages_last_minute:>9}  {worker.heartbeat_age:>8.1f}s")

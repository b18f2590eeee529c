"""The ``status`` command: where a crawl stands, read as no worker, in a SQLite ``--db`` or on a
PostgreSQL ``--frontier``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..crawl.frontier import FrontierError
from .args import check_frontier_options
from .errors import UsageError

if TYPE_CHECKING:
    from ..crawl.frontier.base import CrawlStatus


def run(args: argparse.Namespace) -> int:
    """Print the crawl's URLs per state, its busiest hosts and, on PostgreSQL, its live workers;
    exit status 0."""
    _check_where(args)
    if args.db is not None:
        _print_sqlite(args.db, args.top)
    else:
        _print_postgres(args.frontier, args.crawl, args.top)
    return 0


def _check_where(args: argparse.Namespace) -> None:
    """Exactly one frontier: a --db, or a --frontier with its --crawl."""
    if args.db is None and args.frontier is None:
        raise UsageError("status needs --db FILE (a SQLite crawl) or --frontier URL --crawl NAME (a PostgreSQL one)")
    check_frontier_options(args)


def _print_sqlite(path: str, top: int) -> None:
    from ..crawl.frontier.sqlite import crawl_status

    try:
        status = crawl_status(path, top=top)
    except FrontierError as exc:  # one line, naming the file first: "PATH does not exist"
        raise UsageError(f"--db {exc}") from None
    print(f"crawl {path}")
    _print_counts(status)
    _print_busiest(status, owners=False)


def _print_postgres(dsn: str, crawl: str, top: int) -> None:
    try:
        from ..crawl.frontier.postgres import crawl_status

        status = crawl_status(dsn, crawl, top=top)
    except ImportError as exc:
        raise UsageError(f"cannot use --frontier: {exc}") from None
    except (FrontierError, ValueError) as exc:  # one line: it names the crawl and host:port/db, never a password
        raise UsageError(f"cannot use --frontier: {exc}") from None
    print(f"crawl {crawl}")
    _print_counts(status)
    print(f"workers: {len(status.workers)} live")
    if status.workers:
        print(f"  {'id':<32}  {'host':<20}  {'pid':>7}  {'hosts':>6}  {'pages/min':>9}  {'heartbeat':>9}")
        for worker in status.workers:
            print(f"  {worker.id:<32}  {worker.host_name:<20}  {worker.pid:>7}  {worker.hosts_held:>6}  "
                  f"{worker.pages_last_minute:>9}  {worker.heartbeat_age:>8.1f}s")
    _print_busiest(status, owners=True)


def _print_counts(status: CrawlStatus) -> None:
    for state, n in status.counts.items():
        print(f"  {state:<10}  {n:>12}")


def _print_busiest(status: CrawlStatus, owners: bool) -> None:
    """The hosts with the most URLs waiting; with ``owners`` (PostgreSQL), the worker holding each."""
    print(f"hosts with the most URLs waiting: {len(status.busiest)}")
    for host, waiting, owner in status.busiest:
        print(f"  {waiting:>10}  {host}  {owner or '(free)'}" if owners else f"  {waiting:>10}  {host}")

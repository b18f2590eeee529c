"""The ``crawl`` command: the options made into a CrawlConfig, the crawl run, its failures made into one line."""

from __future__ import annotations

import argparse
import sqlite3

from ..crawl import CrawlConfig
from ..crawl.frontier import Frontier, FrontierError
from .args import config_from
from .errors import CommandFailed, UsageError
from .output import PageWriter, ResumeError
from .progress import print_summary, run_crawl


def run(args: argparse.Namespace) -> int:
    """Crawl (or resume the crawl in ``--db`` or ``--frontier``) and print its summary; exit status 1 when
    pages failed."""
    fetcher_config = config_from(args, host_delay=args.delay)
    if args.frontier is not None and args.db is not None:
        raise UsageError("give --db (a SQLite frontier) or --frontier (a PostgreSQL one), not both")
    if args.crawl is not None and args.frontier is None:
        raise UsageError("--crawl names a crawl in a --frontier database: give --frontier too")
    if args.frontier is not None and args.crawl is None:
        raise UsageError("--frontier needs --crawl NAME: the crawl's name in that database")
    db = args.db if args.db is not None else "crawl.sqlite"
    try:
        config = CrawlConfig(
            seeds=args.seeds, max_pages=args.max_pages, max_depth=args.max_depth,
            allowed_domains=args.allowed_domain, include=args.include, exclude=args.exclude,
            max_attempts=args.max_attempts, obey_robots=not args.no_robots, parse_workers=args.parse_workers,
            parse_mode=args.parse_mode, extractor=args.extractor, fetcher=fetcher_config, sitemaps=args.sitemaps,
            lease_seconds=args.lease,
            **({"frontier": args.frontier, "crawl_name": args.crawl} if args.frontier is not None else {"db_path": db}),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.frontier is not None:
        _check_postgres(args.frontier, args.crawl)
    else:
        _check_database(db)
    try:
        writer = PageWriter(args.out, args.warc, fetcher_config.user_agent)
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename}: {exc.strerror or exc}") from None
    try:
        with writer:
            summary = run_crawl(config, writer, args.progress)
    except ResumeError as exc:
        raise UsageError(str(exc)) from None
    except FrontierError as exc:  # a statement on --db failed (a full disk, an I/O error); it names the file
        raise CommandFailed(str(exc)) from None
    except sqlite3.Error as exc:  # the frontier is the crawl's only database
        raise CommandFailed(f"{exc}: {db}") from None
    except RuntimeError as exc:  # the crawl could not go on: its fetcher loop or one of its threads died
        raise CommandFailed(str(exc)) from None
    print_summary(summary)
    return 0 if not summary.errors else 1


def _check_database(path: str) -> None:
    """One clear line for a --db that cannot be used, before anything starts."""
    try:
        Frontier(path).close()
    except FrontierError as exc:
        raise UsageError(f"cannot use --db {path}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"cannot open --db {path}: {exc.strerror or exc}") from None


def _check_postgres(url: str, crawl: str) -> None:
    """One clear line for a --frontier that cannot be reached or used, before anything starts."""
    try:
        from ..crawl.frontier.postgres import PostgresFrontier

        PostgresFrontier(url, crawl).close()
    except ImportError as exc:
        raise UsageError(f"cannot use --frontier: {exc}") from None
    except FrontierError as exc:  # it names the crawl and host:port/db, never a password
        raise UsageError(f"cannot use --frontier: {exc}") from None

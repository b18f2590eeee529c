"""The ``crawl`` command: the options made into a CrawlConfig, the crawl run, its failures made into one line."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..crawl import CrawlConfig, CrawlSummary
from ..crawl.frontier import FrontierError, frontier_failures, open_frontier, prepare_frontier
from ..crawl.schedule import RevisitPolicy
from .args import check_frontier_options, config_from, urls_from
from .errors import CommandFailed, UsageError
from .output import SQLITE_SIDE_FILES, PageWriter, ResumeError, check_distinct_files, open_error, writes_to_stdout
from .progress import CrawlRun, print_summary, run_crawl

#: How many of a run's failed URLs the summary lists.
FAILURES_SHOWN = 5


def run(args: argparse.Namespace) -> int:
    """Crawl (or resume the crawl in ``--db`` or ``--frontier``) and print its summary; exit status 0
    once it ran to its end or its budget, or with ``--fail-on-error`` 1 when URLs failed in this run.
    CommandFailed (exit status 1) after the summary when it tried URLs and not one got a response."""
    seeds = urls_from(args, args.seeds)
    # A WARC holds each exchange as it went over the wire, which the fetcher keeps only when asked.
    fetcher_config = config_from(args, host_delay=args.delay, record_exchanges=args.warc is not None)
    check_frontier_options(args)
    if args.links and args.out is None:
        raise UsageError("--links puts the links in the --out records: give --out FILE too")
    db = args.db if args.db is not None else "crawl.sqlite"
    check_distinct_files(args.out, args.warc, db if args.frontier is None else None)
    try:
        config = CrawlConfig(
            seeds=seeds, max_pages=args.max_pages, max_depth=args.max_depth,
            allowed_domains=args.allowed_domain, include=args.include, exclude=args.exclude,
            max_attempts=args.max_attempts, obey_robots=not args.no_robots, parse_workers=args.parse_workers,
            parse_mode=args.parse_mode, extractor=args.extractor, fetcher=fetcher_config, sitemaps=args.sitemaps,
            lease_seconds=args.lease, follow_nofollow=args.follow_nofollow,
            retry_statuses=tuple(args.retry_status or CrawlConfig.retry_statuses),
            **_trap_options(args), dedup=args.dedup, revisit=_revisit_policy(args), keep_running=args.keep_running,
            **({"frontier": args.frontier, "crawl_name": args.crawl} if args.frontier is not None else {"db_path": db}),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    created = args.frontier is None and not os.path.exists(db)
    # URLs finished before this run, for the rate shown.  Not asked of a PostgreSQL frontier: its
    # counts() takes hosts like a worker, and its counts are every worker's anyway.
    finished_before = 0
    if args.frontier is not None:
        _check_shared(args.frontier, args.crawl)
    else:
        counts = _check_database(db)
        finished_before = counts["done"] + counts["error"]
    try:
        writer = PageWriter(args.out, args.warc, fetcher_config.user_agent, list_links=args.links,
                            obey_robots=config.obey_robots, per_worker=args.frontier is not None)
    except OSError as exc:
        if created:  # made by the check above: a crawl that does not start leaves nothing behind
            _remove_frontier(db)
        raise open_error(exc, args.out) from None
    started = time.time()
    try:
        with writer:
            ran = run_crawl(config, writer, args.progress, finished_before, stop_grace=args.stop_grace)
    except ResumeError as exc:
        raise UsageError(str(exc)) from None
    except FrontierError as exc:  # a statement on the frontier failed (a full disk, an I/O error); it names it
        raise CommandFailed(str(exc)) from None
    except RuntimeError as exc:  # the crawl could not go on: its fetcher loop or one of its threads died
        raise CommandFailed(str(exc)) from None
    failures = _first_failures(args, db, started) if ran.summary.errors else []
    # Records on standard output: the summary goes to standard error, out of the pipe.
    stdout_taken = writes_to_stdout(args.out) or writes_to_stdout(args.warc)
    print_summary(ran, args.max_pages, failures, file=sys.stderr if stdout_taken else sys.stdout)
    if _fetched_nothing(ran):
        raise CommandFailed(_why_nothing_was_fetched(ran.summary, failures))
    return 1 if args.fail_on_error and ran.summary.errors else 0


def _trap_options(args: argparse.Namespace) -> dict[str, Any]:
    """The trap options of CrawlConfig from the command line: an option not given keeps CrawlConfig's
    default, 0 turns a length or repeat limit off, ``--strip-param none`` strips nothing."""
    options: dict[str, Any] = {"max_pages_per_host": args.max_pages_per_host}
    for name in ("max_url_length", "max_path_repeats"):
        value = getattr(args, name)
        if value is not None:
            options[name] = value or None
    params = args.strip_param
    if params is not None:
        options["strip_query_params"] = () if [param.lower() for param in params] == ["none"] else tuple(params)
    return options


def _revisit_policy(args: argparse.Namespace) -> RevisitPolicy | None:
    """``--revisit`` and its bounds as a RevisitPolicy: a bound not given is RevisitPolicy's default,
    moved to ``--revisit`` when that is outside it.  UsageError for a bound (or ``--keep-running``) without ``--revisit``
    and for ``--fixed-revisit`` with ``--estimate-rate``,
    ValueError (made a UsageError by the caller) for bounds that do not hold it."""
    if args.revisit is None:
        given = [name for name, value in (("--min-revisit", args.min_revisit), ("--max-revisit", args.max_revisit),
                                          ("--fixed-revisit", args.fixed_revisit or None),
                                          ("--estimate-rate", args.estimate_rate or None),
                                          ("--keep-running", args.keep_running or None)) if value is not None]
        if given:
            raise UsageError(f"{given[0]} goes with --revisit DURATION: give --revisit too")
        return None
    if args.fixed_revisit and args.estimate_rate:
        raise UsageError("--fixed-revisit and --estimate-rate exclude each other: give one")
    interval = args.revisit
    default = RevisitPolicy()
    low = args.min_revisit if args.min_revisit is not None else min(default.min_interval, interval)
    high = args.max_revisit if args.max_revisit is not None else max(default.max_interval, interval)
    return RevisitPolicy(interval, low, high, adaptive=not args.fixed_revisit, estimate_rate=args.estimate_rate)


def _fetched_nothing(ran: CrawlRun) -> bool:
    """Whether URLs were finished in this run and not one of them got an HTTP response: every seed
    unreachable, every robots.txt unavailable.  Not a run that had nothing to do (a finished crawl run
    again), nor one a signal stopped: they did not try; nor one that robots.txt refused: its answer
    came."""
    summary = ran.summary
    tried = summary.pages + summary.errors.get("robots_unavailable", 0)
    answered = summary.responses + summary.errors.get("robots_disallowed", 0)
    return not ran.interrupted and tried > 0 and answered == 0


def _why_nothing_was_fetched(summary: CrawlSummary, failures: Sequence[tuple[str, str]]) -> str:
    """The one line for a crawl that fetched nothing: how its URLs failed, and the first of them."""
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(summary.errors.items()))
    first = f"; first: {failures[0][0]} ({failures[0][1]})" if failures else ""
    return f"not one page could be fetched: {kinds}{first}"


def _check_database(path: str) -> dict[str, int]:
    """One line naming the problem once for a --db that cannot be used, before anything starts;
    else its URLs per state."""
    try:
        frontier = open_frontier(path)
    except FrontierError as exc:
        # The frontier's message names the file itself: "cannot open PATH: why", "PATH is in use ...".
        text = str(exc)
        opening = f"cannot open {path}: "
        if text.startswith(opening):
            raise UsageError(f"cannot open --db {path}: {text[len(opening):]}") from None
        raise UsageError(f"--db {text}" if text.startswith(path) else f"cannot use --db {path}: {text}") from None
    except OSError as exc:
        raise UsageError(f"cannot open --db {path}: {exc.strerror or exc}") from None
    try:
        return frontier.counts()
    finally:
        frontier.close()


def _remove_frontier(path: str) -> None:
    """Remove a frontier file this run created, and what SQLite keeps beside it."""
    for name in (path, *(f"{path}{suffix}" for suffix in SQLITE_SIDE_FILES)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _check_shared(url: str, crawl: str) -> None:
    """One clear line for a --frontier that cannot be reached or used, before anything starts."""
    try:
        prepare_frontier(url, crawl=crawl)
    except FrontierError as exc:  # it names the crawl and host:port/db, never a password
        raise UsageError(f"cannot use --frontier: {exc}") from None


def _first_failures(args: argparse.Namespace, db: str, since: float) -> list[tuple[str, str]]:
    """The first URLs that ended in 'error' since ``since`` (this run), with why, as the frontier
    recorded them (with --frontier: any worker's, read without joining the crawl); none when it
    cannot be opened again."""
    options: dict[str, Any] = {} if args.frontier is None else {"crawl": args.crawl}
    try:
        return frontier_failures(db if args.frontier is None else args.frontier, since, FAILURES_SHOWN, **options)
    except (FrontierError, OSError):
        return []

"""The ``niofetcher`` command: fetch, testsite, demo."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sqlite3
import sys
import tempfile
from collections.abc import Sequence
from typing import TextIO

from .._version import __version__
from ..config import FetcherConfig
from ..crawl.crawler import CrawlConfig
from ..crawl.frontier import Frontier, FrontierError
from ..fetcher import NIOFetcher
from ..models import FetchResult
from ..urls import parse_target
from .crawl import PageWriter, ResumeError, StopSignals, print_summary, run_crawl


class UsageError(Exception):
    """Raised for bad command-line input; printed as one line, exit status 2."""


class CommandFailed(Exception):
    """Raised when a command cannot go on (a full disk, a dead fetcher loop); printed as one line, exit status 1."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except UsageError as exc:
        print(f"niofetcher: error: {exc}", file=sys.stderr)
        return 2
    except CommandFailed as exc:
        print(f"niofetcher: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # an I/O error of a file the command writes: a full disk, a failing device
        where = f": {exc.filename}" if exc.filename is not None else ""
        print(f"niofetcher: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("niofetcher: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="niofetcher", description="Fetch web pages fast and politely.")
    parser.add_argument("--version", action="version", version=f"niofetcher {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    fetch = commands.add_parser("fetch", help="fetch URLs and print one line per result")
    fetch.add_argument("urls", nargs="+", metavar="URL")
    fetch.add_argument("--out", metavar="FILE", help="also write one JSON record per result to FILE")
    _add_fetcher_options(fetch)
    fetch.set_defaults(run=_run_fetch)

    crawl = commands.add_parser(
        "crawl", help="crawl from seed URLs; rerun with the same --db to resume",
        description="Crawl from seed URLs. Ctrl-C or SIGTERM stops gracefully (fetches in flight finish, "
                    "exit status as for a complete crawl); a second one more than a second later abandons "
                    "them (status 130). Either way, rerun with the same --db to resume.",
    )
    crawl.add_argument("seeds", nargs="+", metavar="SEED")
    crawl.add_argument("--db", default="crawl.sqlite", help="the frontier database (default crawl.sqlite)")
    crawl.add_argument("--max-pages", type=_positive_int, default=None, metavar="N")
    crawl.add_argument("--max-depth", type=_non_negative_int, default=None, metavar="D")
    crawl.add_argument("--out", metavar="FILE",
                       help="write one JSON record per page to FILE: a new crawl appends to it, a resumed one "
                            "first cuts it back to the end of the last page --db recorded")
    crawl.add_argument("--warc", metavar="FILE",
                       help="write request and response records to a WARC file (.gz: gzip), appended to and "
                            "cut back on a resume as --out is")
    crawl.add_argument("--allowed-domain", action="append", default=None, metavar="DOMAIN",
                       help="follow links only within DOMAIN and its subdomains "
                            "(repeatable; default: the seeds' hosts)")
    crawl.add_argument("--include", action="append", default=[], metavar="REGEX", help="follow only URLs matching")
    crawl.add_argument("--exclude", action="append", default=[], metavar="REGEX", help="never follow URLs matching")
    crawl.add_argument("--no-robots", action="store_true", help="do not fetch or obey robots.txt")
    crawl.add_argument("--delay", type=_non_negative_float, default=0.0, metavar="S",
                       help="least time between two requests to one host (robots.txt Crawl-delay may raise it)")
    crawl.add_argument("--extractor", choices=("bs4", "lxml"), default="bs4")
    crawl.add_argument("--parse-workers", type=_positive_int, default=2, metavar="N")
    crawl.add_argument("--parse-mode", choices=("process", "thread"), default="process")
    crawl.add_argument("--max-attempts", type=_positive_int, default=3, metavar="N")
    crawl.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                       help="a progress bar on a terminal, periodic lines otherwise (default auto)")
    _add_fetcher_options(crawl)
    crawl.set_defaults(run=_run_crawl)

    site = commands.add_parser("testsite", help="serve a generated local test site until Ctrl-C")
    site.add_argument("--port", type=int, default=8080, help="first port; host k listens on port+k (default 8080)")
    site.add_argument("--hosts", type=_positive_int, default=1, help="number of hosts (ports)")
    site.add_argument("--pages", type=_positive_int, default=100, help="pages per host")
    site.add_argument("--delay", type=_non_negative_float, default=0.0, metavar="MS", help="latency per response in ms")
    site.add_argument("--page-size", type=_positive_int, default=2048, help="approximate page size in bytes")
    site.add_argument("--tls-cert", metavar="FILE",
                      help="serve HTTPS with this PEM certificate (chain); needs --tls-key")
    site.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert (may be the same file)")
    site.add_argument("--no-tickets", action="store_true",
                      help="with TLS: send no session tickets, so every new connection does a full handshake")
    site.set_defaults(run=_run_testsite)

    demo = commands.add_parser("demo", help="start a local test site and crawl it")
    demo.add_argument("--hosts", type=_positive_int, default=4)
    demo.add_argument("--pages", type=_positive_int, default=500, help="pages per host")
    demo.add_argument("--delay", type=_non_negative_float, default=5.0, metavar="MS", help="latency per response in ms")
    demo.add_argument("--per-host", type=_positive_int, default=4, help="connections per host")
    demo.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto")
    demo.set_defaults(run=_run_demo)
    return parser


def _add_fetcher_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--per-host", type=_positive_int, default=2, help="connections per host (default 2)")
    parser.add_argument("--connections", type=_positive_int, default=256, help="connections in total (default 256)")
    parser.add_argument("--resolve", action="append", default=[], metavar="HOST:PORT:ADDR",
                        help="use ADDR for HOST:PORT, like curl --resolve (repeatable)")
    parser.add_argument("--deny-private", action="store_true",
                        help="refuse private, loopback and link-local addresses after resolution")
    parser.add_argument("--user-agent", default=None)
    parser.add_argument("--connect-timeout", type=_positive_float, default=10.0, metavar="S")
    parser.add_argument("--read-timeout", type=_positive_float, default=30.0, metavar="S")
    parser.add_argument("--request-timeout", type=_positive_float, default=120.0, metavar="S")


def _config_from(args: argparse.Namespace, **extra: object) -> FetcherConfig:
    resolve = {}
    for entry in args.resolve:
        host, sep, rest = entry.partition(":")
        port, sep2, address = rest.partition(":")
        if not (host and sep and sep2 and port.isdigit() and address):
            raise UsageError(f"--resolve takes HOST:PORT:ADDR, not {entry!r}")
        resolve[f"{host.lower()}:{port}"] = address.strip("[]")
    options = {
        "max_connections": args.connections,
        "max_connections_per_host": args.per_host,
        "resolve": resolve,
        "connect_timeout": args.connect_timeout,
        "read_timeout": args.read_timeout,
        "request_timeout": args.request_timeout,
        "deny_networks": ("private", "loopback", "link-local") if args.deny_private else (),
    }
    if args.user_agent:
        options["user_agent"] = args.user_agent
    options.update(extra)
    try:
        return FetcherConfig(**options)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _run_fetch(args: argparse.Namespace) -> int:
    for url in args.urls:
        try:
            parse_target(url)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    config = _config_from(args)
    out = _open_output(args.out)
    failures = 0
    try:
        with StopSignals(_interrupt, "niofetcher: abandoned"), NIOFetcher(config) as fetcher:
            for url in args.urls:
                fetcher.register(url)
            for result in fetcher.results():
                failures += not result.ok
                if out is not None:  # first: a result printed is a result in the file
                    _write_line(out, args.out, json.dumps(_result_record(result)))
                print(_result_line(result), flush=True)
    finally:
        if out is not None:
            # Every line was flushed as it was written; one that could not be is already being raised.
            with contextlib.suppress(OSError):
                out.close()
    return 1 if failures else 0


def _interrupt() -> None:
    """SIGTERM (and SIGINT) in ``fetch``: unwind as Ctrl-C does, shutting the fetcher down."""
    raise KeyboardInterrupt


def _open_output(path: str | None) -> TextIO | None:
    if path is None:
        return None
    try:
        # Line-buffered: a line is in the file when the result is printed, and a write that
        # fails (a full disk) fails there, naming the file, not at close.
        return open(path, "w", encoding="utf-8", buffering=1)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_line(out: TextIO, path: str, line: str) -> None:
    try:
        out.write(line + "\n")
    except OSError as exc:  # flushing: the error of the file descriptor, which names no file
        raise OSError(exc.errno, exc.strerror, path) from None


def _result_line(result: FetchResult) -> str:
    outcome = f"{result.error.value}" if result.error else str(result.status)
    detail = f"  ({result.error_detail})" if result.error else ""
    return f"{outcome:>18} {len(result.body):>9} B {result.elapsed * 1000:8.1f} ms  {result.url}{detail}"


def _result_record(result: FetchResult) -> dict[str, object]:
    return {
        "url": result.url,
        "final_url": result.final_url,
        "status": result.status,
        "content_type": result.header("content-type"),
        "bytes": len(result.body),
        "elapsed": round(result.elapsed, 6),
        "redirects": result.redirects,
        "error": result.error.value if result.error else None,
        "error_detail": result.error_detail or None,
    }


def _run_testsite(args: argparse.Namespace) -> int:
    import ssl

    from ..testing import TestSite, tls_context_from_files

    tls = None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key must be given together")
    if args.tls_cert is not None:
        for path in (args.tls_cert, args.tls_key):
            try:
                open(path, "rb").close()
            except OSError as exc:
                raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            tls = tls_context_from_files(args.tls_cert, args.tls_key, tickets=not args.no_tickets)
        except ssl.SSLError as exc:
            reason = exc.reason or "not a PEM certificate and its private key"
            raise UsageError(f"cannot use --tls-cert {args.tls_cert} with --tls-key {args.tls_key}: {reason}") from None
    elif args.no_tickets:
        raise UsageError("--no-tickets needs --tls-cert and --tls-key")
    try:
        site = TestSite(hosts=args.hosts, pages=args.pages, delay=args.delay / 1000.0,
                        page_size=args.page_size, port=args.port, max_seconds=None, tls=tls)
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    def announce(site: TestSite) -> None:
        for url in site.base_urls:
            print(f"serving {url}", flush=True)

    try:
        site.serve_forever(on_ready=announce)
    except OSError as exc:
        raise UsageError(f"cannot listen on port {args.port}: {exc.strerror or exc}") from None
    return 0


def _run_crawl(args: argparse.Namespace) -> int:
    fetcher_config = _config_from(args, host_delay=args.delay)
    try:
        config = CrawlConfig(
            seeds=args.seeds, db_path=args.db, max_pages=args.max_pages, max_depth=args.max_depth,
            allowed_domains=args.allowed_domain, include=args.include, exclude=args.exclude,
            max_attempts=args.max_attempts, obey_robots=not args.no_robots, parse_workers=args.parse_workers,
            parse_mode=args.parse_mode, extractor=args.extractor, fetcher=fetcher_config,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _check_database(args.db)
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
        raise CommandFailed(f"{exc}: {args.db}") from None
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


def _run_demo(args: argparse.Namespace) -> int:
    from ..testing import TestSite

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
        summary = run_crawl(config, None, args.progress)
        print_summary(summary)
        expected = args.hosts * (args.pages + 1)
        served = site.counters()
        print(f"the site served {served.requests} requests ({expected} pages + {args.hosts} robots.txt) "
              f"over {served.accepted} connections; peak {served.max_open} open at once")
    return 0 if summary.counts["done"] == expected and not summary.errors else 1


def _integer(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}: {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    return _integer(text, 0)


def _positive_int(text: str) -> int:
    return _integer(text, 1)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value

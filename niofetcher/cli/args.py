"""The command line's grammar: every command's options, their value types, and the fetcher's settings from them.

Nothing here imports a command: each subparser names the module that runs it
(``niofetcher.cli.<module>``, with a ``run(args)`` function), imported by
main() only once that command has been chosen. So ``niofetcher fetch``,
``--help`` and ``--version`` load the fetcher alone, not the crawler,
beautifulsoup4, lxml, protego, tqdm, warcio or sqlite3.

The crawl options' defaults are written out here rather than read from
CrawlConfig, which would import the crawler to build the parser;
tests/test_cli_args.py holds the two to the same values.
"""

from __future__ import annotations

import argparse
import math

from .._version import __version__
from ..config import FetcherConfig
from .errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    """The ``niofetcher`` parser. A parsed command's namespace has ``module``: the name, in this package,
    of the module whose ``run(args)`` runs it."""
    parser = argparse.ArgumentParser(prog="niofetcher", description="Fetch web pages fast and politely.")
    parser.add_argument("--version", action="version", version=f"niofetcher {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    fetch = commands.add_parser("fetch", help="fetch URLs and print one line per result")
    fetch.add_argument("urls", nargs="+", metavar="URL")
    fetch.add_argument("--out", metavar="FILE", help="also write one JSON record per result to FILE")
    _add_fetcher_options(fetch)
    fetch.set_defaults(module="fetch")

    crawl = commands.add_parser(
        "crawl", help="crawl from seed URLs; rerun with the same --db to resume",
        description="Crawl from seed URLs. Ctrl-C or SIGTERM stops gracefully (fetches in flight finish, "
                    "exit status as for a complete crawl); a second one more than a second later abandons "
                    "them (status 130). Either way, rerun with the same --db to resume.",
    )
    crawl.add_argument("seeds", nargs="+", metavar="SEED")
    crawl.add_argument("--db", default=None, help="the frontier database, a SQLite file (default crawl.sqlite)")
    crawl.add_argument("--frontier", metavar="URL",
                       help="keep the frontier in PostgreSQL instead: postgresql://user@host:port/db (needs --crawl)")
    crawl.add_argument("--crawl", metavar="NAME", help="the crawl's name in the --frontier database")
    crawl.add_argument("--lease", type=_positive_float, default=10.0, metavar="S",
                       help="with --frontier: seconds this worker owns a host after each renewal (default 10)")
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
    crawl.add_argument("--sitemaps", action="store_true",
                       help="seed also from each seed host's sitemaps: the Sitemap: lines of its robots.txt "
                            "and /sitemap.xml (indexes and gzip included)")
    crawl.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                       help="a progress bar on a terminal, periodic lines otherwise (default auto)")
    _add_fetcher_options(crawl)
    crawl.set_defaults(module="crawl")

    status = commands.add_parser(
        "status", help="where a crawl on a PostgreSQL frontier stands: its URLs, workers and busiest hosts",
        description="Print the URLs per state of a crawl in a --frontier database, its live workers and the "
                    "hosts with the most URLs waiting. It reads only: no worker is started.",
    )
    status.add_argument("--frontier", metavar="URL", required=True, help="postgresql://user@host:port/db")
    status.add_argument("--crawl", metavar="NAME", required=True, help="the crawl's name in that database")
    status.add_argument("--top", type=_positive_int, default=10, metavar="N",
                        help="how many of the busiest hosts to show (default 10)")
    status.set_defaults(module="status")

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
    site.set_defaults(module="site")

    demo = commands.add_parser("demo", help="start a local test site and crawl it")
    demo.add_argument("--hosts", type=_positive_int, default=4)
    demo.add_argument("--pages", type=_positive_int, default=500, help="pages per host")
    demo.add_argument("--delay", type=_non_negative_float, default=5.0, metavar="MS", help="latency per response in ms")
    demo.add_argument("--per-host", type=_positive_int, default=4, help="connections per host")
    demo.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto")
    demo.set_defaults(module="demo")
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


def config_from(args: argparse.Namespace, **extra: object) -> FetcherConfig:
    """The FetcherConfig of the fetcher options (``fetch``, ``crawl``), with ``extra`` fields on top.
    Raises UsageError for a bad ``--resolve`` entry or a value FetcherConfig refuses."""
    resolve = {}
    for entry in args.resolve:
        host, sep, rest = entry.partition(":")
        port, sep2, address = rest.partition(":")
        if not (host and sep and sep2 and port.isdigit() and address):
            raise UsageError(f"--resolve takes HOST:PORT:ADDR, not {entry!r}")
        # Folded here so that a later entry for the same host wins, as with curl, whatever its case.
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

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
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from .._version import __version__
from ..config import FetcherConfig, MiB
from ..extractor_names import EXTRACTORS
from ..throttle import Throttle
from ..urls import parse_target
from .errors import UsageError

#: What ``--help`` says about the exit status of fetch and crawl.
EXIT_STATUS = ("Exit status: 0 when the run ended (HTTP errors and robots.txt refusals are results, not "
               "failures), 1 when it could not go on (an I/O error) or, with --fail-on-error, when a URL "
               "failed; 2 for bad input; 130 when abandoned.")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the problem, and a pointer to ``--help``,
    instead of the whole usage first: the usage of ``crawl`` is twenty lines, and buries the error.

    ``commands``: the top parser's subparsers by name, so that an argument left over, which
    only the top parser sees, is reported with the pointer to its command's ``--help``."""

    commands: dict[str, Parser]

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one line with the pointer to ``--help``, and exit with status 2."""
        self.exit(2, f"niofetcher: error: {message} (see {self.prog} --help)\n")

    def parse_command(self, argv: Sequence[str] | None) -> argparse.Namespace:
        """``parse_args()``, with an unrecognized argument reported by the command it was given to."""
        args, extra = self.parse_known_args(argv)
        if extra:
            self.commands.get(args.command, self).error(f"unrecognized arguments: {' '.join(extra)}")
        return args


class _Help(argparse.HelpFormatter):
    """Every option's default in ``--help``: appended as ``(default X)`` where the help text does not
    already say it, and where there is one (not for a flag, a repeatable option or a default of none)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or not action.option_strings or default in (None, False, [], argparse.SUPPRESS):
            return text
        return f"{text} (default %(default)s)".lstrip()


def build_parser() -> Parser:
    """The ``niofetcher`` parser. A parsed command's namespace has ``module``: the name, in this package,
    of the module whose ``run(args)`` runs it."""
    parser = Parser(prog="niofetcher", description="Fetch web pages fast and politely.", formatter_class=_Help)
    parser.add_argument("--version", action="version", version=f"niofetcher {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = commands.choices

    fetch = commands.add_parser("fetch", help="fetch URLs and print one line per result", formatter_class=_Help,
                                epilog=EXIT_STATUS)
    fetch.add_argument("urls", nargs="*", metavar="URL", help="URLs to fetch (or give --seeds-file)")
    fetch.add_argument("--out", metavar="FILE",
                       help="also write one JSON record per result to FILE, appended to it (as crawl --out); "
                            "'-': standard output, and the result lines go to standard error")
    fetch.add_argument("--warc", metavar="FILE",
                       help="also write each result's request and response records to a WARC file (.gz: gzip), "
                            "appended to it (as crawl --warc)")
    fetch.add_argument("--links", action="store_true",
                       help="with --out: parse each 2xx HTML result for its title and links, and list the "
                            "links' URLs in its record")
    _add_fetcher_options(fetch)
    fetch.set_defaults(module="fetch")

    crawl = commands.add_parser(
        "crawl", help="crawl from seed URLs; rerun with the same --db to resume", formatter_class=_Help,
        description="Crawl from seed URLs. Ctrl-C or SIGTERM stops gracefully (fetches in flight finish, "
                    "exit status as for a complete crawl); a second one more than a second later abandons "
                    "them (status 130). Either way, rerun with the same --db to resume.",
        epilog=EXIT_STATUS,
    )
    crawl.add_argument("seeds", nargs="*", metavar="SEED", help="URLs to start from (or give --seeds-file)")
    crawl.add_argument("--db", default=None, help="the frontier database, a SQLite file (default crawl.sqlite)")
    crawl.add_argument("--frontier", metavar="URL",
                       help="keep the frontier in PostgreSQL instead: postgresql://user@host:port/db (needs --crawl)")
    crawl.add_argument("--crawl", metavar="NAME", help="the crawl's name in the --frontier database")
    crawl.add_argument("--lease", type=_positive_float, default=10.0, metavar="S",
                       help="with --frontier: seconds this worker owns a host after each renewal (default 10)")
    crawl.add_argument("--max-pages", type=_positive_int, default=None, metavar="N",
                       help="the page budget: stop once N URLs of this --db are done or failed, over all "
                            "its runs (default: no limit)")
    crawl.add_argument("--max-depth", type=_non_negative_int, default=None, metavar="D",
                       help="follow links at most D hops from a seed; the seeds are depth 0 (default: no limit)")
    crawl.add_argument("--max-pages-per-host", type=_positive_int, default=None, metavar="N",
                       help="follow no more links to a host once N of its URLs are in the crawl (scheme, host "
                            "and port; the seeds always go in, and count) (default: no limit)")
    crawl.add_argument("--max-url-length", type=_non_negative_int, default=None, metavar="N",
                       help="do not follow a link longer than N characters (default 2048; 0: no limit)")
    crawl.add_argument("--max-path-repeats", type=_non_negative_int, default=None, metavar="N",
                       help="do not follow a link whose path has one segment more than N times, as "
                            "/a/b/a/b/a/b/ has a three times (default 2; 0: no limit)")
    crawl.add_argument("--strip-param", action="append", default=None, metavar="NAME",
                       help="drop this query parameter (and ;NAME= path parameter) from every URL, so that "
                            "session IDs make no new URLs; case-insensitive, * a wildcard (repeatable; it "
                            "replaces the default jsessionid, phpsessid, sid, sessionid, utm_*; "
                            "--strip-param none strips nothing)")
    crawl.add_argument("--dedup", choices=("exact", "near"), default=None,
                       help="a page whose text is that of a page already done on its host (exact: the same words; "
                            "near: a 64-bit simhash within 3 bits) is done as its duplicate, its links not "
                            "followed (default: no duplicate detection)")
    crawl.add_argument("--revisit", type=_duration, default=None, metavar="DURATION",
                       help="keep the crawl: a done URL is due again this long after its fetch (s, m, h, d: "
                            "1d), fetched with a conditional GET; a run fetches what is due now and ends "
                            "(run it from cron) (default: done is done)")
    crawl.add_argument("--min-revisit", type=_duration, default=None, metavar="DURATION",
                       help="with --revisit: the shortest interval a page that changes goes down to (default "
                            "1h, or --revisit when shorter)")
    crawl.add_argument("--max-revisit", type=_duration, default=None, metavar="DURATION",
                       help="with --revisit: the longest interval a page that does not change goes up to, and "
                            "the wait before a failed URL is tried again (default 30d, or --revisit when longer)")
    crawl.add_argument("--fixed-revisit", action="store_true",
                       help="with --revisit: keep every interval at --revisit, changed or not")
    crawl.add_argument("--estimate-rate", action="store_true",
                       help="with --revisit: estimate how often each page changes from its visits and give it "
                            "the interval that keeps the most pages fresh for the requests made (a page "
                            "changing once per --revisit gets --revisit), instead of Nutch's +-20%% rule")
    crawl.add_argument("--keep-running", action="store_true",
                       help="with --revisit: do not end when nothing is due; sleep until the next URL falls "
                            "due and fetch it, until stopped (Ctrl-C, SIGTERM)")
    crawl.add_argument("--out", metavar="FILE",
                       help="write one JSON record per page to FILE: a new crawl appends to it, a resumed one "
                            "first cuts it back to the end of the last page --db recorded in it; '-': standard "
                            "output (the progress and the summary go to standard error)")
    crawl.add_argument("--links", action="store_true",
                       help="with --out: list each page's links' URLs in its record, not only their number")
    crawl.add_argument("--warc", metavar="FILE",
                       help="write request and response records to a WARC file (.gz: gzip), appended to and "
                            "cut back on a resume as --out is")
    crawl.add_argument("--allowed-domain", action="append", default=None, metavar="DOMAIN",
                       help="follow links only within DOMAIN and its subdomains: example.com, *.example.com, "
                            "or a URL or host:port, whose host is taken (repeatable; default: the seeds' hosts)")
    crawl.add_argument("--include", action="append", default=[], metavar="REGEX", help="follow only URLs matching")
    crawl.add_argument("--exclude", action="append", default=[], metavar="REGEX", help="never follow URLs matching")
    crawl.add_argument("--no-robots", action="store_true", help="do not fetch or obey robots.txt")
    crawl.add_argument("--delay", type=_non_negative_float, default=0.0, metavar="S",
                       help="least time between two requests to one host (robots.txt Crawl-delay may raise it)")
    crawl.add_argument("--follow-nofollow", action="store_true",
                       help='follow links of pages that say nofollow, and rel="nofollow" links')
    crawl.add_argument("--extractor", choices=EXTRACTORS, default="bs4",
                       help="the HTML link extractor; selectolax needs the selectolax package")
    crawl.add_argument("--parse-workers", type=_positive_int, default=2, metavar="N",
                       help="processes (or threads) that parse pages")
    crawl.add_argument("--parse-mode", choices=("process", "thread"), default="process",
                       help="parse in processes, or in threads of this one")
    crawl.add_argument("--max-attempts", type=_positive_int, default=3, metavar="N",
                       help="fetches of a URL at most: an error or a --retry-status is tried again; a "
                            "policy refusal (robots.txt, a denied address) never is")
    crawl.add_argument("--retry-status", type=_status, action="append", default=None, metavar="CODE",
                       help="an HTTP status to try again (repeatable; default 429, 500, 502, 503, 504)")
    crawl.add_argument("--sitemaps", action="store_true",
                       help="seed also from each seed host's sitemaps: the Sitemap: lines of its robots.txt "
                            "and /sitemap.xml (indexes and gzip included)")
    crawl.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                       help="a progress bar on a terminal, periodic lines otherwise (default auto)")
    crawl.add_argument("--stop-grace", type=_non_negative_float, default=5.0, metavar="S",
                       help="on Ctrl-C or SIGTERM, wait at most S seconds for fetches in flight, then give "
                            "them back to the frontier as waiting, with no attempt counted")
    _add_fetcher_options(crawl)
    crawl.set_defaults(module="crawl")

    status = commands.add_parser(
        "status", help="where a crawl stands: its URLs per state, workers and busiest hosts",
        formatter_class=_Help,
        description="Print the URLs per state of a crawl in a SQLite --db or a --frontier database, the hosts "
                    "with the most URLs waiting and, on PostgreSQL, its live workers. It reads only: a crawl "
                    "may be running, and no worker is started.",
    )
    status.add_argument("--db", metavar="FILE", help="a SQLite frontier, as crawl --db")
    status.add_argument("--frontier", metavar="URL", help="a PostgreSQL frontier: postgresql://user@host:port/db "
                                                          "(needs --crawl)")
    status.add_argument("--crawl", metavar="NAME", help="the crawl's name in the --frontier database")
    status.add_argument("--top", type=_positive_int, default=10, metavar="N",
                        help="how many of the busiest hosts to show (default 10)")
    status.set_defaults(module="status")

    site = commands.add_parser("testsite", help="serve a generated local test site until Ctrl-C", formatter_class=_Help)
    site.add_argument("--port", type=int, default=8080, help="first port; host k listens on port+k")
    site.add_argument("--hosts", type=_positive_int, default=1, help="number of hosts (ports)")
    site.add_argument("--pages", type=_positive_int, default=100, help="pages per host")
    site.add_argument("--delay", type=_non_negative_float, default=0.0, metavar="MS", help="latency per response in ms")
    site.add_argument("--page-size", type=_positive_int, default=2048, help="approximate page size in bytes")
    site.add_argument("--tls-cert", metavar="FILE",
                      help="serve HTTPS with this PEM certificate (chain); needs --tls-key")
    site.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert (may be the same file)")
    site.add_argument("--no-tickets", action="store_true",
                      help="with TLS: send no session tickets, so every new connection does a full handshake")
    site.add_argument("--traps", action="store_true",
                      help="serve the trap site instead: --pages real pages and a crawler trap behind each "
                           "door (a calendar, session IDs, growing paths, soft 404s, endless pagination), "
                           "on one port")
    site.set_defaults(module="site")

    demo = commands.add_parser("demo", help="start a local test site and crawl it", formatter_class=_Help)
    demo.add_argument("--hosts", type=_positive_int, default=4, help="number of hosts (ports)")
    demo.add_argument("--pages", type=_positive_int, default=500, help="pages per host")
    demo.add_argument("--delay", type=_non_negative_float, default=5.0, metavar="MS", help="latency per response in ms")
    demo.add_argument("--per-host", type=_positive_int, default=4, help="connections per host")
    demo.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto", help="as for crawl")
    demo.set_defaults(module="demo")
    return parser


def _add_fetcher_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds-file", metavar="FILE",
                        help="read more URLs from FILE, one a line ('-': standard input; blank lines, lines "
                             "starting with # and a UTF-8 BOM are skipped; a line that is not one URL is "
                             "reported as FILE:LINE and skipped)")
    parser.add_argument("--fail-on-error", action="store_true",
                        help="exit with status 1 when a URL failed (an error or an HTTP status that is not 2xx)")
    parser.add_argument("--per-host", type=_positive_int, default=2, metavar="N", help="connections per host")
    parser.add_argument("--per-ip", type=_positive_int, metavar="N",
                        help="connections to one resolved address, over every host name on it (default: no limit)")
    parser.add_argument("--ip-delay", type=_non_negative_float, default=0.0, metavar="S",
                        help="seconds between two request starts to one resolved address, whatever the host name "
                             "(default 0)")
    parser.add_argument("--connections", type=_positive_int, default=256, metavar="N", help="connections in total")
    parser.add_argument("-H", "--header", action="append", default=[], metavar="'NAME: VALUE'",
                        help="send this header with every request, like curl -H (repeatable; a later one of "
                             "the same name wins)")
    parser.add_argument("--resolve", action="append", default=[], metavar="HOST:PORT:ADDR",
                        help="use ADDR for HOST:PORT, like curl --resolve (repeatable)")
    parser.add_argument("--proxy", metavar="URL", help="send every request through this HTTP proxy: "
                                                       "http://[user:pass@]host:port")
    parser.add_argument("--no-proxy", action="append", default=[], metavar="HOST",
                        help="go direct to HOST, its subdomains, or an address or network in CIDR form, "
                             "despite --proxy (repeatable, or comma-separated; '*': every host)")
    parser.add_argument("--deny-private", action="store_true",
                        help="refuse private, loopback and link-local addresses after resolution")
    parser.add_argument("--insecure", action="store_true", help="do not check TLS certificates (like curl -k)")
    parser.add_argument("--ca-file", metavar="FILE",
                        help="check TLS certificates against the CAs in this PEM file instead of the system's")
    parser.add_argument("--max-body-size", type=_size, default=10 * MiB, metavar="BYTES",
                        help="longest body taken; a longer one is a too_large error (K, M, G: KiB, MiB, GiB; "
                             "default 10M)")
    parser.add_argument("--user-agent", default=None, metavar="UA",
                        help="the User-Agent header, and the name robots.txt rules are read for "
                             "(default niofetcher/VERSION)")
    parser.add_argument("--cookies", action="store_true",
                        help="keep the cookies responses set (one RFC 6265 jar for the run) and send them where "
                             "their domain, path and Secure flag allow, redirect hops included")
    parser.add_argument("--throttle", action="store_true",
                        help="per-host delays that follow the server: toward its latency / "
                             "--target-concurrency while answers are good, at least doubled by a 429 or "
                             "503, which also pauses the host until its Retry-After")
    parser.add_argument("--target-concurrency", type=_positive_float, metavar="X",
                        help="with --throttle: requests a server should be serving for us at once (default 1)")
    parser.add_argument("--max-delay", type=_positive_float, metavar="S",
                        help="with --throttle: the longest throttled delay (default 60; a longer "
                             "Retry-After still pauses the host, up to an hour)")
    parser.add_argument("--connect-timeout", type=_positive_float, default=10.0, metavar="S",
                        help="seconds to resolve and connect")
    parser.add_argument("--read-timeout", type=_positive_float, default=30.0, metavar="S",
                        help="seconds without a byte from the server")
    parser.add_argument("--request-timeout", type=_positive_float, default=120.0, metavar="S",
                        help="seconds for the whole of a fetch, redirects included")


def urls_from(args: argparse.Namespace, positional: list[str]) -> list[str]:
    """The URLs of the command line and of ``--seeds-file``, in that order, each checked.

    Raises UsageError for a bad URL on the command line, an unreadable file, or no URL at all.  A
    line of the file that is not one URL (two on a line, a typo, text that is not UTF-8) is
    reported on stderr as ``FILE:LINE: why`` and skipped: one bad line of a list of a million does
    not stop the others, as wget -i goes on past one.
    """
    for url in positional:
        _check_url(url, "")
    urls = list(positional)
    if args.seeds_file is not None:
        urls += _seeds_file(args.seeds_file)
    if not urls:
        raise UsageError("no URL given: name at least one, or give --seeds-file FILE")
    return urls


def _seeds_file(path: str) -> list[str]:
    """The URLs of a ``--seeds-file`` (``-``: standard input); each bad line reported and skipped."""
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as file:
                data = file.read()
    except OSError as exc:
        raise UsageError(f"cannot read --seeds-file {name}: {exc.strerror or exc}") from None
    urls = []
    # A BOM, as Windows editors save UTF-8, is not part of the first URL.
    for number, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").splitlines(), 1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            _skip(name, number, f"not UTF-8 text ({exc.reason})")
            continue
        if not line or line.startswith("#"):
            continue
        why = _not_one_url(line)
        if why is not None:
            _skip(name, number, why)
            continue
        urls.append(line)
    return urls


def _not_one_url(line: str) -> str | None:
    """Why ``line`` (stripped) is not one URL, None when it is."""
    parts = line.split()
    reasons = []
    for part in parts:
        try:
            parse_target(part)
        except ValueError as exc:
            reasons.append(str(exc))
    if len(parts) == 1:
        return reasons[0] if reasons else None
    if not reasons:
        return f"{len(parts)} URLs on one line (give one a line)"
    return "white space inside a URL (write a space as %20)" if len(reasons) < len(parts) else reasons[0]


def _skip(name: str, number: int, why: str) -> None:
    print(f"niofetcher: {name}:{number}: {why}; line skipped", file=sys.stderr, flush=True)


def check_frontier_options(args: argparse.Namespace) -> None:
    """A crawl's frontier as ``crawl`` and ``status`` take it: ``--db`` (SQLite) or ``--frontier``
    (PostgreSQL) with its ``--crawl``, not both.  Raises UsageError."""
    if args.frontier is not None and args.db is not None:
        raise UsageError("give --db (a SQLite frontier) or --frontier (a PostgreSQL one), not both")
    if args.crawl is not None and args.frontier is None:
        raise UsageError("--crawl names a crawl in a --frontier database: give --frontier too (a --db file "
                         "holds one crawl)")
    if args.frontier is not None and args.crawl is None:
        raise UsageError("--frontier needs --crawl NAME: the crawl's name in that database")


def _check_url(url: str, where: str) -> None:
    try:
        parse_target(url)
    except ValueError as exc:
        raise UsageError(f"{where}{exc}") from None


# FetcherConfig's fields that an option sets, by the name its ValueError starts with.
_OPTION_OF = {
    "proxy": "--proxy", "no_proxy": "--no-proxy", "ca_file": "--ca-file", "headers": "--header",
    "user_agent": "--user-agent", "resolve": "--resolve",
}
# A header line as curl -H takes it: a field name (RFC 9110 token), a colon, a value without CR, LF or NUL.
_HEADER = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\r\n\0]*?)[ \t]*")


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
    headers: dict[str, str] = {}
    for entry in args.header:
        match = _HEADER.fullmatch(entry)
        if match is None:
            raise UsageError(f"--header takes 'NAME: VALUE', not {entry!r}")
        # A later one of the same name wins, whatever its case: one header of each name is sent.
        headers = {k: v for k, v in headers.items() if k.lower() != match[1].lower()}
        headers[match[1]] = match[2]
    options = {
        "max_connections": args.connections,
        "max_connections_per_host": args.per_host,
        "max_connections_per_ip": args.per_ip,
        "ip_delay": args.ip_delay,
        "cookies": args.cookies,
        "resolve": resolve,
        "connect_timeout": args.connect_timeout,
        "read_timeout": args.read_timeout,
        "request_timeout": args.request_timeout,
        "deny_networks": ("private", "loopback", "link-local") if args.deny_private else (),
        "headers": headers,
        "verify_tls": not args.insecure,
        "ca_file": args.ca_file,
        "max_body_size": args.max_body_size,
        "proxy": args.proxy,
        "no_proxy": tuple(host.strip() for entry in args.no_proxy for host in entry.split(",")),
    }
    if args.user_agent is not None:
        options["user_agent"] = args.user_agent
    options["throttle"] = _throttle(args)
    options.update(extra)
    try:
        return FetcherConfig(**options)
    except ValueError as exc:
        text = str(exc)
        field = re.match(r"\w*", text)[0]  # type: ignore[index]  # \w* always matches
        option = _OPTION_OF.get(field)
        raise UsageError(option + text[len(field):] if option else text) from None


def _throttle(args: argparse.Namespace) -> Throttle | None:
    """The Throttle of --throttle and the options that tune it; UsageError for those without it."""
    tuning = {"target_concurrency": args.target_concurrency, "max_delay": args.max_delay}
    if not args.throttle:
        for name, value in tuning.items():
            if value is not None:
                raise UsageError(f"--{name.replace('_', '-')} tunes --throttle, which is not given")
        return None
    return Throttle(**{name: value for name, value in tuning.items() if value is not None})


def _integer(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}: {text!r}")
    return value


def _status(text: str) -> int:
    value = _integer(text, 100)
    if value > 599:
        raise argparse.ArgumentTypeError(f"not an HTTP status (100-599): {text!r}")
    return value


_UNITS = {"K": 1024, "M": MiB, "G": 1024 * MiB}


def _size(text: str) -> int:
    unit = _UNITS.get(text[-1:].upper())
    number = text[:-1] if unit is not None else text
    if not number.isdigit() or int(number) < 1:
        raise argparse.ArgumentTypeError(f"not a positive number of bytes (K, M, G allowed): {text!r}")
    return int(number) * (unit or 1)


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(text: str) -> float:
    """A positive duration in seconds: a number with a unit (s, m, h, d: ``90m``, ``1.5d``), or
    without one, seconds."""
    unit = _DURATION_UNITS.get(text[-1:].lower())
    number = text[:-1] if unit is not None else text
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration (a number with s, m, h or d: 1d, 12h): {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive duration: {text!r}")
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

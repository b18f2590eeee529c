"""The ``niofetcher`` command: fetch, testsite, demo."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Optional, Sequence, TextIO

from . import __version__
from .config import FetcherConfig
from .fetcher import NIOFetcher
from .models import FetchResult
from .urls import parse_target


class UsageError(Exception):
    """Raised for bad command-line input; printed as one line, exit status 2."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except UsageError as exc:
        print(f"niofetcher: error: {exc}", file=sys.stderr)
        return 2
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

    site = commands.add_parser("testsite", help="serve a generated local test site until Ctrl-C")
    site.add_argument("--port", type=int, default=8080, help="first port; host k listens on port+k (default 8080)")
    site.add_argument("--hosts", type=_positive_int, default=1, help="number of hosts (ports)")
    site.add_argument("--pages", type=_positive_int, default=100, help="pages per host")
    site.add_argument("--delay", type=_non_negative_float, default=0.0, metavar="MS", help="latency per response in ms")
    site.add_argument("--page-size", type=_positive_int, default=2048, help="approximate page size in bytes")
    site.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this PEM certificate (chain); needs --tls-key")
    site.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert (may be the same file)")
    site.add_argument("--no-tickets", action="store_true",
                      help="with TLS: send no session tickets, so every new connection does a full handshake")
    site.set_defaults(run=_run_testsite)

    demo = commands.add_parser("demo", help="start a local test site and fetch all of its pages")
    demo.add_argument("--hosts", type=_positive_int, default=8)
    demo.add_argument("--pages", type=_positive_int, default=500, help="pages per host")
    demo.add_argument("--delay", type=_non_negative_float, default=5.0, metavar="MS", help="latency per response in ms")
    demo.add_argument("--per-host", type=_positive_int, default=4, help="connections per host")
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


def _config_from(args: argparse.Namespace) -> FetcherConfig:
    resolve = {}
    for entry in args.resolve:
        host, sep, rest = entry.partition(":")
        port, sep2, address = rest.partition(":")
        if not (host and sep and sep2 and port.isdigit() and address):
            raise UsageError(f"--resolve takes HOST:PORT:ADDR, not {entry!r}")
        resolve[f"{host.lower()}:{port}"] = address.strip("[]")
    options = dict(
        max_connections=args.connections,
        max_connections_per_host=args.per_host,
        resolve=resolve,
        connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout,
        request_timeout=args.request_timeout,
        deny_networks=("private", "loopback", "link-local") if args.deny_private else (),
    )
    if args.user_agent:
        options["user_agent"] = args.user_agent
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
        with NIOFetcher(config) as fetcher:
            for url in args.urls:
                fetcher.register(url)
            for result in fetcher.results():
                failures += not result.ok
                print(_result_line(result), flush=True)
                if out is not None:
                    out.write(json.dumps(_result_record(result)) + "\n")
    finally:
        if out is not None:
            out.close()
    return 1 if failures else 0


def _open_output(path: Optional[str]) -> Optional[TextIO]:
    if path is None:
        return None
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _result_line(result: FetchResult) -> str:
    outcome = f"{result.error.value}" if result.error else str(result.status)
    detail = f"  ({result.error_detail})" if result.error else ""
    return f"{outcome:>18} {len(result.body):>9} B {result.elapsed * 1000:8.1f} ms  {result.url}{detail}"


def _result_record(result: FetchResult) -> dict:
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

    from .testsite import TestSite, tls_context_from_files

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


def _run_demo(args: argparse.Namespace) -> int:
    from .testsite import TestSite

    config = FetcherConfig(max_connections_per_host=args.per_host, max_connections=args.per_host * args.hosts)
    with TestSite(hosts=args.hosts, pages=args.pages, delay=args.delay / 1000.0) as site:
        urls = site.page_urls()
        print(f"test site: {args.hosts} hosts x {args.pages} pages, {args.delay:g} ms latency, "
              f"{args.per_host} connections per host", flush=True)
        started = time.monotonic()
        cpu_started = time.process_time()
        ok = errors = 0
        size = 0
        with NIOFetcher(config) as fetcher:
            for url in urls:
                fetcher.register(url)
            next_report = started + 1.0
            for result in fetcher.results():
                ok += result.ok
                errors += not result.ok
                size += len(result.body)
                now = time.monotonic()
                if now >= next_report:
                    rate = (ok + errors) / (now - started)
                    print(f"  {ok + errors:>7} / {len(urls)} pages, {rate:8.0f} pages/s", flush=True)
                    next_report = now + 1.0
            stats = fetcher.stats()
        elapsed = time.monotonic() - started
        cpu = time.process_time() - cpu_started
        peak = max(site.counters(port).max_open for port in site.ports)
        print(f"fetched {ok} pages ({size / 1e6:.1f} MB), {errors} errors, in {elapsed:.2f} s: "
              f"{(ok + errors) / elapsed:.0f} pages/s, {cpu * 1000 / max(1, ok + errors):.3f} CPU ms per page "
              f"(site included)")
        print(f"connections opened: {stats.connections_opened}, requests on reused connections: "
              f"{stats.reused_requests}, peak connections per host seen by the server: {peak} "
              f"(limit {args.per_host})")
    return 0 if errors == 0 else 1


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


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

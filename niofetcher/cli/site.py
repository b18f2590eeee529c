"""The ``testsite`` command: serve a generated local test site (HTTP, or HTTPS with a given certificate)."""

from __future__ import annotations

import argparse
import ssl

from ..testing import TestSite, TrapSite, tls_context_from_files
from .errors import UsageError


def run(args: argparse.Namespace) -> int:
    """Serve the site until Ctrl-C, printing each host's base URL once it listens."""
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
    site: TestSite | TrapSite
    try:
        if args.traps:
            site = _trap_site(args, tls)
        else:
            site = TestSite(hosts=args.hosts, pages=args.pages, delay=args.delay / 1000.0,
                            page_size=args.page_size, port=args.port, max_seconds=None, tls=tls)
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    def announce(site: TestSite | TrapSite) -> None:
        for url in site.base_urls:
            print(f"serving {url}", flush=True)

    try:
        site.serve_forever(on_ready=announce)
    except OSError as exc:
        raise UsageError(f"cannot listen on port {args.port}: {exc.strerror or exc}") from None
    return 0


def _trap_site(args: argparse.Namespace, tls: ssl.SSLContext | None) -> TrapSite:
    """The trap site (``--traps``): one host, plain HTTP, no latency; what it cannot do is one line."""
    if args.hosts != 1 or tls is not None or args.delay:
        raise UsageError("--traps serves one plain-HTTP host with no delay: leave out --hosts, --delay and --tls-cert")
    return TrapSite(pages=args.pages, page_size=args.page_size, port=args.port, max_seconds=None)

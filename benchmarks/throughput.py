"""Throughput of NIOFetcher against the local test site (run in its own process).

    python benchmarks/throughput.py --urls 20000 --hosts 1 --per-host 64
    python benchmarks/throughput.py --hosts 50 --per-host 4 --delay 50 --urls 10000
    python benchmarks/throughput.py --profile      # pyinstrument: where the client's time goes
    python benchmarks/throughput.py --tls --per-host 16                 # HTTPS, keep-alive
    python benchmarks/throughput.py --tls --max-requests-per-connection 10 [--no-resume]

Prints pages/s, client CPU ms per page (user + sys of this process), peak RSS,
the site process's CPU ms per page (when psutil is installed: it tells whether
the site was the bottleneck) and, for a latency-bound run, efficiency against
the ideal hosts x per-host / latency.

--tls makes a CA and a certificate with trustme in a temporary directory, runs
the site with them and fetches https:// URLs trusting that CA; it also prints
the handshakes and how many of them resumed a session. --no-resume runs the
site without session tickets, so every new connection is a full handshake.
Keep-alive hides the handshake cost: --max-requests-per-connection N closes
each connection after N responses, to open many.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _site import make_tls_files, site_process

from niofetcher import FetcherConfig, NIOFetcher


def _site_cpu(pid: int | None) -> float | None:
    """User + system CPU seconds of the site process so far, or None without psutil."""
    if pid is None:
        return None
    try:
        import psutil  # type: ignore[import-untyped,unused-ignore]

        times = psutil.Process(pid).cpu_times()
    except Exception:  # noqa: BLE001 - no psutil, or the process is gone: just not shown
        return None
    return float(times.user + times.system)


def run(urls: list[str], per_host: int, total: int, ca_file: str | None = None,
        max_requests: int | None = None, site_pid: int | None = None) -> dict[str, Any]:
    config = FetcherConfig(max_connections_per_host=per_host, max_connections=total, ca_file=ca_file,
                           max_requests_per_connection=max_requests)
    site_cpu0 = _site_cpu(site_pid)
    cpu0 = os.times()
    t0 = time.perf_counter()
    errors = 0
    size = 0
    with NIOFetcher(config) as fetcher:
        for url in urls:
            fetcher.register(url)
        for result in fetcher.results():
            if not result.ok:
                errors += 1
            size += len(result.body)
        stats = fetcher.stats()
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    site_cpu1 = _site_cpu(site_pid)
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    site_cpu = None if site_cpu0 is None or site_cpu1 is None else site_cpu1 - site_cpu0
    return {
        "pages": len(urls), "errors": errors, "bytes": size, "seconds": wall,
        "pages_per_s": len(urls) / wall, "cpu_ms_per_page": cpu * 1000 / len(urls),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "connections_opened": stats.connections_opened,
        "tls_handshakes": stats.tls_handshakes, "tls_resumed": stats.tls_resumed,
        "tls_sessions_read": stats.tls_sessions_read,
        "site_cpu_ms_per_page": None if site_cpu is None else site_cpu * 1000 / len(urls),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=20000)
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--per-host", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.0, help="server latency per response, ms")
    parser.add_argument("--page-size", type=int, default=4096)
    parser.add_argument("--profile", action="store_true", help="profile the client with pyinstrument")
    parser.add_argument("--tls", action="store_true", help="HTTPS: a trustme CA and certificate, https:// URLs")
    parser.add_argument("--no-resume", action="store_true",
                        help="with --tls: the site sends no session tickets, so every connection is a full handshake")
    parser.add_argument("--max-requests-per-connection", type=int, default=None, metavar="N",
                        help="close each connection after N responses (FetcherConfig.max_requests_per_connection)")
    args = parser.parse_args()
    if args.no_resume and not args.tls:
        parser.error("--no-resume needs --tls")
    if args.max_requests_per_connection is not None and args.max_requests_per_connection < 1:
        parser.error("--max-requests-per-connection must be >= 1")

    pages_per_host = 1000
    with tempfile.TemporaryDirectory(prefix="niofetcher-bench-") as directory:
        tls = make_tls_files(directory) if args.tls else None
        ca_file = tls.ca_file if tls else None
        with site_process(args.hosts, pages_per_host, args.delay, args.page_size,
                          tls=tls, tickets=not args.no_resume) as bases:
            urls = [f"{bases[i % len(bases)]}page/{(i // len(bases)) % pages_per_host}" for i in range(args.urls)]
            total = args.per_host * args.hosts
            options = {"ca_file": ca_file, "max_requests": args.max_requests_per_connection}
            # Warm-up: imports, first connections. Its own fetcher, so its TLS sessions are not reused below.
            run(urls[: min(len(urls), 500)], args.per_host, total, **options)
            pid = bases.process.pid
            if args.profile:
                from pyinstrument import Profiler

                profiler = Profiler(interval=0.0005)
                profiler.start()
                stats = run(urls, args.per_host, total, site_pid=pid, **options)
                profiler.stop()
                print(profiler.output_text(unicode=True, color=False, show_all=False))
            else:
                stats = run(urls, args.per_host, total, site_pid=pid, **options)
    scheme = "https" if args.tls else "http"
    per_connection = "" if args.max_requests_per_connection is None else \
        f", <= {args.max_requests_per_connection} requests per connection"
    resume = ", no session resumption" if args.no_resume else ""
    print(f"{stats['pages']} pages ({scheme}), {args.hosts} host(s) x {args.per_host} connections, "
          f"{args.delay:g} ms latency, {args.page_size} B pages{per_connection}{resume}")
    print(f"  {stats['pages_per_s']:10.0f} pages/s   ({stats['seconds']:.2f} s, {stats['errors']} errors)")
    print(f"  {stats['cpu_ms_per_page']:10.3f} CPU ms per page (client)")
    if stats["site_cpu_ms_per_page"] is not None:
        print(f"  {stats['site_cpu_ms_per_page']:10.3f} CPU ms per page (site process)")
    print(f"  {stats['peak_rss_mb']:10.1f} MB peak RSS (client)")
    print(f"  {stats['connections_opened']:10d} connections opened")
    if args.tls:
        print(f"  {stats['tls_handshakes']:10d} TLS handshakes, {stats['tls_resumed']} resumed, "
              f"{stats['tls_sessions_read']} sessions read")
    if args.delay > 0:
        ideal = args.hosts * args.per_host / (args.delay / 1000.0)
        print(f"  {stats['pages_per_s'] / ideal:10.3f} efficiency (ideal {ideal:.0f} pages/s)")


if __name__ == "__main__":
    main()

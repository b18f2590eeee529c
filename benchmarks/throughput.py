"""Throughput of NIOFetcher against the local test site (run in its own process).

    python benchmarks/throughput.py --urls 20000 --hosts 1 --per-host 64
    python benchmarks/throughput.py --hosts 50 --per-host 4 --delay 50 --urls 10000
    python benchmarks/throughput.py --profile      # pyinstrument: where the client's time goes

Prints pages/s, client CPU ms per page (user + sys of this process), peak RSS
and, for a latency-bound run, efficiency against the ideal
hosts x per-host / latency.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _site import site_process  # noqa: E402

from niofetcher import FetcherConfig, NIOFetcher  # noqa: E402


def run(urls: list[str], per_host: int, total: int) -> dict:
    config = FetcherConfig(max_connections_per_host=per_host, max_connections=total)
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
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {
        "pages": len(urls), "errors": errors, "bytes": size, "seconds": wall,
        "pages_per_s": len(urls) / wall, "cpu_ms_per_page": cpu * 1000 / len(urls),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "connections_opened": stats.connections_opened,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=20000)
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--per-host", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.0, help="server latency per response, ms")
    parser.add_argument("--page-size", type=int, default=4096)
    parser.add_argument("--profile", action="store_true", help="profile the client with pyinstrument")
    args = parser.parse_args()

    pages_per_host = 1000
    with site_process(args.hosts, pages_per_host, args.delay, args.page_size) as bases:
        urls = [f"{bases[i % len(bases)]}page/{(i // len(bases)) % pages_per_host}" for i in range(args.urls)]
        total = args.per_host * args.hosts
        run(urls[: min(len(urls), 500)], args.per_host, total)  # warm-up: imports, first connections
        if args.profile:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.0005)
            profiler.start()
            stats = run(urls, args.per_host, total)
            profiler.stop()
            print(profiler.output_text(unicode=True, color=False, show_all=False))
        else:
            stats = run(urls, args.per_host, total)
    print(f"{stats['pages']} pages, {args.hosts} host(s) x {args.per_host} connections, "
          f"{args.delay:g} ms latency, {args.page_size} B pages")
    print(f"  {stats['pages_per_s']:10.0f} pages/s   ({stats['seconds']:.2f} s, {stats['errors']} errors)")
    print(f"  {stats['cpu_ms_per_page']:10.3f} CPU ms per page (client)")
    print(f"  {stats['peak_rss_mb']:10.1f} MB peak RSS (client)")
    print(f"  {stats['connections_opened']:10d} connections opened")
    if args.delay > 0:
        ideal = args.hosts * args.per_host / (args.delay / 1000.0)
        print(f"  {stats['pages_per_s'] / ideal:10.3f} efficiency (ideal {ideal:.0f} pages/s)")


if __name__ == "__main__":
    main()

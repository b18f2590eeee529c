"""A crawl of a generated site beside a plain fetch of the same URLs.

    python benchmarks/crawl.py                       # 4 hosts x 2,500 pages = 10,000 pages
    python benchmarks/crawl.py --hosts 10 --pages 1000 --extractor lxml --parse-mode thread
    python benchmarks/crawl.py --corpus ../shared/corpus/pages --pages 500   # real pages as bodies

The test site runs in its own process. First the crawler crawls it from host
0's index (robots.txt, frontier, link extraction, on_page); then a bare
NIOFetcher fetches exactly the URLs the crawl fetched, with the same
connection limits. The gap between the two rates is what parsing and the
frontier cost. No assertions: this measures, the tests judge.

With ``--corpus`` the site serves the real pages of that folder as its page
bodies (page i gets file i mod n, with the site's links inserted), so that
parsing costs what it costs on the web. The crawl then follows only the
site's own pages (``include``): the real pages' relative links would
otherwise make it a crawl of 404s.

CPU per page counts this process and every process it started for the crawl
(the parse processes, the forkserver), but not the test site. The parse
processes are children of multiprocessing's forkserver, never reaped by this
process, so os.times() would miss them: a thread samples their CPU times
while they live.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _site import site_process

from niofetcher import CrawlConfig, Crawler, FetcherConfig, NIOFetcher
from niofetcher.extractor_names import EXTRACTORS


class TreeCPU:
    """User + system CPU seconds of this process and its descendants, less the ``excluded`` pids.

    Looking for descendants reads every process of the machine (~1.5 ms), so it is done
    every ``find_every`` seconds; the CPU times of those found are read every ``interval``.
    """

    def __init__(self, excluded: set[int], interval: float = 0.05, find_every: float = 0.5) -> None:
        self._excluded = excluded
        self._interval = interval
        self._find_every = find_every
        self._me = psutil.Process()
        self._known: dict[int, psutil.Process] = {}
        self._last: dict[int, float] = {}  # descendant pid -> its CPU seconds when last seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)

    def _find(self) -> None:
        for child in self._me.children(recursive=True):
            if child.pid not in self._excluded:
                self._known.setdefault(child.pid, child)

    def _sample(self) -> None:
        for pid, child in list(self._known.items()):
            try:
                times = child.cpu_times()
            except psutil.Error:
                del self._known[pid]  # gone: its last reading stays
                continue
            self._last[pid] = times.user + times.system

    def _sample_until_stopped(self) -> None:
        found_at = time.monotonic()
        while not self._stop.wait(self._interval):
            if time.monotonic() - found_at >= self._find_every:
                self._find()
                found_at = time.monotonic()
            self._sample()

    def __enter__(self) -> TreeCPU:
        self._find()
        self._sample()
        self._start = dict(self._last)
        times = self._me.cpu_times()
        self._own_start = times.user + times.system
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        times = self._me.cpu_times()
        self.own_seconds = times.user + times.system - self._own_start
        self.seconds = self.own_seconds + sum(cpu - self._start.get(pid, 0.0) for pid, cpu in self._last.items())


def _serve_corpus(folder: str, hosts: int, pages: int, ready: multiprocessing.Queue[list[str]]) -> None:
    """Runs in a process of its own: a TestSite whose page bodies are the files of ``folder``."""
    from niofetcher.testing import TestSite

    names = sorted(name for name in os.listdir(folder) if name.endswith((".html", ".htm")))
    bodies = []
    for name in names:
        with open(os.path.join(folder, name), "rb") as f:
            bodies.append(f.read())
    site = TestSite(hosts=hosts, pages=pages, bodies=bodies, max_seconds=None)
    site.start()
    ready.put(site.base_urls)
    threading.Event().wait()  # until terminated


@contextlib.contextmanager
def corpus_site_process(folder: str, hosts: int, pages: int) -> Iterator[tuple[list[str], int]]:
    """(base URLs, pid) of a corpus TestSite in a spawned process."""
    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    process = context.Process(target=_serve_corpus, args=(folder, hosts, pages, ready), daemon=True)
    process.start()
    try:
        yield ready.get(timeout=60), process.pid  # type: ignore[misc]
    finally:
        process.terminate()
        process.join(10)


@contextlib.contextmanager
def any_site(args: argparse.Namespace) -> Iterator[tuple[list[str], int]]:
    if args.corpus:
        with corpus_site_process(args.corpus, args.hosts, args.pages) as site:
            yield site
    else:
        with site_process(args.hosts, args.pages, args.delay, args.page_size) as bases:
            yield list(bases), bases.process.pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--pages", type=int, default=2500, help="pages per host")
    parser.add_argument("--per-host", type=int, default=16)
    parser.add_argument("--delay", type=float, default=0.0, help="server latency per response, ms")
    parser.add_argument("--page-size", type=int, default=4096)
    parser.add_argument("--corpus", metavar="DIR", help="serve the HTML files of DIR as page bodies")
    parser.add_argument("--extractor", choices=EXTRACTORS, default="bs4")
    parser.add_argument("--parse-mode", choices=("process", "thread"), default="process")
    parser.add_argument("--parse-workers", type=int, default=2)
    parser.add_argument("--on-page", action="store_true", help="hand every page to an on_page that counts it")
    args = parser.parse_args()

    fetcher_config = FetcherConfig(max_connections_per_host=args.per_host, max_connections=args.per_host * args.hosts)
    handed_over: list[object] = []
    on_page = handed_over.append if args.on_page else None
    with any_site(args) as (bases, site_pid), tempfile.TemporaryDirectory() as folder:
        db = os.path.join(folder, "crawl.sqlite")
        config = CrawlConfig(
            seeds=[bases[0]], db_path=db, allowed_domains=["127.0.0.1"], extractor=args.extractor,
            parse_mode=args.parse_mode, parse_workers=args.parse_workers, fetcher=fetcher_config,
            include=[r"\A\w+://[^/]+/(page/\d+)?\Z"] if args.corpus else (),
        )
        with TreeCPU(excluded={site_pid}) as crawl_cpu:
            summary = Crawler(config, on_page).run()
        with sqlite3.connect(db) as conn:
            urls = [row[0] for row in conn.execute("SELECT url FROM urls WHERE state = 'done'")]

        errors = 0
        with TreeCPU(excluded={site_pid}) as fetch_cpu:
            started = time.perf_counter()
            with NIOFetcher(fetcher_config) as fetcher:
                for url in urls:
                    fetcher.register(url)
                for result in fetcher.results():
                    errors += not result.ok
            fetch_seconds = time.perf_counter() - started

    pages = summary.pages
    bodies = f"the pages of {args.corpus}" if args.corpus else f"pages of ~{args.page_size} B"
    print(f"site: {args.hosts} hosts x {args.pages} {bodies}, {args.delay:g} ms latency, "
          f"{args.per_host} connections per host")
    print(f"crawl ({args.extractor}, {args.parse_workers} {args.parse_mode} workers"
          f"{', on_page' if on_page else ''}): {summary.counts}, errors {summary.errors or 0}")
    print(f"  crawl      {pages / summary.seconds:8.0f} pages/s   {summary.seconds:6.2f} s   "
          f"{crawl_cpu.seconds * 1000 / max(1, pages):6.3f} CPU ms/page, of which this process "
          f"{crawl_cpu.own_seconds * 1000 / max(1, pages):.3f} (the rest: parse processes)")
    print(f"  fetch only {len(urls) / fetch_seconds:8.0f} pages/s   {fetch_seconds:6.2f} s   "
          f"{fetch_cpu.seconds * 1000 / max(1, len(urls)):6.3f} CPU ms/page   ({errors} errors)")


if __name__ == "__main__":
    main()

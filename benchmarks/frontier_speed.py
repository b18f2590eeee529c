"""Speed of the crawl frontier (niofetcher.crawl.frontier) as it grows: 100k, 1M, 10M URLs.

    python benchmarks/frontier_speed.py                                    # 100,000 and 1,000,000 URLs
    python benchmarks/frontier_speed.py --sizes 100000,1000000,10000000    # issue 11's run: ~4.5 GB, long
    python benchmarks/frontier_speed.py --sizes 20000,100000 --window 10000 --json /tmp/f.json
    python benchmarks/frontier_speed.py --path /data/big.db                # that file, kept afterwards
    python benchmarks/frontier_speed.py --backend postgres --sizes 100000 --hosts 1000
    python benchmarks/frontier_speed.py --backend postgres --dsn postgresql://me@db:5432/crawls

``--backend postgres`` measures the PostgresFrontier instead, in crawl ``bench`` (dropped first) of
``--dsn``, or of a throwaway cluster started for the run (niofetcher.testing.PostgresCluster: fsync
and synchronous_commit off, so its commits never wait for a disk).  The size is then the crawl's
tables and indexes (pg_total_relation_size), and each size also gets the round trips to the
server per URL of the crawl-like mix, counted from libpq's protocol trace of one more group
(the ReadyForQuery messages: one per wait for the server).

One frontier file grows step by step to each of ``--sizes`` with add_many()
in batches of ``--batch`` new ``(url, depth, parent, priority)`` entries;
the growth rate (new URLs/s) is printed every tenth of a step, so that the
curve shows.  The URLs are about 100 bytes, each one new, spread over
``--hosts`` host names the way the web is (host k of them gets a share
about proportional to 1/k: a few big hosts, many small ones), 50 links found
on each page (the parent).

At each size, with the frontier holding that many URLs, each of these is
timed over a window of ``--window`` URLs (at most the size):

1. add new: new URLs, in add_many() batches of ``--batch``;
2. add known: URLs picked at random among those known, the same batches,
   every one a duplicate (the common case late in a crawl);
3. claim: claim(512) until the window is claimed;
4. complete: complete_many() of what was claimed, in batches of 512;
5. crawl-like: window/10 pages, as the crawler goes: claim(512), then for
   each group of ``--batch``/50 pages add_many() of their 50 links each
   (5 new, 45 known) and complete_many() of the group;
6. the file (db + wal) in bytes per URL; close(), and the reopen:
   ``Frontier(path)`` then ``counts()``.

The URLs a window adds stay: the frontier is "at" a size give or take one
window.  Only the frontier's calls are timed (perf_counter around each);
the URLs of a batch are made before its call.  Rates are URLs per second
(pages per second for the crawl-like mix).  A table, one line per size,
ends the output; ``--json FILE`` writes the same figures.  Issue 11's
target: add, claim and complete each at least 50,000 URLs/s at 10M, and
at least as fast per URL at 10M as at 100k.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, TypeVar

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from niofetcher.crawl.frontier import Frontier, FrontierURL

Entry = tuple[str, int, str | None, int]
T = TypeVar("T")
P = ParamSpec("P")

CLAIM = 512
LINKS_PER_PAGE = 50
NEW_PER_PAGE = 5

_WORDS = (
    "apple", "river", "stone", "cloud", "maple", "ember", "harbor", "meadow",
    "copper", "falcon", "garden", "island", "lantern", "marble", "orchid", "summit",
)
_SECTIONS = (
    "news/2024", "blog/posts", "products/catalog", "wiki/Category", "forum/thread",
    "docs/reference/api", "about/team", "shop/item", "events/archive", "articles",
)
_MASK64 = (1 << 64) - 1


def _mix(i: int) -> int:
    """64 well-mixed bits of ``i`` (splitmix64's finaliser): URL ``i`` is the same URL every time."""
    z = (i * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class URLs:
    """URL number ``i`` of a synthetic web of ``hosts`` host names, as a pure function of ``i``, so
    that known URLs can be made again (duplicates) without keeping millions of strings."""

    def __init__(self, hosts: int) -> None:
        self.hosts = hosts

    def url(self, i: int) -> str:
        """About 100 bytes, already in normalised form; the host is Zipf-spread (host k ~ 1/k)."""
        bits = _mix(i)
        # hosts ** u for u uniform in [0, 1) has density ~ 1/x: host k gets a share ~ 1/k.
        host = int((self.hosts + 1) ** ((bits & 0xFFFFFFFF) / 2**32)) - 1
        word = _WORDS[(bits >> 32) & 15]
        other = _WORDS[(bits >> 36) & 15]
        section = _SECTIONS[((bits >> 40) & 0xFF) % len(_SECTIONS)]
        return (
            f"https://www.{_WORDS[host & 15]}-site{host}.example.com/{section}/"
            f"{word}-{other}-{i}.html?ref={other}&page={(bits >> 48) & 63}"
        )

    @staticmethod
    def depth(i: int) -> int:
        """The depth of URL ``i``, growing slowly with ``i`` (breadth first: later URLs lie deeper).
        Always the same for one URL, so that adding it again never takes the "nearer" path."""
        return 1 + i.bit_length() // 2

    def entry(self, i: int, parent: str | None = None) -> Entry:
        """``(url, depth, parent, priority)`` of URL ``i``, found on ``parent`` (default: page ``i // 50``)."""
        return (self.url(i), self.depth(i), self.url(i // LINKS_PER_PAGE) if parent is None else parent, 0)


def timed(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> tuple[T, float]:
    """What ``fn(*args, **kwargs)`` returns, and the seconds it took."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def per_second(n: int, seconds: float) -> float:
    """``n`` per second (0 when nothing was timed)."""
    return n / seconds if seconds > 0 else 0.0


def chunks(items: list[T], size: int) -> Iterable[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter)."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def file_bytes(path: str) -> tuple[int, int]:
    """The sizes of the frontier's file and of its write-ahead log (0 when there is none)."""
    sizes = [os.path.getsize(path + suffix) if os.path.exists(path + suffix) else 0 for suffix in ("", "-wal")]
    return sizes[0], sizes[1]


class Bench:
    """One frontier file, grown to each size and measured there."""

    def __init__(self, path: str, urls: URLs, batch: int, seed: int) -> None:
        self.path = path
        self.urls = urls
        self.batch = batch
        self.rng = random.Random(seed)
        self.frontier: Any = self.open()
        self.known = sum(self.frontier.counts().values())  # URLs 0 .. known-1 are in the file
        self.growth: list[dict[str, float]] = []

    def open(self) -> Any:
        """The frontier measured (a new object each time)."""
        return Frontier(self.path)

    def storage_bytes(self) -> tuple[int, int]:
        """The bytes the frontier takes: its file and its log."""
        return file_bytes(self.path)

    def extra_figures(self, figures: dict[str, Any]) -> None:
        """More figures a backend measures at a size (none for SQLite)."""

    def _add(self, entries: list[Entry]) -> tuple[int, float]:
        return timed(self.frontier.add_many, entries)

    def _new_entries(self, n: int) -> list[Entry]:
        entries = [self.urls.entry(i) for i in range(self.known, self.known + n)]
        self.known += n
        return entries

    def grow(self, size: int) -> None:
        """Add new URLs until the frontier holds ``size``, printing the rate every tenth of the way."""
        if self.known >= size:
            print(f"  (already {self.known:,} URLs)")
            return
        step = max((size - self.known) // 10, self.batch)
        while self.known < size:
            start, end = self.known, min(self.known + step, size)
            seconds = 0.0
            while self.known < end:
                entries = self._new_entries(min(self.batch, end - self.known))
                added, took = self._add(entries)
                assert added == len(entries), (added, len(entries))
                seconds += took
            rate = per_second(end - start, seconds)
            self.growth.append({"from": start, "to": end, "seconds": seconds, "new_per_s": rate})
            print(f"  grow {start:>12,} → {end:>12,}   {rate:>10,.0f} new URLs/s")

    def add_new(self, window: int) -> float:
        """Seconds to add ``window`` new URLs in batches."""
        seconds = 0.0
        for start in range(0, window, self.batch):
            entries = self._new_entries(min(self.batch, window - start))
            added, took = self._add(entries)
            assert added == len(entries), (added, len(entries))
            seconds += took
        return seconds

    def add_known(self, window: int) -> float:
        """Seconds to add ``window`` known URLs (picked at random) in batches: every one a duplicate."""
        seconds = 0.0
        for start in range(0, window, self.batch):
            picks = [self.rng.randrange(self.known) for _ in range(min(self.batch, window - start))]
            added, took = self._add([self.urls.entry(i) for i in picks])
            assert added == 0, added
            seconds += took
        return seconds

    def claim(self, window: int) -> tuple[list[list[FrontierURL]], float]:
        """Claimed batches of up to 512 URLs, ``window`` in all (fewer if fewer wait), and the seconds."""
        batches: list[list[FrontierURL]] = []
        seconds = 0.0
        left = window
        while left > 0:
            claimed, took = timed(self.frontier.claim, min(CLAIM, left))
            seconds += took
            if not claimed:
                break
            batches.append(claimed)
            left -= len(claimed)
        return batches, seconds

    def complete(self, batches: list[list[FrontierURL]]) -> float:
        """Seconds to complete_many() each claimed batch."""
        seconds = 0.0
        for claimed in batches:
            outcomes = [(item.url, 200) for item in claimed]
            seconds += timed(self.frontier.complete_many, outcomes)[1]
        return seconds

    def crawl(self, pages: int) -> tuple[int, int, float]:
        """Claim, then per group of pages add their links and complete them, as the crawler does:
        pages done, links added, and the seconds."""
        done = links = 0
        seconds = 0.0
        group = max(self.batch // LINKS_PER_PAGE, 1)
        while done < pages:
            claimed, took = timed(self.frontier.claim, min(CLAIM, pages - done))
            seconds += took
            if not claimed:
                break
            for members in chunks(claimed, group):
                entries: list[Entry] = []
                for item in members:
                    found = list(range(self.known, self.known + NEW_PER_PAGE))
                    self.known += NEW_PER_PAGE
                    found += [self.rng.randrange(self.known) for _ in range(LINKS_PER_PAGE - NEW_PER_PAGE)]
                    entries += [self.urls.entry(i, item.url) for i in found]
                outcomes = [(item.url, 200) for item in members]
                added, took = self._add(entries)
                seconds += took + timed(self.frontier.complete_many, outcomes)[1]
                assert added == NEW_PER_PAGE * len(members), added
                links += len(entries)
            done += len(claimed)
        return done, links, seconds

    def reopen(self) -> tuple[float, float]:
        """close(), then ``Frontier(path)`` and ``counts()``: the seconds of each part."""
        close = timed(self.frontier.close)[1]
        start = time.perf_counter()
        self.frontier = self.open()
        counts = self.frontier.counts()
        reopen = time.perf_counter() - start
        assert sum(counts.values()) == self.known, (counts, self.known)
        return close, reopen

    def measure(self, size: int, window: int) -> dict[str, Any]:
        """Every figure at ``size``, printed and returned."""
        window = min(window, size)
        held = self.known
        new_s = self.add_new(window)
        known_s = self.add_known(window)
        batches, claim_s = self.claim(window)
        claimed = sum(len(b) for b in batches)
        complete_s = self.complete(batches)
        pages, links, crawl_s = self.crawl(max(window // 10, 1))
        db, wal = self.storage_bytes()
        urls = self.known
        close_s, reopen_s = self.reopen()
        figures = {
            "size": size,
            "urls_at_start": held,
            "urls_at_end": urls,
            "window": window,
            "add_new_per_s": per_second(window, new_s),
            "add_known_per_s": per_second(window, known_s),
            "claim_per_s": per_second(claimed, claim_s),
            "complete_per_s": per_second(claimed, complete_s),
            "crawl_pages_per_s": per_second(pages, crawl_s),
            "crawl_links_per_s": per_second(links, crawl_s),
            "db_bytes": db,
            "wal_bytes": wal,
            "bytes_per_url": (db + wal) / urls,
            "close_ms": close_s * 1000,
            "reopen_ms": reopen_s * 1000,
        }
        us = 1e6
        print(f"  add new        {figures['add_new_per_s']:>10,.0f} URLs/s   {new_s * us / window:6.1f} µs/URL")
        print(f"  add known      {figures['add_known_per_s']:>10,.0f} URLs/s   {known_s * us / window:6.1f} µs/URL")
        print(f"  claim({CLAIM})     {figures['claim_per_s']:>10,.0f} URLs/s   {claim_s * us / claimed:6.1f} µs/URL")
        print(f"  complete_many  {figures['complete_per_s']:>10,.0f} URLs/s   {complete_s * us / claimed:6.1f} µs/URL")
        print(f"  crawl-like     {figures['crawl_pages_per_s']:>10,.0f} pages/s  "
              f"({pages:,} pages, {figures['crawl_links_per_s']:,.0f} links/s)")
        print(f"  file           {(db + wal) / 1e6:10.1f} MB (wal {wal / 1e6:.1f} MB), "
              f"{figures['bytes_per_url']:.0f} bytes per URL at {urls:,} URLs")
        print(f"  close          {figures['close_ms']:10.1f} ms")
        print(f"  reopen         {figures['reopen_ms']:10.1f} ms (Frontier(path) + counts())")
        self.extra_figures(figures)
        return figures


class PostgresBench(Bench):
    """The same measures of a PostgresFrontier, crawl ``bench`` at ``dsn``."""

    def __init__(self, dsn: str, urls: URLs, batch: int, seed: int) -> None:
        import psycopg

        self.dsn = dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS bench CASCADE")
        super().__init__(dsn, urls, batch, seed)

    def open(self) -> Any:
        from niofetcher.crawl.frontier.postgres import PostgresFrontier

        return PostgresFrontier(self.dsn, "bench")

    def storage_bytes(self) -> tuple[int, int]:
        conn = self.frontier.store._conn
        (total,) = conn.execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = 'bench' AND c.relkind = 'r'"
        ).fetchone()
        conn.commit()
        return int(total), 0

    def extra_figures(self, figures: dict[str, Any]) -> None:
        """Round trips per page of one more crawl-like group, from libpq's trace (see above)."""
        with tempfile.NamedTemporaryFile("r", suffix=".trace") as trace:
            descriptor = os.open(trace.name, os.O_WRONLY)
            pgconn = self.frontier.store._conn.pgconn
            pgconn.trace(descriptor)
            try:
                pages, links, _seconds = self.crawl(CLAIM)
            finally:
                pgconn.untrace()
                os.close(descriptor)
            waits = sum(1 for line in trace if "\tB\t" in line and "\tReadyForQuery" in line)
        figures["round_trips_per_page"] = waits / pages
        figures["round_trips_per_url"] = waits / (pages + links)
        print(f"  round trips    {figures['round_trips_per_page']:10.3f} per page claimed, linked and completed "
              f"({waits} for {pages} pages and their {links} links)")


def table(rows: list[dict[str, Any]]) -> str:
    """The final table: one line per size."""
    head = (
        f"{'size':>12} {'add new/s':>10} {'add known/s':>11} {'claim/s':>9} {'complete/s':>10} "
        f"{'crawl pages/s':>13} {'bytes/URL':>9} {'close ms':>9} {'reopen ms':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['size']:>12,} {r['add_new_per_s']:>10,.0f} {r['add_known_per_s']:>11,.0f} "
            f"{r['claim_per_s']:>9,.0f} {r['complete_per_s']:>10,.0f} {r['crawl_pages_per_s']:>13,.0f} "
            f"{r['bytes_per_url']:>9.0f} {r['close_ms']:>9.1f} {r['reopen_ms']:>9.1f}"
        )
    return "\n".join(lines)


def sizes_arg(text: str) -> list[int]:
    """``--sizes``: increasing positive integers, comma separated."""
    sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    if not sizes or any(n <= 0 for n in sizes) or sizes != sorted(set(sizes)):
        raise argparse.ArgumentTypeError(f"sizes must be increasing positive integers, not {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> None:
    """Grow one frontier to each size, measure there, print a table (and write --json)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=sizes_arg, default=[100_000, 1_000_000], help="default: 100000,1000000")
    ap.add_argument("--batch", type=int, default=1000, help="entries per add_many() call")
    ap.add_argument("--hosts", type=int, default=10_000, help="host names the URLs are spread over")
    ap.add_argument("--window", type=int, default=50_000, help="URLs per measurement at each size")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--path", help="frontier file, kept afterwards (default: a new temporary file)")
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--dsn", help="with --backend postgres: the database (default: a throwaway cluster)")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.hosts < 1 or args.window < 1:
        ap.error("--batch, --hosts and --window must be at least 1")
    if args.backend == "postgres":
        run_postgres(args)
        return

    with tempfile.TemporaryDirectory() as tmp:
        path = args.path or os.path.join(tmp, "frontier.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        print(f"frontier {path}; sizes {', '.join(f'{n:,}' for n in args.sizes)}; "
              f"batches of {args.batch}, {args.hosts:,} hosts, window {args.window:,}; "
              f"SQLite {sqlite3.sqlite_version}, Python {platform.python_version()}")
        bench = Bench(path, URLs(args.hosts), args.batch, args.seed)
        report(args, bench, run_sizes(args, bench), sqlite=sqlite3.sqlite_version, machine=platform.machine())


def run_sizes(args: argparse.Namespace, bench: Bench) -> list[dict[str, Any]]:
    """Grow the frontier to each of ``--sizes`` and measure there: the rows of the table."""
    rows = []
    try:
        for size in args.sizes:
            print(f"growing to {size:,}")
            bench.grow(size)
            print(f"at {size:,} URLs")
            rows.append(bench.measure(size, args.window))
    finally:
        bench.frontier.close()
    return rows


def report(args: argparse.Namespace, bench: Bench, rows: list[dict[str, Any]], **about: object) -> None:
    """The table, and with --json the figures (``about`` names the backend's versions)."""
    print()
    print(table(rows))
    if args.json:
        figures = {"args": vars(args), **about, "python": platform.python_version(), "cpus": os.cpu_count(),
                   "growth": bench.growth, "sizes": rows}
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)
            out.write("\n")
        print(f"figures written to {args.json}")


def run_postgres(args: argparse.Namespace) -> None:
    """main() for --backend postgres: the same steps and table (and --json), on PostgreSQL."""
    from niofetcher.testing import PostgresCluster

    with contextlib.ExitStack() as stack:
        dsn = args.dsn or stack.enter_context(PostgresCluster()).dsn
        print(f"crawl 'bench' at {dsn}; sizes {', '.join(f'{n:,}' for n in args.sizes)}; "
              f"batches of {args.batch}, {args.hosts:,} hosts, window {args.window:,}; Python {platform.python_version()}")
        bench = PostgresBench(dsn, URLs(args.hosts), args.batch, args.seed)
        rows = run_sizes(args, bench)
    report(args, bench, rows)


if __name__ == "__main__":
    main()

"""Speed of the SQLite crawl frontier (niofetcher.crawl.frontier), in its own process.

    python benchmarks/frontier_speed.py                    # 100,000 URLs in a temporary file
    python benchmarks/frontier_speed.py --urls 1000000 --path /tmp/big.db
    python benchmarks/frontier_speed.py --memory           # ":memory:" instead of a file
    python benchmarks/frontier_speed.py --commit-every 1   # no batched commits

Phases, each timed on its own:

1. add: --urls URLs in add() calls of --add-batch (50, about one page's
   links), spread over 100 hosts, each URL new;
2. add known: the same URLs again (every one a duplicate, the common case
   late in a crawl); then add nearer: the same URLs at a smaller depth, so
   that every one gets the smaller depth (rare in a crawl: the slow path);
3. claim + complete: claim(--claim-batch) until nothing waits, complete()
   of each claimed URL one by one, as the crawler does with its results;
   claim and complete are also timed apart;
4. crawl-like: a fresh frontier, for --crawl-pages pages: claim a batch,
   then per page complete() and add() of 50 links of which 5 are new;
5. looking: counts(), next_due() and state() on the full frontier.

Prints operations (URLs) per second for each, the file size, and the time
to reopen the file (which counts the rows of each state once).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from niofetcher.crawl.frontier import Frontier


def url_of(i: int) -> str:
    return f"http://host{i % 100}.example.com/section-{i % 37}/page-{i}.html?ref=list&id={i}"


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>10,.0f} /s   ({n:,} in {seconds:.2f} s)"


def timed(fn: Callable[[], int]) -> tuple[int, float]:
    start = time.perf_counter()
    n = fn()
    return n, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--urls", type=int, default=100_000)
    ap.add_argument("--add-batch", type=int, default=50)
    ap.add_argument("--claim-batch", type=int, default=100)
    ap.add_argument("--crawl-pages", type=int, default=20_000)
    ap.add_argument("--commit-every", type=int, default=128)
    ap.add_argument("--path", help="frontier file (default: a new file in a temporary directory)")
    ap.add_argument("--memory", action="store_true", help='use ":memory:"')
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        if args.memory:
            path = ":memory:"
        else:
            path = args.path or os.path.join(tmp, "frontier.db")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
        print(f"frontier {path}, {args.urls:,} URLs, add batches of {args.add_batch}, "
              f"claim batches of {args.claim_batch}, commit_every={args.commit_every}")
        urls = [url_of(i) for i in range(args.urls)]
        batches = [urls[i:i + args.add_batch] for i in range(0, len(urls), args.add_batch)]
        parent = "http://host0.example.com/index.html"

        frontier = Frontier(path, commit_every=args.commit_every)

        def add_all(depth: int = 2) -> int:
            return sum(frontier.add(batch, depth=depth, parent=parent) for batch in batches)

        added, seconds = timed(add_all)
        assert added == args.urls, added
        print(f"add (new)            {rate(added, seconds)}")

        again, seconds = timed(add_all)
        assert again == 0, again
        print(f"add (known)          {rate(args.urls, seconds)}")

        again, seconds = timed(lambda: add_all(depth=1))
        assert again == 0, again
        print(f"add (known, nearer)  {rate(args.urls, seconds)}")

        claim_time = complete_time = 0.0
        done = 0
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            claimed = frontier.claim(args.claim_batch)
            t1 = time.perf_counter()
            if not claimed:
                break
            for item in claimed:
                frontier.complete(item.url, 200)
            complete_time += time.perf_counter() - t1
            claim_time += t1 - t0
            done += len(claimed)
        total = time.perf_counter() - start
        assert done == args.urls, done
        print(f"claim + complete     {rate(done, total)}")
        print(f"  claim alone        {rate(done, claim_time)}")
        print(f"  complete alone     {rate(done, complete_time)}")

        n = 2000
        probes: dict[str, Callable[[int], object]] = {
            "counts()": lambda i: frontier.counts(),
            "next_due()": lambda i: frontier.next_due(),
            "state()": lambda i: frontier.state(urls[i * 37 % len(urls)]),
        }
        for name, probe in probes.items():
            start = time.perf_counter()
            for i in range(n):
                probe(i)
            print(f"{name:<21}{rate(n, time.perf_counter() - start)}")
        frontier.close()

        if path != ":memory:":
            size = sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
            print(f"file size            {size / 1e6:10.1f} MB ({size / args.urls:.0f} bytes per URL)")
            start = time.perf_counter()
            Frontier(path).close()
            print(f"reopen               {(time.perf_counter() - start) * 1000:10.1f} ms")

        # A crawl: each fetched page completes and brings 50 links, 5 of them new.
        crawl_path = ":memory:" if args.memory else os.path.join(tmp, "crawl.db")
        crawl = Frontier(crawl_path, commit_every=args.commit_every)
        crawl.add([url_of(0)])
        pages = links = 0
        next_new = 1
        start = time.perf_counter()
        while pages < args.crawl_pages:
            claimed = crawl.claim(args.claim_batch)
            if not claimed:
                break
            for item in claimed:
                crawl.complete(item.url, 200)
                found = [url_of(next_new + k) for k in range(5)]
                found += [url_of(max(next_new - 1 - k * 7, 0)) for k in range(45)]
                next_new += 5
                crawl.add(found, depth=item.depth + 1, parent=item.url)
                pages += 1
                links += len(found)
        seconds = time.perf_counter() - start
        crawl.close()
        print(f"crawl-like pages     {rate(pages, seconds)}")
        print(f"  links added        {rate(links, seconds)}")


if __name__ == "__main__":
    main()

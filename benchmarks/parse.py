"""Speed of ``parse.extract`` over the real page corpus, for each extractor.

    python benchmarks/parse.py                    # both extractors, best of 5 runs per page
    python benchmarks/parse.py --extractor lxml --repeat 10
    python benchmarks/parse.py --floor            # also: libxml2 parsing alone, the lower bound
    python benchmarks/parse.py --corpus DIR       # or NIOFETCHER_CORPUS=DIR

Each page is extracted --repeat times and its best time kept (the least
disturbed by other processes). Printed per extractor: median and mean ms per
page, wall clock and CPU; pages/s and MB/s over the whole corpus (the sum of
the best times). The corpus is ../shared/corpus/pages/: 100 real pages, a
few KB to 1.6 MB, median ~90 KB. No assertions: this measures, the tests judge.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lxml import etree  # noqa: E402

from niofetcher.parse import EXTRACTORS, extract  # noqa: E402

DEFAULT_CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "pages"


Timings = tuple[list[float], list[float]]


def measure(pages: list[tuple[str, bytes]], run: Callable[[str, bytes], object], repeat: int) -> Timings:
    """Best wall and best CPU seconds of ``run(name, body)`` for each page."""
    walls: list[float] = []
    cpus: list[float] = []
    for name, body in pages:
        run(name, body)  # warm-up: imports, caches
        best_wall = best_cpu = float("inf")
        for _ in range(repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            run(name, body)
            w1, c1 = time.perf_counter(), time.process_time()
            best_wall, best_cpu = min(best_wall, w1 - w0), min(best_cpu, c1 - c0)
        walls.append(best_wall)
        cpus.append(best_cpu)
    return walls, cpus


def report(label: str, walls: list[float], cpus: list[float], total_bytes: int) -> None:
    total = sum(walls)
    print(
        f"{label:<22} {statistics.median(walls) * 1e3:8.2f} {statistics.mean(walls) * 1e3:8.2f}"
        f" {statistics.median(cpus) * 1e3:8.2f} {max(walls) * 1e3:8.1f}"
        f" {len(walls) / total:9.1f} {total_bytes / total / 1e6:7.1f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=Path(os.environ.get("NIOFETCHER_CORPUS") or DEFAULT_CORPUS))
    ap.add_argument("--extractor", choices=EXTRACTORS, action="append", help="default: all")
    ap.add_argument("--repeat", type=int, default=5, help="runs per page; the best counts (default 5)")
    ap.add_argument("--floor", action="store_true", help="also time libxml2 parsing alone (no extraction)")
    args = ap.parse_args()

    files = sorted(args.corpus.glob("*.html")) if args.corpus.is_dir() else []
    if not files:
        print(f"parse: no *.html pages in {args.corpus}", file=sys.stderr)
        return 2
    pages = [(f.stem, f.read_bytes()) for f in files]
    sizes = [len(body) for _, body in pages]
    total_bytes = sum(sizes)
    print(
        f"{len(pages)} pages, {total_bytes / 1e6:.1f} MB, median {statistics.median(sizes) / 1024:.0f} KB,"
        f" best of {args.repeat} runs per page"
    )
    print(f"{'':<22} {'median':>8} {'mean':>8} {'cpu med':>8} {'max':>8} {'pages/s':>9} {'MB/s':>7}")
    print(f"{'':<22} {'ms':>8} {'ms':>8} {'ms':>8} {'ms':>8}")
    for extractor in args.extractor or EXTRACTORS:

        def run(name: str, body: bytes, extractor: str = extractor) -> object:
            return extract(body, f"https://example.org/articles/{name}/", extractor=extractor)

        walls, cpus = measure(pages, run, args.repeat)
        report(f"extract {extractor}", walls, cpus, total_bytes)
    if args.floor:
        walls, cpus = measure(
            pages,
            lambda name, body: etree.fromstring(body, etree.HTMLParser(encoding="utf-8", huge_tree=True)),
            args.repeat,
        )
        report("libxml2 parse alone", walls, cpus, total_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())

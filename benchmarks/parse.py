"""Speed of ``parse.extract`` over the real page corpus, for each extractor.

    python benchmarks/parse.py                    # every extractor (bs4, lxml, selectolax), best of 5 runs per page
    python benchmarks/parse.py --extractor lxml --repeat 10
    python benchmarks/parse.py --floor            # also: libxml2's and Lexbor's parsing alone, the lower bounds
    python benchmarks/parse.py --corpus DIR       # or NIOFETCHER_CORPUS=DIR
    python benchmarks/parse.py --pools            # parse processes: ProcessPoolExecutor vs ParseProcessPool
    python benchmarks/parse.py --split            # also: parsing (harvest) and absolutizing (_finish) apart
    python benchmarks/parse.py --docs 40          # 40 generated documentation pages instead of the corpus

Each page is extracted --repeat times and its best time kept (the least
disturbed by other processes). Printed per extractor: median and mean ms per
page, wall clock and CPU; pages/s and MB/s over the whole corpus (the sum of
the best times). The corpus is ../shared/corpus/pages/: 100 real pages, a
few KB to 1.6 MB, median ~90 KB. No assertions: this measures, the tests judge.

``--docs N`` measures N generated pages shaped like a Sphinx build instead
(:func:`doc_pages`): thousands of relative links a page, most with a
fragment, which is where making links absolute once cost more than parsing.
``--split`` times, per page, the extractor's harvest (libxml2's parse and the
walk that gathers raw hrefs, links_only) and ``_finish`` (every URL made
absolute, duplicates dropped) on its own: the two add up to ``links_only``
extraction.

``--pools`` compares, in one run, the crawler's old parse processes
(``ProcessPoolExecutor`` on a forkserver context) with ``ParseProcessPool``,
both with --workers processes (default 2), on ``niofetcher.crawl.parsing.parse_pages``
over the corpus cut into jobs of up to 32 pages, --rounds times over, all
submitted at once: pages/s, and the parent's CPU per job (what the hand-over
takes from the crawler's own threads). Then the hand-back alone: one job at a
time whose function is ``pickle.loads`` of a real job's output, so that it
carries a real reply each way and does no parsing: the round trip per job.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import pickle
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lxml import etree

from niofetcher.crawl.parse import EXTRACTORS, _finish, _harvester, extract
from niofetcher.crawl.parse.harvest import Harvest
from niofetcher.crawl.parse.links_lxml import _parser
from niofetcher.crawl.parsing import ParseInput, parse_pages
from niofetcher.crawl.policy import LinkScope
from niofetcher.crawl.workers import ParseProcessPool

DEFAULT_CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "pages"


Timings = tuple[list[float], list[float]]
Page = tuple[str, bytes]  # (page URL, body)


def doc_pages(count: int, seed: int = 15) -> list[Page]:
    """``count`` pages shaped like a Sphinx build's: a toctree sidebar, cross references, permalinks.

    The site has modules in ``api/`` and guides in ``guide/``; every page links to
    every module and guide in its sidebar, to the members of a few dozen modules
    (``../api/mod3.html#mod3.Class2.meth4``), to its own sections (``#section-7``),
    and to ``genindex.html`` and ``search.html``: ~2,700 links a page, ~90% with a
    fragment, ~1,900 distinct hrefs and ~180 distinct once the fragment is cut.
    """
    rng = random.Random(seed)
    modules, guides = [f"mod{i}" for i in range(120)], [f"guide{i}" for i in range(60)]
    pages: list[Page] = []
    for n in range(count):
        here = "api" if n % 2 else "guide"
        name = modules[n % len(modules)] if n % 2 else guides[n % len(guides)]

        def to(folder: str, page: str, here: str = here) -> str:
            return f"{page}.html" if folder == here else f"../{folder}/{page}.html"

        parts = ['<!DOCTYPE html><html><head><meta charset="utf-8"><title>', name, " - Docs</title>",
                 '<link rel="stylesheet" href="../_static/basic.css"></head><body><div class="sphinxsidebar"><ul>']
        parts += [f'<li class="toctree-l1"><a class="reference internal" href="{to("api", m)}">{m}</a></li>' for m in modules]
        parts += [f'<li class="toctree-l1"><a class="reference internal" href="{to("guide", g)}">{g}</a></li>' for g in guides]
        parts.append('</ul><a href="../genindex.html">Index</a> <a href="../search.html">Search</a></div><div class="body">')
        for section in range(60):
            parts.append(f'<section id="section-{section}"><h2>Section {section}<a class="headerlink" href="#section-{section}">¶</a></h2><p>')
            for _ in range(40):
                target = rng.choice(modules[:30])
                member = f"{target}.Class{rng.randrange(8)}.meth{rng.randrange(12)}"
                parts.append(f'See <a class="reference internal" href="{to("api", target)}#{member}"><code>{member}</code></a>, ')
            parts.append(f'and <a href="#section-{rng.randrange(60)}">above</a>.</p></section>')
        parts.append('<a href="../_sources/index.rst.txt" rel="nofollow">Source</a></div></body></html>')
        pages.append((f"https://docs.example.org/en/latest/{here}/{name}.html", "".join(parts).encode()))
    return pages


def measure(pages: list[Page], run: Callable[[str, bytes], object], repeat: int) -> Timings:
    """Best wall and best CPU seconds of ``run(url, body)`` for each page."""
    walls: list[float] = []
    cpus: list[float] = []
    for url, body in pages:
        run(url, body)  # warm-up: imports, caches
        best_wall = best_cpu = float("inf")
        for _ in range(repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            run(url, body)
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
    ap.add_argument("--floor", action="store_true", help="also time libxml2's and Lexbor's parsing alone (no extraction)")
    ap.add_argument("--split", action="store_true", help="also time harvest and _finish apart (links_only)")
    ap.add_argument("--docs", type=int, default=0, metavar="N", help="N generated documentation pages, not the corpus")
    ap.add_argument("--pools", action="store_true", help="compare the parse process pools instead")
    ap.add_argument("--workers", type=int, default=2, help="--pools: processes per pool (default 2)")
    ap.add_argument("--rounds", type=int, default=5, help="--pools: times over the corpus (default 5)")
    args = ap.parse_args()

    if args.docs:
        pages = doc_pages(args.docs)
    else:
        files = sorted(args.corpus.glob("*.html")) if args.corpus.is_dir() else []
        if not files:
            print(f"parse: no *.html pages in {args.corpus}", file=sys.stderr)
            return 2
        pages = [(f"https://example.org/articles/{f.stem}/", f.read_bytes()) for f in files]
    if args.pools:
        return compare_pools(pages, list(args.extractor or EXTRACTORS), args.workers, args.rounds)
    sizes = [len(body) for _, body in pages]
    total_bytes = sum(sizes)
    print(
        f"{len(pages)} pages, {total_bytes / 1e6:.1f} MB, median {statistics.median(sizes) / 1024:.0f} KB,"
        f" best of {args.repeat} runs per page"
    )
    print(f"{'':<22} {'median':>8} {'mean':>8} {'cpu med':>8} {'max':>8} {'pages/s':>9} {'MB/s':>7}")
    print(f"{'':<22} {'ms':>8} {'ms':>8} {'ms':>8} {'ms':>8}")
    for extractor in args.extractor or EXTRACTORS:

        def run(url: str, body: bytes, extractor: str = extractor) -> object:
            return extract(body, url, extractor=extractor)

        walls, cpus = measure(pages, run, args.repeat)
        report(f"extract {extractor}", walls, cpus, total_bytes)
        if args.split:
            split(pages, extractor, args.repeat, total_bytes)
    if args.floor:
        walls, cpus = measure(
            pages,
            lambda name, body: etree.fromstring(body, _parser()),
            args.repeat,
        )
        report("libxml2 parse alone", walls, cpus, total_bytes)
        if "selectolax" in (args.extractor or EXTRACTORS):
            from selectolax.lexbor import LexborHTMLParser

            walls, cpus = measure(pages, lambda name, body: LexborHTMLParser(body), args.repeat)
            report("Lexbor parse alone", walls, cpus, total_bytes)
    return 0


def split(pages: list[Page], extractor: str, repeat: int, total_bytes: int) -> None:
    """links_only extraction, then its two halves: the harvest (parse and walk) and _finish (absolutize)."""
    harvester = _harvester(extractor)
    harvests: dict[str, Harvest] = {}

    def harvest(url: str, body: bytes) -> None:
        harvests[url] = Harvest()
        harvester(body, harvests[url], True)

    for label, run in (("links_only", lambda url, body: extract(body, url, extractor=extractor, links_only=True)),
                       ("  harvest", harvest),
                       ("  _finish", lambda url, body: _finish(harvests[url], url))):
        walls, cpus = measure(pages, run, repeat)
        report(f"{label} {extractor}", walls, cpus, total_bytes)


Pools = dict[str, Callable[[], concurrent.futures.Executor]]


def compare_pools(pages: list[Page], extractors: list[str], workers: int, rounds: int) -> int:
    inputs: list[ParseInput] = [(body, url, "text/html") for url, body in pages]
    jobs = [inputs[i : i + 32] for i in range(0, len(inputs), 32)] * rounds
    scope = LinkScope(domains=("example.org",), include=(), exclude=(), follow_nofollow=False)
    reply = pickle.dumps(parse_pages(jobs[0], "lxml", scope, False), 5)
    pools: Pools = {
        "ProcessPoolExecutor": lambda: concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("forkserver")
        ),
        "ParseProcessPool": lambda: ParseProcessPool(workers, preload=("niofetcher.crawl.parsing",)),
    }
    count = sum(map(len, jobs))
    print(f"{count} pages in {len(jobs)} jobs of up to 32, {workers} workers; reply of a job: {len(reply) / 1e3:.0f} KB")
    print(f"{'':<22} {'extractor':>9} {'pages/s':>9} {'parent CPU per job: user':>25} {'system':>8} {'hand-back':>10}")
    for extractor in extractors:
        for label, make in pools.items():
            with make() as pool:
                for future in [pool.submit(parse_pages, jobs[0][:1], extractor, scope, False) for _ in range(workers)]:
                    future.result()  # started and imported: what is measured is the steady state
                before, w0 = os.times(), time.perf_counter()
                for future in [pool.submit(parse_pages, job, extractor, scope, False) for job in jobs]:
                    future.result()
                wall, after = time.perf_counter() - w0, os.times()
                user, system = after.user - before.user, after.system - before.system
                trips = []
                for _ in range(50):
                    t0 = time.perf_counter()
                    pool.submit(pickle.loads, reply).result()
                    trips.append(time.perf_counter() - t0)
            print(
                f"{label:<22} {extractor:>9} {count / wall:9.0f} {user / len(jobs) * 1e3:22.2f} ms"
                f" {system / len(jobs) * 1e3:5.2f} ms {statistics.median(trips) * 1e3:7.2f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

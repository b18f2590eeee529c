"""benchmarks/webshaped.py runs with --quick for niofetcher on loopback: a smoke test, no clock.

The figures (issue 31's goals: 3x Scrapy per core, 2 x 57 pages/s per core at 242 kB pages) are
the benchmark's business, in docs/benchmarks.md; here only that the TLS site served real pages of
both shapes to a crawl that trusted its CA, the server counted them and the handshakes, and the
table and the goal lines came out. Scrapy is left out: its start-up alone would double the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path("/work/shared/corpus/pages")

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus of real pages is not on this machine"),
]


def test_webshaped_benchmark_prints_its_table(tmp_path: Path) -> None:
    pytest.importorskip("trustme")
    pytest.importorskip("psutil")
    out = tmp_path / "webshaped.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "webshaped.py"), "--quick", "--clients", "niofetcher-lxml",
         "--max-pages", "60", "--json", str(out)],
        check=False, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
        timeout=110,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "| shape | tickets | client |" in run.stdout and "pages/s per core" in run.stdout, run.stdout
    rows = [line for line in run.stdout.splitlines() if line.startswith(("| web75 ", "| chan242 "))]
    # Both shapes with tickets, and the first one again without.
    assert [row.split(" | ")[:3] for row in rows] == [
        ["| web75", "on", "niofetcher-lxml"], ["| web75", "off", "niofetcher-lxml"],
        ["| chan242", "on", "niofetcher-lxml"],
    ], run.stdout
    assert "Chan's crawl" in run.stdout, run.stdout  # the goal line of the 242 kB shape
    figures = json.loads(out.read_text())
    results = figures["results"]
    assert [(r["shape"], r["tickets"]) for r in results] == [("web75", True), ("web75", False), ("chan242", True)]
    for r in results:
        f, served = r["figures"], r["server"]
        assert r["returncode"] == 0 and "error" not in r, r
        assert 1 <= f["pages"] <= 60 + 64, r  # the budget, plus what was in flight when it was reached
        assert served["robots"] >= 1 and served["not_pages"] == 0 and served["tls_failed"] == 0, served
        assert served["tls_handshakes"] >= 1, served  # every page came over TLS
        assert 0 < f["cpu_per_page"] and f["per_core"] > 0 and f["pages_per_s"] > 0, f
        assert r["children"] >= 1 and r["children_cpu"] > 0, r  # the parse processes were measured
        assert r["stages"]["loop"] > 0, r["stages"]
    assert results[1]["server"]["tls_resumed"] == 0  # no tickets: no resumption
    # The shapes are what they say: the second one's pages (median 123 kB) are bigger than the first's (30 kB).
    assert results[2]["server"]["median_size"] > results[0]["server"]["median_size"]


def test_size_shapes_have_the_stated_median_and_mean() -> None:
    import random
    import statistics

    from niofetcher.testing.webshaped import SizeShape

    web = SizeShape.for_mean("web75", 75_000, 2_000_000, median=30_000)
    chan = SizeShape.for_mean("chan242", 242_000, 2_000_000, sigma=web.sigma)
    assert web.median == 30_000 and abs(web.mean - 75_000) < 1 and abs(chan.mean - 242_000) < 1
    assert chan.sigma == web.sigma and 120_000 < chan.median < 126_000
    rng = random.Random(0)
    sizes = [web.draw(rng) for _ in range(20_000)]
    assert max(sizes) <= 2_000_000 and min(sizes) >= 1_000
    assert 28_000 < statistics.median(sizes) < 32_000 and 70_000 < statistics.mean(sizes) < 80_000


def test_corpus_pages_keep_the_crawl_on_the_site_and_are_cut_between_tags() -> None:
    from niofetcher.testing.webshaped import CorpusPages

    page = CorpusPages.clean(b'<base href="/x/"><meta name="robots" content="nofollow"><a href="a/b">'
                             b'<form action="/f"><a href="https://example.org/"><a href=#top><a href="//cdn.example/">')
    assert page == (b'<a href="https://offsite.invalid/a/b"><form action="https://offsite.invalid//f">'
                    b'<a href="https://example.org/"><a href=#top><a href="//cdn.example/">')
    if not CORPUS.is_dir():
        pytest.skip("no corpus")
    corpus = CorpusPages(CORPUS, 200_000)
    for index in range(0, len(corpus), 7):
        for size in (3_000, 30_000, 150_000):
            chunks = corpus.page(index, size, "t", b"<ul><li><a href=\"/page/1\">1</a></li></ul>")
            body = b"".join(bytes(chunk) for chunk in chunks)
            assert len(body) <= size and body.endswith(b"</body></html>\n")
            filler, whole = bytes(chunks[2]), bytes(corpus.padded(index, 10**9))
            # The filler is the padded body up to a "<": the tag that would have been cut is left out whole.
            assert whole.startswith(filler) and whole[len(filler):len(filler) + 1] == b"<"

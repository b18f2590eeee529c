"""benchmarks/throttle.py runs with --quick on loopback and prints its tables: a smoke test, no clock.

The figures (issue 28's goal of 0.8 of the allowed rate with at most 5 % 429s) are the benchmark's
business, in docs/benchmarks.md; here only that every client ran against a fresh server, the
server counted its requests, and the tables, verdicts and trace came out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(180)


def test_throttle_benchmark_prints_its_tables(tmp_path: Path) -> None:
    clients = ["niofetcher-throttle", "niofetcher"]
    try:
        import scrapy  # noqa: F401
        clients.append("scrapy")
    except ImportError:
        pass
    out = tmp_path / "throttle.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "throttle.py"), "--quick", "--duration", "1.5", "--warmup", "0.5", "--rates", "20",
         "--clients", ",".join(clients), "--json", str(out)],
        check=False, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
        timeout=170,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Token bucket" in run.stdout and "200/s ÷ allowed" in run.stdout, run.stdout
    assert "Latency server" in run.stdout and "mean latency ms" in run.stdout, run.stdout
    assert "goal at 20/s" in run.stdout and "trace, niofetcher-throttle" in run.stdout, run.stdout
    figures = json.loads(out.read_text())
    runs = figures["runs"]
    assert [(r["server"], r["client"]) for r in runs] == [(s, c) for s in ("bucket", "latency") for c in clients]
    for r in runs:
        assert r["requests"] > 0 and r["ok"] > 0, r
        assert r["per_second"], r
    # Counted by the server: the unthrottled fetcher is refused, the latency server never refuses.
    by = {(r["server"], r["client"]): r for r in runs}
    assert by["bucket", "niofetcher"]["429"] > 0
    assert all(r["429"] == 0 for r in runs if r["server"] == "latency")
    assert by["bucket", "niofetcher-throttle"]["backoffs"] >= 1

"""benchmarks/distributed.py runs, quick, with 1 and 2 workers, and prints its table: a smoke test, no clock.

The figures are the benchmark's business (issue 12's targets are in docs/benchmarks.md); here
only that each run crawls and counts, and that the table, the check of the per-host limit and
the estimate are printed (the tests of tests/test_distributed_crawl.py judge the crawl itself).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pg_cluster import skip_reason

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(180)


def test_distributed_benchmark_runs_one_and_two_workers(tmp_path: Path) -> None:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "distributed.py"), "--quick", "--workers", "1,2", "--json", str(out)],
        check=False, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=170,
    )
    assert run.returncode == 0, run.stderr
    assert "stmts/page" in run.stdout and "2 workers / 1 worker:" in run.stdout, run.stdout
    assert "per-host limit 2:" in run.stdout and "one PostgreSQL serves about" in run.stdout, run.stdout
    figures = json.loads(out.read_text())
    assert [r["workers"] for r in figures["runs"]] == [1, 2]
    for r in figures["runs"]:
        assert r["pages"] > 0 and r["statements"] > 0 and r["round_trips"] > 0 and r["db_cpu_s"] > 0, r

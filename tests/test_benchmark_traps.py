"""benchmarks/traps.py runs on loopback and prints its table: a smoke test, no clock.

The figures are the benchmark's business, in docs/benchmarks.md ("Traps"); here only that each
client crawled the trap site within its budget and the site counted what it asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(180)
def test_the_traps_benchmark_prints_its_table(tmp_path: Path) -> None:
    out = tmp_path / "traps.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "traps.py"), "--budget", "120", "--per-host-budget", "40",
         "--json", str(out)],
        check=False, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=170,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "The trap site, a budget of 120 pages" in run.stdout, run.stdout
    rows = {row["client"]: row for row in json.loads(out.read_text(encoding="utf-8"))["rows"]}
    assert rows["niofetcher-off"]["requests"] == rows["niofetcher-defaults"]["requests"] == 120
    assert rows["niofetcher-per-host"]["requests"] == 40
    assert rows["niofetcher-defaults"]["by_kind"].get("sessions", 0) == 0
    assert rows["niofetcher-off"]["by_kind"]["sessions"] > 0

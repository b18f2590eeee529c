"""benchmarks/frontier_speed.py runs, at tiny sizes, and writes what it prints: a smoke test, no clock.

The figures themselves are the benchmark's business (issue 11's targets are in
its docstring); here only that each size gets its row and the frontier file
ends up holding every URL the run made (the script checks that on each reopen).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(120)


def test_frontier_speed_measures_each_size(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    db = tmp_path / "frontier.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "frontier_speed.py"), "--sizes", "300,1000", "--window", "200",
         "--batch", "100", "--hosts", "50", "--path", str(db), "--json", str(out)],
        check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=100,
    )
    assert run.returncode == 0, run.stderr
    figures = json.loads(out.read_text())
    rows = figures["sizes"]
    assert [row["size"] for row in rows] == [300, 1000]
    for row in rows:
        for name in ("add_new_per_s", "add_known_per_s", "claim_per_s", "complete_per_s", "crawl_pages_per_s",
                     "bytes_per_url", "reopen_ms"):
            assert row[name] > 0, (name, row)
        assert row["urls_at_end"] > row["urls_at_start"] >= row["size"]
    assert figures["growth"][-1]["to"] == 1000
    assert "reopen ms" in run.stdout  # the final table
    assert db.exists()  # --path is kept

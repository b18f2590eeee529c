"""benchmarks/docsite.py runs, on a tiny site and one round, and prints its table: a smoke test, no clock.

The figures are the benchmark's business (issue 15's target is in docs/benchmarks.md); here only
that wget and both extractors crawl the whole site, each page once, as the server saw it, with
nginx where it is installed and with Python's http.server, the fallback, always.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("server", ["auto", "http.server"])
def test_docsite_benchmark_crawls_the_site_with_every_client(tmp_path: Path, server: str) -> None:
    if shutil.which("wget") is None:
        pytest.skip("wget is not installed")
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "docsite.py"), "--pages", "12", "--rounds", "1",
         "--server", server, "--timeout", "40", "--json", str(out)],  # 3 commands of 40 s fit in the 170
        check=False, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=170,
    )
    assert run.returncode == 0, run.stderr
    assert "vs wget:" in run.stdout and "links a page" in run.stdout, run.stdout
    figures = json.loads(out.read_text())
    assert figures["pages"] == 12 and figures["fragment_share"] > 0.5, figures
    assert [r["client"] for r in figures["runs"]] == ["wget", "niofetcher-bs4", "niofetcher-lxml"]
    for r in figures["runs"]:
        assert "failed" not in r and r["pages"] == 12 and r["repeated"] == 0 and r["not_200"] == 0, r
        assert r["wall"] > 0 and r["cpu"] > 0, r
    for client, row in figures["summary"].items():
        assert row["complete"], (client, row)
    if figures["server"].startswith("nginx"):
        assert figures["summary"]["wget"]["connections"] == 1, figures["summary"]
        assert figures["summary"]["niofetcher-lxml"]["connections"] <= 4, figures["summary"]

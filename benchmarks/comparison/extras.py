"""The optional extras of a fetch scenario: one niofetcher run under cProfile, and the site's ceiling with wrk."""

from __future__ import annotations

import argparse
import collections
import json
import os
import pstats
import re
import shutil
import subprocess
import sys
from typing import Any

from _site import SiteProcess

from . import CLIENTS_DIR, RESULTS_DIR
from .scenarios import FetchScenario


def _group(filename: str, func: str) -> str:
    """Which part of the loop thread's time a profiled function belongs to."""
    if "/h11/" in filename:
        return "h11 (all of it)"
    if "/niofetcher/" in filename:
        return "niofetcher's own Python"
    if filename == "~" and re.search(r"'(send|recv|recv_into|connect_ex|connect|close)' of '_socket", func):
        return "socket calls (send/recv/connect/close)"
    if filename == "~" and "epoll" in func or filename.endswith("selectors.py"):
        return "selectors / epoll"
    return "other (stdlib, builtins)"


def profile(scenario: FetchScenario, job: str, site: SiteProcess, options: argparse.Namespace) -> dict[str, Any]:
    """One more niofetcher run, not counted, with its loop thread under cProfile: the top costs."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"profile-{scenario.key}{'-quick' if options.quick else ''}.pstats")
    site.reset_when_idle()
    cmd = [sys.executable, os.path.join(CLIENTS_DIR, "niofetcher_client.py"), "--urls", job,
           "--total", str(scenario.total), "--per-host", str(scenario.per_host), "--profile", path]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=options.run_timeout, check=False)
    if proc.returncode != 0:
        print(f"  profile run failed: {proc.stderr.strip()[-300:]}")
        return {"failed": proc.stderr[-300:]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    stats = pstats.Stats(path)
    total: float = stats.total_tt  # type: ignore[attr-defined]
    entries: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    rows: list[dict[str, Any]] = []
    groups: collections.defaultdict[str, float] = collections.defaultdict(float)
    for (filename, line, func), (_cc, nc, tt, ct, _) in entries.items():
        rows.append({"function": f"{os.path.relpath(filename) if filename.startswith('/') else filename}"
                                 f":{line}({func})", "calls": nc, "tottime": tt, "cumtime": ct})
        groups[_group(filename, func)] += tt
    rows.sort(key=lambda r: r["tottime"], reverse=True)
    print(f"\n  niofetcher loop thread under cProfile ({result['pages']:,} pages, "
          f"{result['ok'] / result['seconds']:,.0f} pages/s with the profiler on; {total:.2f} s profiled; "
          f"stats in {path}):")
    for name, tt in sorted(groups.items(), key=lambda item: item[1], reverse=True):
        print(f"  {tt:8.3f} s {tt / total:6.1%}  {name}")
    print(f"\n  {'tottime':>8} {'share':>6} {'per page us':>11} {'calls':>9}  function")
    for row in rows[:25]:
        print(f"  {row['tottime']:8.3f} {row['tottime'] / total:6.1%} "
              f"{row['tottime'] * 1e6 / result['pages']:11.2f} {row['calls']:9d}  {row['function']}")
    return {"path": path, "total_seconds": total, "groups": dict(groups), "top": rows[:40], "run": result}


def wrk(scenario: FetchScenario, base: str) -> dict[str, Any]:
    """The site's ceiling: wrk's requests/s on one page with the scenario's connections, when wrk is on PATH."""
    program = shutil.which("wrk")
    if program is None:
        print("  wrk: not installed (not on PATH); the site's ceiling is shown as the fastest client's rate, "
              "a lower bound")
        return {"available": False}
    cmd = [program, "-t2", f"-c{scenario.total}", "-d5s", f"{base}page/1"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    match = re.search(r"Requests/sec:\s*([\d.]+)", out)
    rate = float(match.group(1)) if match else None
    print(f"  wrk {' '.join(cmd[1:])}: {rate:,.0f} requests/s" if rate else f"  wrk failed: {out[-200:]!r}")
    return {"available": True, "requests_per_s": rate, "command": cmd[1:]}

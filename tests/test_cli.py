"""The command line: fetch, demo, and one clear line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from niofetcher.testsite import TestSite


def niofetcher(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "niofetcher", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(60)
def test_fetch_prints_a_line_per_url_and_writes_jsonl(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    with TestSite(hosts=1, pages=5) as site:
        base = site.base_urls[0]
        urls = [f"{base}page/{i}" for i in range(5)] + [f"{base}missing"]
        done = niofetcher("fetch", *urls, "--out", str(out), "--per-host", "2")
        assert site.counters().requests == 6
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 6
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["status"] for r in records) == [200] * 5 + [404]
    assert done.returncode == 1  # a 404 is not ok


@pytest.mark.timeout(60)
def test_fetch_resolve_maps_a_name_without_dns() -> None:
    with TestSite(hosts=1, pages=1) as site:
        port = site.ports[0]
        done = niofetcher("fetch", f"http://site.test:{port}/", "--resolve", f"site.test:{port}:127.0.0.1")
    assert done.returncode == 0, done.stderr
    assert " 200 " in done.stdout


@pytest.mark.timeout(60)
def test_fetch_deny_private_refuses_loopback() -> None:
    with TestSite(hosts=1, pages=1) as site:
        done = niofetcher("fetch", site.base_urls[0], "--deny-private")
        assert site.counters().accepted == 0
    assert "connect_error" in done.stdout and "denied network" in done.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, message", [
    (["fetch", "ftp://example.test/"], "only absolute http"),
    (["fetch", "not a url"], "only absolute http"),
    (["fetch", "http://127.0.0.1/", "--resolve", "nonsense"], "--resolve takes HOST:PORT:ADDR"),
    (["fetch", "http://127.0.0.1/", "--out", "/nonexistent-dir/x.jsonl"], "cannot write"),
    (["testsite", "--port", "1", "--hosts", "70000"], "error"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = niofetcher(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2  # argparse adds a usage line

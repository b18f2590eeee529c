"""The command line: fetch, demo, and one clear line for bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from niofetcher.testing import TestSite


def niofetcher(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "niofetcher", *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


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
    assert done.returncode == 0  # a 404 is a result, not a failure of the command


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
    (["fetch", "http://127.0.0.1/", "--out", "/nonexistent-dir/x.jsonl"], "cannot write --out"),
    (["testsite", "--port", "1", "--hosts", "70000"], "error"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = niofetcher(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1  # the parser's own errors too: no usage first


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_interrupts_fetch_like_ctrl_c_and_out_holds_every_printed_result(
    tmp_path: Path, signum: int
) -> None:
    """SIGTERM is Ctrl-C: the fetcher is shut down, one line says so, status 130, and --out holds a
    record of each result printed before (it is written as it is printed, not left in a buffer)."""
    out = tmp_path / "results.jsonl"
    with TestSite(hosts=1, pages=3) as fast, TestSite(hosts=1, pages=3, delay=30.0) as slow:
        urls = [f"{fast.base_urls[0]}page/{i}" for i in range(3)] + [f"{slow.base_urls[0]}page/0"]
        child = subprocess.Popen([sys.executable, "-m", "niofetcher", "fetch", *urls, "--out", str(out)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            printed = [child.stdout.readline() for _ in range(3)]  # type: ignore[union-attr]
            child.send_signal(signum)
            stdout, stderr = child.communicate(timeout=20)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
    assert child.returncode == 130, stderr
    assert stderr == "niofetcher: interrupted\n"
    assert stdout == ""  # the slow URL is cancelled, not printed
    assert all(" 200 " in line for line in printed)
    assert sorted(json.loads(line)["url"] for line in out.read_text().splitlines()) == urls[:3]


@pytest.mark.timeout(60)
def test_fetch_out_to_a_full_device_is_one_line_naming_the_file() -> None:
    with TestSite(hosts=1, pages=3) as site:
        done = niofetcher("fetch", *(f"{site.base_urls[0]}page/{i}" for i in range(3)), "--out", "/dev/full")
    assert done.returncode == 1
    assert done.stderr == "niofetcher: error: No space left on device: /dev/full\n"


REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(60)
def test_python_m_in_the_folder_holding_a_clone_says_what_is_wrong(tmp_path: Path) -> None:
    """A clone named niofetcher in the current directory passes for a namespace package ahead of
    the installed one (it does with an editable install); the project's own __main__.py then says
    so in one line.  -S keeps the installed package out of reach, so that this is the case here
    whatever the install; without the root __main__.py Python says "No module named
    niofetcher.__main__" instead."""
    (tmp_path / "niofetcher").symlink_to(REPO_ROOT, target_is_directory=True)
    done = subprocess.run([sys.executable, "-S", "-m", "niofetcher", "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert f"{tmp_path / 'niofetcher'} is the niofetcher project folder, not the package" in done.stderr
    # With the installed package in reach, whichever wins, there is no traceback.
    done = subprocess.run([sys.executable, "-m", "niofetcher", "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=30, check=False)
    assert "Traceback" not in done.stderr
    assert done.returncode == 0 and done.stdout.startswith("niofetcher ") or done.returncode == 2

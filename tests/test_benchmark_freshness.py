"""The freshness benchmark (issue 27, item 5): its site, its arithmetic, and a ``--quick`` run.

- ``ChangingSite`` asked over loopback, its clock moved by the test: a page's body carries the
  version its drawn change times give; a conditional GET naming the current ETag, or not older
  than the Last-Modified, gets a 304 until the next drawn change and a 200 with new validators
  after it; the log's bytes are the bytes that came down the socket; one seed, one history;
- the theory (Cho and Garcia-Molina) against values worked by hand: the expected freshness of a
  page, the optimal allocation (equal rates share equally; a page that changes far too often gets
  nothing; the Lagrange condition holds and it beats the uniform and proportional allocations);
- a stored copy's freshness and age over a window, worked by hand;
- ``benchmarks/freshness.py --quick``: every request the crawler counted is in the site's log, the
  freshness of each policy is within [0, 1], every revisit of an unchanged page got a 304 and the
  304s saved at least 90 % of those pages' bytes.  The figures themselves are in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from niofetcher.crawl.schedule import freshness_gain
from niofetcher.testing import ChangingSite

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(120)


class Clock:
    """Real seconds as the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def exchange(site: ChangingSite, path: str, *headers: str) -> tuple[int, dict[str, str], bytes, int]:
    """``GET path`` with ``headers`` on a connection of its own: (status, head fields, body, bytes received)."""
    port = int(site.base_url.rsplit(":", 1)[1].strip("/"))
    request = "".join(f"{line}\r\n" for line in (f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
                                                   *headers))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall((request + "\r\n").encode("ascii"))
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    fields = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), fields, body, len(received)


def test_a_page_changes_when_drawn_and_answers_conditional_gets() -> None:
    clock = Clock()
    with ChangingSite(pages=3, rate_range=(1.0, 1.0), days=20, seconds_per_day=10.0, clock=clock) as site:
        first, second = site.changes[0][:2]
        clock.now += (first - 0.01) * 10.0  # just before page 0's first change
        status, fields, body, received = exchange(site, "/page/0")
        assert status == 200 and b"Page 0, version 0." in body
        etag, modified = fields["etag"], fields["last-modified"]
        assert (status, received) == (site.log()[-1].status, site.log()[-1].sent)
        assert exchange(site, "/page/0", f"If-None-Match: {etag}")[0] == 304
        assert exchange(site, "/page/0", f"If-Modified-Since: {modified}")[0] == 304
        assert exchange(site, "/page/0", 'If-None-Match: "p0-v7"', f"If-Modified-Since: {modified}")[0] == 200

        clock.now += 0.02 * 10.0  # just after it
        status, fields, body, _ = exchange(site, "/page/0", f"If-None-Match: {etag}")
        assert status == 200 and b"Page 0, version 1." in body
        assert fields["etag"] != etag and fields["last-modified"] != modified
        assert exchange(site, "/page/0", f"If-Modified-Since: {modified}")[0] == 200
        status, _, body, received = exchange(site, "/page/0", f"If-None-Match: {fields['etag']}")
        assert (status, body) == (304, b"")
        logged = site.log()[-1]
        assert (logged.path, logged.status, logged.sent, logged.version) == ("/page/0", 304, received, 1)
        assert site.version_at(0, logged.day) == 1 and first < logged.day < second

        status, _, body, _ = exchange(site, "/")
        assert status == 200 and all(f'href="{path}"'.encode() in body for path in site.paths)
        assert exchange(site, "/page/3")[0] == 404


def test_one_seed_draws_one_history_within_the_rates() -> None:
    one, other = ChangingSite(pages=50, seed=5), ChangingSite(pages=50, seed=5)
    assert one.changes == other.changes and one.rates == other.rates
    assert ChangingSite(pages=50, seed=6).rates != one.rates
    assert all(0.1 <= rate <= 10.0 for rate in one.rates)
    assert all(0 < times[0] and times == sorted(times) and times[-1] <= one.days for times in one.changes if times)


@pytest.fixture
def freshness(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import freshness

    return freshness


def test_the_theory_against_values_worked_by_hand(freshness: ModuleType) -> None:
    assert freshness.expected_freshness(1.0, 1.0) == pytest.approx(1 - math.exp(-1))  # 0.632
    assert freshness.expected_freshness(0.5, 4.0) == pytest.approx((1 - math.exp(-2)) / 2)  # 0.432
    assert freshness.expected_freshness(3.0, math.inf) == 0.0
    assert freshness.optimal_rates([2.0, 2.0, 2.0, 2.0], 8.0) == pytest.approx([2.0] * 4, rel=1e-6)
    # One fetch a day for pages changing once and 100 times a day: all of it on the first (the
    # second gains 1/100 a fetch at most, the first (1 - 2/e) = 0.26 at its last).
    assert freshness.optimal_rates([1.0, 100.0], 1.0) == pytest.approx([1.0, 0.0], abs=1e-6)
    assert freshness.mean_freshness([1.0, 100.0], [1.0, 0.0]) == pytest.approx((1 - math.exp(-1)) / 2)

    rates, budget = [0.1, 0.5, 1.0, 4.0, 10.0], 8.0
    optimal = freshness.optimal_rates(rates, budget)
    assert sum(optimal) == pytest.approx(budget, rel=1e-6)
    gains = [freshness_gain(rate / f) / rate for rate, f in zip(rates, optimal) if f > 0]
    assert max(gains) == pytest.approx(min(gains), rel=1e-4)  # the Lagrange condition
    uniform = freshness.mean_freshness(rates, [budget / len(rates)] * len(rates))
    proportional = freshness.mean_freshness(rates, [budget * rate / sum(rates) for rate in rates])
    assert freshness.mean_freshness(rates, optimal) > uniform > proportional


def test_a_copys_freshness_and_age_worked_by_hand(freshness: ModuleType) -> None:
    # Changes at 1 and 3, fetches at 0 and 2: fresh [0, 1) and [2, 3); stale [1, 2) and [3, 4),
    # each aging from 0 to 1 (an integral of 1/2).
    assert freshness.copy_freshness([0.0, 2.0], [1.0, 3.0], 0.0, 4.0) == pytest.approx((2.0, 1.0))
    # Nothing held before the fetch at 2 (stale, aging from day 0: 4/2); then as above.
    assert freshness.copy_freshness([2.0], [1.0, 3.0], 0.0, 4.0) == pytest.approx((1.0, 2.5))
    # A window from 1.5: the copy of day 0 has been stale since 1.
    assert freshness.copy_freshness([0.0, 2.0], [1.0, 3.0], 1.5, 4.0) == pytest.approx((1.0, (1 - 0.25) / 2 + 0.5))


def test_the_quick_run_counts_every_request_and_saves_the_bytes_of_unchanged_pages(tmp_path: Path) -> None:
    out = tmp_path / "freshness.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "freshness.py"), "--quick", "--json", str(out)],
        check=False, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=110,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "goal, adaptive above fixed at the same requests" in run.stdout, run.stdout
    assert "goal, estimate-rate above fixed at the same requests" in run.stdout, run.stdout
    figures = json.loads(out.read_text(encoding="utf-8"))
    policies = figures["policies"]
    assert set(policies) == {"adaptive", "fixed", "fixed-matched", "estimate-rate", "fixed-matched-estimate"}
    for name, policy in policies.items():
        assert policy["crawler_requests"] == policy["site_requests"], name
        assert 0.0 <= policy["freshness"] <= 1.0 and policy["age_hours"] >= 0.0, name
        assert policy["requests"] > 0 and policy["unchanged"] > 0, name
        assert policy["unchanged_304"] == policy["unchanged"], name  # every unchanged page: a 304
        assert policy["bytes_saved_share"] >= 0.9, name
    theory = figures["theory"]
    assert 0.0 < theory["proportional"] < theory["uniform"] < theory["optimal"] <= 1.0
    assert sum(band["pages"] for band in figures["bands"]) == figures["settings"]["pages"] == 30

"""Throttle: politeness that listens (DESIGN.md "Throttle"; issue 28, item 1).

Real loopback servers note when each request arrives; the assertions are on
those times, from the server's side.  One negative control runs the same
server without a Throttle and sees the host hammered on.
"""

from __future__ import annotations

import email.utils
import itertools
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rawserver import ConnInfo, Handler, RawServer, http_response, read_request

from niofetcher import FetcherConfig, HostStats, NIOFetcher, Throttle, pool
from niofetcher.throttle import MAX_PAUSE, retry_after

Answer = Callable[[int, bytes], tuple[int, list[tuple[str, str]], float]]  # (n, path) -> status, headers, latency


class Arrivals:
    """A keep-alive handler that notes (path, monotonic time) of every request and answers by ``answer``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.seen: list[tuple[bytes, float]] = []
        self._lock = threading.Lock()

    def handler(self) -> Handler:
        def handle(sock: socket.socket, info: ConnInfo) -> None:
            while True:
                head = read_request(sock, info)
                if head is None:
                    return
                path = head.split(b" ", 2)[1]
                with self._lock:
                    n = len(self.seen)
                    self.seen.append((path, time.monotonic()))
                status, headers, latency = self.answer(n, path)
                if latency:
                    info.sleep(latency)
                sock.sendall(http_response(status, b"x" if status != 304 else b"", headers))

        return handle

    def times(self) -> list[float]:
        return [at for _, at in self.seen]


@pytest.fixture
def server() -> Iterator[Callable[[Answer], tuple[RawServer, Arrivals]]]:
    started: list[RawServer] = []

    def start(answer: Answer) -> tuple[RawServer, Arrivals]:
        arrivals = Arrivals(answer)
        srv = RawServer(arrivals.handler()).start()
        started.append(srv)
        return srv, arrivals

    yield start
    for srv in started:
        srv.stop()


def fetch_all(config: FetcherConfig, urls: list[str]) -> list[int | None]:
    with NIOFetcher(config) as fetcher:
        for url in urls:
            assert fetcher.register(url)
        return [result.status for result in fetcher.results()]


def one_429_first(retry: str | None) -> Answer:
    def answer(n: int, path: bytes) -> tuple[int, list[tuple[str, str]], float]:
        if n == 0:
            return 429, [("Retry-After", retry)] if retry is not None else [], 0.0
        return 200, [], 0.0
    return answer


def test_a_429_pauses_the_whole_host_until_retry_after(server: Callable[[Answer], tuple[RawServer, Arrivals]]) -> None:
    srv, arrivals = server(one_429_first("2"))
    config = FetcherConfig(max_connections_per_host=1, throttle=Throttle(max_delay=0.1))
    statuses = fetch_all(config, [srv.url(f"/p{i}") for i in range(4)])
    assert sorted(statuses, key=lambda status: status or 0) == [200, 200, 200, 429]  # the fetcher does not retry
    times = arrivals.times()
    assert times[1] - times[0] >= 1.9  # every other URL of the host waited for the Retry-After
    assert times[-1] - times[1] < 1.0  # and then went on at the throttled pace (max_delay 0.1)


def test_without_a_throttle_the_host_is_not_paused(server: Callable[[Answer], tuple[RawServer, Arrivals]]) -> None:
    srv, arrivals = server(one_429_first("2"))  # the negative control of the test above
    fetch_all(FetcherConfig(max_connections_per_host=1), [srv.url(f"/p{i}") for i in range(4)])
    times = arrivals.times()
    assert times[-1] - times[0] < 1.0


def test_another_host_is_not_held_back(server: Callable[[Answer], tuple[RawServer, Arrivals]]) -> None:
    slow_down, _ = server(one_429_first("3"))
    other, other_arrivals = server(lambda n, path: (200, [], 0.0))
    config = FetcherConfig(max_connections_per_host=1, throttle=Throttle(max_delay=0.1))
    started = time.monotonic()
    fetch_all(config, [slow_down.url("/a"), slow_down.url("/b"), *(other.url(f"/o{i}") for i in range(5))])
    assert len(other_arrivals.seen) == 5
    assert max(other_arrivals.times()) - started < 2.0  # done while the first host was paused


def test_a_backoff_at_least_doubles_the_delay_and_good_answers_bring_it_down_to_above_what_was_too_short(
    server: Callable[[Answer], tuple[RawServer, Arrivals]],
) -> None:
    statuses = {1: 503, 2: 503}  # two backoffs (no Retry-After), then good answers
    srv, _ = server(lambda n, path: (statuses.get(n, 200), [], 0.0))
    with NIOFetcher(FetcherConfig(max_connections_per_host=1, throttle=Throttle())) as fetcher:

        def stats_after(paths: range) -> HostStats:
            for i in paths:
                fetcher.register(srv.url(f"/p{i}"))
            list(fetcher.results())
            [stats] = fetcher.host_stats().values()
            return stats

        first = stats_after(range(2))
        second = stats_after(range(2, 3))
        settled = stats_after(range(3, 40))
    assert (first.backoffs, second.backoffs, settled.backoffs) == (1, 2, 2)
    assert first.delay > 0 and second.delay >= 2 * first.delay
    # down in small steps, but never back to what the second backoff found too short (>= first.delay)
    assert 1.2 * first.delay <= settled.delay < second.delay


def test_the_answers_to_requests_sent_before_a_backoff_belong_to_it(
    server: Callable[[Answer], tuple[RawServer, Arrivals]],
) -> None:
    srv, _ = server(lambda n, path: (429 if n < 4 else 200, [], 0.3))  # four in flight at once, all refused
    with NIOFetcher(FetcherConfig(max_connections_per_host=4, throttle=Throttle())) as fetcher:
        for i in range(4):
            fetcher.register(srv.url(f"/p{i}"))
        assert [result.status for result in fetcher.results()] == [429] * 4
        [stats] = fetcher.host_stats().values()
    assert srv.max_open == 4
    assert stats.backoffs == 1  # one episode, one backoff: four would have multiplied the delay by 2**4


def test_the_delay_follows_latency_toward_target_concurrency(
    server: Callable[[Answer], tuple[RawServer, Arrivals]],
) -> None:
    srv, _ = server(lambda n, path: (200, [], 0.2))
    config = FetcherConfig(max_connections_per_host=4, throttle=Throttle(target_concurrency=2.0))
    with NIOFetcher(config) as fetcher:
        for i in range(12):
            fetcher.register(srv.url(f"/p{i}"))
        list(fetcher.results())
        [stats] = fetcher.host_stats().values()
    assert 0.06 <= stats.delay <= 0.11  # toward 0.2 s / 2
    assert srv.max_open <= 4


def test_never_below_host_delay_or_min_delay(server: Callable[[Answer], tuple[RawServer, Arrivals]]) -> None:
    srv, arrivals = server(lambda n, path: (200, [], 0.0))
    config = FetcherConfig(max_connections_per_host=2, host_delay=0.2, throttle=Throttle(min_delay=0.1))
    with NIOFetcher(config) as fetcher:
        for i in range(5):
            fetcher.register(srv.url(f"/p{i}"))
        list(fetcher.results())
        [stats] = fetcher.host_stats().values()
    times = arrivals.times()
    # The server sees an arrival a little late under load (this failed once at 0.18 in a loaded run);
    # 0.16 still tells host_delay's 0.2 from min_delay's 0.1.
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.16
    assert stats.delay == pytest.approx(0.2)


def test_min_delay_holds_from_a_hosts_first_requests(server: Callable[[Answer], tuple[RawServer, Arrivals]]) -> None:
    # A new host's throttled delay began at 0, so its first requests all started at once, one a
    # connection; only answers raised it to min_delay.
    srv, arrivals = server(lambda n, path: (200, [], 0.0))
    config = FetcherConfig(max_connections_per_host=4, throttle=Throttle(min_delay=0.2))
    fetch_all(config, [srv.url(f"/p{i}") for i in range(4)])
    times = arrivals.times()
    assert len(times) == 4 and min(b - a for a, b in itertools.pairwise(times)) >= 0.15  # 0 apart before; an arrival seen late under load shortens one gap


def test_a_backoff_after_an_idle_gap_does_not_take_the_gap_for_the_spacing(
    server: Callable[[Answer], tuple[RawServer, Arrivals]],
) -> None:
    # The gap before the 503's request was the host's idling (nothing queued), not a spacing the
    # fetcher chose; taken as "too short", it set the delay to max_delay and its floor above it.
    srv, _ = server(lambda n, path: (503 if n == 1 else 200, [], 0.0))
    with NIOFetcher(FetcherConfig(throttle=Throttle(max_delay=1.0))) as fetcher:
        fetcher.register(srv.url("/first"))
        assert fetcher.get(timeout=5) is not None
        time.sleep(0.6)
        fetcher.register(srv.url("/second"))
        second = fetcher.get(timeout=5)
        [stats] = fetcher.host_stats().values()
    assert second is not None and second.status == 503
    assert stats.backoffs == 1 and stats.delay < 0.1  # 1.0 (4 x the 0.6 s idle, at most max_delay) before


def test_a_backoff_takes_at_most_half_max_delay_as_too_short() -> None:
    # A spacing of an hour (requests held by a Retry-After) made a floor of 1.25 hours: the delay
    # stayed at max_delay for the ~70,000 good answers FORGET needs to bring the floor under it.
    throttle = Throttle(max_delay=60.0)
    delay, too_fast = throttle.backed_off(0.0, 3600.0, good_since=100)
    assert (delay, too_fast) == (60.0, 30.0)
    for _ in range(100):
        delay, too_fast = throttle.eased(delay, too_fast, 0.001, good=True)
    assert delay < 40.0  # down toward 1.25 x 30


def test_a_host_that_asked_to_slow_down_keeps_its_delay_after_its_slot_is_dropped(
    server: Callable[[Answer], tuple[RawServer, Arrivals]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its slot leaves the table when nothing of it is left, and ``recent`` after RECENT_HOSTS other
    # hosts have left since: with it went its throttled delay, so it was asked at full speed again.
    monkeypatch.setattr(pool, "RECENT_HOSTS", 3)
    close = [("Connection", "close")]  # no idle connection keeps a slot in the table
    srv, _ = server(lambda n, path: (429 if path == b"/limited/0" else 200, close, 0.05 if b"limited" in path else 0.0))
    names = ["limited.test", *(f"other{i}.test" for i in range(5))]
    config = FetcherConfig(resolve=dict.fromkeys(names, "127.0.0.1"), max_connections_per_host=1,
                           throttle=Throttle(max_delay=0.5))

    def limited(fetcher: NIOFetcher) -> HostStats | None:
        return next((stats for origin, stats in fetcher.host_stats().items() if origin.host == "limited.test"), None)

    with NIOFetcher(config) as fetcher:
        for i in range(3):
            fetcher.register(f"http://limited.test:{srv.port}/limited/{i}")
        assert [fetcher.get(timeout=5) is not None for _ in range(3)] == [True] * 3
        before = limited(fetcher)
        assert before is not None and before.backoffs == 1 and before.delay > 0.02  # toward the 50 ms latency
        for name in names[1:]:
            fetcher.register(f"http://{name}:{srv.port}/")
            assert fetcher.get(timeout=5) is not None
        deadline = time.monotonic() + 10
        while limited(fetcher) is not None and time.monotonic() < deadline:  # until its slot is dropped
            time.sleep(0.02)
        assert limited(fetcher) is None
        fetcher.register(f"http://limited.test:{srv.port}/again")
        assert fetcher.get(timeout=5) is not None
        after = limited(fetcher)
    assert after is not None and after.backoffs == 1  # 0: a fresh slot
    assert after.delay >= 0.9 * before.delay  # one good answer lowers it by 5% at most


@pytest.mark.parametrize("value", ["garbage", "-5", "1.5", "", "Thu, 01 Jan 1970 00:00:00 GMT"])
def test_a_retry_after_of_no_use_pauses_for_the_backoff_delay_only(
    server: Callable[[Answer], tuple[RawServer, Arrivals]], value: str,
) -> None:
    srv, arrivals = server(one_429_first(value))
    config = FetcherConfig(max_connections_per_host=1, throttle=Throttle())
    fetch_all(config, [srv.url(f"/p{i}") for i in range(3)])
    times = arrivals.times()
    assert times[1] - times[0] < 0.5  # the backoff delay of a host answering in a millisecond, no pause


def test_retry_after_values() -> None:
    now = time.time()
    assert retry_after("120", now) == 120.0
    assert retry_after(" 7 ", now) == 7.0
    assert retry_after("99999999999999999999", now) == MAX_PAUSE  # huge: an hour at most
    assert retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == pytest.approx(30, abs=1.5)
    assert retry_after(email.utils.formatdate(now + 10 * 86400, usegmt=True), now) == MAX_PAUSE
    assert retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0  # in the past
    for value in (None, "", "soon", "-1", "1.5", "Thu, 99 Foo 2020 00:00:00 GMT"):
        assert retry_after(value, now) is None


@pytest.mark.parametrize("value", ["9" * 400, "9" * 5000, "0" * 5000 + "7", "\u00b2", "\u0663"],
                         ids=["400 nines", "5000 nines", "5000 zeros then 7", "superscript two", "arabic-indic three"])
def test_retry_after_never_raises(value: str) -> None:
    # float() of 309 digits overflows, int() of 4300 refuses, and '²' or an Arabic-Indic digit
    # pass str.isdigit(): none of them may escape into the loop (test below).
    expected = {"9": MAX_PAUSE, "0": 7.0}.get(value[0])
    assert retry_after(value, time.time()) == expected


@pytest.mark.parametrize("value", ["9" * 400, "\u00b2"], ids=["400 nines", "superscript two"])
def test_a_backoff_status_with_an_odd_retry_after_still_backs_off(
    server: Callable[[Answer], tuple[RawServer, Arrivals]], value: str,
) -> None:
    srv, _ = server(lambda n, path: (503, [("Retry-After", value)], 0.0))
    with NIOFetcher(FetcherConfig(throttle=Throttle())) as fetcher:
        fetcher.register(srv.url("/p"))
        [result] = fetcher.results()
        [stats] = fetcher.host_stats().values()
    assert (result.status, result.error) == (503, None)  # not a protocol_error from the parser
    assert stats.backoffs == 1


@pytest.mark.parametrize("kwargs", [
    {"target_concurrency": 0}, {"target_concurrency": -1.0}, {"target_concurrency": float("nan")},
    {"min_delay": -1}, {"max_delay": float("inf")}, {"min_delay": 2.0, "max_delay": 1.0},
    {"backoff_statuses": [429]}, {"backoff_statuses": (42,)}, {"backoff_statuses": ("429",)},
])
def test_a_throttle_refuses_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Throttle(**kwargs)  # type: ignore[arg-type]


def test_fetcher_config_takes_only_a_throttle() -> None:
    with pytest.raises(ValueError, match="throttle"):
        FetcherConfig(throttle=2.0)  # type: ignore[arg-type]


def test_the_command_line_throttles(server: Callable[[Answer], tuple[RawServer, Arrivals]], tmp_path: Path) -> None:
    srv, arrivals = server(one_429_first("1"))
    out = tmp_path / "results.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "niofetcher", "fetch", "--throttle", "--max-delay", "0.2", "--per-host", "1",
         "--out", str(out), *(srv.url(f"/p{i}") for i in range(3))],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(line)["status"] for line in out.read_text().splitlines()) == [200, 200, 429]
    times = arrivals.times()
    assert times[1] - times[0] >= 0.95


def test_a_tuning_option_without_throttle_is_a_usage_error() -> None:
    done = subprocess.run([sys.executable, "-m", "niofetcher", "fetch", "--max-delay", "3", "http://127.0.0.1:9/"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["niofetcher: error: --max-delay tunes --throttle, which is not given"]

"""Per-IP limits (``max_connections_per_ip``, ``ip_delay``), counted from the server's side.

Many host names are mapped to one loopback address through ``FetcherConfig(resolve=...)``, the way
shared hosting puts thousands of names on one server; each server counts the sockets open to it at
every accept and the time of every request it reads.  No real DNS: names resolve through ``resolve``
or a stub ``resolver``, and every address is on loopback.
"""

from __future__ import annotations

import itertools
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from rawserver import ConnInfo, RawServer, get_unused_port, http_response, read_request

from niofetcher import FetcherConfig, FetchResult, NIOFetcher
from niofetcher.cli.args import build_parser, config_from
from niofetcher.config import Address
from niofetcher.models import URLBean
from niofetcher.pool import HostTable
from niofetcher.request import RequestDefaults, Task
from niofetcher.urls import parse_target

OK = http_response(200, b"ok", [(b"Content-Type", b"text/plain")])


class Watch:
    """What a group of servers saw together: the most sockets open to all of them at once, request times."""

    def __init__(self) -> None:
        self.servers: list[RawServer] = []
        self.max_open = 0
        self.request_times: list[float] = []
        self._lock = threading.Lock()

    def handler(self, pause: float = 0.0, gate: threading.Event | None = None) -> Callable[[socket.socket, ConnInfo], None]:
        """Keep-alive ``OK`` after ``pause`` (and after ``gate`` is set, 10 s at most)."""

        def handle(sock: socket.socket, info: ConnInfo) -> None:
            # Sampled at each accept, the one moment the count can rise; open_now leaves out
            # sockets the client has closed already, whether or not their handler noticed.
            with self._lock:
                self.max_open = max(self.max_open, sum(server.open_now for server in self.servers))
            while True:
                head = read_request(sock, info)
                if head is None:
                    return
                with self._lock:
                    self.request_times.append(time.monotonic())
                if gate is not None:
                    for _ in range(200):
                        if gate.wait(0.05) or info.stopping:
                            break
                if pause and not info.sleep(pause):
                    return
                sock.sendall(OK)

        return handle

    def serve(self, handler: Callable[[socket.socket, ConnInfo], None], host: str = "127.0.0.1") -> RawServer:
        server = RawServer(handler, host=host, max_seconds=30).start()
        self.servers.append(server)
        return server

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture
def watch() -> Iterator[Watch]:
    w = Watch()
    try:
        yield w
    finally:
        w.stop()


def names(prefix: str, count: int, address: str) -> dict[str, str]:
    return {f"{prefix}{i}.test": address for i in range(count)}


def fetch(fetcher: NIOFetcher, url: str) -> FetchResult:
    assert fetcher.register(url)
    result = fetcher.get(timeout=20)
    assert result is not None, url
    return result


def fetch_all(config: FetcherConfig, urls: list[str]) -> list[FetchResult]:
    with NIOFetcher(config) as fetcher:
        for url in urls:
            assert fetcher.register(url)
        return list(fetcher.results())


# -- max_connections_per_ip --------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("per_ip", [3, None])
def test_the_per_ip_limit_holds_over_every_name_and_port_of_one_address(
    watch: Watch, per_ip: int | None, no_leaks: object
) -> None:
    # Two ports of one address, 24 names on them: 48 origins that would open 96 sockets at --per-host 2.
    ports = [watch.serve(watch.handler(pause=0.02)).port for _ in range(2)]
    resolve = names("site", 24, "127.0.0.1")
    urls = [f"http://{name}:{port}/{i}" for i in range(3) for name in resolve for port in ports]
    config = FetcherConfig(max_connections_per_host=2, max_connections_per_ip=per_ip, resolve=resolve)

    results = fetch_all(config, urls)

    assert [(r.url, r.error_detail) for r in results if not r.ok] == []
    assert len(results) == len(urls) == len(watch.request_times)
    assert {(r.peer or "").rsplit(":", 1)[0] for r in results} == {"127.0.0.1"}
    if per_ip is None:
        assert watch.max_open > 3  # the negative control: without the limit, names multiply sockets
    else:
        assert watch.max_open == per_ip  # held, and reached


@pytest.mark.timeout(30)
def test_an_idle_connection_of_one_name_makes_room_for_another_name(watch: Watch, no_leaks: object) -> None:
    server = watch.serve(watch.handler())
    config = FetcherConfig(max_connections_per_ip=1, resolve={"a.test": "127.0.0.1", "b.test": "127.0.0.1"})
    with NIOFetcher(config) as fetcher:
        assert fetch(fetcher, f"http://a.test:{server.port}/").ok  # a.test keeps its connection, idle
        assert fetcher.stats().open_connections == 1
        # b.test takes the address's one place by closing a.test's idle connection, rather than
        # waiting out the idle timeout (15 s: the test's timeout would end first).
        assert fetch(fetcher, f"http://b.test:{server.port}/").ok
        assert fetch(fetcher, f"http://a.test:{server.port}/").ok
    assert server.accepted == 3 and watch.max_open == 1


@pytest.mark.timeout(30)
def test_hosts_on_another_address_are_not_blocked_while_one_address_is_full(
    watch: Watch, no_leaks: object
) -> None:
    gate = threading.Event()  # the full address answers only once the other one has served everything
    full = watch.serve(watch.handler(gate=gate))
    other_watch = Watch()
    try:
        other = other_watch.serve(other_watch.handler(), host="127.0.0.2")
        resolve = {**names("full", 10, "127.0.0.1"), **names("free", 5, "127.0.0.2")}
        config = FetcherConfig(max_connections_per_ip=1, resolve=resolve)
        full_urls = [f"http://full{i}.test:{full.port}/{j}" for i in range(10) for j in range(2)]
        free_urls = [f"http://free{i}.test:{other.port}/{j}" for i in range(5) for j in range(3)]
        order = []
        with NIOFetcher(config) as fetcher:
            for url in full_urls:  # first, and ahead in priority too: the scheduler's first choice
                assert fetcher.register(url, priority=10)
            for url in free_urls:
                assert fetcher.register(url)
            for result in fetcher.results():
                assert result.ok, result.error_detail
                order.append(result.url)
                if len([u for u in order if "free" in u]) == len(free_urls):
                    gate.set()
        gate.set()
        assert sorted(order[: len(free_urls)]) == sorted(free_urls)  # every free one before any full one
        assert len(order) == len(full_urls) + len(free_urls)
        assert watch.max_open == 1 and other_watch.max_open == 1
    finally:
        gate.set()
        other_watch.stop()


def test_a_request_waiting_for_its_address_is_not_timed_by_its_connect_timeout(
    watch: Watch, no_leaks: object
) -> None:
    # Each response takes 0.3 s and only one socket may be open: the last of six names waits
    # about 1.5 s for its place, five times its connect timeout, and still succeeds.
    server = watch.serve(watch.handler(pause=0.3))
    resolve = names("slow", 6, "127.0.0.1")
    config = FetcherConfig(max_connections_per_ip=1, connect_timeout=0.3, resolve=resolve)
    results = fetch_all(config, [f"http://{name}:{server.port}/" for name in resolve])
    assert [r.error_detail for r in results if not r.ok] == []
    assert len(results) == 6 and watch.max_open == 1


# -- ip_delay ------------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ip_delay", [0.2, 0.0])
def test_ip_delay_spaces_request_starts_over_every_name_of_one_address(
    watch: Watch, ip_delay: float, no_leaks: object
) -> None:
    server = watch.serve(watch.handler())
    resolve = names("spaced", 4, "127.0.0.1")
    # Two per name: the second goes on a kept-alive connection, which ip_delay holds back too.
    urls = [f"http://{name}:{server.port}/{i}" for i in range(2) for name in resolve]
    config = FetcherConfig(ip_delay=ip_delay, resolve=resolve)

    results = fetch_all(config, urls)

    assert [r.error_detail for r in results if not r.ok] == []
    times = sorted(watch.request_times)
    assert len(times) == len(urls)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    if ip_delay:
        # The client spaces the starts; what the server sees can shrink by a connect's time and a
        # thread switch (its handlers share this process's interpreter lock): half the delay is plenty.
        assert min(gaps) >= ip_delay / 2, gaps
    else:
        assert min(gaps) < 0.1, gaps  # the negative control: nothing spaces them


@pytest.mark.timeout(30)
def test_ip_delay_and_the_per_ip_limit_together_with_hosts_elsewhere(watch: Watch, no_leaks: object) -> None:
    server = watch.serve(watch.handler(pause=0.05))
    other_watch = Watch()
    try:
        other = other_watch.serve(other_watch.handler(), host="127.0.0.2")
        resolve = {**names("near", 4, "127.0.0.1"), **names("far", 4, "127.0.0.2")}
        urls = [f"http://near{i}.test:{server.port}/{j}" for i in range(4) for j in range(2)]
        urls += [f"http://far{i}.test:{other.port}/{j}" for i in range(4) for j in range(2)]
        config = FetcherConfig(max_connections_per_ip=2, ip_delay=0.2, resolve=resolve)
        results = fetch_all(config, urls)
        assert [r.error_detail for r in results if not r.ok] == []
        for w in (watch, other_watch):
            assert w.max_open <= 2
            times = sorted(w.request_times)
            assert len(times) == 8
            assert min(b - a for a, b in itertools.pairwise(times)) >= 0.1
    finally:
        other_watch.stop()


# -- resolution ----------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("per_ip", [None, 1])
def test_every_address_of_a_name_is_tried_when_one_refuses(watch: Watch, per_ip: int | None) -> None:
    server = watch.serve(watch.handler())
    closed = get_unused_port()
    asked: list[tuple[str, int]] = []

    def resolver(host: str, port: int) -> Sequence[Address]:
        asked.append((host, port))
        return [(socket.AF_INET, ("127.0.0.1", closed)), (socket.AF_INET, ("127.0.0.1", server.port))]

    config = FetcherConfig(resolver=resolver, max_connections_per_ip=per_ip)
    with NIOFetcher(config) as fetcher:
        first = fetch(fetcher, f"http://two-addresses.test:{server.port}/")
        second = fetch(fetcher, f"http://two-addresses.test:{server.port}/again")
    assert first.ok, first.error_detail
    assert second.ok and second.connection_reused
    assert first.peer == f"127.0.0.1:{server.port}"
    assert server.accepted == 1
    assert asked == [("two-addresses.test", server.port)]  # one lookup, from the cache after


@pytest.mark.timeout(30)
def test_without_a_dns_cache_each_new_connection_follows_the_answer_of_its_time(watch: Watch) -> None:
    # dns_cache_ttl=0: every answer expires at once, which must neither loop nor keep an old one.
    first = watch.serve(watch.handler())
    other_watch = Watch()
    try:
        second = other_watch.serve(other_watch.handler(), host="127.0.0.2")
        asked: list[str] = []

        def resolver(host: str, port: int) -> Sequence[Address]:
            asked.append(host)
            address = first.address if len(asked) == 1 else second.address
            return [(socket.AF_INET, address)]

        config = FetcherConfig(resolver=resolver, dns_cache_ttl=0, max_connections_per_ip=1,
                               max_requests_per_connection=1)
        with NIOFetcher(config) as fetcher:
            peers = [fetch(fetcher, f"http://moving.test:{first.port}/{i}").peer for i in range(3)]
        assert peers == [f"127.0.0.1:{first.port}"] + [f"127.0.0.2:{second.port}"] * 2
        assert first.accepted == 1 and second.accepted == 2
        assert len(asked) == 3  # one lookup per new connection, none spent twice
    finally:
        other_watch.stop()


@pytest.mark.timeout(30)
def test_a_name_that_does_not_resolve_fails_alone_with_per_ip_limits(watch: Watch) -> None:
    server = watch.serve(watch.handler())

    def resolver(host: str, port: int) -> Sequence[Address]:
        if host == "nowhere.test":
            raise OSError("no such name")
        return [(socket.AF_INET, ("127.0.0.1", port))]

    config = FetcherConfig(resolver=resolver, max_connections_per_ip=1, ip_delay=0.01)
    results = fetch_all(config, [f"http://nowhere.test:{server.port}/{i}" for i in range(3)]
                        + [f"http://somewhere.test:{server.port}/{i}" for i in range(3)])
    failed = sorted(r.url for r in results if not r.ok)
    assert failed == [f"http://nowhere.test:{server.port}/{i}" for i in range(3)]
    assert {r.error.value for r in results if not r.ok} == {"dns_error"}  # type: ignore[union-attr]
    assert len(results) == 6 and watch.max_open == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize("per_ip", [None, 1])
def test_a_lookup_slower_than_the_connect_timeout_ends_the_request_and_nothing_else(
    watch: Watch, per_ip: int | None
) -> None:
    server = watch.serve(watch.handler())
    release = threading.Event()

    def resolver(host: str, port: int) -> Sequence[Address]:
        if host == "slow.test":
            release.wait(5)
        return [(socket.AF_INET, ("127.0.0.1", port))]

    config = FetcherConfig(resolver=resolver, max_connections_per_ip=per_ip, connect_timeout=0.2)
    try:
        with NIOFetcher(config) as fetcher:
            for url in (f"http://slow.test:{server.port}/", f"http://quick.test:{server.port}/"):
                assert fetcher.register(url)
            results = [fetch_result for _ in range(2) if (fetch_result := fetcher.get(timeout=10)) is not None]
            release.set()  # before the shutdown, which waits for the resolver's threads
    finally:
        release.set()
    by_url = {r.url: r for r in results}
    assert by_url[f"http://quick.test:{server.port}/"].ok
    slow = by_url[f"http://slow.test:{server.port}/"]
    # With per-IP limits the table waits a connect timeout for the address, then the connection
    # its own: the same error as without them, later.
    assert not slow.ok and slow.error.value == "dns_error", slow.error_detail  # type: ignore[union-attr]
    assert slow.error_detail == "name lookup took longer than 0.2 s"


# -- the table alone ----------------------------------------------------------------------------------


class FakeConn:
    proxy = None

    def __init__(self, slot: Any) -> None:
        self.slot = slot


def test__a_slot_parked_on_its_address_blocks_no_other_host() -> None:
    located: list[Any] = []
    table = HostTable(10, 2, 0.0, 0.0, lambda when, cb, arg: None, lambda: 0.0, per_ip=1, locate=located.append)
    direct = RequestDefaults({})
    for seq, url in enumerate(["http://a.test/1", "http://b.test/1", "http://c.test/1"]):
        table.enqueue(Task(URLBean(url), parse_target(url), seq, 0.0, direct), 0.0)
    assert table.next_assignment(0.0) is None  # all three wait for their addresses, none is guessed
    assert [slot.origin.host for slot in located] == ["a.test", "b.test", "c.test"]
    for slot in located:
        ip = "10.0.0.2" if slot.origin.host == "c.test" else "10.0.0.1"
        table.located(slot, [(socket.AF_INET, (ip, 80))], 0.0)
    first = table.next_assignment(0.0)
    assert first is not None and first.task.url == "http://a.test/1"
    conn: Any = FakeConn(first.slot)
    table.connection_opened(first.slot, conn)
    table.refresh(first.slot, 0.0)
    second = table.next_assignment(0.0)
    assert second is not None and second.task.url == "http://c.test/1"  # b.test waits for 10.0.0.1, c.test not
    table.connection_opened(second.slot, FakeConn(second.slot))  # type: ignore[arg-type]
    assert table.next_assignment(0.0) is None
    assert {ip: group.open for ip, group in table.ip_groups.items()} == {"10.0.0.1": 1, "10.0.0.2": 1}
    # a.test's connection goes idle: b.test takes the address's place by closing it.
    table.exchange_ended(first.slot, True, 0.0)
    table.connection_idle(conn, 0.0)
    third = table.next_assignment(0.0)
    assert third is not None and third.task.url == "http://b.test/1" and third.evict is conn


def test__options_off_make_no_groups_and_no_lookups() -> None:
    table = HostTable(10, 2, 0.0, 0.0, lambda when, cb, arg: None, lambda: 0.0)
    url = "http://a.test/1"
    table.enqueue(Task(URLBean(url), parse_target(url), 0, 0.0, RequestDefaults({})), 0.0)
    assignment = table.next_assignment(0.0)
    assert assignment is not None and assignment.slot.ip is None and table.ip_groups == {}


# -- validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value", "message"), [
    ("max_connections_per_ip", 0, "^max_connections_per_ip must be a positive int or None"),
    ("max_connections_per_ip", -1, "^max_connections_per_ip must be a positive int or None"),
    ("max_connections_per_ip", 1.5, "^max_connections_per_ip must be a positive int or None"),
    ("max_connections_per_ip", True, "^max_connections_per_ip must be a positive int or None"),
    ("ip_delay", -0.1, "^ip_delay must be a non-negative number of seconds"),
    ("ip_delay", math.nan, "^ip_delay must be a non-negative number of seconds"),
    ("ip_delay", math.inf, "^ip_delay must be a non-negative number of seconds"),
    ("ip_delay", "1", "^ip_delay must be a non-negative number of seconds"),
])
def test_bad_per_ip_settings_are_refused_at_construction(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FetcherConfig(**{field: value})  # type: ignore[arg-type]


def test_the_defaults_are_off() -> None:
    config = FetcherConfig()
    assert config.max_connections_per_ip is None and config.ip_delay == 0.0


# -- the command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["fetch", "crawl"])
def test_per_ip_and_ip_delay_on_the_command_line(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    config = config_from(parser.parse_args([command, "--per-ip", "3", "--ip-delay", "0.5", "http://a.test/"]))
    assert (config.max_connections_per_ip, config.ip_delay) == (3, 0.5)
    default = config_from(parser.parse_args([command, "http://a.test/"]))
    assert (default.max_connections_per_ip, default.ip_delay) == (None, 0.0)
    for bad in (["--per-ip", "0"], ["--ip-delay", "-1"]):
        with pytest.raises(SystemExit):
            parser.parse_args([command, *bad, "http://a.test/"])
    assert "--per-ip" in capsys.readouterr().err

"""Per-IP limits (``max_connections_per_ip``, ``ip_delay``), counted from the server's side.

Many host names are mapped to one loopback address through ``FetcherConfig(resolve=...)``, the way
shared hosting puts thousands of names on one server; each server counts the sockets open to it at
every accept and the time of every request it reads.  No real DNS: names resolve through ``resolve``
or a stub ``resolver``, and every address is on loopback.
"""

from __future__ import annotations

import heapq
import itertools
import math
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from rawserver import ConnInfo, RawServer, get_unused_port, http_response, read_request

from niofetcher import FetcherConfig, FetchResult, NIOFetcher, ResolvedAddresses, ip_groups
from niofetcher.cli.args import build_parser, config_from
from niofetcher.config import Address
from niofetcher.models import URLBean
from niofetcher.pool import Assignment, HostTable
from niofetcher.request import RequestDefaults, Task
from niofetcher.urls import parse_target

OK = http_response(200, b"ok", [(b"Content-Type", b"text/plain")])


class Watch:
    """What a group of servers saw together: the most sockets open to all of them at once, request times."""

    def __init__(self) -> None:
        self.servers: list[RawServer] = []
        self.max_open = 0
        self.request_times: list[float] = []
        self.hosts: list[tuple[float, str]] = []  # (time, Host header) of every request read
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
                now = time.monotonic()
                with self._lock:
                    self.request_times.append(now)
                    self.hosts.append((now, host_of(head)))
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


def host_of(head: bytes) -> str:
    """The Host header's name, without its port."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"host":
            return value.strip().decode().rsplit(":", 1)[0]
    return ""


def names(prefix: str, count: int, address: str) -> dict[str, str]:
    return {f"{prefix}{i}.test": address for i in range(count)}


def fetch(fetcher: NIOFetcher, url: str) -> FetchResult:
    assert fetcher.register(url)
    result = fetcher.get(timeout=20)
    assert result is not None, url
    return result


def fetch_all(config: FetcherConfig, urls: list[str]) -> list[FetchResult]:
    with NIOFetcher(config) as fetcher:
        return fetch_all_on(fetcher, urls)


def fetch_all_on(fetcher: NIOFetcher, urls: list[str]) -> list[FetchResult]:
    """Register ``urls`` on a running fetcher and wait for their results."""
    for url in urls:
        assert fetcher.register(url)
    results = [fetcher.get(timeout=20) for _ in urls]
    assert None not in results
    return results  # type: ignore[return-value]


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
def test_a_name_at_its_address_limit_waits_out_the_ip_delay_on_its_own_connection(watch: Watch, no_leaks: object) -> None:
    """One place on the address, a delay between starts: the name's next requests go on its kept-alive
    connection once the delay has passed.  They used to wait in the address's line for a place to
    free, which none did until the idle timeout closed that connection (15 s a request; 1 s here,
    so that a new connection, not a reused one, is what the regression shows)."""
    server = watch.serve(watch.handler())
    config = FetcherConfig(max_connections_per_ip=1, ip_delay=0.05, idle_timeout=1.0,
                           resolve={"a.test": "127.0.0.1"})
    results = fetch_all(config, [f"http://a.test:{server.port}/{i}" for i in range(3)])
    assert [r.ok for r in results] == [True] * 3
    assert [r.connection_reused for r in results] == [False, True, True]
    assert server.accepted == 1


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


# -- turns: reuse within an address's budget, fairness by turns ----------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("turns", ["on", "off"])
def test_busy_names_on_a_full_address_keep_their_connections_for_a_turn(
    watch: Watch, turns: str, monkeypatch: pytest.MonkeyPatch, no_leaks: object
) -> None:
    # 20 names with 40 requests each on one address that takes 4 connections: a name with work
    # keeps its connection for its turn, so connections come per turn and per name, not per request.
    if turns == "off":
        # The negative control: turns of no length hand a connection over whenever another name
        # waits -- first come first served, as the limit first did -- and nearly every request reconnects.
        monkeypatch.setattr(ip_groups, "TURN_TIME", 0.0)
        monkeypatch.setattr(ip_groups, "TURN_REQUESTS", 0)
    server = watch.serve(watch.handler())
    resolve = names("busy", 20, "127.0.0.1")
    urls = [f"http://{name}:{server.port}/{i}" for i in range(40) for name in resolve]
    config = FetcherConfig(max_connections_per_host=2, max_connections_per_ip=4, resolve=resolve)

    results = fetch_all(config, urls)

    assert [r.error_detail for r in results if not r.ok] == []
    assert len(watch.request_times) == len(urls) == 800 and watch.max_open == 4
    if turns == "on":
        assert server.accepted <= 3 * len(resolve), server.accepted  # 20 to 30 measured, not 800
        assert sum(r.connection_reused for r in results) >= len(urls) - 3 * len(resolve)
    else:
        assert server.accepted >= len(urls) // 2, server.accepted


@pytest.mark.timeout(60)
def test_every_name_waiting_for_a_full_address_is_served_within_a_few_turns(
    watch: Watch, no_leaks: object
) -> None:
    # Six names that always have work, one address that takes two connections, and no service time
    # to end a connection: without turns the first two names would keep the address to themselves
    # until their 1,500 requests were done (seconds); by turns the last name starts after about two.
    server = watch.serve(watch.handler(pause=0.002))
    resolve = names("turn", 6, "127.0.0.1")
    config = FetcherConfig(max_connections_per_host=1, max_connections_per_ip=2, connection_service_time=None,
                           resolve=resolve)
    with NIOFetcher(config) as fetcher:
        started = time.monotonic()
        assert fetcher.register_many(f"http://{name}:{server.port}/{i}" for i in range(1500) for name in resolve) == 9000
        while time.monotonic() < started + 20 and len({host for _, host in watch.hosts}) < len(resolve):
            time.sleep(0.02)
        fetcher.shutdown(wait=False)  # the rest is cancelled: what matters is who was served when
    served = sorted(watch.hosts)
    first: dict[str, float] = {}
    for at, host in served:
        first.setdefault(host, at - started)
    assert sorted(first) == sorted(resolve)
    last = max(first.values())
    # Two turns, and a second of slack for a loaded machine.  When a woken name that found its place
    # gone went to the back of the line, a loaded machine made it three or four; without turns it is
    # 1,500 * 2 ms at least.
    assert last <= 2 * ip_groups.TURN_TIME + 1.0, first
    by_then = Counter(host for at, host in served if at - started <= last)
    assert max(by_then.values()) < 1500  # the others still had work when the last one came in
    assert server.accepted <= 3 * len(resolve) and watch.max_open == 2, server.accepted


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
def test_a_connection_that_falls_back_to_another_address_counts_there(watch: Watch) -> None:
    # a.test's first address refuses (nothing listens on 127.0.0.3) and its second is b.test's. Its
    # connection was counted on the first and connected to the second, beside b.test's: two at once
    # on an address limited to one.  Now it counts where it connects, waiting its turn there.
    server = watch.serve(watch.handler(pause=0.2))

    def resolver(host: str, port: int) -> Sequence[Address]:
        first = [(socket.AF_INET, ("127.0.0.3", port))] if host == "a.test" else []
        return [*first, (socket.AF_INET, ("127.0.0.1", port))]

    urls = [f"http://{name}.test:{server.port}/{i}" for i in range(3) for name in ("b", "a")]
    results = fetch_all(FetcherConfig(resolver=resolver, max_connections_per_ip=1), urls)
    assert [result.error for result in results] == [None] * 6
    assert {result.peer for result in results} == {f"127.0.0.1:{server.port}"}
    assert watch.max_open == 1
    # Turned away from b.test's full address, its first request started again there in its turn.
    replayed = sorted(result.url for result in results if result.replayed)
    assert replayed == [f"http://a.test:{server.port}/0"]


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
@pytest.mark.parametrize("per_ip", [1, None])
def test_a_name_whose_record_expires_and_moves_counts_on_its_new_address(
    watch: Watch, per_ip: int | None, no_leaks: object
) -> None:
    # The resolver's own TTL (ResolvedAddresses): moving.test's first answer holds 0 s and its next
    # one puts it on staying.test's address, which the limit must then hold over both names.
    other_watch = Watch()
    try:
        old = other_watch.serve(other_watch.handler(pause=0.05))
        new = watch.serve(watch.handler(pause=0.05), host="127.0.0.2")
        asked: list[str] = []

        def resolver(host: str, port: int) -> Sequence[Address]:
            asked.append(host)
            if host == "staying.test":
                return [(socket.AF_INET, new.address)]
            first = asked.count(host) == 1
            return ResolvedAddresses([(socket.AF_INET, old.address if first else new.address)], ttl=0 if first else 300)

        config = FetcherConfig(resolver=resolver, max_connections_per_ip=per_ip, max_connections_per_host=1,
                               max_requests_per_connection=1)
        urls = [f"http://{name}:{new.port}/{i}" for i in range(5) for name in ("moving.test", "staying.test")]
        results = fetch_all(config, urls)

        assert [(r.url, r.error_detail) for r in results if not r.ok] == []
        moving = sorted((r.url, r.peer) for r in results if r.url.startswith("http://moving.test"))
        assert [peer for _, peer in moving] == [f"127.0.0.1:{old.port}"] + [f"127.0.0.2:{new.port}"] * 4
        assert (old.accepted, new.accepted) == (1, 9)
        if per_ip is None:
            assert watch.max_open == 2  # the negative control: both names at once on the new address
        else:
            assert watch.max_open == per_ip
            assert asked.count("moving.test") == 2  # the 0 s answer asked again, the next one kept
    finally:
        other_watch.stop()


@pytest.mark.timeout(30)
def test_a_busy_name_follows_its_records_ttl_not_the_cache_ceiling(watch: Watch) -> None:
    # Its connections never all close (two at a time, one request each), so only the answer's own
    # expiry makes the host table look again: a record of 0.2 s under a dns_cache_ttl of 300 s.
    other_watch = Watch()
    try:
        old = other_watch.serve(other_watch.handler(pause=0.02))
        new = watch.serve(watch.handler(pause=0.02), host="127.0.0.2")
        asked: list[str] = []

        def resolver(host: str, port: int) -> Sequence[Address]:
            asked.append(host)
            address = old.address if len(asked) == 1 else new.address
            return ResolvedAddresses([(socket.AF_INET, address)], ttl=0.2 if len(asked) == 1 else 300)

        config = FetcherConfig(resolver=resolver, dns_cache_ttl=300, max_connections_per_ip=2,
                               max_connections_per_host=2, max_requests_per_connection=1)
        results = fetch_all(config, [f"http://moving.test:{new.port}/{i}" for i in range(60)])

        assert [(r.url, r.error_detail) for r in results if not r.ok] == []
        assert len(asked) == 2  # looked up again once the first answer expired, and kept the second
        assert old.accepted >= 1 and new.accepted >= 1, (old.accepted, new.accepted)
        assert old.accepted + new.accepted == 60
    finally:
        other_watch.stop()


@pytest.mark.timeout(30)
def test_a_replay_that_closes_its_hosts_idle_connection_counts_its_new_one_on_the_address(watch: Watch) -> None:
    # dns_cache_ttl=0: every answer has expired by the next decision.  The replay of a request that
    # met a stale kept-alive connection closes its host's other idle one to open a fresh one; that
    # close made the slot forget its address before the new connection was counted, so it was
    # counted nowhere and two more for another name made three sockets on an address limited to two.
    connections = itertools.count()

    def handle(sock: socket.socket, info: ConnInfo) -> None:
        mine = next(connections)
        served = 0
        while (head := read_request(sock, info)) is not None:
            if mine < 2 and served == 1:
                return  # a.test's first two connections: gone when their second request comes
            if host_of(head) == "b.test" and not info.sleep(0.3):
                return
            sock.sendall(OK)
            served += 1

    server = watch.serve(handle)
    config = FetcherConfig(resolver=lambda host, port: [(socket.AF_INET, ("127.0.0.1", port))],
                           dns_cache_ttl=0, max_connections_per_ip=2, max_connections_per_host=2)
    with NIOFetcher(config) as fetcher:
        for i in range(2):
            assert fetcher.register(f"http://a.test:{server.port}/{i}")
        assert [fetcher.get(timeout=10) is not None for _ in range(2)] == [True, True]
        replayed = fetch(fetcher, f"http://a.test:{server.port}/2")
        assert replayed.ok and replayed.replayed
        results = fetch_all_on(fetcher, [f"http://b.test:{server.port}/{i}" for i in range(4)])
    assert all(result.ok for result in results)
    assert server.max_open == 2


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
def test_a_resolver_answer_of_the_wrong_shape_fails_that_name_alone(watch: Watch, per_ip: int | None) -> None:
    server = watch.serve(watch.handler())

    def resolver(host: str, port: int) -> Sequence[Address]:
        if host == "odd.test":
            return [(socket.AF_INET, None)]  # type: ignore[list-item]  # a buggy user resolver
        return [(socket.AF_INET, ("127.0.0.1", port))]

    with NIOFetcher(FetcherConfig(resolver=resolver, max_connections_per_ip=per_ip)) as fetcher:
        odd, good = fetch(fetcher, f"http://odd.test:{server.port}/"), fetch(fetcher, f"http://good.test:{server.port}/")
        assert fetcher.failure is None  # the table read the answer on the loop thread: it ended the loop
    assert odd.error is not None and odd.error.value == "dns_error", odd.error_detail
    assert good.ok


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
    # With per-IP limits the table waits a connect timeout for the address, then fails the
    # request: the same error as without them.
    assert not slow.ok and slow.error.value == "dns_error", slow.error_detail  # type: ignore[union-attr]
    assert slow.error_detail == "name lookup took longer than 0.2 s"


@pytest.mark.timeout(30)
def test_a_lookup_slower_than_the_connect_timeout_opens_no_uncounted_connection(watch: Watch) -> None:
    # The table gave up waiting for the address after connect_timeout and let each name's connection
    # look up on its own, counted on no address: an answer that came before that second timeout
    # (here at 1.5 connect timeouts) put every name on the one address at once.
    server = watch.serve(watch.handler(pause=0.5))
    release = threading.Event()

    def resolver(host: str, port: int) -> Sequence[Address]:
        release.wait(5)
        return [(socket.AF_INET, ("127.0.0.1", port))]

    config = FetcherConfig(resolver=resolver, max_connections_per_ip=1, connect_timeout=0.3)
    try:
        with NIOFetcher(config) as fetcher:
            for i in range(3):
                assert fetcher.register(f"http://n{i}.test:{server.port}/")
            time.sleep(0.45)
            release.set()
            failed = [fetcher.get(timeout=10) for _ in range(3)]
            # Answered by now, and kept: the names' next requests are counted on their address.
            served = fetch_all_on(fetcher, [f"http://n{i}.test:{server.port}/again" for i in range(3)])
    finally:
        release.set()
    assert watch.max_open == 1
    assert [(r and r.error and r.error.value, r and r.error_detail) for r in failed] == [
        ("dns_error", "name lookup took longer than 0.3 s")] * 3
    assert all(result.ok for result in served)


# -- the table alone ----------------------------------------------------------------------------------


class FakeConn:
    proxy = None

    def __init__(self, slot: Any, now: float = 0.0) -> None:
        self.slot = slot
        self.established_at = now
        self.requests_done = 0


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
        table.located(slot, [(socket.AF_INET, (ip, 80))], 0.0, 300.0)
    first = table.next_assignment(0.0)
    assert first is not None and first.task.url == "http://a.test/1"
    conn: Any = FakeConn(first.slot)
    table.connection_opened(first.slot, conn, first.group)
    table.refresh(first.slot, 0.0)
    second = table.next_assignment(0.0)
    assert second is not None and second.task.url == "http://c.test/1"  # b.test waits for 10.0.0.1, c.test not
    table.connection_opened(second.slot, FakeConn(second.slot), second.group)  # type: ignore[arg-type]
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



class Clock:
    """The table's clock, moved by hand, and its timers, run by ``advance``."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[Any], None], arg: Any) -> None:
        heapq.heappush(self.timers, (when, next(self._seq), callback, arg))

    def advance(self, step: float) -> None:
        self.now = round(self.now + step, 6)
        while self.timers and self.timers[0][0] <= self.now:
            _, _, callback, arg = heapq.heappop(self.timers)
            callback(arg)


def turn_table(per_ip: int, per_host: int, clock: Clock, delay: float = 0.0) -> HostTable:
    """A table whose every name is on 10.0.0.1, located at once."""
    tables: list[HostTable] = []

    def locate(slot: Any) -> None:
        tables[0].located(slot, [(socket.AF_INET, ("10.0.0.1", 80))], clock.now, clock.now + 300.0)

    table = HostTable(100, per_host, delay, 0.0, clock.call_at, clock, per_ip=per_ip, locate=locate)
    tables.append(table)
    return table


def check_lines(table: HostTable) -> None:
    """Each address's counts of waiting slots are exact: the turns are decided on them."""
    for group in table.ip_groups.values():
        slots = table.slots.values()
        assert group.parked == sum(slot.ip_parked is group for slot in slots)
        assert group.woken == sum(slot.ip_woken is group for slot in slots)
        live = {id(slot) for ticket, _, slot in group.waiters if slot.ip_parked is group and slot.ip_ticket == ticket}
        assert len(live) == group.parked


def queue(table: HostTable, url: str, seq: int, now: float) -> None:
    table.enqueue(Task(URLBean(url), parse_target(url), seq, now, RequestDefaults({})), now)


def start_all(table: HostTable, now: float) -> list[tuple[Assignment, Any]]:
    """Every start the table decides now, done as the engine does it: evictions closed, new connections opened."""
    started = []
    while (assignment := table.next_assignment(now)) is not None:
        for evicted in (assignment.evict, assignment.evict_for_proxy):
            if evicted is not None:
                table.connection_closed(evicted, True, now)
        conn: Any = assignment.conn
        if conn is None:
            conn = FakeConn(assignment.slot, now)
            table.connection_opened(assignment.slot, conn, assignment.group)
        table.refresh(assignment.slot, now)
        started.append((assignment, conn))
    return started


def answer(table: HostTable, conn: Any, now: float) -> None:
    conn.requests_done += 1
    table.exchange_ended(conn.slot, True, now)
    table.connection_idle(conn, now)


def test__a_connection_whose_host_has_work_keeps_its_place_until_its_turn_is_over() -> None:
    clock = Clock()
    table = turn_table(per_ip=1, per_host=1, clock=clock)
    for seq in range(20):
        queue(table, "http://a.test/", seq, 0.0)
    queue(table, "http://b.test/", 100, 0.0)
    [(first, conn)] = start_all(table, 0.0)
    assert first.task.url == "http://a.test/"  # b.test waits for the address's one place
    for served in range(1, ip_groups.TURN_REQUESTS + 3):
        # a.test still has work: it reuses its connection, whatever b.test's older request says.
        clock.now = served * ip_groups.TURN_TIME / 2
        answer(table, conn, clock.now)
        if conn.requests_done >= ip_groups.TURN_REQUESTS and clock.now >= ip_groups.TURN_TIME:
            break
        [(again, reused)] = start_all(table, clock.now)
        assert again.task.url == "http://a.test/" and reused is conn and again.evict is None
    # Its turn is over (open TURN_TIME, TURN_REQUESTS served) and b.test waits: b.test closes it,
    # a.test waits behind b.test for its next turn.
    [(handed, _)] = start_all(table, clock.now)
    assert handed.task.url == "http://b.test/" and handed.evict is conn
    assert table.ip_groups["10.0.0.1"].parked == 1 and table.slot(first.slot.origin).ip_parked is not None


def test__a_held_connection_is_free_once_its_host_has_nothing_queued() -> None:
    table = turn_table(per_ip=2, per_host=2, clock=Clock())
    for seq in range(3):
        queue(table, "http://a.test/", seq, 0.0)
    queue(table, "http://b.test/", 100, 0.0)
    conns = [conn for _, conn in start_all(table, 0.0)]
    assert len(conns) == 2 and {conn.slot.origin.host for conn in conns} == {"a.test"}
    answer(table, conns[0], 0.1)
    answer(table, conns[1], 0.1)  # both held: a.test has one request left
    assert table.ip_groups["10.0.0.1"].idle == {}
    # a.test's last request goes on one; the other is idle for want of work, and b.test takes its place.
    [(last, _), (other, _)] = start_all(table, 0.1)
    assert last.task.url == "http://a.test/" and last.conn is conns[1]
    assert other.task.url == "http://b.test/" and other.evict is conns[0]


@pytest.mark.parametrize("turn", ["default", "with a host delay", "never over", "always over"])
def test__names_on_a_full_address_take_turns(turn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Six names, always with work, two places, no service time: 8 simulated seconds of 10 ms answers
    # (and, "with a host delay", 30 ms between two starts to one name: its connection idles, held, between).
    if turn == "never over":
        monkeypatch.setattr(ip_groups, "TURN_TIME", math.inf)
    elif turn == "always over":
        monkeypatch.setattr(ip_groups, "TURN_TIME", 0.0)
        monkeypatch.setattr(ip_groups, "TURN_REQUESTS", 0)
    clock = Clock()
    table = turn_table(per_ip=2, per_host=1, clock=clock, delay=0.03 if turn == "with a host delay" else 0.0)
    seq = itertools.count()
    hosts = [f"h{i}.test" for i in range(6)]
    for host in hosts:
        queue(table, f"http://{host}/", next(seq), 0.0)
    first: dict[str, float] = {}
    opened = starts = 0
    while clock.now < 8.0:
        started = start_all(table, clock.now)
        for assignment, conn in started:
            host = assignment.slot.origin.host
            first.setdefault(host, clock.now)
            opened += assignment.conn is None
            starts += 1
            queue(table, f"http://{host}/", next(seq), clock.now)  # always more work
        clock.advance(0.01)
        for _, conn in started:
            answer(table, conn, clock.now)
        assert table.ip_groups["10.0.0.1"].open <= 2
        check_lines(table)
    if turn == "never over":
        assert sorted(first) == hosts[:2]  # the negative control: the first two keep the address
        assert opened == 2
        return
    assert sorted(first) == hosts
    if turn in ("default", "with a host delay"):
        # Three rounds of two: the last names start after two turns, one connection per turn.
        assert max(first.values()) <= 2 * ip_groups.TURN_TIME + 0.1, first
        assert opened <= 2 * (8.0 / ip_groups.TURN_TIME + 1), opened
    else:
        assert opened >= starts // 2  # first come first served: a connection nearly per request


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

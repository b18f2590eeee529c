"""The guarantee "the loop survives its own bugs" (docs/guarantees.md).

A fault is injected by wrapping one method so that it raises for one URL
only (the URLs that must fail carry ``FAULT`` in them), against the real
test site with many other URLs in flight.  Two layers are checked:

* a fault while serving one connection, or while starting one request, ends
  that URL with ``protocol_error`` (the exception in ``error_detail``); every
  other URL succeeds, each exactly once, and the loop takes new work after;
* a fault outside any connection (the scheduler, the loop itself, or a
  connection that cannot even be closed) ends the loop thread: every URL
  registered is still delivered exactly once, the unfinished ones as
  ``cancelled`` naming the failure, ``register()`` refuses, nothing waits for
  ever, ``NIOFetcher.failure`` holds the exception, and no thread or socket
  is left.

And the loop's own batching: a ready event left for the next ``run_once``
(beyond ``EVENT_BATCH``) is not delivered to a handler closed meanwhile.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import LeakBaseline, MakeServer
from rawserver import hang, redirect

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher
from niofetcher import loop as loop_module
from niofetcher.channel import Channel
from niofetcher.connection import Connection
from niofetcher.engine import Engine
from niofetcher.http11 import ClientHTTP11
from niofetcher.loop import Loop
from niofetcher.pool import HostTable
from niofetcher.request import Task
from niofetcher.testing import TestSite

pytestmark = pytest.mark.timeout(60)

FAULT = "FAULT"
MESSAGE = "injected fault"
LITERAL = "literal.test"  # in the ``resolve`` map


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite(hosts=2, pages=40, page_size=512) as s:
        yield s


def fault_for(
    monkeypatch: pytest.MonkeyPatch, cls: type, name: str, url_of: Callable[..., str | None], exc: Exception
) -> None:
    """Make ``cls.name`` raise ``exc`` whenever ``url_of(self, *args)`` holds FAULT; otherwise unchanged."""
    original = getattr(cls, name)

    def faulty(self: Any, *args: Any, **kwargs: Any) -> Any:
        url = url_of(self, *args)
        if url is not None and FAULT in url:
            raise exc
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, faulty)


def task_url(conn: Connection, *_: Any) -> str | None:
    return conn.task.url if conn.task is not None else None


def stub_resolver(host: str, port: int) -> list[tuple[int, tuple[str, int]]]:
    """Every name is 127.0.0.1: answers come from the resolver pool, never from the network."""
    return [(socket.AF_INET, ("127.0.0.1", port))]


# Where the fault goes, and a URL that reaches that place.  ``site`` is the test
# site; ``extra`` holds a redirecting and a hanging raw server.  A fault in
# opening a connection needs a URL that no open connection can take: a host
# of its own (a ``resolve`` entry answers at once, in the scheduler's round; a
# name for the stub resolver is answered later, through the resolver pool).
PLACES: dict[str, tuple[Callable[[pytest.MonkeyPatch, Exception], None], Callable[[TestSite, dict[str, int]], str]]] = {
    # The issue's own case: a request line that cannot be encoded.  Reused
    # connections start it from the scheduler's round, new ones on writable.
    "start_request": (
        lambda mp, exc: fault_for(mp, ClientHTTP11, "start_request", lambda http, method, target, *_: target, exc),
        lambda site, extra: f"{site.base_urls[0]}page/7?{FAULT}",
    ),
    "request headers": (
        lambda mp, exc: fault_for(mp, Task, "wire_headers", lambda task: task.url, exc),
        lambda site, extra: f"{site.base_urls[1]}page/3?{FAULT}",
    ),
    "new connection": (
        lambda mp, exc: fault_for(mp, Connection, "__init__", lambda conn, owner, loop, config, slot, task, *_: task.url, exc),
        lambda site, extra: f"http://{LITERAL}:{site.ports[0]}/page/9?{FAULT}",
    ),
    "tcp connected": (
        lambda mp, exc: fault_for(mp, Channel, "_on_tcp_connected", lambda channel: task_url(channel.user), exc),
        lambda site, extra: f"http://{LITERAL}:{site.ports[1]}/page/5?{FAULT}",
    ),
    "dns answer": (
        lambda mp, exc: fault_for(mp, Channel, "connect", lambda channel, *_: task_url(channel.user), exc),
        lambda site, extra: f"http://{FAULT.lower()}.test:{site.ports[0]}/page/2?{FAULT}",
    ),
    "reading": (
        lambda mp, exc: fault_for(mp, Channel, "on_readable", lambda channel: task_url(channel.user), exc),
        lambda site, extra: f"{site.base_urls[0]}page/11?{FAULT}",
    ),
    "exchange_done": (
        lambda mp, exc: fault_for(mp, Engine, "exchange_done", lambda engine, conn, task, *_: task.url, exc),
        lambda site, extra: f"{site.base_urls[1]}page/12?{FAULT}",
    ),
    "redirect": (
        lambda mp, exc: fault_for(mp, Engine, "_redirect", lambda engine, task, *_: task.url, exc),
        lambda site, extra: f"http://127.0.0.1:{extra['redirect']}/{FAULT}",
    ),
    "timer": (
        lambda mp, exc: fault_for(mp, Connection, "_expired", task_url, exc),
        lambda site, extra: f"http://127.0.0.1:{extra['hang']}/{FAULT}",
    ),
}


def good_urls(site: TestSite, extra: dict[str, int], n: int, tag: str) -> list[str]:
    """``n`` distinct good URLs over both hosts, plus one that redirects to the site."""
    pages = [u for u in site.page_urls() if "/page/" in u]
    urls = [f"{pages[i % len(pages)]}?{tag}={i}" for i in range(n)]
    urls.append(f"http://127.0.0.1:{extra['redirect']}/fine?{tag}")
    return urls


def take_all(fetcher: NIOFetcher, urls: list[str]) -> dict[str, FetchResult]:
    """Every result of ``urls`` by URL, exactly one each."""
    got: dict[str, FetchResult] = {}
    while len(got) < len(urls):
        result = fetcher.get(timeout=20)
        assert result is not None, f"no result for {sorted(set(urls) - set(got))}"
        assert result.url not in got, f"two results for {result.url}"
        got[result.url] = result
    return got


@pytest.mark.parametrize("place", list(PLACES))
def test_a_fault_serving_one_url_fails_that_url_only(
    no_leaks: LeakBaseline, place: str, site: TestSite, raw_server: MakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = {
        "redirect": raw_server(redirect(f"{site.base_urls[0]}page/1")).port,
        "hang": raw_server(hang(), sock_timeout=10).port,
    }
    inject, faulty_url = PLACES[place]
    exc: Exception = RuntimeError(MESSAGE)
    if place == "start_request":
        exc = UnicodeEncodeError("ascii", "/\u00fcn\u00ef", 1, 2, MESSAGE)
    inject(monkeypatch, exc)
    bad = faulty_url(site, extra)
    first = good_urls(site, extra, 60, "first")
    config = FetcherConfig(
        max_connections_per_host=2, read_timeout=1.0, resolve={LITERAL: "127.0.0.1"}, resolver=stub_resolver
    )
    with NIOFetcher(config) as fetcher:
        urls = [*first[:30], bad, *first[30:]]
        for url in urls:
            assert fetcher.register(url)
        results = take_all(fetcher, urls)
        # The loop goes on: new work after the fault is served too.
        later = good_urls(site, extra, 20, "later")
        results.update(take_all(fetcher, later) if all(fetcher.register(u) for u in later) else {})
        assert fetcher.failure is None
        assert fetcher.stats().in_flight == 0
    failed = results.pop(bad)
    assert failed.error == ErrorKind.PROTOCOL_ERROR, failed
    assert type(exc).__name__ in failed.error_detail and MESSAGE in failed.error_detail, failed.error_detail
    assert len(results) == len(first) + len(later)
    not_ok = {url: (r.error, r.error_detail) for url, r in results.items() if not r.ok}
    assert not not_ok


# -- the loop thread dies anyway ----------------------------------------------


def break_scheduler(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    """The scheduler takes a request off its host queue, then fails: only the registry still knows it."""
    original = HostTable.next_assignment
    calls = [0]

    def failing(self: HostTable, now: float) -> Any:
        assignment = original(self, now)
        calls[0] += 1
        if calls[0] == 5:
            raise exc
        return assignment

    monkeypatch.setattr(HostTable, "next_assignment", failing)


def break_loop(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    original = Loop.run_once
    calls = [0]

    def failing(self: Loop, max_wait: float | None) -> None:
        calls[0] += 1
        if calls[0] == 8:
            raise exc
        original(self, max_wait)

    monkeypatch.setattr(Loop, "run_once", failing)


def break_close(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    """A connection's close fails half-way: the fault guard cannot clean up, so the loop must end."""
    original = Engine.connection_closed
    calls = [0]

    def failing(self: Engine, conn: Connection, was_idle: bool) -> None:
        calls[0] += 1
        if calls[0] == 3:
            raise exc
        original(self, conn, was_idle)

    monkeypatch.setattr(Engine, "connection_closed", failing)


def break_table_close(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    """The host table fails to count a closed connection: left alone, the host would count a socket
    that is gone and never dispatch again, so the loop must end instead."""
    original = HostTable.connection_closed
    calls = [0]

    def failing(self: HostTable, conn: Connection, was_idle: bool, now: float) -> None:
        calls[0] += 1
        if calls[0] == 3:
            raise exc
        original(self, conn, was_idle, now)

    monkeypatch.setattr(HostTable, "connection_closed", failing)


def break_scheduler_and_drain(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    """The scheduler fails, and so does the orderly cancel of the host queues: the URLs waiting there as
    str registrations (no Task yet) must still come back, read from the queues themselves."""
    break_scheduler(monkeypatch, exc)

    def failing(self: HostTable) -> Any:
        raise exc

    monkeypatch.setattr(HostTable, "drain_pending", failing)


@pytest.mark.parametrize(
    "breaker", [break_scheduler, break_loop, break_close, break_table_close, break_scheduler_and_drain]
)
def test_a_dead_loop_still_delivers_every_url_and_nothing_waits(
    breaker: Callable[[pytest.MonkeyPatch, Exception], None], monkeypatch: pytest.MonkeyPatch, no_leaks: LeakBaseline
) -> None:
    exc = RuntimeError(MESSAGE)
    breaker(monkeypatch, exc)
    with TestSite(hosts=2, pages=40, delay=0.05) as slow_site:
        urls = [u for u in slow_site.page_urls() if "/page/" in u]
        config = FetcherConfig(max_connections_per_host=2, max_requests_per_connection=1)
        fetcher = NIOFetcher(config)
        fetcher.start()
        for url in urls:
            assert fetcher.register(url)
        results = list(fetcher.results())  # must end although the loop died
        assert sorted(r.url for r in results) == sorted(urls)  # each exactly once
        failure = fetcher.failure
        assert failure is not None
        # A close that fails cannot be cleaned up by the fault guard: it ends the loop, saying why.
        closing = breaker in (break_close, break_table_close)
        assert failure is exc or (closing and failure.__cause__ is exc), repr(failure)
        cancelled = [r for r in results if not r.ok]
        assert cancelled, "the fault came too late to test anything"
        for r in cancelled:
            assert r.error == ErrorKind.CANCELLED, r
            assert r.error_detail == f"niofetcher loop failed: RuntimeError: {failure}", r.error_detail
        assert not fetcher.register(urls[0])
        assert fetcher.join(timeout=None)
        assert fetcher.get() is None  # no timeout: with nothing left it must not wait
        assert list(fetcher.results()) == []
        fetcher.shutdown()
        assert fetcher.failure is failure
        stats = fetcher.stats()
        assert stats.registered == stats.completed == len(urls)


def test_failure_is_none_after_a_normal_shutdown(no_leaks: LeakBaseline, site: TestSite) -> None:
    fetcher = NIOFetcher()
    assert fetcher.failure is None
    with fetcher:
        assert fetcher.register(site.base_urls[0])
        assert fetcher.get(timeout=10) is not None
        assert fetcher.failure is None
    assert fetcher.failure is None


class _Reader:
    """A Pollable that reads its socket's byte and says so (and can close another reader)."""

    def __init__(self, loop: Loop, sock: socket.socket, handled: list[_Reader]) -> None:
        self.interest = 0
        self.loop = loop
        self.sock = sock
        self.handled = handled
        self.closes: _Reader | None = None
        self.log: list[tuple[str, _Reader]] = []
        loop.set_interest(self, sock, loop_module.READ)
        loop.timers.call_at(0.0, lambda reader: reader.log.append(("timer", reader)), self)  # due at once

    def on_readable(self) -> None:
        self.sock.recv(1)
        self.handled.append(self)
        self.log.append(("read", self))
        if self.closes is not None:  # e.g. a timeout or an eviction closing another connection
            self.loop.set_interest(self.closes, self.closes.sock, 0)

    def on_writable(self) -> None:
        raise AssertionError("not asked for")

    def on_internal_error(self, exc: Exception) -> None:
        raise exc


@pytest.mark.timeout(30)
@pytest.mark.parametrize("far", ["idle_timeout", "host_delay"])
def test_a_timer_months_away_does_not_end_the_loop(far: str, no_leaks: LeakBaseline, site: TestSite) -> None:
    """A timer further away than epoll can wait (about 24.8 days) as the loop's earliest -- a
    connection kept idle for a month, a URL behind a host delay of months -- leaves select() waiting
    at most ``MAX_WAIT``; the loop goes on taking work (it died of an OverflowError before)."""
    if far == "idle_timeout":
        # The read timeout's timer fires first and re-arms at the idle deadline.
        config = FetcherConfig(idle_timeout=3e6, connection_service_time=None, read_timeout=0.2)
    else:
        config = FetcherConfig(idle_timeout=0.2)
    first, other = site.base_urls
    fetcher = NIOFetcher(config)
    with fetcher:
        if far == "host_delay":
            fetcher.set_host_delay(first, 1e7)
            fetcher.register(f"{first}page/1")  # waits 1e7 s behind page/0
        fetcher.register(f"{first}page/0")
        result = fetcher.get(timeout=10)
        assert result is not None and result.ok
        time.sleep(0.5)  # the first host's idle connection is kept (or closed): the far timer is the earliest
        fetcher.register(f"{other}page/0")
        result = fetcher.get(timeout=10)
        assert fetcher.failure is None
        assert result is not None and result.ok, result
        fetcher.shutdown(wait=False)


def test_a_host_delay_must_be_finite() -> None:
    with NIOFetcher() as fetcher, pytest.raises(ValueError, match="finite"):
        fetcher.set_host_delay("http://127.0.0.1:1/", math.inf)


def test_events_beyond_a_batch_wait_for_the_next_run_once_and_skip_handlers_closed_meanwhile() -> None:
    """One run_once handles EVENT_BATCH ready events (so the scheduler runs between batches); the next
    handles the rest without a select(), skipping a handler that an earlier one closed.  The batches of
    one select() share its clock, and a handler's due timer runs only after its waiting event."""
    loop = Loop()
    pairs = [socket.socketpair() for _ in range(loop_module.EVENT_BATCH + 10)]
    handled: list[_Reader] = []
    try:
        readers = [_Reader(loop, ours, handled) for ours, _ in pairs]
        for _, theirs in pairs:
            theirs.send(b"x")
        selects = 0
        select = loop._selector.select

        def counted(timeout: float | None = None) -> Any:
            nonlocal selects
            selects += 1
            return select(timeout)

        loop._selector.select = counted  # type: ignore[method-assign]
        loop.run_once(0.0)
        assert len(handled) == loop_module.EVENT_BATCH and selects == 1
        now = loop.now
        left = [key.data for key, _ in loop._ready]
        assert all(reader.log == [("read", reader), ("timer", reader)] for reader in handled)
        assert all(reader.log == [] for reader in left)  # their timers wait for their events
        assert sorted(map(id, left)) == sorted(id(r) for r in readers if r not in handled)
        left[0].closes = left[-1]  # handled first in the next call: closes the last one waiting
        loop.run_once(None)  # events are left: must not wait
        assert selects == 1 and loop.now == now
        assert len(handled) == len(readers) - 1 and left[-1] not in handled
        assert all(reader.log == [("read", reader), ("timer", reader)] for reader in left[:-1])
        assert left[-1].log == [("timer", left[-1])]  # closed: no event, and its timer after the batch
    finally:
        for ours, theirs in pairs:
            ours.close()
            theirs.close()
        loop.close()

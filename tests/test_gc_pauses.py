"""Pending URLs cost the garbage collector nothing (request.py, "Pending URLs and the garbage collector"),
and a closed connection leaves it nothing to find (channel.py, ``Channel.close``).

A full collection walks every tracked object, so its pause grows with the
tracked objects the pending URLs hold: four each (Task, URLBean, Target,
heap entry) made one pass take about a second at a million pending URLs,
with the loop thread standing still.  A URL registered as a str now waits as
a tuple of atoms that the collector untracks.  The figures are in
benchmarks/loop_pauses.py; here, counts only, no clock.

The server accepts and never answers, so with one connection every URL but
the first stays pending for the length of the test.
"""

from __future__ import annotations

import gc
import ssl
import time
from pathlib import Path

import pytest
import trustme

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher, URLBean
from niofetcher.testing import TestSite

pytestmark = pytest.mark.timeout(60)

URLS = 10_000
# Per pending str URL: nothing of its own is tracked.  What the whole run may add is
# the fetcher's fixed bookkeeping (the one request in flight, its connection, a host
# slot, the resolver's thread and cache): a few hundred objects, so 0.05 per URL over
# 10,000.  Before the change it was 4.0 per URL.
TRACKED_PER_PENDING_URL = 0.05


def tracked_objects() -> int:
    gc.collect()  # untracks the tuples of atoms, as any collection that meets them does
    return len(gc.get_objects())


def wait_until_queued(fetcher: NIOFetcher) -> None:
    """Until the loop has moved every registration from its inbox to the host queues."""
    engine = fetcher._engine
    deadline = time.monotonic() + 30
    while engine._inbox and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not engine._inbox


def test_a_pending_str_url_holds_no_object_the_collector_tracks(silent_port: int, no_leaks: object) -> None:
    urls = [f"http://127.0.0.1:{silent_port}/page/{i}" for i in range(URLS)]
    fetcher = NIOFetcher(FetcherConfig(max_connections=1, max_connections_per_host=1))
    fetcher.start()
    try:
        before = tracked_objects()
        for url in urls:
            assert fetcher.register(url)
        wait_until_queued(fetcher)
        added = tracked_objects() - before
        assert fetcher.stats().pending == URLS - 1
        assert added <= TRACKED_PER_PENDING_URL * URLS, f"{added / URLS:.2f} tracked objects per pending URL"
    finally:
        fetcher.shutdown(wait=False)


def test_a_pending_str_url_is_delivered_as_it_was_registered(silent_port: int, no_leaks: object) -> None:
    """Its URLBean is made late (at start or cancel): same URL, same priority, queue wait counted from register()."""
    base = f"http://127.0.0.1:{silent_port}"
    fetcher = NIOFetcher(FetcherConfig(max_connections=1, max_connections_per_host=1))
    fetcher.start()
    bean = URLBean(f"{base}/bean", priority=3, meta={"mine": True})
    try:
        assert fetcher.register(f"{base}/first")  # takes the one connection, then hangs
        deadline = time.monotonic() + 10
        while fetcher.stats().in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fetcher.register(f"{base}/str", priority=7)
        assert fetcher.register(bean)
        wait_until_queued(fetcher)
        time.sleep(0.05)
        fetcher.cancel_pending()
        results: list[FetchResult] = []
        while len(results) < 2:
            result = fetcher.get(timeout=10)
            assert result is not None
            results.append(result)
    finally:
        fetcher.shutdown(wait=False)
    by_url = {r.url: r for r in results}
    made = by_url[f"{base}/str"]
    assert made.error == ErrorKind.CANCELLED
    assert made.bean == URLBean(f"{base}/str", priority=7)
    assert made.final_url == f"{base}/str"
    assert made.queue_wait >= 0.05
    assert by_url[f"{base}/bean"].bean is bean  # a URLBean registered is the one delivered


def test_pending_str_urls_start_in_priority_then_registration_order_beside_beans() -> None:
    """Strs (PendingURLs) and URLBeans (Tasks) share one host queue: priority first, then register() order."""
    fetcher = NIOFetcher(FetcherConfig(max_connections=10, max_connections_per_host=10))  # never started
    engine = fetcher._engine
    # Each kind at each priority, so that neither "strs first" nor "beans first" gives this order.
    order = [("http://a.test/a", 0, str), ("http://a.test/b", 5, URLBean), ("http://a.test/c", 0, URLBean),
             ("http://a.test/d", 5, str), ("http://a.test/e", 0, str)]
    try:
        for url, priority, kind in order:
            assert fetcher.register(url if kind is str else URLBean(url, priority=priority), priority)
        engine._take_inbox()  # the loop's own step, run here: no thread, no I/O
        started = []
        while (assignment := engine.table.next_assignment(0.0)) is not None:
            started.append((assignment.task.url, assignment.task.priority))
            engine.table.connection_opened(assignment.slot)
            engine.table.refresh(assignment.slot, 0.0)
        assert started == [
            ("http://a.test/b", 5), ("http://a.test/d", 5),
            ("http://a.test/a", 0), ("http://a.test/c", 0), ("http://a.test/e", 0),
        ]
    finally:
        fetcher.shutdown(wait=False)


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_closed_connection_leaves_no_cycle_for_the_collector(tls: bool, tmp_path: Path) -> None:
    """A connection is freed when it closes, by its reference count: what only the cyclic
    collector could free (a channel and its user holding each other, with all a connection holds)
    would wait for a collection of the oldest generation, the loop's longest pause.  One
    connection per page, the collector off while they come and go; then every niofetcher object
    it finds unreachable is one a closed connection left."""
    ca = trustme.CA()
    server: ssl.SSLContext | None = None
    ca_file = None
    if tls:
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(server)
        ca_file = str(tmp_path / "ca.pem")
        ca.cert_pem.write_to_path(ca_file)
    with TestSite(hosts=2, pages=60, tls=server) as site:
        config = FetcherConfig(max_connections_per_host=2, max_requests_per_connection=1, ca_file=ca_file)
        urls = [f"{base}page/{i}" for base in site.base_urls for i in range(60)]
        with NIOFetcher(config) as fetcher:
            for url in urls[:2]:
                fetcher.register(url)
            assert all(result.ok for result in fetcher.results())  # the one-time objects made
            gc.collect()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds goes to gc.garbage, not away
            try:
                for url in urls[2:]:
                    fetcher.register(url)
                results = list(fetcher.results())
                gc.collect()
                left = sorted({type(thing).__qualname__ for thing in gc.garbage
                               if type(thing).__module__.startswith("niofetcher")})
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
    assert len(results) == len(urls) - 2 and all(result.ok for result in results)
    assert left == []

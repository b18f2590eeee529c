"""``NIOFetcher.set_host_deadlines``: no request to an origin starts at or after its deadline, on a
new connection or a kept-alive one; its requests wait (a later deadline reopens it, a cancel takes
them back) and the other origins go on.  What the server counts, not what the fetcher says: each
test has an origin without a gate, or the same origin before the gate, whose requests do arrive
(the negative control: the check that nothing arrived can fail).
"""

from __future__ import annotations

import math
import time

import pytest

from niofetcher import FetcherConfig, NIOFetcher
from niofetcher.errors import ErrorKind
from niofetcher.testing import TestSite

# Long enough for a request the gate failed to hold to have reached the server.
SETTLE = 0.5


def page(site: TestSite, host: int, n: int) -> str:
    return f"{site.base_urls[host]}page/{n}"


@pytest.mark.timeout(30)
def test_a_closed_gate_holds_a_host_s_requests_until_it_reopens_and_blocks_no_other_host(no_leaks: object) -> None:
    with TestSite(hosts=2, pages=4, max_seconds=30) as site, NIOFetcher() as fetcher:
        gated, free = site.ports
        fetcher.set_host_deadlines({site.base_urls[0]: time.monotonic() - 1})  # before the host is known
        assert fetcher.register(page(site, 0, 0)) and fetcher.register(page(site, 1, 0))
        result = fetcher.get(timeout=10)
        assert result is not None and result.ok and result.url == page(site, 1, 0)  # the control went out
        time.sleep(SETTLE)
        assert site.counters(gated).requests == 0 and site.counters(free).requests == 1
        assert fetcher.stats().pending == 1  # waiting, not failed
        fetcher.set_host_deadlines({page(site, 0, 3): time.monotonic() + 60})  # any URL of the origin
        result = fetcher.get(timeout=10)
        assert result is not None and result.ok and result.url == page(site, 0, 0)
        assert site.counters(gated).requests == 1


@pytest.mark.timeout(30)
def test_a_kept_alive_connection_takes_no_request_past_the_deadline(no_leaks: object) -> None:
    with TestSite(hosts=1, pages=4, max_seconds=30) as site, NIOFetcher() as fetcher:
        fetcher.set_host_deadlines({site.base_urls[0]: math.inf})  # open: as without a gate
        assert fetcher.register(page(site, 0, 0))
        first = fetcher.get(timeout=10)
        assert first is not None and first.ok and site.counters().requests == 1
        fetcher.set_host_deadlines({site.base_urls[0]: time.monotonic() + SETTLE / 2})
        time.sleep(SETTLE)  # past the deadline, set while it was still ahead: the connection stays
        assert fetcher.register(page(site, 0, 1))
        time.sleep(SETTLE)
        assert site.counters().requests == 1 and fetcher.stats().open_connections == 1  # it idles, unused
        fetcher.set_host_deadlines({site.base_urls[0]: time.monotonic() + 60})  # renewed
        second = fetcher.get(timeout=10)
        assert second is not None and second.ok and second.connection_reused
        assert site.counters().requests == 2 and site.counters().accepted == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize("gate", ["lifted", "closed"])
def test_a_host_given_back_or_lost_has_its_idle_connections_closed_at_once(no_leaks: object, gate: str) -> None:
    """A lease holder that gives a host back (None) or loses it (a deadline already passed) keeps no
    socket to that server: another worker owns it now.  The other host keeps its idle connection
    (the control: the server's count of open connections does show one that stays)."""
    with TestSite(hosts=2, pages=4, max_seconds=30) as site, NIOFetcher() as fetcher:
        gated, kept = site.ports
        assert fetcher.register_many([page(site, 0, 0), page(site, 1, 0)]) == 2
        assert all(r is not None and r.ok for r in (fetcher.get(timeout=10), fetcher.get(timeout=10)))
        assert site.counters(gated).open_now == 1 and site.counters(kept).open_now == 1
        fetcher.set_host_deadlines({site.base_urls[0]: None if gate == "lifted" else -math.inf})
        deadline = time.monotonic() + 10
        while site.counters(gated).open_now and time.monotonic() < deadline:
            time.sleep(0.01)
        assert site.counters(gated).open_now == 0 and site.counters(kept).open_now == 1
        assert fetcher.stats().open_connections == 1 and fetcher.stats().closed_idle == 1


@pytest.mark.timeout(30)
def test_requests_waiting_when_the_deadline_passes_stay_until_cancelled(no_leaks: object) -> None:
    """One connection, a slow server: the first request starts, the deadline passes while it is
    served, and the two behind it never start; cancel_pending() takes them back."""
    with (TestSite(hosts=1, pages=4, delay=0.4, max_seconds=30) as site,
          NIOFetcher(FetcherConfig(max_connections_per_host=1)) as fetcher):
        fetcher.set_host_deadlines({site.base_urls[0]: time.monotonic() + 0.2})
        urls = [page(site, 0, n) for n in range(3)]
        assert fetcher.register_many(urls) == 3
        first = fetcher.get(timeout=10)
        assert first is not None and first.ok and first.url == urls[0]  # started before the deadline
        time.sleep(SETTLE)
        assert site.counters().requests == 1 and fetcher.stats().pending == 2
        fetcher.cancel_pending()
        rest = [fetcher.get(timeout=10) for _ in urls[1:]]
        assert all(r is not None and r.error is ErrorKind.CANCELLED for r in rest), rest
        assert site.counters().requests == 1


def test_a_deadline_is_a_number_or_none() -> None:
    with NIOFetcher() as fetcher:
        for bad in (math.nan, True, "soon"):
            with pytest.raises(ValueError, match="host deadline"):
                fetcher.set_host_deadlines({"http://a.example": bad})  # type: ignore[dict-item]
        with pytest.raises(ValueError):
            fetcher.set_host_deadlines({"not a url": 1.0})


@pytest.mark.timeout(30)
def test_a_pause_after_select_does_not_let_a_request_start_past_its_gate() -> None:
    with TestSite(hosts=1, pages=4, max_seconds=30) as site, NIOFetcher() as fetcher:
        url = f"{site.base_urls[0]}page/0"
        fetcher.set_host_deadlines({url: time.monotonic() + 0.2})
        engine = fetcher._engine
        # A stand-in for a SIGSTOP, a GC pause or 64 slow events: the loop's clock is the select()'s.
        engine.post(time.sleep, 0.5)
        assert fetcher.register(url)
        time.sleep(1.0)
        started = site.counters().requests
        fetcher.cancel_pending()
        assert fetcher.get(timeout=10) is not None
        assert started == 0, "a request started 0.3 s past its gate"

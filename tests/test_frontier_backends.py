"""The contract of a frontier store: every store keeps the promises of
``niofetcher/crawl/frontier/base.py`` alike, and this suite holds each one to them (issue 12, item 5d;
issue 26, item 3).  docs/extending.md tells how a new store joins.

The suite reads a frontier only through :class:`~niofetcher.crawl.frontier.base.FrontierBackend`
-- what the crawler asks of it, and ``lookup()``, which gives one URL as the frontier keeps it --
and never through SQL, so that a store without SQL passes it like the two with.  What a second
reader of the storage would see is what a store keeps through a crash: ``Store.crash()`` ends a
frontier as a killed process does (``Store.kill()``, the one piece of a store's insides the suite
needs), and the next ``Store.open()`` reads what survived.

Each test gets a ``store`` from :data:`STORES`: a place of its own (a fresh SQLite file, a fresh
crawl -- a schema -- in the one throwaway PostgreSQL cluster of the session, ``pg_cluster.py``),
where ``store.open()`` opens a frontier by ``open_frontier()``, as the crawler does.  Time is a
fake clock.  The SQLite frontier commits every outcome at once here (``commit_every=1``), as the
PostgreSQL one always does outside ``batch()``.

What is a store's own -- its tables, indexes and upgrades, its files, its races between workers
-- is tested beside it: tests/test_frontier*.py (SQLite), tests/test_frontier_postgres.py,
tests/test_postgres_hosts.py and tests/test_crawler_postgres.py (PostgreSQL).
"""

from __future__ import annotations

import inspect
import itertools
import random
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import pytest
from memory_store import MemoryStore, Place
from test_frontier import FakeClock

from niofetcher.crawl.frontier import FrontierBackend, FrontierError, FrontierErrorKind, open_frontier
from niofetcher.crawl.frontier.base import MOST_BIGINT, MOST_INT, STATES, FrontierURL, Revisits, StoredURL, Visit
from niofetcher.crawl.frontier.service import FrontierService
from niofetcher.crawl.frontier.sqlite import frontier as sqlite_frontier
from niofetcher.crawl.frontier.traps import TrapRules
from niofetcher.crawl.schedule import RetrySchedule
from niofetcher.urls import normalize_url

pytest_plugins = ["pg_cluster"]
pytestmark = pytest.mark.timeout(60)

# The crawl's retry policy (no store option: a store is told each wait), asked as the crawler asks it: fail() records the wait it is given.
RETRIES = RetrySchedule(max_attempts=3, first=1.0, most=300.0)


class Store:
    """How the suite makes the frontiers of one store: a new store is one subclass of this, added to
    :data:`STORES`.

    ``location`` and ``options`` are what ``open_frontier()`` gets (the suite adds ``clock``, and a
    test its own); every ``open()`` opens the same place again.
    """

    name: ClassVar[str] = ""
    # Workers share it: a second open() joins as another worker, which takes none of the first one's
    # hosts.  Otherwise a second open() is refused (FrontierError, kind LOCKED) and changes nothing.
    shared: ClassVar[bool] = False

    def __init__(self, request: pytest.FixtureRequest, clock: FakeClock) -> None:
        self.clock = clock
        self.location = ""
        self.options: dict[str, Any] = {}
        self.opened: list[FrontierBackend] = []
        self.crashed: list[FrontierBackend] = []

    def open(self, **options: Any) -> FrontierBackend:
        """A frontier on the store's place, with the suite's clock, the store's options and ``options``."""
        frontier = self.make(**{"clock": self.clock, **self.options, **options})
        self.opened.append(frontier)
        return frontier

    def make(self, **options: Any) -> FrontierBackend:
        """The frontier at ``location``, found as the crawler finds it; a store not installed yet
        (no ``niofetcher.frontiers`` entry point) constructs its class here instead."""
        return open_frontier(self.location, **options)

    def crash(self, frontier: FrontierBackend) -> None:
        """End ``frontier`` as a killed process does (:meth:`kill`); the test's end leaves it alone."""
        self.crashed.append(frontier)
        self.kill(frontier)

    def kill(self, frontier: Any) -> None:
        """What a killed process leaves of ``frontier``: nothing of it committed after this, its hold
        on the store gone, and a call of it raising FrontierError."""
        raise NotImplementedError

    def close_all(self) -> None:
        for frontier in self.opened:
            if frontier not in self.crashed:
                frontier.close()


class SQLiteStore(Store):
    name = "sqlite"

    def __init__(self, request: pytest.FixtureRequest, clock: FakeClock) -> None:
        super().__init__(request, clock)
        self.location = str(request.getfixturevalue("tmp_path") / "crawl.db")
        self.options = {"commit_every": 1}

    def kill(self, frontier: Any) -> None:
        self.kill_file(frontier.store)

    @staticmethod
    def kill_file(store: Any) -> None:
        conn, store._conn = store._conn, None
        conn.close()  # what is not committed is rolled back
        store._let_go()  # the lock a dead process's file descriptors let go of


_crawl_names = itertools.count()


class PostgresStore(Store):
    name = "postgres"
    shared = True

    def __init__(self, request: pytest.FixtureRequest, clock: FakeClock) -> None:
        super().__init__(request, clock)
        self.dsn = self.location = request.getfixturevalue("postgres_dsn")  # skips where there is no PostgreSQL
        self.crawl = f"test_{next(_crawl_names)}_{int(time.time() * 1000) % 10**9}"
        self.options = {"crawl": self.crawl}

    def kill(self, frontier: Any) -> None:
        conn, frontier.store._conn = frontier.store._conn, None
        conn.close()  # the open transaction is rolled back by the server; the lock goes with the session


class CoreOnly:
    """A store of the core methods alone -- no host leases, no robots.txt store, the two
    capabilities a store may lack (capabilities.py) -- with a SQLite store behind them."""

    LACKS = ("holds", "lost_hosts", "recordable", "start_deadlines", "robots", "store_robots")

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in self.LACKS:
            raise AttributeError(name)
        return getattr(self.inner, name)



class CoreOnlyStore(SQLiteStore):
    """The suite passes a store without the capabilities: the service gives it their plain answers."""

    name = "core-only"

    def make(self, traps: TrapRules | None = None, **options: Any) -> FrontierBackend:
        store = sqlite_frontier.SQLiteStore(self.location, commit_interval=0.1,
                                            count_admitted=traps is not None and traps.max_pages_per_host is not None,
                                            **options)
        return FrontierService(CoreOnly(store), traps=traps)

    def kill(self, frontier: Any) -> None:
        self.kill_file(frontier.store.inner)


class InMemoryStore(Store):
    """The store of one module written against ``store.Store`` alone (memory_store.py): the newcomer's."""

    name = "memory"

    def __init__(self, request: pytest.FixtureRequest, clock: FakeClock) -> None:
        super().__init__(request, clock)
        self.place = Place()

    def make(self, traps: TrapRules | None = None, **options: Any) -> FrontierBackend:
        return FrontierService(MemoryStore(self.place, **options), traps=traps)

    def kill(self, frontier: Any) -> None:
        frontier.store.die()


#: Every store the suite runs for: a new store adds its Store here.
STORES: list[type[Store]] = [SQLiteStore, PostgresStore, CoreOnlyStore, InMemoryStore]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=STORES, ids=lambda made: made.name)
def store(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Store]:
    made: Store = request.param(request, clock)
    try:
        yield made
    finally:
        made.close_all()


@pytest.fixture
def frontier(store: Store) -> FrontierBackend:
    return store.open()


# -- helpers ------------------------------------------------------------------


def urls(n: int, host: str = "a.test") -> list[str]:
    return [f"http://{host}/page/{i}" for i in range(n)]


def clustered(hosts: str, per_host: int) -> list[str]:
    """Links as a page lists them: all of one host, then all of the next."""
    return [f"http://{host}.test/{i}" for host in hosts for i in range(per_host)]


def stored(frontier: FrontierBackend, url: str) -> StoredURL:
    """``url`` as ``frontier`` keeps it; it must be there."""
    entry = frontier.lookup(url)
    assert entry is not None, f"{url} is not in the frontier"
    return entry


def state_of(frontier: FrontierBackend, url: str) -> str | None:
    entry = frontier.lookup(url)
    return entry.state if entry is not None else None


def assert_consistent(frontier: FrontierBackend, known: Iterable[str]) -> dict[str, int]:
    """Every URL in exactly one of the four states, and counts() agreeing with the URLs themselves.

    ``known``: every URL the test gave the frontier, in any form, those it refused included.  Each
    is looked up, and the states found must add up to counts(): no URL stored twice, none stored
    that was not given, none in a fifth state.  A waiting URL is due some time, and one that is
    done or an error is not due at all.
    """
    counts = frontier.counts()
    assert set(counts) == set(STATES)
    found: dict[str, StoredURL] = {}
    for url in set(known):
        entry = frontier.lookup(url)
        if entry is not None:
            assert entry.url == normalize_url(url)
            found[entry.url] = entry
    by_state = Counter(entry.state for entry in found.values())
    assert set(by_state) <= set(STATES), by_state
    assert counts == {state: by_state[state] for state in STATES}
    assert all(entry.next_attempt_at is not None for entry in found.values() if entry.state == "waiting")
    assert all(entry.next_attempt_at is None for entry in found.values() if entry.state in ("done", "error"))
    return counts


def claim_all(frontier: FrontierBackend, batch: int = 7) -> list[FrontierURL]:
    out: list[FrontierURL] = []
    while claimed := frontier.claim(batch):
        out.extend(claimed)
    return out


# -- the protocol -------------------------------------------------------------

# The protocol's methods: its public ones, and the context manager's.
PROTOCOL = sorted(
    name for name, value in vars(FrontierBackend).items()
    if callable(value) and (not name.startswith("_") or name in ("__enter__", "__exit__"))
)


def test_the_frontier_has_every_method_of_the_protocol_with_its_parameters(frontier: FrontierBackend) -> None:
    """What mypy checks of the stores in the package, checked of any store at run time."""
    for name in PROTOCOL:
        wanted = list(inspect.signature(getattr(FrontierBackend, name)).parameters.values())[1:]  # no self
        got = inspect.signature(getattr(frontier, name)).parameters.values()
        assert [(p.name, p.kind, p.default) for p in got] == [(p.name, p.kind, p.default) for p in wanted], name


# -- the life of a URL --------------------------------------------------------


def test_life_of_a_url_every_url_in_exactly_one_state(frontier: FrontierBackend, clock: FakeClock) -> None:
    assert frontier.counts() == {"waiting": 0, "processing": 0, "done": 0, "error": 0}
    assert frontier.next_due() is None and frontier.min_due_depth() is None
    assert frontier.add(urls(6)) == 6
    assert assert_consistent(frontier, urls(6)) == {"waiting": 6, "processing": 0, "done": 0, "error": 0}
    assert frontier.next_due() == clock.now and frontier.min_due_depth() == 0

    claimed = frontier.claim(4)
    assert [c.url for c in claimed] == urls(4)
    assert all(c.attempts == 1 for c in claimed)
    assert assert_consistent(frontier, urls(6)) == {"waiting": 2, "processing": 4, "done": 0, "error": 0}

    clock.advance(1)
    frontier.complete_many([(claimed[0].url, 200)])
    assert frontier.fail(claimed[1].url, "read_timeout", retry_in=RETRIES.retry_in(claimed[1].attempts)) == "waiting"
    assert frontier.fail(claimed[2].url, "not found", status=404) == "error"
    frontier.release([claimed[3].url])
    assert assert_consistent(frontier, urls(6)) == {"waiting": 4, "processing": 0, "done": 1, "error": 1}
    assert state_of(frontier, "HTTP://A.TEST:80/page/0#x") == "done"
    assert frontier.lookup("http://a.test/unknown") is None and frontier.lookup("not a url") is None

    def outcome(url: str) -> tuple[object, ...]:
        entry = stored(frontier, url)
        return entry.state, entry.attempts, entry.status, entry.error, entry.fetched_at

    assert outcome("http://a.test/page/0") == ("done", 1, 200, None, clock.now)
    assert outcome("http://a.test/page/1") == ("waiting", 1, None, "read_timeout", clock.now)
    assert outcome("http://a.test/page/2") == ("error", 1, 404, "not found", clock.now)
    assert outcome("http://a.test/page/3") == ("waiting", 0, None, None, None)


def test_outcomes_only_for_claimed_urls(frontier: FrontierBackend) -> None:
    frontier.add(urls(2))
    with pytest.raises(ValueError, match="not 'processing'"):
        frontier.complete_many([(urls(1)[0], 200)])  # waiting, not claimed
    with pytest.raises(ValueError, match="not in the frontier"):
        frontier.fail("http://elsewhere.test/", "x")
    (item,) = frontier.claim(1)
    frontier.complete_many([(item.url, 200)])
    with pytest.raises(ValueError, match="'done'"):
        frontier.complete_many([(item.url, 200)])  # twice
    with pytest.raises(ValueError):
        frontier.fail(item.url, "late")
    frontier.release([item.url, "http://elsewhere.test/", "garbage"])  # not processing: left alone
    assert state_of(frontier, item.url) == "done"
    (item,) = frontier.claim(1)
    frontier.complete_many([("HTTP://a.test:80/page/1#top", 204)])  # any form of a claimed URL
    frontier.add(["http://a.test/f"])
    (fail_me,) = frontier.claim(1)
    assert frontier.fail("HTTP://A.test/f", "boom") == "error"
    assert state_of(frontier, fail_me.url) == "error"
    assert assert_consistent(frontier, [*urls(2), "http://a.test/f", "http://elsewhere.test/"]) == {
        "waiting": 0, "processing": 0, "done": 2, "error": 1}


def test_complete_many_is_all_or_nothing_with_its_checkpoint(frontier: FrontierBackend) -> None:
    frontier.add(urls(5))
    first, second, third, fourth = frontier.claim(4)
    frontier.complete_many([(fourth.url, 200)], {"out": 1})
    with pytest.raises(ValueError, match="not 'processing'"):
        frontier.complete_many([(first.url, 200), (urls(5)[4], 200), (second.url, 200)], {"out": 2})
    assert [state_of(frontier, u) for u in (first.url, second.url, fourth.url)] == ["processing", "processing", "done"]
    with pytest.raises(ValueError, match="'done'"):
        frontier.complete_many([(second.url, 200), (second.url, 200)], {"out": 3})  # the same URL twice
    assert state_of(frontier, second.url) == "processing" and frontier.checkpoint() == {"out": 1}
    frontier.complete_many([(first.url, 201), (second.url, 202)], {"out": 4, "warc": 9})
    assert frontier.checkpoint() == {"out": 4, "warc": 9}
    frontier.complete_many([], {"out": 5})  # no outcomes: stored all the same; names not given stay
    assert frontier.checkpoint() == {"out": 5, "warc": 9}
    assert [stored(frontier, item.url).status for item in (first, second, fourth)] == [201, 202, 200]
    for bad, error in (({"out": -1}, ValueError), ({"out": True}, TypeError), ({3: 4}, TypeError)):
        with pytest.raises(error):
            frontier.complete_many([(third.url, 200)], bad)  # type: ignore[arg-type]
    assert state_of(frontier, third.url) == "processing"
    assert assert_consistent(frontier, urls(5)) == {"waiting": 1, "processing": 1, "done": 3, "error": 0}


# -- adding -------------------------------------------------------------------


def test_add_counts_new_urls_and_ignores_known_ones_in_any_form(frontier: FrontierBackend) -> None:
    given = ["http://a.test/x", "http://a.test/y"]
    assert frontier.add(given) == 2
    given += ["HTTP://A.TEST/x", "http://a.test:80/x#frag", "http://a.test/y", "http://a.test/z"]
    assert frontier.add(given[-4:]) == 1
    given += ["http://a.test/q", "http://a.test/q", "http://A.test/q#1"]
    assert frontier.add(given[-3:]) == 1
    refused = ["ftp://a.test/", "mailto:x@a.test", "/relative", "http://", "http://[::1/"]
    assert frontier.add(refused) == 0
    assert frontier.add([]) == 0
    for item in claim_all(frontier):
        if item.url.endswith("/x"):
            frontier.complete_many([(item.url, 200)])
        else:
            frontier.fail(item.url, "boom")
    given += ["http://a.test/x", "http://A.TEST/y", "http://a.test/new"]
    assert frontier.add(given[-3:]) == 1  # known in any state
    assert assert_consistent(frontier, given + refused) == {"waiting": 1, "processing": 0, "done": 1, "error": 3}
    with pytest.raises(TypeError):
        frontier.add("http://a.test/oops")
    with pytest.raises(ValueError):
        frontier.add(["http://a.test/d"], depth=-1)


def test_numbers_no_store_can_keep_are_refused_before_anything_is_stored(frontier: FrontierBackend) -> None:
    """A depth, priority, checkpoint value or count out of the range every store keeps is refused
    with ValueError, and nothing is stored: a depth past SQLite's claim limit was stored and never
    claimed (while next_due said it was due), a value of 2**63 or more came back a float, a
    max_depth that large raised OverflowError, and failures(since, -1) gave every row on SQLite.
    The ends of each range are kept exactly."""
    deep, low = "http://a.test/deep", "http://a.test/low"
    for depth in (-1, MOST_INT + 1, 2**62 + 1, 2**64):
        with pytest.raises(ValueError, match="depth"):
            frontier.add([deep], depth=depth)
        with pytest.raises(ValueError, match="depth"):
            frontier.add_many([(deep, depth, "http://a.test/", 0)])
    for priority in (MOST_INT + 1, -MOST_INT - 2, 2**64):
        with pytest.raises(ValueError, match="priority"):
            frontier.add([deep], priority=priority)
    with pytest.raises(ValueError, match="checkpoint"):
        frontier.complete_many([], {"out": MOST_BIGINT + 1})
    assert frontier.lookup(deep) is None and frontier.counts()["waiting"] == 0 and frontier.checkpoint() == {}
    for limit, max_depth in ((-1, None), (MOST_INT + 1, None), (1, -1)):
        with pytest.raises(ValueError):
            frontier.claim(limit, max_depth)
    with pytest.raises(ValueError):
        frontier.failures(0.0, -1)

    frontier.add([deep], depth=MOST_INT, priority=MOST_INT)
    frontier.add([low], priority=-MOST_INT - 1)
    frontier.complete_many([], {"out": MOST_BIGINT})
    assert frontier.checkpoint() == {"out": MOST_BIGINT} and isinstance(frontier.checkpoint()["out"], int)
    assert [(item.url, item.priority) for item in frontier.claim(10, max_depth=MOST_INT - 1)] == [
        (low, -MOST_INT - 1)]
    assert [(item.url, item.depth, item.priority) for item in frontier.claim(10, max_depth=2**63)] == [
        (deep, MOST_INT, MOST_INT)]


def test_add_records_depth_parent_priority_and_discovery_time(frontier: FrontierBackend, clock: FakeClock) -> None:
    frontier.add(["http://a.test/"])
    clock.advance(5)
    assert frontier.add(["http://a.test/child"], depth=1, parent="HTTP://A.test/", priority=3) == 1
    assert frontier.add_many([("http://b.test/1", 2, "http://a.test/child", 1), ("http://b.test/2", 2, None, 0),
                              ("bogus", 1, None, 0), ("http://b.test/1", 5, None, 9)]) == 2

    def added(url: str) -> tuple[object, ...]:
        entry = stored(frontier, url)
        return entry.depth, entry.parent, entry.priority, entry.discovered_at, entry.attempts

    assert {url: added(url) for url in ("http://a.test/", "http://a.test/child", "http://b.test/1", "http://b.test/2")} == {
        "http://a.test/": (0, None, 0, clock.now - 5, 0),
        "http://a.test/child": (1, "http://a.test/", 3, clock.now, 0),  # the parent is stored normalised
        "http://b.test/1": (2, "http://a.test/child", 1, clock.now, 0),  # the first add wins
        "http://b.test/2": (2, None, 0, clock.now, 0),
    }
    assert frontier.lookup("bogus") is None and frontier.counts()["waiting"] == 4
    item = next(c for c in frontier.claim(10) if c.url == "http://a.test/child")
    assert item == FrontierURL("http://a.test/child", depth=1, priority=3, attempts=1, parent="http://a.test/")


def test_a_known_url_found_nearer_a_seed_gets_the_smaller_depth_in_any_state(frontier: FrontierBackend) -> None:
    def found(url: str) -> tuple[object, ...]:
        entry = stored(frontier, url)
        return entry.depth, entry.parent, entry.state

    names = ["processing", "done", "error", "waiting"]  # claimed in this order
    assert frontier.add([f"http://a.test/{name}" for name in names], depth=5, parent="http://a.test/far") == 4
    claimed = {item.url: item for item in frontier.claim(3)}
    frontier.complete_many([("http://a.test/done", 200)])
    frontier.fail("http://a.test/error", "boom")
    assert frontier.add_many([(f"http://a.test/{name}", 7, "http://a.test/deeper", 0) for name in names]) == 0
    assert {found(f"http://a.test/{name}")[:2] for name in names} == {(5, "http://a.test/far")}
    # Found nearer in the reverse order of their discovery: a URL that took a new place in the
    # discovery order (not only a new depth) would now be claimed before those found before it.
    assert frontier.add_many([("http://a.test/new", 1, "http://a.test/", 0)]
                             + [(f"HTTP://A.test/{name}", 2, "http://a.test/near", 0) for name in reversed(names)]) == 1
    for name in names:
        assert found(f"http://a.test/{name}") == (2, "http://a.test/near", name)
    assert claimed["http://a.test/processing"].depth == 5
    frontier.release(["http://a.test/processing"])
    assert [(item.url, item.depth) for item in frontier.claim(10)] == [
        ("http://a.test/new", 1), ("http://a.test/processing", 2), ("http://a.test/waiting", 2)]
    # One batch with a URL twice keeps the smaller depth, with its parent.
    assert frontier.add_many([("http://a.test/x", 3, "http://a.test/p3", 0), ("http://a.test/x", 1, "http://a.test/p1", 0),
                              ("http://a.test/x", 2, "http://a.test/p2", 0)]) == 1
    assert found("http://a.test/x")[:2] == (1, "http://a.test/p1")
    known = [f"http://a.test/{name}" for name in [*names, "new", "x"]]
    assert assert_consistent(frontier, known) == {"waiting": 1, "processing": 3, "done": 1, "error": 1}


def test_a_sitemap_lastmod_is_stored_and_handed_back_with_claims(frontier: FrontierBackend, clock: FakeClock) -> None:
    """add_many()'s lastmods: kept for a new URL or a known one (None for a link), in the claims of
    every attempt; a URL the frontier would not take is left out, as add_many() does."""
    frontier.add(["http://a.test/known", "http://a.test/link"])
    assert frontier.add_many([("http://a.test/new", 1, "http://a.test/map.xml", 0), ("http://a.test/known", 1, None, 0)],
                             {"HTTP://A.test/new": "2024-01-02", "http://a.test/known": "2024", "bogus": "x"}) == 1
    frontier.add_many([], {"http://a.test/known": "2024-03-04T05:06:07+00:00"})  # listed again, dated anew
    assert {url: stored(frontier, url).lastmod for url in ("http://a.test/known", "http://a.test/link",
                                                            "http://a.test/new")} == {
        "http://a.test/known": "2024-03-04T05:06:07+00:00", "http://a.test/link": None,
        "http://a.test/new": "2024-01-02"}
    assert frontier.lookup("bogus") is None and frontier.counts()["waiting"] == 3
    claimed = {c.url: c.lastmod for c in frontier.claim(10)}
    assert claimed == {"http://a.test/known": "2024-03-04T05:06:07+00:00", "http://a.test/link": None,
                       "http://a.test/new": "2024-01-02"}
    assert frontier.fail("http://a.test/new", "timeout", retry_in=1.0) == "waiting"
    clock.advance(3600)
    assert [(c.url, c.lastmod) for c in frontier.claim(10)] == [("http://a.test/new", "2024-01-02")]


# -- claiming -----------------------------------------------------------------


def test_claim_order_is_priority_then_breadth_first_then_discovery(frontier: FrontierBackend) -> None:
    frontier.add(["http://a.test/low-1", "http://a.test/low-2"], priority=0)
    frontier.add(["http://a.test/high-1"], priority=5)
    frontier.add(["http://a.test/mid-1", "http://a.test/mid-2"], priority=2)
    frontier.add_many([("http://a.test/high-2", 0, None, 5), ("http://a.test/neg", 0, None, -1),
                       ("http://a.test/low-3", 0, None, 0), ("http://a.test/mid-3", 0, None, 2)])
    assert [c.url for c in frontier.claim(3)] == ["http://a.test/high-1", "http://a.test/high-2", "http://a.test/mid-1"]
    frontier.add(["http://a.test/high-3"], priority=5)  # later, but outranks what waits
    assert [c.url for c in frontier.claim(100)] == [
        "http://a.test/high-3", "http://a.test/mid-2", "http://a.test/mid-3",
        "http://a.test/low-1", "http://a.test/low-2", "http://a.test/low-3", "http://a.test/neg",
    ]
    assert frontier.claim(10) == [] and frontier.claim(0) == []
    with pytest.raises(ValueError):
        frontier.claim(-1)
    frontier.add(["http://b.test/d3-early", "http://b.test/d3-moved"], depth=3)
    frontier.add(["http://b.test/d2"], depth=2)
    frontier.add(["http://b.test/d1-a", "http://b.test/d1-b"], depth=1)
    frontier.add(["http://b.test/d4-urgent"], depth=4, priority=1)
    frontier.add(["http://b.test/d3-moved"], depth=1)  # found again, nearer
    assert frontier.min_due_depth() == 1
    assert [(c.url, c.depth) for c in frontier.claim(3)] == [
        ("http://b.test/d4-urgent", 4), ("http://b.test/d3-moved", 1), ("http://b.test/d1-a", 1)]
    assert [(c.url, c.depth) for c in frontier.claim(10, max_depth=2)] == [("http://b.test/d1-b", 1), ("http://b.test/d2", 2)]
    assert frontier.min_due_depth() == 3
    assert [c.url for c in frontier.claim(10)] == ["http://b.test/d3-early"]


def test_claim_never_hands_out_a_url_twice(frontier: FrontierBackend) -> None:
    rng = random.Random(7)
    given = [f"http://h{i % 13}.test/{i}" for i in range(1500)]
    frontier.add_many((url, 0, None, rng.randrange(4)) for url in given)
    seen: Counter[str] = Counter()
    while claimed := frontier.claim(rng.randrange(1, 60)):
        seen.update(c.url for c in claimed)
        with frontier.batch():
            done = []
            for c in claimed:
                r = rng.random()
                if r < 0.1:
                    frontier.fail(c.url, "read_timeout")
                elif r < 0.2:
                    frontier.release([c.url])  # comes back, and may be claimed again
                    seen[c.url] -= 1
                else:
                    done.append((c.url, 200))
            frontier.complete_many(done)
            more = [f"http://h0.test/{rng.randrange(3000)}" for _ in range(5)]  # some new, some known
            given += more
            frontier.add(more)
    assert max(seen.values()) == 1
    counts = assert_consistent(frontier, given)
    assert counts["waiting"] == counts["processing"] == 0
    assert sum(seen.values()) == counts["done"] + counts["error"]


# -- hosts --------------------------------------------------------------------


def check_hosts_in_turn_with_room(frontier: FrontierBackend) -> None:
    """Hosts in turn, each capped by host_room; a host without room keeps its URLs for later."""
    frontier.add(clustered("abcd", 5))
    claimed = [c.url for c in frontier.claim(6)]
    assert claimed == ["http://a.test/0", "http://b.test/0", "http://c.test/0", "http://d.test/0",
                       "http://a.test/1", "http://b.test/1"]
    # The next claim goes on with the hosts in turn, each FIFO (c.test and d.test gave a URL each too).
    assert [c.url for c in frontier.claim(2)] == ["http://a.test/2", "http://b.test/2"]
    room = {"http://a.test": 0, "http://b.test": 1, "http://c.test": 3, "http://d.test": 2}
    claimed_hosts = Counter(c.host for c in frontier.claim(100, host_room=room.__getitem__))
    assert claimed_hosts == {"http://b.test": 1, "http://c.test": 3, "http://d.test": 2}
    again = frontier.claim(100, host_room=lambda host: 2 if host == "http://a.test" else 0)
    assert [c.url for c in again] == ["http://a.test/3", "http://a.test/4"]


def test_a_claim_takes_the_hosts_in_turn_each_as_host_room_allows(frontier: FrontierBackend) -> None:
    check_hosts_in_turn_with_room(frontier)
    assert frontier.counts()["waiting"] == 20 - 16


def test_the_host_check_can_fail(frontier: FrontierBackend) -> None:
    """Negative control: a frontier whose claim ignores host_room fails the check above."""
    claim = frontier.claim
    frontier.claim = lambda limit, max_depth=None, host_room=None: claim(limit, max_depth)  # type: ignore[method-assign]
    with pytest.raises(AssertionError):
        check_hosts_in_turn_with_room(frontier)


def test_a_short_claim_asks_the_hosts_with_more_again(frontier: FrontierBackend) -> None:
    frontier.add(["http://a.test/only"] + clustered("b", 30) + clustered("c", 30))
    assert Counter(c.host for c in frontier.claim(41)) == {"http://a.test": 1, "http://b.test": 20, "http://c.test": 20}


def test_priority_first_across_hosts_then_turns(frontier: FrontierBackend) -> None:
    frontier.add(clustered("ab", 3))
    frontier.add(["http://z.test/urgent"], priority=5)  # a host found last, with a higher priority
    frontier.add(["http://b.test/soon"], priority=1)
    assert [c.url for c in frontier.claim(3)] == ["http://z.test/urgent", "http://b.test/soon", "http://a.test/0"]
    assert [c.url for c in frontier.claim(10)] == [
        "http://a.test/1", "http://b.test/0", "http://a.test/2", "http://b.test/1", "http://b.test/2"]


def test_a_host_comes_back_in_line_whenever_a_url_of_it_waits_again(store: Store, clock: FakeClock) -> None:
    """Released, retried, added again, or after a reopen: no host with a waiting URL is left out."""
    frontier = store.open()
    frontier.add(["http://a.test/1", "http://b.test/1", "http://c.test/1"])
    a, b, _c = frontier.claim(10)
    assert frontier.claim(10) == []
    frontier.release([a.url])
    frontier.fail(b.url, "connect_error", retry_in=1.0)
    frontier.add(["http://d.test/1"])
    clock.advance(2)
    assert sorted(u.url for u in frontier.claim(10)) == ["http://a.test/1", "http://b.test/1", "http://d.test/1"]
    frontier.add(["http://e.test/1", "http://e.test/2"])
    frontier.close()
    frontier = store.open()  # the claimed ones were left processing
    assert sorted(u.url for u in frontier.claim(10)) == [
        "http://a.test/1", "http://b.test/1", "http://c.test/1", "http://d.test/1", "http://e.test/1", "http://e.test/2"]


def test_hosts_whose_urls_are_not_due_or_too_deep_wait_in_line(store: Store, clock: FakeClock) -> None:
    frontier = store.open()
    frontier.add(["http://a.test/hi"], priority=5)
    (hi,) = frontier.claim(1)
    frontier.fail(hi.url, "http_503", retry_in=10.0)  # waits 10 s, priority 5
    frontier.add(["http://a.test/lo0", "http://a.test/lo1"], priority=0)
    frontier.add(["http://b.test/x"], priority=3)
    assert sorted(c.url for c in frontier.claim(10)) == ["http://a.test/lo0", "http://a.test/lo1", "http://b.test/x"]
    frontier.add(["http://b.test/y"], priority=3)
    clock.advance(11)
    assert [(c.url, c.priority) for c in frontier.claim(1)] == [("http://a.test/hi", 5)]
    # A depth limit: hosts with nothing as shallow wait for a claim that goes deeper, or new URLs.
    frontier.add_many((f"http://deep.test/{i}", 3, None, 0) for i in range(50))
    assert [c.url for c in frontier.claim(10, max_depth=1)] == ["http://b.test/y"]
    assert frontier.claim(10, max_depth=1) == []
    frontier.add(["http://deep.test/shallow"], depth=1)
    assert [c.url for c in frontier.claim(10, max_depth=1)] == ["http://deep.test/shallow"]
    assert frontier.claim(10, max_depth=2) == []
    assert len(frontier.claim(10, max_depth=3)) == 10


def test_a_host_room_that_raises_loses_no_host(frontier: FrontierBackend) -> None:
    frontier.add(["http://a.test/0", "http://b.test/0", "http://c.test/0"])

    def room(host: str) -> int:
        if host == "http://b.test":
            raise KeyError(host)
        return 5

    with pytest.raises(KeyError):
        frontier.claim(10, host_room=room)
    assert frontier.counts()["processing"] == 0
    assert sorted(c.url for c in frontier.claim(10)) == ["http://a.test/0", "http://b.test/0", "http://c.test/0"]


# -- failures and retries -----------------------------------------------------


def test_retry_delays_grow_and_are_capped_and_end_in_error(store: Store, clock: FakeClock) -> None:
    """The crawl's schedule says how long; the store keeps each wait it is told, by its clock."""
    retries = RetrySchedule(max_attempts=7, first=2.0, most=20.0)
    frontier = store.open()
    frontier.add(["http://a.test/flaky"])
    delays = []
    for attempt in range(1, 7):
        (item,) = frontier.claim(5)
        assert item.attempts == attempt
        assert frontier.fail(item.url, "read_timeout", None, retries.retry_in(item.attempts)) == "waiting"
        due = frontier.next_due()
        assert due is not None and stored(frontier, item.url).next_attempt_at == due
        delays.append(due - clock.now)
        clock.advance(due - clock.now - 0.001)
        assert frontier.claim(5) == [] and frontier.min_due_depth() is None  # not due yet
        clock.advance(0.001)
    assert delays == [2.0, 4.0, 8.0, 16.0, 20.0, 20.0]
    (item,) = frontier.claim(5)
    assert item.attempts == 7 and retries.retry_in(item.attempts) is None
    assert frontier.fail(item.url, "read_timeout", None, retries.retry_in(item.attempts)) == "error"
    assert frontier.next_due() is None
    ended = stored(frontier, "http://a.test/flaky")
    assert (ended.state, ended.attempts, ended.error, ended.next_attempt_at) == ("error", 7, "read_timeout", None)
    assert frontier.counts() == {"waiting": 0, "processing": 0, "done": 0, "error": 1}


def test_retry_after_is_honoured_and_a_retried_url_keeps_its_place(frontier: FrontierBackend, clock: FakeClock) -> None:
    frontier.add(["http://a.test/busy", "http://a.test/other", "http://a.test/third"])
    busy, other = frontier.claim(2)
    assert frontier.fail(busy.url, "service unavailable", 503, RETRIES.retry_in(busy.attempts, 120.0)) == "waiting"
    assert frontier.fail(other.url, "too many requests", 429, RETRIES.retry_in(other.attempts, 0.25)) == "waiting"
    clock.advance(1.0)
    assert [c.url for c in frontier.claim(5)] == [other.url, "http://a.test/third"]  # in its place, before third
    assert frontier.next_due() == clock.now - 1.0 + 120.0
    clock.advance(119)
    (again,) = frontier.claim(5)
    assert again.url == busy.url and again.attempts == 2
    assert frontier.fail(busy.url, "service unavailable", 503, RETRIES.retry_in(again.attempts, 1000.0)) == "waiting"
    assert frontier.next_due() == clock.now + 1000.0  # a server's Retry-After beats the cap


def test_release_does_not_count_the_attempt(frontier: FrontierBackend) -> None:
    frontier.add(urls(3))
    claimed = frontier.claim(3)
    frontier.release(c.url for c in claimed[:2])
    assert assert_consistent(frontier, urls(3)) == {"waiting": 2, "processing": 1, "done": 0, "error": 0}
    assert [(stored(frontier, c.url).state, stored(frontier, c.url).attempts) for c in claimed[:2]] == [
        ("waiting", 0), ("waiting", 0)]
    again = frontier.claim(3)
    assert [c.url for c in again] == [c.url for c in claimed[:2]] and [c.attempts for c in again] == [1, 1]
    with pytest.raises(TypeError):
        frontier.release("http://a.test/page/0")


# -- batches ------------------------------------------------------------------


def test_a_call_refused_inside_a_batch_rolls_the_batch_back(frontier: FrontierBackend) -> None:
    frontier.add(["http://a.test/0", "http://b.test/0"])
    with pytest.raises(ValueError), frontier.batch():
        frontier.add(["http://a.test/1", "http://a.test/2"])
        assert len(frontier.claim(10)) == 4
        assert frontier.claim(10) == []  # the hosts turn out empty
        frontier.complete_many([("http://c.test/unknown", 200)])
    known = ["http://a.test/0", "http://a.test/1", "http://a.test/2", "http://b.test/0", "http://c.test/unknown"]
    assert assert_consistent(frontier, known) == {"waiting": 2, "processing": 0, "done": 0, "error": 0}
    assert frontier.add(["http://a.test/1"]) == 1  # rolled back: new again
    assert sorted(c.url for c in frontier.claim(10)) == ["http://a.test/0", "http://a.test/1", "http://b.test/0"]


def test_a_call_refused_inside_a_batch_undoes_the_batch_whatever_came_before(store: Store) -> None:
    """A refused call undoes its batch whatever else the batch did or what came before it: an outcome
    recorded in the batch goes with it (SQLite kept the batch then), and an outcome recorded before
    the batch, still uncommitted on a store that commits outcomes in batches, stays (SQLite undid
    the batch only when none was pending)."""
    frontier = store.open(commit_every=128) if store.name == "sqlite" else store.open()
    frontier.add(["http://p.test/0", "http://p.test/1"])
    before, in_batch = frontier.claim(2)
    frontier.complete_many([(before.url, 200)])  # pending on SQLite (128 outcomes a commit)
    frontier.add(["http://a.test/0"])
    with pytest.raises(ValueError), frontier.batch():
        frontier.add(["http://a.test/1"])
        assert len(frontier.claim(10)) == 2
        frontier.complete_many([(in_batch.url, 200)], {"out": 1})
        frontier.complete_many([("http://c.test/unknown", 200)])
    assert [state_of(frontier, url) for url in (before.url, in_batch.url, "http://a.test/0", "http://a.test/1")] == [
        "done", "processing", "waiting", None]
    assert frontier.checkpoint() == {}
    assert frontier.add(["http://a.test/1"]) == 1  # rolled back: new again
    assert frontier.counts() == {"waiting": 2, "processing": 1, "done": 1, "error": 0}
    store.crash(frontier)
    frontier = store.open()
    assert state_of(frontier, before.url) == "done"  # committed, not lost with the batch


def test_the_refusals_of_a_batch_rolled_back_are_not_counted(store: Store) -> None:
    """not_followed counts the links refused as the store keeps them: a call refused in a batch undoes
    the batch, the refusals it stored among it, and the counts go with them -- found again, the
    links are refused and counted once (they were counted twice: CrawlSummary.refused disagreed with
    the refusals ``niofetcher status`` reads)."""
    frontier = store.open(traps=TrapRules(max_pages_per_host=2, max_url_length=40))
    page = "http://h.test/"
    frontier.add([page])
    links = [(f"http://h.test/{name}", 1, page, 0) for name in ("a", "b", "c", "x" * 50)]
    refused = {"max_url_length": 1, "max_pages_per_host": 2}
    with pytest.raises(ValueError), frontier.batch():
        frontier.add_many(links)
        assert frontier.not_followed == refused
        frontier.fail("http://h.test/nothing", "x")
    assert frontier.not_followed == {}
    assert frontier.counts()["waiting"] == 1
    with frontier.batch():  # the page's links again (the page fetched again)
        frontier.add_many(links)
    assert frontier.not_followed == refused
    frontier.add_many(links)  # known or refused already: counted once
    assert frontier.not_followed == refused and frontier.counts()["waiting"] == 2


def test_a_batch_commits_once_at_its_end(store: Store) -> None:
    """What a batch does is kept all at its end and not before -- what survives a crash shows it --,
    and a block that raises by itself commits nothing on its way out; the next commit does."""
    frontier = store.open()
    frontier.add(urls(3))
    first, second, third = frontier.claim(3)
    batch = frontier.batch()
    batch.__enter__()  # the process dies before the batch ends: nothing of it is kept
    frontier.fail(first.url, "HTTP 404", status=404)
    frontier.complete_many([(second.url, 200)], {"out": 7})
    store.crash(frontier)
    frontier = store.open()
    assert frontier.checkpoint() == {}
    assert [(stored(frontier, url).state, stored(frontier, url).attempts) for url in urls(3)] == [("waiting", 1)] * 3

    first, second, third = frontier.claim(3)
    with frontier.batch():
        frontier.fail(first.url, "HTTP 404", status=404)
        frontier.complete_many([(second.url, 200)], {"out": 7})
    store.crash(frontier)  # right at the end of the batch: all of it is kept
    frontier = store.open()
    assert [state_of(frontier, url) for url in urls(3)] == ["error", "done", "waiting"]
    assert frontier.checkpoint() == {"out": 7}

    for _crash_before_the_next_commit in (True, False):
        (third,) = frontier.claim(3)
        with pytest.raises(KeyError), frontier.batch():
            frontier.complete_many([(third.url, 200)], {"out": 8})
            raise KeyError("the caller's own")
        if not _crash_before_the_next_commit:
            assert frontier.checkpoint() == {"out": 8}  # a commit
        store.crash(frontier)
        frontier = store.open()
        assert frontier.checkpoint() == ({"out": 7} if _crash_before_the_next_commit else {"out": 8})
    assert assert_consistent(frontier, urls(3)) == {"waiting": 0, "processing": 0, "done": 2, "error": 1}


# -- reopening and crashes ----------------------------------------------------


def test_a_crashed_run_resumes_with_its_processing_urls_waiting(store: Store) -> None:
    frontier = store.open()
    frontier.add(urls(10))
    claimed = frontier.claim(6)
    frontier.complete_many([(claimed[0].url, 200), (claimed[1].url, 200)], {"out": 2})
    batch = frontier.batch()
    batch.__enter__()  # a batch that never ends: the process dies in it
    frontier.complete_many([(claimed[2].url, 200)], {"out": 3})
    store.crash(frontier)
    with pytest.raises(FrontierError):  # the crashed one is unusable
        frontier.counts()
    frontier = store.open()
    assert [state_of(frontier, u) for u in urls(10)] == ["done"] * 2 + ["waiting"] * 8
    assert frontier.checkpoint() == {"out": 2}
    assert assert_consistent(frontier, urls(10))["processing"] == 0
    # The interrupted attempts still count (they may have reached the server).
    assert stored(frontier, "http://a.test/page/4").attempts == 1
    assert [c.url for c in claim_all(frontier)] == urls(10)[2:]  # in their old order


def test_a_second_opener_is_refused_or_shares_by_host_and_changes_nothing(store: Store) -> None:
    """A store one process holds (SQLite) refuses a second opener.  A shared one (PostgreSQL): a
    second worker joins, and takes none of the first one's hosts until that one gives them back
    (closing)."""
    frontier = store.open()
    frontier.add(urls(2))
    (claimed,) = frontier.claim(1)
    if not store.shared:
        with pytest.raises(FrontierError) as refused:
            store.open()
        assert refused.value.kind is FrontierErrorKind.LOCKED
    else:
        second = store.open()
        assert second.claim(10) == [] and not second.holds("http://a.test")
        assert frontier.holds("http://a.test")
        with pytest.raises(ValueError, match="another worker's claim"):
            second.complete_many([(urls(1)[0], 200)])
    assert frontier.counts() == {"waiting": 1, "processing": 1, "done": 0, "error": 0}
    assert [state_of(frontier, url) for url in urls(2)] == ["processing", "waiting"] and claimed.url == urls(1)[0]
    frontier.close()
    frontier.close()  # twice is fine
    assert store.open().counts() == {"waiting": 2, "processing": 0, "done": 0, "error": 0}


# -- hosts held, robots.txt ---------------------------------------------------


def test_recordable_names_the_claims_whose_outcomes_will_count(frontier: FrontierBackend) -> None:
    """All of them while nothing changed hands (the only case on a store one process holds), in the
    order given."""
    frontier.add(urls(3))
    claimed = [item.url for item in frontier.claim(3)]
    with frontier.batch():
        assert frontier.recordable(reversed(claimed)) == list(reversed(claimed))
        frontier.complete_many([(url, 200) for url in claimed])
    assert assert_consistent(frontier, urls(3))["done"] == 3


def test_the_hosts_of_its_claims_are_its_own_while_nothing_changes_hands(store: Store, frontier: FrontierBackend) -> None:
    """holds() says yes for the host of every claim, and lost_hosts() names none; a store one process
    holds says yes for every host and never gates a start (start_deadlines() says nothing)."""
    frontier.add(urls(2, "a.test") + urls(2, "b.test"))
    claimed = frontier.claim(10)
    assert {item.host for item in claimed} == {"http://a.test", "http://b.test"}
    assert all(frontier.holds(item.host) for item in claimed)
    assert frontier.lost_hosts() == []
    deadlines = frontier.start_deadlines()
    if not store.shared:
        assert frontier.holds("http://never.test") and deadlines == {}
    else:
        assert set(deadlines) <= {"http://a.test", "http://b.test"}
    assert frontier.start_deadlines() == {}  # nothing changed since


def test_a_robots_txt_answer_is_kept_for_the_hosts_next_reader(store: Store) -> None:
    """store_robots() keeps a 2xx or a 4xx answer, robots() gives it back -- to a frontier opened
    later too -- with its age; a newer answer replaces it.  (That an answer more than a day old is
    not given back is each store's test: a shared store goes by its server's clock.)  A store
    without a robots.txt store (capabilities.py) is passed over: it keeps nothing, by design."""
    rules = b"User-agent: *\nDisallow: /private\n"
    frontier = store.open()
    if "robots_store" in getattr(frontier, "lacks", ()):
        pytest.skip(f"the {store.name} store keeps no robots.txt (a capability it may lack)")
    frontier.add(["http://a.test/", "http://b.test/"])
    claimed = frontier.claim(10)  # a shared store keeps the answers of the hosts its worker holds
    assert frontier.robots("http://a.test") is None
    frontier.store_robots("http://a.test", 200, rules)
    frontier.store_robots("http://b.test", 404, b"")
    kept = frontier.robots("http://a.test")
    assert kept is not None and (kept.status, kept.body) == (200, rules) and 0.0 <= kept.age < 60.0
    frontier.complete_many([(item.url, 200) for item in claimed])
    frontier.add(["http://b.test/more"])
    frontier.close()
    frontier = store.open()
    assert [(kept.status, kept.body) for kept in map(frontier.robots, ["http://a.test", "http://b.test"])
            if kept is not None] == [(200, rules), (404, b"")]
    assert frontier.robots("http://c.test") is None  # a host the frontier never saw
    assert [item.host for item in frontier.claim(10)] == ["http://b.test"]
    frontier.store_robots("http://b.test", 200, b"User-agent: *\nDisallow:\n")  # fetched anew
    kept = frontier.robots("http://b.test")
    assert kept is not None and (kept.status, kept.body) == (200, b"User-agent: *\nDisallow:\n")


def test_fingerprints_are_kept_by_host_for_the_next_reader(store: Store) -> None:
    """store_fingerprints() keeps, with the outcomes of claimed URLs, each page's fingerprints or the
    URL it duplicates; fingerprints() gives a host's back (duplicates left out) -- to a frontier
    opened later too, with every bit of a 64-bit simhash."""
    frontier = store.open()
    frontier.add(["http://a.test/", "http://a.test/copy", "http://b.test/"])
    claimed = {item.url: item for item in frontier.claim(10)}
    assert frontier.fingerprints("http://a.test") == []
    top = (1 << 64) - 1  # every bit set: stored as a signed 64-bit integer, read back unsigned
    with frontier.batch():
        frontier.store_fingerprints([("http://a.test/", b"d" * 16, top, None), ("http://b.test/", b"e" * 16, 5, None),
                                     ("http://a.test/copy", b"d" * 16, top, "http://a.test/")])
        frontier.complete_many([(url, 200) for url in claimed])
    frontier.close()
    frontier = store.open()
    assert frontier.fingerprints("http://a.test") == [("http://a.test/", b"d" * 16, top)]
    assert frontier.fingerprints("http://b.test") == [("http://b.test/", b"e" * 16, 5)]
    assert frontier.fingerprints("http://c.test") == []  # a host the frontier never saw
    frontier.close()


# -- reading failures ---------------------------------------------------------


def test_failures_are_the_first_errors_since_a_time_with_why(frontier: FrontierBackend, clock: FakeClock) -> None:
    frontier.add(urls(4))
    first, second, third, fourth = frontier.claim(4)
    frontier.fail(first.url, "before the run")
    clock.advance(10)
    since = clock()
    frontier.fail(second.url, "HTTP 404 Not Found", status=404)
    frontier.fail(third.url, "timeout", retry_in=1.0)  # waits again: not a failure of the run
    clock.advance(1)
    frontier.fail(fourth.url, "connection refused")
    assert frontier.failures(since, 5) == [(second.url, "HTTP 404 Not Found"), (fourth.url, "connection refused")]
    assert frontier.failures(since, 1) == [(second.url, "HTTP 404 Not Found")]


def test_any_free_text_is_kept_escaped_where_a_store_could_not_keep_it(store: Store) -> None:
    """An error text with a lone surrogate (text decoded with surrogateescape: an on_page exception's
    message about a page's bytes) or a NUL is kept escaped, not refused -- a refusal failed the call,
    and with it the crawl and every resume; so is a robots.txt answer's host.  A lastmod or a
    checkpoint name, handed back as given, is refused instead, before anything is stored."""
    frontier = store.open()
    frontier.add(urls(3))
    first, second, third = frontier.claim(3)
    surrogate = b"caf\xe9".decode("utf-8", "surrogateescape")
    assert frontier.fail(first.url, f"ValueError: cannot handle {surrogate}") == "error"
    assert frontier.fail(second.url, "ValueError: nul \x00 here", retry_in=0.0) == "waiting"
    frontier.complete_many([(third.url, 200)])
    assert stored(frontier, first.url).error == "ValueError: cannot handle caf\\udce9"
    assert stored(frontier, second.url).error == "ValueError: nul \\x00 here"
    assert frontier.failures(0.0, 5) == [(first.url, "ValueError: cannot handle caf\\udce9")]
    # A host no URL has (normal forms hold no surrogate): nothing kept of it, and no error.
    assert frontier.fingerprints(f"http://a.test{surrogate}") == []
    frontier.store_robots(f"http://a.test{surrogate}\x00", 200, b"User-agent: *\n")
    frontier.robots(f"http://a.test{surrogate}\x00")
    for bad in (f"2024-01-0{surrogate}", "2024\x00"):
        with pytest.raises(ValueError, match="lastmod"):
            frontier.add_many([("http://a.test/dated", 0, None, 0)], {"http://a.test/dated": bad})
        with pytest.raises(ValueError, match="checkpoint name"):
            frontier.complete_many([], {bad: 1})
    assert frontier.lookup("http://a.test/dated") is None and frontier.checkpoint() == {}
    assert [item.url for item in frontier.claim(5)] == [second.url]  # every claim still works
    frontier.close()
    frontier = store.open()  # and so does a resume
    assert stored(frontier, first.url).error == "ValueError: cannot handle caf\\udce9"


def test_a_url_the_trap_rules_clean_is_found_in_the_form_it_was_added_in(store: Store) -> None:
    """With strip_query_params, add() stores a URL without the parameters; looked up, given back,
    completed (with its visit) or failed in the form it was added in, it is found all the same."""
    frontier = store.open(traps=TrapRules(strip_query_params=("sid",)))
    first, second = "http://a.test/p?sid=42", "http://a.test/q?x=1&sid=7"
    assert frontier.add_many([(first, 0, None, 0), (second, 1, "http://a.test/?sid=1", 0)], {first: "2024-01-01"}) == 2
    assert stored(frontier, first).url == "http://a.test/p" and stored(frontier, first).lastmod == "2024-01-01"
    assert stored(frontier, second).url == "http://a.test/q?x=1" and stored(frontier, second).parent == "http://a.test/"
    assert frontier.add(["http://a.test/p?sid=43"]) == 0  # another session, the same page
    assert len(frontier.claim(2)) == 2
    frontier.release([first])
    assert (stored(frontier, first).state, stored(frontier, first).attempts) == ("waiting", 0)
    assert [item.url for item in frontier.claim(2)] == ["http://a.test/p"]
    frontier.complete_many([(first, 200)], visits={first: Visit(60.0, True, None, None, "ab" * 32)})
    assert frontier.fail("http://a.test/q?sid=8&x=1", "boom") == "error"
    assert (stored(frontier, first).state, stored(frontier, first).visits) == ("done", 1)
    assert stored(frontier, second).state == "error"
    assert frontier.counts() == {"waiting": 0, "processing": 0, "done": 1, "error": 1}


# -- revisits (issue 27) --------------------------------------------------------


def test_a_visit_is_kept_and_a_done_url_is_woken_when_due(store: Store, clock: FakeClock) -> None:
    """complete_many(visits=...) keeps each page's validators, digest and next_due on its row (a
    frontier opened later reads them); wake() moves the done URLs due by then back to 'waiting',
    and their claims carry what the visit left, the interval among it, and the time of the last
    capture, which an unchanged visit keeps.  A URL completed without a visit is never due again."""
    frontier = store.open()
    a, b, c = "http://a.test/", "http://b.test/", "http://c.test/"
    frontier.add([a, b, c])
    assert len(frontier.claim(10)) == 3
    start = clock()
    frontier.complete_many([(a, 200), (b, 200), (c, 200)], visits={
        a: Visit(100.0, True, '"v1"', "Tue, 01 Dec 2026 00:00:00 GMT", "ab" * 32, start - 0.25),
        b: Visit(300.0, True, None, None, "cd" * 32)})
    frontier.close()
    frontier = store.open()
    kept = stored(frontier, a)
    assert (kept.state, kept.etag, kept.last_modified, kept.digest) == (
        "done", '"v1"', "Tue, 01 Dec 2026 00:00:00 GMT", "ab" * 32)
    assert (kept.visits, kept.changes, kept.next_due, kept.fetched_at) == (1, 0, start + 100.0, start)
    assert (stored(frontier, c).visits, stored(frontier, c).next_due) == (0, None)
    assert frontier.revisits() == Revisits(0, start + 100.0)
    assert frontier.wake() == 0
    clock.advance(100.0)
    assert frontier.revisits() == Revisits(1, start + 300.0)
    assert frontier.wake() == 1 and frontier.wake() == 0
    assert assert_consistent(frontier, [a, b, c]) == {"waiting": 1, "processing": 0, "done": 2, "error": 0}
    (again,) = frontier.claim(10)
    assert (again.url, again.attempts, again.etag, again.last_modified, again.digest, again.visits, again.interval,
            again.captured_at) == (a, 1, '"v1"', "Tue, 01 Dec 2026 00:00:00 GMT", "ab" * 32, 1, 100.0, start - 0.25)
    # An unchanged visit counts no change; a changed one does, from the second visit on.
    frontier.complete_many([(a, 304)], visits={a: Visit(120.0, False, '"v1"', None, "ab" * 32)})
    kept = stored(frontier, a)
    assert (kept.status, kept.visits, kept.changes, kept.next_due) == (304, 2, 0, clock() + 120.0)
    clock.advance(120.0)
    assert frontier.wake() == 1
    (again,) = frontier.claim(10)
    assert again.captured_at == start - 0.25  # the unchanged visit kept the capture it repeats
    frontier.complete_many([(a, 200)], visits={a: Visit(96.0, True, '"v2"', None, "ef" * 32, clock() - 0.5)})
    kept = stored(frontier, a)
    assert (kept.visits, kept.changes, kept.etag, kept.digest) == (3, 1, '"v2"', "ef" * 32)
    captured = clock() - 0.5
    clock.advance(10**9)
    assert frontier.wake() == 2  # a and b; c, done without a visit, never
    assert state_of(frontier, c) == "done"
    assert {item.url: item.captured_at for item in frontier.claim(10)} == {a: captured, b: None}
    frontier.close()


def test_the_times_of_the_visits_are_kept_as_told_and_claims_carry_them(store: Store, clock: FakeClock) -> None:
    """What a rate of change is estimated from: complete_many(visits=...) keeps a visit's
    changed_time and unchanged_time as told (None keeps the stored ones, a frontier opened later
    reads them); a claim carries them with the changes and the seconds from the last fetch to the
    claim, by the frontier's clock (None for a URL never fetched)."""
    frontier = store.open()
    a, b = "http://a.test/", "http://b.test/"
    frontier.add([a, b])
    assert {(item.since_fetch, item.changes, item.changed_time, item.unchanged_time)
            for item in frontier.claim(10)} == {(None, 0, 0.0, 0.0)}
    frontier.complete_many([(a, 200), (b, 200)], visits={
        a: Visit(50.0, True, '"v1"', None, "ab" * 32), b: Visit(50.0, True, '"w1"', None, "cd" * 32)})
    clock.advance(70.0)  # 20 s late
    assert frontier.wake() == 2
    claimed = {item.url: item for item in frontier.claim(10)}
    assert claimed[a].since_fetch == pytest.approx(70.0)
    frontier.complete_many([(a, 200), (b, 304)], visits={
        a: Visit(40.0, True, '"v2"', None, "ef" * 32, clock() - 0.5, 70.0, None),
        b: Visit(60.0, False, '"w1"', None, "cd" * 32, None, None, 70.0)})
    frontier.close()
    frontier = store.open()
    kept_a, kept_b = stored(frontier, a), stored(frontier, b)
    assert (kept_a.changes, kept_a.changed_time, kept_a.unchanged_time) == (1, 70.0, 0.0)
    assert (kept_b.changes, kept_b.changed_time, kept_b.unchanged_time) == (0, 0.0, 70.0)
    clock.advance(100.0)
    assert frontier.wake() == 2
    claimed = {item.url: item for item in frontier.claim(10)}
    assert (claimed[a].changes, claimed[a].changed_time, claimed[a].unchanged_time) == (1, 70.0, 0.0)
    assert (claimed[b].changes, claimed[b].changed_time, claimed[b].unchanged_time) == (0, 0.0, 70.0)
    assert claimed[a].since_fetch == claimed[b].since_fetch == pytest.approx(100.0)
    # None keeps what is stored; a new sum replaces it.
    frontier.complete_many([(a, 304), (b, 304)], visits={
        a: Visit(40.0, False, '"v2"', None, "ef" * 32), b: Visit(60.0, False, '"w1"', None, "cd" * 32, None, None, 170.0)})
    assert (stored(frontier, a).changed_time, stored(frontier, a).unchanged_time) == (70.0, 0.0)
    assert (stored(frontier, b).changed_time, stored(frontier, b).unchanged_time) == (0.0, 170.0)
    with pytest.raises(ValueError):
        frontier.complete_many([], visits={a: Visit(1.0, True, None, None, None, None, -1.0, None)})
    frontier.close()


def test_a_visit_is_kept_whatever_form_its_url_is_given_in(frontier: FrontierBackend, clock: FakeClock) -> None:
    """complete_many() takes a claimed URL in any form, and its visit by the URL as given: the visit
    is kept on the row the outcome found (SQLite looked for it under the form given, and dropped it)."""
    frontier.add(["http://a.test/x"])
    (claimed,) = frontier.claim(1)
    given = "HTTP://A.TEST:80/x#top"
    frontier.complete_many([(given, 200)], visits={given: Visit(60.0, True, '"e1"', None, "ab" * 32)})
    kept = stored(frontier, claimed.url)
    assert (kept.state, kept.visits, kept.etag, kept.digest, kept.next_due) == (
        "done", 1, '"e1"', "ab" * 32, clock() + 60.0)


def test_an_error_given_a_revisit_comes_round_again_with_fresh_attempts(frontier: FrontierBackend,
                                                                       clock: FakeClock) -> None:
    frontier.add(urls(2))
    first, second = frontier.claim(2)
    assert frontier.fail(first.url, "HTTP 404", 404, revisit_in=50.0) == "error"
    assert frontier.fail(second.url, "HTTP 404", 404) == "error"
    assert stored(frontier, first.url).next_due == clock() + 50.0
    assert stored(frontier, second.url).next_due is None
    assert frontier.revisits() == Revisits(0, clock() + 50.0)
    clock.advance(50.0)
    assert frontier.revisits() == Revisits(1, None)
    assert frontier.wake() == 1
    assert assert_consistent(frontier, urls(2)) == {"waiting": 1, "processing": 0, "done": 0, "error": 1}
    (again,) = frontier.claim(2)
    assert (again.url, again.attempts) == (first.url, 1)


def test_without_visits_nothing_is_ever_due_again(frontier: FrontierBackend, clock: FakeClock) -> None:
    frontier.add(urls(3))
    claimed = frontier.claim(3)
    frontier.complete_many([(item.url, 200) for item in claimed[:2]])
    frontier.fail(claimed[2].url, "gone", 410)
    clock.advance(10**9)
    assert frontier.revisits() == Revisits(0, None)
    assert frontier.wake() == 0
    assert frontier.claim(3) == []


def test_a_sitemap_date_after_the_last_fetch_makes_a_done_or_error_url_due_at_once(frontier: FrontierBackend,
                                                                                   clock: FakeClock) -> None:
    """add_many(..., wake_modified=True), what a crawl with a revisit policy asks: a done or error
    URL whose sitemap <lastmod> (any W3C datetime form) is later than its last fetch goes back to
    'waiting' in that call, due now, its attempts from 0 -- whether or not a visit gave it a next
    due time.  One dated before its fetch, in the future or not at all, and one waiting or
    processing, is left alone; without wake_modified nothing moves.  Only what was fetched before
    the due period began (the last wake(), as a run begins) is woken: fetched again in it, a URL is
    not woken again, by the same date nor by a later one, until the next period."""
    page = [f"http://a.test/{name}" for name in ("new", "old", "error", "future", "junk", "due", "waiting", "busy")]
    new, old, error, future, junk, due, waiting, busy = page
    frontier.add(page[:6])
    claimed = {item.url: item for item in frontier.claim(10)}
    assert set(claimed) == set(page[:6])
    assert clock() == 1_700_000_000.0  # 2023-11-14T22:13:20Z: the time of the fetches, which the dates below face
    frontier.complete_many([(url, 200) for url in (new, old, future, junk)], visits={
        url: Visit(86400.0, True, None, None, "ab" * 32) for url in (new, old, future, junk)})
    frontier.complete_many([(due, 200)])  # done without a visit: no next due time
    frontier.fail(error, "HTTP 503", 503)
    frontier.add([busy])
    assert [item.url for item in frontier.claim(10)] == [busy]
    frontier.add([waiting])
    clock.advance(3600.0)
    assert frontier.wake() == 0  # a run begins: nothing due by its interval
    lastmods = {
        new: "2023-11-14T23:14:20+01:00",  # 22:14:20Z, a minute after the fetch
        old: "2023-11-14",  # midnight, before it
        error: "2023-11-14T22:30Z",
        future: "2030-01-01T00:00:00Z",  # later than now: no evidence
        junk: "yesterday",
        due: "2023-11-14T22:13:20.5Z",  # half a second after the fetch
        waiting: "2023-11-14T23:00:00Z",
        busy: "2023-11-14T23:00:00Z",
    }
    sitemap = "http://a.test/sitemap.xml"
    listed = [(url, 1, sitemap, 0) for url in page]
    assert frontier.add_many(listed, lastmods) == 0
    assert [state_of(frontier, url) for url in page] == ["done"] * 2 + ["error"] + ["done"] * 3 + [
        "waiting", "processing"]
    assert frontier.add_many(listed, lastmods, wake_modified=True) == 0
    assert {url: state_of(frontier, url) for url in page} == {
        new: "waiting", old: "done", error: "waiting", future: "done", junk: "done", due: "waiting",
        waiting: "waiting", busy: "processing"}
    assert stored(frontier, new).next_attempt_at == clock() and stored(frontier, new).lastmod == lastmods[new]
    assert stored(frontier, waiting).attempts == 0 and stored(frontier, busy).attempts == 1
    assert assert_consistent(frontier, page) == {"waiting": 4, "processing": 1, "done": 3, "error": 0}
    again = {item.url: item for item in claim_all(frontier)}
    assert set(again) == {new, error, due, waiting}
    assert [again[url].attempts for url in (new, error, due)] == [1, 1, 1]
    assert again[new].interval == 86400.0 and again[new].visits == 1  # what the visit before left
    frontier.complete_many([(url, 200) for url in again])
    frontier.complete_many([(busy, 200)])
    clock.advance(60.0)
    assert frontier.add_many(listed, lastmods, wake_modified=True) == 0  # fetched since: not again
    later = {new: "2023-11-14T23:13:50Z"}  # 30 s after its second fetch: a sitemap written as served
    assert frontier.add_many([(new, 1, sitemap, 0)], later, wake_modified=True) == 0
    assert frontier.counts() == {"waiting": 0, "processing": 0, "done": 8, "error": 0}
    assert frontier.wake() == 0  # the next run
    assert frontier.add_many([(new, 1, sitemap, 0)], later, wake_modified=True) == 0
    assert [item.url for item in frontier.claim(10)] == [new]

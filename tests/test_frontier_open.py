"""Opening a frontier by where it is, and what its errors say (issue 26, items 1 and 2).

- ``open_frontier(location, **options)`` is the one place that names the backends: a path (str or
  os.PathLike, ``:memory:``) opens the SQLite frontier, a ``postgresql://`` or ``postgres://`` URL a
  worker of the PostgreSQL one (psycopg loaded then only), another scheme the backend an installed
  package declares as an entry point of ``niofetcher.frontiers``; anything else is one line, kind
  ``unavailable``.  ``CrawlConfig(frontier=...)`` takes such a scheme too, and refuses others as it did.
- ``frontier_status()`` reads either backend's status, one function for the ``status`` command.
- Every error a backend's driver raises leaves the backend as a ``FrontierError`` of a kind:
  ``unavailable`` (no directory, no server, no driver), ``not_a_frontier`` (not a database, another
  schema), ``locked``, ``storage`` (a full disk), ``closed``; its message is the line it was before.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from memory_store import MemoryStore

from niofetcher.crawl import CrawlConfig
from niofetcher.crawl.frontier import (
    Frontier,
    FrontierError,
    FrontierErrorKind,
    FrontierLocked,
    frontier_status,
    open_frontier,
)
from niofetcher.crawl.frontier.service import FrontierService
from niofetcher.testing import free_port

pytest_plugins = ["pg_cluster"]
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def mem_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed package (on sys.path, with its dist-info) declaring a ``mem://`` frontier backend:
    the store of memory_store.py, one place a location, which records the location and options it
    was opened with."""
    (tmp_path / "memstore.py").write_text(textwrap.dedent("""
        import time

        from memory_store import MemoryStore, Place

        opened = []
        places = {}

        def open_store(location, *, crawl=None, lease_seconds=10.0, max_hosts=None, clock=time.time, **options):
            opened.append((location, {"crawl": crawl, **options}))
            return MemoryStore(places.setdefault(location, Place()), clock)

        class CoreOnly:
            # The core methods of a store alone: no host leases, no robots.txt store.
            LACKS = ("holds", "lost_hosts", "recordable", "start_deadlines", "robots", "store_robots")

            def __init__(self, inner):
                self.inner = inner

            def __getattr__(self, name):
                if name in self.LACKS:
                    raise AttributeError(name)
                return getattr(self.inner, name)

        def open_core_only(location, *, crawl=None, lease_seconds=10.0, max_hosts=None, clock=time.time):
            return CoreOnly(MemoryStore(Place(), clock))
    """))
    info = tmp_path / "memstore-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: memstore\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[niofetcher.frontiers]\nmem = memstore:open_store\nbare = memstore:open_core_only\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "memstore", raising=False)
    return tmp_path


def test_a_path_opens_the_sqlite_frontier_with_its_options(tmp_path: Path) -> None:
    for location in (str(tmp_path / "a.db"), tmp_path / "b.db", ":memory:"):
        with open_frontier(location, commit_every=5) as frontier:
            assert isinstance(frontier, Frontier) and frontier.store._commit_every == 5
            assert frontier.add(["http://a.test/"]) == 1
    with open_frontier(tmp_path / "a.db") as again:  # the same file: the URL is there
        assert again.counts()["waiting"] == 1


def test_a_postgres_url_opens_a_worker_of_that_crawl(postgres_dsn: str) -> None:
    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    other_scheme = postgres_dsn.replace("postgresql://", "postgres://", 1)
    for dsn in (postgres_dsn, other_scheme):
        with open_frontier(dsn, crawl="opened_by_url", max_hosts=2) as frontier:
            assert isinstance(frontier, PostgresFrontier) and frontier.crawl == "opened_by_url"
            assert frontier.max_hosts == 2
            frontier.add(["http://a.test/"])
    status = frontier_status(postgres_dsn, crawl="opened_by_url", top=3)
    assert status.counts["waiting"] == 1 and status.busiest == [("http://a.test", 1, None)]


def test_opening_a_sqlite_frontier_loads_no_postgres_driver(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from niofetcher.crawl.frontier import open_frontier\n"
        f"open_frontier({str(tmp_path / 'c.db')!r}).close()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_binary')\n"
        "      or m.endswith(('frontier.postgres', 'frontier.postgres_schema'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_a_missing_driver_is_one_line_of_kind_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # its import raises ImportError
    for call in (lambda: open_frontier("postgresql://u@127.0.0.1:1/db", crawl="c"),
                 lambda: frontier_status("postgresql://u@127.0.0.1:1/db", crawl="c")):
        with pytest.raises(FrontierError) as info:
            call()
        assert info.value.kind is FrontierErrorKind.UNAVAILABLE
        assert "psycopg" in str(info.value) and "\n" not in str(info.value)


def test_a_scheme_no_backend_takes_is_one_line_of_kind_unavailable() -> None:
    for location in ("redis://127.0.0.1:6379/0", "sqlite:///x.db"):
        with pytest.raises(FrontierError, match=r"^no frontier backend takes \w+:// URLs \(known: ") as info:
            open_frontier(location)
        assert info.value.kind is FrontierErrorKind.UNAVAILABLE
    with pytest.raises(FrontierError, match="status reads SQLite and PostgreSQL frontiers") as status:
        frontier_status("redis://127.0.0.1:6379/0")
    assert status.value.kind is FrontierErrorKind.UNAVAILABLE


def test_an_entry_point_adds_a_backend_by_its_scheme(mem_backend: Path) -> None:
    with open_frontier("MEM://crawl-one", commit_every=4) as frontier:
        assert isinstance(frontier, FrontierService) and isinstance(frontier.store, MemoryStore)
    import memstore  # type: ignore[import-not-found]

    assert memstore.opened == [("MEM://crawl-one", {"crawl": None, "commit_every": 4})]
    # A crawl may name it; a scheme no package declares is refused as before, naming the one that is.
    config = CrawlConfig(seeds=["http://a.test/"], frontier="mem://crawl-one", crawl_name="c")
    assert config.frontier == "mem://crawl-one"
    with pytest.raises(ValueError, match=r"^frontier must be a postgresql:// \(or postgres://, bare://, mem://\) URL$"):
        CrawlConfig(seeds=["http://a.test/"], frontier="sqlite:///x.db", crawl_name="c")
    with pytest.raises(FrontierError, match=r"known: a path, postgresql://, postgres://, bare://, mem://\)$"):
        open_frontier("redis://127.0.0.1:6379/0")


def test_a_crawl_runs_on_a_backend_of_an_entry_point(mem_backend: Path) -> None:
    from niofetcher.crawl import Crawler
    from niofetcher.testing import TestSite

    with TestSite(hosts=1, pages=5) as site:
        config = CrawlConfig(seeds=site.base_urls, frontier="mem://site", crawl_name="site", parse_mode="thread",
                             obey_robots=False)
        summary = Crawler(config).run()
    assert summary.counts["done"] == summary.pages > 5 and summary.errors == {}
    import memstore

    ((location, options),) = memstore.opened
    # The retry policy stays the crawl's: a store is never given one (it is told each wait).
    assert location == "mem://site" and options == {"crawl": "site"}


def test_a_store_without_leases_or_a_robots_store_gets_their_plain_answers(mem_backend: Path) -> None:
    """A store may lack host leases and a robots.txt store (capabilities.py): open_frontier() gives
    it the answers of a store one process holds and keeps no robots.txt, and a crawl runs on it."""
    from niofetcher.crawl import Crawler
    from niofetcher.testing import TestSite

    with open_frontier("bare://one") as frontier:
        assert frontier.lacks == {"host_leases", "robots_store"}  # type: ignore[attr-defined]
        assert "without host_leases, robots_store" in repr(frontier)
        frontier.add(["http://a.test/", "http://b.test/"])
        claimed = frontier.claim(5)
        assert all(frontier.holds(item.host) for item in claimed) and frontier.holds("http://never.test")
        assert frontier.lost_hosts() == [] and frontier.start_deadlines() == {}
        assert frontier.recordable(item.url for item in claimed) == [item.url for item in claimed]
        frontier.store_robots("http://a.test", 200, b"User-agent: *\nDisallow:\n")
        assert frontier.robots("http://a.test") is None  # kept nowhere
        frontier.complete_many([(item.url, 200) for item in claimed])
        assert frontier.counts()["done"] == 2
    assert frontier.closed  # type: ignore[attr-defined]
    with TestSite(hosts=1, pages=5, robots_disallow=["/page/1"]) as site:
        config = CrawlConfig(seeds=site.base_urls, frontier="bare://site", crawl_name="site", parse_mode="thread")
        summary = Crawler(config).run()
    assert summary.counts["done"] == summary.pages > 3 and summary.errors == {"robots_disallowed": 1}


# -- errors, by kind -----------------------------------------------------------------------------


def error_of(call: Any) -> FrontierError:
    with pytest.raises(FrontierError) as info:
        call()
    assert "\n" not in str(info.value)
    return info.value


def test_a_sqlite_frontier_that_cannot_be_opened_says_unavailable(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-directory" / "crawl.db"
    error = error_of(lambda: open_frontier(missing))
    assert error.kind is FrontierErrorKind.UNAVAILABLE
    assert str(error) == f"cannot open {missing}: directory {missing.parent} does not exist"
    assert error_of(lambda: frontier_status(tmp_path / "none.db")).kind is FrontierErrorKind.UNAVAILABLE


def test_a_file_that_is_no_frontier_says_not_a_frontier(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, not even close" * 200)
    opened = error_of(lambda: open_frontier(junk))
    assert opened.kind is FrontierErrorKind.NOT_A_FRONTIER and str(opened).startswith(f"cannot open {junk}: ")
    status = error_of(lambda: frontier_status(junk))
    assert status.kind is FrontierErrorKind.NOT_A_FRONTIER and str(status) == f"{junk} is not a SQLite database"
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert error_of(lambda: open_frontier(other)).kind is FrontierErrorKind.NOT_A_FRONTIER


def test_a_frontier_in_use_says_locked(tmp_path: Path) -> None:
    with open_frontier(tmp_path / "held.db"):
        error = error_of(lambda: open_frontier(tmp_path / "held.db"))
    assert isinstance(error, FrontierLocked) and error.kind is FrontierErrorKind.LOCKED


def test_a_full_disk_says_storage_and_a_closed_frontier_closed(tmp_path: Path) -> None:
    frontier = Frontier(tmp_path / "full.db")
    conn = frontier.store._conn
    assert conn is not None
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages}")
    error = error_of(lambda: frontier.add([f"http://a.test/{i}/{'x' * 200}" for i in range(2000)]))
    assert error.kind is FrontierErrorKind.STORAGE and str(error).startswith("database or disk is full")
    assert isinstance(error.__cause__, sqlite3.Error)  # chained: the driver's error is still there to see
    frontier.close()
    assert error_of(frontier.counts).kind is FrontierErrorKind.CLOSED


def test_a_postgres_server_that_cannot_be_reached_says_unavailable() -> None:
    pytest.importorskip("psycopg")
    dsn = f"postgresql://nobody@127.0.0.1:{free_port()}/db"
    error = error_of(lambda: open_frontier(dsn, crawl="c", connect_timeout=2))
    assert error.kind is FrontierErrorKind.UNAVAILABLE and str(error).startswith("cannot open crawl 'c' at 127.0.0.1:")
    assert error_of(lambda: frontier_status(dsn, crawl="c", connect_timeout=2)).kind is FrontierErrorKind.UNAVAILABLE


def test_a_postgres_schema_that_is_no_frontier_says_not_a_frontier(postgres_dsn: str) -> None:
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS not_ours CASCADE")
        conn.execute("CREATE SCHEMA not_ours")
        conn.execute("CREATE TABLE not_ours.t (x int)")
    assert error_of(lambda: open_frontier(postgres_dsn, crawl="not_ours")).kind is FrontierErrorKind.NOT_A_FRONTIER
    assert error_of(lambda: frontier_status(postgres_dsn, crawl="nowhere")).kind is FrontierErrorKind.NOT_A_FRONTIER


def test_a_postgres_statement_that_fails_says_storage(postgres_dsn: str) -> None:
    import psycopg

    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    with PostgresFrontier(postgres_dsn, "lost_connection") as frontier:
        assert frontier.store._conn is not None
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:  # the server ends the worker's session
            admin.execute("SELECT pg_terminate_backend(%s)", (frontier.store._conn.info.backend_pid,))
        error = error_of(lambda: frontier.add(["http://a.test/lost"]))
        assert error.kind is FrontierErrorKind.STORAGE and str(error).endswith(" crawl 'lost_connection' at "
                                                                                 f"{frontier.where}")

"""``service.prepare_additions``: the one preparation of ``add_many()``, the service's (issue 26, item 1).

What a batch of ``(url, depth, parent, priority)`` entries becomes before any storage sees it: URLs
in stored form, the invalid ones left out, a URL given twice folded into one row (its first place
and priority, its smallest depth with that entry's parent), parents in stored form, the hosts with
their highest priority, the URLs the recent-URL memory knows to change nothing skipped, lastmods by
stored URL; a depth or priority that is not an int refused before anything is prepared.  The
stores are held to the same results through add_many() (test_frontier_backends.py).
"""

from __future__ import annotations

import ast
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from memory_store import MemoryStore, Place

from niofetcher.crawl.frontier.recent import RecentURLs
from niofetcher.crawl.frontier.service import Additions, FrontierService, prepare_additions

FRONTIER = Path(__file__).resolve().parent.parent / "niofetcher" / "crawl" / "frontier"


def test_urls_are_stored_forms_and_duplicates_fold() -> None:
    recent = RecentURLs()
    additions = prepare_additions([
        ("HTTP://A.test:80/x#f", 3, "http://A.TEST/", 0),
        ("ftp://a.test/", 0, None, 0),  # not http(s)
        ("http://[::1/", 0, None, 0),  # malformed
        ("http://b.test/y", 2, None, 5),
        ("http://a.test/x", 1, "http://a.test/p#frag", 7),  # again, nearer: its depth and parent, not its priority
        ("http://a.test/x", 2, "http://a.test/q", 9),  # again, not nearer: nothing
        ("http://a.test/z", 1, "not a url", 1),  # a parent that is no URL is kept as given
    ], None, recent)
    assert additions.rows == {
        "http://a.test/x": [1, 0, "http://a.test/p", "http://a.test"],
        "http://b.test/y": [2, 5, None, "http://b.test"],
        "http://a.test/z": [1, 1, "not a url", "http://a.test"],
    }
    assert list(additions.rows) == ["http://a.test/x", "http://b.test/y", "http://a.test/z"]  # first place kept
    assert additions.hosts == {"http://a.test": 1, "http://b.test": 5}
    assert additions.lastmods is None and additions


def test_recent_urls_at_no_smaller_depth_are_skipped() -> None:
    recent = RecentURLs()
    recent.added("http://a.test/known", 2)
    additions = prepare_additions(
        [("http://a.test/known", 2, None, 0), ("http://a.test/known", 3, None, 0)], None, recent)
    assert additions == Additions({}, {}, None) and not additions
    nearer = prepare_additions([("http://a.test/known", 1, None, 0)], None, recent)
    assert nearer.rows == {"http://a.test/known": [1, 0, None, "http://a.test"]}


def test_lastmods_alone_are_something_to_store() -> None:
    additions = prepare_additions([], {"HTTP://a.test/x": "2024-01-01", "mailto:x@a.test": "2024"}, RecentURLs())
    assert additions.rows == {} and additions.lastmods == {"http://a.test/x": "2024-01-01"} and additions
    with pytest.raises(TypeError, match="lastmod must be a str"):
        prepare_additions([], {"http://a.test/x": 2024}, RecentURLs())  # type: ignore[dict-item]


@pytest.mark.parametrize(("depth", "priority", "error"), [
    (True, 0, TypeError), (-1, 0, ValueError), (1.0, 0, TypeError), (0, False, TypeError), (0, "1", TypeError),
])
def test_a_bad_depth_or_priority_is_refused(depth: object, priority: object, error: type[Exception]) -> None:
    # After a good entry of equal value (True == 1, 0 == False): checked by identity, not equality.
    entries = [("http://a.test/1", 1, None, 0), ("http://a.test/2", depth, None, priority)]
    with pytest.raises(error):
        prepare_additions(entries, None, RecentURLs())  # type: ignore[arg-type]


def called_in(path: Path, function: str) -> set[str]:
    """The names called by name in the one function ``function`` of the module at ``path``."""
    tree = ast.parse(path.read_text())
    (found,) = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == function]
    return {node.func.id for node in ast.walk(found) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def test_the_service_prepares_the_additions_and_no_store_does() -> None:
    """One home: the service's add_many() calls prepare_additions, and a store's insert() is given
    them prepared -- it normalises, checks and groups nothing itself."""
    assert "prepare_additions" in called_in(FRONTIER / "service.py", "add_many")
    for name in ("sqlite/frontier.py", "postgres/frontier.py"):
        called = called_in(FRONTIER / name, "insert")
        assert not called & {"prepare_additions", "normalize_url", "check_int", "host_key"}, name


def test_the_service_passes_addresses_on_to_a_store_that_takes_them() -> None:
    """note_addresses() is an optional method of a store (the PostgreSQL one's): the service passes
    the crawler's peers on to a store that has it, and asks nothing of one that has not."""

    class Noting(MemoryStore):
        def __init__(self) -> None:
            super().__init__(Place(), time.time)
            self.noted: list[dict[str, str]] = []

        def note_addresses(self, peers: Mapping[str, str]) -> None:
            self.noted.append(dict(peers))

    store = Noting()
    with FrontierService(store) as frontier:
        frontier.note_addresses({"http://a.test": "127.0.0.1:80"})
    assert store.noted == [{"http://a.test": "127.0.0.1:80"}]
    with FrontierService(MemoryStore(Place(), time.time)) as frontier:
        frontier.note_addresses({"http://a.test": "127.0.0.1:80"})  # nothing to pass it to

"""The coordinator knows a frontier only through ``FrontierBackend`` (issue 10, item 5), so that a
second backend (PostgreSQL, issue 12) plugs in without touching it.

- A crawl whose frontier is a proxy that lets through the protocol's methods and nothing else
  runs to its end exactly as on the SQLite class: robots.txt refusals, a robots.txt retried (by
  the crawl's own schedule: the frontier holds no retry policy), breadth-first layers
  (``min_due_depth``) included.  The proxy refuses
  ``lookup`` too, which the protocol has for the contract suite only.
- The SQLite ``Frontier`` has every method of the protocol, with the same parameters.
- Neither ``crawler.py`` nor ``opening.py``, which opens a crawl's frontier, names the SQLite class.
"""

from __future__ import annotations

import ast
import inspect
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import LeakBaseline

import niofetcher.crawl.crawler as crawler_module
import niofetcher.crawl.opening as opening_module
from niofetcher.crawl import CrawlConfig, Crawler, CrawlSummary
from niofetcher.crawl.frontier import Frontier, FrontierBackend
from niofetcher.testing import TestSite

# The protocol's methods: its public ones, and the context manager's; and its attributes (properties).
METHODS = sorted(
    name for name, value in vars(FrontierBackend).items()
    if callable(value) and (not name.startswith("_") or name in ("__enter__", "__exit__"))
)
ATTRIBUTES = sorted(name for name, value in vars(FrontierBackend).items() if isinstance(value, property))
PROTOCOL = METHODS + ATTRIBUTES
# What the protocol has for the contract suite (tests/test_frontier_backends.py), which the coordinator never asks.
CONTRACT_READS = ["lookup"]


class OnlyTheProtocol:
    """A frontier that forwards the protocol's methods to a real one and refuses anything else."""

    def __init__(self, frontier: Frontier) -> None:
        self._frontier = frontier
        self.called: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        if name not in PROTOCOL:
            raise AttributeError(f"the coordinator asked the frontier for {name!r}, which FrontierBackend lacks")
        if name in CONTRACT_READS:
            raise AttributeError(f"the coordinator asked the frontier for {name!r}, which only the contract suite reads")
        self.called[name] += 1
        return getattr(self._frontier, name)

    def __enter__(self) -> OnlyTheProtocol:
        self.called["__enter__"] += 1
        self._frontier.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.called["__exit__"] += 1
        self._frontier.__exit__(*exc_info)


def test_the_protocol_is_what_the_coordinator_calls_and_the_contract_reads() -> None:
    assert sorted(set(PROTOCOL) - set(CONTRACT_READS)) == sorted([
        "__enter__", "__exit__", "add", "add_many", "batch", "checkpoint", "claim", "close", "complete_many",
        "counts", "fail", "failures", "fingerprints", "holds", "lost_hosts", "min_due_depth", "next_due", "recordable",
        "release", "revisits", "robots", "start_deadlines", "store_fingerprints", "store_robots", "wake",
        "not_followed",
    ])
    assert set(CONTRACT_READS) <= set(PROTOCOL)
    assert ATTRIBUTES == ["not_followed"]


def crawl_two_sites(db_path: Path) -> CrawlSummary:
    """A crawl of two fresh sites: one whose robots.txt disallows pages, one whose robots.txt
    answers 503 once (retried after retry_delay), in breadth-first layers (max_depth)."""
    with TestSite(hosts=1, pages=30, robots_disallow=["/page/1"], max_seconds=30) as polite, \
            TestSite(hosts=1, pages=10, robots_unavailable=1, max_seconds=30) as unreachable_once:
        config = CrawlConfig(seeds=[polite.base_urls[0], unreachable_once.base_urls[0]], db_path=str(db_path),
                             parse_mode="thread", retry_delay=0.2, max_depth=100)
        return Crawler(config).run()


@pytest.mark.timeout(60)
def test_a_crawl_on_a_frontier_that_has_only_the_protocol_runs_as_on_the_sqlite_class(
    tmp_path: Path, no_leaks: LeakBaseline, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = crawl_two_sites(tmp_path / "plain.sqlite")
    frontiers: list[OnlyTheProtocol] = []

    def open_only_the_protocol(config: CrawlConfig) -> OnlyTheProtocol:
        frontiers.append(OnlyTheProtocol(
            Frontier(config.db_path)
        ))
        return frontiers[-1]

    monkeypatch.setattr(crawler_module, "open_crawl_frontier", open_only_the_protocol)
    proxied = crawl_two_sites(tmp_path / "proxied.sqlite")
    (proxy,) = frontiers
    assert (proxied.counts, proxied.errors, proxied.stopped) == (plain.counts, plain.errors, plain.stopped)
    assert proxied.counts["waiting"] == proxied.counts["processing"] == 0
    assert proxied.errors["robots_disallowed"] == proxied.counts["error"] > 0
    # The crawl went through the protocol's methods, robots.txt's retry and the layers included.
    assert {"add", "add_many", "claim", "complete_many", "fail", "min_due_depth"} <= set(
        proxy.called
    )
    assert proxy._frontier.closed


def test_the_sqlite_frontier_has_every_member_of_the_protocol_methods_with_their_parameters(tmp_path: Path) -> None:
    with Frontier(str(tmp_path / "f.sqlite")) as frontier:
        assert [name for name in ATTRIBUTES if not hasattr(frontier, name)] == []
    for name in METHODS:
        wanted = inspect.signature(getattr(FrontierBackend, name)).parameters
        got = inspect.signature(getattr(Frontier, name)).parameters
        assert [(p.name, p.kind, p.default) for p in got.values()] == [
            (p.name, p.kind, p.default) for p in wanted.values()
        ], name


@pytest.mark.parametrize("module", [crawler_module, opening_module], ids=["crawler", "opening"])
def test_the_coordinator_never_names_the_sqlite_class(module: ModuleType) -> None:
    """open_frontier names the backends, the crawler none (tests/test_layers.py holds the modules to it)."""
    tree = ast.parse(inspect.getsource(module))
    uses = [
        function.name
        for function in ast.walk(tree) if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function) if isinstance(node, ast.Name) and node.id == "Frontier"
    ]
    assert uses == []

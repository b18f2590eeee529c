"""Two things a store may not have: host leases and a robots.txt store.

The crawler asks every frontier the questions of :class:`~niofetcher.crawl.frontier.base.FrontierBackend`,
and six of them belong to two capabilities that a store need not have:

- **Host leases** (:class:`HostLeases`: ``holds``, ``lost_hosts``, ``recordable``,
  ``start_deadlines``): which hosts this worker holds, when workers share a store.  A store that one
  process holds whole has none to keep, and answers as :class:`WholeFile` does -- every host is its
  own, none is ever lost, every outcome counts, no start needs a gate.  That is what the SQLite
  frontier does (it inherits these answers), and what a store without the methods gets.
- **A robots.txt store** (:class:`RobotsStore`: ``robots``, ``store_robots``): answers kept for a
  day, so that a resumed crawl or another worker need not fetch robots.txt again.  A store without
  it answers as :class:`NoRobotsStore` does: nothing kept, so robots.txt is fetched again when its
  rules are needed after the crawler's memory of them ages out (once per run for each host).

:func:`with_capabilities` gives a store the answers of the capabilities it lacks;
``open_frontier()`` passes what a ``niofetcher.frontiers`` entry point opens through it, so that a
third-party store is one class of the core methods, and a capability more when it needs one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, cast, runtime_checkable

from .base import FrontierBackend, StoredRobots

__all__ = ["HostLeases", "NoRobotsStore", "RobotsStore", "WholeFile", "with_capabilities"]


@runtime_checkable
class HostLeases(Protocol):
    """The host leases of a store shared by workers (``FrontierBackend`` says what each method does)."""

    def holds(self, host: str) -> bool:
        """Whether requests to ``host`` may start now."""

    def lost_hosts(self) -> list[str]:
        """The hosts this worker lost since the last call."""

    def recordable(self, urls: Iterable[str]) -> list[str]:
        """Of these claimed URLs, those whose outcomes this worker may record in the current batch."""

    def start_deadlines(self) -> dict[str, float | None]:
        """Per host, the ``time.monotonic()`` from which none of its requests may start."""


@runtime_checkable
class RobotsStore(Protocol):
    """The robots.txt answers a store keeps (``FrontierBackend`` says what each method does)."""

    def robots(self, host: str) -> StoredRobots | None:
        """``host``'s robots.txt as the crawl fetched it in the last day, None when there is none."""

    def store_robots(self, host: str, status: int, body: bytes) -> None:
        """Keep what ``host``'s robots.txt said (2xx or 4xx)."""


class WholeFile:
    """The answers of a frontier that one process holds whole to the questions a frontier shared by
    workers answers from its leases (:class:`HostLeases`)."""

    def holds(self, host: str) -> bool:
        """Always True: one process holds the whole frontier."""
        return True

    def lost_hosts(self) -> list[str]:
        """Always empty: one process holds the whole frontier."""
        return []

    def recordable(self, urls: Iterable[str]) -> list[str]:
        """All of them: one process holds the whole frontier, so every outcome it records counts."""
        return list(urls)

    def start_deadlines(self) -> dict[str, float | None]:
        """Always empty: one process holds the whole frontier, and its requests need no gate."""
        return {}


class NoRobotsStore:
    """The answers of a store that keeps no robots.txt (:class:`RobotsStore`)."""

    def robots(self, host: str) -> StoredRobots | None:
        """Always None: nothing is kept, robots.txt is fetched again."""
        return None

    def store_robots(self, host: str, status: int, body: bytes) -> None:
        """Keeps nothing."""


class _WithCapabilities:
    """A store with the answers of the capabilities it lacks: those six methods here, anything else
    the store's own (``__getattr__``), the context manager returning this object."""

    def __init__(self, store: Any, lacks: frozenset[str]) -> None:
        self._store = store
        #: The capabilities the store lacks: "host_leases", "robots_store".
        self.lacks = lacks
        self._leases: HostLeases = WholeFile() if "host_leases" in lacks else store
        self._robots: RobotsStore = NoRobotsStore() if "robots_store" in lacks else store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def holds(self, host: str) -> bool:
        """The store's, or :class:`WholeFile`'s."""
        return self._leases.holds(host)

    def lost_hosts(self) -> list[str]:
        """The store's, or :class:`WholeFile`'s."""
        return self._leases.lost_hosts()

    def recordable(self, urls: Iterable[str]) -> list[str]:
        """The store's, or :class:`WholeFile`'s."""
        return self._leases.recordable(urls)

    def start_deadlines(self) -> dict[str, float | None]:
        """The store's, or :class:`WholeFile`'s."""
        return self._leases.start_deadlines()

    def robots(self, host: str) -> StoredRobots | None:
        """The store's, or :class:`NoRobotsStore`'s."""
        return self._robots.robots(host)

    def store_robots(self, host: str, status: int, body: bytes) -> None:
        """The store's, or :class:`NoRobotsStore`'s."""
        self._robots.store_robots(host, status, body)

    def __enter__(self) -> _WithCapabilities:
        self._store.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._store.__exit__(*exc_info)

    def __repr__(self) -> str:
        return f"<{self._store!r} without {', '.join(sorted(self.lacks))}>"


def with_capabilities(store: object) -> FrontierBackend:
    """``store`` as the crawler asks it: itself when it has both capabilities, otherwise with the
    answers of :class:`WholeFile` and :class:`NoRobotsStore` for those it lacks (it keeps the rest).
    A store that has some methods of a capability and not all of them lacks it: all or none."""
    lacks = frozenset(name for name, capability in (("host_leases", HostLeases), ("robots_store", RobotsStore))
                      if not isinstance(store, capability))
    if not lacks:
        return cast(FrontierBackend, store)
    return cast(FrontierBackend, _WithCapabilities(store, lacks))

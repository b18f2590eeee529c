"""Two things a store may not have: host leases and a robots.txt store.

The crawler asks every frontier the questions of :class:`~niofetcher.crawl.frontier.base.FrontierBackend`,
and six of them belong to two capabilities that a store (``store.Store``) need not have:

- **Host leases** (:class:`HostLeases`: ``holds``, ``lost_hosts``, ``recordable``,
  ``start_deadlines``): which hosts this worker holds, when workers share a store.  A store that one
  process holds whole has none to keep, and answers as :class:`WholeFile` does -- every host is its
  own, none is ever lost, every outcome counts, no start needs a gate.  That is what the SQLite
  store gets, and any store without the methods.
- **A robots.txt store** (:class:`RobotsStore`: ``robots``, ``store_robots``): answers kept for a
  day, so that a resumed crawl or another worker need not fetch robots.txt again.  A store without
  it answers as :class:`NoRobotsStore` does: nothing kept, so robots.txt is fetched again when its
  rules are needed after the crawler's memory of them ages out (once per run for each host).

The service (``service.FrontierService``) gives a store the answers of the capabilities it lacks,
all or none of each: a store that has some methods of a capability and not all of them lacks it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from .base import StoredRobots

__all__ = ["HostLeases", "NoRobotsStore", "RobotsStore", "WholeFile"]


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

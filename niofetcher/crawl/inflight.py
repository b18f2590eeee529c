"""The URLs a crawl has claimed and not yet recorded, counted per host: the crawler's window.

A crawl claims ahead of the fetcher, so that a connection that finishes a response has the next
URL of its host at hand; but a window of one global FIFO filled up with the links of a few hosts
(a page's links cluster by host) while the other hosts' connections stood idle.  So the window is
bounded per host as well as in all: a host may have ``per_host`` URLs in progress -- in the
fetcher, waiting for robots.txt, in a parse job or with ``on_page`` -- and the frontier is asked
only for hosts with room (:meth:`InProgress.room`, the ``host_room`` of ``claim()``).  A host
with a politeness delay serves one URL per delay, so its window is two: the one being fetched
and the next.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from .frontier import FrontierURL

__all__ = ["SLOW_HOST_WINDOW", "InProgress", "windows"]


#: The window of a host that has a politeness delay.
SLOW_HOST_WINDOW = 2


def windows(max_connections: int, per_host_connections: int, host_delay: float = 0.0) -> tuple[int, int]:
    """The window of a crawl, in all and per host, for a fetcher of these connection limits and
    this delay between two requests to a host.

    Per host: enough to keep its connections busy while the pages before are parsed and recorded
    (8 per connection, at least 16), or :data:`SLOW_HOST_WINDOW` with a delay.  In all: room for half again as many hosts as the fetcher can
    keep busy at once, each with a full window, so that a host whose window is full never holds
    a connection another host could use (at least 64, at most 20,000 URLs).
    """
    per_host = SLOW_HOST_WINDOW if host_delay > 0 else max(16, 8 * per_host_connections)
    hosts = -(-max_connections // per_host_connections)  # hosts it takes to use every connection
    return min(20_000, max(64, per_host * hosts * 3 // 2)), per_host


class InProgress:
    """Claimed URLs by URL, with the number of each host's.

    Args:
        per_host: how many URLs of one host may be in progress at once.
    """

    def __init__(self, per_host: int) -> None:
        self.per_host = per_host
        self._items: dict[str, FrontierURL] = {}
        self._hosts: Counter[str] = Counter()
        self._slow: set[str] = set()  # hosts with a politeness delay of their own (Crawl-delay)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, url: object) -> bool:
        return url in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def items(self) -> Iterator[tuple[str, FrontierURL]]:
        """(url, claimed URL) pairs."""
        return iter(self._items.items())

    def add(self, item: FrontierURL) -> None:
        """``item`` is in progress (again: a URL re-added is counted once)."""
        if item.url not in self._items:
            self._hosts[item.host] += 1
        self._items[item.url] = item

    def pop(self, url: str) -> FrontierURL | None:
        """``url`` is no longer in progress; what was claimed, None if it was not."""
        item = self._items.pop(url, None)
        if item is not None:
            host = item.host
            self._hosts[host] -= 1
            if not self._hosts[host]:
                del self._hosts[host]
        return item

    def clear(self) -> None:
        """Nothing in progress (the crawl gave it all back)."""
        self._items.clear()
        self._hosts.clear()

    def has_host(self, host: str) -> bool:
        """Whether a URL of ``host`` is in progress."""
        return host in self._hosts

    def slow_down(self, host: str) -> None:
        """``host`` has a politeness delay: its window is :data:`SLOW_HOST_WINDOW` from now on."""
        self._slow.add(host)

    def room(self, host: str) -> int:
        """How many URLs of ``host`` may be claimed now: what its window has free, but nothing
        until a quarter of it is, so that claims come in batches rather than one URL at a time
        (each claim is a transaction)."""
        window = SLOW_HOST_WINDOW if host in self._slow else self.per_host
        free = window - self._hosts.get(host, 0)
        return free if free * 4 >= window else 0

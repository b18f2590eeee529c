"""The URLs a frontier added lately, with their depth: a known link skips the database; and
:class:`RecentKeys`, a bounded memory of strings a frontier saw lately (links it refused, URLs
its claims handed out).

Most links a crawler finds are known already -- a site's menu is on every page -- and a known URL
costs an index probe in the database and a read of its row (for the depth rule), which grow with
the table (10 us at 100,000 URLs, 70 us at 10 million).  A link found again at no smaller depth
than recorded changes nothing, so a bounded memory of recent additions answers it first.  Two
generations of a dict each, the older dropped when the newer is full: O(1) a look, and never
more than ``2 * size`` URLs kept, however big the frontier grows.
"""

from __future__ import annotations

__all__ = ["RecentKeys", "RecentURLs"]


class RecentURLs:
    """Stored URLs added lately, each with a depth no smaller than its recorded one.

    Args:
        size: URLs per generation.
    """

    def __init__(self, size: int = 50_000) -> None:
        self._size = size
        self._new: dict[str, int] = {}
        self._old: dict[str, int] = {}

    def changes_nothing(self, url: str, depth: int) -> bool:
        """Whether adding ``url`` (stored form) at ``depth`` is known to change nothing: it was
        added lately at a depth no greater."""
        known = self._new.get(url)
        if known is None:
            known = self._old.get(url)
        return known is not None and known <= depth

    def added(self, url: str, depth: int) -> None:
        """``url`` is in the frontier now, at ``depth`` or nearer."""
        new = self._new
        if url not in new and len(new) >= self._size:
            self._old, self._new = new, {}
            new = self._new
        known = new.get(url)
        new[url] = depth if known is None else min(known, depth)

    def clear(self) -> None:
        """Forget everything (a rollback may have taken back what was added)."""
        self._new.clear()
        self._old.clear()


class RecentKeys:
    """Strings seen lately: two generations of a set, like :class:`RecentURLs`, never more than
    ``2 * size`` kept."""

    def __init__(self, size: int = 50_000) -> None:
        self._size = size
        self._new: set[str] = set()
        self._old: set[str] = set()

    def __contains__(self, key: object) -> bool:
        return key in self._new or key in self._old

    def add(self, key: str) -> None:
        """Remember ``key``."""
        if len(self._new) >= self._size:
            self._old, self._new = self._new, set()
        self._new.add(key)

    def clear(self) -> None:
        """Forget them all."""
        self._new.clear()
        self._old.clear()

"""Host leases, as a SQLite frontier has them: none.  One process holds the whole file (``lock.py``),
so every host is its own, for as long as it runs, and every outcome it records counts.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["WholeFile"]


class WholeFile:
    """The answers of a frontier that one process holds whole to the questions a frontier shared by
    workers answers from its leases (``FrontierBackend.holds`` and the rest)."""

    def holds(self, host: str) -> bool:
        """Always True: one process holds the whole file."""
        return True

    def lost_hosts(self) -> list[str]:
        """Always empty: one process holds the whole file."""
        return []

    def recordable(self, urls: Iterable[str]) -> list[str]:
        """All of them: one process holds the whole file, so every outcome it records counts."""
        return list(urls)

    def start_deadlines(self) -> dict[str, float | None]:
        """Always empty: one process holds the whole file, and its requests need no gate."""
        return {}


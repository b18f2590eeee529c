"""The hosts a frontier has waiting URLs for, taken in turn: the round-robin of host-aware claims.

A claim that walked one FIFO of URLs handed out a page's links together, and they cluster by host:
a claim of 512 URLs held 61 hosts, and with 2 connections a host most of the fetcher's connections
stood idle.  So a frontier keeps one queue of URLs per host (in its storage) and, here, the hosts
in turn: a claim takes the next hosts that can take URLs now (the caller says which, and how many),
asks each for its first URLs, and puts each host back at the end of the line -- or, when its URLs
lost to others' in this claim, back at the front, so that it keeps its turn.

Priorities come first: hosts wait in one line per priority, the highest line is served first, and
a host is in the line of the highest priority it may have waiting (an upper bound: adding a URL
raises it at once; a claim lowers it to what the host's queue turned out to hold).

What is here is in memory and only a hint of what is stored: every host that has a waiting URL is
in a line (the frontier offers it whenever one of its URLs becomes waiting, and forgets it only when
its queue turned out empty), and a host in a line without waiting URLs costs one look.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

__all__ = ["HostRotation", "Turn"]

#: A host's turn in a claim: (host, how many URLs it may take, the line it came from).
Turn = tuple[str, int, int]


class HostRotation:
    """Hosts in lines by priority, each line in turn order."""

    def __init__(self) -> None:
        # A host's current place: (priority, generation).  A line may still hold older entries of a
        # host that moved (they are skipped when they come up), so an entry counts only while its
        # generation is the host's.
        self._place: dict[str, tuple[int, int]] = {}
        self._lines: dict[int, deque[tuple[str, int]]] = {}
        self._generation = 0

    def __len__(self) -> int:
        return len(self._place)

    def __contains__(self, host: object) -> bool:
        return host in self._place

    def offer(self, host: str, priority: int) -> None:
        """``host`` has a waiting URL of ``priority``: in a line it goes, or up to a higher one."""
        place = self._place.get(host)
        if place is None or priority > place[0]:
            self._enter(host, priority, front=False)

    def take(self, most: int, room: Callable[[str], int] | None) -> list[Turn]:
        """Up to ``most`` hosts whose ``room`` is above 0 (every host's is ``most`` without a
        ``room``), highest line first, in turn; they are out of their lines until :meth:`put_back`
        or :meth:`forget`.  A host without room keeps its place."""
        turns: list[Turn] = []
        for priority in sorted(self._lines, reverse=True):
            line = self._lines[priority]
            for _ in range(len(line)):
                if len(turns) == most:
                    break
                host, generation = line.popleft()
                if self._place.get(host) != (priority, generation):
                    continue  # an old entry of a host that moved or was forgotten
                try:
                    share = most if room is None else room(host)
                except BaseException:  # a caller's bug must not lose hosts: all keep their places
                    line.appendleft((host, generation))
                    for taken, _share, came_from in reversed(turns):
                        self.put_back(taken, came_from, front=True)
                    raise
                if share > 0:
                    turns.append((host, share, priority))
                    del self._place[host]
                else:
                    line.append((host, generation))
            if not line:
                del self._lines[priority]
            if len(turns) == most:
                break
        return turns

    def put_back(self, host: str, priority: int, *, front: bool = False) -> None:
        """A host taken by :meth:`take` goes back in the line of ``priority``: at its end, or at its
        front when it keeps its turn.  A host offered meanwhile stays where the higher of the two puts it."""
        place = self._place.get(host)
        if place is None or priority > place[0]:
            self._enter(host, priority, front=front)

    def forget(self, host: str) -> None:
        """``host`` has no waiting URL (any entry of it left in a line is skipped)."""
        self._place.pop(host, None)

    def hosts(self) -> list[str]:
        """Every host in a line (for tests and messages)."""
        return list(self._place)

    def _enter(self, host: str, priority: int, *, front: bool) -> None:
        self._generation += 1
        self._place[host] = (priority, self._generation)
        line = self._lines.setdefault(priority, deque())
        if front:
            line.appendleft((host, self._generation))
        else:
            line.append((host, self._generation))

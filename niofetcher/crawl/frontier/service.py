"""What every frontier backend does the same way before it reaches its storage: today, the
preparation of ``add_many()`` -- normalising, checking, the recent-URL filter, folding a batch's
duplicates and its parents, the hosts of the batch.

A crawler adds about 50 links a page, most of them known, so this loop runs for every link found:
it stays one pass with nothing called per URL that a batch shares (the depth and priority of a
page's links are checked once, its parent normalised once).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ...urls import host_key, normalize_url
from .base import check_int, normal_lastmods
from .recent import RecentURLs

__all__ = ["Additions", "prepare_additions"]


class Additions(NamedTuple):
    """What one ``add_many()`` call asks of the storage."""

    # Stored URL -> [depth, priority, parent, host], in the order first given: a URL given twice
    # keeps its first place and priority, and the smallest depth with the parent that gave it.
    rows: dict[str, list[Any]]
    hosts: dict[str, int]  # the hosts of those URLs, each with its highest priority among them
    lastmods: dict[str, str] | None  # {stored URL: lastmod}, None when none was given

    def __bool__(self) -> bool:
        return bool(self.rows or self.lastmods)


def prepare_additions(
    entries: Iterable[tuple[str, int, str | None, int]], lastmods: Mapping[str, str] | None, recent: RecentURLs
) -> Additions:
    """``add_many()``'s arguments as the storage takes them: URLs that are not http(s) or are
    malformed left out, and those that ``recent`` knows change nothing (a known URL at no smaller
    depth).  Raises TypeError or ValueError for a depth or priority that is not an int (>= 0 for a
    depth), before anything is stored."""
    parents: dict[str | None, str | None] = {None: None}
    rows: dict[str, list[Any]] = {}
    hosts: dict[str, int] = {}
    checked: tuple[object, object] = (None, None)
    for url, depth, parent, priority in entries:
        try:
            key = normalize_url(url)
        except ValueError:
            continue
        # The entries of a page share depth and priority: check them when they change (by
        # identity -- True == 1, but True is not 1).
        if depth is not checked[0] or priority is not checked[1]:
            check_int("depth", depth, 0)
            check_int("priority", priority)
            checked = (depth, priority)
        if recent.changes_nothing(key, depth):
            continue
        if parent not in parents:
            try:
                parents[parent] = normalize_url(parent)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                parents[parent] = parent
        row = rows.get(key)
        if row is None:
            host = host_key(key)
            rows[key] = [depth, priority, parents[parent], host]
            if hosts.get(host, priority - 1) < priority:
                hosts[host] = priority
        elif depth < row[0]:
            row[0], row[2] = depth, parents[parent]
    return Additions(rows, hosts, normal_lastmods(lastmods) if lastmods else None)

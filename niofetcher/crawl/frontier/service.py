"""What every frontier backend does the same way before it reaches its storage: today, the
preparation of ``add_many()`` -- normalising, checking, the trap rules (``traps.py``), the recent-URL
filter, folding a batch's duplicates and its parents, the hosts of the batch -- and the per-host
budget, which asks the storage what it knows (:func:`fit_host_budget`).

A crawler adds about 50 links a page, most of them known, so this loop runs for every link found:
it stays one pass with nothing called per URL that a batch shares (the depth and priority of a
page's links are checked once, its parent normalised once).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from ...urls import host_key, normalize_url
from .base import check_int, normal_lastmods
from .recent import RecentURLs
from .traps import RefusedURLs, TrapRules

__all__ = ["Additions", "fit_host_budget", "prepare_additions"]


class Additions(NamedTuple):
    """What one ``add_many()`` call asks of the storage."""

    # Stored URL -> [depth, priority, parent, host], in the order first given: a URL given twice
    # keeps its first place and priority, and the smallest depth with the parent that gave it.
    rows: dict[str, list[Any]]
    hosts: dict[str, int]  # the hosts of those URLs, each with its highest priority among them
    lastmods: dict[str, str] | None  # {stored URL: lastmod}, None when none was given
    refused: Mapping[str, int] = MappingProxyType({})  # links refused by the trap rules, by cause (traps.CAUSES)

    def __bool__(self) -> bool:
        return bool(self.rows or self.lastmods or self.refused)


def prepare_additions(
    entries: Iterable[tuple[str, int, str | None, int]], lastmods: Mapping[str, str] | None, recent: RecentURLs,
    traps: TrapRules | None = None, refused: RefusedURLs | None = None,
) -> Additions:
    """``add_many()``'s arguments as the storage takes them: URLs that are not http(s) or are
    malformed left out, and those that ``recent`` knows change nothing (a known URL at no smaller
    depth).  With ``traps``, each URL is stored without the parameters they strip, and one they
    refuse is left out and counted (a seed -- depth 0, no parent -- is never refused); ``refused``
    remembers the refused ones, so that a link found again is neither checked nor counted twice.
    Raises TypeError or ValueError for a depth or priority that is not an int (>= 0 for a
    depth), before anything is stored."""
    parents: dict[str | None, str | None] = {None: None}
    rows: dict[str, list[Any]] = {}
    hosts: dict[str, int] = {}
    checked: tuple[object, object] = (None, None)
    causes: Counter[str] = Counter()
    clean = traps.cleaner.clean if traps is not None and traps.cleaner else None
    check = traps.refusal if traps is not None and (traps.max_url_length or traps.max_path_repeats) else None
    memory = refused if refused is not None and traps else None
    for url, depth, parent, priority in entries:
        try:
            key = normalize_url(url)
        except ValueError:
            continue
        if clean is not None:
            key = clean(key)
        if memory is not None and (depth or parent is not None):  # never a seed
            if key in memory:
                continue
            cause = check(key) if check is not None else None
            if cause is not None:
                causes[cause] += 1
                memory.add(key)
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
            else:
                if clean is not None:
                    parents[parent] = clean(parents[parent])  # type: ignore[arg-type]
        row = rows.get(key)
        if row is None:
            host = host_key(key)
            rows[key] = [depth, priority, parents[parent], host]
            if hosts.get(host, priority - 1) < priority:
                hosts[host] = priority
        elif depth < row[0]:
            row[0], row[2] = depth, parents[parent]
    dated = normal_lastmods(lastmods) if lastmods else None
    if dated and clean is not None:
        dated = {clean(key): lastmod for key, lastmod in dated.items()}
    return Additions(rows, hosts, dated, causes)


def fit_host_budget(
    additions: Additions, most: int, admitted: Callable[[list[str]], Mapping[str, int]],
    known: Callable[[list[str]], set[str]], refused: RefusedURLs,
) -> Additions:
    """``additions`` without the new URLs of hosts that would have more than ``most`` URLs in the
    frontier with them, those counted under ``max_pages_per_host`` and remembered in ``refused``
    (its rows are left out of ``additions.rows`` itself).

    ``admitted(hosts)`` is the storage's count of URLs admitted per host (a host it has none of may
    be left out); ``known(urls)`` those of ``urls`` stored already: a known URL costs no budget (it
    is not new; its depth may still go down), and is asked about only for a host the batch would
    take past its budget, which is rare, so that a crawl pays one look at the counts a call.  A
    seed (depth 0, no parent) is admitted whatever its host's count; it counts all the same.
    """
    rows = additions.rows
    if not rows:
        return additions
    by_host: dict[str, list[str]] = {}
    for key, row in rows.items():
        by_host.setdefault(row[3], []).append(key)
    counts = admitted(list(by_host))
    crowded = {host: keys for host, keys in by_host.items() if counts.get(host, 0) + len(keys) > most}
    if not crowded:
        return additions
    stored = known([key for keys in crowded.values() for key in keys])
    over = 0
    for host, keys in crowded.items():
        room = most - counts.get(host, 0)
        for key in keys:
            if key in stored:
                continue
            row = rows[key]
            if room > 0 or (row[0] == 0 and row[2] is None):
                room -= 1
                continue
            del rows[key]
            over += 1
            refused.add(key)
    if not over:
        return additions
    causes = Counter(additions.refused)
    causes["max_pages_per_host"] += over
    return additions._replace(refused=causes)

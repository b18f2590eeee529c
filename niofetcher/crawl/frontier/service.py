"""What every frontier backend does the same way above its storage: the preparation of
``add_many()`` -- normalising, checking, the trap rules (``traps.py``), the recent-URL filter,
folding a batch's duplicates and its parents, the hosts of the batch --, the per-host budget, which
asks the storage what it knows (:func:`fit_host_budget`), and :class:`FrontierService`, the part of
a frontier class that is the same on every backend (``add()``, batches, the reads of one URL, the
closed checks).

A crawler adds about 50 links a page, most of them known, so this loop runs for every link found:
it stays one pass with nothing called per URL that a batch shares (the depth and priority of a
page's links are checked once, its parent normalised once).
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ...urls import host_key, normalize_url
from .base import StoredURL, check_int, normal_lastmods
from .recent import RecentURLs
from .traps import RefusedURLs, TrapRules

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's own from Python 3.11

__all__ = [
    "MODIFIED_SINCE_FETCH", "Additions", "FrontierService", "fit_host_budget", "lastmod_time", "modified_times",
    "prepare_additions",
]


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


# -- a sitemap's date (add_many(..., wake_modified=True)) -----------------------------------------

#: The rule of a sitemap's ``<lastmod>`` under a revisit policy, in the SQL of every store: a URL is
#: due again at once when it is done or an error (``u``, its row of urls) and its last fetch came
#: before the time :func:`modified_times` gave it (``{modified}``, the statement's name for it).  A
#: waiting or processing URL is left alone: it will be fetched, or is.
MODIFIED_SINCE_FETCH = "u.state IN ('done', 'error') AND u.fetched_at < {modified}"

# The forms of a W3C datetime (www.w3.org/TR/NOTE-datetime), which sitemaps.org asks of a <lastmod>:
# a day with a time to the second (the commonest), a day, a time to a fraction of a second or to the
# minute, a month, a year.  A time has its zone (Z or +hh:mm); a date alone is taken in UTC.
_W3C_FORMATS = ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d", "%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M%z", "%Y-%m", "%Y")


@functools.lru_cache(maxsize=4096)  # a sitemap dates many of its URLs alike
def lastmod_time(lastmod: str) -> float | None:
    """The unix time a sitemap's ``<lastmod>`` says, None for one that is no W3C datetime."""
    text = lastmod.strip()
    for form in _W3C_FORMATS:
        try:
            when = datetime.strptime(text, form)
        except ValueError:
            continue
        return (when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)).timestamp()
    return None


def modified_times(lastmods: Mapping[str, str], now: float, woke_at: float) -> dict[str, float]:
    """``lastmods`` (``{stored URL: lastmod}``) as the times the stores compare with each URL's last
    fetch (:data:`MODIFIED_SINCE_FETCH`), for those that are W3C datetimes no later than ``now``:
    the date, or ``woke_at`` when that is earlier.

    A date in the future is no evidence of a change (a wrong clock, a template's): believed, it would
    have the URL fetched again at every listing.  ``woke_at`` is when the frontier began the due
    period it is in (its last ``wake()``, or its opening): a URL fetched since then was fetched in
    this period, by its due time or by a date, and a later date (a sitemap written as it is served,
    or a second sitemap listing the URL) does not have it fetched twice in one period -- as ``wake()``
    does not."""
    times = {}
    for url, lastmod in lastmods.items():
        when = lastmod_time(lastmod)
        if when is not None and when <= now:
            times[url] = min(when, woke_at)
    return times


class FrontierService:
    """What a frontier class does the same way whatever its backend, above the backend's own
    connection and transactions: the base last in a backend class's bases, so that the backend's
    layers come first and this reads only what they provide (``_db()``, ``_commit()``, ``_lock``,
    ``_conn``, ``_clock``, and the class's SQL of one URL: :attr:`_STATE_OF`, :attr:`_LOOKUP`,
    :attr:`_MIN_DUE_DEPTH`, each with one ``url`` or ``now`` placeholder in its driver's style).

    Each backend keeps the promises of ``base.py`` its own way; what it keeps the same way is here,
    once: the trap rules and what they refused, ``add()`` over ``add_many()``, batches (the same
    counter of open blocks on both: a commit asked for inside one waits for its end), the reads of
    one URL, ``closed``, the context manager and the repr.
    """

    _STATE_OF: ClassVar[str]  # a stored URL's state
    _LOOKUP: ClassVar[str]  # the columns of StoredURL, in its order, of a stored URL
    _MIN_DUE_DEPTH: ClassVar[str]  # the smallest depth of a waiting URL due at a time, a row or none

    traps: TrapRules | None
    not_followed: Counter[str]
    _refused_urls: RefusedURLs
    _recent: RecentURLs
    _conn: Any  # the backend's connection, None once closed
    _lock: Any  # the backend's RLock around it
    _batching: int  # open batch() blocks: while there are any, no commit happens
    _commit_deferred: bool  # a commit was asked for inside a batch
    _clock: Callable[[], float]
    _woke_at: float  # the start of the due period (modified_times): the last wake(), or the opening

    if TYPE_CHECKING:  # the backend's layers provide these

        def _db(self) -> contextlib.AbstractContextManager[Any]: ...

        def _commit(self, conn: Any) -> None: ...

        def close(self) -> None:
            """The backend's: commit what is pending and let go of the frontier."""

        def add_many(
            self, entries: Iterable[tuple[str, int, str | None, int]], lastmods: Mapping[str, str] | None = None,
            wake_modified: bool = False,
        ) -> int:
            """The backend's: add ``(url, depth, parent, priority)`` entries; how many were new."""

    def _take_rules(self, traps: TrapRules | None) -> None:
        """Keep the trap rules ``add_many()`` applies (None, or rules that limit nothing: none), and
        start the memories every backend keeps: what was refused, and the links known lately."""
        if traps is not None and not isinstance(traps, TrapRules):
            raise TypeError(f"traps must be a TrapRules or None, not {traps!r}")
        self.traps = traps if traps else None
        #: The links :meth:`add_many` refused since this frontier was opened, by cause (traps.CAUSES).
        self.not_followed = Counter()
        self._refused_urls = RefusedURLs()
        self._recent = RecentURLs()  # known links skip the storage (recent.py)

    def add(self, urls: Iterable[str], depth: int = 0, parent: str | None = None, priority: int = 0) -> int:
        """Add URLs found at one depth on one page (or seeds: depth 0, no parent).

        Each URL is normalised (:func:`normalize_url`); URLs already known, in
        whatever state, and URLs that are not http(s) or are malformed are
        skipped -- except that a known URL given a smaller depth than its
        recorded one gets that depth and this parent (a URL's depth is its
        shortest distance from a seed).  One transaction per call.

        Returns:
            How many URLs were new.
        """
        if isinstance(urls, str):
            raise TypeError("add() takes an iterable of URLs; wrap a single URL in a list")
        check_int("depth", depth, 0)
        check_int("priority", priority)
        return self.add_many((url, depth, parent, priority) for url in urls)

    # -- batches -----------------------------------------------------------

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Make the calls in the block durable together: nothing commits until it ends.

        A crawler records one batch of pages with several calls -- fail() for some,
        release() for others, complete_many() with the outputs' checkpoint last -- and a
        crash must keep all of them or none: a failure committed before the checkpoint
        that covers its output record would lose that record on resume.  A block that
        raises commits nothing on its way out (the next commit will, or a crash undoes it).
        """
        with self._lock:
            self._batching += 1
            try:
                yield
            finally:
                self._batching -= 1
            if not self._batching and self._commit_deferred:
                self._commit_deferred = False
                with self._db() as conn:
                    self._commit(conn)

    def flush(self) -> None:
        """Commit what is pending (outcomes a backend batches; outside a batch() block)."""
        with self._db() as conn:
            self._commit(conn)

    # -- one URL -------------------------------------------------------------

    def min_due_depth(self) -> int | None:
        """The smallest depth among waiting URLs that are due now, None when there is none."""
        with self._db() as conn:
            self._commit(conn)
            row = conn.execute(self._MIN_DUE_DEPTH, (self._clock(),)).fetchone()
            return int(row[0]) if row is not None else None

    def state(self, url: str) -> str | None:
        """The state of a URL (in any form that normalises to a known one), None if unknown or invalid."""
        row = self._row_of(url, self._STATE_OF)
        return str(row[0]) if row is not None else None

    def lookup(self, url: str) -> StoredURL | None:
        """``url`` (in any form that normalises to a known one) as the frontier keeps it, whichever
        worker wrote it last; None if unknown or invalid."""
        row = self._row_of(url, self._LOOKUP)
        if row is None:
            return None
        (url, state, attempts, depth, priority, parent, status, error, discovered, fetched, due, lastmod,
         etag, last_modified, digest, visits, changes, next_due, changed_time, unchanged_time) = row
        return StoredURL(url, state, attempts, depth, priority, parent, status, error, float(discovered),
                         None if fetched is None else float(fetched), None if due is None else float(due),
                         lastmod, etag, last_modified, digest, int(visits), int(changes),
                         None if next_due is None else float(next_due), float(changed_time), float(unchanged_time))

    def _row_of(self, url: str, statement: str) -> tuple[Any, ...] | None:
        """The row ``statement`` reads of ``url``'s key, committed first; None for no row or a URL
        that is not valid."""
        try:
            key = normalize_url(url)
        except (TypeError, ValueError):
            return None
        with self._db() as conn:
            self._commit(conn)
            row: tuple[Any, ...] | None = conn.execute(statement, (key,)).fetchone()
            return row

    # -- closing -------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the frontier is closed: no call but ``close()`` may follow."""
        return self._conn is None

    def _describe(self) -> str:
        """Where the frontier is, for its repr."""
        raise NotImplementedError

    def _summary(self) -> str:
        """What an open frontier holds, for its repr."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        name = type(self).__name__
        if self._conn is None:
            return f"<{name} {self._describe()} closed>"
        return f"<{name} {self._describe()} {self._summary()}>"

"""The frontier the crawler asks: :class:`FrontierService`, which holds a store (``store.py``) and
does above it what would otherwise be the same in every store -- the stored form of every URL a
caller gives (:func:`stored_form`), the preparation of ``add_many()``
(:func:`prepare_additions`: normalising, checking, the trap rules of ``traps.py``, the recent-URL
filter, folding a batch's duplicates and its parents, the hosts of the batch), the per-host budget,
which asks the store what it knows (:func:`fit_host_budget`), a sitemap's dates as times
(:func:`modified_times`), the argument checks and the free texts as every store can keep them
(``base.storable_text``), the refusals counted as the store keeps them (a rolled-back batch's
not), the answers of a capability the store lacks, the context manager and the repr.

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
from typing import TYPE_CHECKING, Any, NamedTuple

from ...urls import host_key, normalize_url
from .base import (
    MOST_INT,
    FrontierError,
    FrontierErrorKind,
    FrontierURL,
    Revisits,
    StoredRobots,
    StoredURL,
    Visit,
    check_checkpoint,
    check_depth,
    check_int,
    check_priority,
    check_time,
    check_visit,
    normal_lastmods,
    storable_text,
)
from .capabilities import HostLeases, NoRobotsStore, RobotsStore, WholeFile
from .recent import RecentKeys, RecentURLs
from .traps import RefusedURLs, TrapRules

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's own from Python 3.11

    from .store import Store

__all__ = [
    "MODIFIED_SINCE_FETCH", "Additions", "FrontierService", "check_traps", "fit_host_budget", "lastmod_time",
    "modified_times", "prepare_additions", "stored_form",
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


def stored_form(traps: TrapRules | None) -> Callable[[str], str]:
    """How a URL given in any form becomes the key a frontier with ``traps`` stores it by: its
    normal form (:func:`normalize_url`), without the parameters the trap rules strip.  Every URL a
    caller gives goes through it -- those added, their parents and lastmods, and those looked up,
    given back, completed or failed -- so that each finds the row that adding it made.  The key
    raises TypeError or ValueError for a URL the frontier does not take."""
    clean = traps.cleaner.clean if traps is not None and traps.cleaner else None
    if clean is None:
        return normalize_url
    return lambda url: clean(normalize_url(url))


def prepare_additions(
    entries: Iterable[tuple[str, int, str | None, int]], lastmods: Mapping[str, str] | None, recent: RecentURLs,
    traps: TrapRules | None = None, refused: RefusedURLs | None = None,
) -> Additions:
    """``add_many()``'s arguments as the storage takes them: URLs that are not http(s) or are
    malformed left out, and those that ``recent`` knows change nothing (a known URL at no smaller
    depth).  With ``traps``, each URL is stored without the parameters they strip, and one they
    refuse is left out and counted (a seed -- depth 0, no parent -- is never refused); ``refused``
    remembers the refused ones, so that a link found again is neither checked nor counted twice.
    Raises TypeError or ValueError for a depth or priority that is not an int in its range
    (``base.check_depth``, ``base.check_priority``), before anything is stored."""
    parents: dict[str | None, str | None] = {None: None}
    rows: dict[str, list[Any]] = {}
    hosts: dict[str, int] = {}
    checked: tuple[object, object] = (None, None)
    causes: Counter[str] = Counter()
    key_of = stored_form(traps)
    check = traps.refusal if traps is not None and (traps.max_url_length or traps.max_path_repeats) else None
    memory = refused if refused is not None and traps else None
    for url, depth, parent, priority in entries:
        try:
            key = key_of(url)
        except ValueError:
            continue
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
            check_depth(depth)
            check_priority(priority)
            checked = (depth, priority)
        if recent.changes_nothing(key, depth):
            continue
        if parent not in parents:
            try:
                parents[parent] = key_of(parent)  # type: ignore[arg-type]
            except (TypeError, ValueError):  # kept as given: free text
                parents[parent] = storable_text(parent) if isinstance(parent, str) else parent
        row = rows.get(key)
        if row is None:
            host = host_key(key)
            rows[key] = [depth, priority, parents[parent], host]
            if hosts.get(host, priority - 1) < priority:
                hosts[host] = priority
        elif depth < row[0]:
            row[0], row[2] = depth, parents[parent]
    dated = normal_lastmods(lastmods, key_of) if lastmods else None
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



def check_traps(traps: TrapRules | None) -> TrapRules | None:
    """The trap rules ``add_many()`` applies: None for None or rules that limit nothing."""
    if traps is not None and not isinstance(traps, TrapRules):
        raise TypeError(f"traps must be a TrapRules or None, not {traps!r}")
    return traps if traps else None


class FrontierService:
    """A frontier: what the crawler asks (``base.FrontierBackend``, every method of it here), over
    the ``store`` it holds (``store.Store``), which keeps the URLs.

    Each method is a Python call or two above one operation of the store, whatever the number of
    URLs: what runs per URL (the preparation of ``add_many()``) is a loop that every store would
    run alike, and the store's batch statements do the rest.

    Args:
        store: the storage, opened; the frontier closes it.
        traps: the trap rules :meth:`add_many` applies to what it is given (``traps.py``); None:
            none.  The links refused are counted in :attr:`not_followed` and stored by cause.
    """

    def __init__(self, store: Store, *, traps: TrapRules | None = None) -> None:
        self.traps = check_traps(traps)
        self.store = store
        self._key = stored_form(self.traps)
        # The URLs claims handed out lately, stored forms all: an outcome's URL, given as claimed,
        # is not normalised again (which a crawl's stream of links has pushed out of its cache).
        self._claimed = RecentKeys()
        self._followed_not: Counter[str] = Counter()  # the refusals of not_followed the store committed
        # Those of calls in the open batch() block, which a call refused in it undoes with the
        # refusals it stored: counted once the block ends, forgotten when it is rolled back.
        self._in_block: Counter[str] = Counter()
        self._blocks = 0  # open batch() blocks (add_many's own among them)
        self._refused_urls = RefusedURLs()
        self._recent = RecentURLs()  # known links skip the store (recent.py)
        self._rollbacks = store.rollbacks  # what the memories above were true for
        self._woke_at = store.clock()  # the start of the due period (modified_times): the last wake(), or the opening
        leases, robots = isinstance(store, HostLeases), isinstance(store, RobotsStore)
        self._leases: HostLeases = store if leases else WholeFile()  # type: ignore[assignment]
        self._robots: RobotsStore = store if robots else NoRobotsStore()  # type: ignore[assignment]
        #: The capabilities the store lacks ("host_leases", "robots_store"): the frontier answers for it.
        self.lacks = frozenset(name for name, has in (("host_leases", leases), ("robots_store", robots)) if not has)

    @property
    def not_followed(self) -> Counter[str]:
        """The links :meth:`add_many` refused since this frontier was opened, by cause (traps.CAUSES),
        as the store keeps them: those of a call the store rolled back are not counted (found
        again, they are refused again)."""
        self._notice_rollbacks()
        return self._followed_not + self._in_block

    # -- adding ------------------------------------------------------------

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
        check_depth(depth)
        check_priority(priority)
        return self.add_many((url, depth, parent, priority) for url in urls)

    def add_many(
        self, entries: Iterable[tuple[str, int, str | None, int]], lastmods: Mapping[str, str] | None = None,
        wake_modified: bool = False,
    ) -> int:
        """Add ``(url, depth, parent, priority)`` entries, like :meth:`add`, in one transaction.

        ``lastmods`` gives some of these URLs the ``<lastmod>`` a sitemap listed them with, as
        written there: stored with each, new or known (replacing what an earlier listing said),
        and handed back with its claims (:attr:`FrontierURL.lastmod`).

        ``wake_modified`` (a crawl with a revisit policy): a done or error URL of ``lastmods`` whose
        lastmod is a W3C datetime later than its last fetch (and not in the future), fetched before
        the due period began (the last :meth:`wake`, or the opening), goes back to 'waiting', due
        now, its attempts from 0, as :meth:`wake` moves one due again (:func:`modified_times` and
        :data:`MODIFIED_SINCE_FETCH` have the rule).

        Returns:
            How many URLs were new.
        """
        store = self.store
        if store.closed:  # asked here: a batch of known links never reaches the store
            raise FrontierError(f"the frontier {store.describe()}", FrontierErrorKind.CLOSED)
        self._notice_rollbacks()
        traps = self.traps
        additions = prepare_additions(entries, lastmods, self._recent, traps, self._refused_urls)
        if traps is not None and traps.max_pages_per_host is not None and additions.rows:
            with self._block():  # the counts read and the rows added, one unit
                additions = fit_host_budget(additions, traps.max_pages_per_host, store.admitted, store.known,
                                            self._refused_urls)
                return self._insert(additions, wake_modified)
        return self._insert(additions, wake_modified)

    def _notice_rollbacks(self) -> None:
        if self.store.rollbacks != self._rollbacks:
            # Undone: what was added lately may be gone, a refusal for a host's budget went by
            # counts that were undone, and the refusals the block stored are gone with it.
            self._recent.clear()
            self._refused_urls.clear()
            self._in_block.clear()
            self._rollbacks = self.store.rollbacks

    def _insert(self, additions: Additions, wake_modified: bool) -> int:
        if not additions:
            return 0
        modified = (modified_times(additions.lastmods, self.store.clock(), self._woke_at)
                    if wake_modified and additions.lastmods else None)
        added = self.store.insert(additions, modified)
        # Outside a block the store committed them before it returned.
        (self._in_block if self._blocks else self._followed_not).update(additions.refused)
        recent = self._recent
        for key, row in additions.rows.items():
            recent.added(key, row[0])
        return added

    # -- claiming and outcomes -------------------------------------------------

    def claim(
        self, limit: int, max_depth: int | None = None, host_room: Callable[[str], int] | None = None
    ) -> list[FrontierURL]:
        """Hand out up to ``limit`` waiting URLs that are due, spread over hosts: the hosts take
        turns (round-robin), highest priority first; within a host the URLs come highest priority
        first, then the lowest depth (breadth first), then in the order they were discovered.

        ``host_room(host)`` says how many URLs of ``host`` (a :func:`~niofetcher.urls.host_key`)
        the caller can take now: 0 skips the host this time.  Without it every host can take any
        number.  They move to 'processing' and their attempts go up by one, in one transaction:
        no URL is handed out twice, whichever thread asks.

        Raises:
            TypeError, ValueError: for a ``limit`` that is no int from 0 to ``base.MOST_INT``, or a
                ``max_depth`` that is no int >= 0 (one of ``MOST_INT`` or more limits nothing).
        """
        check_int("limit", limit, 0, MOST_INT)
        if max_depth is not None and check_int("max_depth", max_depth, 0) >= MOST_INT:
            max_depth = None  # deeper than any URL: no limit
        if limit == 0:
            return []
        claimed = self.store.take(limit, max_depth, host_room)
        for item in claimed:
            self._claimed.add(item.url)
        return claimed

    def complete(self, url: str, status: int | None) -> None:
        """Record that a claimed URL was fetched: processing → done (:meth:`complete_many` of one).

        Raises:
            ValueError: when ``url`` is not in 'processing'.
        """
        self.store.finish([(self._given(url), status)], None, None)

    def complete_many(
        self, outcomes: Iterable[tuple[str, int | None]], checkpoint: Mapping[str, int] | None = None,
        visits: Mapping[str, Visit] | None = None,
    ) -> None:
        """Claimed URLs (``(url, status)`` pairs, a URL in any form) to 'done', all or none.

        ``checkpoint`` (names and integers >= 0, such as ``{"out": 12345, "warc": 67890}``, the
        lengths of the output files holding these pages) is stored in the same transaction as
        these outcomes, also when there are none: whichever commit makes the outcomes durable
        makes it durable too, and never one without the other.  Entries replace those of the same
        name; :meth:`checkpoint` reads them.

        ``visits`` (a crawl with a revisit policy), by the URLs of ``outcomes`` as given: what each
        visit leaves on its row for the next (:class:`~niofetcher.crawl.frontier.Visit`), in the
        same transaction; ``next_due`` is ``revisit_in`` from now.

        Raises:
            ValueError: for the first URL that is not in 'processing'; then nothing of this call is
                recorded, neither the outcomes nor the checkpoint.
            TypeError, ValueError: for a checkpoint name that is not a str or a value that is
                not an int >= 0, or a visit's time that is no number of seconds >= 0, before
                anything is recorded.
        """
        entries = None if checkpoint is None else check_checkpoint(checkpoint)
        given = self._given
        checked = {given(url): check_visit(visit) for url, visit in visits.items()} if visits else None
        rows = [(given(url), status) for url, status in outcomes]
        if rows or entries is not None:
            self.store.finish(rows, entries, checked)

    def fail(self, url: str, error: str, status: int | None = None, retry_in: float | None = None,
             revisit_in: float | None = None) -> str:
        """Record a failed attempt of a claimed URL: it waits again, or it ends 'error'.

        With ``retry_in`` (seconds >= 0, which the crawl's schedule gave:
        :meth:`~niofetcher.crawl.schedule.RetrySchedule.retry_in`), the URL waits again and is
        due that long from now by the frontier's clock; with None it becomes an 'error'.
        ``status`` and ``error`` are recorded either way (``error`` as any store can keep it: a lone
        surrogate or a NUL escaped, :func:`~niofetcher.crawl.frontier.base.storable_text`).  An
        'error' given ``revisit_in`` (a revisit policy) is due again that long from now (:meth:`wake`).

        Returns:
            The URL's new state, 'waiting' or 'error' ('refused' on a store shared by workers, when
            the URL's host changed hands since its claim: nothing is recorded).

        Raises:
            ValueError: when ``url`` is not in 'processing'.
            TypeError, ValueError: for a ``retry_in`` that is no number of seconds >= 0.
        """
        wait = None if retry_in is None else check_time("retry_in", retry_in)
        again = None if revisit_in is None else check_time("revisit_in", revisit_in)
        return self.store.fail(self._given(url), storable_text(error), status, wait, again)

    def release(self, urls: Iterable[str]) -> None:
        """Put claimed URLs back to 'waiting' without counting the attempt: they were not fetched (a
        graceful stop).  URLs that are not 'processing' are left alone."""
        if isinstance(urls, str):
            raise TypeError("release() takes an iterable of URLs; wrap a single URL in a list")
        keys = set()
        for url in urls:
            with contextlib.suppress(TypeError, ValueError):
                keys.add(self._key(url))
        if keys:
            self.store.give_back(list(keys))

    def _given(self, url: str) -> str:
        """The stored form of a URL an outcome is recorded for; one the frontier would not take as
        given, for the store to say why it cannot (``base.processing_key``)."""
        if url in self._claimed:
            return url
        try:
            return self._key(url)
        except (TypeError, ValueError):
            return url

    def wake(self) -> int:
        """Done and error URLs whose ``next_due`` has come (by the frontier's clock) back to 'waiting',
        due since then, their attempts from 0; how many.  A due period begins (:func:`modified_times`)."""
        now = self._woke_at = self.store.clock()
        return self.store.wake(now)

    def revisits(self) -> Revisits:
        """How many done and error URLs are due again now, and when the next one falls due."""
        return self.store.revisits()

    # -- batches -----------------------------------------------------------

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Make the calls in the block durable together: nothing commits until it ends.

        A crawler records one batch of pages with several calls -- fail() for some,
        release() for others, complete_many() with the outputs' checkpoint last -- and a
        crash must keep all of them or none.  A block that raises commits nothing on its way
        out (the next commit will, or a crash undoes it)."""
        return self._block()

    @contextlib.contextmanager
    def _block(self) -> Iterator[None]:
        self._blocks += 1
        try:
            with self.store.transaction():
                yield
        finally:
            self._blocks -= 1
            if not self._blocks:
                # Its refusals count, unless a call in it undid the block (and them with it).
                self._notice_rollbacks()
                self._followed_not.update(self._in_block)
                self._in_block.clear()

    def checkpoint(self) -> dict[str, int]:
        """The checkpoint entries stored by :meth:`complete_many`, committed (empty for a new frontier)."""
        return self.store.checkpoint()

    # -- reading -------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """URLs per state; all four states are always there."""
        return self.store.counts()

    def next_due(self) -> float | None:
        """The earliest time (unix) a waiting URL is due, None when none waits.  A time not later
        than now means :meth:`claim` has work now; a later one is how long a crawler with nothing
        in flight may sleep."""
        return self.store.next_due()

    def min_due_depth(self) -> int | None:
        """The smallest depth among waiting URLs that are due now, None when there is none."""
        return self.store.min_due_depth()

    def failures(self, since: float, limit: int) -> list[tuple[str, str]]:
        """The first ``limit`` URLs that ended in 'error' at or after ``since`` (unix time), oldest
        first, each with its error.  TypeError or ValueError for a ``since`` that is no time
        >= 0, a ``limit`` that is no int from 0 to ``base.MOST_INT``."""
        return self.store.failures(check_time("since", since), check_int("limit", limit, 0, MOST_INT))

    def lookup(self, url: str) -> StoredURL | None:
        """``url`` (in any form that normalises to a known one) as the frontier keeps it, whichever
        worker wrote it last; None if unknown or invalid."""
        try:
            key = self._key(url)
        except (TypeError, ValueError):
            return None
        return self.store.lookup(key)

    def state(self, url: str) -> str | None:
        """The state of a URL (in any form that normalises to a known one), None if unknown or invalid."""
        stored = self.lookup(url)
        return stored.state if stored is not None else None

    # -- what a store keeps of a host ----------------------------------------

    def fingerprints(self, host: str) -> list[tuple[str, bytes, int]]:
        """Duplicate detection's fingerprints of ``host``'s done pages that duplicate nothing:
        (url, digest, simhash), as :meth:`store_fingerprints` kept them."""
        return self.store.fingerprints(storable_text(host))

    def store_fingerprints(self, pages: Iterable[tuple[str, bytes, int, str | None]]) -> None:
        """For claimed URLs about to be completed, (url, digest, simhash, duplicate_of): a
        duplicate's ``duplicate_of`` on its row, the others' fingerprints for :meth:`fingerprints`;
        in the transaction of their outcomes."""
        self.store.store_fingerprints([(storable_text(url), digest, simhash, None if of is None else storable_text(of))
                                       for url, digest, simhash, of in pages])

    def robots(self, host: str) -> StoredRobots | None:
        """``host``'s robots.txt as the crawl fetched it in the last day, None when there is none
        to reuse (always, from a store without a robots.txt store)."""
        return self._robots.robots(storable_text(host))

    def store_robots(self, host: str, status: int, body: bytes) -> None:
        """Keep what ``host``'s robots.txt said (2xx or 4xx), for :meth:`robots`."""
        self._robots.store_robots(storable_text(host), status, body)

    # -- host leases (capabilities.HostLeases) -------------------------------

    def holds(self, host: str) -> bool:
        """Whether requests to ``host`` may start now (always, from a store one process holds)."""
        return self._leases.holds(host)

    def lost_hosts(self) -> list[str]:
        """The hosts this worker lost since the last call (none, from a store one process holds)."""
        return self._leases.lost_hosts()

    def recordable(self, urls: Iterable[str]) -> list[str]:
        """Of these claimed URLs, in order, those whose outcomes will count if recorded in the
        current :meth:`batch` (all of them, from a store one process holds)."""
        return self._leases.recordable(urls)

    def start_deadlines(self) -> dict[str, float | None]:
        """Per host, the ``time.monotonic()`` from which none of its requests may start, what
        changed since the last call (nothing, from a store one process holds)."""
        return self._leases.start_deadlines()

    def note_addresses(self, peers: Mapping[str, str]) -> None:
        """Where answers came from (``host_key()`` -> ``FetchResult.peer``), for a store shared by
        workers whose hosts of one address are one worker's (an optional method of a store, the
        PostgreSQL one's); nothing for a store without it."""
        note: Callable[[Mapping[str, str]], None] | None = getattr(self.store, "note_addresses", None)
        if note is not None:
            note(peers)

    # -- closing -------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the frontier is closed: no call but ``close()`` may follow."""
        return self.store.closed

    def close(self) -> None:
        """Commit what is pending and let go of the store.  Closing twice is fine."""
        self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        lacking = f" without {', '.join(sorted(self.lacks))}" if self.lacks else ""
        return f"<{type(self).__name__} {self.store.describe()}{lacking}>"

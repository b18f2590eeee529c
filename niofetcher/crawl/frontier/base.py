"""What every frontier backend shares: the states, the claimed URL, the errors, the names of crawls, and :class:`FrontierBackend`, the protocol the crawler's coordinator knows a frontier by.

Each URL is in exactly one state::

    add() ──► waiting ──claim()──► processing ──complete()──► done
                 ▲                    │   │
                 │   fail(), retry    │   └──fail(), no retry or
                 ├────────────────────┘       attempts used up──► error
                 │   release(), or reopening after a crash
                 └────────────────────────────────────────────── processing

*Depth.*  A URL's depth is its shortest distance from a seed: adding a known
URL at a smaller depth than the recorded one lowers it (and records the
parent that gave it), whatever the URL's state.  ``claim()`` hands out the
lower depths of a host first within a priority, so a crawl goes breadth first.

*Hosts.*  ``claim()`` spreads over hosts: the hosts with waiting URLs take
turns, highest priority first, and the caller says how many URLs each host
can take now (``host_room``), so that a claim never hands out URLs the
fetcher could not start -- a host at its connection limit, inside its
politeness delay -- while another host's URLs could be.

*Revisits.*  A crawl with a revisit policy (``crawl/schedule.py``) tells ``complete_many()`` each
page's :class:`Visit`: its validators, its digest, whether it changed (and when the capture a
changed page made came in), and how long until it is due again.  A done URL (or an 'error' one that ``fail()`` gave a ``revisit_in``) keeps them on its row,
``next_due`` among them, and :meth:`FrontierBackend.wake` moves those whose ``next_due`` has come
back to 'waiting' (through an index of the due rows alone: the other done rows are never read);
their claims carry the validators for a conditional GET and what a rate of change is estimated
from: the changes, the sums of the seconds that led to the changed and the unchanged visits (as
told), and the seconds from the last fetch to the claim.  A sitemap can bring one sooner: told so
(``add_many(..., wake_modified=True)``), a frontier moves a done or error URL whose sitemap
``<lastmod>`` is later than its last fetch back to 'waiting' at once, in the same transaction, with
a statement or two for the whole batch, never one per URL -- unless that fetch was in the current
due period (since the last ``wake()``): nothing is fetched twice in one for a date (the rule:
``service.modified_times`` and ``MODIFIED_SINCE_FETCH``).  Without a policy none of
this is written or asked, and done stays done.

*Crashes.*  Opening a frontier moves leftover 'processing' rows back to
'waiting'.  Their attempt stays counted: the request may well have reached
the server, and a URL that kills the crawler every time it is fetched runs
out of attempts instead of killing every resumed run.  ``release()`` is the
clean way out (a graceful stop): it gives the attempt back.

The SQLite backend (:class:`~niofetcher.crawl.frontier.sqlite.Frontier`)
documents how it keeps these promises; a new backend keeps the same ones.
"""

from __future__ import annotations

import contextlib
import enum
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from ...urls import host_key, normalize_url

__all__ = [
    "MOST_BIGINT",
    "MOST_INT",
    "MOVED_OPTIONS",
    "ROBOTS_SECONDS",
    "STATES",
    "CrawlStatus",
    "FrontierBackend",
    "FrontierError",
    "FrontierErrorKind",
    "FrontierURL",
    "Revisits",
    "StoredRobots",
    "StoredURL",
    "Visit",
    "WorkerStatus",
    "check_checkpoint",
    "check_crawl_name",
    "check_depth",
    "check_int",
    "check_priority",
    "check_storable",
    "check_time",
    "check_visit",
    "normal_lastmods",
    "processing_key",
    "refuse_moved_options",
    "signed64",
    "storable_text",
    "unsigned64",
]

#: How long a stored robots.txt answer is used instead of fetching it again (RFC 9309: a crawler
#: should not use a cached robots.txt for more than a day).
ROBOTS_SECONDS = 24 * 3600.0

#: Every state a URL can be in, in the order of its life.
STATES = ("waiting", "processing", "done", "error")

#: The largest depth, priority and count a frontier takes: what every store keeps (PostgreSQL's
#: INTEGER), so that a crawl keeps its URLs when moved; a priority is at least ``-MOST_INT - 1``.
MOST_INT = 2**31 - 1

#: The largest checkpoint value (a 64-bit signed integer, as SQLite and PostgreSQL's BIGINT keep it).
MOST_BIGINT = 2**63 - 1

#: The options a frontier took before the retry policy left it for the crawl's schedule (issue 26).
MOVED_OPTIONS = ("max_attempts", "retry_delay", "max_retry_delay")


class StoredRobots(NamedTuple):
    """A host's robots.txt answer as a frontier keeps it (a 2xx or a 4xx)."""

    status: int
    body: bytes
    age: float  # seconds since it was fetched, by the frontier's clock


@dataclass(frozen=True, slots=True)
class StoredURL:
    """One URL as a frontier keeps it, whatever its state: what :meth:`FrontierBackend.lookup` reads.

    The times are unix seconds by the frontier's clock.  ``status`` and ``error`` are those of the
    last attempt (``error`` is None once the URL is done); ``next_attempt_at`` is when a waiting URL
    is due, and None once it is done or an error.
    """

    url: str  # the stored form (normalize_url())
    state: str  # one of STATES
    attempts: int  # claims so far; release() gives one back
    depth: int
    priority: int
    parent: str | None
    status: int | None
    error: str | None
    discovered_at: float
    fetched_at: float | None
    next_attempt_at: float | None
    lastmod: str | None
    # What a revisit needs (see "Revisits" above): the validators and the digest (sha256 of the
    # decoded body, hex) of the last visit, visits so far, those that found the page changed, and
    # when it is due again (None: never -- no revisit policy).
    etag: str | None = None
    last_modified: str | None = None
    digest: str | None = None
    visits: int = 0
    changes: int = 0
    next_due: float | None = None
    # The seconds that led to the visits after the first: to those that found it changed, and to
    # the others (what a rate of change is estimated from).
    changed_time: float = 0.0
    unchanged_time: float = 0.0


@dataclass(frozen=True, slots=True)
class FrontierURL:
    """A claimed URL: what the crawler needs to fetch it and to add its links."""

    url: str
    depth: int
    priority: int
    attempts: int  # including this one
    parent: str | None
    lastmod: str | None = None  # the <lastmod> a sitemap listed it with, as written there
    # A revisit's (see "Revisits" above): what the last visit left, for a conditional GET and the
    # change check, and the interval that led to this visit (next_due - fetched_at); None, None,
    # None, 0, None for a URL never visited under a revisit policy.
    etag: str | None = None
    last_modified: str | None = None
    digest: str | None = None
    visits: int = 0
    interval: float | None = None
    # When the response of the last visit that found the page changed came in (unix seconds): the
    # capture an unchanged visit repeats, which a WARC revisit record refers to.  None before any.
    captured_at: float | None = None
    # What its rate of change is estimated from: the visits after the first that found it changed,
    # the seconds that led to those and to the others, and the seconds from its last fetch to this
    # claim (None when it was never fetched), which lead to this visit.
    changes: int = 0
    changed_time: float = 0.0
    unchanged_time: float = 0.0
    since_fetch: float | None = None

    @property
    def host(self) -> str:
        """The host whose queue it came from (:func:`~niofetcher.urls.host_key`), as ``claim()``'s
        ``host_room`` is asked about it."""
        return host_key(self.url)


class Visit(NamedTuple):
    """What a visit of a claimed URL leaves for the next one (``complete_many(visits=...)``).

    ``etag``, ``last_modified`` and ``digest`` replace the stored ones (the crawler keeps the
    stored ones of an unchanged page); ``changed`` counts a change when the URL was visited before;
    the URL is due again ``revisit_in`` seconds from now by the frontier's clock.  ``captured_at``,
    when the response of a changed page came in, replaces the stored one; None (an unchanged page)
    keeps it, so that a run of unchanged visits all repeat the same capture.  ``changed_time`` and
    ``unchanged_time``, the sums of seconds that led to the visits that found the page changed and
    to the others (:class:`~niofetcher.crawl.schedule.ChangeHistory`), replace the stored ones;
    None keeps them.
    """

    revisit_in: float
    changed: bool
    etag: str | None
    last_modified: str | None
    digest: str | None
    captured_at: float | None = None
    changed_time: float | None = None
    unchanged_time: float | None = None


class Revisits(NamedTuple):
    """The done and error URLs of a crawl that are due again: how many now, and when the next one
    not due yet falls due (unix time; None when none will)."""

    due: int
    next_due: float | None


_NO_REVISITS = Revisits(0, None)


class FrontierErrorKind(str, enum.Enum):
    """What went wrong with a frontier, whatever stores it: each backend turns its driver's errors
    into one of these where it calls the driver, so that nothing above it names a driver."""

    UNAVAILABLE = "unavailable"  # not opened: no such directory, no permission, no server, no driver
    NOT_A_FRONTIER = "not_a_frontier"  # opened, but it holds something else: not a database, damaged, a newer schema
    LOCKED = "locked"  # another crawl owns it
    STORAGE = "storage"  # a statement on an open frontier failed: a full disk, an I/O error, a lost connection
    CLOSED = "closed"  # called after close()


class FrontierError(ValueError):
    """Raised when a frontier cannot be used (corrupt, not a frontier, a newer schema) or a
    statement on it fails (a full disk, an I/O error): one line, and its :attr:`kind`.

    Args:
        message: the line a user reads; it names the frontier, never a password.
        kind: what went wrong, for a caller that acts on it.
    """

    default_kind = FrontierErrorKind.STORAGE

    def __init__(self, message: str, kind: FrontierErrorKind | None = None) -> None:
        super().__init__(message)
        self.kind = self.default_kind if kind is None else kind


def refuse_moved_options(kind: str, options: Mapping[str, object]) -> None:
    """Raise TypeError, in one line, for the keyword ``options`` a ``kind`` frontier was given and does
    not take: saying where the retry policy went for those it took before (:data:`MOVED_OPTIONS`)."""
    if not options:
        return
    moved = [name for name in options if name in MOVED_OPTIONS]
    if moved:
        raise TypeError(
            f"{kind}() takes no {', '.join(moved)}: the retry policy left the frontier for the crawl's "
            "schedule (niofetcher.crawl.schedule.RetrySchedule; CrawlConfig keeps max_attempts and "
            "retry_delay), and fail(url, error, status, retry_in) is told the wait")
    raise TypeError(f"{kind}() got an unexpected keyword argument {next(iter(options))!r}")


def signed64(value: int) -> int:
    """A 64-bit unsigned value (a simhash) as the signed integer SQL keeps: two's complement."""
    return value - (1 << 64) if value >> 63 else value


def unsigned64(value: int) -> int:
    """What :func:`signed64` stored, back as the unsigned value."""
    return value & 0xFFFF_FFFF_FFFF_FFFF


def check_int(name: str, value: object, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value``, checked to be an int (not a bool), at least ``minimum`` and at most ``maximum``
    when given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, not {value!r}")
    return value


def check_depth(depth: object) -> int:
    """A URL's depth, checked: an int from 0 to :data:`MOST_INT` (a deeper one would be stored and
    never claimed, or not stored at all)."""
    return check_int("depth", depth, 0, MOST_INT)


def check_priority(priority: object) -> int:
    """A URL's priority, checked: an int from ``-MOST_INT - 1`` to :data:`MOST_INT`."""
    return check_int("priority", priority, -MOST_INT - 1, MOST_INT)


def storable_text(text: str) -> str:
    """``text`` as every store can keep it: a lone surrogate (text decoded with ``surrogateescape``:
    a page's bytes, a file name) as its ``\\udcXX`` escape, which UTF-8 cannot encode, and NUL as
    ``\\x00``, which PostgreSQL's text refuses; any other text as it is.  A free text the crawl hands
    over (an error's message, an ``on_page`` exception's among them) is stored so, rather than fail
    the call that records it -- and with it the crawl, at every resume."""
    if not isinstance(text, str):
        raise TypeError(f"text to store must be a str, not {text!r}")
    if text.isascii() and "\x00" not in text:  # nearly every text: nothing to escape
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def check_storable(name: str, text: object) -> str:
    """``text``, checked to be a str that :func:`storable_text` keeps as it is: one a caller looks
    things up by (a lastmod, a checkpoint name) is refused rather than changed."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, not {text!r}")
    if storable_text(text) != text:
        raise ValueError(f"{name} must be text a frontier can store (no NUL, no lone surrogate), not {text!r}")
    return text


def check_time(name: str, value: object) -> float:
    """``value`` as a float, checked to be a finite number of seconds >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, not {value!r}")
    return float(value)


def check_visit(visit: Visit) -> Visit:
    """``visit`` with its times checked by :func:`check_time` (each optional one when there is one)
    and its texts as a store keeps them (:func:`storable_text`)."""

    def optional(name: str, value: float | None) -> float | None:
        return None if value is None else check_time(name, value)

    def text(value: str | None) -> str | None:  # a response header's: kept, sent back on the next visit
        return None if value is None else storable_text(value)

    return visit._replace(revisit_in=check_time("revisit_in", visit.revisit_in),
                          etag=text(visit.etag), last_modified=text(visit.last_modified), digest=text(visit.digest),
                          captured_at=optional("captured_at", visit.captured_at),
                          changed_time=optional("changed_time", visit.changed_time),
                          unchanged_time=optional("unchanged_time", visit.unchanged_time))


def check_checkpoint(checkpoint: Mapping[str, int]) -> dict[str, int]:
    """``checkpoint`` as a dict, checked: str names a store keeps as they are, int values from 0 to
    :data:`MOST_BIGINT`."""
    entries = {}
    for name, value in checkpoint.items():
        entries[check_storable("a checkpoint name", name)] = check_int(f"checkpoint[{name!r}]", value, 0, MOST_BIGINT)
    return entries


# Any frontier shared by workers holds crawls by name, and a configuration checks one before anything
# is opened.  A crawl name becomes the name of a PostgreSQL schema: 1 to 63 ASCII letters, digits, "_" and "-"
# (63 bytes is PostgreSQL's longest identifier), quoted as an identifier wherever it reaches SQL (a
# "-", or a digit first, needs the quotes), and not one of PostgreSQL's own (pg_*, public,
# information_schema).  Folded to lower case, as PostgreSQL folds a name it is given unquoted:
# ``SET search_path TO MyCrawl`` in psql finds the crawl of ``--crawl MyCrawl``, a worker started
# with ``--crawl MyCrawl`` joins the one started with ``--crawl mycrawl`` instead of beginning a
# second crawl beside it, and a crawl made before "-" was allowed (lower case then) opens under the
# name it had.  Any shared backend takes the same names, so that a crawl keeps its name when moved.
_CRAWL_NAME = re.compile(r"[A-Za-z0-9_-]{1,63}")
_RESERVED = ("public", "information_schema")


def check_crawl_name(crawl: object) -> str:
    """``crawl`` as the name of its schema: checked, and in lower case (see above).

    Raises:
        TypeError: for anything but a str.
        ValueError: for a str that is no crawl name, in one line.
    """
    if not isinstance(crawl, str):
        raise TypeError(f"crawl must be a str, not {crawl!r}")
    name = crawl.lower()
    if not _CRAWL_NAME.fullmatch(crawl) or name.startswith("pg_") or name in _RESERVED:
        raise ValueError(
            f"crawl name {crawl!r} must be 1 to 63 letters, digits, '_' and '-' (the name of its schema, "
            "in lower case), and not pg_*, public or information_schema"
        )
    return name


def normal_lastmods(lastmods: Mapping[str, str], stored_form: Callable[[str], str] = normalize_url) -> dict[str, str]:
    """``lastmods`` (``{url: lastmod}``, an ``add_many()`` argument) by the stored form of each URL
    (``stored_form``: the service's, which the trap rules may clean),
    checked to be str that a store keeps as written (:func:`check_storable`: handed back with
    claims, it is not escaped); URLs the frontier would not take are left out, as ``add_many()``
    leaves them."""
    stored = {}
    for url, lastmod in lastmods.items():
        check_storable("a lastmod", lastmod)
        try:
            stored[stored_form(url)] = lastmod
        except (TypeError, ValueError):
            continue
    return stored


def processing_key(url: str, action: str, state_of: Callable[[str], str | None]) -> str:
    """The stored form of ``url`` given in any form when it is 'processing' (``state_of``: a stored
    URL's state, None when unknown); otherwise ValueError saying why ``action`` cannot be done."""
    try:
        key = normalize_url(url)
    except (TypeError, ValueError):
        problem = "it is not a valid http(s) URL"
    else:
        state = state_of(key)
        if state == "processing":
            return key
        problem = "it is not in the frontier" if state is None else f"it is {state!r}, not 'processing' (claimed)"
    raise ValueError(f"cannot {action} {url!r}: {problem}")


class FrontierBackend(Protocol):
    """What the crawler's coordinator asks of a frontier, and one read more (:meth:`lookup`, by
    which the contract suite checks the rest), keeping the promises above: every method is
    ``service.FrontierService``'s, over the store it holds (SQLite, PostgreSQL, one of a
    ``niofetcher.frontiers`` entry point: ``store.Store``); tests/test_frontier_backends.py is the
    bar a store passes (docs/extending.md).

    Not ``Frontier``: that name is the service over the SQLite store, which users construct by
    it.  The coordinator calls a frontier from one thread; the service says what each method
    does in detail.
    """

    @property
    def not_followed(self) -> Mapping[str, int]:
        """The links refused by the trap rules since this frontier was opened (this run), by cause."""

    def add(self, urls: Iterable[str], depth: int = 0, parent: str | None = None, priority: int = 0) -> int:
        """Add URLs found at one depth on one page (or seeds); how many were new."""

    def add_many(
        self, entries: Iterable[tuple[str, int, str | None, int]], lastmods: Mapping[str, str] | None = None,
        wake_modified: bool = False,
    ) -> int:
        """Add ``(url, depth, parent, priority)`` entries in one transaction, storing the sitemap
        ``<lastmod>`` of those in ``lastmods`` (``{url: lastmod}``, new or known); how many were new.
        With ``wake_modified`` (a revisit policy), the done and error URLs of ``lastmods`` dated
        after their last fetch, made before the last ``wake()``, go back to 'waiting', due now (see
        "Revisits" above)."""

    def claim(
        self, limit: int, max_depth: int | None = None, host_room: Callable[[str], int] | None = None
    ) -> list[FrontierURL]:
        """Up to ``limit`` due URLs, no deeper than ``max_depth``, moved to 'processing': hosts in
        turn, each no more than ``host_room(host)`` says it can take now."""

    def complete_many(
        self, outcomes: Iterable[tuple[str, int | None]], checkpoint: Mapping[str, int] | None = None,
        visits: Mapping[str, Visit] | None = None,
    ) -> None:
        """``(url, status)`` pairs to 'done', all or none, with ``checkpoint`` in the same transaction;
        ``visits`` (by the URLs of ``outcomes``, a crawl with a revisit policy) kept on their rows."""

    def fail(self, url: str, error: str, status: int | None = None, retry_in: float | None = None,
             revisit_in: float | None = None) -> str:
        """A failed attempt: the URL waits again, due ``retry_in`` seconds from now by the frontier's
        clock (the crawl's schedule says how long), or, with None, ends 'error' -- due again
        ``revisit_in`` seconds from now when given (a revisit policy); its new state."""

    def wake(self) -> int:
        """Done and error URLs whose ``next_due`` has come, by the frontier's clock, back to
        'waiting' (their attempts start again from 0); how many.  A crawl with a revisit policy
        calls it when a run starts: what falls due during the run waits for the next one."""

    def revisits(self) -> Revisits:
        """How many done and error URLs are due again now, and when the next one falls due."""

    def release(self, urls: Iterable[str]) -> None:
        """Claimed URLs back to 'waiting', the attempt not counted (they were not fetched)."""

    def recordable(self, urls: Iterable[str]) -> list[str]:
        """Of these claimed URLs, in order, those whose outcomes this worker will have accepted if it
        records them in the current :meth:`batch` (a frontier shared by workers refuses the others'
        outcomes: their hosts changed hands); what it says holds until the batch ends."""

    def checkpoint(self) -> dict[str, int]:
        """The checkpoint entries stored by :meth:`complete_many`, committed."""

    def holds(self, host: str) -> bool:
        """Whether requests to ``host`` (``host_key()``) may start now: a frontier shared by workers
        says no for a host this worker does not own, or whose lease it cannot count on."""

    def lost_hosts(self) -> list[str]:
        """Keep what ownership of hosts needs (renewals, when due) and say which hosts this worker
        lost since the last call: what of them is registered and not started must not start."""

    def start_deadlines(self) -> dict[str, float | None]:
        """For the fetcher's start gates (``NIOFetcher.set_host_deadlines``), what changed since
        the last call: per host (``host_key()``), the ``time.monotonic()`` from which none of its
        requests may start, None where no bound is needed any more; empty when nothing changed
        (always, for a frontier that one process holds)."""

    def robots(self, host: str) -> StoredRobots | None:
        """``host``'s robots.txt as the crawl fetched it in the last day (:data:`ROBOTS_SECONDS`),
        this worker or another, None when there is none to reuse."""

    def store_robots(self, host: str, status: int, body: bytes) -> None:
        """Keep what ``host``'s robots.txt said (2xx or 4xx), for :meth:`robots`."""

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """A block whose calls become durable together: nothing commits until it ends."""

    def counts(self) -> dict[str, int]:
        """URLs per state; all four states are always there."""

    def next_due(self) -> float | None:
        """The earliest time (unix) a waiting URL is due, None when none waits (a shared frontier:
        and nothing is in flight anywhere)."""

    def failures(self, since: float, limit: int) -> list[tuple[str, str]]:
        """The first ``limit`` URLs that ended in 'error' at or after ``since`` (unix time: a run's
        start), oldest first, each with its error (a shared frontier: any worker's)."""

    def min_due_depth(self) -> int | None:
        """The smallest depth among waiting URLs that are due now, None when there is none."""

    def lookup(self, url: str) -> StoredURL | None:
        """``url`` (in any form that normalises to a known one) as the frontier keeps it, None when
        it is unknown or no http(s) URL.  The crawler never asks; the contract suite
        (tests/test_frontier_backends.py) reads every promise above through it, committed first
        (outside a batch) like the other reads."""

    def fingerprints(self, host: str) -> list[tuple[str, bytes, int]]:
        """Duplicate detection's fingerprints of ``host``'s done pages that duplicate nothing:
        (url, digest, simhash), as :meth:`store_fingerprints` kept them."""

    def store_fingerprints(self, pages: Iterable[tuple[str, bytes, int, str | None]]) -> None:
        """For claimed URLs about to be completed, (url, digest, simhash, duplicate_of): a
        duplicate's ``duplicate_of`` on its row, the others' fingerprints for :meth:`fingerprints`;
        in the transaction of their outcomes."""

    def close(self) -> None:
        """Commit what is pending and let go of the frontier.  Closing twice is fine."""

    def __enter__(self) -> FrontierBackend:
        """The frontier itself."""

    def __exit__(self, *exc_info: object) -> None:
        """:meth:`close`."""


# What a status command reads of a crawl, on either backend (a SQLite crawl has no workers and no owners).
@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """A live worker of a crawl, as its last heartbeat says."""

    id: str
    host_name: str
    pid: int
    hosts_held: int
    pages_last_minute: int
    heartbeat_age: float  # seconds since its heartbeat


@dataclass(frozen=True, slots=True)
class CrawlStatus:
    """Where a crawl stands: its URLs per state, its live workers, its busiest hosts, its revisits."""

    counts: dict[str, int]
    workers: list[WorkerStatus]
    busiest: list[tuple[str, int, str | None]]  # (host, URLs waiting, owner) by URLs waiting
    revisits: Revisits = _NO_REVISITS  # done and error URLs due again now, and when the next is

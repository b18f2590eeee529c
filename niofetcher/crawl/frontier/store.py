"""What a frontier keeps its URLs in: :class:`Store`, the storage operations alone.

A frontier is a :class:`~niofetcher.crawl.frontier.service.FrontierService` holding one store.  The
service does what every store would otherwise do the same way -- it checks the arguments, prepares
``add_many()``'s batch (normalising, the trap rules, the recent-URL filter, folding duplicates and
parents, the per-host budget), turns a sitemap's dates into times, gives the answers of a capability
the store lacks, and is the context manager and the repr -- and asks the store for what only a store
can do: keep rows, hand them out, record what became of them, read them back.  A store is therefore
one class of the methods below, and passes tests/test_frontier_backends.py, the contract suite
(docs/extending.md; tests/memory_store.py is one in a module of its own, dicts and a heap).

Each method is one storage operation of a call of the service, in a transaction of the store's
own, atomic: it commits before it returns, or with the next commit when the store batches its
commits (SQLite's outcomes), and never before the end of an open :meth:`Store.transaction` block.
A method that fails leaves nothing of its own behind; one that fails for a reason of the storage
raises a :class:`~niofetcher.crawl.frontier.base.FrontierError` (a store turns its driver's errors
into those kinds where it calls the driver), and one that fails inside a transaction block undoes
the whole block, counting the undo in :attr:`Store.rollbacks`.

The two capabilities a store may lack are ``capabilities.py``'s (:class:`HostLeases`,
:class:`RobotsStore`): a store that has none of them gets their plain answers from the service.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from .base import FrontierURL, Revisits, StoredURL, Visit
from .capabilities import HostLeases, RobotsStore
from .service import Additions

__all__ = ["HostLeases", "RobotsStore", "Store"]


class Store(Protocol):
    """The storage operations of a frontier: what :class:`~niofetcher.crawl.frontier.service.FrontierService`
    asks of the store it holds.  URLs reach a store in stored form (``service.stored_form``: the normal
    form, less the parameters the trap rules strip), those of :meth:`finish`, its ``visits`` and
    :meth:`fail` too -- but for one the frontier would not take, which comes as the caller gave it,
    for the store to say why it cannot record it (``base.processing_key``); arguments are checked."""

    #: How many times the store undid work it had not committed (a failed call, a block that
    #: failed): what the service remembers of stored URLs is forgotten when it changes.
    rollbacks: int

    @property
    def clock(self) -> Callable[[], float]:
        """Unix time, the store's: what it records and what is due go by it."""

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called; every other method then raises FrontierError, ``closed``."""

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """A block whose calls become durable together: nothing commits until it ends, and a
        call that fails in it undoes the whole block.  Blocks nest."""

    def insert(self, additions: Additions, modified: Mapping[str, float] | None) -> int:
        """Store ``additions`` (new URLs waiting, due now; a known URL's depth and parent lowered
        when smaller; the lastmods, new or known; the refusals counted by cause) and move the done
        and error URLs of ``modified`` (``{stored URL: time}``, ``service.modified_times``) that
        were fetched before their time back to 'waiting', due now, attempts from 0 (the rule:
        ``service.MODIFIED_SINCE_FETCH``); how many URLs were new."""

    def admitted(self, hosts: list[str]) -> Mapping[str, int]:
        """How many URLs each of ``hosts`` has stored, those a store shares counted across
        workers; a host with none may be left out (``service.fit_host_budget``)."""

    def known(self, urls: list[str]) -> set[str]:
        """Those of ``urls`` (stored forms) that are stored, in any state."""

    def take(self, limit: int, max_depth: int | None,
             host_room: Callable[[str], int] | None) -> list[FrontierURL]:
        """Claim up to ``limit`` (> 0) due waiting URLs, no deeper than ``max_depth``, moved to
        'processing' with an attempt more: hosts in turn, each no more than ``host_room(host)``
        (``base.py`` says the order).  One operation, not a read and a mark: which URL a claim can
        take depends on the rows it marked before it (a host's share, the next host's turn)."""

    def finish(self, outcomes: list[tuple[str, int | None]], checkpoint: dict[str, int] | None,
               visits: Mapping[str, Visit] | None) -> None:
        """Claimed URLs to 'done' with their status, all or none -- ValueError for the first that is
        not 'processing', and nothing recorded -- with ``checkpoint`` (checked) stored in the same
        transaction, also when there are no outcomes, and each ``visits`` entry (by URL, checked)
        kept on its row, ``next_due`` its ``revisit_in`` from now."""

    def fail(self, url: str, error: str, status: int | None, retry_in: float | None,
             revisit_in: float | None) -> str:
        """A claimed URL's failed attempt: 'waiting', due ``retry_in`` from now, or with None
        'error' (due again ``revisit_in`` from now when given); its new state ('refused' from a
        store shared by workers whose host changed hands).  ValueError when it is not 'processing'."""

    def give_back(self, urls: list[str]) -> None:
        """Claimed URLs back to 'waiting', the attempt given back; the others are left alone."""

    def wake(self, now: float) -> int:
        """Done and error URLs whose ``next_due`` is ``now`` or earlier back to 'waiting', due now,
        attempts from 0; how many."""

    def revisits(self) -> Revisits:
        """How many done and error URLs are due again now, and when the next one falls due."""

    def next_due(self) -> float | None:
        """The earliest time a waiting URL is due, None when none waits."""

    def min_due_depth(self) -> int | None:
        """The smallest depth among waiting URLs due now, None when there is none."""

    def counts(self) -> dict[str, int]:
        """URLs per state; all four states are always there."""

    def failures(self, since: float, limit: int) -> list[tuple[str, str]]:
        """The first ``limit`` URLs that ended 'error' at or after ``since``, oldest first, with why."""

    def checkpoint(self) -> dict[str, int]:
        """The checkpoint entries :meth:`finish` stored, committed."""

    def lookup(self, url: str) -> StoredURL | None:
        """The stored URL ``url`` as the store keeps it, committed first; None when unknown."""

    def fingerprints(self, host: str) -> list[tuple[str, bytes, int]]:
        """Duplicate detection's fingerprints of ``host``'s done pages that duplicate nothing."""

    def store_fingerprints(self, pages: Iterable[tuple[str, bytes, int, str | None]]) -> None:
        """Keep (url, digest, simhash, duplicate_of) of claimed URLs, with their coming outcomes."""

    def close(self) -> None:
        """Commit what is pending and let go of the storage.  Closing twice is fine."""

    def describe(self) -> str:
        """Where the store is and what it holds, for the frontier's repr ('closed' once it is)."""

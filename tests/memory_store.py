"""A frontier store in memory, written against ``niofetcher.crawl.frontier.store.Store`` alone: what a
newcomer writes to add a store (docs/extending.md), and the proof that one module of storage
operations is enough -- the service does the rest, and tests/test_frontier_backends.py holds it to
the contract like the SQLite and PostgreSQL stores.

Its durable state is a :class:`Place`: what the last commit left, which a store opened later reads
(as a file outlives the process that wrote it).  A store works on a copy of it and commits by
putting the copy in its place; rows are frozen, so a copy is a copy of dicts, not of rows.  One
store holds a place at a time.  It has a robots.txt store; host leases it has none of (one process
holds it), so the service answers for them.  It scans its rows where a database would use an
index: a store for tests, not for crawls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from niofetcher.crawl.frontier.base import (
    ROBOTS_SECONDS,
    STATES,
    FrontierError,
    FrontierErrorKind,
    FrontierURL,
    Revisits,
    StoredRobots,
    StoredURL,
    Visit,
    processing_key,
)
from niofetcher.crawl.frontier.service import Additions

__all__ = ["MemoryStore", "Place"]


@dataclass(frozen=True, slots=True)
class Row:
    """One URL: what a lookup gives, and what a claim needs besides."""

    url: StoredURL
    host: str
    seq: int  # the order of discovery
    captured_at: float | None = None


@dataclass
class State:
    """Everything a store keeps, as one commit left it."""

    rows: dict[str, Row] = field(default_factory=dict)
    checkpoint: dict[str, int] = field(default_factory=dict)
    robots: dict[str, tuple[int, bytes, float]] = field(default_factory=dict)  # host -> (status, body, when)
    fingerprints: dict[str, dict[str, tuple[bytes, int]]] = field(default_factory=dict)  # host -> url -> ...
    refusals: Counter[str] = field(default_factory=Counter)

    def copy(self) -> State:
        return State(dict(self.rows), dict(self.checkpoint), dict(self.robots),
                     {host: dict(pages) for host, pages in self.fingerprints.items()}, Counter(self.refusals))


@dataclass
class Place:
    """Where a crawl's URLs stay between stores: the last commit, and who holds it."""

    committed: State = field(default_factory=State)
    holder: object | None = None


class MemoryStore:
    """The URLs of a crawl at ``place``, in memory, by ``clock``."""

    def __init__(self, place: Place, clock: Callable[[], float]) -> None:
        if place.holder is not None:
            raise FrontierError("the place is held by another store", FrontierErrorKind.LOCKED)
        place.holder = self
        self.place = place
        self.rollbacks = 0
        self._clock = clock
        self._open = True
        self._blocks = 0  # open transaction() blocks
        self._line: dict[str, None] = {}  # the hosts in turn
        self._state = place.committed.copy()
        for key, row in self._state.rows.items():  # a crash's claims wait again, their attempts counted
            if row.url.state == "processing":
                self._put(key, state="waiting")
        self._commit()
        self._line_up()

    # -- the transaction of every call ------------------------------------------

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    @property
    def closed(self) -> bool:
        return not self._open

    @contextlib.contextmanager
    def _call(self) -> Iterator[State]:
        """One call: refused once closed, undone with its block when it fails, committed at its
        end outside a block."""
        if not self._open:
            raise FrontierError("the memory store is closed", FrontierErrorKind.CLOSED)
        try:
            yield self._state
        except BaseException:
            self._state = self.place.committed.copy()
            self.rollbacks += 1
            self._line_up()
            raise
        if not self._blocks:
            self._commit()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self._blocks += 1
        try:
            yield
        finally:
            self._blocks -= 1
        if not self._blocks and self._open:
            self._commit()

    def _commit(self) -> None:
        self.place.committed = self._state.copy()

    def _line_up(self) -> None:
        self._line = {row.host: None for row in sorted(self._state.rows.values(), key=lambda row: row.seq)
                      if row.url.state == "waiting"}

    def _put(self, key: str, **changes: object) -> None:
        row = self._state.rows[key]
        self._state.rows[key] = dataclasses.replace(row, url=dataclasses.replace(row.url, **changes))  # type: ignore[arg-type]

    def _claimed(self, url: str, action: str) -> str:
        """The stored form of a URL that is 'processing', or ValueError."""
        row = self._state.rows.get(url)
        if row is not None and row.url.state == "processing":
            return url

        def state_of(key: str) -> str | None:
            found = self._state.rows.get(key)
            return None if found is None else found.url.state

        return processing_key(url, action, state_of)

    # -- adding ---------------------------------------------------------------------

    def insert(self, additions: Additions, modified: Mapping[str, float] | None) -> int:
        with self._call() as state:
            now, added = self._clock(), 0
            seq = max((row.seq for row in state.rows.values()), default=0) + 1
            for key, (depth, priority, parent, host) in additions.rows.items():
                row = state.rows.get(key)
                if row is None:
                    state.rows[key] = Row(StoredURL(key, "waiting", 0, depth, priority, parent, None, None, now, None,
                                                    now, None), host, seq + added)
                    added += 1
                    self._line[host] = None
                elif depth < row.url.depth:
                    self._put(key, depth=depth, parent=parent)
            for key, lastmod in (additions.lastmods or {}).items():
                if key in state.rows:
                    self._put(key, lastmod=lastmod)
            for key, when in (modified or {}).items():
                row = state.rows.get(key)
                fetched = row.url.fetched_at if row is not None else None
                if row is not None and row.url.state in ("done", "error") and fetched is not None and fetched < when:
                    self._put(key, state="waiting", attempts=0, next_attempt_at=now)
                    self._line[row.host] = None
            state.refusals.update(additions.refused)
            return added

    def admitted(self, hosts: list[str]) -> dict[str, int]:
        with self._call() as state:
            wanted = set(hosts)
            return Counter(row.host for row in state.rows.values() if row.host in wanted)

    def known(self, urls: list[str]) -> set[str]:
        with self._call() as state:
            return {url for url in urls if url in state.rows}

    # -- claiming ---------------------------------------------------------------------

    def take(self, limit: int, max_depth: int | None, host_room: Callable[[str], int] | None) -> list[FrontierURL]:
        with self._call() as state:
            now = self._clock()
            queues: dict[str, list[Row]] = {}
            for row in state.rows.values():
                url = row.url
                due = url.next_attempt_at is not None and url.next_attempt_at <= now
                if url.state == "waiting" and due and (max_depth is None or url.depth <= max_depth):
                    queues.setdefault(row.host, []).append(row)
            for rows in queues.values():
                rows.sort(key=lambda row: (-row.url.priority, row.url.depth, row.seq))
            # Hosts in turn, highest priority first; each asked its room once, then a URL each round.
            hosts = sorted((host for host in self._line if host in queues), key=lambda host: -queues[host][0].url.priority)
            room = {host: len(queues[host]) if host_room is None else min(host_room(host), len(queues[host]))
                    for host in hosts}
            asking = [host for host in hosts if room[host] > 0]
            taken: list[tuple[int, int, int, int, Row]] = []
            for rank in itertools.count():
                asking = [host for host in asking if rank < room[host]]
                if not asking or len(taken) >= limit:
                    break
                for host in asking[:limit - len(taken)]:
                    row = queues[host][rank]
                    taken.append((-row.url.priority, rank, row.url.depth, row.seq, row))
            asked = {entry[4].host: None for entry in taken}
            for host in asked:  # to the end of the line
                del self._line[host]
                self._line[host] = None
            taken.sort(key=lambda entry: entry[:4])
            claims = []
            for *_, row in taken:
                url = row.url
                self._put(url.url, state="processing", attempts=url.attempts + 1)
                since = None if url.fetched_at is None else now - url.fetched_at
                interval = None if url.next_due is None or url.fetched_at is None else url.next_due - url.fetched_at
                claims.append(FrontierURL(url.url, url.depth, url.priority, url.attempts + 1, url.parent, url.lastmod,
                                          url.etag, url.last_modified, url.digest, url.visits, interval,
                                          row.captured_at, url.changes, url.changed_time, url.unchanged_time, since))
            return claims

    # -- outcomes ---------------------------------------------------------------------

    def finish(self, outcomes: list[tuple[str, int | None]], checkpoint: dict[str, int] | None,
               visits: Mapping[str, Visit] | None) -> None:
        with self._call() as state:
            now = self._clock()
            keys = {}
            for url, status in outcomes:
                key = keys[url] = self._claimed(url, "complete")
                self._put(key, state="done", status=status, error=None, fetched_at=now, next_attempt_at=None)
            for url, visit in (visits or {}).items():
                key = keys.get(url, url)
                row = state.rows.get(key)
                if row is None or row.url.state != "done":
                    continue
                old = row.url
                state.rows[key] = dataclasses.replace(row, captured_at=(
                    row.captured_at if visit.captured_at is None else visit.captured_at))
                self._put(key, etag=visit.etag, last_modified=visit.last_modified, digest=visit.digest,
                          visits=old.visits + 1, changes=old.changes + (old.visits > 0 and bool(visit.changed)),
                          next_due=now + visit.revisit_in,
                          changed_time=old.changed_time if visit.changed_time is None else visit.changed_time,
                          unchanged_time=old.unchanged_time if visit.unchanged_time is None else visit.unchanged_time)
            state.checkpoint.update(checkpoint or {})

    def fail(self, url: str, error: str, status: int | None, retry_in: float | None,
             revisit_in: float | None) -> str:
        with self._call() as state:
            key, now = self._claimed(url, "fail"), self._clock()
            if retry_in is not None:
                self._put(key, state="waiting", status=status, error=error, fetched_at=now, next_attempt_at=now + retry_in)
                self._line[state.rows[key].host] = None
                return "waiting"
            self._put(key, state="error", status=status, error=error, fetched_at=now, next_attempt_at=None,
                      next_due=None if revisit_in is None else now + revisit_in)
            return "error"

    def give_back(self, urls: list[str]) -> None:
        with self._call() as state:
            for key in urls:
                row = state.rows.get(key)
                if row is not None and row.url.state == "processing":
                    self._put(key, state="waiting", attempts=max(row.url.attempts - 1, 0))
                    self._line.setdefault(row.host, None)

    def wake(self, now: float) -> int:
        with self._call() as state:
            due = [row for row in state.rows.values() if row.url.state in ("done", "error")
                   and row.url.next_due is not None and row.url.next_due <= now]
            for row in due:
                self._put(row.url.url, state="waiting", attempts=0, next_attempt_at=min(row.url.next_due or now, now))
                self._line.setdefault(row.host, None)
            return len(due)

    # -- reading -------------------------------------------------------------------------

    def revisits(self) -> Revisits:
        with self._call() as state:
            now = self._clock()
            times = [row.url.next_due for row in state.rows.values()
                     if row.url.state in ("done", "error") and row.url.next_due is not None]
            return Revisits(sum(when <= now for when in times), min((when for when in times if when > now), default=None))

    def next_due(self) -> float | None:
        with self._call() as state:
            return min((row.url.next_attempt_at for row in state.rows.values()
                        if row.url.state == "waiting" and row.url.next_attempt_at is not None), default=None)

    def min_due_depth(self) -> int | None:
        with self._call() as state:
            now = self._clock()
            return min((row.url.depth for row in state.rows.values() if row.url.state == "waiting"
                        and row.url.next_attempt_at is not None and row.url.next_attempt_at <= now), default=None)

    def counts(self) -> dict[str, int]:
        with self._call() as state:
            counted = Counter(row.url.state for row in state.rows.values())
            return {name: counted[name] for name in STATES}

    def failures(self, since: float, limit: int) -> list[tuple[str, str]]:
        with self._call() as state:
            failed = sorted((row for row in state.rows.values() if row.url.state == "error"
                             and row.url.fetched_at is not None and row.url.fetched_at >= since),
                            key=lambda row: (row.url.fetched_at, row.seq))
            return [(row.url.url, row.url.error or "") for row in failed[:limit]]

    def checkpoint(self) -> dict[str, int]:
        with self._call() as state:
            return dict(state.checkpoint)

    def lookup(self, url: str) -> StoredURL | None:
        with self._call() as state:
            row = state.rows.get(url)
            return None if row is None else row.url

    # -- what it keeps of a host ------------------------------------------------------------

    def fingerprints(self, host: str) -> list[tuple[str, bytes, int]]:
        with self._call() as state:
            return [(url, digest, simhash) for url, (digest, simhash) in state.fingerprints.get(host, {}).items()]

    def store_fingerprints(self, pages: Iterable[tuple[str, bytes, int, str | None]]) -> None:
        with self._call() as state:
            for url, digest, simhash, duplicate_of in pages:
                row = state.rows.get(url)
                if row is not None and duplicate_of is None:
                    state.fingerprints.setdefault(row.host, {})[url] = (digest, simhash)

    def robots(self, host: str) -> StoredRobots | None:
        with self._call() as state:
            now, kept = self._clock(), state.robots.get(host)
            if kept is None or kept[2] < now - ROBOTS_SECONDS:
                return None
            return StoredRobots(kept[0], kept[1], now - kept[2])

    def store_robots(self, host: str, status: int, body: bytes) -> None:
        with self._call() as state:
            state.robots[host] = (status, body, self._clock())

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        if self._open:
            self._commit()
            self.die()

    def die(self) -> None:
        """Let go of the place, committing nothing: what a killed process does."""
        self._open = False
        self.place.holder = None

    def describe(self) -> str:
        if not self._open:
            return "in memory closed"
        counts = Counter(row.url.state for row in self._state.rows.values())
        return "in memory " + " ".join(f"{name}={counts[name]}" for name in STATES)

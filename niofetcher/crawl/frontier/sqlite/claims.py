"""Claims host by host: which hosts a claim asks, for how many URLs, and where each host goes after.

The hosts with waiting URLs take turns (``hosts.py``); a claim asks the next hosts the caller has
room for for a share of it each, in one statement (each host's queue is the partial index
``urls_host_queue``), asks those with more for more while it is short, and the next hosts in line
when the first had nothing, each host once a claim.  Then each host goes back in line: at the end,
at the front when none of its URLs was taken (it keeps its turn), in the line of the priority its
queue now starts with; out of line when its queue is empty; or *parked* when nothing in it is as
shallow as the claim's depth limit -- asking it again in the same breadth-first layer would walk
its whole queue, since the index orders by priority before depth, and most hosts of a broad
crawl are such hosts.  A parked host comes back when a claim goes deeper or one of its URLs
waits again (:meth:`HostQueues.offer`).

Every host with a waiting URL is in line or parked: the frontier offers a host whenever one of its
URLs becomes waiting (added, released, to be retried), and after a rollback starts again from the
file (:meth:`HostQueues.line_up`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from ..hosts import HostRotation, Turn
from ..schema import CLAIM_ROWS, EMPTY_HOSTS, QUEUED_HOSTS, TOO_DEEP_HOSTS, TOP_PRIORITIES

__all__ = ["DEEPEST", "HostQueues", "Row"]

#: A claim without a depth limit: deeper than any depth.
DEEPEST = 1 << 62

# A claim asks its hosts again for more while it is short, at most this many times in all.
_CLAIM_ROUNDS = 4

#: A claimed row, as CLAIM_ROWS gives it: [rowid, url, depth, priority, attempts, parent, seq, host, lastmod,
#: etag, last_modified, digest, visits, interval, captured_at, changes, changed_time, unchanged_time,
#: since_fetch].
Row = list[Any]


class HostQueues:
    """The hosts in turn and the hosts parked, and the claims over them."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Nobody in line, nobody parked (before :meth:`line_up`)."""
        self.rotation = HostRotation()
        # Hosts out of line because every waiting URL of theirs is deeper than the depth given
        # here, with the priority of their line.
        self._too_deep: dict[str, tuple[int, int]] = {}
        self._shallowest_parked = DEEPEST

    def __contains__(self, host: object) -> bool:
        """Whether ``host`` is in line or parked: it has its row in ``hosts`` then."""
        return host in self.rotation or host in self._too_deep

    def line_up(self, conn: sqlite3.Connection) -> None:
        """Offer every host with a waiting URL (one probe a host): those in line already stay put."""
        (queued,) = conn.execute(QUEUED_HOSTS).fetchone()
        for host, priority in json.loads(queued):
            self.offer(host, priority)

    def offer(self, host: str, priority: int) -> None:
        """A URL of ``host`` waits (new, or again): in line it goes, parked or not (it may be
        shallow enough now)."""
        parked = self._too_deep.pop(host, None)
        self.rotation.offer(host, priority if parked is None else max(priority, parked[1]))

    def claim(
        self, conn: sqlite3.Connection, limit: int, deepest: int, host_room: Callable[[str], int] | None,
        now: float, mark: Callable[[list[Row]], None], unmark: Callable[[list[Row]], None],
    ) -> list[Row]:
        """Up to ``limit`` rows due at ``now``, no deeper than ``deepest``, from the hosts in turn,
        each host no more than ``host_room`` says; ``mark`` moves each pass's rows to
        'processing' (in the open transaction), and ``unmark`` moves them back should a later
        pass fail for a reason of the caller's (a ``host_room`` that raises)."""
        self._unpark(deepest)
        rows: list[Row] = []
        in_line = len(self.rotation)
        asked: set[str] = set()

        def room(host: str) -> int:  # each host is asked once a claim
            if host in asked:
                return 0
            return limit if host_room is None else host_room(host)

        # Hosts that turn out to have nothing for this claim are not the end of it: the next
        # hosts in line are asked, until the claim is full or every host was asked once.  A
        # pass asks for what is missing, or more hosts when the hosts asked so far gave fewer
        # URLs than there were of them (a host whose URLs are not taken keeps its turn): hosts
        # with nothing due cost a few passes, not one each, and the lines above them, whose
        # hosts were asked already, are walked a few times only.
        try:
            while len(rows) < limit and len(asked) < in_line:
                most = min(max(limit - len(rows), len(asked) - len(rows)), in_line - len(asked))
                turns = self.rotation.take(most, room)
                if not turns:
                    break
                asked.update(host for host, _share, _priority in turns)
                settled: set[str] = set()
                try:
                    rows += self._claim_rows(conn, turns, limit - len(rows), deepest, now, mark, settled)
                finally:
                    for host, _room, priority in turns:  # a failed statement: every host keeps its turn
                        if host not in settled:
                            self.rotation.put_back(host, priority, front=True)
        except sqlite3.Error:
            raise  # the frontier rolls the whole transaction back, these rows with it
        except BaseException:
            # A host_room that raised in a later pass: the rows of the passes before are
            # handed to no one, and with outcomes pending nothing is rolled back.
            if rows:
                unmark(rows)
            raise
        return rows

    def _unpark(self, deepest: int) -> None:
        """The hosts parked as too deep for a depth limit short of ``deepest`` go back in line."""
        if not self._too_deep or deepest <= self._shallowest_parked:
            return
        for host, (depth, priority) in list(self._too_deep.items()):
            if depth < deepest:
                del self._too_deep[host]
                self.rotation.offer(host, priority)
        self._shallowest_parked = min((depth for depth, _ in self._too_deep.values()), default=DEEPEST)

    def _claim_rows(
        self, conn: sqlite3.Connection, turns: list[Turn], limit: int, deepest: int, now: float,
        mark: Callable[[list[Row]], None], settled: set[str],
    ) -> list[Row]:
        """Ask the hosts of ``turns`` for their first due rows, take ``limit`` of them in claim
        order, ``mark`` those, and put each host back in line (adding it to ``settled``)."""
        if not turns:
            return []
        room = {host: share for host, share, _priority in turns}
        found: dict[str, list[Row]] = {host: [] for host in room}
        asking = list(room)
        offset = 0
        have = 0
        for _ in range(_CLAIM_ROUNDS):
            share = min(-(-(limit - have) // len(asking)), max(room[h] for h in asking))
            (picked,) = conn.execute(CLAIM_ROWS, (now, json.dumps(asking), deepest, share, offset)).fetchone()
            got: dict[str, int] = dict.fromkeys(asking, 0)
            for row in json.loads(picked):
                found[row[7]].append(row)
                got[row[7]] += 1
            offset += share
            # Hosts that gave all they were asked for and can take more may have more.
            asking = [h for h in asking if got[h] == share and offset < room[h]]
            have = sum(min(len(rows), room[h]) for h, rows in found.items())
            if not asking or have >= limit:
                break
        ranked: list[tuple[int, int, int, int, Row]] = []
        for host, rows in found.items():
            rows.sort(key=lambda row: (-row[3], row[2], row[6]))  # the host's queue order
            del rows[room[host]:]
            ranked.extend((-row[3], rank, row[2], row[6], row) for rank, row in enumerate(rows))
        ranked.sort(key=lambda entry: entry[:4])
        taken = [entry[4] for entry in ranked[:limit]]
        if taken:
            mark(taken)
        self._settle(conn, turns, found, {row[0] for row in taken}, deepest, settled)
        return taken

    def _settle(
        self, conn: sqlite3.Connection, turns: list[Turn], found: dict[str, list[Row]], claimed: set[int],
        deepest: int, settled: set[str],
    ) -> None:
        """Put each host asked back where its queue says: out of line, parked, or in a line."""
        idle = [host for host, rows in found.items() if not rows]
        if idle:
            (empty,) = conn.execute(EMPTY_HOSTS, (json.dumps(idle),)).fetchone()
            for host in json.loads(empty):
                self.rotation.forget(host)
                settled.add(host)
        priorities = {host: priority for host, _share, priority in turns}
        waiting = [host for host in idle if host not in settled]
        if waiting and deepest != DEEPEST:
            # Nothing due within the depth: those with nothing within it at all, due or not, are
            # parked until a claim goes deeper or new URLs come (_unpark(), offer()).  Not those
            # with a URL not due yet within it: the crawl waits for that one.
            (deep,) = conn.execute(TOO_DEEP_HOSTS, (json.dumps(waiting), deepest)).fetchone()
            for host in json.loads(deep):
                self._too_deep[host] = (deepest, priorities[host])
                self._shallowest_parked = min(self._shallowest_parked, deepest)
                settled.add(host)
        places: dict[str, tuple[int, bool]] = {}  # the line each host goes back to, at its front or not
        for host, rows in found.items():
            if host in settled:
                continue
            if rows:
                # What it has left is the rows not taken, then rows of no higher priority than
                # the last it gave.  A host none of whose rows were taken keeps its turn.
                left = [row for row in rows if row[0] not in claimed]
                places[host] = ((left[0] if left else rows[-1])[3], len(left) == len(rows))
            else:  # waiting, but nothing due now (or within the depth)
                places[host] = (priorities[host], False)
        lower = [host for host, (priority, _front) in places.items() if priority < priorities[host]]
        if lower:
            # A host goes down a line only as far as its queue says: a URL of a higher priority
            # that was not due yet (or too deep) must not wait behind the lower line's hosts.
            (tops,) = conn.execute(TOP_PRIORITIES, (json.dumps(lower),)).fetchone()
            for host, top in json.loads(tops).items():
                places[host] = (top, places[host][1]) if top is not None else (priorities[host], False)
        # Back in line: the others at the end, those that keep their turn at the front in their
        # order (so in reverse, each going in front of the one after it).
        for host, (priority, front) in places.items():
            if not front:
                self.rotation.put_back(host, priority)
        for host, (priority, front) in reversed(places.items()):
            if front:
                self.rotation.put_back(host, priority, front=True)
        settled.update(places)

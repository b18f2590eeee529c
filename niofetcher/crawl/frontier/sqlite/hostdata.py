"""What a SQLite frontier keeps of a host besides its URLs: its robots.txt answer, and the
fingerprints duplicate detection keeps of its pages (``urls.duplicate_of``, ``fingerprints``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..base import ROBOTS_SECONDS, StoredRobots, signed64, unsigned64
from ..schema import FINGERPRINTS_OF, ROBOTS_OF, SET_DUPLICATE, STORE_FINGERPRINT, STORE_ROBOTS
from .transactions import Transactions

__all__ = ["HostData"]


class HostData(Transactions):
    """The robots.txt store and the fingerprints of the SQLite Frontier (a part of it)."""

    _clock: Callable[[], float]

    def robots(self, host: str) -> StoredRobots | None:
        """``host``'s robots.txt as this crawl fetched it in the last day (by the frontier's clock),
        None when it did not: the crawler keeps the rules of the hosts it met lately in memory,
        and one it let go of, or a resumed crawl, reads them here instead of fetching again."""
        with self._db() as conn:
            now = self._clock()
            row = conn.execute(ROBOTS_OF, (host, now - ROBOTS_SECONDS)).fetchone()
            return StoredRobots(int(row[0]), bytes(row[1] or b""), now - float(row[2])) if row is not None else None

    def store_robots(self, host: str, status: int, body: bytes) -> None:
        """Keep what ``host``'s robots.txt said (a final answer: 2xx or 4xx), for :meth:`robots`.
        Committed in batches like an outcome, and counted as one, so that an unrelated call that
        fails does not roll it back (a commit of its own was 4% of a broad crawl's coordinator)."""
        with self._db() as conn:
            self._begin(conn)
            conn.execute(STORE_ROBOTS, (host, status, body, self._clock()))
            self._outcome_recorded(conn)


    def fingerprints(self, host: str) -> list[tuple[str, bytes, int]]:
        """The fingerprints duplicate detection keeps of ``host``'s done pages (those that duplicate
        nothing), (url, digest, simhash): what a crawl reads back when it claims the host's URLs."""
        with self._db() as conn:
            return [(url, bytes(digest), unsigned64(simhash))
                    for url, digest, simhash in conn.execute(FINGERPRINTS_OF, (host,))]

    def store_fingerprints(self, pages: Iterable[tuple[str, bytes, int, str | None]]) -> None:
        """Keep, for claimed URLs about to be completed, (url, digest, simhash, duplicate_of): the
        URL a page duplicates on its row, or else its fingerprints for :meth:`fingerprints`.
        Committed with the outcomes, in batches like them."""
        rows = list(pages)
        with self._db() as conn:
            self._begin(conn)
            conn.executemany(SET_DUPLICATE, [(url, original) for url, _, _, original in rows if original is not None])
            conn.executemany(STORE_FINGERPRINT, [(url, digest, signed64(simhash))
                                                 for url, digest, simhash, original in rows if original is None])

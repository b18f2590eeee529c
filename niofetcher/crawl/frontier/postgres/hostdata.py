"""What a PostgreSQL crawl keeps of a host besides its URLs: its robots.txt answer (on ``hosts``),
for the host's next owners, and the fingerprints duplicate detection keeps of its pages."""

from __future__ import annotations

from collections.abc import Iterable

from ..base import ROBOTS_SECONDS, StoredRobots, signed64, unsigned64
from ..postgres_schema import FINGERPRINTS_OF, ROBOTS_OF, SET_DUPLICATES, STORE_FINGERPRINTS, STORE_ROBOTS
from .leases import HostLeases

__all__ = ["HostData"]


class HostData(HostLeases):
    """The robots.txt store and the fingerprints of the PostgresFrontier (a part of it): what it
    writes goes to the hosts this worker holds, as outcomes do."""

    def robots(self, host: str) -> StoredRobots | None:
        """``host``'s robots.txt as a worker of this crawl fetched it in the last day, None when
        none did: a new owner of a host need not fetch it again."""
        with self._db() as conn:
            row = conn.execute(ROBOTS_OF, {"host": host, "seconds": ROBOTS_SECONDS}).fetchone()
            self._commit(conn)
            return StoredRobots(int(row[0]), bytes(row[1] or b""), float(row[2])) if row is not None else None

    def store_robots(self, host: str, status: int, body: bytes) -> None:
        """Keep what ``host``'s robots.txt said (a final answer: 2xx or 4xx) for the host's next owners."""
        with self._db() as conn:
            conn.execute(STORE_ROBOTS, {"host": host, "status": status, "body": body, "me": self.worker_id,
                                        "fenced": self._fenced})
            self._commit(conn)

    def fingerprints(self, host: str) -> list[tuple[str, bytes, int]]:
        """Duplicate detection's fingerprints of ``host``'s done pages, as any worker kept them: what
        a new owner of the host reads back (the SQLite Frontier's fingerprints())."""
        with self._db() as conn:
            rows = conn.execute(FINGERPRINTS_OF, {"host": host}).fetchall()
            self._commit(conn)
            return [(url, bytes(digest), unsigned64(simhash)) for url, digest, simhash in rows]

    def store_fingerprints(self, pages: Iterable[tuple[str, bytes, int, str | None]]) -> None:
        """For claimed URLs about to be completed, (url, digest, simhash, duplicate_of), as the SQLite
        Frontier's store_fingerprints(); only for hosts this worker holds, as outcomes are."""
        rows = list(pages)
        if not rows:
            return
        duplicates = [(url, original) for url, _, _, original in rows if original is not None]
        originals = [(url, digest, signed64(simhash)) for url, digest, simhash, original in rows if original is None]
        mine = {"me": self.worker_id, "fenced": self._fenced}
        with self._db() as conn:
            with conn.pipeline():
                if duplicates:
                    conn.execute(SET_DUPLICATES, {"urls": [url for url, _ in duplicates],
                                                  "originals": [original for _, original in duplicates], **mine})
                if originals:
                    conn.execute(STORE_FINGERPRINTS, {"urls": [row[0] for row in originals],
                                                      "digests": [row[1] for row in originals],
                                                      "simhashes": [row[2] for row in originals], **mine})
            self._commit(conn)

"""What the test site counts, per port: the figures tests and benchmarks read from the server's side.

Counters are kept per port, because the fetcher's guarantees (connection
limits, service time, "each page exactly once") are only believable when
counted from the server's side.

Turnaround: how soon a client that has a response asks for its next page
(``PortCounters.turnaround``). Per connection, from the moment the last byte
of its last outstanding response is handed to the kernel (stamped as that write
begins) to the arrival of its next request (the kernel's stamp where there is
one, as for delays). A connection's first request, and a request pipelined
while a response was still owed, count none: only the client's own delay is measured, not the
server's latency. The samples go to log-spaced buckets, so a run of millions
of requests costs a few hundred counters.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from dataclasses import dataclass, field

__all__ = ["Durations", "PortCounters"]

#: ``Durations``' buckets: bucket 0 holds everything up to 10 us, bucket i > 0 the durations
#: in (10 us x 1.02^(i-1), 10 us x 1.02^i]; the last one (about 65 minutes) everything longer.
_BUCKET_FLOOR = 10e-6
_BUCKET_RATIO = 1.02
_BUCKET_LAST = 1000
# The index is ceil((log(seconds) - log(floor)) / log(ratio)): one log and one multiply per sample.
_LOG_FLOOR = math.log(_BUCKET_FLOOR)
_PER_LOG = 1.0 / math.log(_BUCKET_RATIO)


@dataclass
class Durations:
    """A histogram of durations in 2%-wide log-spaced buckets: bounded memory, percentiles within 2%."""

    buckets: collections.Counter[int] = field(default_factory=collections.Counter)
    """Bucket index -> samples (see ``_BUCKET_FLOOR``)."""

    def add(self, seconds: float) -> None:
        """Count one duration (negative ones, a clock's jitter, as 0)."""
        if seconds <= _BUCKET_FLOOR:
            self.buckets[0] += 1
            return
        index = math.ceil((math.log(seconds) - _LOG_FLOOR) * _PER_LOG)
        self.buckets[min(_BUCKET_LAST, index)] += 1

    @property
    def count(self) -> int:
        """Samples counted."""
        return sum(self.buckets.values())

    def percentile(self, fraction: float) -> float | None:
        """The duration below which ``fraction`` (0..1) of the samples fall, in seconds: the
        geometric middle of its bucket (0 for the first); None without samples."""
        total = self.count
        if not total:
            return None
        rank = max(1, math.ceil(fraction * total))
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                return 0.0 if index == 0 else _BUCKET_FLOOR * _BUCKET_RATIO ** (index - 0.5)
        raise AssertionError("unreachable: the ranks add up to the count")

    def copy(self) -> Durations:
        """A snapshot the server thread will not change."""
        return Durations(collections.Counter(self.buckets))


@dataclass
class PortCounters:
    """What one listening port saw: the numbers tests assert on, counted server-side."""

    accepted: int = 0
    """Connections accepted."""
    open_now: int = 0
    """Connections currently open."""
    max_open: int = 0
    """Peak of simultaneously open connections (since start or ``reset_counters()``)."""
    requests: int = 0
    """Well-formed requests served (responses sent or scheduled)."""
    max_conn_age_at_request: float = 0.0
    """The oldest age (seconds since accept) any connection had when a request arrived on it."""
    paths: collections.Counter[str] = field(default_factory=collections.Counter)
    """Requests per path, query string dropped (for "each page exactly once" checks)."""
    tls_handshakes: int = 0
    """TLS handshakes completed (full or resumed); 0 for a plain-HTTP site."""
    tls_resumed: int = 0
    """Of those, handshakes that resumed an earlier session (a ticket) instead of a full one."""
    tls_failed: int = 0
    """Accepted connections whose TLS handshake failed (e.g. plain HTTP sent to an HTTPS port)."""
    log: list[tuple[float, str]] = field(default_factory=list)
    """``(time.monotonic() of arrival, path)`` of every request, in order; only with ``log_requests``."""
    turnaround: Durations = field(default_factory=Durations)
    """Per keep-alive request: from its connection's previous response written to its arrival (module doc)."""

    def copy(self) -> PortCounters:
        """A snapshot that the server thread will not change under the caller."""
        return dataclasses.replace(self, paths=collections.Counter(self.paths), log=list(self.log),
                                   turnaround=self.turnaround.copy())

"""The values that go in and come out: URLBean, FetchResult, the loop's counters and the statistics snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from .content import decode_text
from .errors import ErrorKind
from .urls import shown_url

#: The statuses whose ``Location`` is followed (by the fetcher, and by the crawler when the fetcher does not).
REDIRECT_STATUSES = frozenset((301, 302, 303, 307, 308))

#: Request headers as a driver takes them: (name, value) pairs, Host first.
HeaderPairs = list[tuple[str, str]]


class SharedHeaders(list[tuple[str, str]]):
    """A header list that many requests send unchanged: the configuration's defaults for one Host
    (request.RequestDefaults).  A driver may keep in ``prepared`` the form it has checked once, to
    send any number of times (http11: h11's validated Headers)."""

    __slots__ = ("prepared",)

    def __init__(self, pairs: HeaderPairs) -> None:
        super().__init__(pairs)
        self.prepared: Any = None


@dataclass(slots=True)
class URLBean:
    """One URL to fetch.  Higher priority goes first; equal priorities are FIFO.

    ``meta`` travels untouched to the result, so a crawler can carry its depth
    or parent through the fetcher.

    A ``user:pass@`` in ``url`` is sent as ``Authorization: Basic`` to that
    origin only (its redirects to another origin go without), unless
    ``headers`` or the configuration's headers give an Authorization of their
    own; the request line and Host never carry it, and no recorded exchange
    does (``FetchResult.exchanges``), nor ``final_url``, ``redirects`` or an
    ``error_detail``: every hop goes by the URL without them.
    ``FetchResult.url`` is the URL as registered, password included: the
    caller's own (its repr masks it).

    ``proxy`` routes this URL: None takes the configuration's ``proxy`` (and
    its ``no_proxy``), ``""`` goes direct whatever the configuration says, and
    ``"http://[user:pass@]host:port"`` goes through that proxy (``no_proxy``
    does not apply to a proxy given here).  A malformed one makes
    ``register()`` raise ValueError.
    """

    url: str
    priority: int = 0
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    meta: dict[str, Any] = field(default_factory=dict)
    proxy: str | None = field(default=None, repr=False)  # its password must stay out of logs


class Exchange(NamedTuple):
    """One request and its response as they went over the wire, kept for an archive (a WARC).

    ``FetchResult.exchanges`` holds one per hop, the final one last, when
    ``FetcherConfig.record_exchanges`` is on.  ``payload`` is the body as the
    server sent it: its Content-Encoding kept (gzip stays gzip), its chunked
    framing (Transfer-Encoding) removed, as h11 hands the body over.

    A response that failed after its head (the server closed early, a
    timeout, a body over ``max_body_size``) is recorded too, with ``error``
    set: its payload is what arrived before the failure, at most
    ``max_body_size`` bytes (a WARC writes it with WARC-Truncated).

    A NamedTuple rather than a frozen dataclass, as http11's Response: making
    the class at import takes 2.6M instructions, the dataclass about 7M.
    """

    url: str  # the URL of this hop, without a user:pass@ (credentials never go into an archive)
    method: str
    target: str  # the request target as sent: the path, or the whole URL to a proxy (plain http)
    # As given to h11, in order, Host first, but for Authorization and Proxy-Authorization: left out.
    request_headers: list[tuple[str, str]]
    request_body: bytes
    http_version: str  # the response's: "1.1" or "1.0"
    status: int
    reason: str
    response_headers: list[tuple[str, str]]  # as received, in order (latin-1), Transfer-Encoding included
    payload: bytes
    sent_at: float  # wall-clock (unix) time at which the request was sent
    received_at: float  # wall-clock (unix) time at which the response was complete (or failed)
    peer: str | None = None  # "ip:port" this hop's response came from, as FetchResult.peer
    error: ErrorKind | None = None  # None: complete; else what cut the response off


def capture_time(received_at: float) -> float:
    """The time a capture (the response of a page's final hop) is known by: ``received_at`` to the
    millisecond.  A crawl keeps it (``captured_at``) and an archive names the capture's record by
    it; finer, it would not come back whole from every store (SQLite's JSON writes 15 digits)."""
    return round(received_at, 3)


@dataclass(slots=True, eq=False)
class FetchResult:
    """The outcome of one registration: exactly one per accepted ``register()``.

    ``peer`` is the address the response came from, ``"ip:port"`` (an IPv6
    address in brackets: ``"[::1]:8080"``), the one connected to for the
    final hop; None when no connection was made (a failed name lookup, a
    refused connect).  Through a proxy it is the proxy's address: the origin's
    is known only to the proxy.
    """

    bean: URLBean
    url: str
    final_url: str
    status: int | None = None
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    redirects: list[tuple[int, str]] = field(default_factory=list)
    elapsed: float = 0.0
    queue_wait: float = 0.0
    connection_reused: bool = False
    session_reused: bool = False
    replayed: bool = False
    error: ErrorKind | None = None
    error_detail: str = ""
    refused: bool = False  # the fetcher's own settings forbade it (deny_networks, allowed_ports)
    fetched_at: float = 0.0  # wall-clock (unix) time at which the result was complete
    peer: str | None = None  # "ip:port" the response came from (see above)
    exchanges: list[Exchange] = field(default_factory=list)  # FetcherConfig.record_exchanges: every hop's
    _text: str | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """True when the fetch completed without error and the status is 2xx."""
        return self.error is None and self.status is not None and 200 <= self.status < 300

    def header(self, name: str, default: str | None = None) -> str | None:
        """The first header called ``name``, compared case-insensitively."""
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return default

    @property
    def text(self) -> str:
        """The body as text: Content-Type charset, else the page's meta charset, else UTF-8.

        Decoded on first use, in the caller's thread, so that the loop never pays for it.
        """
        if self._text is None:
            self._text = decode_text(self.body, self.header("content-type"))
        return self._text

    def __repr__(self) -> str:
        outcome = self.error.value if self.error else self.status
        return f"<FetchResult {outcome} {shown_url(self.url)} {len(self.body)} bytes>"


@dataclass(slots=True, eq=False)
class Counters:
    """The loop's running totals, in the words of FetcherStats.  Written by the loop thread only."""

    in_flight: int = 0
    connections_opened: int = 0
    reused_requests: int = 0
    replayed_requests: int = 0
    closed_service_time: int = 0
    closed_idle: int = 0
    bytes_received: int = 0
    tls_handshakes: int = 0
    tls_resumed: int = 0  # handshakes that resumed an earlier TLS session
    tls_sessions_read: int = 0  # TLS sessions read from a connection, for a later one to resume

    def snapshot(self) -> dict[str, int]:
        """Every counter by name (dataclasses.asdict() would deep-copy them: five times slower)."""
        return {name: getattr(self, name) for name in _COUNTER_NAMES}


_COUNTER_NAMES = tuple(counter.name for counter in fields(Counters))


@dataclass(frozen=True, slots=True)
class FetcherStats:
    """A snapshot of the fetcher's counters."""

    registered: int
    completed: int
    failed: int
    pending: int
    in_flight: int
    open_connections: int
    connections_opened: int
    reused_requests: int
    replayed_requests: int
    closed_service_time: int
    closed_idle: int
    bytes_received: int
    tls_handshakes: int = 0
    tls_resumed: int = 0  # handshakes that resumed an earlier TLS session
    tls_sessions_read: int = 0  # TLS sessions read from a connection, for a later one to resume


@dataclass(frozen=True, slots=True)
class HostStats:
    """Per (scheme, host, port): the numbers that show the limits held and hosts were served fairly."""

    pending: int
    in_flight: int
    open_connections: int
    peak_connections: int
    requests_served: int
    mean_queue_wait: float
    max_queue_wait: float
    delay: float = 0.0  # between request starts now: host_delay, a set delay or the Throttle's, the largest
    backoffs: int = 0  # answers with a Throttle's backoff status (429, 503)

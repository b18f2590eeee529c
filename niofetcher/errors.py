"""The small set of ways a fetch can fail.

Errors reach users as ``FetchResult.error``, an :class:`ErrorKind`.  Inside
the loop a failure travels as a :class:`FetchFailure` exception carrying its
kind; OS, TLS and h11 exceptions are translated into it at exactly one
boundary (``connection.py``), never by parsing messages afterwards.
"""

from __future__ import annotations

import enum


class ErrorKind(str, enum.Enum):
    """Why a fetch ended without a complete response.  Compares equal to its value."""

    DNS_ERROR = "dns_error"
    CONNECT_ERROR = "connect_error"
    CONNECT_TIMEOUT = "connect_timeout"
    READ_TIMEOUT = "read_timeout"
    TIMEOUT = "timeout"
    TLS_ERROR = "tls_error"
    PROXY_ERROR = "proxy_error"  # the proxy refused: a 407, or an error status in answer to CONNECT
    PROTOCOL_ERROR = "protocol_error"
    CONNECTION_CLOSED = "connection_closed"
    TOO_LARGE = "too_large"
    TOO_MANY_REDIRECTS = "too_many_redirects"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


class FetchFailure(Exception):
    """Raised inside the fetcher when one exchange fails; becomes a FetchResult error."""

    def __init__(self, kind: ErrorKind, detail: str, refused: bool = False) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind
        self.detail = detail
        # The fetcher's own settings forbade it (deny_networks, allowed_ports): it fails the same
        # way however often it is tried.
        self.refused = refused

"""URL validation and the (scheme, host, port) key of the connection table."""

from __future__ import annotations

import functools
import re
from typing import NamedTuple, Optional
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


class Origin(NamedTuple):
    """The connection-table key: lower-cased scheme and host, explicit port (RFC 3986 6.2.2.1)."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


class Target(NamedTuple):
    """What a request needs from its URL: where to connect and what to ask for."""

    origin: Origin
    host_header: str
    path: str


# The shape nearly every crawled URL has: a plain host, maybe a port, no userinfo,
# no IPv6 literal, no whitespace or control characters.  It is split here at a
# fraction of urlsplit's cost (register() spent ~8 us of its ~11 us in urlsplit);
# everything else takes the general path, which decides what is valid.
_PLAIN_URL = re.compile(
    r"([hH][tT][tT][pP][sS]?)://([A-Za-z0-9_.-]+)(?::([0-9]{1,5}))?"
    r"(/[^?#\x00-\x20\x7f]*)?(?:\?([^#\x00-\x20\x7f]*))?(?:#[^\x00-\x20\x7f]*)?"
)
_plain_match = _PLAIN_URL.fullmatch


def check_url_characters(url: str) -> None:
    """ValueError for characters no request line or UTF-8 store can carry: NUL, or a lone surrogate.

    A lone surrogate is what Python makes of an undecodable byte in a command
    line argument; stored, it would make the crawl database unreadable.
    """
    if "\x00" in url:
        raise ValueError(f"URL contains a NUL character: {url!r}")
    if not url.isascii():
        try:
            url.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"URL is not valid Unicode (it holds a lone surrogate): {url!r}") from None


def parse_target(url: str) -> Target:
    """Split an absolute http(s) URL, or raise ValueError saying what is wrong with it."""
    match = _plain_match(url) if type(url) is str else None
    if match is not None:
        if not url.isascii():  # the pattern already refuses NUL
            check_url_characters(url)
        scheme, host, port_text, path, query = match.groups()
        host = host.lower().rstrip(".")
        port = int(port_text) if port_text is not None else None
        if host and (port is None or port <= 65535):
            origin, host_header = _origin(scheme.lower(), host, port)
            if not path:
                path = "/"
            return Target(origin, host_header, f"{path}?{query}" if query else path)
    return _parse_target_general(url)


def _parse_target_general(url: str) -> Target:
    if not isinstance(url, str):
        raise ValueError(f"URL must be a str, not {type(url).__name__}")
    check_url_characters(url)
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"malformed URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"only absolute http:// and https:// URLs can be fetched, not {url!r}")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise ValueError(f"URL has no host: {url!r}")
    if any(c in host for c in " \t\r\n/\\@"):
        raise ValueError(f"URL has an invalid host: {url!r}")
    origin, host_header = _origin(scheme, host, port)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    if any(c in path for c in " \r\n"):
        # A URL copied from a page may hold spaces; the wire must not.
        path = path.replace(" ", "%20").replace("\r", "%0D").replace("\n", "%0A")
    return Target(origin, host_header, path)


@functools.lru_cache(maxsize=4096)
def _origin(scheme: str, host: str, port: Optional[int]) -> tuple[Origin, str]:
    """One Origin and Host header per host, shared by all its URLs: pending URLs stay small."""
    default_port = DEFAULT_PORTS[scheme]
    if port is None:
        port = default_port
    host_header = f"[{host}]" if ":" in host else host
    if port != default_port:
        host_header = f"{host_header}:{port}"
    return Origin(scheme, host, port), host_header

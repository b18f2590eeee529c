"""Proxies: a ``proxy`` setting (:func:`parse_proxy`) and ``no_proxy`` (:class:`NoProxy`, curl's rules),
read with the host rules of every other URL.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import urlsplit

from .credentials import basic_authorization, shown_url
from .hostnames import bracketed, normal_host

# Characters no host may hold once it is in A-labels (urlsplit lets them through).
_bad_host_char = re.compile(r"[\x00-\x20\x7f/\\@\[\]]").search


class Proxy(NamedTuple):
    """An HTTP forward proxy, as :func:`parse_proxy` reads ``http://[user:pass@]host:port``.

    ``authority`` (``host:port``, an IPv6 literal in brackets) is how errors and
    limits name it; ``authorization`` is the ``Proxy-Authorization`` value, or
    None without credentials.  Its repr leaves the credentials out, so that a
    log line never carries a password.
    """

    host: str
    port: int
    authority: str
    authorization: str | None

    def __repr__(self) -> str:
        credentials = ", with credentials" if self.authorization is not None else ""
        return f"<Proxy {self.authority}{credentials}>"

    def __str__(self) -> str:
        return self.authority


@functools.lru_cache(maxsize=256)
def parse_proxy(url: str) -> Proxy:
    """The proxy of a ``proxy`` setting: ``http://[user:pass@]host:port`` (port required).

    Only plain ``http://`` proxies are spoken to (an https URL goes through one
    by ``CONNECT``; TLS *to* the proxy is not supported).  User and password
    are percent-decoded as UTF-8 (``%40`` for an "@" in a password) and sent as
    ``Proxy-Authorization: Basic`` (RFC 7617).  A path, a query or a fragment
    other than "/" is refused, as is anything else the URL rules refuse in a host.

    Cached: a crawler giving each URLBean one of a few proxies parses each once.

    Raises:
        ValueError: saying what is wrong; the message never repeats the password.
    """
    if not isinstance(url, str):
        raise ValueError(f"must be a str like 'http://host:port', not {type(url).__name__}")
    if any(c in url for c in "\x00\t\n\r"):
        raise ValueError("holds a control character")
    parts = urlsplit(url.strip())
    shown = shown_url(url)
    if parts.scheme.lower() != "http":
        raise ValueError(f"only http:// proxies are supported, not {shown!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"a proxy URL is scheme, host and port only, not {shown!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"the port must be 1-65535, in {shown!r}") from None
    if port is None or port == 0:
        raise ValueError(f"the port must be given, 1-65535, in {shown!r}")
    host = parts.hostname or ""
    if ":" not in host:
        try:
            host = normal_host(host)
        except ValueError as exc:
            raise ValueError(f"invalid host in {shown!r}: {exc}") from None
    if not host or _bad_host_char(host) or not host.isascii():
        raise ValueError(f"invalid host in {shown!r}")
    authorization = basic_authorization(parts.username, parts.password) if parts.username is not None else None
    return Proxy(host, port, f"{bracketed(host)}:{port}", authorization)


class NoProxy:
    """The hosts that go direct although a proxy is set: curl's ``NO_PROXY`` rules.

    Each entry is ``*`` (every host), a host name, or an IP address with an
    optional CIDR length (``10.0.0.0/8``, ``::1``, IPv6 without brackets).  A
    name matches that host and every host below it: ``example.com`` (or
    ``.example.com``: a leading dot changes nothing, as in curl since 7.86)
    matches ``example.com`` and ``www.example.com``, never
    ``notexample.com``.  An address entry matches IP literals only, exactly or
    within its network; a name never matches an IP literal, and no name is
    resolved to decide.  Names are compared as the URL rules write them (lower
    case, A-labels, trailing dots dropped).  Ports play no part.
    """

    __slots__ = ("_all", "_names", "_networks")

    def __init__(self, entries: Iterable[str]) -> None:
        """Raises ValueError for an entry that is no host name or address."""
        self._all = False
        names: list[str] = []
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in entries:
            if not isinstance(entry, str):
                raise ValueError(f"entries are host names or addresses (str), not {entry!r}")
            text = entry.strip()
            if text == "*":
                self._all = True
                continue
            if text.startswith("["):  # an IPv6 literal written as in a URL, perhaps with a CIDR length
                address, bracket, length = text[1:].partition("]")
                # Not with a port: "[::1]:8080" unbracketed would be the address ::1:8080.
                if bracket and (not length or length.startswith("/")):
                    text = address + length
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
                continue
            except ValueError:
                pass
            try:
                name = normal_host(text.lstrip("."))
            except ValueError as exc:
                raise ValueError(f"{entry!r} is neither a host name nor an IP address or network: {exc}") from None
            if not name or ":" in name:  # an address with a port (normal_host lets a ":" through as IPv6)
                raise ValueError(f"{entry!r} is neither a host name nor an IP address or network")
            names.append(name)
        self._names = tuple(names)
        self._networks = tuple(networks)

    def __bool__(self) -> bool:
        return self._all or bool(self._names) or bool(self._networks)

    def matches(self, host: str) -> bool:
        """True when ``host`` (an Origin's host: normal, IPv6 without brackets) goes direct."""
        if self._all:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return any(host == name or host.endswith(f".{name}") for name in self._names)
        return any(address in network for network in self._networks if network.version == address.version)

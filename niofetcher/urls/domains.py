"""Allowed domains: the host an entry of ``--allowed-domain`` or ``CrawlConfig.allowed_domains`` names,
written as the URL rules write a host.
"""

from __future__ import annotations

import ipaddress
import re

from .credentials import shown_url
from .hostnames import normal_host
from .targets import parse_target

# A port as a domain entry writes it after its host: what the URL rules accept (0-65535).
_ENTRY_PORT = re.compile(r"[0-9]{1,5}")


def domain_host(entry: str) -> str:
    """The host an allowed-domain entry names (``--allowed-domain``, ``CrawlConfig.allowed_domains``),
    written as the URL rules write a host: lower case, IDNA A-labels, an IPv6 literal without brackets.

    An entry is a domain -- ``example.com``, ``.example.com`` or ``*.example.com``, which the crawl
    reads alike: that name and every name below it -- an IP address (IPv6 bare, ``::1``, or in
    brackets), a ``host:port`` (``127.0.0.1:8080``, ``[::1]:8080``, ``example.com:443``) or an
    http(s) URL (``http://127.0.0.1:8080/x``); of the last two the host is taken and the rest left,
    for the scope is by host.  A bare IPv6 address is read whole, as curl reads one in ``no_proxy``:
    ``::1:8080`` is that address, and ``[::1]:8080`` is ``::1`` with a port.  The host read is an
    entry again, the same one: a config made from a normalised one reads it as it is.

    Raises:
        ValueError: in one line, for anything else: an empty entry, a space, a path without a
            scheme, a ``*`` anywhere but in front of a name, a bad port, a host the URL rules
            refuse, an IPv6 address with a port but without brackets.
    """
    if not isinstance(entry, str):
        raise ValueError(f"an allowed domain is a str, not {entry!r}")
    text = entry.strip()
    try:
        if "://" in text:
            return _domain_name(parse_target(text).origin.host, wildcard=False)
        wildcard = text.startswith("*.")
        name = text[2:] if wildcard else text.removeprefix(".")
        return _domain_name(_entry_host(name), wildcard)
    except ValueError as exc:
        raise ValueError(f"allowed domain {shown_url(entry)!r}: {exc} (give example.com, *.example.com, "
                         "host:port or a URL)") from None


def _entry_host(text: str) -> str:
    """The host of an entry's ``host``, ``host:port``, ``[ipv6]`` or ``[ipv6]:port`` (see domain_host)."""
    if "/" in text:
        raise ValueError("a path is part of a URL: give its scheme too (http://...)")
    if text.startswith("["):
        address, bracket, rest = text[1:].partition("]")
        if not bracket or _ip_version(address) != 6:
            raise ValueError("not an IPv6 address in brackets")
        if rest:
            _check_entry_port(rest)
        return address
    if text.count(":") > 1:  # no host name holds a ":": an IPv6 address, read whole
        if _ip_version(text) != 6:
            raise ValueError("not an IPv6 address (with a port, it goes in brackets: [::1]:8080)")
        return text
    host, colon, port = text.partition(":")
    if colon:
        _check_entry_port(colon + port)
    return host


def _check_entry_port(text: str) -> None:
    """ValueError unless ``text`` is a ":" and a port (0-65535), as it follows a host."""
    port = text[1:]
    if not text.startswith(":") or not _ENTRY_PORT.fullmatch(port) or int(port) > 65535:
        raise ValueError(f"{text!r} is not a port after the host")


def _ip_version(text: str) -> int | None:
    """4 or 6 for an IP address, None for anything else (an IPv6 address with a zone, ``fe80::1%eth0``,
    too: it names an interface of this machine, never the host of a link)."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    return None if "%" in text else address.version


def _domain_name(host: str, wildcard: bool) -> str:
    """``host`` (an entry's, or a URL's) checked to be a host a link can have, in normal form."""
    if ":" in host:  # an IPv6 address, checked by its reader
        if wildcard:
            raise ValueError("*. stands for the names below a domain, and an address has none")
        # Its one written form (RFC 5952): [0:0:0:0:0:0:0:1] allows the host that a seed [::1] has.
        return ipaddress.IPv6Address(host).compressed
    if "*" in host:
        raise ValueError("a * stands only in front, for the names below a domain: *.example.com")
    host = normal_host(host)  # ValueError for a name IDNA cannot encode
    if not host or "" in host.split("."):
        raise ValueError("not a host name or address")
    if wildcard and _ip_version(host) == 4:
        raise ValueError("*. stands for the names below a domain, and an address has none")
    return host

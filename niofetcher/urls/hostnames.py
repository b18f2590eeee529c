"""The host rules: a host name read as the WHATWG host parser reads it, and written as the wire wants it.

A non-ASCII name becomes IDNA A-labels as UTS #46 maps it (``faß.de`` is
``xn--fa-hia.de``, as browsers send it), a name that ends in a number an IPv4
address (``0x7f.1`` is ``127.0.0.1``), an IPv6 literal its canonical form
(RFC 5952); an IPv6 literal goes in brackets wherever a host meets a port or a
scheme (:func:`bracketed`).  Every other module of the URL rules reads a host
through these: the request target, the stored form, the link, a proxy, an
allowed domain.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from urllib.parse import unquote

import idna

# An IPv4 address as WHATWG writes it, dotted decimal without leading zeros: the one host of the
# fast paths' regular expressions whose last label is a number (any other such host is another
# form of an IPv4 address, or none, and the general path says which).
DOTTED_DECIMAL = r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"


@functools.lru_cache(maxsize=4096)
def normal_host(host: str) -> str:
    """A host name as it goes on the wire, to the resolver and into the frontier.

    :func:`whatwg_host` (lower case, IDNA A-labels, an IPv4 address in any of
    its forms as dotted decimal), its trailing dots dropped.  A host with a ":"
    is an IPv6 literal (a ``resolve`` key's ``[::1]``, urlsplit's ``::1``):
    only lower-cased, as it always was here; the URL rules write it in its
    canonical form before it comes here (:func:`authority`).

    Raises:
        ValueError: for a host WHATWG refuses (see :func:`whatwg_host`), and for
            one that ends in a number that is no IPv4 address once its trailing
            dots are gone (``foo.09..``): a normal form is a host WHATWG takes.
    """
    if ":" in host:
        return host.lower()
    name = whatwg_host(host)
    stripped = name.rstrip(".")
    return whatwg_host(stripped) if stripped != name and _ends_in_number(stripped) else stripped


def whatwg_host(host: str) -> str:
    """A host name (percent-decoded, no IPv6 literal) as the WHATWG host parser writes it.

    Lower-cased, a non-ASCII name as IDNA A-labels (``bücher.example`` ->
    ``xn--bcher-kva.example``), and a name that ends in a number read as an
    IPv4 address (:func:`_ipv4`: ``0x7f.1`` is ``127.0.0.1``).  The encoding
    is UTS #46 as WHATWG applies it (:func:`_a_labels`), not Python's "idna"
    codec (IDNA 2003, which maps "ß" to "ss": ``faß.de`` would go out as
    ``fass.de``, where browsers send ``xn--fa-hia.de``).  Trailing dots are
    kept, as WHATWG keeps them.

    Raises:
        ValueError: when the name cannot be encoded (an empty or over-long
            label, a character IDNA prohibits), holds a WHATWG forbidden
            domain code point, or ends in a number and is no IPv4 address.
    """
    host = host.lower()
    if not host.isascii():
        try:
            host = _a_labels(host)
        except UnicodeError as exc:
            raise ValueError(f"host {host!r} cannot be encoded as IDNA: {exc}") from None
    if _FORBIDDEN_IN_DOMAIN(host):
        raise ValueError(f"host {host!r} holds a character no host name may hold")
    if _ends_in_number(host):
        return _ipv4(host)
    return host


# WHATWG's forbidden domain code points: C0 controls, space, "#%/:<>?@[\]^|" and DEL.
_FORBIDDEN_IN_DOMAIN = re.compile(r"[\x00-\x20#%/:<>?@\[\\\]^|\x7f]").search

# A host whose last label (one trailing dot left out) is a number, decimal or "0x" hex: WHATWG
# reads it as an IPv4 address, and refuses it when it is none (``foo.09``, ``1.2.3.256``).
_ends_in_number = re.compile(r"(?:\A|\.)(?:[0-9]+|0[xX][0-9a-fA-F]*)\.?\Z").search

_IPV4_PART = re.compile(r"0[xX]([0-9a-fA-F]*)|0([0-7]+)|([1-9][0-9]*|0)")


def _ipv4(host: str) -> str:
    """A host that ends in a number, as the dotted-decimal IPv4 address WHATWG reads in it.

    Up to four parts, each decimal, octal (a leading "0") or hex ("0x"); the
    last fills the bytes the others leave (``127.1`` is ``127.0.0.1``,
    ``3232235521`` is ``192.168.0.1``), as inet_aton has always read them.

    Raises:
        ValueError: when it is no IPv4 address in any of these forms.
    """
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    numbers: list[int] = []
    for part in parts:
        match = _IPV4_PART.fullmatch(part)
        if match is None or len(parts) > 4:
            raise ValueError(f"host {host!r} ends in a number but is no IPv4 address")
        hexadecimal, octal, decimal = match.groups()
        numbers.append(int(hexadecimal or "0", 16) if decimal is None and octal is None
                       else int(octal, 8) if octal is not None else int(decimal))
    last = numbers.pop()
    if any(number > 255 for number in numbers) or last >= 256 ** (4 - len(numbers)):
        raise ValueError(f"host {host!r} is an IPv4 address out of range")
    address = last + sum(number << (8 * (3 - i)) for i, number in enumerate(numbers))
    return str(ipaddress.IPv4Address(address))


def _a_labels(host: str) -> str:
    """A lower-case host name in IDNA A-labels, the one encoding of both normal_host and absolute_url.

    UTS #46 processing as the WHATWG host parser does it (non-transitional, no STD3 rules, no hyphen
    or DNS length checks, so ``ü..x`` is ``xn--tda..x``): the ``idna`` package maps the name (``ß`` stays ``ß``, full-width letters
    become ASCII, a disallowed code point raises), and each non-ASCII label is Punycode.

    Raises:
        UnicodeError: when the name cannot be encoded.
    """
    labels = idna.uts46_remap(host, std3_rules=False, transitional=False).split(".")
    if any(label.startswith("xn--") and not label.isascii() for label in labels):
        raise UnicodeError(f"{host!r} has an xn-- label that is not ASCII")  # UTS #46 4.1, step 4
    return ".".join(label if label.isascii() else "xn--" + label.encode("punycode").decode("ascii")
                    for label in labels)


def bracketed(host: str) -> str:
    """A host as it is written before a ":port" or after "//": an IPv6 literal in brackets (RFC 3986 3.2.2).

    ``host`` comes without brackets, as :class:`Origin` and urlsplit's
    ``hostname`` hold it; only an IPv6 literal has a ":".
    """
    return f"[{host}]" if ":" in host else host


def authority(netloc: str) -> tuple[str, str]:
    """The userinfo (as written) and the host of urlsplit's ``netloc``, the host as WHATWG parses it:
    percent-decoded, then :func:`whatwg_host`, or an IPv6 literal in its canonical form (RFC 5952,
    as ipaddress writes it: ``[0:0::1]`` is ``::1``, ``[::127.0.0.1]`` is ``::7f00:1``), without
    brackets.  Trailing dots are kept.

    Raises:
        ValueError: for a host WHATWG refuses.
    """
    userinfo, _, host_and_port = netloc.rpartition("@")
    if host_and_port.startswith("["):
        return userinfo, _ipv6(host_and_port[1:].partition("]")[0])  # urlsplit has checked the brackets
    host = host_and_port.partition(":")[0]
    if "%" in host:
        host = unquote(host)  # as UTF-8; what is not UTF-8 becomes U+FFFD, which IDNA refuses
    return userinfo, whatwg_host(host)


def _ipv6(literal: str) -> str:
    """An IPv6 address (no brackets) in its canonical form (RFC 5952), as WHATWG writes it.

    Raises:
        ValueError: for no IPv6 address, or one with a zone (``fe80::1%eth0``): it names an
            interface of this machine, not a host.
    """
    if "%" in literal:
        raise ValueError("an IPv6 zone names an interface of this machine, not a host")
    return ipaddress.IPv6Address(literal).compressed

"""The request target and the stored form: :func:`parse_target` and :func:`normalize_url`.

:func:`parse_target` gives the fetcher the Origin key of its connection table,
the Host header and the path; :func:`normalize_url` the form a URL is stored
and de-duplicated in; :func:`host_key` names a normal URL's host queue.  Both
forms have a fast path, one regular expression each (``_PLAIN_URL``,
``_NORMAL_FORM``), for the URLs no rule changes, and a general one
(``_split``) that validates and applies every rule.  ``normalize_url``
remembers the normal forms of the URLs it met lately: a crawl meets a site's
links on every page.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple
from urllib.parse import urlsplit

from .credentials import shown_url
from .hostnames import DOTTED_DECIMAL, authority, bracketed, normal_host
from .paths import dot_segment, lower_escape, path_and_query
from .reading import C0_CONTROL_OR_SPACE, DEFAULT_PORTS, TAB_OR_NEWLINE, ambiguous_authority, empty_query, special_form


class Origin(NamedTuple):
    """The connection-table key: lower-cased scheme and host, explicit port (RFC 3986 6.2.2.1)."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.scheme}://{bracketed(self.host)}:{self.port}"


class Target(NamedTuple):
    """What a request needs from its URL: where to connect and what to ask for."""

    origin: Origin
    host_header: str
    path: str


class _Parts(NamedTuple):
    """A URL taken apart by the general path, every rule applied."""

    scheme: str
    host: str  # normal_host(): A-labels, no IPv6 brackets
    port: int | None
    target: str  # path and query, as a request line carries them


# The shape nearly every crawled URL has: a plain host, maybe a port, no userinfo,
# no IPv6 literal, no whitespace or control characters.  It is split here at a
# fraction of urlsplit's cost (register() spent ~8 us of its ~11 us in urlsplit);
# everything else takes the general path, which decides what is valid.
_PLAIN_URL = re.compile(
    r"([hH][tT][tT][pP][sS]?)://([A-Za-z0-9_.-]+)(?::([0-9]{1,5}))?"
    r"(/[^?#\x00-\x20\x7f\\\"<>`{}]*)?(?:\?([^#\x00-\x20\x7f\"<>']*))?(?:#[^\x00-\x20\x7f]*)?"
)
_plain_match = _PLAIN_URL.fullmatch

# A URL normalize_url() gives back unchanged, as long as its port (if any) is
# not the default one, its query is not empty and it has no dot segment:
# lower-case scheme and host (no user info, no IPv6, no trailing dot, a last
# label that is no number but in a dotted-decimal IPv4 address), a path, no
# fragment, only characters a request line carries but "\" (a "/" in a path).
_NORMAL_FORM = re.compile(
    # the host: one ending in a letter no number has (nearly all), or in dotted decimal, or with a last label
    # that starts with a letter
    r"(https?)://(?:[a-z0-9.\-]*[g-wyz\-]|"
    rf"{DOTTED_DECIMAL}|(?:[a-z0-9\-]*+\.)*+[a-z\-][a-z0-9\-]*+)(?::([1-9][0-9]{{0,4}}))?"
    # the path and the query: nothing of their WHATWG percent-encode sets (paths.py), no "\\"
    r"/[^\x00-\x20\x7f-\U0010ffff\"#<>?\\`{}]*+(?:\?[^\x00-\x20\x7f-\U0010ffff\"#<>'\\]*+)?"
)
_normal_match = _NORMAL_FORM.fullmatch


def check_url_characters(url: str) -> None:
    """ValueError for characters no request line or UTF-8 store can carry: NUL, or a lone surrogate.

    A lone surrogate is what Python makes of an undecodable byte in a command
    line argument; stored, it would make the crawl database unreadable.
    """
    if "\x00" in url:
        raise ValueError(f"URL contains a NUL character: {shown_url(url)!r}")
    if not url.isascii():
        try:
            url.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"URL is not valid Unicode (it holds a lone surrogate): {shown_url(url)!r}") from None


def parse_target(url: str) -> Target:
    """Split an absolute http(s) URL into its request target, or raise ValueError saying what is wrong with it."""
    match = _plain_match(url) if type(url) is str else None
    if match is not None:
        scheme, host, port_text, path, query = match.groups()
        try:
            host = normal_host(host)
        except ValueError:  # a name that ends in a number and is no IPv4 address: the general path says so
            return _parse_target_general(url)
        port = int(port_text) if port_text is not None else None
        if host and (port is None or port <= 65535):
            origin, host_header = _origin(scheme.lower(), host, port)
            if not path:
                path = "/"
            if (url.isascii() and ("/." not in path or not dot_segment(path))
                    and ("%" not in url or not (lower_escape(url) or ("/%2" in path and dot_segment(path))))):  # no rule applies (and no NUL)
                return Target(origin, host_header, path if query is None else f"{path}?{query}")
            check_url_characters(url)
            return Target(origin, host_header, path_and_query(path, query))
    return _parse_target_general(url)


def _parse_target_general(url: str) -> Target:
    if not isinstance(url, str):
        raise ValueError(f"URL must be a str, not {type(url).__name__}")
    parts = _split(url)
    origin, host_header = _origin(parts.scheme, parts.host, parts.port)
    return Target(origin, host_header, parts.target)


def normal_or_none(url: str | None) -> str | None:
    """:func:`normalize_url` of ``url``, or None for None and for what it refuses: the frontier's
    form of a link that may lead nowhere."""
    if url is None:
        return None
    try:
        return normalize_url(url)
    except ValueError:
        return None


def normalize_url(url: str) -> str:
    """The form a URL is stored and de-duplicated in.

    Scheme and host are lower-cased (RFC 3986 6.2.2.1), trailing dots of the
    host dropped and a non-ASCII host name written as IDNA A-labels; the
    default port (80 for http, 443 for https) and the fragment are dropped, an
    empty path becomes "/" (6.2.3) and dot segments are removed (5.2.4).  IPv6
    hosts keep their brackets.  Path and query keep their case and their
    escapes (servers may tell them apart), the escapes' hex digits in upper
    case (6.2.2.1); a character a request line cannot carry (non-ASCII, a
    space) is percent-encoded as UTF-8, so ``http://h/ü``, ``http://h/%c3%bc``
    and ``http://h/%C3%BC`` are one URL.  The path of the normal
    form is what :func:`parse_target` sends.  Normalising a normalised URL
    gives it back unchanged.

    Raises:
        ValueError: for anything but an absolute http:// or https:// URL with
            a host, or a malformed one (a bad port, a broken IPv6 literal, a
            host IDNA cannot encode, a NUL character or a lone surrogate).
        TypeError: when ``url`` is not a str.
    """
    if type(url) is not str:  # a subclass of str compares equal to a str it is not: not remembered
        if not isinstance(url, str):
            raise TypeError(f"URL must be a str, not {type(url).__name__}")
        return _normal_form(url)
    normal = _normal_forms.get(url)
    if normal is None:
        normal = _normal_form(url)
        if len(_normal_forms) >= _MAX_NORMAL_FORMS:
            _normal_forms.clear()
        _normal_forms[url] = normal
    return normal


# A crawler meets each URL of a site again and again (every page's menu links to the same places),
# and the frontier normalises each link it is given: the normal forms of the URLs seen lately
# (up to _MAX_NORMAL_FORMS, then it starts again) are answered by a look-up.
_MAX_NORMAL_FORMS = 16384
_normal_forms: dict[str, str] = {}


def _normal_form(url: str) -> str:
    """normalize_url() of a str, not remembered."""
    # Most URLs a crawler meets (and every URL the frontier hands out) are in
    # normal form already; telling so by one regular expression is several
    # times faster than taking them apart.  _normalize_split() is the definition.
    match = _normal_match(url)
    if (match is not None and ("/." not in url or not dot_segment(url))
            and ("%" not in url or not (lower_escape(url) or ("/%2" in url and dot_segment(url))))):
        port = match.group(2)
        if port is None or (int(port) <= 65535 and int(port) != DEFAULT_PORTS[match.group(1)]):
            return url
    return _normalize_split(url)


def host_key(url: str) -> str:
    """The host a URL in normal form (:func:`normalize_url`) belongs to, as the frontier's per-host
    queues name it: the normal form up to its path, userinfo left out -- ``http://a.example``,
    ``https://b.example:8443``, ``http://[::1]:8080``.

    Two normal URLs have one key exactly when :func:`parse_target` gives them one Origin (the
    fetcher's per-host limit is per Origin), and a key is never taken apart again: it is a name.
    """
    authority = url.index("//") + 2
    path = url.find("/", authority)
    if path < 0:
        path = len(url)
    at = url.rfind("@", authority, path)
    return url[:path] if at < 0 else url[:authority] + url[at + 1:path]


def _normalize_split(url: str) -> str:
    """normalize_url() the long way round, for any URL."""
    parts = _split(url)
    host = bracketed(parts.host)
    if parts.port is not None and parts.port != DEFAULT_PORTS[parts.scheme]:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.target}"


def _split(url: str) -> _Parts:
    """The general path of parse_target and normalize_url: validate ``url`` and apply every rule."""
    check_url_characters(url)
    text = url.strip(C0_CONTROL_OR_SPACE)
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.translate(TAB_OR_NEWLINE)
    if "\\" in text and ambiguous_authority(text):
        # Browsers end the authority at a "\" (``http://u:p@a\x@b/`` goes to ``a``), RFC 3986
        # readers (urllib, curl) at the last "@" (to ``b``): a URL that tools send to two hosts is
        # refused; split_credentials has cut its userinfo where the browser does.
        raise ValueError(f"URL has a \\ in its authority: {shown_url(url)!r}")
    scheme_end = text.find(":") + 1
    if text[scheme_end:scheme_end + 3].replace("\\", "/") == "///":
        # An empty authority to RFC 3986 (browsers skip the slashes): a URL typed as a seed with
        # its host left out (http:///x) is refused rather than sent to the host "x".
        raise ValueError(f"URL has no host: {shown_url(url)!r}")
    try:
        text = special_form(text, None)
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"malformed URL {shown_url(url)!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"only absolute http:// and https:// URLs are supported, not {shown_url(url)!r}")
    try:
        host = authority(parts.netloc)[1].rstrip(".")
    except ValueError as exc:
        raise ValueError(f"URL has an invalid host: {shown_url(url)!r}: {exc}") from None
    if not host:
        raise ValueError(f"URL has no host: {shown_url(url)!r}")
    return _Parts(scheme, host, port, path_and_query(parts.path or "/", parts.query or empty_query(text)))


@functools.lru_cache(maxsize=4096)
def _origin(scheme: str, host: str, port: int | None) -> tuple[Origin, str]:
    """One Origin and Host header per host, shared by all its URLs: pending URLs stay small."""
    default_port = DEFAULT_PORTS[scheme]
    if port is None:
        port = default_port
    host_header = bracketed(host)
    if port != default_port:
        host_header = f"{host_header}:{port}"
    return Origin(scheme, host, port), host_header

r"""The URL rules, in one place: what a request sends, what the frontier stores, what a link resolves to.

A URL is an absolute http or https URL with a host (docs/guarantees.md, "URLs").  It
takes one of three forms, each made by one function of this module:

- :func:`parse_target` gives the fetcher its request target (the Origin key
  of the connection table, the Host header and the path);
- :func:`normalize_url` gives the form a URL is stored and de-duplicated in;
- :func:`absolute_url` gives the link an href of a page (or a ``Location``)
  leads to, as a browser would send it.

What each accepts, refuses and guarantees.  "=" means as the column before.

==================  =======================  ===========================  ===================================
rule                parse_target(url)        normalize_url(url)           absolute_url(href, base)
==================  =======================  ===========================  ===================================
accepts             an absolute http(s)      =                            any reference, resolved against
                    URL with a host                                       ``base`` as WHATWG resolves it
                                                                          (``_special_form``, then urljoin;
                                                                          ``base=""``: ``href`` must be
                                                                          absolute)
refuses, by         ValueError (a non-str    ValueError; TypeError for    None (never raises for the text of
                    too)                     a non-str                    a page; a lone surrogate in the
                                                                          path or query: UnicodeEncodeError)
... what            not http(s), no host,    =                            =; but it %-encodes NUL, keeps
                    a port not 0-65535, a                                 the host "." and ends the
                    broken IPv6 literal, a                                authority at a ``\`` as browsers
                    host WHATWG refuses                                   do, which the other two refuse
                    (a forbidden code point
                    ``% ^ | < > / \ @ [ ]``,
                    space or control once
                    %-decoded, a name IDNA
                    cannot encode, a name
                    ending in a number that
                    is no IPv4 address), a
                    ``\`` in the authority
                    with an "@" after it,
                    NUL, a lone surrogate
ends                C0 controls and space    =                            =
                    stripped
tab, CR, LF inside  removed                  =                            =
scheme              lower case; after it     =                            lower case; any number of "/"
                    "//", one "/" or none,                                or ``\`` after it (``///h/x`` is
                    ``\`` as "/"; three                                   ``h``); ``http:x`` is relative to
                    are an empty authority                                an http base, the host ``x`` to
                    (``http:///x``: no host)                              any other
host                %-decoded, lower case,   =                            =, trailing dots kept (WHATWG)
                    IDNA A-labels (UTS
                    #46), IPv4 in dotted
                    decimal (``0x7f.1`` is
                    ``127.0.0.1``), trailing
                    dots dropped
IPv6 literal        Origin.host bare, Host   in brackets, canonical       =
                    header in brackets;      (``[0:0::1]`` is ``[::1]``)
                    canonical (RFC 5952)
port                Origin: explicit; Host   default dropped, any other   =
                    header: default dropped  as a number (``:08080``)
userinfo            not in Host or target    dropped: never stored        %-encoded as WHATWG writes it,
                                                                          ``:`` of an empty password and
                                                                          an empty ``@`` dropped
path                at least "/"; ``\`` is   =                            =
                    "/" before the query
dot segments        removed (RFC 3986        =                            =
                    5.2.4); ``%2e`` is a
                    dot in them (WHATWG)
%-encoded as UTF-8  WHATWG's sets: any        =                            =
                    character but visible
                    ASCII, and ``" < > `
                    { }`` (path), ``" < >
                    '`` (query)
``%xx`` escapes     kept, in upper case      =                            kept as written
query               kept; an empty "?" too   =                            =
                    (WHATWG keeps it)
fragment            dropped                  =                            =
==================  =======================  ===========================  ===================================

Where they agree, they agree exactly (tests/test_url_rules.py holds them to
this table):

- ``parse_target(normalize_url(u)) == parse_target(u)``: the stored form asks
  for what the URL asked for, and ``normalize_url`` of a normal form is
  that form;
- when ``absolute_url(u, "")`` and ``normalize_url(u)`` both give a URL,
  ``normalize_url(absolute_url(u, "")) == normalize_url(u)``.  A link therefore lands in the frontier in the form its URL typed as a seed
  has, whichever the spelling of host, port, escapes or dot segments.

The rules behind the table:

- a host is read as the WHATWG host parser reads it (:func:`whatwg_host`,
  :func:`normal_host`): a non-ASCII name becomes IDNA A-labels as UTS #46
  maps it (``faß.de`` is ``xn--fa-hia.de``, as browsers send it), a name that
  ends in a number an IPv4 address;
- web-platform-tests' ``urltestdata.json`` is the reference
  (tests/test_url_rulebook.py): every http(s) case agrees, but for the
  differences listed there with their reasons;
- an existing ``%XX`` escape is kept, so ``/%C3%BC`` and ``/ü`` are one URL;
- an IPv6 literal goes in brackets wherever a host meets a port or a scheme
  (:func:`bracketed`);
- a redirect ``Location`` is decoded as UTF-8 first, Latin-1 only when that
  fails (:func:`decode_location`), as wget and curl read nginx's raw bytes;
  the fetcher follows it to :func:`redirect_url` (urljoin, fragment dropped:
  the next request's target is then parse_target's), the crawler reads it
  with :func:`absolute_url`;
- a proxy setting is read by :func:`parse_proxy`, and ``no_proxy`` by
  :class:`NoProxy` (curl's rules), with the same host rules; so is an
  allowed domain of a crawl, by :func:`domain_host`.

Each function has a fast path for the URLs no rule changes (nearly all of
them, one regular expression each, because each form's "nothing to change"
differs) and a general one built on urlsplit (and urljoin); the tests check
with hypothesis and on every href of the real corpus that the two always
agree.  absolute_url's fast paths take a base apart once (``_base_of``) and
resolve a plain relative path against it as urljoin would (``_merge``);
:class:`LinkResolver` adds a page's cache, by href without its fragment, and shares the
fast paths' answers among the pages of one directory.  ``normalize_url`` remembers the
normal forms of the URLs it met lately: a crawl meets a site's links on every page.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import re
from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import quote, unquote, urljoin, urlsplit

import idna

DEFAULT_PORTS = {"http": 80, "https": 443}


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


# An IPv4 address as WHATWG writes it, dotted decimal without leading zeros: the one host of the
# fast paths' regular expressions whose last label is a number (any other such host is another
# form of an IPv4 address, or none, and the general path says which).
_DOTTED_DECIMAL = r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"

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
    rf"{_DOTTED_DECIMAL}|(?:[a-z0-9\-]*+\.)*+[a-z\-][a-z0-9\-]*+)(?::([1-9][0-9]{{0,4}}))?"
    # the path and the query: nothing of their WHATWG percent-encode sets (below), no "\\"
    r"/[^\x00-\x20\x7f-\U0010ffff\"#<>?\\`{}]*+(?:\?[^\x00-\x20\x7f-\U0010ffff\"#<>'\\]*+)?"
)
_normal_match = _NORMAL_FORM.fullmatch

# What a path and a query percent-encode, as UTF-8: WHATWG's path and special-query
# percent-encode sets, which hold everything a request line cannot carry (RFC 9112 3.2: visible
# ASCII only) and what a browser encodes besides.  "%" itself is safe, so escapes already there
# stay as they are.  One home for both the request target and the link.
_PATH_UNSAFE = re.compile(r'[^\x21-\x7e]|["<>`{}]').search
_QUERY_UNSAFE = re.compile(r"[^\x21-\x7e]|[\"<>']").search
_PATH_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in '"<>`{}#?')
_QUERY_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in "\"<>'#")


def _percent_encoded(path: str, query: str | None) -> tuple[str, str | None]:
    """``path`` and ``query`` with what their WHATWG sets hold percent-encoded as UTF-8."""
    if _PATH_UNSAFE(path):
        path = quote(path, safe=_PATH_SAFE)
    if query and _QUERY_UNSAFE(query):
        query = quote(query, safe=_QUERY_SAFE)
    return path, query

# An escape with a lower-case hex digit: "%c3%bc" is "%C3%BC" (RFC 3986 6.2.2.1), and
# upper case is the form both are stored and sent in.
_lower_escape = re.compile(r"%(?:[a-f][0-9a-fA-F]|[0-9A-F][a-f])").search


def _upper_escape(match: re.Match[str]) -> str:
    return match.group().upper()


_escape = re.compile(r"%[0-9a-fA-F]{2}")

# A dot segment ("/./", "/../", or one at the end of the path), for all three
# forms; WHATWG reads "%2e" as a dot there too ("/%2e%2E/" is "/../").  Tried
# only where "/." or "%2" occurs, so that "/.well-known/" costs a search and
# not the long way round.  (No string it is tried on ends in a newline, so
# "\Z" and "$" are the same here.)
_dot_segment = re.compile(r"/(?:\.|%2[eE]){1,2}(?:[/?#]|\Z)").search
_DOT = frozenset([".", "%2e", "%2E"])
_DOUBLE_DOT = frozenset(a + b for a in _DOT for b in _DOT)

# What is stripped from both ends of a URL or an href: C0 controls and space, as
# the WHATWG URL standard says.  str.strip() would take Unicode spaces too
# ("/x\xa0" is a path with an NBSP, as the fast paths read it).
C0_CONTROL_OR_SPACE = "".join(map(chr, range(0x21)))

# Characters no host may hold once it is in A-labels (urlsplit lets them through).
_bad_host_char = re.compile(r"[\x00-\x20\x7f/\\@\[\]]").search


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


@functools.lru_cache(maxsize=4096)
def normal_host(host: str) -> str:
    """A host name as it goes on the wire, to the resolver and into the frontier.

    :func:`whatwg_host` (lower case, IDNA A-labels, an IPv4 address in any of
    its forms as dotted decimal), its trailing dots dropped.  A host with a ":"
    is an IPv6 literal (a ``resolve`` key's ``[::1]``, urlsplit's ``::1``):
    only lower-cased, as it always was here; the URL rules write it in its
    canonical form before it comes here (:func:`_authority`).

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


def remove_dot_segments(path: str) -> str:
    """An absolute path without "." and ".." segments, as WHATWG removes them: ``/a/./b/../c`` -> ``/a/c``.

    RFC 3986 5.2.4, and "%2e" (either case) read as a dot: ``/a/%2E%2e`` is ``/``.
    """
    segments = path.split("/")  # segments[0] is the "" before the leading "/"
    kept: list[str] = []
    for segment in segments[1:]:
        if segment in _DOUBLE_DOT:
            if kept:
                kept.pop()
        elif segment not in _DOT:
            kept.append(segment)
    if segments[-1] in _DOT or segments[-1] in _DOUBLE_DOT:
        kept.append("")  # "/a/.." is the directory "/", not "/a" minus its name
    return "/" + "/".join(kept)


def _path_and_query(path: str, query: str | None) -> str:
    """The request target of a path (at least "/") and a query (None for none, "" for an empty one,
    which WHATWG keeps: ``/x?``): both rules applied."""
    if ("/." in path or "%2" in path) and _dot_segment(path):
        path = remove_dot_segments(path)
    path, query = _percent_encoded(path, query)
    target = path if query is None else f"{path}?{query}"
    if "%" in target and _lower_escape(target):
        target = _escape.sub(_upper_escape, target)
    return target


def decode_location(raw: bytes) -> str:
    """A redirect's ``Location`` value as text: UTF-8 when it is valid UTF-8, else Latin-1.

    nginx sends ``return 301 /dir/ünï.html;`` as raw UTF-8 bytes, and wget and
    curl follow it to ``/dir/%C3%BCn%C3%AF.html``; Latin-1 never fails, so it
    keeps whatever else a server sends.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def redirect_url(location: str, base: str) -> tuple[str, str]:
    """Where the fetcher's redirect from ``base`` goes, and that URL's scheme (lower case, to check it is http(s)).

    The ``Location`` joined to the URL that answered it (urljoin, the value's
    ends stripped), its fragment dropped; the request target of the next hop
    is then :func:`parse_target`'s.  The crawler reads the same header through
    :func:`absolute_url`, which also cleans what a browser would (see the
    table): the two agree once :func:`normalize_url` has had both.
    """
    location = location.strip()
    url = urljoin(base, location)
    url = url.split("#", 1)[0] if "#" in url else url
    if "?" not in url and "?" in location.partition("#")[0]:
        url += "?"  # urljoin drops an empty query ("/x?"), which the next request keeps
    return url, urlsplit(url).scheme.lower()


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
            if (url.isascii() and ("/." not in path or not _dot_segment(path))
                    and ("%" not in url or not (_lower_escape(url) or ("/%2" in path and _dot_segment(path))))):  # no rule applies (and no NUL)
                return Target(origin, host_header, path if query is None else f"{path}?{query}")
            check_url_characters(url)
            return Target(origin, host_header, _path_and_query(path, query))
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
    if (match is not None and ("/." not in url or not _dot_segment(url))
            and ("%" not in url or not (_lower_escape(url) or ("/%2" in url and _dot_segment(url))))):
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
        text = text.translate(_TAB_OR_NEWLINE)
    if "\\" in text and _ambiguous_authority(text):
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
        text = _special_form(text, None)
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"malformed URL {shown_url(url)!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"only absolute http:// and https:// URLs are supported, not {shown_url(url)!r}")
    try:
        host = _authority(parts.netloc)[1].rstrip(".")
    except ValueError as exc:
        raise ValueError(f"URL has an invalid host: {shown_url(url)!r}: {exc}") from None
    if not host:
        raise ValueError(f"URL has no host: {shown_url(url)!r}")
    return _Parts(scheme, host, port, _path_and_query(parts.path or "/", parts.query or _empty_query(text)))


def _empty_query(url: str) -> str | None:
    """"" when ``url`` (with no query but maybe an empty one) ends its path with a "?", else None:
    urlsplit gives "" for both."""
    return "" if "?" in url.partition("#")[0] else None


# -- the WHATWG reading of an http(s) reference, for the general paths -------------

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")


def _special_form(href: str, base_scheme: str | None) -> str:
    """``href`` (tabs and newlines removed, ends stripped) written so that urlsplit and urljoin read it
    as the WHATWG URL parser reads an http(s) reference against a base of ``base_scheme`` (None: no base).

    A "\\" before the query is a "/"; any number of slashes after ``http:`` start the authority
    (``http:///h/x`` and ``///h/x`` are ``http://h/x``); ``http:x`` is a relative reference
    against an http base and the host ``x`` against any other.  Anything but http(s) is left as it is.
    """
    match = _SCHEME.match(href)
    if match is None:
        if base_scheme is None:
            return href
        scheme, rest = base_scheme, href
    else:
        scheme = match.group(1).lower()
        if scheme not in DEFAULT_PORTS:
            return href
        rest = href[match.end():]
    if "\\" in rest:
        rest = _backslashes_as_slashes(rest)
    if rest.startswith("//") or (match is not None and scheme != base_scheme):
        rest = rest.lstrip("/")
        at = rest.rfind("@", 0, _authority_end(rest))
        if at > 0 and ("[" in rest[:at] or "]" in rest[:at]):
            # WHATWG percent-encodes them in a userinfo; urlsplit would take them for an IPv6 literal's
            rest = rest[:at].replace("[", "%5B").replace("]", "%5D") + rest[at:]
        return f"{scheme}://{rest}"
    if match is not None and _SCHEME.match(rest):
        return f"./{rest}"  # "http:a:b" against an http base is the path "a:b", not the scheme "a"
    return rest


def _backslashes_as_slashes(text: str) -> str:
    """``text`` with each "\\" before its query or fragment written as "/" (WHATWG, special schemes)."""
    end = _query_start(text)
    return text[:end].replace("\\", "/") + text[end:]


def _first_of(text: str, delimiters: str) -> int:
    """Where the first of ``delimiters`` stands in ``text``, else its end."""
    end = len(text)
    for delimiter in delimiters:
        found = text.find(delimiter, 0, end)
        if found >= 0:
            end = found
    return end


def _query_start(text: str) -> int:
    """Where the query or fragment of a reference starts: its first "?" or "#", else its end."""
    return _first_of(text, "?#")


# A dot segment with an escaped dot in a path ("%2e", "%2E%2e", ".%2e", ...).
_escaped_dot_segment = re.compile(r"(?:(?<=/)|\A)(?=[.%]*%2[eE])(?:\.|%2[eE]){1,2}(?=/|\Z)")


def _literal_dots(match: re.Match[str]) -> str:
    return "." * (len(match.group()) - 2 * match.group().count("%"))


def _authority_end(text: str) -> int:
    """Where the authority at the start of ``text`` ends: at its first "/", "?" or "#"."""
    return _first_of(text, "/?#")


def _ambiguous_authority(url: str) -> bool:
    """True when an http(s) ``url`` has a "\\" in its authority with an "@" after it: a browser ends
    the authority at the "\\", urlsplit and curl take the host after the "@"."""
    match = _SCHEME.match(url)
    rest = url[match.end():].lstrip("/\\") if match is not None else url
    end = _authority_end(rest)
    backslash = rest.find("\\", 0, end)
    return backslash >= 0 and rest.find("@", backslash, end) >= 0


def _authority(netloc: str) -> tuple[str, str]:
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


# WHATWG's userinfo percent-encode set, plus everything non-ASCII.
_USERINFO_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in '"#<>?`{}/:;=@[\\]^|')


def _userinfo(userinfo: str) -> str:
    """A userinfo as WHATWG writes it before the host: percent-encoded, an empty password without
    its ":", nothing at all for an empty one (``http://:@h/`` is ``http://h/``)."""
    user, _, password = userinfo.partition(":")
    user = quote(user, safe=_USERINFO_SAFE)
    if password:
        return f"{user}:{quote(password, safe=_USERINFO_SAFE)}@"
    return f"{user}@" if user else ""


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


# -- the absolute link ---------------------------------------------------------

_TAB_OR_NEWLINE = {9: None, 10: None, 13: None}


# The shape of most URLs on real pages, already in the form the general path
# below would give them: lower-case http(s), a plain lower-case host that does not
# end in a number (but in dotted decimal), maybe a port, no userinfo, nothing to percent-encode, no ";" in the
# path (against a base, urljoin reads one as the start of the last segment's
# params: "/a;" is "/a", "/.;p" is "/;p"). For these the answer is the match
# itself (fragment cut, "/" for an empty path), about eight times cheaper than
# urljoin + urlsplit + urlunsplit; tests/test_url_rules.py and
# tests/test_resolve_refs.py check that both paths agree.
_FAST = re.compile(
    # the host: labels, the last one starting with a letter (nearly all hosts), or an IPv4 address in
    # dotted decimal; a last label that starts with a digit may be a number, and a host ending in a
    # number is another form of an IPv4 address, or none: the general path says which
    r"(https?://(?:(?:[a-z0-9_-]++\.)*+[a-z_-][a-z0-9_-]*+|"
    rf"{_DOTTED_DECIMAL})(?::([1-9][0-9]{{0,4}}))?)"
    r"(/[A-Za-z0-9\-._~!$&'()*+,=:@%/]*)?"
    r"(\?[A-Za-z0-9\-._~!$&()*+,;=:@%/?]*)?"
    r"(?:#.*)?\Z",
    re.DOTALL,
)


# A relative-path reference that needs nothing of urljoin but its path merge and
# nothing of the general path after it: no scheme (no ":"), no ";" (as in
# _FAST), nothing to percent-encode, and a path of at least one character, not
# starting with "/".  Sphinx's "../api/mod.html#mod.Class.meth",
# "genindex.html" and "./" are of this shape.
_RELATIVE = re.compile(
    r"([A-Za-z0-9\-._~!$&'()*+,=@%][A-Za-z0-9\-._~!$&'()*+,=@%/]*)"
    r"(?:\?([A-Za-z0-9\-._~!$&()*+,;=:@%/?]*))?"
    r"(?:#.*)?\Z",
    re.DOTALL,
)


class _Base(NamedTuple):
    """A base URL of the fast shape (``_FAST``), taken apart once for all the hrefs resolved against it."""

    origin: str  # "scheme://host[:port]", as the result writes it
    directory: tuple[str, ...]  # the segments urljoin merges a relative path onto, dot segments resolved
    # What _relative made of the directory parts of paths ("../api/" -> "https://h/en/api/"), for
    # the next href in them (up to _MAX_PREFIXES, then it starts again: every page of a site with
    # <base href="/"> has this one base); not for hashing (a _Base is looked up by its base URL).
    prefixes: dict[str, str]


_MAX_PREFIXES = 256


@functools.lru_cache(maxsize=64)
def _base_of(base: str) -> _Base | None:
    """The parts of ``base`` the fast paths build on; None when it is not of the fast shape."""
    match = _FAST.match(base)
    if match is None or not _plain_port(*match.group(1, 2)):
        return None
    origin, _, path, _ = match.groups()
    # urljoin's directory of the base: its path up to the last "/", merged as a
    # path ending in "/" would be, less that last, empty segment.
    segments = (path or "/").split("/")[1:]
    segments[-1] = ""
    return _Base(origin, tuple(_merge((), segments)[:-1]), {})


def _plain_port(origin: str, port: str | None) -> bool:
    """True when the general path writes a ``_FAST`` match's port as it is: none, or one in range
    that is not the default (WHATWG drops it)."""
    return port is None or (int(port) <= 65535 and int(port) != (443 if origin[4] == "s" else 80))


def _merge(directory: tuple[str, ...], segments: list[str]) -> list[str]:
    """RFC 3986 5.2.3-5.2.4 (merge, remove dot segments) as urljoin does them: the path, less its leading "/".

    urljoin differs from the RFC in two ways kept here: it leaves out empty
    segments but the last ("a//b" is "a/b"), and a ".." beyond the root is
    dropped.  A "." or ".." at the end leaves a trailing "/".  "%2e" is a dot,
    as the general path reads it after urljoin (:func:`remove_dot_segments`).
    """
    stack = list(directory)
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        if segment in _DOUBLE_DOT:
            if stack:
                stack.pop()
        elif segment not in _DOT and (segment or i == last):
            stack.append(segment)
    if segments and (segments[-1] in _DOT or segments[-1] in _DOUBLE_DOT):
        stack.append("")
    return stack


def _relative(href: str, base: _Base) -> str | None:
    """A relative-path ``href`` (stripped) resolved against ``base`` as the general path would, or None
    when it is not of the shape of ``_RELATIVE`` and the general path must say."""
    match = _RELATIVE.match(href)
    if match is None:
        return None
    path, query = match.groups()
    cut = path.rfind("/") + 1
    name = path[cut:]
    # a last segment that leaves a "/" (a dot segment: at most 6 characters, "%2e%2e"), merged with the rest
    if len(name) <= 6 and (name in _DOT or name in _DOUBLE_DOT):
        url = f"{base.origin}/{'/'.join(_merge(base.directory, path.split('/')))}"
    else:
        # Any other last segment is appended to what the segments before it leave (_merge is a
        # fold, and only the last segment is special), and a page's hrefs share a few of those.
        head = path[:cut]
        prefix = base.prefixes.get(head)
        if prefix is None:
            if len(base.prefixes) >= _MAX_PREFIXES:  # one base for many pages (<base href="/">, a sitemap)
                base.prefixes.clear()
            prefix = base.prefixes[head] = f"{base.origin}/{'/'.join(_merge(base.directory, head.split('/')))}"
        url = prefix + name
    return url if query is None else f"{url}?{query}"


def absolute_url(href: str, base: str) -> str | None:
    """``href`` resolved against ``base`` as a fetchable http(s) URL without fragment, or None.

    The link a page's ``href``, ``src`` or ``action`` (or a redirect's
    ``Location``) leads to, made fetchable the way a browser would send it:
    ends stripped and tabs and newlines inside removed, resolved as the WHATWG
    URL parser resolves it (``\\`` as "/", ``%2e`` dot segments, the host read
    by the WHATWG host parser, the default port dropped), the path and query percent-encoded
    as UTF-8 with the WHATWG sets.  See the table in the module docstring.
    ``base=""`` takes ``href`` as it is.  For the many hrefs of one page,
    :class:`LinkResolver` gives the same answers at a fraction of the cost.

    Returns:
        The URL, or None when it is no http(s) URL with a valid host and port.
    """
    href = href.strip(C0_CONTROL_OR_SPACE)
    url = _fast_url(href, base, _base_of(base) if base else None)
    return url if url is not None else _absolute_general(href, base)


def _fast_url(href: str, base: str, parsed: _Base | None) -> str | None:
    """``absolute_url`` of a stripped ``href`` by the fast paths: absolute, protocol-relative,
    root-relative and relative-path hrefs of the common shapes; None where the general path must say.

    ``parsed`` is ``_base_of(base)`` (None for ``base=""``), taken apart once by the caller.  An
    answer depends on nothing of ``base`` but ``parsed``'s origin and directory when ``parsed`` is
    not None, but for an empty or fragment-only ``href`` (the page itself): :class:`LinkResolver`
    shares the others between pages on this ground.
    """
    if href.startswith(("https://", "http://")):
        joined: str | None = href
    elif not href or href[0] == "#":  # the page itself (hrefs="#", "#top": one a page, many on wikis)
        joined = base if parsed is not None else None
    elif href.startswith("//"):
        joined = base[: base.find(":") + 1] + href if base.startswith(("https:", "http:")) else None
    elif href.startswith("/"):
        joined = parsed.origin + href if parsed is not None else None
    else:
        return _relative(href, parsed) if parsed is not None else None
    if joined is not None:
        match = _FAST.match(joined)
        if match:
            origin, port, path, query = match.groups()
            if (port is None or _plain_port(origin, port)) and (
                    path is None or ("/." not in path and "/%2" not in path) or not _dot_segment(path)):
                return f"{origin}{path or '/'}{query or ''}"
    return None


class LinkResolver:
    """``resolve(href)`` is ``absolute_url(href, base)`` for the hrefs of one page, each distinct one resolved once.

    Pages link to a few hundred places through thousands of hrefs that differ
    only in their fragment (``api.html#a``, ``api.html#b``, ``#top``): the
    answers are kept by the href up to its first "#", where its fragment
    starts (stripping the ends takes no "#" away, and what follows it changes
    no answer).  The "#" itself stays in the key: before it, "a " is "a%20" where
    a lone "a " is "a", and urljoin answers a fragment-only href with the base
    re-serialised (``http://h/p;`` becomes ``http://h/p``) but an empty one
    with the base as written.

    The pages of one directory of a site link to the same places by the same
    hrefs (a sidebar, a menu): what the fast paths answer depends on the base's
    origin and directory alone (``_fast_url``), so those answers are kept for
    every page of that directory (``_directory_cache``); the general path's go
    in the page's own cache, which grows with the page's hrefs (one resolver
    a page).
    """

    __slots__ = ("_cache", "_parsed", "_shared", "base")

    def __init__(self, base: str) -> None:
        self.base = base
        self._cache: dict[str, str | None] = {}
        parsed = self._parsed = _base_of(base) if base else None
        shared = _directory_cache(parsed.origin, parsed.directory) if parsed is not None else self._cache
        if len(shared) >= _DIRECTORY_HREFS:  # checked a page, not an href: a page adds its own at most
            shared.clear()
        self._shared = shared

    def resolve(self, href: str) -> str | None:
        """The absolute URL ``href`` leads to from this page (see :func:`absolute_url`), or None.

        A method, not ``__call__``: the bound method is called about twice as fast.
        """
        if "#" in href:
            href = href[: href.index("#") + 1]
        # get(), not "in" and then [], nor try/except KeyError: a parse thread starting a page of this
        # directory may clear the shared answers in between, and on real pages most hrefs are new.
        url = self._shared.get(href)  # a shared answer is never None
        if url is not None:
            return url
        cache = self._cache
        if href in cache:
            return cache[href]
        stripped = href.strip(C0_CONTROL_OR_SPACE)
        url = _fast_url(stripped, self.base, self._parsed)
        if url is None:
            url = cache[href] = _absolute_general(stripped, self.base)
        elif not stripped or stripped[0] == "#":  # the page itself: this page's answer, not its directory's
            cache[href] = url
        else:
            self._shared[href] = url
        return url


# A directory's hrefs kept, when a page starts, at most, and the directories: a parse process keeps
# ~64 x 2048 answers (about 30 MB) and the hrefs of the pages it is reading, however many sites it parses.
_DIRECTORY_HREFS = 2048


@functools.lru_cache(maxsize=64)
def _directory_cache(origin: str, directory: tuple[str, ...]) -> dict[str, str | None]:
    """The fast paths' answers (never None) by href (cut after its "#") against one origin and
    directory, for all its pages."""
    return {}


def _absolute_general(href: str, base: str) -> str | None:
    """``absolute_url`` for any href (already stripped): read as WHATWG reads it (``_special_form``),
    urljoin, then check the host and percent-encode."""
    if "\t" in href or "\n" in href or "\r" in href:
        # removed before anything else reads the href, as the WHATWG URL parser does
        href = href.translate(_TAB_OR_NEWLINE)
    if "\\" in href or href.startswith("//") or href[:4].lower() == "http":  # else _special_form changes nothing
        base_scheme = base[: base.find(":")].lower() if base else None
        href = _special_form(href, base_scheme if base_scheme in DEFAULT_PORTS else None)
    if "%2" in href:
        # urljoin merges only literal dots: "%2e/.." is "" to WHATWG, and the segment "%2e" less to urljoin
        href = _escaped_dot_segment.sub(_literal_dots, href[:_query_start(href)]) + href[_query_start(href):]
    try:
        parts = urlsplit(urljoin(base, href) if base else href)
        scheme = parts.scheme
        if scheme != "http" and scheme != "https":
            return None
        port = parts.port  # ValueError unless empty or 0-65535
        userinfo, host = _authority(parts.netloc)
    except ValueError:
        return None
    if not host:
        return None
    netloc = bracketed(host)
    if port is not None and port != DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    if userinfo:
        netloc = _userinfo(userinfo) + netloc
    path = parts.path or "/"
    if ("/." in path or "%2" in path) and _dot_segment(path):
        path = remove_dot_segments(path)  # urljoin leaves those of an absolute href, and every "%2e"
    query: str | None = parts.query
    if not query:
        # urlsplit (and urljoin) lose an empty query, which WHATWG keeps: the href's own, or the
        # base's when the href is no more than a fragment
        reference = href.partition("#")[0]
        query = _empty_query(reference if reference or not base else base)
    path, query = _percent_encoded(path, query)
    return f"{scheme}://{netloc}{path}" if query is None else f"{scheme}://{netloc}{path}?{query}"


# -- allowed domains -------------------------------------------------------------

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


# -- proxies ---------------------------------------------------------------------


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
    authorization = _basic(parts.username, parts.password) if parts.username is not None else None
    return Proxy(host, port, f"{bracketed(host)}:{port}", authorization)


def _basic(user: str, password: str | None) -> str:
    """The value of an ``Authorization`` (or ``Proxy-Authorization``) header for the userinfo
    ``user:password`` of a URL: each part percent-decoded as UTF-8, ``Basic`` (RFC 7617)."""
    token = base64.b64encode(f"{unquote(user)}:{unquote(password or '')}".encode()).decode("ascii")
    return f"Basic {token}"


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its userinfo, and the ``Authorization`` value that userinfo stands for
    (``Basic``, as curl and browsers send ``http://user:pass@host/``), None when it has none.

    The one place that takes credentials out of a URL: what a user types as
    ``user:pass@`` is sent as a header to that origin, and the URL that is
    stored, recorded and logged carries no password.  The rest of ``url`` is
    left as written; a URL that the URL rules refuse is returned as it is.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, None
    end = len(rest)
    for delimiter in "/\\?#":  # a "\\" ends an http(s) authority too, as browsers read it
        found = rest.find(delimiter)
        if found >= 0:
            end = min(end, found)
    # The last "@" of the authority: a password may hold an unescaped one, and urlsplit takes the host after it.
    userinfo, at, hostport = rest[:end].rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    bare = f"{scheme}{sep}{hostport}{rest[end:]}"
    # "http://@h/" and "http://:@h/" carry no credentials: browsers send no header for them.
    return bare, _basic(user, password) if user or password else None


#: The longest URL an error message repeats: a line of a seeds file may be megabytes long.
_SHOWN_LENGTH = 200


def shown_url(url: str) -> str:
    """``url`` as an error message may repeat it: the password of a userinfo masked (``user:***@``),
    and cut to 200 characters.  The password is taken to end at the last "@" of the whole URL,
    where a URL's rules end it earlier: a password may hold an unescaped "@" or "/", and a message
    that masks a little too much is better than one that shows a little of a password."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hostport = rest.rpartition("@")
    if at and ":" in userinfo:
        url = f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{hostport}"
    return url if len(url) <= _SHOWN_LENGTH else url[:_SHOWN_LENGTH] + "..."


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


# -- traps: what a crawl refuses or rewrites before a URL is stored ---------------------------------
#
# The frontier (crawl/frontier/traps.py) applies these to the normal form of every link it is given;
# they live here because they are URL rules: what a parameter's name is, what a path segment is.


class QueryCleaner:
    """Drops the query parameters, and the ``;name=value`` path parameters, whose names match
    ``patterns``: names compared without regard to case (``SID`` is ``sid``) and as written (``s%69d`` is not ``sid``),
    a ``*`` in a pattern standing for any characters of a name (``utm_*``).  Session IDs then do not make a new URL of every
    response: ``/a?sid=1``, ``/a;jsessionid=2`` and ``/a`` are one URL.

    Only what is dropped changes: the other parameters keep their order, spelling and repeats
    (``?a=1&a=2``), and a URL with nothing to drop is returned as it is.  A query left empty goes
    with its ``?``.

    w3lib's ``url_query_cleaner`` (what Scrapy users know) matches names exactly, drops repeated
    keys and empty pairs unless told not to, and knows no path parameters; measured on a crawl's
    links it was no faster than this (docs/crawler.md, "Traps"), so it is not used.

    Raises:
        ValueError: for a pattern that is not a non-empty str without "&", "=", ";", "#", "/", "?",
            "[", "]" or a space (``*`` is the one wildcard), or for a str given instead of patterns.
    """

    __slots__ = ("_find", "_match", "patterns")

    def __init__(self, patterns: Iterable[str]) -> None:
        if isinstance(patterns, str):
            raise ValueError(f"patterns must be a sequence of parameter names, not the str {patterns!r}")
        kept: list[str] = []
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern or any(c in pattern for c in "&=;#/?[] \t"):
                raise ValueError(f"a parameter name pattern must be a non-empty str without & = ; # / ? [ ] or "
                                 f"spaces, not {pattern!r}")
            kept.append(pattern)
        self.patterns = tuple(dict.fromkeys(kept))
        # One expression for every pattern: a name is what stands between a separator and "=", "&",
        # ";", "#" or the end, so ``utm_*`` never matches inside ``xutm_a``.
        names = "|".join(_NAME_CHARS.join(re.escape(part) for part in pattern.split("*")) for pattern in self.patterns)
        self._match = re.compile(f"(?:{names})\\Z", re.IGNORECASE).match if names else None
        # A URL that names none of them (nearly every URL) costs one search, not a look at each parameter.
        self._find = re.compile(f"[?&;](?:{names})(?:[=&;#]|$)", re.IGNORECASE).search if names else None

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def __repr__(self) -> str:
        return f"QueryCleaner({list(self.patterns)!r})"

    def matches(self, name: str) -> bool:
        """Whether a parameter called ``name`` (as written in the URL) is dropped."""
        return self._match is not None and self._match(name) is not None

    def clean(self, url: str) -> str:
        """``url`` without the matching parameters (``url`` itself when none matches)."""
        if self._find is None or ("?" not in url and ";" not in url) or self._find(url) is None:
            return url
        url, hash_, fragment = url.partition("#")
        base, question, query = url.partition("?")
        if ";" in base:
            base = self._clean_path(base)
        if question:
            kept = [pair for pair in query.split("&") if not self.matches(pair.partition("=")[0])]
            if len(kept) < query.count("&") + 1:
                query = "&".join(kept)
                question = "?" if query else ""
        return f"{base}{question}{query}{hash_}{fragment}"

    def _clean_path(self, base: str) -> str:
        """The scheme, authority and path of a URL, the path's matching ``;`` parameters dropped."""
        scheme_end = base.find("//")
        start = base.find("/", scheme_end + 2) if scheme_end >= 0 else 0
        if start < 0:
            return base
        segments = base[start:].split("/")
        for i, segment in enumerate(segments):
            if ";" in segment:
                name, *params = segment.split(";")
                kept = [param for param in params if not self.matches(param.partition("=")[0])]
                if len(kept) < len(params):
                    segments[i] = ";".join([name, *kept])
        return base[:start] + "/".join(segments)


#: What a ``*`` of a QueryCleaner pattern stands for: any characters a parameter's name can have.
_NAME_CHARS = "[^&=;#/?]*"


def path_repeats(url: str) -> int:
    """How many times the most frequent segment of ``url``'s path occurs in it, anywhere: 3 for
    ``/a/b/a/b/a/b/`` (and for ``/a/a/a`` and ``/a/x/a/y/a``), 1 for ``/a/b/c``, 0 for ``/``.

    Segments are the non-empty texts between slashes, as written (``;`` parameters included),
    before the query.  Counting them anywhere, not only side by side, is what catches relative
    links that grow a path: Heritrix's PathologicalPathDecideRule counts identical segments in a
    row (``/a/a/a``), Nutch's default regex-urlfilter a segment every other place
    (``/a/x/a/y/a/``), and a site whose pages link ``a/`` and ``b/`` grows paths that neither sees
    (``/a/b/b/a/a/b/a/b/b/...``: binary words can go on for ever without three repeats in a row).
    Internet Archive's Zeno counts as this does.
    """
    scheme_end = url.find("//")
    start = url.find("/", scheme_end + 2) if scheme_end >= 0 else 0
    if start < 0:
        return 0
    end = len(url)
    for mark in "?#":
        at = url.find(mark, start)
        if 0 <= at < end:
            end = at
    path = url[start:end]
    if path.count("/") <= 1:
        return 1 if len(path) > 1 else 0
    segments = [segment for segment in path.split("/") if segment]
    if len(set(segments)) == len(segments):
        return 1 if segments else 0
    counts: dict[str, int] = {}
    for segment in segments:
        counts[segment] = counts.get(segment, 0) + 1
    return max(counts.values())

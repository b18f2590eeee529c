"""The absolute link: where an href of a page, or a redirect's ``Location``, leads.

:func:`absolute_url` resolves a reference as the WHATWG URL parser does, made
fetchable the way a browser would send it; :func:`redirect_url` is the
fetcher's own reading of a ``Location`` (urljoin, fragment dropped), which
:func:`decode_location` has decoded (UTF-8 first, Latin-1 when that fails, as
wget and curl read nginx's raw bytes).

absolute_url's fast paths take a base apart once (``_base_of``) and resolve a
plain relative path against it as urljoin would (``_merge``);
:class:`LinkResolver` adds a page's cache, by href without its fragment, and
shares the fast paths' answers among the pages of one directory.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple
from urllib.parse import quote, urljoin, urlsplit

from .hostnames import DOTTED_DECIMAL, authority, bracketed
from .paths import DOT, DOUBLE_DOT, dot_segment, percent_encoded, remove_dot_segments
from .reading import C0_CONTROL_OR_SPACE, DEFAULT_PORTS, TAB_OR_NEWLINE, empty_query, query_start, special_form


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


# A dot segment with an escaped dot in a path ("%2e", "%2E%2e", ".%2e", ...).
_escaped_dot_segment = re.compile(r"(?:(?<=/)|\A)(?=[.%]*%2[eE])(?:\.|%2[eE]){1,2}(?=/|\Z)")


def _literal_dots(match: re.Match[str]) -> str:
    return "." * (len(match.group()) - 2 * match.group().count("%"))


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
    rf"{DOTTED_DECIMAL})(?::([1-9][0-9]{{0,4}}))?)"
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
        if segment in DOUBLE_DOT:
            if stack:
                stack.pop()
        elif segment not in DOT and (segment or i == last):
            stack.append(segment)
    if segments and (segments[-1] in DOT or segments[-1] in DOUBLE_DOT):
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
    if len(name) <= 6 and (name in DOT or name in DOUBLE_DOT):
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
    as UTF-8 with the WHATWG sets.  See the table in the package's docstring
    (niofetcher/urls/__init__.py).
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
                    path is None or ("/." not in path and "/%2" not in path) or not dot_segment(path)):
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
    """``absolute_url`` for any href (already stripped): read as WHATWG reads it (``special_form``),
    urljoin, then check the host and percent-encode."""
    if "\t" in href or "\n" in href or "\r" in href:
        # removed before anything else reads the href, as the WHATWG URL parser does
        href = href.translate(TAB_OR_NEWLINE)
    if "\\" in href or href.startswith("//") or href[:4].lower() == "http":  # else special_form changes nothing
        base_scheme = base[: base.find(":")].lower() if base else None
        href = special_form(href, base_scheme if base_scheme in DEFAULT_PORTS else None)
    if "%2" in href:
        # urljoin merges only literal dots: "%2e/.." is "" to WHATWG, and the segment "%2e" less to urljoin
        href = _escaped_dot_segment.sub(_literal_dots, href[:query_start(href)]) + href[query_start(href):]
    try:
        parts = urlsplit(urljoin(base, href) if base else href)
        scheme = parts.scheme
        if scheme != "http" and scheme != "https":
            return None
        port = parts.port  # ValueError unless empty or 0-65535
        userinfo, host = authority(parts.netloc)
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
    if ("/." in path or "%2" in path) and dot_segment(path):
        path = remove_dot_segments(path)  # urljoin leaves those of an absolute href, and every "%2e"
    query: str | None = parts.query
    if not query:
        # urlsplit (and urljoin) lose an empty query, which WHATWG keeps: the href's own, or the
        # base's when the href is no more than a fragment
        reference = href.partition("#")[0]
        query = empty_query(reference if reference or not base else base)
    path, query = percent_encoded(path, query)
    return f"{scheme}://{netloc}{path}" if query is None else f"{scheme}://{netloc}{path}?{query}"

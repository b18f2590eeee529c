"""Cookies (``FetcherConfig.cookies``): one ``http.cookiejar.CookieJar`` for the fetcher.

The standard library's jar parses ``Set-Cookie`` and keeps RFC 6265's rules as browsers read them
(domain and host-only cookies, paths, ``Secure``, ``Max-Age``/``Expires``), by code the standard
library maintains; it asks a request and a response for a few methods of urllib's, which the small
adapters below give it.  Its default policy and storage are made for a browser's few sites, not a
crawler's many hosts, so the jar here changes three things:

- a ``Domain`` attribute must name the host or a parent of it with a dot in it (RFC 6265 5.1.3,
  5.3 steps 5-6): an IP host names only itself, and a single-label host has no ``.local`` domain
  to share, as the library's RFC 2965 reading would give it;
- it keeps at most :data:`MAX_COOKIES_PER_DOMAIN` cookies a domain and :data:`MAX_COOKIES` in all
  (RFC 6265 6.1's least), so memory does not grow with the hosts ever seen;
- a request looks only at the cookies of its host and its parent domains, and expired cookies are
  found by their expiry's order: a request costs the same with 10 domains in the jar or 3,000.

The loop thread calls :func:`cookie_header` as it writes each hop's request and
:func:`store_cookies` as each hop's response comes, a redirect's included, so a cookie set by a
redirect goes with the next hop.  The jar locks itself: a program may read or change it
(``NIOFetcher.cookie_jar``) from any thread.
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import time
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:  # http.cookiejar imports urllib.request, http.client and email: only a fetcher with cookies pays
    from collections.abc import Callable
    from http.cookiejar import Cookie, CookieJar
    from threading import RLock

__all__ = ["MAX_COOKIES", "MAX_COOKIES_PER_DOMAIN", "cookie_header", "new_jar", "store_cookies"]

# RFC 6265 6.1 asks a user agent to keep at least this many; a crawler keeps no more.  A domain over
# its share loses the cookie set longest ago in it (see _evict); a jar over the total loses the
# cookies of the domain that went longest without one set or sent, all of them at once: a crawl
# meets most hosts once, so the host unused longest is the one least likely to come back, and the
# cookies of a site work together (a session without its companions is worth little).
MAX_COOKIES = 3000
MAX_COOKIES_PER_DOMAIN = 50


def new_jar() -> CookieJar:
    """An empty jar with the rules of this module (the module's docstring): host-only cookies kept
    to their host (RFC 6265, where the library's default would send them to subdomains, as
    Netscape's old rule did), ``Domain`` checked, the jar bounded."""
    return _jar_class()()


def _is_ip(host: str) -> bool:
    """Whether a request's host (as the jar reads it: lower case, without its port) is an IP literal."""
    try:
        ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    return True


def _may_name(host: str, domain: str) -> bool:
    """Whether a response from ``host`` may set a cookie for ``domain`` (its ``Domain`` attribute,
    without the leading dot), RFC 6265 5.1.3's domain-match: the host itself (``localhost`` may name
    ``localhost``), and a name's parent with a dot in it (a single label is a top-level domain; the
    library's policy, ``strict_domain``, refuses the ``co.uk`` kind besides), never an IP's."""
    if domain == host:
        return True
    return not _is_ip(host) and "." in domain and host.endswith("." + domain)


def _domains_to_ask(host: str, effective: str) -> list[str]:
    """The keys of the jar a request to ``host`` may find its cookies under: the host (a host-only
    cookie of a single-label host is kept under ``effective``, the library's ``host.local``), and
    the host and each parent domain (an IP host has none) with the dot the library puts before a
    ``Domain`` attribute and without it (a cookie a program set itself may lack it).  No parent of
    ``host.local``: ``local`` is no domain of the host's."""
    labels = [host] if _is_ip(host) else host.split(".")
    names = [".".join(labels[i:]) for i in range(len(labels))]
    if effective != host:  # an IPv6 literal has no dot either: the library adds .local to it too
        names.append(effective)
    return [key for name in names for key in (name, "." + name)]


@cache
def _jar_class() -> type[CookieJar]:
    """The jar's class, made on first use: it subclasses the standard library's, which only a
    fetcher with cookies imports."""
    # eff_request_host and request_host: how the library's jar reads a request's host; typeshed leaves them out
    from http.cookiejar import CookieJar, DefaultCookiePolicy, eff_request_host, request_host  # type: ignore[attr-defined]

    class _Policy(DefaultCookiePolicy):
        def __init__(self) -> None:
            super().__init__(strict_domain=True, strict_ns_domain=DefaultCookiePolicy.DomainStrictNonDomain)

        def set_ok_domain(self, cookie: Cookie, request: Any) -> bool:
            if cookie.domain_specified and not _may_name(request_host(request), cookie.domain.removeprefix(".")):
                return False
            return super().set_ok_domain(cookie, request)

        def return_ok_domain(self, cookie: Cookie, request: Any) -> bool:
            if cookie.domain_specified and cookie.domain.removeprefix(".") == request_host(request):
                return True  # the library would compare a single-label host's own domain with host.local
            return super().return_ok_domain(cookie, request)

    class _Jar(CookieJar):
        # The library's _cookies is {domain: {path: {name: Cookie}}}; here every dict in it is in the
        # order of last use (set, or sent for a domain), so the least recently used comes first.
        _cookies: dict[str, dict[str, dict[str, Cookie]]]
        _cookies_lock: RLock  # the library's internals this class works with, which typeshed leaves out
        _cookies_for_domain: Callable[[str, Any], list[Cookie]]

        def __init__(self) -> None:
            super().__init__(_Policy())
            self._count = 0
            # (expires, tie, cookie) of every cookie set with an expiry; one replaced or gone stays
            # until it comes up or the heap is rebuilt (set_cookie).
            self._expiries: list[tuple[float, int, Cookie]] = []
            self._ties = itertools.count()

        def __len__(self) -> int:
            return self._count

        def _cookies_for_request(self, request: Any) -> list[Cookie]:
            found: list[Cookie] = []
            for domain in _domains_to_ask(*eff_request_host(request)):
                if domain in self._cookies:
                    cookies = self._cookies_for_domain(domain, request)
                    if cookies:
                        self._cookies[domain] = self._cookies.pop(domain)
                        found.extend(cookies)
            return found

        def set_cookie(self, cookie: Cookie) -> None:
            with self._cookies_lock:
                paths = self._cookies.pop(cookie.domain, {})
                self._cookies[cookie.domain] = paths
                names = paths.pop(cookie.path, {})
                paths[cookie.path] = names
                self._count += names.pop(cookie.name, None) is None
                names[cookie.name] = cookie
                if cookie.expires is not None:
                    heapq.heappush(self._expiries, (cookie.expires, next(self._ties), cookie))
                    if len(self._expiries) > 2 * self._count + 64:
                        self._expiries = [entry for entry in self._expiries if self._holds(entry[2])]
                        heapq.heapify(self._expiries)
                self._evict(cookie.domain)

        def _holds(self, cookie: Cookie) -> bool:
            return self._cookies.get(cookie.domain, {}).get(cookie.path, {}).get(cookie.name) is cookie

        def _evict(self, domain: str) -> None:
            """Keep the bounds after a cookie was set in ``domain`` (MAX_COOKIES above).  The cookie
            set longest ago in a domain is the first name of its first path: both are in the order
            they were last set in, which is exact within a path and near enough across paths."""
            paths = self._cookies[domain]
            while sum(map(len, paths.values())) > MAX_COOKIES_PER_DOMAIN:
                path, names = next(iter(paths.items()))
                self.clear(domain, path, next(iter(names)))
            while self._count > MAX_COOKIES:
                self.clear(next(iter(self._cookies)))

        def clear(self, domain: str | None = None, path: str | None = None, name: str | None = None) -> None:
            with self._cookies_lock:
                before = self._domain_size(domain)
                super().clear(domain, path, name)
                if domain is None:
                    self._count = 0
                    self._expiries = []
                    return
                # The library leaves emptied dicts behind: a domain without cookies would stay a key.
                paths = self._cookies.get(domain, {})
                if path is not None and not paths.get(path, True):
                    del paths[path]
                if domain in self._cookies and not paths:
                    del self._cookies[domain]
                self._count -= before - self._domain_size(domain)

        def _domain_size(self, domain: str | None) -> int:
            return sum(map(len, self._cookies.get(domain, {}).values())) if domain is not None else 0

        def clear_expired_cookies(self) -> None:
            # add_cookie_header calls this on every request: the heap finds what expired where the
            # library's sweep reads the whole jar.
            with self._cookies_lock:
                now = time.time()
                while self._expiries and self._expiries[0][0] <= now:
                    cookie = heapq.heappop(self._expiries)[2]
                    if self._holds(cookie):
                        self.clear(cookie.domain, cookie.path, cookie.name)

    return _Jar


class _JarRequest:
    """What ``CookieJar`` reads of a request: its URL, scheme and host, and where the header goes."""

    __slots__ = ("cookie", "host", "origin_req_host", "type", "url")

    unverifiable = False  # every fetch is one the caller asked for, as a link a user followed

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.url = url
        self.type = parts.scheme
        self.host = parts.netloc
        self.origin_req_host = parts.hostname or ""
        self.cookie: str | None = None

    def get_full_url(self) -> str:
        return self.url

    def has_header(self, name: str) -> bool:
        return False  # a Cookie of the caller's own is never asked for here (see cookie_header)

    def get_header(self, name: str, default: str | None = None) -> str | None:
        return default

    def header_items(self) -> list[tuple[str, str]]:
        return []

    def add_unredirected_header(self, name: str, value: str) -> None:
        if name.lower() == "cookie":
            self.cookie = value


class _JarHeaders:
    """The response's headers as ``CookieJar.extract_cookies`` asks for them."""

    __slots__ = ("_headers",)

    def __init__(self, headers: Sequence[tuple[str, str]]) -> None:
        self._headers = headers

    def get_all(self, name: str, default: list[str] | None = None) -> list[str] | None:
        wanted = name.lower()
        found = [value for key, value in self._headers if key.lower() == wanted]
        return found or default


class _JarResponse:
    __slots__ = ("_headers",)

    def __init__(self, headers: Sequence[tuple[str, str]]) -> None:
        self._headers = _JarHeaders(headers)

    def info(self) -> _JarHeaders:
        return self._headers


def cookie_header(jar: CookieJar, url: str) -> str | None:
    """The ``Cookie`` value for a request to ``url``: the jar's cookies whose domain, path,
    ``Secure`` and expiry let them go there; None when none does."""
    request = _JarRequest(url)
    jar.add_cookie_header(request)  # type: ignore[arg-type]
    return request.cookie


def store_cookies(jar: CookieJar, url: str, headers: Sequence[tuple[str, str]]) -> None:
    """Keep the cookies a response to ``url`` set (those the jar's policy accepts from there)."""
    for name, _ in headers:
        if len(name) == 10 and name.lower() == "set-cookie":
            jar.extract_cookies(_JarResponse(headers), _JarRequest(url))  # type: ignore[arg-type]
            return

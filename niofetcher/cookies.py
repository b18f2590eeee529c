"""Cookies (``FetcherConfig.cookies``): one ``http.cookiejar.CookieJar`` for the fetcher.

The standard library's jar is RFC 6265 as browsers read it (domain and host-only cookies, paths,
``Secure``, ``Max-Age``/``Expires``, the public-suffix-free domain checks of its default policy),
kept and checked by code the standard library maintains; it asks a request and a response for a
few methods of urllib's, which the two small adapters below give it.  The loop thread calls
:func:`cookie_header` as it writes each hop's request and :func:`store_cookies` as each hop's
response comes, a redirect's included, so a cookie set by a redirect goes with the next hop.  The
jar locks itself: a program may read or change it (``NIOFetcher.cookie_jar``) from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # http.cookiejar imports urllib.request, http.client and email: only a fetcher with cookies pays
    from http.cookiejar import CookieJar

__all__ = ["cookie_header", "new_jar", "store_cookies"]


def new_jar() -> CookieJar:
    """A jar that keeps RFC 6265's host-only rule: a cookie set without ``Domain`` goes back to
    its host alone (the standard library's default policy would send it to subdomains too, as
    Netscape's old rule did)."""
    from http.cookiejar import CookieJar, DefaultCookiePolicy

    return CookieJar(DefaultCookiePolicy(strict_ns_domain=DefaultCookiePolicy.DomainStrictNonDomain))


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

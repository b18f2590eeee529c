"""NIOFetcherDownloadHandler: niofetcher as Scrapy's HTTP and HTTPS download handler.

    DOWNLOAD_HANDLERS = {
        "http": "niofetcher.scrapy.NIOFetcherDownloadHandler",
        "https": "niofetcher.scrapy.NIOFetcherDownloadHandler",
    }

Scrapy keeps everything it does above the download handler -- scheduling,
its download slots, the middlewares (retries, redirects, cookies,
decompression, proxies from the environment), the spiders -- and niofetcher
does the fetching: one selectors loop thread, sockets counted per (scheme,
host, port) and never more than ``CONCURRENT_REQUESTS_PER_DOMAIN`` of them,
however many requests Scrapy has in flight for that host.

This module is the only one of niofetcher that imports Scrapy, and nothing
imports it but Scrapy's setting: ``import niofetcher`` never loads Scrapy.

Theory of operation
-------------------
asyncio, not Twisted.  The handler awaits ``niofetcher.aio.AsyncFetcher``:
results cross from the loop thread into the event loop in batches, one
``call_soon_threadsafe`` per batch, and every ``download_request`` awaits its
own future.  That needs Scrapy on asyncio, which is its default since 2.13
(``AsyncioSelectorReactor``), and which is also how it runs without a
Twisted reactor at all (``TWISTED_REACTOR_ENABLED = False``); Scrapy's own
httpx and aiohttp handlers ask the same.  Wrapping NIOFetcher in Twisted
Deferreds instead would work on the other reactors but on no reactor-less
Scrapy, and would copy the batching and routing AsyncFetcher already does.
On another reactor the handler says so and is not configured.

One fetcher per crawl.  Scrapy makes a handler object per scheme, so http
and https are two objects; they share one AsyncFetcher (one loop thread,
one connection budget of ``CONCURRENT_REQUESTS`` sockets), started by the
first request and shut down by the last ``close()``, or, when a forced stop
(a second Ctrl-C) stops the reactor without closing the handlers, by a
"before shutdown" trigger of the reactor.

Settings.  ``CONCURRENT_REQUESTS`` becomes ``max_connections``,
``CONCURRENT_REQUESTS_PER_DOMAIN`` ``max_connections_per_host``,
``DOWNLOAD_TIMEOUT`` ``request_timeout`` (the connect and read timeouts are
kept within it), ``DOWNLOAD_MAXSIZE`` ``max_body_size``, ``USER_AGENT``
``user_agent`` (what a CONNECT to a proxy says) and
``DOWNLOAD_VERIFY_CERTIFICATES`` ``verify_tls``, ``DOWNLOAD_TLS_MIN_VERSION``
and ``_MAX_VERSION`` ``tls_min_version`` and ``tls_max_version`` (or,
without them, the one version the deprecated ``DOWNLOADER_CLIENT_TLS_METHOD``
names), ``DOWNLOADER_CLIENT_TLS_CIPHERS`` ``tls_ciphers``; a value of these
that Scrapy refuses is refused when the crawl starts.  ``NIOFETCHER_CONFIG``,
a dict of FetcherConfig fields, sets anything else and overrides those.
Two fields are not the handler's to change: redirects are Scrapy's
RedirectMiddleware's (``follow_redirects`` is False) and Content-Encoding is
Scrapy's HttpCompressionMiddleware's (``decode_content`` is False).  The
body goes up as it came, with its Content-Encoding header, exactly as
Scrapy's own handler hands it over, so it is decoded once, by the
middleware that sent the Accept-Encoding it answers (zstd included), with
its own decoded-size check; and ``DOWNLOAD_MAXSIZE`` counts the bytes
received, as in Scrapy.

Headers.  A request carries the headers Scrapy gives it and no other: the
fetcher's own User-Agent and Accept are taken away (FetcherConfig.headers
with empty values), as Scrapy's UserAgentMiddleware and
DefaultHeadersMiddleware set those; a header set to None is not sent; an
empty POST says ``Content-Length: 0``.  The response's ``protocol`` is
"HTTP/1.1", its ``ip_address`` the address it came from.

A request's ``download_timeout``, ``download_maxsize``, ``download_warnsize``
and ``download_fail_on_dataloss`` meta keys are honoured where they are
stricter than the fetcher's configuration (a shorter timeout is the
handler's own deadline: the fetch it gives up on runs to its end in the
fetcher, within the configured timeouts, and its result is dropped).  A
body past a size limit is logged and cancelled in Scrapy's words
("Expected to receive N bytes which is larger than download max size ...",
by the Content-Length when the head gives one).  The ``headers_received``
and ``bytes_received`` signals are not sent: niofetcher hands over whole
responses.

Proxies.  ``request.meta["proxy"]`` (set by the spider or by Scrapy's
HttpProxyMiddleware) becomes ``URLBean.proxy``: a proxy URL, or direct when
the key holds None; without the key the configuration's ``proxy`` applies.
HttpProxyMiddleware moves a proxy's credentials into a
``Proxy-Authorization`` request header; the handler takes that header off
the request and puts the credentials back into the proxy URL, so that
niofetcher sends them to the proxy only (with each plain http request, with
the CONNECT of an https one) and never to the origin.  A Proxy-Authorization
header without a proxy is dropped.

Errors are mapped by ``ErrorKind`` (never by reading messages) onto the
exceptions Scrapy's RetryMiddleware retries (``RETRY_EXCEPTIONS``): see
``EXCEPTIONS``.  A URL that is not http or https is Scrapy's
UnsupportedURLSchemeError.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import ipaddress
import logging
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

try:
    from scrapy.core.downloader.handlers.base import BaseDownloadHandler
    from scrapy.exceptions import (
        CannotResolveHostError,
        DownloadCancelledError,
        DownloadConnectionRefusedError,
        DownloadFailedError,
        DownloadTimeoutError,
        NotConfigured,
        NotSupported,
        ResponseDataLossError,
        ScrapyDeprecationWarning,
        UnsupportedURLSchemeError,
    )
    from scrapy.http import Headers
    from scrapy.responsetypes import responsetypes
    from scrapy.utils.asyncio import is_asyncio_available
    from scrapy.utils.defer import deferred_from_coro
    from scrapy.utils.reactor import is_reactor_installed
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"niofetcher.scrapy needs Scrapy 2.15 or newer ({exc}): pip install 'niofetcher[scrapy]'"
    ) from exc

from .aio import AsyncFetcher
from .config import TLS_VERSIONS, FetcherConfig
from .errors import ErrorKind
from .models import FetchResult, URLBean

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings
    from twisted.internet.defer import Deferred

__all__ = ["EXCEPTIONS", "NIOFetcherDownloadHandler", "fetcher_config"]

log = logging.getLogger(__name__)

#: The exception each error kind is raised as: the retried ones of Scrapy's ``RETRY_EXCEPTIONS``
#: for what a retry may cure, DownloadCancelledError (not retried, as for Scrapy's own handler) for
#: a body past ``DOWNLOAD_MAXSIZE`` and for a fetch cut short by the crawl's end.
EXCEPTIONS: dict[ErrorKind, type[Exception]] = {
    ErrorKind.DNS_ERROR: CannotResolveHostError,
    ErrorKind.CONNECT_ERROR: DownloadConnectionRefusedError,
    ErrorKind.CONNECT_TIMEOUT: DownloadTimeoutError,
    ErrorKind.READ_TIMEOUT: DownloadTimeoutError,
    ErrorKind.TIMEOUT: DownloadTimeoutError,
    ErrorKind.TLS_ERROR: DownloadFailedError,
    ErrorKind.PROXY_ERROR: DownloadConnectionRefusedError,  # as Scrapy's httpx handler raises a proxy's refusal
    ErrorKind.PROTOCOL_ERROR: DownloadFailedError,
    ErrorKind.CONNECTION_CLOSED: DownloadFailedError,  # after the head: ResponseDataLossError, see _data_loss
    ErrorKind.TOO_LARGE: DownloadCancelledError,
    ErrorKind.TOO_MANY_REDIRECTS: DownloadFailedError,  # not with follow_redirects=False; for completeness
    ErrorKind.CANCELLED: DownloadCancelledError,
}

#: FetcherConfig fields the handler fixes, and why: NIOFETCHER_CONFIG may not set them.
FIXED = {
    "follow_redirects": "redirects are Scrapy's RedirectMiddleware's",
    "decode_content": "Content-Encoding is decoded by Scrapy's HttpCompressionMiddleware",
    "cookies": "cookies are Scrapy's CookiesMiddleware's (a jar here too would send them twice)",
}

_PROXY_AUTHORIZATION = b"Proxy-Authorization"
_SCHEMES = ("http", "https")
#: FetcherConfig.headers that take the fetcher's default User-Agent and Accept away (an empty value
#: does): Scrapy's own handler sends the headers the request has, and UserAgentMiddleware and
#: DefaultHeadersMiddleware put those two on it.
_NO_DEFAULT_HEADERS = {"User-Agent": "", "Accept": ""}
#: The TLS version limits, by the FetcherConfig fields they set; their values are FetcherConfig's.
_TLS_LIMITS = {"DOWNLOAD_TLS_MIN_VERSION": "tls_min_version", "DOWNLOAD_TLS_MAX_VERSION": "tls_max_version"}
#: What DOWNLOADER_CLIENT_TLS_METHOD may say, as Scrapy reads it: "TLS" (any version) or the one version.
_TLS_METHODS = ("TLS", "TLSv1.0", "TLSv1.1", "TLSv1.2")


def fetcher_config(settings: BaseSettings) -> FetcherConfig:
    """The FetcherConfig a crawl's Scrapy settings ask for (the module docstring says what maps to what).

    Raises:
        ValueError: a NIOFETCHER_CONFIG key that is no FetcherConfig field, or one the handler
            fixes, or a value FetcherConfig refuses; a TLS setting Scrapy refuses too.
    """
    defaults = FetcherConfig()
    mapped: dict[str, Any] = {"follow_redirects": False, "decode_content": False, **_tls_fields(settings)}
    # Scrapy's zeros mean "no limit"; FetcherConfig's limits are positive, so its defaults stay.
    if (total := settings.getint("CONCURRENT_REQUESTS")) > 0:
        mapped["max_connections"] = total
    if (per_host := settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")) > 0:
        mapped["max_connections_per_host"] = per_host
    if (timeout := settings.getfloat("DOWNLOAD_TIMEOUT")) > 0:
        mapped["request_timeout"] = timeout
        mapped["connect_timeout"] = min(defaults.connect_timeout, timeout)
        mapped["read_timeout"] = min(defaults.read_timeout, timeout)
    if (maxsize := settings.getint("DOWNLOAD_MAXSIZE")) > 0:
        mapped["max_body_size"] = maxsize
    if user_agent := settings.get("USER_AGENT"):
        mapped["user_agent"] = str(user_agent)
    # Scrapy does not check certificates unless told to (the setting is 2.19's; before, it never did).
    mapped["verify_tls"] = settings.getbool("DOWNLOAD_VERIFY_CERTIFICATES", False)
    overrides = settings.getdict("NIOFETCHER_CONFIG")
    fields = {f.name for f in dataclasses.fields(FetcherConfig)}
    for name in overrides:
        if name in FIXED:
            raise ValueError(f"NIOFETCHER_CONFIG may not set {name}: {FIXED[name]}")
        if name not in fields:
            raise ValueError(f"NIOFETCHER_CONFIG: {name!r} is no FetcherConfig field")
    headers = {**_NO_DEFAULT_HEADERS, **overrides.get("headers", {})}
    return FetcherConfig(**{**mapped, **overrides, "headers": headers})


def _tls_fields(settings: BaseSettings) -> dict[str, Any]:
    """The FetcherConfig TLS fields of Scrapy's TLS settings, read as Scrapy's own handler reads them.

    A version limit that is no TLS version is refused in Scrapy's words ("Unknown
    DOWNLOAD_TLS_MIN_VERSION value: ..."); a cipher list that names no cipher by FetcherConfig.
    DOWNLOADER_CLIENT_TLS_METHOD other than "TLS" is deprecated (Scrapy's warning), pins the
    version it names unless a limit is set, and is refused when it names none.
    """
    fields: dict[str, Any] = {}
    for name, field in _TLS_LIMITS.items():
        value = settings.get(name)
        if value is None:
            continue
        if value not in TLS_VERSIONS:
            raise ValueError(f"Unknown {name} value: {value}")
        fields[field] = value
    method = settings.get("DOWNLOADER_CLIENT_TLS_METHOD", "TLS")
    if method != "TLS":
        warnings.warn("Setting DOWNLOADER_CLIENT_TLS_METHOD to a non-default value is deprecated, please use "
                      "DOWNLOAD_TLS_MIN_VERSION and/or DOWNLOAD_TLS_MAX_VERSION instead.",
                      ScrapyDeprecationWarning, stacklevel=3)
        if method not in _TLS_METHODS:
            raise ValueError(f"Unknown DOWNLOADER_CLIENT_TLS_METHOD value: {method}")
        if not fields:
            fields = {"tls_min_version": method, "tls_max_version": method}
    # Scrapy's default is OpenSSL's "DEFAULT"; None leaves the TLS library's own list.
    if ciphers := settings.get("DOWNLOADER_CLIENT_TLS_CIPHERS"):
        fields["tls_ciphers"] = ciphers
    return fields


class _SharedFetcher:
    """The one AsyncFetcher of a crawl, for the handler objects of both schemes."""

    def __init__(self, config: FetcherConfig) -> None:
        self.config = config
        self.users = 0
        self.fetcher: AsyncFetcher | None = None
        self.closed = False
        self._forced_stop_trigger: object = None  # the reactor's ID of the trigger, while it is registered

    async def started(self) -> AsyncFetcher:
        """The fetcher, started on the running event loop by the first call."""
        fetcher = self.fetcher
        if fetcher is None:
            if self.closed:
                raise DownloadCancelledError("the niofetcher download handler is closed")
            fetcher = AsyncFetcher(self.config)
            # start() awaits nothing, so no other request can slip in before self.fetcher is set.
            await fetcher.start()
            self.fetcher = fetcher
            if is_reactor_installed():
                # A forced stop (a second Ctrl-C, reactor.stop()) stops the reactor without closing the
                # handlers: without this, the fetcher's threads and sockets would outlive the crawl.
                self._forced_stop_trigger = _reactor().addSystemEventTrigger(
                    "before", "shutdown", self._forced_stop, fetcher)
        return fetcher

    def _forced_stop(self, fetcher: AsyncFetcher) -> Deferred[None]:
        """Reactor shutdown before the handlers closed: cancel the fetches; the reactor waits for the Deferred."""
        self._forced_stop_trigger = None
        self.closed = True
        return deferred_from_coro(fetcher.shutdown(wait=False))

    async def release(self) -> None:
        """One handler object closes; the last one shuts the fetcher down (its threads end)."""
        self.users -= 1
        if self.users == 0:
            self.closed = True
            if self._forced_stop_trigger is not None:
                _reactor().removeSystemEventTrigger(self._forced_stop_trigger)
                self._forced_stop_trigger = None
            if self.fetcher is not None:
                # Scrapy closes its handlers once the engine has stopped: nothing waits for a result.
                await self.fetcher.shutdown(wait=False)


def _reactor() -> Any:
    """The installed Twisted reactor (imported only when one is), as Any: its zope interfaces declare
    methods without ``self``, which mypy reads as one argument too many."""
    from twisted.internet import reactor

    return reactor


_SHARED: weakref.WeakKeyDictionary[Crawler, _SharedFetcher] = weakref.WeakKeyDictionary()


class NIOFetcherDownloadHandler(BaseDownloadHandler):  # type: ignore[misc,unused-ignore]  # Any without Scrapy
    """Scrapy's download handler for http and https, fetching with niofetcher (see the module docstring)."""

    lazy = False  # made at the crawl's start, so that a bad NIOFETCHER_CONFIG is reported at once

    def __init__(self, crawler: Crawler) -> None:
        if not is_asyncio_available():
            raise NotConfigured(
                "NIOFetcherDownloadHandler needs Scrapy on asyncio: the TWISTED_REACTOR setting "
                "twisted.internet.asyncioreactor.AsyncioSelectorReactor (Scrapy's default), or "
                "TWISTED_REACTOR_ENABLED = False"
            )
        super().__init__(crawler)
        settings = crawler.settings
        shared = _SHARED.get(crawler)
        if shared is None:
            shared = _SHARED[crawler] = _SharedFetcher(fetcher_config(settings))
        shared.users += 1
        self._shared = shared
        self.config = shared.config
        self._warnsize = settings.getint("DOWNLOAD_WARNSIZE")
        self._fail_on_dataloss = settings.getbool("DOWNLOAD_FAIL_ON_DATALOSS")
        self._dataloss_warned = False  # Scrapy says once per handler how to keep broken responses
        self._auth_encoding = settings.get("HTTPPROXY_AUTH_ENCODING") or "latin-1"

    async def download_request(self, request: Request) -> Response:
        """Fetch ``request`` and return its Response, or raise the exception its error kind maps to.

        Raises:
            UnsupportedURLSchemeError: a URL that is not http or https.
        """
        scheme = urlsplit(request.url).scheme
        if scheme not in _SCHEMES:
            raise UnsupportedURLSchemeError(f"niofetcher fetches http and https URLs, not {scheme}: {request.url}")
        fetcher = await self._shared.started()
        bean = self.bean_for(request)
        timeout = request.meta.get("download_timeout")
        limit = self.config.request_timeout
        started = time.monotonic()
        try:
            if timeout and (limit is None or timeout < limit):
                result = await asyncio.wait_for(fetcher.fetch(bean), timeout)
            else:
                result = await fetcher.fetch(bean)
        except asyncio.TimeoutError:
            raise DownloadTimeoutError(f"Getting {request.url} took longer than {timeout} seconds.") from None
        request.meta["download_latency"] = time.monotonic() - started
        return self.response_for(request, result)

    async def close(self) -> None:
        """Shut the crawl's fetcher down once both schemes' handlers have closed: no thread is left."""
        await self._shared.release()

    # -- the two translations, public so that they can be tested without a crawl

    def bean_for(self, request: Request) -> URLBean:
        """The URLBean of a Scrapy request: method, headers, body and route (see "Proxies" above).

        Raises:
            NotSupported: a proxy niofetcher cannot speak to (not ``http://``), or credentials
                for it that are not Basic.
        """
        headers = request.headers
        authorization = headers.get(_PROXY_AUTHORIZATION)
        proxy: str | None = None
        if "proxy" in request.meta:
            proxy = request.meta["proxy"] or ""  # None: Scrapy's "no proxy for this request"
        if proxy:
            proxy = self._proxy_url(proxy, authorization)
        # One str per field: the values of a repeated request header joined as RFC 9110 allows.
        # A header set to None has no values: Scrapy sends nothing for it.
        fields = {
            name.decode("latin-1"): ", ".join(value.decode("latin-1") for value in values)
            for name, values in headers.items()
            if values and name.lower() != b"proxy-authorization"
        }
        return URLBean(request.url, method=request.method, headers=fields, body=request.body, proxy=proxy)

    def response_for(self, request: Request, result: FetchResult) -> Response:
        """The Response of a FetchResult, of the class its headers and body call for (HtmlResponse...).

        Its ``protocol`` is "HTTP/1.1" (what niofetcher speaks) and its ``ip_address`` the peer's.

        Raises:
            The exception of ``EXCEPTIONS`` for an error result; ResponseDataLossError for a
            response cut short (unless ``DOWNLOAD_FAIL_ON_DATALOSS`` is off); DownloadCancelledError
            for a body past ``max_body_size`` (``DOWNLOAD_MAXSIZE``) or the request's ``download_maxsize``.
        """
        flags = None
        if result.error is ErrorKind.TOO_LARGE:
            raise self._cancelled(request, result, self.config.max_body_size)
        if result.error is not None:
            if not self._data_loss(request, result):
                raise EXCEPTIONS.get(result.error, DownloadFailedError)(f"{result.error.value}: {result.error_detail}")
            flags = ["dataloss"]
        maxsize = request.meta.get("download_maxsize")
        if maxsize and len(result.body) > maxsize:  # a request's own limit, below the fetcher's
            raise self._cancelled(request, result, maxsize)
        warnsize = request.meta.get("download_warnsize", self._warnsize)
        if warnsize:
            self._warn_if_large(request, result, warnsize)
        headers = Headers(result.headers)
        assert result.status is not None  # every result without an error has its response's status
        cls = responsetypes.from_args(headers=headers, url=request.url, body=result.body)
        return cls(url=request.url, status=result.status, headers=headers, body=result.body, flags=flags,
                   protocol="HTTP/1.1", ip_address=_peer_address(result.peer))

    def _cancelled(self, request: Request, result: FetchResult, maxsize: int) -> DownloadCancelledError:
        """The DownloadCancelledError of a body past ``maxsize``, its message logged as Scrapy logs it."""
        expected = _announced_length(request, result)
        if expected is not None and expected > maxsize:
            message = _size_message("Expected to receive", expected, "max", maxsize, request)
        elif result.error is ErrorKind.TOO_LARGE:  # the fetcher stopped at the first bytes past the limit
            message = _size_message("Received more than", maxsize, "max", maxsize, request)
        else:
            message = _size_message("Received", len(result.body), "max", maxsize, request)
        log.warning(message)
        return DownloadCancelledError(message)

    def _warn_if_large(self, request: Request, result: FetchResult, warnsize: int) -> None:
        """Log that a response is past ``warnsize``, by its Content-Length when it has one, as Scrapy does."""
        expected = _announced_length(request, result)
        if expected is not None and expected > warnsize:
            log.warning(_size_message("Expected to receive", expected, "warn", warnsize, request))
        elif len(result.body) > warnsize:
            log.warning(_size_message("Received", len(result.body), "warn", warnsize, request))

    def _data_loss(self, request: Request, result: FetchResult) -> bool:
        """True for a response whose head came and whose body was cut short, to be kept as
        Scrapy keeps one when ``DOWNLOAD_FAIL_ON_DATALOSS`` is off; raises ResponseDataLossError when it is on
        (and says once per handler, as Scrapy does, how to keep such responses)."""
        if result.error is not ErrorKind.CONNECTION_CLOSED or result.status is None:
            return False
        if request.meta.get("download_fail_on_dataloss", self._fail_on_dataloss):
            if not self._dataloss_warned:
                self._dataloss_warned = True
                log.warning("Got data loss in %s. If you want to process broken responses set the setting "
                            "DOWNLOAD_FAIL_ON_DATALOSS = False -- This message won't be shown in further requests",
                            request.url)
            raise ResponseDataLossError(f"{result.error.value}: {result.error_detail}")
        return True

    def _proxy_url(self, proxy: str, authorization: bytes | None) -> str:
        """A proxy URL in niofetcher's form, ``http://[user:pass@]host:port``, with the credentials of
        a Proxy-Authorization header put back in."""
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if parts.scheme.lower() != "http":
            raise NotSupported(f"niofetcher speaks to http:// proxies only, not {parts.scheme}:// ({parts.hostname})")
        userinfo, _, netloc = parts.netloc.rpartition("@")
        if parts.port is None:
            netloc += ":80"  # Scrapy's default for a proxy without one; niofetcher wants it said
        if authorization is not None:
            scheme, _, token = authorization.partition(b" ")
            if scheme.lower() != b"basic":
                raise NotSupported(f"niofetcher sends Basic proxy credentials only, not {scheme.decode('latin-1')}")
            try:
                user, _, password = base64.b64decode(token, validate=True).decode(self._auth_encoding).partition(":")
            except (binascii.Error, UnicodeDecodeError):
                raise NotSupported("a Proxy-Authorization header that is not valid Basic credentials") from None
            # niofetcher percent-decodes them as UTF-8 and encodes them again for the header.
            userinfo = f"{quote(user, safe='')}:{quote(password, safe='')}"
        # Else any credentials left in meta["proxy"] (no HttpProxyMiddleware took them out) stay.
        return f"http://{userinfo}@{netloc}" if userinfo else f"http://{netloc}"


def _announced_length(request: Request, result: FetchResult) -> int | None:
    """The Content-Length of a response that has a body (not the answer to HEAD, a 204 or a 304)."""
    if request.method == "HEAD" or result.status in (204, 304):
        return None
    length = result.header("content-length")
    return int(length) if length is not None and length.isdigit() else None


def _size_message(received: str, size: int, limit_name: str, limit: int, request: Request) -> str:
    """Scrapy's words for a response past DOWNLOAD_MAXSIZE or DOWNLOAD_WARNSIZE (logs and tests match them)."""
    return f"{received} {size} bytes which is larger than download {limit_name} size ({limit}) in request {request}."


def _peer_address(peer: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address of a FetchResult's ``peer`` ("ip:port", "[ip6]:port"), as Scrapy's ``Response.ip_address``."""
    if peer is None:
        return None
    return ipaddress.ip_address(peer.rpartition(":")[0].strip("[]"))

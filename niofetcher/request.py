"""A registration on its way through the fetcher, and the request headers it carries.

``Task`` is what every layer passes around: the fetcher makes one per
accepted ``register()``, the host table queues it, a connection sends it and
the engine routes what comes back.  It lives here, below all of them, so that
none of them imports another to name it.

The header policy is here too.  Every request carries the configuration's
headers (User-Agent, Accept, Accept-Encoding when decoding, then the user's),
overridden by the bean's own, with Host first and Content-Length added for a
body that has no framing of its own, and for an empty one where the method
gives content a meaning (POST, PUT, PATCH: ``Content-Length: 0``, as RFC 9110
8.6 asks of a user agent, and as servers that refuse such a request without
a length expect).  A configuration header given an empty value is not sent:
it takes that default away, as curl's ``-H 'Accept:'`` does (Scrapy's handler
sends only the headers Scrapy asks for).  A URL registered with ``user:pass@``
sends them as ``Authorization: Basic`` (as curl and browsers do), unless the
configuration or the bean gives an Authorization header of its own; the
request line and Host never carry them.  A redirect to another origin drops
the credentials (Authorization, Cookie, Proxy-Authorization), so that the
password goes to the origin it was given for and to no other; one that turns
the request into a GET drops the body and the headers that describe it.

A Task knows its route too: ``proxy``, the proxy it goes through or None.
A plain http request through a proxy carries the proxy's credentials as
``Proxy-Authorization``; a redirect recomputes the configuration's route
for the new host (``no_proxy``), while a URLBean's own proxy stays.

Pending URLs and the garbage collector.  A URL registered as a plain str
waits in its host queue as a ``PendingURL``: a tuple of strs, ints and a
float, no Task, no URLBean and no Target yet.  The cyclic collector untracks
such a tuple the first time it looks at it and never walks its items again:
what is left is one visit per URL from its queue's list, about 30 ms per
full collection at a million pending (four tracked objects per URL made it
0.6-1 s; benchmarks/loop_pauses.py).  The Task is made when the URL starts,
or when it is cancelled (the engine's ``_pending_task``, the host table's
``make_task``).  A URLBean keeps its Task from the start: the bean is the
user's object, tracked whatever we do, and its Task captures the method,
body and headers at ``register()`` as before.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .config import FetcherConfig
from .content import ACCEPT_ENCODING
from .cookies import cookie_header
from .models import Exchange, HeaderPairs, SharedHeaders, URLBean
from .urls import NoProxy, Origin, Proxy, Target, parse_proxy, split_credentials

if TYPE_CHECKING:
    from http.cookiejar import CookieJar

IDEMPOTENT_METHODS = frozenset(("GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"))
# Methods that give request content a meaning (RFC 9110 9.3.3-4, RFC 5789): an empty body is announced.
CONTENT_METHODS = frozenset(("POST", "PUT", "PATCH"))
HOST_HEADERS_CACHE = 4096  # Host headers whose default header lists are kept (and a driver's checked form)
_CROSS_ORIGIN_DROPPED = frozenset(("authorization", "cookie", "proxy-authorization"))
_BODY_HEADERS = frozenset(("content-length", "content-type", "content-encoding", "transfer-encoding"))
_INF = math.inf



def bean_proxy(proxy: str) -> Proxy:
    """A URLBean's own ``proxy``, parsed.  register() checks it before it queues the bean (the loop
    makes the Task, where a bad one could not be refused).

    Raises:
        ValueError: "URLBean.proxy: " and what is wrong with it.
    """
    try:
        return parse_proxy(proxy)
    except ValueError as exc:
        raise ValueError(f"URLBean.proxy: {exc}") from None

class TaskState(enum.IntEnum):
    """Where a task is, so that a fault anywhere on its way settles it exactly once."""

    WAITING = 0  # in the inbox or a host queue
    RUNNING = 1  # on a connection (counted in in_flight)
    ROUTING = 2  # its exchange has ended; the engine decides between a result, a redirect and a replay
    DONE = 3  # its result is made


# The states as globals, for the loop's hot paths: on Python 3.11 an Enum member read
# through its class goes through EnumType.__getattr__, six times the cost of a global.
WAITING, RUNNING, ROUTING, DONE = TaskState.WAITING, TaskState.RUNNING, TaskState.ROUTING, TaskState.DONE


#: A str registration waiting in its host queue: (-priority, seq, url, host_header, path,
#: registered_at), ordered like every queue entry by (-priority, seq); atoms only (see above).
PendingURL = tuple[int, int, str, str, str, float]
#: A Task waiting in its host queue (a URLBean registration, a redirect's next hop, a replay).
QueuedTask = tuple[int, int, "Task"]
#: What a host queue holds.
QueueEntry = PendingURL | QueuedTask


class Task:
    """One registration on its way through the fetcher, redirects and a replay included."""

    __slots__ = (
        "_defaults",
        "_headers",
        "_wire_headers",
        "active_time",
        "bean",
        "body",
        "connection_reused",
        "deadline",
        "dispatched_at",
        "exchanges",
        "first_dispatch_at",
        "method",
        "needs_fresh_connection",
        "priority",
        "proxy",
        "redirects",
        "registered_at",
        "replayed",
        "seq",
        "session_reused",
        "state",
        "target",
        "url",
    )

    def __init__(
        self, bean: URLBean, target: Target, seq: int, registered_at: float, defaults: RequestDefaults,
    ) -> None:
        self.bean = bean
        self.seq = seq
        self.priority = bean.priority
        method = bean.method
        self.method = method if method in IDEMPOTENT_METHODS or method == "POST" else method.upper()
        self.body = bean.body
        self.target = target
        self.url = bean.url
        self.registered_at = registered_at
        self.first_dispatch_at: float | None = None
        self.dispatched_at = 0.0
        self.active_time = 0.0  # time spent dispatched, summed over redirects and replays
        self.deadline = _INF
        # A tuple until the first redirect: an empty list per pending URL would be
        # one more object for the garbage collector to walk while millions wait.
        self.redirects: Sequence[tuple[int, str]] = ()
        self.exchanges: tuple[Exchange, ...] = ()  # FetcherConfig.record_exchanges: one per hop, as recorded
        self.replayed = False
        self.needs_fresh_connection = False
        self.connection_reused = False
        self.session_reused = False
        self.state = WAITING
        # Shared with every other task until this one has headers of its own:
        # a million pending URLs must not mean a million copies of the defaults.
        self._defaults = defaults
        headers = defaults.headers
        if bean.headers:
            headers = dict(headers)
            for name, value in bean.headers.items():
                headers[name.lower()] = (name, value)
        if "@" in bean.url:  # perhaps user:pass@ (an "@" of a path or a query is none: split_credentials knows)
            # Every hop goes by the URL without them: redirects, final_url, the exchanges, messages.
            self.url, authorization = split_credentials(bean.url)
            if authorization is not None and "authorization" not in headers:  # the caller's own wins
                headers = {**headers, "authorization": ("Authorization", authorization)}
        self._headers = headers
        self._wire_headers: HeaderPairs | None = None
        # The route: the configuration's (no_proxy decides per host), or the bean's own ("" = direct).
        chosen = bean.proxy
        proxy: Proxy | None = None
        if chosen is None:
            proxy = defaults.proxy
            if proxy is not None:  # a call less for the crawls without one
                proxy = defaults.route(target.origin.host)
        elif chosen:
            proxy = bean_proxy(chosen)
        self.proxy = proxy

    def wire_headers(self) -> HeaderPairs:
        """The request headers for the current target, Host first: for a request with the defaults
        only, the host's one ``SharedHeaders``, which the driver checks once."""
        wire = self._wire_headers
        if wire is None:
            defaults = self._defaults
            host_header = self.target.host_header
            headers = self._headers
            jar = defaults.cookie_jar
            if jar is not None and "cookie" not in headers:  # a Cookie of the caller's own goes as it is
                cookie = cookie_header(jar, self.url)
                if cookie is not None:
                    headers = {**headers, "cookie": ("Cookie", cookie)}
            proxy = self.proxy
            if (proxy is not None and proxy.authorization is not None and self.target.origin.scheme == "http"
                    and "proxy-authorization" not in headers):
                # Plain http goes to the proxy as it is, so each request carries the credentials
                # (an https request goes inside the tunnel: the CONNECT carried them).
                headers = {**headers, "proxy-authorization": ("Proxy-Authorization", proxy.authorization)}
            if headers is defaults.headers and not self.body and self.method not in CONTENT_METHODS:
                wire = defaults.for_host(host_header)
            else:
                wire = _header_list(host_header, headers, self.body, self.method)
            self._wire_headers = wire
        return wire

    def drop_body(self) -> None:
        """A redirect turned the request into a GET: its body and the headers describing it go."""
        self.body = b""
        self._headers = {k: v for k, v in self._headers.items() if k not in _BODY_HEADERS}
        self._wire_headers = None

    def retarget(self, url: str, target: Target) -> None:
        """Point the task at its next hop; credentials stay behind when the origin changes."""
        if target.origin != self.target.origin:
            self._headers = {k: v for k, v in self._headers.items() if k not in _CROSS_ORIGIN_DROPPED}
        self.url = url
        self.target = target
        self._wire_headers = None
        if self.bean.proxy is None:  # the configuration's route, which no_proxy decides per host
            self.proxy = self._defaults.route(target.origin.host)


MakeTask = Callable[[PendingURL, Origin], Task]  # the Task of a PendingURL, made as it starts or is cancelled


class RequestDefaults:
    """The headers every request carries, and their list per Host, built once."""

    __slots__ = ("_by_host", "_no_proxy", "cookie_jar", "headers", "proxy")

    def __init__(
        self, headers: dict[str, tuple[str, str]], proxy: Proxy | None = None, no_proxy: NoProxy | None = None,
        cookie_jar: CookieJar | None = None,
    ) -> None:
        self.headers = headers
        self.cookie_jar = cookie_jar  # FetcherConfig.cookies: each hop asks it for its Cookie header
        self.proxy = proxy  # the configuration's proxy, for the hosts no_proxy leaves to it
        self._no_proxy = no_proxy if no_proxy else None
        self._by_host: dict[str, SharedHeaders] = {}

    @classmethod
    def from_config(cls, config: FetcherConfig, cookie_jar: CookieJar | None = None) -> RequestDefaults:
        """User-Agent, Accept and (when decoding) Accept-Encoding, then the configuration's own headers;
        one of those given an empty value is left out."""
        headers = {
            "user-agent": ("User-Agent", config.user_agent),
            "accept": ("Accept", "*/*"),
        }
        if config.decode_content:
            headers["accept-encoding"] = ("Accept-Encoding", ACCEPT_ENCODING)
        for name, value in config.headers.items():
            if value:
                headers[name.lower()] = (name, value)
            else:
                headers.pop(name.lower(), None)
        return cls(headers, *config.proxy_route(), cookie_jar=cookie_jar)

    def route(self, host: str) -> Proxy | None:
        """The configuration's proxy for ``host`` (an Origin's host), or None: direct."""
        proxy = self.proxy
        if proxy is not None and self._no_proxy is not None and self._no_proxy.matches(host):
            return None
        return proxy

    def for_host(self, host_header: str) -> SharedHeaders:
        """Loop thread only."""
        wire = self._by_host.get(host_header)
        if wire is None:
            if len(self._by_host) >= HOST_HEADERS_CACHE:  # a crawl of many hosts: keep it small, not clever
                self._by_host.clear()
            wire = self._by_host[host_header] = SharedHeaders(_header_list(host_header, self.headers, b"", "GET"))
        return wire


def _header_list(
    host_header: str, headers: dict[str, tuple[str, str]], body: bytes, method: str,
) -> list[tuple[str, str]]:
    wire = [("Host", host_header)]
    wire.extend(pair for key, pair in headers.items() if key != "host")
    if (body or method in CONTENT_METHODS) and "content-length" not in headers and "transfer-encoding" not in headers:
        wire.append(("Content-Length", str(len(body))))
    return wire

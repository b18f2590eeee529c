"""``TestSite``: the test site's face: its options, its lifecycle, its addresses and its counters.

What the site serves is built by ``pages``, the loop that serves it is
``server`` (``tls`` for HTTPS); this module binds the ports, starts the loop
in a thread and reads the counters under the lock it shares with the loop.
``LoopbackSite`` is that lifecycle, shared with ``web.SyntheticWeb``.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from .counters import PortCounters
from .pages import REDIRECT_REASONS, build_host, split_at_body_end
from .server import LISTEN_BACKLOG, Origin, Server
from .tls import TLSServer

__all__ = ["SITEMAPS", "LoopbackSite", "TestSite"]

#: The values of ``TestSite(sitemap=...)``.
SITEMAPS = (None, "urlset", "index", "malformed", "neighbour")

# typing.Self is Python 3.11+, typing_extensions is not the standard library: a bound TypeVar.
SiteT = TypeVar("SiteT", bound="LoopbackSite")


class LoopbackSite:
    """K listening loopback ports served by one ``Server`` loop in a thread: the lifecycle and the
    port counters that every site shares; a subclass says what is served (``make_server``).

    Args:
        ports: how many ports to listen on.
        host: a loopback IP literal to bind; nothing else is accepted, so the
            site can never be reached from off the machine.
        port: 0 for ephemeral ports, or P for P, P+1, ... P+ports-1.
        max_seconds: the loop stops by itself after this long; None = no bound.
        log_requests: record ``(arrival time, path)`` of every request.
        tls: a server-side ``ssl.SSLContext``, or None for plain HTTP.
    """

    __test__ = False

    def __init__(
        self,
        ports: int,
        host: str,
        port: int,
        max_seconds: float | None,
        log_requests: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if not 0 <= port <= 65536 - ports:
            raise ValueError(f"port must leave room for {ports} ports below 65536, not {port!r}")
        if max_seconds is not None and max_seconds <= 0:
            raise ValueError(f"max_seconds must be > 0 or None, not {max_seconds!r}")
        if tls is not None and not isinstance(tls, ssl.SSLContext):
            raise ValueError(f"tls must be an ssl.SSLContext or None, not {tls!r}")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"host must be a loopback IP literal, not {host!r}") from None
        if not address.is_loopback:
            raise ValueError(f"host must be a loopback IP literal, not {host!r}")
        self.host = host
        self.port = port
        self.max_seconds = max_seconds
        self.log_requests = log_requests
        self.tls = tls
        self.scheme = "http" if tls is None else "https"
        self._port_count = ports
        self._family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        self._url_host = f"[{host}]" if address.version == 6 else host
        self._lock = threading.Lock()
        self._counters = [PortCounters() for _ in range(ports)]
        self._ports: list[int] = []
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def make_server(self, listeners: list[socket.socket]) -> Server:
        """The loop that serves the bound ``listeners`` (their ports are known by now)."""
        raise NotImplementedError

    # -- lifecycle

    def start(self: SiteT) -> SiteT:  # noqa: PYI019
        """Bind every port and start the loop in a daemon thread; all ports listen on return."""
        if self._server is not None or self._stopped:
            raise RuntimeError("a TestSite can be started only once")
        server = self._bind()
        self._thread = threading.Thread(target=server.run, name="niofetcher-testsite", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the loop, close every socket and join the thread. Safe to call twice."""
        self._stopped = True
        server, thread = self._server, self._thread
        if server is None:
            return
        server.request_stop()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
            server.wake_w.close()

    def serve_forever(self: SiteT, on_ready: Callable[[SiteT], None] | None = None) -> None:  # noqa: PYI019
        """Serve in the calling thread until Ctrl-C or ``max_seconds`` (for the command line).

        ``on_ready`` is called once the ports are bound (so it can print ``base_urls``).
        """
        if self._server is not None or self._stopped:
            raise RuntimeError("a TestSite can be started only once")
        server = self._bind()
        try:
            if on_ready is not None:
                on_ready(self)
            server.run()
        except KeyboardInterrupt:
            pass
        finally:
            self._stopped = True
            server.close()
            server.wake_w.close()

    def __enter__(self: SiteT) -> SiteT:  # noqa: PYI019
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- addresses

    @property
    def ports(self) -> list[int]:
        """The listening ports, host 0 first. Known before ``start()`` only for a fixed ``port``."""
        if self._ports:
            return list(self._ports)
        if self.port:
            return [self.port + i for i in range(self._port_count)]
        raise RuntimeError("ephemeral ports are assigned by start()")

    # -- counters

    def counters(self, port: int | None = None) -> PortCounters:
        """A copy of one port's counters; ``None`` sums all ports (peaks are true global peaks, and
        the logs are merged in time order)."""
        with self._lock:
            if port is not None:
                return self._counters[self.ports.index(port)].copy()
            total = PortCounters()
            for counters in self._counters:
                total.accepted += counters.accepted
                total.open_now += counters.open_now
                total.requests += counters.requests
                total.tls_handshakes += counters.tls_handshakes
                total.tls_resumed += counters.tls_resumed
                total.tls_failed += counters.tls_failed
                total.max_conn_age_at_request = max(
                    total.max_conn_age_at_request, counters.max_conn_age_at_request
                )
                total.paths.update(counters.paths)
                total.turnaround.buckets.update(counters.turnaround.buckets)
                total.log.extend(counters.log)
            total.log.sort()
            total.max_open = self._server.max_open_total if self._server else 0
            return total

    def reset_counters(self) -> None:
        """Zero the counters; open connections stay counted as open (and as the new peak)."""
        with self._lock:
            for counters in self.all_counters():  # in place: the loop holds references to them
                counters.accepted = counters.requests = 0
                counters.tls_handshakes = counters.tls_resumed = counters.tls_failed = 0
                counters.max_conn_age_at_request = 0.0
                counters.paths.clear()
                counters.turnaround.buckets.clear()
                counters.log.clear()
                counters.max_open = counters.open_now
            if self._server is not None:
                self._server.max_open_total = self._server.open_total

    def all_counters(self) -> list[PortCounters]:
        """Every counters object the loop writes (the ports'; a subclass adds its own)."""
        return self._counters

    # -- internals

    def _bind(self) -> Server:
        listeners: list[socket.socket] = []
        try:
            for i in range(self._port_count):
                sock = socket.socket(self._family, socket.SOCK_STREAM)
                listeners.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((self.host, self.port + i if self.port else 0))
                sock.listen(LISTEN_BACKLOG)
                sock.setblocking(False)
        except BaseException:
            for sock in listeners:
                sock.close()
            raise
        self._ports = [sock.getsockname()[1] for sock in listeners]
        self._server = self.make_server(listeners)
        return self._server


class TestSite(LoopbackSite):
    """A generated web site on K loopback ports, served by one fast selectors loop.

    Use it as a context manager (``with TestSite(hosts=3) as site:``), or call
    ``start()``/``stop()``, or ``serve_forever()`` from a command line.

    Args:
        hosts: listening ports, one per simulated host.
        pages: generated pages per host, at ``/page/0`` .. ``/page/{pages-1}``.
        delay: seconds between reading a request and sending its response.
        page_size: approximate size of a generated page in bytes (filler pads it).
        links_per_page: same-host links on each page (fewer when there are fewer pages).
        cross_host_links: link each page to the same page of the next host, so a
            crawl from host 0's ``/`` reaches every host.
        host: a loopback IP literal to bind; nothing else is accepted, so the
            site can never be reached from off the machine.
        port: 0 for ephemeral ports, or P for P, P+1, ... P+hosts-1.
        robots_disallow: paths for ``Disallow:`` lines in ``/robots.txt``.
        robots_crawl_delay: a ``Crawl-delay:`` line for ``/robots.txt``; None = none.
        robots_redirects: ``/robots.txt`` of host j answers with a redirect to
            ``/robots/j/1``, which redirects to ``/robots/j/2`` ... up to
            ``/robots/j/{robots_redirects}``, which holds host j's rules.
        robots_redirect_status: the status of those redirects (301, 302, 303, 307, 308).
        robots_redirect_cross_host: hop k of host j's chain is on host j+k (of the
            ring) instead of host j, so every hop changes host.
        robots_unavailable: the first N requests of each host's ``/robots.txt``
            get ``503 Service Unavailable``; the rules (or the redirect) after that.
        log_requests: record ``(arrival time, path)`` of every request in
            ``PortCounters.log`` (off by default: a benchmark's millions of
            requests would pile up).
        bodies: real pages to serve instead of generated ones (page i gets
            ``bodies[i % len(bodies)]`` with the site's links inserted).
        max_seconds: the loop stops by itself after this long, so a forgotten
            site cannot outlive a test run; None = no bound.
        tls: a server-side ``ssl.SSLContext`` (see ``tls_context_from_files``) to
            serve HTTPS on every port; the URLs are then ``https://``. None = plain HTTP.
        sitemap: what each host's ``/sitemap.xml`` is: None (a 404), ``"urlset"`` (a sitemap of
            ``/``, every page, every orphan page and one URL of another host, each with a
            ``<lastmod>``), ``"index"`` (an index of a gzip sitemap of the pages and a plain one of
            the rest), ``"malformed"`` (its first entry, then it breaks off) or ``"neighbour"`` (its
            orphan pages, then the next host's).
        robots_sitemaps: ``Sitemap:`` lines for ``/robots.txt``: a path (made absolute on each
            host) or a URL.
        orphan_pages: pages ``/orphan/0`` .. on each host that no page links to.
        orphans_unavailable: each orphan page answers ``503`` this many times before its page.
        meta_robots: page number -> the content of a ``<meta name="robots">`` in its head.
        canonicals: page number -> the href of a ``<link rel="canonical">`` in its head.
        robots_headers: page number -> an ``X-Robots-Tag`` header value.
        canonical_headers: page number -> the target of a ``Link: <...>; rel="canonical"`` header.
    """

    __test__ = False  # the name starts with "Test"; stop pytest collecting it

    def __init__(
        self,
        hosts: int = 1,
        pages: int = 100,
        delay: float = 0.0,
        page_size: int = 2048,
        links_per_page: int = 5,
        cross_host_links: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        robots_disallow: Sequence[str] = (),
        bodies: Sequence[bytes] | None = None,
        max_seconds: float | None = 600.0,
        tls: ssl.SSLContext | None = None,
        robots_crawl_delay: float | None = None,
        robots_redirects: int = 0,
        robots_redirect_status: int = 301,
        robots_redirect_cross_host: bool = False,
        robots_unavailable: int = 0,
        log_requests: bool = False,
        sitemap: str | None = None,
        robots_sitemaps: Sequence[str] = (),
        orphan_pages: int = 0,
        orphans_unavailable: int = 0,
        meta_robots: Mapping[int, str] | None = None,
        canonicals: Mapping[int, str] | None = None,
        robots_headers: Mapping[int, str] | None = None,
        canonical_headers: Mapping[int, str] | None = None,
    ) -> None:
        if sitemap not in SITEMAPS:
            raise ValueError(f"sitemap must be one of {SITEMAPS}, not {sitemap!r}")
        if orphan_pages < 0 or orphans_unavailable < 0:
            raise ValueError(f"orphan_pages and orphans_unavailable must be >= 0, not {orphan_pages!r}, {orphans_unavailable!r}")
        if hosts < 1 or pages < 1 or links_per_page < 1:
            raise ValueError(
                f"hosts, pages and links_per_page must be >= 1, not {hosts!r}, {pages!r}, {links_per_page!r}"
            )
        if delay < 0 or page_size < 0:
            raise ValueError(f"delay and page_size must be >= 0, not {delay!r}, {page_size!r}")
        if bodies is not None and not bodies:
            raise ValueError("bodies must not be empty")
        if robots_crawl_delay is not None and not robots_crawl_delay >= 0:
            raise ValueError(f"robots_crawl_delay must be >= 0 or None, not {robots_crawl_delay!r}")
        if robots_redirects < 0 or robots_unavailable < 0:
            raise ValueError(
                f"robots_redirects and robots_unavailable must be >= 0, not {robots_redirects!r}, {robots_unavailable!r}"
            )
        if robots_redirect_status not in REDIRECT_REASONS:
            raise ValueError(f"robots_redirect_status must be one of {sorted(REDIRECT_REASONS)}, "
                             f"not {robots_redirect_status!r}")
        super().__init__(hosts, host, port, max_seconds, log_requests, tls)
        self.hosts = hosts
        self.pages = pages
        self.delay = delay
        self.page_size = page_size
        self.links_per_page = links_per_page
        self.cross_host_links = cross_host_links
        self.robots_disallow = tuple(robots_disallow)
        self.robots_crawl_delay = robots_crawl_delay
        self.robots_redirects = robots_redirects
        self.robots_redirect_status = robots_redirect_status
        self.robots_redirect_cross_host = robots_redirect_cross_host
        self.robots_unavailable = robots_unavailable
        self.bodies = None if bodies is None else list(bodies)
        self.sitemap = sitemap
        self.robots_sitemaps = tuple(robots_sitemaps)
        self.orphan_pages = orphan_pages
        self.orphans_unavailable = orphans_unavailable
        self.meta_robots = dict(meta_robots or {})
        self.canonicals = dict(canonicals or {})
        self.robots_headers = dict(robots_headers or {})
        self.canonical_headers = dict(canonical_headers or {})
        self._body_parts = [split_at_body_end(body) for body in self.bodies or ()]

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running" if self._server else "new"
        tls = " tls" if self.tls is not None else ""
        return f"<TestSite hosts={self.hosts} pages={self.pages} ports={self._ports}{tls} {state}>"

    # -- addresses

    @property
    def base_urls(self) -> list[str]:
        """``http://127.0.0.1:{port}/`` (``https://`` with TLS) for each host, host 0 first."""
        return [f"{self.scheme}://{self._url_host}:{port}/" for port in self.ports]

    def page_urls(self) -> list[str]:
        """Every page of every host (what a full crawl must fetch), each host's index first."""
        return [
            url
            for base in self.base_urls
            for url in (base, *(f"{base}page/{i}" for i in range(self.pages)))
        ]

    def make_server(self, listeners: list[socket.socket]) -> Server:
        """The loop serving this site's generated hosts, one per port (over TLS when asked)."""
        origins = [Origin(build_host(self, i), self._counters[i], self.delay) for i in range(self.hosts)]
        args = (listeners, origins, self._lock, self.max_seconds, self.log_requests)
        return Server(*args) if self.tls is None else TLSServer(*args, context=self.tls)

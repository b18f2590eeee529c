"""``SyntheticWeb``: many host names on a few loopback ports, for broad crawls.

A broad crawl meets tens of thousands of hosts, a few big and most small, and
pages that mostly link elsewhere. This site serves that shape from one loop:
host ``j`` is the name ``h{j}.{domain}`` on port ``j % ports``; the server
tells the names apart by the ``Host`` field, and the crawler reaches them
through ``resolve`` (every ``name:port`` to the loopback address), so no DNS is
involved.

The web, deterministic from ``seed``:

* sizes: host ``j`` has ``1 + share_j`` pages, the shares of ``pages - hosts``
  proportional to ``(j + 1) ** -zipf`` (largest remainders, so the total is
  exactly ``pages``): host 0 is the biggest, most hosts have a page or two.
* links: ``/`` links to ``/page/0`` and to the next host's ``/`` (a ring, so a
  crawl from ``h0``'s ``/`` reaches every host); page ``i`` links to page
  ``i+1`` (the last one to ``/``, so every page of a host is reachable from any
  other); the other ``links_per_page - 1`` (``- 2`` on ``/``) are drawn, each
  with probability ``cross_host_share``, from every page of the web alike (so a
  big host gets more links) and otherwise from the same host.
* each host's delay is ``delay``, or drawn from ``[low, high)`` once per host.

Pages are made when asked (``pages.GeneratedPages``), so size costs nothing but
the ``/`` of each host; requests, connections and peaks are counted per host
name (``host_counters``): a connection belongs to the name of its first request.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import random
import socket
import ssl
from collections.abc import Callable, Sequence

from .counters import PortCounters
from .messages import HTML_TYPE, TEXT_TYPE, Resource
from .pages import GeneratedPages, generated_page, links_html, robots_txt
from .server import Origin, Server
from .site import LoopbackSite
from .tls import TLSServer

__all__ = ["SyntheticWeb", "zipf_sizes"]


def zipf_sizes(hosts: int, pages: int, exponent: float) -> list[int]:
    """Pages per host: at least one each, the rest shared in proportion to ``(rank + 1) ** -exponent``.

    Largest remainders (ties to the smaller rank), so the sizes add up to ``pages`` exactly.
    """
    weights = [(rank + 1) ** -exponent for rank in range(hosts)]
    total = sum(weights)
    spare = pages - hosts
    exact = [spare * weight / total for weight in weights]
    sizes = [int(share) for share in exact]
    by_remainder = sorted(range(hosts), key=lambda rank: (sizes[rank] - exact[rank], rank))
    for rank in by_remainder[: spare - sum(sizes)]:
        sizes[rank] += 1
    return [1 + size for size in sizes]


class SyntheticWeb(LoopbackSite):
    """A web of ``hosts`` host names and ``pages`` pages in all, served on ``ports`` loopback ports.

    Use it like ``TestSite`` (a context manager, or ``start()``/``stop()``); crawl it
    with ``FetcherConfig(resolve=web.resolve)`` from ``web.base_urls[0]``.

    Args:
        hosts: host names, ``h0.{domain}`` .. ``h{hosts-1}.{domain}``.
        pages: generated pages over all hosts (each host's ``/`` not counted); >= hosts.
        ports: listening ports; host j is on port ``j % ports``.
        seed: the seed of the links and of the per-host delays.
        zipf: the exponent of host sizes (0 = all alike; 1 = classic Zipf: host 0
            has about ``pages / ln(hosts)`` pages).
        links_per_page: links on each page, the chain link included.
        cross_host_share: the probability that a drawn link leaves its host.
        delay: seconds between a request and its response, for every host, or
            ``(low, high)``: each host's own, drawn once.
        page_size: approximate size of a page in bytes.
        robots_disallow, robots_crawl_delay: every host's ``/robots.txt`` rules.
        domain: the domain under which the host names are made (``.test`` is reserved).
        host, port, max_seconds, log_requests: as for ``TestSite``.
    """

    def __init__(
        self,
        hosts: int = 1_000,
        pages: int = 10_000,
        ports: int = 4,
        seed: int = 0,
        zipf: float = 1.0,
        links_per_page: int = 10,
        cross_host_share: float = 0.8,
        delay: float | tuple[float, float] = 0.0,
        page_size: int = 2048,
        robots_disallow: Sequence[str] = (),
        robots_crawl_delay: float | None = None,
        domain: str = "web.test",
        host: str = "127.0.0.1",
        port: int = 0,
        max_seconds: float | None = 600.0,
        log_requests: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if hosts < 1 or ports < 1 or links_per_page < 2:
            raise ValueError(f"hosts and ports must be >= 1 and links_per_page >= 2, not "
                             f"{hosts!r}, {ports!r}, {links_per_page!r}")
        if pages < hosts:
            raise ValueError(f"pages must be at least one per host ({hosts}), not {pages!r}")
        if zipf < 0 or not 0 <= cross_host_share <= 1 or page_size < 0:
            raise ValueError(f"zipf and page_size must be >= 0 and cross_host_share within [0, 1], "
                             f"not {zipf!r}, {page_size!r}, {cross_host_share!r}")
        low, high = delay if isinstance(delay, tuple) else (delay, delay)
        if not 0 <= low <= high:
            raise ValueError(f"delay must be >= 0, or (low, high) with 0 <= low <= high, not {delay!r}")
        if robots_crawl_delay is not None and not robots_crawl_delay >= 0:
            raise ValueError(f"robots_crawl_delay must be >= 0 or None, not {robots_crawl_delay!r}")
        super().__init__(min(ports, hosts), host, port, max_seconds, log_requests, tls)
        self.hosts = hosts
        self.pages = pages
        self.seed = seed
        self.zipf = zipf
        self.links_per_page = links_per_page
        self.cross_host_share = cross_host_share
        self.page_size = page_size
        self.robots_disallow = tuple(robots_disallow)
        self.robots_crawl_delay = robots_crawl_delay
        self.names = [f"h{j}.{domain}".lower() for j in range(hosts)]
        self.host_pages = zipf_sizes(hosts, pages, zipf)
        self._first_page = [0, *itertools.accumulate(self.host_pages)]  # global number of each host's page 0
        if isinstance(delay, tuple):
            self.delays = [random.Random(f"{seed}/delay/{j}").uniform(low, high) for j in range(hosts)]
        else:
            self.delays = [delay] * hosts
        self._host_counters = [PortCounters() for _ in range(hosts)]

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running" if self._server else "new"
        return f"<SyntheticWeb hosts={self.hosts} pages={self.pages} ports={self._ports} {state}>"

    # -- addresses

    @property
    def base_urls(self) -> list[str]:
        """``http://h{j}.{domain}:{port}/`` (``https`` with ``tls``) of every host, host 0 (the biggest) first."""
        ports = self.ports
        return [f"{self.scheme}://{name}:{ports[j % len(ports)]}/" for j, name in enumerate(self.names)]

    @property
    def resolve(self) -> dict[str, str]:
        """``{"h{j}.{domain}:{port}": loopback address}`` for every host: ``FetcherConfig(resolve=...)``."""
        ports = self.ports
        return {f"{name}:{ports[j % len(ports)]}": self.host for j, name in enumerate(self.names)}

    def page_urls(self) -> list[str]:
        """Every URL of the web (what a full crawl must fetch), each host's ``/`` first."""
        return [
            url
            for base, size in zip(self.base_urls, self.host_pages)
            for url in (base, *(f"{base}page/{i}" for i in range(size)))
        ]

    # -- counters

    def host_counters(self, name: str) -> PortCounters:
        """A copy of one host name's counters: its requests and paths, and the connections its
        first requests named (``accepted``, ``open_now``, ``max_open``)."""
        with self._lock:
            return self._host_counters[self.names.index(name.lower())].copy()

    def requested_urls(self) -> collections.Counter[str]:
        """Requests per URL over every host (``base_url`` + path), for "each page once" checks."""
        with self._lock:
            return collections.Counter({
                f"{base}{path[1:]}": count
                for base, counters in zip(self.base_urls, self._host_counters)
                for path, count in counters.paths.items()
            })

    def peak_connections(self) -> dict[str, int]:
        """The most connections each host name had open at once (hosts never asked are left out)."""
        with self._lock:
            return {name: c.max_open for name, c in zip(self.names, self._host_counters) if c.accepted}

    def all_counters(self) -> list[PortCounters]:
        """The ports' counters and every host name's."""
        return [*self._counters, *self._host_counters]

    # -- what is served

    def make_server(self, listeners: list[socket.socket]) -> Server:
        """The loop serving every host name; a request naming no known host gets 404s from its port."""
        robots = Resource("200 OK", TEXT_TYPE, [robots_txt(self.robots_disallow, self.robots_crawl_delay)])
        bases = self.base_urls
        names: dict[bytes, Origin] = {}
        for j, base in enumerate(bases):
            fixed = {"/": self._index(j, bases), "/robots.txt": robots}
            make = self._page_maker(j, bases)
            origin = Origin(GeneratedPages(fixed, self.host_pages[j], make), self._host_counters[j], self.delays[j])
            names[base[len(f"{self.scheme}://"):-1].encode("ascii")] = origin
        ports = [Origin({}, counters) for counters in self._counters]
        args = (listeners, ports, self._lock, self.max_seconds, self.log_requests, names)
        return Server(*args) if self.tls is None else TLSServer(*args, context=self.tls)

    def _drawn_links(self, rng: random.Random, j: int, count: int, bases: Sequence[str]) -> list[tuple[str, str]]:
        """``count`` links drawn for a page of host ``j``: elsewhere in the web or on ``j`` itself."""
        links = []
        for _ in range(count):
            if rng.random() < self.cross_host_share:
                page = rng.randrange(self.pages)
                target = bisect.bisect_right(self._first_page, page) - 1
                page -= self._first_page[target]
                href = f"/page/{page}" if target == j else f"{bases[target]}page/{page}"
                links.append((href, f"host {target} page {page}"))
            else:
                page = rng.randrange(self.host_pages[j])
                links.append((f"/page/{page}", f"page {page}"))
        return links

    def _index(self, j: int, bases: Sequence[str]) -> Resource:
        rng = random.Random(f"{self.seed}/{j}/index")
        hrefs = [("/page/0", "page 0"), (bases[(j + 1) % self.hosts], "next host")]
        hrefs += self._drawn_links(rng, j, max(0, self.links_per_page - 2), bases)
        body = generated_page(f"Synthetic web host {j}", links_html(hrefs), self.page_size)
        return Resource("200 OK", HTML_TYPE, [body])

    def _page_links(self, j: int, i: int, bases: Sequence[str]) -> list[tuple[str, str]]:
        """The links of host ``j``'s page ``i``: the next page (or home from the last), then drawn ones."""
        rng = random.Random(f"{self.seed}/{j}/{i}")
        hrefs = [(f"/page/{i + 1}", f"page {i + 1}") if i + 1 < self.host_pages[j] else ("/", "home")]
        return hrefs + self._drawn_links(rng, j, self.links_per_page - 1, bases)

    def _page_maker(self, j: int, bases: Sequence[str]) -> Callable[[int], Resource]:
        """What host ``j``'s page ``i`` is; a subclass makes its own pages of the same links."""

        def page(i: int) -> Resource:
            body = generated_page(f"Synthetic web host {j} page {i}", links_html(self._page_links(j, i, bases)),
                                  self.page_size)
            return Resource("200 OK", HTML_TYPE, [body])

        return page

"""What each scenario asks for: A-C fetch a URL list, D and E crawl the whole site; and ``SCENARIOS``.

Scenarios (``--quick`` divides the GET counts and the crawled pages by 5):

A  throughput: 1 host, 64 connections, 20,000 GETs of 4 KiB pages, keep-alive.
B  latency-bound: 50 hosts, 4 per host, 200 in all, 50 ms latency, 10,000 GETs;
   ideal 50 x 4 / 0.05 = 4,000 pages/s.
C  many connections: 1 host, 2,000 connections, 200 ms latency, 20,000 GETs;
   ideal 2,000 / 0.2 = 10,000 pages/s.
D  crawl: ``niofetcher crawl`` against Scrapy, 4 hosts x 2,500 generated pages of 4 KiB.
E  real-page crawl: the same with the real pages of ../shared/corpus/pages as the bodies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from . import targets

#: A scenario's targets: from its summary (one row per client), each verdict's text and MET/MISSED/None.
Targets = Callable[[dict[str, dict[str, Any]]], list[tuple[str, bool | None]]]


@dataclass(frozen=True)
class Scenario:
    """What FetchScenario (A-C) and CrawlScenario (D, E) share."""

    key: str
    title: str
    hosts: int = 1
    per_host: int = 64
    total: int = 64
    page_size: int = 4096
    targets: Targets | None = field(default=None, compare=False, repr=False)

    def config(self) -> dict[str, Any]:
        """The scenario's settings as stored in the raw-runs JSON."""
        return {k: v for k, v in asdict(self).items() if k != "targets"}


@dataclass(frozen=True)
class FetchScenario(Scenario):
    """Fetch a URL list from the test site with every fetching client."""

    gets: int = 20_000
    delay_ms: float = 0.0
    max_pages_per_host: int = 1000
    show_ceiling: bool = False

    @property
    def pages_per_host(self) -> int:
        """Distinct pages per host: as many as the GETs need, at most ``max_pages_per_host``."""
        return min(self.max_pages_per_host, math.ceil(self.gets / self.hosts))

    @property
    def ideal(self) -> float | None:
        """Pages/s with every allowed connection always busy waiting out the latency."""
        if self.delay_ms <= 0:
            return None
        return min(self.total, self.hosts * self.per_host) / (self.delay_ms / 1000.0)

    def describe(self) -> str:
        """The heading: hosts, limits, latency, GETs and the ideal rate."""
        delay = f", {self.delay_ms:g} ms latency" if self.delay_ms else ", no added latency"
        ideal = f", ideal {self.ideal:,.0f} pages/s" if self.ideal else ""
        return (f"Scenario {self.key}: {self.title} — {self.hosts} host(s), {self.per_host} per host, "
                f"{self.total} in all{delay}, {self.gets:,} GETs of {self.page_size} B pages{ideal}")

    def shrink(self, factor: int) -> FetchScenario:
        """The scenario with ``factor`` times fewer GETs (--quick)."""
        return replace(self, gets=max(self.hosts, self.gets // factor))

    def urls(self, bases: list[str]) -> list[str]:
        """GET i goes to host i mod hosts, page (i div hosts) mod pages: spread evenly, round robin."""
        hosts, pages = len(bases), self.pages_per_host
        return [f"{bases[i % hosts]}page/{(i // hosts) % pages}" for i in range(self.gets)]


@dataclass(frozen=True)
class CrawlScenario(Scenario):
    """Crawl the whole test site from host 0's index with each crawler; every page once, robots.txt obeyed."""

    pages_per_host: int = 2500
    corpus: bool = False

    @property
    def site_pages(self) -> int:
        """Every page a full crawl fetches: each host's index and its generated pages (robots.txt not counted)."""
        return self.hosts * (self.pages_per_host + 1)

    def describe(self) -> str:
        """The heading: the site's size, its bodies and the limits."""
        bodies = ("real pages of ../shared/corpus/pages as bodies, site links added; only the site's pages "
                  "followed" if self.corpus else f"generated pages of {self.page_size} B")
        return (f"Scenario {self.key}: {self.title} — {self.hosts} hosts x {self.pages_per_host:,} pages "
                f"(+ index) = {self.site_pages:,} pages, {bodies}; {self.per_host} per host, "
                f"{self.total} in all, robots.txt obeyed")

    def shrink(self, factor: int) -> CrawlScenario:
        """The scenario with ``factor`` times fewer pages per host (--quick)."""
        return replace(self, pages_per_host=max(1, self.pages_per_host // factor))


SCENARIOS: dict[str, FetchScenario | CrawlScenario] = {
    "A": FetchScenario("A", "throughput", hosts=1, per_host=64, total=64, gets=20_000, show_ceiling=True,
                       targets=targets.targets_a),
    "B": FetchScenario("B", "latency-bound", hosts=50, per_host=4, total=200, gets=10_000, delay_ms=50.0,
                       targets=targets.targets_b),
    "C": FetchScenario("C", "many connections", hosts=1, per_host=2000, total=2000, gets=20_000, delay_ms=200.0,
                       targets=targets.targets_c),
    "D": CrawlScenario("D", "crawl: `niofetcher crawl` of a generated site vs Scrapy", hosts=4,
                       pages_per_host=2500, per_host=16, total=64, page_size=4096, targets=targets.targets_d),
    "E": CrawlScenario("E", "real-page crawl vs Scrapy, each extractor", hosts=4, pages_per_host=2500,
                       per_host=16, total=64, corpus=True, targets=targets.targets_e),
}

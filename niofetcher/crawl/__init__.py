"""The crawler on top of the fetcher: frontier, link extraction, robots.txt, parse processes.

Nothing in the fetcher imports this package; it imports the fetcher.  The modules, one job each:
``crawler`` (the coordinator, :class:`Crawler`), ``pipeline`` (its pump and delivery threads),
``config`` (what a crawl is given and gives back), ``frontier/`` (the backends and the protocol
the coordinator knows them by), ``parsing`` (the parse executor) over ``parse`` (link extraction) and ``workers`` (parse processes),
``robots_gate`` (robots.txt per origin) over ``robots`` (what robots.txt means), and ``policy``
(which fetch is retried, which link followed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import CrawlConfig, CrawledPage, CrawlSummary
    from .crawler import Crawler
    from .frontier import Frontier, FrontierError, FrontierLocked

# The names load on first use, each from its module: importing one module of the package (the
# frontier; in a parse process, the parser) does not import the others (the coordinator, the
# frontier, robots.txt, bs4 and lxml where they are not needed).
_LAZY = {
    "CrawlConfig": "config", "CrawlSummary": "config", "CrawledPage": "config", "Crawler": "crawler",
    "Frontier": "frontier", "FrontierError": "frontier", "FrontierLocked": "frontier",
}


def __getattr__(name: str) -> object:
    import importlib

    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


__all__ = ["CrawlConfig", "CrawlSummary", "CrawledPage", "Crawler", "Frontier", "FrontierError", "FrontierLocked"]

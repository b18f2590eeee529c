"""niofetcher: a non-blocking HTTP/1.1 page fetcher for web crawlers.

One thread runs a ``selectors`` loop over non-blocking sockets speaking
HTTP/1.1 through h11; a connection table keyed by (scheme, host, port)
enforces per-host and total connection limits, politeness delays and a
connection service time.  URLs go in through ``register()`` from any thread
and results come out through ``get()`` / ``results()`` from any thread.

On top of it, ``Crawler`` keeps a SQLite ``Frontier`` of URLs, extracts links
with beautifulsoup4 (or lxml) in worker processes while the loop downloads,
obeys robots.txt, retries, and resumes after a crash.
"""

from typing import TYPE_CHECKING

from ._version import __version__
from .config import FetcherConfig
from .errors import ErrorKind
from .fetcher import NIOFetcher
from .models import Exchange, FetcherStats, FetchResult, HostStats, URLBean
from .protocols import FetchedHandler, Fetcher, URLRegister
from .resolver import ResolvedAddresses
from .throttle import Throttle
from .urls import Origin

if TYPE_CHECKING:
    from .crawl import CrawlConfig, CrawledPage, Crawler, CrawlSummary, Frontier, FrontierError, FrontierLocked
    from .crawl import parse as parse
    from .crawl.parse import Form, PageLinks, extract
    from .crawl.schedule import RevisitPolicy

# The crawler's names load on first use: a program that only fetches does not
# pay for importing beautifulsoup4, lxml, protego and sqlite3.  ``parse`` is the
# module (``from niofetcher import parse``), the rest are names in these modules.
_LAZY = {
    "CrawlConfig": "crawl", "CrawlSummary": "crawl", "CrawledPage": "crawl", "Crawler": "crawl",
    "Frontier": "crawl", "FrontierError": "crawl", "FrontierLocked": "crawl",
    "Form": "crawl.parse", "PageLinks": "crawl.parse", "extract": "crawl.parse",
    "RevisitPolicy": "crawl.schedule",
}


def __getattr__(name: str) -> object:
    import importlib

    if name == "parse":
        value: object = importlib.import_module(".crawl.parse", __name__)
    elif name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'niofetcher' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "CrawlConfig",
    "CrawlSummary",
    "CrawledPage",
    "Crawler",
    "ErrorKind",
    "Exchange",
    "FetchResult",
    "FetchedHandler",
    "Fetcher",
    "FetcherConfig",
    "FetcherStats",
    "Form",
    "Frontier",
    "FrontierError",
    "FrontierLocked",
    "HostStats",
    "NIOFetcher",
    "Origin",
    "PageLinks",
    "ResolvedAddresses",
    "RevisitPolicy",
    "Throttle",
    "URLBean",
    "URLRegister",
    "__version__",
    "extract",
]

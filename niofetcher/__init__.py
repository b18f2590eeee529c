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

from ._version import __version__
from .config import FetcherConfig
from .errors import ErrorKind
from .fetcher import NIOFetcher
from .models import FetcherStats, FetchResult, HostStats, URLBean
from .protocols import FetchedHandler, Fetcher, URLRegister
from .urls import Origin

# The crawler's names load on first use: a program that only fetches does not
# pay for importing beautifulsoup4, lxml, protego and sqlite3.
_LAZY = {
    "CrawlConfig": "crawl.crawler", "CrawlSummary": "crawl.crawler", "CrawledPage": "crawl.crawler",
    "Crawler": "crawl.crawler",
    "Frontier": "crawl.frontier", "FrontierError": "crawl.frontier", "FrontierLocked": "crawl.frontier",
    "Form": "crawl.parse", "PageLinks": "crawl.parse", "extract": "crawl.parse",
}
# Modules that moved into crawl/ and are still reached as ``from niofetcher import parse``.
_LAZY_MODULES = {"parse": "crawl.parse"}


def __getattr__(name: str) -> object:
    import importlib

    if name in _LAZY_MODULES:
        value: object = importlib.import_module(f".{_LAZY_MODULES[name]}", __name__)
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
    "URLBean",
    "URLRegister",
    "__version__",
    "extract",
]

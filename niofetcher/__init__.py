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

__version__ = "0.1.0"

from .config import FetcherConfig
from .errors import ErrorKind
from .fetcher import NIOFetcher
from .models import FetcherStats, FetchResult, HostStats, URLBean
from .protocols import FetchedHandler, Fetcher, URLRegister
from .urls import Origin

# The crawler's names load on first use: a program that only fetches does not
# pay for importing beautifulsoup4, lxml, protego and sqlite3.
_LAZY = {
    "CrawlConfig": "crawler", "CrawlSummary": "crawler", "CrawledPage": "crawler", "Crawler": "crawler",
    "Frontier": "frontier", "FrontierError": "frontier", "FrontierLocked": "frontier",
    "Form": "parse", "PageLinks": "parse", "extract": "parse",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'niofetcher' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
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

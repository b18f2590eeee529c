"""niofetcher: a non-blocking HTTP/1.1 page fetcher for web crawlers.

One thread runs a ``selectors`` loop over non-blocking sockets speaking
HTTP/1.1 through h11; a connection table keyed by (scheme, host, port)
enforces per-host and total connection limits, politeness delays and a
connection service time.  URLs go in through ``register()`` from any thread
and results come out through ``get()`` / ``results()`` from any thread.
"""

__version__ = "0.1.0"

from .config import FetcherConfig  # noqa: E402
from .errors import ErrorKind  # noqa: E402
from .fetcher import NIOFetcher  # noqa: E402
from .models import FetcherStats, FetchResult, HostStats, URLBean  # noqa: E402
from .protocols import FetchedHandler, Fetcher, URLRegister  # noqa: E402
from .urls import Origin  # noqa: E402

__all__ = [
    "ErrorKind",
    "FetchResult",
    "FetchedHandler",
    "Fetcher",
    "FetcherConfig",
    "FetcherStats",
    "HostStats",
    "NIOFetcher",
    "Origin",
    "URLBean",
    "URLRegister",
    "__version__",
]

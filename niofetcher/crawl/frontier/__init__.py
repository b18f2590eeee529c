"""Crawl frontiers: the table of URLs a crawl knows, one module per backend.

``base`` holds what every backend shares (the states, :class:`FrontierURL`, :class:`FrontierError`
and its kinds) and :class:`FrontierBackend`, the protocol the crawler knows a frontier by; ``sqlite``
is the embedded backend, :class:`Frontier`.  :func:`open_frontier` (``locations``) opens a frontier by
where it is -- a path, a ``postgresql://`` URL, a scheme an installed package adds -- and is the one
place outside the backends that names them: nothing above this package imports a backend or its
driver.
"""

from .base import STATES, FrontierBackend, FrontierError, FrontierErrorKind, FrontierURL
from .locations import frontier_status, open_frontier
from .lock import FrontierLocked
from .sqlite import Frontier

__all__ = [
    "STATES", "Frontier", "FrontierBackend", "FrontierError", "FrontierErrorKind", "FrontierLocked", "FrontierURL",
    "frontier_status", "open_frontier",
]

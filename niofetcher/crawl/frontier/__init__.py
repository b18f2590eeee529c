"""Crawl frontiers: the table of URLs a crawl knows, one package per backend.

``base`` holds what every backend shares (the states, :class:`FrontierURL`, :class:`FrontierError`
and its kinds) and :class:`FrontierBackend`, the protocol the crawler knows a frontier by; a
frontier is ``service``'s :class:`~.service.FrontierService`, which does what every backend would
do the same way and holds a store (``store``'s :class:`~.store.Store`, the storage operations);
``capabilities`` the two a store may lack (host leases, a robots.txt store) and their plain
answers; ``sqlstore`` what the two SQL stores share.  The retry policy is not here: the crawler
tells a frontier when a URL is due (``crawl/schedule.py``).  ``sqlite/`` is the embedded store
(:class:`Frontier` is the service over it), and ``postgres/`` the one workers share; their SQL is
``schema.py`` and ``postgres_schema.py``.  :func:`open_frontier` (``locations``) opens
a frontier by where it is -- a path, a ``postgresql://`` URL, a scheme an installed package adds --
and is the one place outside the backends that names them: nothing above this package imports a
backend or its driver.
"""

from .base import STATES, FrontierBackend, FrontierError, FrontierErrorKind, FrontierURL, Revisits, Visit
from .locations import frontier_failures, frontier_status, open_frontier, prepare_frontier
from .sqlite import Frontier, FrontierLocked

__all__ = [
    "STATES", "Frontier", "FrontierBackend", "FrontierError", "FrontierErrorKind", "FrontierLocked", "FrontierURL",
    "Revisits", "Visit", "frontier_failures", "frontier_status", "open_frontier", "prepare_frontier",
]

"""Crawl frontiers: the table of URLs a crawl knows, one package per backend.

``base`` holds what every backend shares (the states, :class:`FrontierURL`, :class:`FrontierError`
and its kinds) and :class:`FrontierBackend`, the protocol the crawler knows a frontier by.
``sqlite/`` is the embedded backend, :class:`Frontier`, and ``postgres/`` the one workers share;
their SQL is ``schema.py`` and ``postgres_schema.py``.  :func:`open_frontier` (``locations``) opens
a frontier by where it is -- a path, a ``postgresql://`` URL, a scheme an installed package adds --
and is the one place outside the backends that names them: nothing above this package imports a
backend or its driver.
"""

from .base import STATES, FrontierBackend, FrontierError, FrontierErrorKind, FrontierURL
from .locations import frontier_status, open_frontier
from .sqlite import Frontier, FrontierLocked

__all__ = [
    "STATES", "Frontier", "FrontierBackend", "FrontierError", "FrontierErrorKind", "FrontierLocked", "FrontierURL",
    "frontier_status", "open_frontier",
]

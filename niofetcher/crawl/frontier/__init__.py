"""Crawl frontiers: the table of URLs a crawl knows, one module per backend.

``base`` holds what every backend shares (the states, :class:`FrontierURL`, :class:`FrontierError`)
and :class:`FrontierBackend`, the protocol the crawler knows a frontier by; ``sqlite`` is the
embedded backend, :class:`Frontier`.
"""

from .base import STATES, FrontierBackend, FrontierError, FrontierURL
from .lock import FrontierLocked
from .sqlite import Frontier

__all__ = ["STATES", "Frontier", "FrontierBackend", "FrontierError", "FrontierLocked", "FrontierURL"]

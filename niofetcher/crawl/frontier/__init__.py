"""Crawl frontiers: the table of URLs a crawl knows, one module per backend."""

from .sqlite import STATES, Frontier, FrontierError, FrontierLocked, FrontierURL

__all__ = ["STATES", "Frontier", "FrontierError", "FrontierLocked", "FrontierURL"]

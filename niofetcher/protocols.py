"""The three roles of a fetcher, so that a crawler depends on roles, not on a class."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .models import FetchResult, URLBean


@runtime_checkable
class URLRegister(Protocol):
    """Takes URLs to fetch, from any thread."""

    def register(self, url_or_bean: str | URLBean, priority: int = 0) -> bool:
        """Queue a URL; False when it is not taken (shut down, or too many wait)."""


@runtime_checkable
class FetchedHandler(Protocol):
    """Hands out completed fetches, from any thread."""

    def get(self, timeout: float | None = None) -> FetchResult | None:
        """The next completed fetch; None when ``timeout`` passes first."""


@runtime_checkable
class Fetcher(Protocol):
    """Something that runs and can be stopped."""

    def start(self) -> None:
        """Begin working."""

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop: finish the work taken (``wait``, at most ``timeout`` s) or cancel it."""

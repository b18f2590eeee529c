"""Where a frontier is kept, and the one place that names the backends: :func:`open_frontier` and
:func:`frontier_status`.

:func:`prepare_frontier` and :func:`frontier_failures` are what ``crawl --frontier`` asks before and
after its run, without joining the crawl.

A location is a filesystem path -- a SQLite file, or ``":memory:"`` -- or a URL: ``postgresql://``
(or ``postgres://``) is a crawl in a PostgreSQL database, shared by workers; any other scheme is a
backend that an installed package declares as an entry point of the group ``niofetcher.frontiers``,
named after the scheme, whose object is a callable ``(location, **options)`` returning a
:class:`~niofetcher.crawl.frontier.store.Store`, with host leases or a robots.txt store or neither
(``capabilities.py``), which the frontier service holds.  A backend's module is imported only when
a location names it, so that psycopg is loaded by a PostgreSQL crawl alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from .base import CrawlStatus, FrontierError, FrontierErrorKind
from .service import FrontierService

if TYPE_CHECKING:
    from .base import FrontierBackend

__all__ = ["ENTRY_POINT_GROUP", "check_shared_location", "frontier_failures", "frontier_status", "open_frontier",
           "prepare_frontier"]

#: The entry point group where a package declares a frontier backend, by URL scheme.
ENTRY_POINT_GROUP = "niofetcher.frontiers"

_POSTGRES_SCHEMES = ("postgresql", "postgres")
# RFC 3986's scheme, then "//": a path never starts so ("C:\\x" and "./a:b" do not).
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")

def check_shared_location(location: object) -> str:
    """``location`` checked to be the URL of a frontier shared by workers (``CrawlConfig.frontier``).

    Raises:
        ValueError: in one line, for anything else (a path is a SQLite frontier's ``db_path``).
    """
    scheme = _scheme(location) if isinstance(location, str) else None
    if scheme is None or (scheme not in _POSTGRES_SCHEMES and scheme not in _plugins()):
        raise ValueError(f"frontier must be a postgresql:// (or postgres://{_others()}) URL")
    return str(location)


def open_frontier(location: str | os.PathLike[str], **options: Any) -> FrontierBackend:
    """Open (creating when missing) the frontier at ``location``, with the options of its backend.

    A path: the SQLite :class:`~niofetcher.crawl.frontier.sqlite.Frontier` (``clock``,
    ``traps``, ...).  A ``postgresql://`` URL: a worker of a
    :class:`~niofetcher.crawl.frontier.postgres.PostgresFrontier` (``crawl`` names the crawl,
    required; ``lease_seconds``, ``max_hosts``, ...).  Another scheme: the backend of the
    ``niofetcher.frontiers`` entry point of that name: the store it opens (given the options but
    ``traps``, which the service applies) under a :class:`FrontierService`.

    Raises:
        FrontierError: one line, when it cannot be opened; its ``kind`` says why (a URL no backend
            takes, and a backend whose driver is not installed, are ``unavailable``).
        TypeError, ValueError: for options its backend does not take, or takes no such value of.
    """
    scheme = _scheme(location)
    if scheme is None:
        from .sqlite import Frontier

        return Frontier(location, **options)
    dsn = os.fspath(location)
    if scheme in _POSTGRES_SCHEMES:
        from .postgres import PostgresFrontier

        with _driver_needed():
            return PostgresFrontier(dsn, **options)
    entry = _plugins().get(scheme)
    if entry is None:
        raise FrontierError(f"no frontier backend takes {scheme}:// URLs (known: a path, postgresql://, "
                            f"postgres://{_others()})", FrontierErrorKind.UNAVAILABLE)
    # The trap rules are the service's; a third party's store may lack host leases or a robots.txt
    # store: the service gives their plain answers.
    traps = options.pop("traps", None)
    return FrontierService(entry.load()(dsn, **options), traps=traps)


def frontier_status(location: str | os.PathLike[str], *, top: int = 10, **options: Any) -> CrawlStatus:
    """Where the crawl at ``location`` stands, read without joining it (``niofetcher status``): its
    URLs per state, its ``top`` busiest hosts and, on a shared frontier, its live workers.  A
    PostgreSQL frontier needs ``crawl``.

    Raises:
        FrontierError: one line naming the frontier, when it cannot be read; for a backend that
            has no status reader (an entry point's), ``unavailable``.
    """
    scheme = _scheme(location)
    if scheme is None:
        from .sqlite import crawl_status

        return crawl_status(location, top=top)
    if scheme in _POSTGRES_SCHEMES:
        from .postgres import crawl_status as postgres_status

        with _driver_needed():
            return postgres_status(os.fspath(location), top=top, **options)
    raise FrontierError(f"status reads SQLite and PostgreSQL frontiers, not {scheme}:// ones",
                        FrontierErrorKind.UNAVAILABLE)


def prepare_frontier(location: str, **options: Any) -> None:
    """Make sure the shared frontier at ``location`` can be used before a worker starts on it: a
    PostgreSQL crawl's tables made or checked without joining it (a worker that joined would take
    free hosts for that moment); another backend's opened and closed.

    Raises:
        FrontierError: one line, as :func:`open_frontier`.
    """
    if _scheme(location) in _POSTGRES_SCHEMES:
        from .postgres import prepare_crawl

        with _driver_needed():
            prepare_crawl(location, **options)
        return
    open_frontier(location, **options).close()


def frontier_failures(location: str | os.PathLike[str], since: float, limit: int,
                      **options: Any) -> list[tuple[str, str]]:
    """The first ``limit`` URLs that ended in 'error' at or after ``since``, with why; a PostgreSQL
    crawl's read without joining it (see :func:`prepare_frontier`).

    Raises:
        FrontierError: one line, as :func:`open_frontier`.
    """
    if _scheme(location) in _POSTGRES_SCHEMES:
        from .postgres import crawl_failures

        with _driver_needed():
            return crawl_failures(os.fspath(location), since=since, limit=limit, **options)
    with open_frontier(location, **options) as frontier:
        return frontier.failures(since, limit)


@contextmanager
def _driver_needed() -> Iterator[None]:
    """An ImportError of a backend's driver (psycopg) as the FrontierError ``unavailable``."""
    try:
        yield
    except ImportError as exc:
        raise FrontierError(str(exc), FrontierErrorKind.UNAVAILABLE) from exc


def _scheme(location: str | os.PathLike[str] | object) -> str | None:
    """The URL scheme of ``location`` in lower case; None for a path."""
    if not isinstance(location, str):
        return None  # an os.PathLike is a path
    match = _URL.match(location)
    return match.group(1).lower() if match is not None else None


def _plugins() -> dict[str, EntryPoint]:
    """The backends installed packages declare, by scheme (PostgreSQL's own cannot be replaced)."""
    found = {entry.name.lower(): entry for entry in entry_points(group=ENTRY_POINT_GROUP)}
    return {scheme: entry for scheme, entry in found.items() if scheme not in _POSTGRES_SCHEMES}


def _others() -> str:
    """The schemes of :func:`_plugins`, for a message: ", redis://" and so on."""
    return "".join(f", {scheme}://" for scheme in sorted(_plugins()))

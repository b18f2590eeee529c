"""Crawler traps: the rules that keep a crawl from running away inside one site, applied where URLs
are admitted -- once, in ``service.prepare_additions``, which every backend's ``add_many()`` calls.

A site can mint URLs without end: a calendar that links to next month for ever, a session ID in every
link of every response (``;jsessionid=``, ``?sid=``), relative links that grow a path
(``/a/b/a/b/...``), pages that answer 200 at any path.  Scope, depth and include/exclude patterns do
not see them (the URLs are in scope, and a calendar is one hop deeper a month), so the frontier
checks each link it is given against :class:`TrapRules`:

- ``strip_query_params``: the named query parameters, and ``;name=value`` path parameters, are
  dropped from the normal form (:class:`~niofetcher.urls.QueryCleaner`): the URL stored is the URL
  without them, so a session ID makes no new URL.  (DESIGN.md says "before a URL is normalised";
  the stored URL is the same either way -- normalising adds, drops and renames no parameter -- and
  cleaning the normal form matches names in one spelling: no fragment, escapes in upper case);
- ``max_url_length``: a stored form longer than this is refused;
- ``max_path_repeats``: a path in which one segment occurs more often than this is refused
  (:func:`~niofetcher.urls.path_repeats` says how they are counted);
- ``max_pages_per_host``: once a host has this many URLs in the frontier, its further new URLs are
  refused.  The frontier keeps a count per host of the URLs it admitted (the ``admitted`` table on
  SQLite; ``admitted`` rows per worker on PostgreSQL, summed), so a resumed crawl keeps it.

Seeds -- URLs added at depth 0 with no parent: what the user typed, and the sitemap probes of their
hosts -- are never refused, only cleaned: a seed the user typed is not dropped behind their back.
They do count towards their host's budget.

Each refusal is counted by cause (:data:`CAUSES`).  The frontier remembers the links it refused
lately (``RefusedURLs``, up to 100,000): one found again is neither checked nor counted again, so
the counts are of distinct links, but for those refused longer ago than that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ...urls import QueryCleaner, path_repeats
from .recent import RecentKeys

__all__ = ["CAUSES", "RefusedURLs", "TrapRules", "stored_refusals"]

#: The causes a link is refused for, as ``CrawlSummary.refused`` and ``status`` name them: the
#: option that refused it.
CAUSES = ("max_url_length", "max_path_repeats", "max_pages_per_host")


@dataclass(frozen=True)
class TrapRules:
    """What the frontier refuses or rewrites before it stores a link (module docstring).

    None turns a limit off; ``strip_query_params=()`` strips nothing.  CrawlConfig checks the values
    a user gives; these are taken as they come.
    """

    max_pages_per_host: int | None = None
    max_url_length: int | None = None
    max_path_repeats: int | None = None
    strip_query_params: tuple[str, ...] = ()
    cleaner: QueryCleaner = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cleaner", QueryCleaner(self.strip_query_params))

    def __bool__(self) -> bool:
        return (self.max_pages_per_host is not None or self.max_url_length is not None
                or self.max_path_repeats is not None or bool(self.strip_query_params))

    def refusal(self, key: str) -> str | None:
        """The cause for which the stored form ``key`` is refused (:data:`CAUSES`), None when it is not:
        the URL-level rules, not the per-host budget, which needs the frontier's counts."""
        most = self.max_url_length
        if most is not None and len(key) > most:
            return "max_url_length"
        repeats = self.max_path_repeats
        if repeats is not None:
            # A segment of the path there more than ``repeats`` times makes at least ``repeats`` of
            # the URL's "/"-separated parts duplicates (the scheme's "//" and a trailing "/" add an
            # empty one, a query may add more): most links are cleared by a split and a set.
            parts = key.split("/")
            if len(parts) - len(set(parts)) >= repeats and path_repeats(key) > repeats:
                return "max_path_repeats"
        return None


class RefusedURLs(RecentKeys):
    """The stored forms refused lately (for causes that will not change while the crawl runs): a
    link refused again is skipped at once and not counted twice.  Forgotten when a rollback takes
    back the counts that refused them."""


def stored_refusals(location: str | os.PathLike[str], **options: Any) -> dict[str, int]:
    """The links refused by cause over every run (and, on PostgreSQL, every worker) of the crawl at
    ``location``, read without joining it, as ``niofetcher status`` shows them; {} for a crawl made
    before they were kept, or one that cannot be read (status says why in its own line).
    A PostgreSQL frontier needs ``crawl``."""
    text = os.fspath(location)
    if "://" not in text:
        return _sqlite_refusals(text)
    if text.split("://", 1)[0].lower() in ("postgresql", "postgres"):
        return _postgres_refusals(text, str(options["crawl"]))
    return {}


def _sqlite_refusals(path: str) -> dict[str, int]:
    import sqlite3
    from urllib.parse import quote

    # As sqlite/status.py reads a file: read-only, and immutable when no crawl has it open (no -wal
    # beside it), so that reading creates no -wal and -shm.
    immutable = "" if os.path.exists(f"{path}-wal") else "&immutable=1"
    try:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro{immutable}", uri=True, timeout=5.0)
    except sqlite3.Error:
        return {}
    try:
        return {str(cause): int(n) for cause, n in conn.execute("SELECT cause, n FROM refusals WHERE n > 0")}
    except sqlite3.Error:  # a file of schema version 6 or older: none kept
        return {}
    finally:
        conn.close()


def _postgres_refusals(dsn: str, crawl: str) -> dict[str, int]:
    try:
        import psycopg
        from psycopg import sql
    except ImportError:
        return {}
    from .base import check_crawl_name

    try:
        with psycopg.connect(dsn, connect_timeout=10, autocommit=True) as conn:
            rows = conn.execute(sql.SQL("SELECT cause, sum(n) FROM {}.refusals GROUP BY cause HAVING sum(n) > 0")
                                .format(sql.Identifier(check_crawl_name(crawl)))).fetchall()
    except (psycopg.Error, ValueError):
        return {}
    return {str(cause): int(n) for cause, n in rows}

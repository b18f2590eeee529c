"""The JSONL record of a fetched URL: one schema for ``fetch --out`` and ``crawl --out`` (docs/cli.md, "Records").

Every record has every key, in the same order, so that one reader reads both
files; a value that does not apply is null: the crawl's fields (``depth``,
``parent``, ``canonical``, ``noindex``, ``lastmod``, ``duplicate_of``, ``changed``) in a ``fetch`` record,
the page's (``title``, ``links``) when it was not parsed, ``link_urls``
without ``--links``, what a response would have said when none came.

Nothing here imports the crawler: ``fetch`` loads none of it (tests/test_layers.py).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from ..models import FetchResult

if TYPE_CHECKING:
    from ..crawl import CrawledPage
    from ..crawl.parse import PageLinks


def record(
    result: FetchResult, links: PageLinks | None = None, list_links: bool = False, page: CrawledPage | None = None,
) -> dict[str, object]:
    """The record of ``result``.

    ``links``: its page as parsed, None when it was not (not a 2xx HTML page, or ``fetch`` without
    ``--links``); ``list_links``: give the links' URLs too (``--links``); ``page``: the crawl's page
    of this result, for its place in the crawl, None for ``fetch``.
    """
    responded = result.status is not None
    return {
        "url": result.url,
        "final_url": result.final_url,
        "status": result.status,
        "reason": result.reason if responded else None,
        "content_type": result.header("content-type"),
        "bytes": len(result.body),
        # Of a body that came whole: an error after the head delivers the part that arrived, not the page.
        "sha256": hashlib.sha256(result.body).hexdigest() if responded and result.error is None else None,
        "elapsed": round(result.elapsed, 6),
        "fetched_at": round(result.fetched_at, 6),
        "redirects": [{"status": status, "url": url} for status, url in result.redirects],
        "error": result.error.value if result.error is not None else None,
        "error_detail": result.error_detail or None,
        "title": links.title if links is not None else None,
        "links": len(links.links) if links is not None else None,
        "link_urls": links.links if links is not None and list_links else None,
        "depth": page.depth if page is not None else None,
        "parent": page.parent if page is not None else None,
        "canonical": page.canonical if page is not None else None,
        "noindex": page.noindex if page is not None else None,
        "lastmod": page.lastmod if page is not None else None,
        "duplicate_of": page.duplicate_of if page is not None else None,
        "changed": page.changed if page is not None else None,
    }


def page_record(page: CrawledPage, list_links: bool = False) -> dict[str, object]:
    """The record of a crawled page (``crawl --out``; ``list_links``: ``--links``)."""
    return record(page.result, page.links, list_links, page)

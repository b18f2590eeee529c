"""What a completed visit of a page leaves for the next one, under a revisit policy: the
:class:`~niofetcher.crawl.frontier.Visit` the crawler tells the frontier with the page's outcome."""

from __future__ import annotations

from ..models import capture_time
from .frontier import Visit
from .pipeline import Page
from .schedule import ChangeHistory, RevisitPolicy

__all__ = ["visit_of"]


def visit_of(page: Page, policy: RevisitPolicy) -> Visit:
    """What a completed ``page`` leaves for its next visit, and when that is due by ``policy``: a page
    found unchanged keeps the validators and digest stored before, unless the server sent new ones,
    and the time of the capture it repeats; a changed one is a capture of its own."""
    item, result = page.item, page.result
    etag, last_modified = result.header("etag"), result.header("last-modified")
    captured_at = None
    if not page.changed:
        etag = etag if etag is not None else item.etag
        last_modified = last_modified if last_modified is not None else item.last_modified
    else:
        # The time of the response record --warc writes for it (cli/warc.py): its exchange's.
        captured_at = capture_time(result.exchanges[-1].received_at if result.exchanges else result.fetched_at)
    digest = page.digest if page.digest is not None else (None if page.changed else item.digest)
    history = None
    if item.visits and item.since_fetch is not None:
        # Whatever the policy: a crawl that turns estimate_rate on later has its pages' history.
        history = ChangeHistory(item.changes, item.changed_time, item.unchanged_time).after(
            max(item.since_fetch, 0.0), page.changed)
    revisit_in = policy.revisit_in(item.interval if item.visits else None, page.changed, history)
    if history is None:
        return Visit(revisit_in, page.changed, etag, last_modified, digest, captured_at)
    return Visit(revisit_in, page.changed, etag, last_modified, digest, captured_at, history.changed_time,
                 history.unchanged_time)

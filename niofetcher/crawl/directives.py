"""What a page says about itself: robots directives (``<meta name="robots">``, ``X-Robots-Tag``) and
its canonical URL (``<link rel="canonical">``, ``Link: <...>; rel="canonical"``).

Standard library only: ``CrawledPage`` reads the headers of a fetch with it, and a program that
reads a CrawlConfig must not load bs4 and lxml.  The HTML side is harvested by ``parse``; this
module says what the values mean, for both sides.

Directives (Google's and Bing's reading, which every site writes for):

- a value is a comma-separated list, compared case-insensitively: ``content="NOINDEX, Follow"``;
- ``none`` is ``noindex, nofollow``; ``all``, ``index`` and ``follow`` change nothing (the
  default) -- an ``index`` beside a ``noindex`` does not cancel it: the most restrictive wins,
  so several ``<meta name="robots">`` tags (or header fields) simply add up;
- an ``X-Robots-Tag`` value may be addressed to one crawler, ``googlebot: noindex``: such a
  value is for that crawler and not for us, and is left out (a value naming niofetcher is not
  looked for: no site writes one).  ``unavailable_after: <date>`` and ``max-snippet: 20`` are
  directives with a colon, not addresses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..models import FetchResult
from ..urls import absolute_url

__all__ = ["canonical_header", "header_directives", "robots_directives"]

# Directives whose name is followed by a colon and a value: not a crawler's name.
_VALUED = frozenset(("unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"))


def robots_directives(values: Iterable[str], addressed: bool = False) -> frozenset[str]:
    """The directives of ``<meta name="robots">`` contents (or, with ``addressed``, of
    ``X-Robots-Tag`` values), lower-cased, ``none`` expanded to ``noindex`` and ``nofollow``."""
    found: set[str] = set()
    for value in values:
        tokens = [token.strip().lower() for token in value.split(",")]
        if addressed and tokens:
            name, colon, _ = tokens[0].partition(":")
            if colon and name.strip() not in _VALUED:
                continue  # "googlebot: noindex": another crawler's
        for token in tokens:
            if token:
                found.add(token)
    if "none" in found:
        found.update(("noindex", "nofollow"))
    return frozenset(found)


def header_directives(result: FetchResult) -> frozenset[str]:
    """The robots directives of a response's ``X-Robots-Tag`` header fields, all of them."""
    return robots_directives((value for name, value in result.headers if name.lower() == "x-robots-tag"), True)


# One link-value of a Link header (RFC 8288): <target> then ;-parameters, up to the next comma
# outside the brackets.  rel may be quoted and hold several types.
_LINK_VALUE = re.compile(r"<([^>]*)>((?:\s*;\s*[^;,]*)*)")
_REL = re.compile(r"""(?:^|;)\s*rel\s*=\s*(?:"([^"]*)"|([^\s;,"]+))""", re.IGNORECASE)


def canonical_header(result: FetchResult) -> str | None:
    """The absolute URL of the first ``rel="canonical"`` link of a response's ``Link`` headers."""
    for name, value in result.headers:
        if name.lower() != "link":
            continue
        for target, params in _LINK_VALUE.findall(value):
            rel = _REL.search(params)
            if rel is not None and "canonical" in (rel.group(1) or rel.group(2) or "").lower().split():
                url = absolute_url(target, result.final_url)
                if url is not None:
                    return url
    return None

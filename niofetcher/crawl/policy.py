"""The crawl's rules for fetches and links: which fetch is tried again, and which links are followed.

Followed: a page's links, areas, frames and canonical URL (``<link rel="canonical">`` or a
``Link: <...>; rel="canonical"`` header), in scope; only the canonical when the page says nofollow
(``<meta name="robots" content="nofollow">``, ``none``, or the same in ``X-Robots-Tag``).
nofollow is about the links *on* a page ("do not follow the links on this page": Google's and
Bing's reading of the robots meta tag); a canonical is the page's word about itself -- which URL
is this very content -- not a link to another resource, and the usual page that says
``noindex, nofollow`` (a print view, a sorted or tracked variant) names its canonical precisely so
that the crawler goes there instead.  One gap is left: with ``X-Robots-Tag: nofollow`` the
``<link rel="canonical">`` of the body is not followed (the header is read after the body's links
came back from the parse, in one list; docs/crawler.md).  ``follow_nofollow`` ignores nofollow,
as it ignores ``rel="nofollow"``.  A canonical URL is followed like a link, so a
canonical the frontier knows already (waiting, done) is not fetched again, and an unknown one is
fetched once; the page that named it stays recorded as fetched, with ``canonical`` in its record.

Plain functions and plain data: :class:`LinkScope` travels to the parse processes, and the retry
rules are the same for a page and for robots.txt.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import ErrorKind
from ..models import REDIRECT_STATUSES, FetchResult
from ..throttle import retry_after as read_retry_after
from ..urls import normal_host
from .directives import canonical_header, header_directives
from .parse import PageLinks

__all__ = ["LinkScope", "error_text", "is_final", "is_redirect", "retry_after"]

# The fetcher's words (connection.py) for an address or port its settings forbid: allowed_ports,
# deny_networks.  A connect_error carries no other mark of them.


def is_final(result: FetchResult, attempts: int, retry_statuses: Sequence[int], max_attempts: int) -> bool:
    """False for a fetch to try again: cancelled (not the URL's fault), or a retryable failure (an
    error, or a status in ``retry_statuses``) with attempts left (``attempts`` < ``max_attempts``).
    A policy refusal is final at once: it gives the same answer every time."""
    error = result.error
    if error is ErrorKind.CANCELLED:
        return False
    retryable = result.status in retry_statuses if error is None else not result.refused
    return not (retryable and attempts < max_attempts)


def retry_after(result: FetchResult) -> float | None:
    """Seconds a Retry-After header asks to wait, at most an hour (the fetcher's reading,
    ``throttle.retry_after``: delta-seconds or an HTTP date, None for anything else)."""
    return read_retry_after(result.header("retry-after"), time.time())


def error_text(result: FetchResult) -> str:
    """Why a fetch failed, in one line: the error kind and its detail, or the HTTP status and reason."""
    if result.error is not None:
        return f"{result.error.value}: {result.error_detail}"
    return f"HTTP {result.status} {result.reason}".strip()


def is_redirect(result: FetchResult) -> bool:
    """Whether ``result`` is a redirect the crawler follows: a 301, 302, 303, 307 or 308 with a Location."""
    return result.error is None and result.status in REDIRECT_STATUSES and bool(result.header("location"))


@dataclass(frozen=True, slots=True)
class LinkScope:
    """Which links of a page the crawl follows.  Plain data: it travels to the parse processes."""

    # A link's host must be one of these or a name below one, whatever its port: bare hosts in the
    # URL rules' form (urls.domain_host: lower case, A-labels, IPv6 without brackets).
    domains: tuple[str, ...]
    include: tuple[str, ...] = ()  # regexes; when given, a link must match one
    exclude: tuple[str, ...] = ()  # regexes; a link matching one is not followed
    follow_nofollow: bool = False

    def followed(self, links: PageLinks) -> list[str]:
        """The page's links, image-map areas and frames that the crawl follows, each once, in page
        order, then its canonical URL; only the canonical from a page whose ``<meta name="robots">``
        says nofollow (unless ``follow_nofollow``)."""
        if self.follow_nofollow:
            skip: frozenset[str] = frozenset()
        elif "nofollow" in links.robots:
            canonical = links.canonical
            return [canonical] if canonical is not None and self.in_scope(canonical) else []
        else:
            skip = links.nofollow
        candidates = dict.fromkeys((*links.links, *links.areas, *links.frames))
        if links.canonical is not None:
            # Not fetched twice: the frontier knows a canonical that is known, and adds one that is not.
            candidates[links.canonical] = None
        verdicts = _verdicts(self)
        kept = []
        for url in candidates:
            if url in skip:
                continue
            verdict = verdicts.get(url)
            if verdict is None:
                if len(verdicts) >= _MAX_VERDICTS:
                    verdicts.clear()
                verdict = verdicts[url] = self.in_scope(url)
            if verdict:
                kept.append(url)
        return kept

    def after_headers(self, result: FetchResult, followed: list[str]) -> list[str]:
        """``followed`` (what the body led to) as the response's headers leave it: nothing when
        ``X-Robots-Tag`` says nofollow (unless ``follow_nofollow``), the ``Link`` header's
        canonical URL added (in scope) in either case."""
        if not result.headers:
            return followed
        if not self.follow_nofollow and "nofollow" in header_directives(result):
            followed = []
        canonical = canonical_header(result)
        if canonical is None or canonical in followed or not self.in_scope(canonical):
            return followed
        return [*followed, canonical]

    def in_scope(self, url: str) -> bool:
        """Whether the crawl follows ``url``: its host allowed, included (when ``include`` is given), not excluded."""
        netloc = _NETLOC.match(url)
        if netloc is None or not _host_allowed(self.domains, netloc.group(1)):
            return False
        if not self.include and not self.exclude:  # the usual scope: the host decides
            return True
        include = _compiled(self.include)
        if include and not any(p.search(url) for p in include):
            return False
        return not any(p.search(url) for p in _compiled(self.exclude))


# The pages of a site link to the same URLs (a menu, a sidebar): in_scope() answers each once for
# all the pages a process reads (up to _MAX_VERDICTS URLs a scope, then it starts again).
_MAX_VERDICTS = 16384


@functools.lru_cache(maxsize=8)
def _verdicts(scope: LinkScope) -> dict[str, bool]:
    """``scope.in_scope(url)`` by url, as far as it was asked."""
    return {}


# A real page links to a few hosts a hundred times: the host check is made once per netloc.
_NETLOC = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://([^/?#]*)")


@functools.lru_cache(maxsize=4096)
def _host_allowed(domains: tuple[str, ...], netloc: str) -> bool:
    try:
        # A-labels on both sides: a page may spell its links' hosts in Unicode or in punycode.
        host = normal_host(urlsplit("//" + netloc).hostname or "")
    except ValueError:  # a broken IPv6 literal, a name IDNA cannot encode
        return False
    return any(host == d or host.endswith("." + d) for d in domains)


@functools.lru_cache(maxsize=16)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)

"""Traps: the URL rules a crawl applies before a URL is stored, to refuse it or rewrite it.

The frontier (crawl/frontier/traps.py) applies these to the normal form of
every link it is given; they live with the URL rules because they are URL
rules: what a parameter's name is, what a path segment is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


class QueryCleaner:
    """Drops the query parameters, and the ``;name=value`` path parameters, whose names match
    ``patterns``: names compared without regard to case (``SID`` is ``sid``) and as written (``s%69d`` is not ``sid``),
    a ``*`` in a pattern standing for any characters of a name (``utm_*``).  Session IDs then do not make a new URL of every
    response: ``/a?sid=1``, ``/a;jsessionid=2`` and ``/a`` are one URL.

    Only what is dropped changes: the other parameters keep their order, spelling and repeats
    (``?a=1&a=2``), and a URL with nothing to drop is returned as it is.  A query left empty goes
    with its ``?``.

    w3lib's ``url_query_cleaner`` (what Scrapy users know) matches names exactly, drops repeated
    keys and empty pairs unless told not to, and knows no path parameters; measured on a crawl's
    links it was no faster than this (docs/crawler.md, "Traps"), so it is not used.

    Raises:
        ValueError: for a pattern that is not a non-empty str without "&", "=", ";", "#", "/", "?",
            "[", "]" or a space (``*`` is the one wildcard), or for a str given instead of patterns.
    """

    __slots__ = ("_find", "_match", "patterns")

    def __init__(self, patterns: Iterable[str]) -> None:
        if isinstance(patterns, str):
            raise ValueError(f"patterns must be a sequence of parameter names, not the str {patterns!r}")
        kept: list[str] = []
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern or any(c in pattern for c in "&=;#/?[] \t"):
                raise ValueError(f"a parameter name pattern must be a non-empty str without & = ; # / ? [ ] or "
                                 f"spaces, not {pattern!r}")
            kept.append(pattern)
        self.patterns = tuple(dict.fromkeys(kept))
        # One expression for every pattern: a name is what stands between a separator and "=", "&",
        # ";", "#" or the end, so ``utm_*`` never matches inside ``xutm_a``.
        names = "|".join(_NAME_CHARS.join(re.escape(part) for part in pattern.split("*")) for pattern in self.patterns)
        self._match = re.compile(f"(?:{names})\\Z", re.IGNORECASE).match if names else None
        # A URL that names none of them (nearly every URL) costs one search, not a look at each parameter.
        self._find = re.compile(f"[?&;](?:{names})(?:[=&;#]|$)", re.IGNORECASE).search if names else None

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def __repr__(self) -> str:
        return f"QueryCleaner({list(self.patterns)!r})"

    def matches(self, name: str) -> bool:
        """Whether a parameter called ``name`` (as written in the URL) is dropped."""
        return self._match is not None and self._match(name) is not None

    def clean(self, url: str) -> str:
        """``url`` without the matching parameters (``url`` itself when none matches)."""
        if self._find is None or ("?" not in url and ";" not in url) or self._find(url) is None:
            return url
        url, hash_, fragment = url.partition("#")
        base, question, query = url.partition("?")
        if ";" in base:
            base = self._clean_path(base)
        if question:
            kept = [pair for pair in query.split("&") if not self.matches(pair.partition("=")[0])]
            if len(kept) < query.count("&") + 1:
                query = "&".join(kept)
                question = "?" if query else ""
        return f"{base}{question}{query}{hash_}{fragment}"

    def _clean_path(self, base: str) -> str:
        """The scheme, authority and path of a URL, the path's matching ``;`` parameters dropped."""
        scheme_end = base.find("//")
        start = base.find("/", scheme_end + 2) if scheme_end >= 0 else 0
        if start < 0:
            return base
        segments = base[start:].split("/")
        for i, segment in enumerate(segments):
            if ";" in segment:
                name, *params = segment.split(";")
                kept = [param for param in params if not self.matches(param.partition("=")[0])]
                if len(kept) < len(params):
                    segments[i] = ";".join([name, *kept])
        return base[:start] + "/".join(segments)


#: What a ``*`` of a QueryCleaner pattern stands for: any characters a parameter's name can have.
_NAME_CHARS = "[^&=;#/?]*"


def path_repeats(url: str) -> int:
    """How many times the most frequent segment of ``url``'s path occurs in it, anywhere: 3 for
    ``/a/b/a/b/a/b/`` (and for ``/a/a/a`` and ``/a/x/a/y/a``), 1 for ``/a/b/c``, 0 for ``/``.

    Segments are the non-empty texts between slashes, as written (``;`` parameters included),
    before the query.  Counting them anywhere, not only side by side, is what catches relative
    links that grow a path: Heritrix's PathologicalPathDecideRule counts identical segments in a
    row (``/a/a/a``), Nutch's default regex-urlfilter a segment every other place
    (``/a/x/a/y/a/``), and a site whose pages link ``a/`` and ``b/`` grows paths that neither sees
    (``/a/b/b/a/a/b/a/b/b/...``: binary words can go on for ever without three repeats in a row).
    Internet Archive's Zeno counts as this does.
    """
    scheme_end = url.find("//")
    start = url.find("/", scheme_end + 2) if scheme_end >= 0 else 0
    if start < 0:
        return 0
    end = len(url)
    for mark in "?#":
        at = url.find(mark, start)
        if 0 <= at < end:
            end = at
    path = url[start:end]
    if path.count("/") <= 1:
        return 1 if len(path) > 1 else 0
    segments = [segment for segment in path.split("/") if segment]
    if len(set(segments)) == len(segments):
        return 1 if segments else 0
    counts: dict[str, int] = {}
    for segment in segments:
        counts[segment] = counts.get(segment, 0) + 1
    return max(counts.values())

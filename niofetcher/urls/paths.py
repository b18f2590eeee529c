"""The path and query rules of all three forms: what is percent-encoded, how escapes are written,
which segments are dot segments.

An existing ``%XX`` escape is kept (its hex digits in upper case), so
``/%C3%BC`` and ``/ü`` are one URL; ``%2e`` is a dot in a dot segment, as
WHATWG reads it.
"""

from __future__ import annotations

import re
from urllib.parse import quote

# What a path and a query percent-encode, as UTF-8: WHATWG's path and special-query
# percent-encode sets, which hold everything a request line cannot carry (RFC 9112 3.2: visible
# ASCII only) and what a browser encodes besides.  "%" itself is safe, so escapes already there
# stay as they are.  One home for both the request target and the link.
_PATH_UNSAFE = re.compile(r'[^\x21-\x7e]|["<>`{}]').search
_QUERY_UNSAFE = re.compile(r"[^\x21-\x7e]|[\"<>']").search
_PATH_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in '"<>`{}#?')
_QUERY_SAFE = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in "\"<>'#")


def percent_encoded(path: str, query: str | None) -> tuple[str, str | None]:
    """``path`` and ``query`` with what their WHATWG sets hold percent-encoded as UTF-8."""
    if _PATH_UNSAFE(path):
        path = quote(path, safe=_PATH_SAFE)
    if query and _QUERY_UNSAFE(query):
        query = quote(query, safe=_QUERY_SAFE)
    return path, query


# An escape with a lower-case hex digit: "%c3%bc" is "%C3%BC" (RFC 3986 6.2.2.1), and
# upper case is the form both are stored and sent in.
lower_escape = re.compile(r"%(?:[a-f][0-9a-fA-F]|[0-9A-F][a-f])").search


def _upper_escape(match: re.Match[str]) -> str:
    return match.group().upper()


_escape = re.compile(r"%[0-9a-fA-F]{2}")

# A dot segment ("/./", "/../", or one at the end of the path), for all three
# forms; WHATWG reads "%2e" as a dot there too ("/%2e%2E/" is "/../").  Tried
# only where "/." or "%2" occurs, so that "/.well-known/" costs a search and
# not the long way round.  (No string it is tried on ends in a newline, so
# "\Z" and "$" are the same here.)
dot_segment = re.compile(r"/(?:\.|%2[eE]){1,2}(?:[/?#]|\Z)").search
DOT = frozenset([".", "%2e", "%2E"])
DOUBLE_DOT = frozenset(a + b for a in DOT for b in DOT)


def remove_dot_segments(path: str) -> str:
    """An absolute path without "." and ".." segments, as WHATWG removes them: ``/a/./b/../c`` -> ``/a/c``.

    RFC 3986 5.2.4, and "%2e" (either case) read as a dot: ``/a/%2E%2e`` is ``/``.
    """
    segments = path.split("/")  # segments[0] is the "" before the leading "/"
    kept: list[str] = []
    for segment in segments[1:]:
        if segment in DOUBLE_DOT:
            if kept:
                kept.pop()
        elif segment not in DOT:
            kept.append(segment)
    if segments[-1] in DOT or segments[-1] in DOUBLE_DOT:
        kept.append("")  # "/a/.." is the directory "/", not "/a" minus its name
    return "/" + "/".join(kept)


def path_and_query(path: str, query: str | None) -> str:
    """The request target of a path (at least "/") and a query (None for none, "" for an empty one,
    which WHATWG keeps: ``/x?``): both rules applied."""
    if ("/." in path or "%2" in path) and dot_segment(path):
        path = remove_dot_segments(path)
    path, query = percent_encoded(path, query)
    target = path if query is None else f"{path}?{query}"
    if "%" in target and lower_escape(target):
        target = _escape.sub(_upper_escape, target)
    return target

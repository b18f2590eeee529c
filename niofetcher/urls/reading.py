"""The WHATWG reading of an http(s) reference, for the general paths: what a browser does to the text
before urlsplit and urljoin see it.

Ends stripped of C0 controls and space, tabs and newlines inside removed, a
``\\`` before the query read as "/", any number of slashes after ``http:``
starting the authority, and an authority that tools would end at two places
told apart (:func:`ambiguous_authority`).
"""

from __future__ import annotations

import re

# The two schemes a URL of niofetcher may have, each with the port a URL leaves out (WHATWG's
# special schemes that are fetched over HTTP).
DEFAULT_PORTS = {"http": 80, "https": 443}

# What is stripped from both ends of a URL or an href: C0 controls and space, as
# the WHATWG URL standard says.  str.strip() would take Unicode spaces too
# ("/x\xa0" is a path with an NBSP, as the fast paths read it).
C0_CONTROL_OR_SPACE = "".join(map(chr, range(0x21)))

# Removed wherever they stand, before anything else reads the URL (WHATWG): a link broken over
# lines in a page's source is one URL.  A str.translate() table.
TAB_OR_NEWLINE = {9: None, 10: None, 13: None}

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")


def special_form(href: str, base_scheme: str | None) -> str:
    """``href`` (tabs and newlines removed, ends stripped) written so that urlsplit and urljoin read it
    as the WHATWG URL parser reads an http(s) reference against a base of ``base_scheme`` (None: no base).

    A "\\" before the query is a "/"; any number of slashes after ``http:`` start the authority
    (``http:///h/x`` and ``///h/x`` are ``http://h/x``); ``http:x`` is a relative reference
    against an http base and the host ``x`` against any other.  Anything but http(s) is left as it is.
    """
    match = _SCHEME.match(href)
    if match is None:
        if base_scheme is None:
            return href
        scheme, rest = base_scheme, href
    else:
        scheme = match.group(1).lower()
        if scheme not in DEFAULT_PORTS:
            return href
        rest = href[match.end():]
    if "\\" in rest:
        rest = _backslashes_as_slashes(rest)
    if rest.startswith("//") or (match is not None and scheme != base_scheme):
        rest = rest.lstrip("/")
        at = rest.rfind("@", 0, _authority_end(rest))
        if at > 0 and ("[" in rest[:at] or "]" in rest[:at]):
            # WHATWG percent-encodes them in a userinfo; urlsplit would take them for an IPv6 literal's
            rest = rest[:at].replace("[", "%5B").replace("]", "%5D") + rest[at:]
        return f"{scheme}://{rest}"
    if match is not None and _SCHEME.match(rest):
        return f"./{rest}"  # "http:a:b" against an http base is the path "a:b", not the scheme "a"
    return rest


def _backslashes_as_slashes(text: str) -> str:
    """``text`` with each "\\" before its query or fragment written as "/" (WHATWG, special schemes)."""
    end = query_start(text)
    return text[:end].replace("\\", "/") + text[end:]


def _first_of(text: str, delimiters: str) -> int:
    """Where the first of ``delimiters`` stands in ``text``, else its end."""
    end = len(text)
    for delimiter in delimiters:
        found = text.find(delimiter, 0, end)
        if found >= 0:
            end = found
    return end


def query_start(text: str) -> int:
    """Where the query or fragment of a reference starts: its first "?" or "#", else its end."""
    return _first_of(text, "?#")


def _authority_end(text: str) -> int:
    """Where the authority at the start of ``text`` ends: at its first "/", "?" or "#"."""
    return _first_of(text, "/?#")


def ambiguous_authority(url: str) -> bool:
    """True when an http(s) ``url`` has a "\\" in its authority with an "@" after it: a browser ends
    the authority at the "\\", urlsplit and curl take the host after the "@"."""
    match = _SCHEME.match(url)
    rest = url[match.end():].lstrip("/\\") if match is not None else url
    end = _authority_end(rest)
    backslash = rest.find("\\", 0, end)
    return backslash >= 0 and rest.find("@", backslash, end) >= 0


def empty_query(url: str) -> str | None:
    """"" when ``url`` (with no query but maybe an empty one) ends its path with a "?", else None:
    urlsplit gives "" for both."""
    return "" if "?" in url.partition("#")[0] else None

"""The URL rules (niofetcher/urls/) against the WHATWG URL Standard's own test data (issue 25, item 1).

``tests/data/wpt-url/urltestdata.json`` is web-platform-tests'
``url/resources/urltestdata.json`` (see the README beside it).  Every case
whose base or input is an http(s) URL is run here, through

- ``absolute_url(input, base)`` (the link a page's href leads to), and
- ``normalize_url``: of the input when the case has no base (a URL typed as a
  seed), else of what ``absolute_url`` gave (the link as the frontier stores it).

A case agrees when both give what WHATWG's ``href`` says, with niofetcher's
normal form on top: the fragment dropped by both (an empty query, "?", is
kept as WHATWG keeps it); userinfo dropped, ``%xx`` escapes in upper case and trailing dots of the
host dropped by ``normalize_url`` (docs/guarantees.md, "URLs").  Where WHATWG
fails, or gives a URL of another scheme, both must give no URL (None,
ValueError).

The cases that still disagree are listed in ``DISAGREEMENTS``, each group
under its reason, and checked strictly: a listed case that starts to agree
fails too, so the list can only shrink and every fix shows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import pytest

from niofetcher.crawl.parse import EXTRACTORS, extract
from niofetcher.urls import absolute_url, normal_or_none

DATA = Path(__file__).parent / "data" / "wpt-url" / "urltestdata.json"

# (input, base) of the cases that disagree today, by reason.
DISAGREEMENTS: dict[str, list[tuple[str, str | None]]] = {
    # parse_target and normalize_url refuse a URL with a NUL anywhere in it, before its ends are
    # stripped or its fragment cut (check_url_characters: a seed with one is a broken line);
    # absolute_url percent-encodes it, as WHATWG does.
    "a NUL refused by normalize_url": [
        ("\x00\x1b\x04\x12 http://example.com/\x1f \r ", None),
        ("http://example.org/test?a#b\x00c", None),
        ("https://x/\x00y", None),
        ("https://x/?\x00y", None),
        ("https://x/?#\x00y", None),
    ],
    # The normal form drops a host's trailing dots (one name, one frontier key): these have no name left.
    "a host of dots only": [
        ("http://./", None),
        ("http://../", None),
    ],
}

#: How many cases agree today, of how many run: the figure issue 25 reports (374 of 469 on aa9555f).
AGREEING, CASES = 475, 482

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_C0_OR_SPACE = "".join(map(chr, range(0x21)))
_ESCAPE = re.compile(r"%[0-9a-fA-F]{2}")


class Case(NamedTuple):
    input: str
    base: str | None
    href: str | None  # None: WHATWG fails
    hostname: str
    has_userinfo: bool


def _scheme(url: str) -> str | None:
    match = _SCHEME.match(url.strip(_C0_OR_SPACE).translate({9: None, 10: None, 13: None}))
    return match.group(1).lower() if match else None


def _cases() -> list[Case]:
    cases = []
    for entry in json.loads(DATA.read_text(encoding="utf-8")):
        if isinstance(entry, str):  # the file's comments
            continue
        base = entry.get("base")
        if _scheme(entry["input"]) not in ("http", "https") and (base is None or _scheme(base) not in ("http", "https")):
            continue
        failure = entry.get("failure", False) or entry["protocol"] not in ("http:", "https:")
        cases.append(Case(entry["input"], base, None if failure else entry["href"], entry.get("hostname", ""),
                          bool(entry.get("username") or entry.get("password"))))
    return cases


CASES_RUN = _cases()


def _expected(case: Case) -> tuple[str | None, str | None]:
    """What absolute_url and normalize_url should give: WHATWG's href, with the normal form on top."""
    if case.href is None:
        return None, None
    link = case.href.partition("#")[0]
    normal = link
    if case.has_userinfo:
        authority = normal.index("//") + 2
        normal = normal[:authority] + normal[normal.index("@", authority) + 1:]
    if case.hostname.endswith("."):
        normal = normal.replace(f"//{case.hostname}", f"//{case.hostname.rstrip('.')}", 1)
    return link, _ESCAPE.sub(lambda match: match.group().upper(), normal)


def _outcome(case: Case) -> tuple[str | None, str | None]:
    link = absolute_url(case.input, case.base or "")
    return link, normal_or_none(case.input if case.base is None else link)


def _agrees(case: Case) -> bool:
    return _outcome(case) == _expected(case)


_LISTED = {case: reason for reason, cases in DISAGREEMENTS.items() for case in cases}


@pytest.mark.parametrize("case", CASES_RUN, ids=[str(i) for i in range(len(CASES_RUN))])
def test_a_case_agrees_with_whatwg_or_is_listed_with_its_reason(case: Case) -> None:
    reason = _LISTED.get((case.input, case.base))
    if reason is None:
        assert _outcome(case) == _expected(case), "(absolute_url, normalize_url) differ from WHATWG"
    else:
        assert _outcome(case) != _expected(case), f"now agrees: take it out of DISAGREEMENTS[{reason!r}]"


def test_the_agreement_figure() -> None:
    assert (sum(map(_agrees, CASES_RUN)), len(CASES_RUN)) == (AGREEING, CASES)


def test_every_listed_case_is_in_the_data() -> None:
    run = {(case.input, case.base) for case in CASES_RUN}
    assert [case for case in _LISTED if case not in run] == []
    assert len(_LISTED) == sum(map(len, DISAGREEMENTS.values()))  # no case under two reasons


# -- through the extractors: an <a href> of a page at the case's base ---------------------------


def _page(href: str) -> bytes:
    value = href.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return f'<!DOCTYPE html><html><body><a href="{value}">x</a></body></html>'.encode()


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_a_link_on_a_page_at_the_base_is_the_href_whatwg_gives(extractor: str) -> None:
    """Every case with an http(s) base, as the one link of a page at that base: the link the
    extractor gives is WHATWG's href (normal form on top, as _expected), or there is none."""
    differ = []
    for case in CASES_RUN:
        if case.base is None or _scheme(case.base) not in ("http", "https"):
            continue  # without a page: an input with no base is a URL typed as a seed
        links = extract(_page(case.input), case.base, "text/html", extractor).links
        link = _expected(case)[0]
        if links != ([] if link is None else [link]):
            differ.append((case.input, case.base, links, link))
    assert differ == []
    assert sum(1 for case in CASES_RUN if case.base is not None) == 202  # the cases above ran

"""robots.txt as RFC 9309 and Google's reference parser read it (docs/crawler.md, robots.txt).

Every expectation of google/robotstxt's ``robots_test.cc`` is a case of
``tests/data/robotstxt/robots_test_cases.json`` (its README says how they were
translated and classified: RFC-decided, derived, Google-specific), and each
is asked of :func:`niofetcher.crawl.robots.interpret`, the reading the crawler
uses: the file as a 200 answer, the case's user agent as the crawler's.  A
case marked ``differs`` is one where niofetcher deliberately answers
otherwise, for the reason written there: it must keep answering otherwise
(a change of mind is a change of the data and its reason).

Then the few guarantees of the reading that the cases do not pin: the
records Protego still reads itself (Crawl-delay, a Sitemap without its
colon) reach it, and only the group that applies is kept.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from niofetcher.crawl.robots import LINES_PER_UNIT, RobotsRules, _product_token, interpret
from niofetcher.models import FetchResult, URLBean

CASES_FILE = Path(__file__).parent / "data" / "robotstxt" / "robots_test_cases.json"
ROBOTS_URL = "http://foo.bar/robots.txt"
_REPEAT = re.compile(r"\{(\d+)\*(.)\}")  # "{N*c}" in a case: the character c, N times


def load_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(CASES_FILE.read_text(encoding="utf-8"))["cases"]
    return cases


def expand(text: str) -> str:
    return _REPEAT.sub(lambda m: m[2] * int(m[1]), text)


def body_of(case: dict[str, Any]) -> bytes:
    """The bytes of a case's robots.txt: ``robots_bytes`` holds one byte a character (a BOM, a
    broken one), ``robots`` is text, sent as UTF-8."""
    if "robots_bytes" in case:
        return bytes(case["robots_bytes"], "latin-1")
    return expand(case["robots"]).encode()


def rules_for(body: bytes, user_agent: str, content_type: str = "text/plain") -> RobotsRules:
    """What the crawler makes of ``body`` served as robots.txt with a 200."""
    answer = interpret(FetchResult(URLBean(ROBOTS_URL), ROBOTS_URL, ROBOTS_URL, status=200, body=body,
                                   headers=[("Content-Type", content_type)]), 0, user_agent)
    assert isinstance(answer, RobotsRules)
    return answer


CASES = load_cases()


def case_id(index: int) -> str:
    case = CASES[index]
    return f"{case['class']}-{case['test']}-{index}"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("index", range(len(CASES)), ids=case_id)
def test_a_robots_test_cc_case(index: int) -> None:
    case = CASES[index]
    rules = rules_for(body_of(case), case["agent"])
    if "sitemaps" in case:
        assert list(rules.sitemaps) == case["sitemaps"], case["note"]
        return
    allowed = rules.refuses(expand(case["url"]), case["agent"]) == ""
    expected = case["allowed"] != ("differs" in case)  # a documented difference answers the other way
    assert allowed == expected, case.get("differs") or case.get("note") or case["test"]


@pytest.mark.timeout(10)
def test_the_cases_are_every_expectation_of_robots_test_cc_classified() -> None:
    """The figures docs and the README give: 180 cases, 6 deliberate differences, all Google-specific."""
    by_class = {name: [case for case in CASES if case["class"] == name] for name in ("rfc", "derived", "google")}
    assert {name: len(cases) for name, cases in by_class.items()} == {"rfc": 116, "derived": 33, "google": 31}
    assert len(CASES) == sum(len(cases) for cases in by_class.values())
    assert [case["test"] for case in CASES if "differs" in case] == [
        "GoogleOnly_AcceptUserAgentUpToFirstSpace", "ID_Encoding", "ID_Encoding", "ID_Encoding",
        "GoogleOnly_LineTooLong", "GoogleOnly_LineTooLong",
    ]
    assert all(case["class"] == "google" for case in CASES if "differs" in case)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("user_agent", "token"), [
    ("niofetcher/1.2", "niofetcher"),
    ("niofetcher/1.2 (+https://example.invalid/bot)", "niofetcher"),
    ("MyCrawler", "mycrawler"),
    ("  Foo Bar", "foo"),
    ("Foo-Bar_2/x", "foo-bar_2"),
    # A browser's form: the product of its compatible; comment, as Googlebot writes its own.
    ("Mozilla/5.0 (compatible; MyBot/1.0; +https://example.invalid/bot)", "mybot"),
    ("Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", "mozilla"),
])
def test__product_token(user_agent: str, token: str) -> None:
    assert _product_token(user_agent) == token


@pytest.mark.timeout(10)
@pytest.mark.parametrize("user_agent", ["crawler.example/1.0", "my+bot/2", "Mozilla/5.0 (compatible; MyBot/1.0)"])
def test_a_crawler_meets_its_own_group_whatever_its_name_holds(user_agent: str) -> None:
    """The crawler's name and a user-agent line's are read by one rule: a name with a '.' or a '+'
    (which no group could name before) and a browser-style user agent obey the group written for them."""
    name = user_agent.removeprefix("Mozilla/5.0 (compatible; ").split("/")[0]
    body = f"User-agent: {name}\nDisallow: /\n\nUser-agent: *\nDisallow: /nothing\n".encode()
    assert rules_for(body, user_agent).refuses("http://foo.bar/page", user_agent)


@pytest.mark.timeout(10)
def test_the_crawl_delay_is_the_one_of_the_group_that_applies() -> None:
    body = b"User-agent: other\nDisallow: /y\nCrawl-delay: 9\n\nUser-agent: *\nCrawl-delay: 2\nDisallow: /x\n"
    assert rules_for(body, "niofetcher/1").crawl_delay == 2.0
    assert rules_for(body + b"User-agent: niofetcher\nCrawl-delay: 3\n", "niofetcher/1").crawl_delay == 3.0
    assert rules_for(body, "other/1").crawl_delay == 9.0


@pytest.mark.timeout(10)
def test_a_crawl_delay_ends_a_group_as_a_rule_does() -> None:
    """An unknown line ends no group (RFC 9309 2.2.4), but Crawl-delay is a record niofetcher reads:
    the '*' group after another crawler's Crawl-delay is a group of its own, and that crawler's
    delay is not the crawl's."""
    body = b"User-agent: bingbot\nCrawl-delay: 10\n\nUser-agent: *\nDisallow: /private\n"
    rules = rules_for(body, "niofetcher/1")
    assert rules.crawl_delay is None and rules.refuses("http://foo.bar/private", "niofetcher/1")
    rules = rules_for(body, "bingbot/2")
    assert rules.crawl_delay == 10.0 and not rules.refuses("http://foo.bar/private", "bingbot/2")


@pytest.mark.timeout(10)
def test_sitemaps_are_read_in_any_group_and_without_their_colon() -> None:
    body = (b"User-agent: other\nSitemap: http://foo.bar/a.xml\nDisallow: /\n"
            b"Sitemap http://foo.bar/b.xml\nsite-map: http://foo.bar/c.xml\n")
    assert rules_for(body, "niofetcher/1").sitemaps == (
        "http://foo.bar/a.xml", "http://foo.bar/b.xml", "http://foo.bar/c.xml")


@pytest.mark.timeout(10)
def test_a_bom_is_skipped_whatever_the_charset_says() -> None:
    """The BOM goes before the bytes are decoded: a Content-Type charset of latin-1 would make it
    three characters at the start of the first line, and lose the group."""
    body = b"\xef\xbb\xbfUser-agent: *\nDisallow: /private\n"
    for content_type in ("text/plain", "text/plain; charset=utf-8", "text/plain; charset=iso-8859-1"):
        assert rules_for(body, "niofetcher/1", content_type).refuses("http://foo.bar/private", "niofetcher/1")
    utf16 = "\ufeffUser-agent: *\nDisallow: /private\n".encode("utf-16-le")  # the BOM is U+FEFF once decoded
    assert rules_for(utf16, "niofetcher/1", "text/plain; charset=utf-16le").refuses("http://foo.bar/private", "x/1")


@pytest.mark.timeout(10)
def test_only_the_group_that_applies_is_kept() -> None:
    """A file of 500 groups for other crawlers and a '*' group of two rules weighs one unit: the
    rules kept are those of the crawler's group, and the other groups' rules cost nothing."""
    others = b"".join(b"User-agent: bot%d\n" % n + b"Disallow: /p%d/\n" % n * 8 for n in range(500))
    rules = rules_for(others + b"User-agent: *\nDisallow: /a\nDisallow: /b\n", "niofetcher/1")
    assert rules.weight == 1 < LINES_PER_UNIT
    assert rules.refuses("http://foo.bar/a", "niofetcher/1") and not rules.refuses("http://foo.bar/p3/", "niofetcher/1")
    assert rules_for(others, "bot3/1").refuses("http://foo.bar/p3/", "bot3/1")

"""robots.txt as RFC 9309 says: what one fetch of it means, and the rules of each origin.

Nothing here fetches.  The crawler fetches ``/robots.txt`` through its own
fetcher (with the fetcher's redirects turned off, like every crawler fetch)
and asks :func:`interpret` what the answer means:

- 2xx: the rules it holds for the crawler (RFC 9309 2.3.1.1): see "Reading the file" below;
- a redirect (301, 302, 303, 307, 308 with a Location): fetch the target,
  even on another host, and use what it says for the *first* origin
  (2.3.1.2: "crawlers SHOULD follow at least five consecutive redirects,
  even across authorities");
- more than :data:`MAX_REDIRECTS` redirects, a redirect without a usable
  Location, and every other 4xx: "unavailable", which allows everything
  (2.3.1.3).  The RFC lets a crawler treat a sixth redirect as unavailable,
  and so does Google ("if the robots.txt isn't found within 5 hops, Google
  treats it as a 404"); we do the same rather than treat it as an outage
  that blocks the host;
- 5xx, 429 and network errors (a connect error, a timeout, a reset):
  "unreachable", which is a complete disallow (2.3.1.4) until a later fetch
  gets through.  429 counts as a server error, as Google counts it: it is
  the server asking us to come back later, not saying there are no rules.

Of a 2xx, the first :data:`MAX_ROBOTS_BYTES` are parsed (RFC 9309 2.5: a
parsing limit of at least 500 KiB), cut at a line's end.

Reading the file.  Protego matches paths well (percent-encoding, ``*`` and
``$``, the longest match, an allowed ``index.html`` allowing its directory)
but reads groups otherwise than RFC 9309 and Google's reference parser
(google/robotstxt; its ``robots_test.cc`` cases are in the suite,
tests/data/robotstxt/): a UTF-8 byte order mark makes the first line unknown
and so loses the first group, often ``User-agent: *``; an unknown line
(``Foo: bar``) ends a group, so ``User-agent: A``, ``Foo: bar``,
``User-agent: *``, ``Disallow: /`` leaves A free (RFC 9309 2.1 and 2.2.4:
only a rule ends a group); and ``User-agent: Foo`` applies to a crawler named
``FooBot``.  So the groups are read here, as Google's parser reads them, and
Protego is given only the records of the group that applies, under one
``User-agent: *``, to match paths against:

- a UTF-8 BOM, or the start of one, before the first line is skipped;
- a group is its user-agent lines and what follows them up to the next
  user-agent line that comes after an Allow, a Disallow or a Crawl-delay;
  Sitemap lines belong to no group; a line before the first user-agent line
  is in none;
- the crawler's product token is its User-Agent up to the first ``/`` or
  space (RFC 9309 2.2.1), and a group applies when one of its user-agent
  values names it: the value's leading letters, digits, ``-`` and ``_``
  (``FooBot/1.0`` and ``FooBot Images`` name ``foobot``, as Google reads
  them), compared case-insensitively and whole; every group that names it
  applies, and when none does, every ``*`` group;
- a colon left out (``Disallow /x``) is assumed, as Protego and Google do.

Protego then holds only that group's rules, which also makes a large file
of many groups cheaper to keep (:attr:`RobotsRules.weight` counts them).

:class:`RobotsTable` keeps the outcome per origin for a day at most (RFC 9309
2.4: a cached robots.txt SHOULD NOT be used for longer), bounded by what the
parsed rules hold (a parser keeps about 270 bytes a rule line, so a count of
origins bounds nothing: 4,096 robots.txt of 10,000 lines would be 11 GB): an
origin whose robots.txt was not asked for in a while and that has nothing in
progress ages out, and the crawler reads its answer back from the frontier,
which keeps it for the rest of its day, or fetches it again.
"""

from __future__ import annotations

import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from protego import Protego

from ..content import decode_text
from ..models import FetchResult
from ..urls import Origin, absolute_url, parse_target

__all__ = [
    "ALLOW_ALL", "DISALLOWED", "LINES_PER_UNIT", "MAX_REDIRECTS", "MAX_ROBOTS_BYTES", "Redirect", "RobotsRules",
    "RobotsTable", "interpret", "parsed_part", "stored_body", "stored_rules",
]

#: Redirects followed from ``/robots.txt`` to the file (RFC 9309 2.3.1.2: at least five).
MAX_REDIRECTS = 5
#: The rule lines kept of a robots.txt (those of the group that applies, and the Sitemap lines) that
#: weigh one unit of a :class:`RobotsTable`'s capacity: a parser holds about 800 bytes and then 270 a
#: rule line, so a unit holds 2.7 KB at most (a file of 7 rule lines).
LINES_PER_UNIT = 8
#: The bytes of robots.txt that are parsed (RFC 9309 2.5: "at least 500 kibibytes").
MAX_ROBOTS_BYTES = 500 * 1024
#: Why a URL that the rules disallow is not fetched.
DISALLOWED = "disallowed by robots.txt"
_REDIRECTS = frozenset((301, 302, 303, 307, 308))


@dataclass(frozen=True, slots=True)
class RobotsRules:
    """What one origin's robots.txt allows."""

    parser: Protego | None = None  # the group that applies, as one '*' group; None: everything is allowed
    refusal: str = ""  # not "": nothing is allowed, for this reason (robots.txt stayed unreachable)
    crawl_delay: float | None = None  # seconds, as the file says (the crawler caps it)
    sitemaps: tuple[str, ...] = ()  # its Sitemap: lines, as written (any user agent's: they are global)
    weight: int = 1  # what keeping them costs, in units of a RobotsTable's capacity (LINES_PER_UNIT)
    expires: float = math.inf  # time.monotonic() from which they are stale (the caller sets it)

    def refuses(self, url: str, user_agent: str) -> str:
        """Why ``url`` must not be fetched; "" when it may be."""
        if self.refusal:
            return self.refusal
        if self.parser is not None and not self.parser.can_fetch(url, user_agent):
            return DISALLOWED
        return ""


#: The rules of a host without a robots.txt (4xx): everything is allowed.
ALLOW_ALL = RobotsRules()


def parsed_part(body: bytes) -> bytes:
    """What is parsed of a robots.txt body, and kept: the first :data:`MAX_ROBOTS_BYTES`, cut
    after the last whole line (the rule a cut would split is dropped, not misread)."""
    if len(body) <= MAX_ROBOTS_BYTES:
        return body
    head = body[:MAX_ROBOTS_BYTES]
    end = max(head.rfind(b"\n"), head.rfind(b"\r"))
    return head[: end + 1] if end >= 0 else head


class Redirect(NamedTuple):
    """robots.txt is elsewhere: fetch ``url`` (hop ``hops``) and apply what it says to the first origin."""

    url: str
    hops: int


def interpret(result: FetchResult, hops: int, user_agent: str) -> RobotsRules | Redirect | None:
    """What a fetch of robots.txt, ``hops`` redirects away from ``/robots.txt``, means.

    Returns the rules, the next hop, or None when robots.txt is unreachable (a complete disallow
    for now: fetch it again later).  A cancelled fetch is not the server's answer: the caller
    handles it before asking.
    """
    status = result.status
    if result.error is not None or status is None or status >= 500 or status == 429:
        return None
    if 200 <= status < 300:
        return _rules_of(_text(result), user_agent)
    if status in _REDIRECTS and hops < MAX_REDIRECTS:
        target = absolute_url(result.header("location") or "", result.url)
        if target is not None:
            try:
                parse_target(target)
            except ValueError:  # the Location is no URL the fetcher can take
                return ALLOW_ALL
            return Redirect(target, hops + 1)
    return ALLOW_ALL  # 4xx, too many redirects, a redirect to nowhere (and 1xx/3xx oddities): unavailable


def stored_body(result: FetchResult) -> bytes:
    """What the frontier keeps of a final answer (a 2xx or a 4xx), for :func:`stored_rules`: the
    text of a 2xx as UTF-8, decoded here, while its Content-Type is known (a robots.txt in UTF-16
    or Latin-1 read back as UTF-8 bytes would be garbage: no rules); nothing of a 4xx."""
    status = result.status
    return _text(result).encode() if status is not None and 200 <= status < 300 else b""


def stored_rules(status: int, body: bytes, user_agent: str) -> RobotsRules:
    """The rules of an answer that the frontier kept (:func:`stored_body`).  A row kept by an
    older niofetcher holds the body as fetched, which is read as UTF-8, as it was then."""
    if not 200 <= status < 300:
        return ALLOW_ALL
    return _rules_of(_without_bom(body).decode("utf-8", "replace"), user_agent)


def _text(result: FetchResult) -> str:
    """The text of a 2xx robots.txt: its parsed part, decoded by the charset its Content-Type
    names (else UTF-8), without a byte order mark."""
    # A BOM in the charset the Content-Type names (UTF-16) is a U+FEFF once decoded.
    return decode_text(_without_bom(parsed_part(result.body)), result.header("content-type")).removeprefix("\ufeff")


def _rules_of(text: str, user_agent: str) -> RobotsRules:
    """The rules that the robots.txt ``text`` holds for ``user_agent``."""
    records = _records_for(text, _product_token(user_agent))
    parser = Protego.parse("\n".join(records))
    delay = parser.crawl_delay(user_agent)
    return RobotsRules(parser, crawl_delay=float(delay) if delay else None, sitemaps=tuple(parser.sitemaps),
                       weight=1 + len(records) // LINES_PER_UNIT)


def _product_token(user_agent: str) -> str:
    """The name a crawler goes by in robots.txt (RFC 9309 2.2.1), lower-cased: the name its
    User-Agent starts with (``niofetcher/1.2 (+https://...)`` goes by ``niofetcher``), or, in a
    browser's form, the product of its ``compatible;`` comment (``Mozilla/5.0 (compatible;
    MyBot/1.0)`` goes by ``mybot``, as Googlebot's own user agent is written).  The name is read by
    the rule that reads a user-agent line's, so that a crawler ``crawler.example/1.0`` meets its
    group ``User-agent: crawler.example``."""
    agent = user_agent.strip()
    compatible = _COMPATIBLE.search(agent)
    if compatible is not None and agent.lower().startswith("mozilla/"):
        agent = compatible[1]
    return _agent_name(agent)


def _agent_name(value: str) -> str:
    """The crawler a user-agent value names: its leading letters, digits, '-' and '_', lower-cased."""
    return _AGENT_NAME_END.split(value, maxsplit=1)[0].lower()


_BOM = b"\xef\xbb\xbf"
_COMPATIBLE = re.compile(r"\(\s*compatible\s*;\s*([^;)]+)", re.IGNORECASE)
# A user-agent value names a crawler by its leading letters, digits, '-' and '_': what ends the name.
# Google's parser takes letters, '-' and '_' (RFC 9309's identifier); digits are taken too so that
# a value "Bot2" does not name a crawler "Bot".
_AGENT_NAME_END = re.compile(r"[^A-Za-z0-9_-]")
# The fields that shape groups, by every name Protego reads them by (its accepted misspellings
# too), to one spelling; Protego reads the others itself, within the group.
_FIELDS = {
    "user-agent": "user-agent", "useragent": "user-agent", "user agent": "user-agent",
    "allow": "allow",
    **dict.fromkeys(("disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"), "disallow"),
    "crawl-delay": "crawl-delay", "crawl delay": "crawl-delay",
    "sitemap": "sitemap", "sitemaps": "sitemap", "site-map": "sitemap",
}
# The records that end a group: RFC 9309's rules, and Crawl-delay, which Google's parser does not
# read (to it, an unknown line) but niofetcher does, as Bing's and Yandex's crawlers do.  Read so,
# "User-agent: bingbot", "Crawl-delay: 10", "User-agent: *", "Disallow: /x" is two groups, as
# its author means; as one, the crawl would wait the 10 s meant for Bing.
_RULES = frozenset(("allow", "disallow", "crawl-delay"))


def _without_bom(body: bytes) -> bytes:
    """``body`` without the UTF-8 byte order mark before its first line; a partial one (its first
    one or two bytes) is skipped too, as Google's parser does."""
    for size in (3, 2, 1):
        if body.startswith(_BOM[:size]):
            return body[size:]
    return body


def _record(line: str) -> tuple[str, str] | None:
    """The field (lower-cased, one spelling for the fields of :data:`_FIELDS`) and the value of a
    line of robots.txt; None for a blank line, a comment and a line that is no record."""
    line = line.partition("#")[0].strip()
    name, colon, value = line.partition(":")
    name = name.rstrip().lower()
    field = _FIELDS.get(name)
    if field is not None:
        return field, value.strip()
    words = line.split(None, 1)  # "Disallow /x": a colon left out ("Sitemap http://..." too)
    if len(words) == 2 and words[0].lower() in _FIELDS:
        return _FIELDS[words[0].lower()], words[1]
    return (name, value.strip()) if colon and name else None


def _records_for(text: str, token: str) -> list[str]:
    """The robots.txt for Protego: the records of the groups that apply to the crawler ``token``
    (else of the ``*`` groups) under one ``user-agent: *``, and every Sitemap line."""
    ours: list[str] = []  # the records of the groups that name the crawler ...
    anyone: list[str] = []  # ... and of the '*' groups, used when no group names it
    sitemaps: list[str] = []
    in_ours = in_anyone = named = ended = False
    for line in text.splitlines():
        record = _record(line)
        if record is None:
            continue
        field, value = record
        if field == "user-agent":
            if ended:  # a user-agent line after a rule starts the next group
                in_ours = in_anyone = ended = False
            if value == "*" or value.startswith(("* ", "*\t")):  # Google: "* anything" is '*' too
                in_anyone = True
            elif token and _agent_name(value) == token:
                in_ours = named = True
        elif field == "sitemap":
            sitemaps.append(f"sitemap: {value}")
        else:
            ended = ended or field in _RULES  # other records ("Foo: bar", Request-rate) end no group
            if in_ours:
                ours.append(f"{field}: {value}")
            if in_anyone:
                anyone.append(f"{field}: {value}")
    return ["user-agent: *", *(ours if named else anyone), *sitemaps]


class RobotsTable:
    """The rules of each origin until they expire, least recently used first, weighing at most
    ``capacity`` units (:attr:`RobotsRules.weight`).

    ``busy(origin)`` says whether an origin has URLs in progress: such an origin is never aged out
    (its rules are about to be asked for again), so the table weighs more than ``capacity`` when
    the busy origins and the last one put weigh more by themselves.
    """

    def __init__(self, capacity: int, busy: Callable[[Origin], bool]) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, not {capacity!r}")
        self.capacity = capacity
        self._busy = busy
        self._rules: OrderedDict[Origin, RobotsRules] = OrderedDict()
        self.weight = 0  # of the rules kept

    def __len__(self) -> int:
        return len(self._rules)

    def __contains__(self, origin: object) -> bool:
        return origin in self._rules

    def get(self, origin: Origin) -> RobotsRules | None:
        """The rules of ``origin`` (now the most recently used), None when not known or expired."""
        rules = self._rules.get(origin)
        if rules is not None:
            if rules.expires <= time.monotonic():
                del self._rules[origin]
                self.weight -= rules.weight
                return None
            self._rules.move_to_end(origin)
        return rules

    def put(self, origin: Origin, rules: RobotsRules) -> None:
        """Keep ``rules`` for ``origin``; age out the least recently used origins that are not busy."""
        replaced = self._rules.pop(origin, None)
        if replaced is not None:
            self.weight -= replaced.weight
        self._rules[origin] = rules
        self.weight += rules.weight
        # A busy one passed over goes to the end, as good as used just now; each is passed over
        # once a put (there are as many as the crawler's window has hosts, a few hundred).
        for _ in range(len(self._rules) - 1):
            if self.weight <= self.capacity:
                break
            oldest = next(iter(self._rules))
            if self._busy(oldest):
                self._rules.move_to_end(oldest)
            else:
                self.weight -= self._rules.pop(oldest).weight

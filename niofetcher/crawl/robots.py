"""robots.txt as RFC 9309 says: what one fetch of it means, and the rules of each origin.

Nothing here fetches.  The crawler fetches ``/robots.txt`` through its own
fetcher (with the fetcher's redirects turned off, like every crawler fetch)
and asks :func:`interpret` what the answer means:

- 2xx: the rules it holds (RFC 9309 2.3.1.1), parsed by Protego;
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
    "RobotsTable", "interpret", "parsed_part",
]

#: Redirects followed from ``/robots.txt`` to the file (RFC 9309 2.3.1.2: at least five).
MAX_REDIRECTS = 5
#: The rule lines of robots.txt (not blank, not a comment) that weigh one unit of a
#: :class:`RobotsTable`'s capacity: a parser holds about 800 bytes and then 270 a rule line, so a
#: unit holds 2.7 KB at most (a file of 7 rule lines).
LINES_PER_UNIT = 8
#: The bytes of robots.txt that are parsed (RFC 9309 2.5: "at least 500 kibibytes").
MAX_ROBOTS_BYTES = 500 * 1024
#: Why a URL that the rules disallow is not fetched.
DISALLOWED = "disallowed by robots.txt"
_REDIRECTS = frozenset((301, 302, 303, 307, 308))


@dataclass(frozen=True, slots=True)
class RobotsRules:
    """What one origin's robots.txt allows."""

    parser: Protego | None = None  # None: everything is allowed
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
        text = decode_text(parsed_part(result.body), result.header("content-type"))
        parser = Protego.parse(text)
        delay = parser.crawl_delay(user_agent)
        rules = sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
        return RobotsRules(parser, crawl_delay=float(delay) if delay else None, sitemaps=tuple(parser.sitemaps),
                           weight=1 + rules // LINES_PER_UNIT)
    if status in _REDIRECTS and hops < MAX_REDIRECTS:
        target = absolute_url(result.header("location") or "", result.url)
        if target is not None:
            try:
                parse_target(target)
            except ValueError:  # the Location is no URL the fetcher can take
                return ALLOW_ALL
            return Redirect(target, hops + 1)
    return ALLOW_ALL  # 4xx, too many redirects, a redirect to nowhere (and 1xx/3xx oddities): unavailable


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

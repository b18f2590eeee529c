"""``TrapSite``: a small real site with a crawler trap behind each door, and a count of what a
crawl fetched of each.

A crawl left to itself meets URL spaces without end inside a site it is allowed to crawl.  This
site has a few real pages, and each trap a crawler is known to fall into, each entered by one link
from the home page (``traps`` chooses which):

==============  ==================================================  ===============================
trap            what it does                                        what stops it
==============  ==================================================  ===============================
``calendar``    ``/calendar/`` links to next month; every month     ``max_pages_per_host`` (no URL
                ``/calendar/Y/M`` links to the next and the one     rule: each month is one more
                before, for ever (year 10000 and on)                URL of its own)
``sessions``    ``/shop/`` and its items link to each other with    ``strip_query_params``
                a session ID minted for each response, as
                ``;jsessionid=`` and as ``?sid=``; the home page
                links a real page with ``utm_*`` tags
``paths``       ``/docs/`` links ``a/`` and ``b/`` relative, and    ``max_path_repeats``
                any path under it answers that page: the paths
                grow (``/docs/a/b/b/a/...``)
``soft404``     any path the site does not have answers 200 with    ``max_path_repeats`` (its
                one page ("not found"), whose relative links        relative links), or duplicate
                grow the path; the home page has one dead link      detection
``pagination``  ``/list`` links ``?page=2``, and every ``?page=N``  ``max_pages_per_host``, or
                answers page 1's list again, with a link to         duplicate detection
                ``?page=N+1``
``archive``     ``/archive/`` links ``1/``, ``/archive/1/`` links   ``max_url_length`` (no segment
                ``2/``, ...: a path that grows without ever         repeats)
                repeating a segment
==============  ==================================================  ===============================

The real pages are ``/``, ``/page/0`` .. ``/page/{pages-1}`` (linked as the test site's are, so
that every one is reachable from ``/``) and each trap's door: ``/calendar/``, ``/shop/`` and its
items ``/shop/item/K``, ``/docs/``, ``/list``, ``/archive/``.  Every request is counted by what it
asked for (:meth:`TrapSite.fetches`): a real page in its own form is ``real``; anything else is
the trap whose space it is in, a real page asked for with a query or a ``;`` parameter (a session
ID, a tag) is ``sessions``; ``/robots.txt`` (which allows everything) is ``robots``.  Counted in
the server's loop, under the site's lock, so a test reads what the server saw.
"""

from __future__ import annotations

import collections
import random
import socket
from collections.abc import Iterable

from .messages import HTML_TYPE, TEXT_TYPE, Resource
from .pages import _link_targets, generated_page, links_html, robots_txt
from .server import Origin, Server
from .site import LoopbackSite

__all__ = ["TRAPS", "TrapSite"]

#: Every trap the site can have, in the order the home page links them.
TRAPS = ("calendar", "sessions", "paths", "soft404", "pagination", "archive")

#: Items of the shop (real pages, each linked with a session ID).
SHOP_ITEMS = 5
#: The first month of the calendar.
FIRST_MONTH = (2025, 1)


class TrapSite(LoopbackSite):
    """A site of ``pages`` real pages and the ``traps`` chosen (module docstring), on one loopback port.

    Use it like ``TestSite``: ``with TrapSite() as site:``, crawl ``site.base_url``, then read
    ``site.fetches()`` and ``site.real_fetched()``.

    Args:
        pages: real pages ``/page/0`` .. beside the home page and the traps' doors.
        traps: which traps the site has (a subset of :data:`TRAPS`); the home page links only those.
        links_per_page: links from one real page to others.
        page_size: approximate size of a page in bytes.
        host, port, max_seconds, log_requests: as for ``TestSite``.
    """

    __test__ = False

    def __init__(
        self,
        pages: int = 20,
        traps: Iterable[str] = TRAPS,
        links_per_page: int = 4,
        page_size: int = 1024,
        host: str = "127.0.0.1",
        port: int = 0,
        max_seconds: float | None = 600.0,
        log_requests: bool = False,
    ) -> None:
        chosen = tuple(traps) if not isinstance(traps, str) else (traps,)
        unknown = [trap for trap in chosen if trap not in TRAPS]
        if unknown:
            raise ValueError(f"traps must be among {TRAPS}, not {unknown[0]!r}")
        if pages < 1 or links_per_page < 1 or page_size < 0:
            raise ValueError(f"pages and links_per_page must be >= 1 and page_size >= 0, not "
                             f"{pages!r}, {links_per_page!r}, {page_size!r}")
        super().__init__(1, host, port, max_seconds, log_requests)
        self.pages = pages
        self.traps = tuple(trap for trap in TRAPS if trap in chosen)
        self.links_per_page = links_per_page
        self.page_size = page_size
        self._kinds: collections.Counter[str] = collections.Counter()
        self._real_seen: collections.Counter[str] = collections.Counter()
        self._minted = 0  # session IDs handed out

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running" if self._server else "new"
        return f"<TrapSite pages={self.pages} traps={','.join(self.traps)} ports={self._ports} {state}>"

    # -- addresses

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:{port}/``: the home page, where a crawl starts."""
        return f"{self.scheme}://{self._url_host}:{self.ports[0]}/"

    @property
    def base_urls(self) -> list[str]:
        """``[base_url]``, as ``TestSite.base_urls`` has it."""
        return [self.base_url]

    def real_paths(self) -> list[str]:
        """The paths of every real page (what a crawl that misses nothing fetches), home first."""
        paths = ["/", *(f"/page/{i}" for i in range(self.pages))]
        doors = {
            "calendar": ["/calendar/"], "sessions": ["/shop/", *(f"/shop/item/{k}" for k in range(SHOP_ITEMS))],
            "paths": ["/docs/"], "pagination": ["/list"], "archive": ["/archive/"],
        }
        for trap in self.traps:
            paths += doors.get(trap, [])
        return paths

    def real_urls(self) -> list[str]:
        """:meth:`real_paths` as URLs."""
        return [self.base_url + path[1:] for path in self.real_paths()]

    # -- counters

    def fetches(self) -> dict[str, int]:
        """Requests so far by what they asked for: ``real`` and each trap's name (``robots`` too)."""
        with self._lock:
            return dict(self._kinds)

    def real_fetched(self) -> set[str]:
        """The real pages fetched at least once, as URLs."""
        with self._lock:
            return {self.base_url + path[1:] for path in self._real_seen}

    def trap_fetches(self) -> int:
        """Requests that were not for a real page in its own form, nor for ``/robots.txt``."""
        with self._lock:
            return sum(n for kind, n in self._kinds.items() if kind not in ("real", "robots"))

    def reset_counters(self) -> None:
        """Zero the port's counters and the fetch counts."""
        super().reset_counters()
        with self._lock:
            self._kinds.clear()
            self._real_seen.clear()

    def make_server(self, listeners: list[socket.socket]) -> Server:
        """The loop serving the site; it asks :class:`_TrapPages` with the whole target, query included."""
        origin = Origin(_TrapPages(self), self._counters[0], by_target=True)
        return Server(listeners, [origin], self._lock, self.max_seconds, self.log_requests)

    # -- what is served (in the server's loop, under the lock)

    def _count(self, kind: str, path: str | None = None) -> None:
        self._kinds[kind] += 1
        if path is not None:
            self._real_seen[path] += 1

    def _mint(self) -> str:
        """A new session ID, as a server hands one to every response that has none."""
        self._minted += 1
        return f"S{self._minted:06d}X"


def _page(title: str, hrefs: list[tuple[str, str]], size: int, text: str = "") -> Resource:
    body = links_html(hrefs) + (f"<p>{text}</p>\n" if text else "")
    return Resource("200 OK", HTML_TYPE, [generated_page(title, body, size)])


_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "da", "pe", "ho", "gu", "zi", "fa", "be", "qu")


def _article(i: int) -> str:
    """Real page ``i``'s own text: 150 words drawn for it alone, so that real pages differ as real
    pages do (the filler every generated page shares would make them duplicates of each other)."""
    rng = random.Random(i)
    return " ".join("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(150))


class _TrapPages:
    """The site's responses by request target (``server.Resources``, asked with the query)."""

    __slots__ = ("real", "robots", "site")

    def __init__(self, site: TrapSite) -> None:
        self.site = site
        self.real = frozenset(site.real_paths())
        self.robots = Resource("200 OK", TEXT_TYPE, [robots_txt(())])

    def get(self, target: str, default: Resource, /) -> Resource:
        """The response for ``target``, counted by kind; ``default`` (404) where nothing is served."""
        site = self.site
        path, _, query = target.partition("?")
        if path == "/robots.txt":
            site._count("robots")
            return self.robots
        if path in self.real and not query and "?" not in target and ";" not in path:
            site._count("real", path)
            return self._real(path)
        plain = path.split(";", 1)[0]
        for trap, prefix in (("calendar", "/calendar/"), ("sessions", "/shop/"), ("paths", "/docs/"),
                             ("pagination", "/list"), ("archive", "/archive/")):
            if trap in site.traps and plain.startswith(prefix):
                site._count(trap)
                return self._trap(trap, plain, query)
        if plain in self.real:  # a real page under a session ID or a tag
            site._count("sessions")
            return self._real(plain)
        if "soft404" in site.traps:
            site._count("soft404")
            return _page("Not found", [("blog/", "blog"), ("news/", "news"), ("/", "home")], site.page_size)
        site._count("missing")
        return default

    def _real(self, path: str) -> Resource:
        site = self.site
        size = site.page_size
        if path == "/":
            hrefs = [(f"/page/{i}", f"page {i}") for i in range(min(site.links_per_page, site.pages))]
            doors = {"calendar": "/calendar/", "sessions": "/shop/", "paths": "/docs/",
                     "soft404": "/moved/old-page", "pagination": "/list", "archive": "/archive/"}
            hrefs += [(doors[trap], trap) for trap in site.traps]
            if "sessions" in site.traps:
                hrefs.append(("/page/0?utm_source=trapsite&utm_medium=home", "page 0, tagged"))
            return _page("Trap site", hrefs, size)
        if path.startswith("/page/"):
            i = int(path[len("/page/"):])
            hrefs = [(f"/page/{j}", f"page {j}") for j in _link_targets(i, site.pages, site.links_per_page)]
            return _page(f"Trap site page {i}", [*hrefs, ("/", "home")], size, _article(i))
        if path == "/calendar/":
            year, month = FIRST_MONTH
            return _page("Calendar", [(f"/calendar/{year}/{month:02d}", "this month")], size)
        if path.startswith("/shop/"):
            return self._trap("sessions", path, "")
        if path == "/list":
            return self._trap("pagination", path, "page=1")
        return _page(path.strip("/").title(), self._relative(path), size)

    def _trap(self, trap: str, path: str, query: str) -> Resource:
        site = self.site
        size = site.page_size
        if trap == "calendar":
            year, month = _month(path)
            after = (year + month // 12, month % 12 + 1)
            before = (year - (month == 1), (month - 2) % 12 + 1)
            return _page(f"Calendar {year}-{month:02d}", [
                (f"/calendar/{after[0]}/{after[1]:02d}", "next month"),
                (f"/calendar/{before[0]}/{before[1]:02d}", "previous month")], size)
        if trap == "sessions":
            session = site._mint()
            hrefs = [(f"/shop/item/{k};jsessionid={session}", f"item {k}") for k in range(SHOP_ITEMS)]
            hrefs += [(f"/shop/item/{k}?sid={session}", f"item {k} (sid)") for k in range(SHOP_ITEMS)]
            hrefs.append((f"/shop/?sid={session}", "shop"))
            return _page("Shop", hrefs, size)
        if trap == "pagination":
            page = _page_number(query)
            hrefs = [(f"/page/{i}", f"page {i}") for i in range(min(site.pages, 5))]
            return Resource("200 OK", HTML_TYPE, [generated_page(
                "List", links_html([*hrefs, (f"/list?page={page + 1}", "next page")]), size)])
        return _page(trap.title(), self._relative(path), size)

    def _relative(self, path: str) -> list[tuple[str, str]]:
        """The links of ``/docs/`` and ``/archive/`` pages: relative ones, which grow the path."""
        if path.startswith("/archive/"):
            levels = [segment for segment in path[len("/archive/"):].split("/") if segment]
            return [(f"{len(levels) + 1}/", "older")]
        return [("a/", "part a"), ("b/", "part b")]


def _month(path: str) -> tuple[int, int]:
    """(year, month) of a calendar path; the first month for anything else under ``/calendar/``."""
    parts = [part for part in path.split("/") if part]
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() and 1 <= int(parts[2]) <= 12:
        return int(parts[1]), int(parts[2])
    return FIRST_MONTH


def _page_number(query: str) -> int:
    """The ``page`` of a query, 1 when it has none."""
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name == "page" and value.isdigit() and len(value) < 12:
            return int(value)
    return 1

"""What each host of the test site serves: generated pages, ``/robots.txt`` and its redirects.

All of it is built once, at start, by ``build_host``: one table of prebuilt
responses (``messages.Resource``) per host, keyed by path, so that serving a
request is a dict lookup; a site of more than ``PREBUILT_PAGES`` pages makes
each page when asked instead (``GeneratedPages``), the same bytes, in O(1)
memory per page. The links are the package docstring's graph:
``_link_targets`` gives a page's same-host links, the ring of hosts the
cross-host ones. ``/robots.txt`` holds the site's ``robots_disallow`` and
``robots_crawl_delay`` rules, behind a chain of redirects when asked (hop k of
host j's chain is ``/robots/j/k``, and every host serves every chain) and
behind N ``503`` answers (``InTurn``), with ``Sitemap:`` lines when asked; ``/sitemap.xml``
(a sitemap, an index of a gzip one and a plain one, or a broken one) and orphan pages, linked from
nowhere, that only a sitemap (or a canonical URL) leads to; pages whose head or headers hold robots
directives and canonical URLs (``_about_page``).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from .messages import HTML_TYPE, TEXT_TYPE, Chunk, InTurn, Resource

if TYPE_CHECKING:
    from .site import TestSite

_FILLER = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
    "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. "
)


def _link_targets(page: int, pages: int, count: int) -> list[int]:
    """The same-host pages that ``page`` links to: ``count`` distinct others when there are that many.

    ``k*i + 1`` for k = 1.. gives the chain i+1 (which alone makes every page
    reachable) and long jumps (2i+1, 3i+1...) so a crawl fans out quickly; the
    neighbours i+2, i+3... fill in where those collide.

    O(count), not O(pages): the neighbours are distinct and never ``page``, so
    only the jumps taken can collide with them, and at most ``count`` of them
    are looked at beyond the ones kept.
    """
    targets: list[int] = []
    taken: set[int] = set()
    for k in range(1, count + 1):
        target = (k * page + 1) % pages
        if target != page and target not in taken:
            taken.add(target)
            targets.append(target)
    for k in range(1, pages):
        if len(targets) >= count:
            break
        target = (page + k) % pages
        if target not in taken:
            taken.add(target)
            targets.append(target)
    return targets


def links_html(hrefs: Sequence[tuple[str, str]]) -> str:
    """The list of links a generated page carries, from ``(href, text)`` pairs."""
    items = "".join(f'<li><a href="{href}">{text}</a></li>\n' for href, text in hrefs)
    return f'<ul class="testsite-links">\n{items}</ul>\n'


def generated_page(title: str, links: str, page_size: int, head: str = "") -> bytes:
    """An HTML page padded with filler text to about ``page_size`` bytes; ``head`` goes into its head."""
    start = (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{title}</title>{head}</head>\n<body>\n<h1>{title}</h1>\n{links}<p>"
    )
    end = "</p>\n</body></html>\n"
    missing = max(0, page_size - len(start) - len(end))
    filler = (_FILLER * (missing // len(_FILLER) + 1))[:missing]
    return (start + filler + end).encode("utf-8")


def split_at_body_end(body: bytes) -> tuple[memoryview, memoryview]:
    """A corpus page cut before its last ``</body>`` (or at its end), where the site's links go.

    Memoryview slices, not copies: corpus pages reach 1 MB and are served as many pages.
    """
    cut = body.lower().rfind(b"</body>")
    if cut < 0:
        cut = len(body)
    view = memoryview(body)
    return view[:cut], view[cut:]


def robots_txt(disallow: Sequence[str], crawl_delay: float | None = None, sitemaps: Sequence[str] = ()) -> bytes:
    """A ``/robots.txt`` for every user agent: the ``Disallow:`` lines, an optional ``Crawl-delay:``
    and ``Sitemap:`` lines."""
    lines = ["User-agent: *"]
    lines += [f"Disallow: {path}" for path in disallow] or ["Disallow:"]
    if crawl_delay is not None:
        lines.append(f"Crawl-delay: {crawl_delay:g}")
    lines += [f"Sitemap: {url}" for url in sitemaps]
    return ("\n".join(lines) + "\n").encode("utf-8")


REDIRECT_REASONS = {301: "Moved Permanently", 302: "Found", 303: "See Other", 307: "Temporary Redirect",
                     308: "Permanent Redirect"}


#: Sites of up to this many pages (over all hosts) are built whole at start, so that serving
#: one is a dict lookup; a bigger site makes each page when it is asked for (``GeneratedPages``):
#: 1M prebuilt pages of 2 KB took 17 s and 2.6 GB.
PREBUILT_PAGES = 100_000


class Resources(Protocol):
    """What the server asks of a host's responses: the one for a path, or ``default``."""

    def get(self, path: str, default: Resource, /) -> Resource:
        """The response for ``path``; ``default`` when the host has none."""


class GeneratedPages:
    """A host's responses whose pages, ``/page/0`` .. ``/page/{pages-1}``, are made on each request.

    Nothing is kept: a crawl of a million pages must not hold a million pages. ``fixed``
    holds the rest (``/``, ``/robots.txt``...), prebuilt. The paths answered are exactly
    those a prebuilt table would have (``/page/007`` is not ``/page/7``).
    """

    __slots__ = ("fixed", "make", "pages")

    def __init__(self, fixed: dict[str, Resource], pages: int, make: Callable[[int], Resource]) -> None:
        self.fixed = fixed
        self.pages = pages
        self.make = make

    def get(self, path: str, default: Resource, /) -> Resource:
        """The prebuilt response for ``path``, page ``i``'s made now, or ``default``."""
        resource = self.fixed.get(path)
        if resource is not None:
            return resource
        if path.startswith("/page/"):
            number = path[6:]
            if (number.isascii() and number.isdigit() and len(number) <= len(str(self.pages))
                    and str(int(number)) == number and int(number) < self.pages):
                return self.make(int(number))
        return default


def build_host(site: TestSite, index: int) -> Resources:
    """The responses of one host: a prebuilt table, or ``GeneratedPages`` past ``PREBUILT_PAGES``."""
    pages, count = site.pages, site.links_per_page
    cross = site.cross_host_links and site.hosts > 1
    next_base = site.base_urls[(index + 1) % site.hosts]
    index_links = [(f"/page/{j}", f"page {j}") for j in range(min(count, pages))]
    if cross:
        index_links.append((next_base, "next host"))
    table = {
        "/": Resource("200 OK", HTML_TYPE, [
            generated_page(f"Test site host {index}", links_html(index_links), site.page_size)
        ]),
        **_robots_resources(site, index),
        **_sitemap_resources(site, index),
    }
    for i in range(site.orphan_pages):
        orphan = Resource("200 OK", HTML_TYPE, [generated_page(f"Test site host {index} orphan {i}", "", site.page_size)])
        if site.orphans_unavailable:
            busy = Resource("503 Service Unavailable", TEXT_TYPE, [b"503 busy\n"])
            orphan = InTurn([busy] * site.orphans_unavailable + [orphan])
        table[f"/orphan/{i}"] = orphan

    def page(i: int) -> Resource:
        hrefs = [(f"/page/{j}", f"page {j}") for j in _link_targets(i, pages, count)]
        if cross:
            hrefs.append((f"{next_base}page/{i}", f"page {i} on the next host"))
        links = links_html(hrefs)
        body: list[Chunk]
        head, headers = _about_page(site, i)
        if site.bodies is None:
            body = [generated_page(f"Test site host {index} page {i}", links, site.page_size, head)]
        else:
            before, after = site._body_parts[i % len(site._body_parts)]
            body = [before, links.encode("utf-8"), after]
        return Resource("200 OK", HTML_TYPE, body, headers)

    if pages * site.hosts > PREBUILT_PAGES:
        return GeneratedPages(table, pages, page)
    for i in range(pages):
        table[f"/page/{i}"] = page(i)
    return table


def _about_page(site: TestSite, i: int) -> tuple[str, str]:
    """What page ``i`` says about itself: the tags of its head (``<meta name="robots">``, ``<link
    rel="canonical">``) and its header lines (``X-Robots-Tag``, ``Link: <...>; rel="canonical"``)."""
    head = headers = ""
    if i in site.meta_robots:
        head += f'<meta name="robots" content="{site.meta_robots[i]}">'
    if i in site.canonicals:
        head += f'<link rel="canonical" href="{site.canonicals[i]}">'
    if i in site.robots_headers:
        headers += f"X-Robots-Tag: {site.robots_headers[i]}\r\n"
    if i in site.canonical_headers:
        headers += f'Link: <{site.canonical_headers[i]}>; rel="canonical"\r\n'
    return head, headers


#: A URL every generated sitemap lists and no crawl of the site may fetch (not the site's host).
OUT_OF_SCOPE = "http://out-of-scope.invalid/page"
#: The ``<lastmod>`` of every entry of a generated sitemap.
LASTMOD = "2024-01-02"
SITEMAP_TYPE = "application/xml"


def urlset(urls: Sequence[str], lastmod: str | None = LASTMOD) -> bytes:
    """A sitemap (``<urlset>``) listing ``urls``, each with ``lastmod`` when given."""
    stamp = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
    entries = "".join(f"<url><loc>{url}</loc>{stamp}</url>\n" for url in urls)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f"{entries}</urlset>\n").encode()


def sitemap_index(urls: Sequence[str]) -> bytes:
    """A sitemap index (``<sitemapindex>``) listing the sitemaps at ``urls``."""
    entries = "".join(f"<sitemap><loc>{url}</loc></sitemap>\n" for url in urls)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"\n{entries}</sitemapindex>\n").encode()


def _sitemap_resources(site: TestSite, index: int) -> dict[str, Resource]:
    """``/sitemap.xml`` of host ``index`` as ``site.sitemap`` says (none: it is a 404).

    It lists ``/``, every page and every orphan page, and :data:`OUT_OF_SCOPE`.  ``"index"``:
    ``/sitemap.xml`` lists ``/sitemaps/pages`` (``/`` and the pages, gzip, under a name that
    does not say so) and ``/sitemaps/orphans.xml`` (the rest); ``"malformed"``: it breaks off
    after its first entry (the first orphan's); ``"neighbour"``: it lists its own orphans, then the
    next host's (which a sitemap of this host may not list)."""
    base = site.base_urls[index]
    pages = [base, *(f"{base}page/{i}" for i in range(site.pages))]
    orphans = [*(f"{base}orphan/{i}" for i in range(site.orphan_pages)), OUT_OF_SCOPE]
    if site.sitemap is None:
        return {}
    if site.sitemap == "urlset":
        return {"/sitemap.xml": Resource("200 OK", SITEMAP_TYPE, [urlset(pages + orphans)])}
    if site.sitemap == "neighbour":
        neighbour = site.base_urls[(index + 1) % site.hosts]
        theirs = [f"{neighbour}orphan/{i}" for i in range(site.orphan_pages)]
        return {"/sitemap.xml": Resource("200 OK", SITEMAP_TYPE, [urlset(orphans[:-1] + theirs)])}
    if site.sitemap == "index":
        packed = gzip.compress(urlset(pages), mtime=0)
        return {
            "/sitemap.xml": Resource("200 OK", SITEMAP_TYPE, [sitemap_index([f"{base}sitemaps/pages",
                                                                            f"{base}sitemaps/orphans.xml"])]),
            "/sitemaps/pages": Resource("200 OK", "application/octet-stream", [packed]),
            "/sitemaps/orphans.xml": Resource("200 OK", SITEMAP_TYPE, [urlset(orphans)]),
        }
    broken = urlset(orphans[:1])[: -len("</urlset>\n")] + b"<url><loc>" + base.encode() + b"page/0</l"
    return {"/sitemap.xml": Resource("200 OK", SITEMAP_TYPE, [broken])}


def _robots_resources(site: TestSite, index: int) -> dict[str, Resource]:
    """``/robots.txt`` of host ``index`` and the hops of every host's redirect chain (each host
    serves them all: which host a hop is asked of is the chain's business)."""
    sitemaps = [site.base_urls[index] + path.lstrip("/") if "://" not in path else path for path in site.robots_sitemaps]
    rules = Resource("200 OK", TEXT_TYPE, [robots_txt(site.robots_disallow, site.robots_crawl_delay, sitemaps)])
    status = site.robots_redirect_status
    hops = site.robots_redirects

    def hop(j: int, k: int) -> Resource:
        """Hop ``k`` of host ``j``'s chain: the rules at its end, a redirect to hop k+1 before."""
        if k == hops:
            return rules
        host = (j + k + 1) % site.hosts if site.robots_redirect_cross_host else j
        location = f"{site.base_urls[host]}robots/{j}/{k + 1}"
        return Resource(f"{status} {REDIRECT_REASONS[status]}", TEXT_TYPE, [b"moved\n"], f"Location: {location}\r\n")

    table = {f"/robots/{j}/{k}": hop(j, k) for j in range(site.hosts) for k in range(1, hops + 1)}
    table["/robots.txt"] = hop(index, 0)
    if site.robots_unavailable:
        busy = Resource("503 Service Unavailable", TEXT_TYPE, [b"503 busy\n"])
        table["/robots.txt"] = InTurn([busy] * site.robots_unavailable + [table["/robots.txt"]])
    return table

"""Sitemaps (sitemaps.org): more seeds, from each seed host's robots.txt ``Sitemap:`` lines and
its ``/sitemap.xml``.

Theory of operation
-------------------

*A sitemap is a URL of the frontier.*  It is fetched as every URL is: by the crawl's own
fetcher, after its host's robots.txt (a sitemap robots.txt disallows is not fetched), within
the host's connection limit and delay, retried on a 503, recorded ``done`` once (a resumed crawl
does not read it again), with its JSONL and WARC records like any page.  What makes it a
sitemap is its priority, :data:`SITEMAP_PRIORITY`, given only by this module, which the frontier
stores: a resumed crawl still knows the sitemaps left waiting, and claims them before the pages
of their host (the priority is the highest), so the URLs they list are known early.  A URL the
frontier already knew as a page (a link to ``/sitemap.xml``) stays a page.

*Depth.*  The sitemap files are at depth 0, like the seeds they stand beside -- a sitemap index
and the sitemaps it lists too: an index only cuts one long list into files of 50,000 -- and the
URLs they list at depth 1, with the sitemap as their parent, as the links of a seed's page are:
``max_depth=0`` fetches the seeds and the sitemaps (cheap, and reported) but no page they list,
``max_depth=1`` the seeds, their links and every page of the sitemaps.  Depth 0 for the listed
URLs would make a sitemap of a million pages a million seeds, and ``max_depth`` meaningless.

*Probes.*  A seed host's ``/sitemap.xml`` is a guess the crawl makes, not a URL anyone gave it:
most sites have none there.  A probe that finds none -- a 4xx answer (but a 408 or a 429, which
say "not now"), or a page that is no sitemap (a soft 404) -- is ``done`` with that status (its
record kept like any fetch's), counted ``missing`` in the report and not as an error:
``--fail-on-error`` must not fail a healthy site.  A redirect of a probe leads to a probe.  A
sitemap that robots.txt or an index names is no guess, nor is a seed or a link that happens to be
``/sitemap.xml`` (a page, then): its 404 is an error as any URL's; so is a probe's 5xx or network
error, after its retries: the site is not well there.  (A probe is known in the run that adds it:
a resumed run adds the seeds' probes again, and robots.txt answers read back from the frontier
do not name their sitemaps again, so a named ``/sitemap.xml`` left waiting by an earlier run is
taken for a probe.)

*Bounds.*  A sitemap is read up to :data:`MAX_BYTES` uncompressed, :data:`MAX_URLS` entries
(sitemaps.org's own limits) and :data:`MAX_ELEMENTS` XML elements, entries or not: a larger one is
cut there, and the cut is logged and counted (``CrawlSummary.sitemaps["cut"]``), never silent.  A
gzip sitemap is known by its magic bytes, not by its name (``.xml.gz`` is often served as
``application/octet-stream``, ``/sitemap`` as gzip), and is inflated only up to the same bound, so
a gzip bomb stops there, and only its first :data:`MAX_GZIP_MEMBERS` members (a body of many empty
members is no sitemap, only work).  An index may list indexes down to :data:`MAX_NESTING` levels
(sitemaps.org allows none; some sites nest once), and at most :data:`MAX_PER_HOST` sitemap files of
one host are added in a run.

*XML.*  lxml's ``iterparse``, with no DTD loaded, no entity resolved (a "billion laughs"
document expands nothing), no network access and libxml2's default limits (``huge_tree``
off): a sitemap cannot make the crawler fetch anything or grow without bound.  Elements are
cleared as they are read, at every depth, so a 50 MB sitemap takes little memory, even one whose
single entry holds a million elements.  Names are matched without
their namespace (``urlset``/``url``/``loc``, ``sitemapindex``/``sitemap``/``loc``): sitemaps in
the wrong namespace or none are common and mean the same.  A text sitemap (one URL a line, which
sitemaps.org allows) is read too.  A document that is not a sitemap, or breaks off (malformed
XML, a bad gzip stream), keeps the entries read before the break and counts one
``sitemap_invalid`` error; the crawl goes on.

*The URLs listed* go through the crawl's scope (allowed domains, include, exclude) and the URL
cleanup of links (``absolute_url``, relative ones against the sitemap's URL), then what the
sitemap may list (sitemaps.org's file location and cross-submission rules: :class:`Sitemaps`);
the sitemaps an index lists go through both too.  Every URL is kept in the frontier's normal
form, the form a claimed URL has.  ``<lastmod>`` is kept, as written, in the frontier with the
URL (``add_many()``'s ``lastmods``), which hands it back with each claim of it
(``CrawledPage.lastmod`` and the JSONL record), in a resumed run too.

*Revisits.*  Under a revisit policy a sitemap file is a URL like any other: due again after its
interval, fetched with a conditional GET, and when unchanged (a 304, the same body) not read, so
the URLs it lists are not added again.  A changed one is read, and its ``<lastmod>`` later than a
listed URL's last fetch makes that URL due at once (the crawler asks ``add_many(...,
wake_modified=True)``; the rule is the frontier's ``service.py``).  A sitemap that this run did not
add -- due again while robots.txt is read back from the frontier, whose ``Sitemap:`` lines are then
not added again -- is placed by its stored parent (:meth:`Sitemaps._standing`).
"""

from __future__ import annotations

import io
import logging
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from lxml import etree  # type: ignore[import-untyped,unused-ignore]

from ..models import FetchResult
from ..urls import Origin, absolute_url, host_key, normal_or_none, normalize_url, parse_target
from .frontier import FrontierURL
from .policy import LinkScope, is_redirect
from .robots import RobotsRules

__all__ = [
    "MAX_BYTES", "MAX_ELEMENTS", "MAX_GZIP_MEMBERS", "MAX_NESTING", "MAX_PER_HOST", "MAX_URLS", "SITEMAP_PRIORITY",
    "Sitemap", "Sitemaps", "read_sitemap",
]

log = logging.getLogger("niofetcher")

#: The frontier priority that marks a sitemap (and has it claimed before its host's pages).
SITEMAP_PRIORITY = 1 << 20
#: A sitemap is read up to this many bytes, uncompressed (sitemaps.org: 50 MB) ...
MAX_BYTES = 50 * 1024 * 1024
#: ... and this many entries (sitemaps.org: 50,000) ...
MAX_URLS = 50_000
#: ... and this many XML elements, entries or not (an entry of ``<url>``, ``<loc>``, ``<lastmod>``,
#: ``<changefreq>``, ``<priority>`` and a few images is twenty): at about 1.4 us an element, 50 MB of
#: ``<a/>`` took 19 s of the coordinator's time.
MAX_ELEMENTS = 20 * MAX_URLS
#: Levels of sitemap index followed: a root index, an index it lists, then sitemaps only.
MAX_NESTING = 2
#: Sitemap files of one host added in one run, at most.
MAX_PER_HOST = 1000
#: The members of a gzip sitemap inflated (a concatenated gzip file is one file; real ones have a
#: few members): past them the sitemap is cut, as past MAX_BYTES.
MAX_GZIP_MEMBERS = 1000

_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_CHUNK = 64 * 1024  # the gzip input fed to zlib at a time
_NOT_NOW = frozenset((408, 429))  # a 4xx that does not say "no sitemap here": Request Timeout, Too Many Requests
_KINDS = {"urlset": "url", "sitemapindex": "sitemap"}  # root element -> its entries' element
Entry = tuple[str, int, str | None, int]  # a frontier entry: (url, depth, parent, priority)
_ABSOLUTE = re.compile(r"https?://", re.IGNORECASE)
# An "&" that starts no entity or character reference.
_BARE_AMPERSAND = re.compile(rb"&(?!(?:[A-Za-z_][\w.-]*|#[0-9]+|#x[0-9A-Fa-f]+);)")


@dataclass(slots=True)
class Sitemap:
    """What one sitemap file holds: its kind, its entries in order, and what went wrong."""

    kind: str  # "urlset", "sitemapindex", "text", or "" (not a sitemap)
    entries: list[tuple[str, str | None]] = field(default_factory=list)  # (loc, lastmod), as written
    cut: str = ""  # not "": the file went past a bound and the rest was not read (why)
    error: str = ""  # not "": the file is no sitemap, or broke off after its entries (why)


def read_sitemap(body: bytes) -> Sitemap:
    """The entries of a sitemap (urlset or index; XML or text; gzip or not), within the bounds."""
    data, cut, error = _inflated(body)
    start = data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if not start:
        return Sitemap("", error=error or "empty")
    sitemap = _text_sitemap(data, cut) if start != b"<" else _xml_sitemap(data, cut)
    if error:  # a gzip stream that broke off: what it held before the break is kept
        sitemap.error = error
    return sitemap


def _inflated(body: bytes) -> tuple[bytes, str, str]:
    """``(data, cut, error)``: the body, gunzipped when it is gzip, cut at MAX_BYTES.

    Inflated by zlib with an output bound, never further than MAX_BYTES + 1 (a gzip bomb stops
    there), member after member (a concatenated gzip file is one file), up to MAX_GZIP_MEMBERS.  A
    stream that breaks off (a download cut short) keeps what was inflated before the break, as
    malformed XML keeps the entries before it; only corrupt data loses the member it is in."""
    if body[:2] != _GZIP_MAGIC:
        data = body
    else:
        parts: list[bytes] = []
        size = 0
        view = memoryview(body)
        offset = members = 0  # where the next member starts; members inflated
        while view[offset:offset + 2] == _GZIP_MAGIC and size <= MAX_BYTES:
            if members == MAX_GZIP_MEMBERS:
                return b"".join(parts), f"more than {MAX_GZIP_MEMBERS} gzip members", ""
            members += 1
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while not inflater.eof and size <= MAX_BYTES:
                # Fed a chunk at a time: zlib copies what follows a member's end (unused_data), and
                # fed the whole rest, every member of a body of many would copy the rest again.
                chunk = view[offset:offset + _GZIP_CHUNK]
                if not chunk:  # the input ended first
                    return b"".join(parts), "", "bad gzip: the stream breaks off"
                try:
                    part = inflater.decompress(chunk, MAX_BYTES + 1 - size)
                except zlib.error as exc:
                    return b"".join(parts), "", f"bad gzip: {exc}"
                parts.append(part)
                size += len(part)
                offset += len(chunk) - len(inflater.unconsumed_tail) - len(inflater.unused_data)
        data = b"".join(parts)
    if len(data) > MAX_BYTES:
        return data[:MAX_BYTES], f"larger than {MAX_BYTES} bytes", ""
    return data, "", ""


def _text_sitemap(data: bytes, cut: str) -> Sitemap:
    """One URL a line (sitemaps.org: UTF-8, a BOM allowed, each URL absolute, "including the
    http"): a line that is no http(s) URL is no entry -- a soft 404's "Not found" resolved against
    the sitemap's URL would be a made-up page -- and a text whose first line is none is no sitemap."""
    sitemap = Sitemap("text", cut=cut)
    for line in data.decode("utf-8-sig", "replace").splitlines():
        line = line.strip()
        if not line:
            continue
        if not _ABSOLUTE.match(line):
            if not sitemap.entries:
                return Sitemap("", error="not a sitemap: a text whose first line is no http(s) URL")
            continue
        if len(sitemap.entries) == MAX_URLS:
            sitemap.cut = f"more than {MAX_URLS} URLs"
            break
        sitemap.entries.append((line, None))
    return sitemap


def _xml_sitemap(data: bytes, cut: str) -> Sitemap:
    """An XML sitemap; one malformed only by bare ``&`` (``<loc>/p?a=1&b=2</loc>``, the commonest
    fault of real sitemaps) is read as if each were ``&amp;``: a parser that recovers would drop
    ``&b`` and make another URL of it, a strict one would lose every entry after the first."""
    sitemap = _parsed(data, cut)
    if sitemap.error.startswith("malformed XML") and _BARE_AMPERSAND.search(data):
        sitemap = _parsed(_BARE_AMPERSAND.sub(b"&amp;", data), cut)
    return sitemap


def _parsed(data: bytes, cut: str) -> Sitemap:
    sitemap = Sitemap("", cut=cut)
    entry_name = ""
    depth = 0  # of the element being read: 1 the root, 2 an entry, 3 its loc/lastmod
    loc: str | None = None
    lastmod: str | None = None
    events = etree.iterparse(
        io.BytesIO(data), events=("start", "end"), resolve_entities=False, load_dtd=False, no_network=True,
        huge_tree=False, remove_comments=True, remove_pis=True,
    )
    elements = 0  # started so far
    try:
        for event, element in events:
            if event == "start":
                elements += 1
                if elements > MAX_ELEMENTS:
                    sitemap.cut = f"more than {MAX_ELEMENTS} elements"
                    return sitemap
                depth += 1
                if depth == 1:
                    root = _local_name(element.tag)
                    if root not in _KINDS:
                        sitemap.error = f"not a sitemap: its root element is <{root}>"
                        return sitemap
                    sitemap.kind, entry_name = root, _KINDS[root]
                continue
            name = _local_name(element.tag)
            if depth == 3 and name == "loc":
                loc = (element.text or "").strip()
            elif depth == 3 and name == "lastmod":
                lastmod = (element.text or "").strip() or None
            elif depth == 2:
                if name == entry_name and loc:
                    if len(sitemap.entries) == MAX_URLS:
                        sitemap.cut = f"more than {MAX_URLS} entries"
                        return sitemap
                    sitemap.entries.append((loc, lastmod))
                loc = lastmod = None
            if depth >= 2:
                # What was read is dropped, at every depth (one entry may hold millions of
                # elements): memory stays flat.
                element.clear()
                while element.getprevious() is not None:
                    del element.getparent()[0]
            depth -= 1
    except etree.XMLSyntaxError as exc:
        if not sitemap.cut:  # a file cut at MAX_BYTES breaks off where it was cut: that is the cut
            sitemap.error = f"malformed XML: {exc}"
    return sitemap


def _local_name(tag: object) -> str:
    """An element's name without its namespace ("" for what is no element's name)."""
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


class Sitemaps:
    """The sitemaps of one crawl run: which to add, and what each one fetched leads to.

    Only the coordinator's thread calls it.  ``report`` counts what happened: sitemap files
    ``read``, ``urls`` added from them, ``invalid`` ones, ``cut`` ones, indexes ``too_deep``,
    sitemaps left out as ``too_many`` for their host, entries left out as ``foreign``
    (outside what their sitemap may list, below), and probes that found no sitemap, ``missing``;
    an invalid sitemap also counts one ``sitemap_invalid`` in ``errors`` (the crawl's error counts).

    What a sitemap may list (sitemaps.org, "Sitemap file location" and "Sitemaps & Cross
    Submits"; Google's index rules): the URLs under its own directory -- ``/catalog/sitemap.xml``
    lists ``/catalog/...`` of its own scheme, host and port, not ``/images/...`` nor another host
    -- and, when a robots.txt named it, every URL of that robots.txt's origin (the cross-submission
    that lets ``a.example/robots.txt`` name a sitemap kept elsewhere).  An index's entries are held to
    the same rule, and a sitemap it lists, or a redirect leads to, may list what the index (or the
    redirecting URL) could: the site that names it vouches for it.  Every URL is compared in the
    frontier's normal form (``http://h:80/x`` is ``http://h/x``).
    """

    def __init__(self, scope: LinkScope, seeds: Sequence[str], errors: Counter[str]) -> None:
        self._scope = scope
        self._errors = errors
        self._origins = dict.fromkeys(parse_target(seed).origin for seed in seeds)  # the seed hosts, in order
        self._robots_read: set[Origin] = set()  # origins whose Sitemap: lines were added
        # A sitemap's index nesting (0 for a root) and the URL prefixes it may list besides its own
        # directory, by its URL in normal form (the form a claimed URL has).
        self._known: dict[str, tuple[int, tuple[str, ...]]] = {}
        self._probes: set[str] = set()  # sitemaps the crawl made up itself (see "Probes"), in normal form
        self._per_host: Counter[str] = Counter()
        self.report: Counter[str] = Counter()

    @staticmethod
    def is_sitemap(item: FrontierURL) -> bool:
        """Whether a claimed URL came into the frontier as a sitemap."""
        return item.priority == SITEMAP_PRIORITY

    def roots(self) -> list[Entry]:
        """The frontier entries of each seed host's ``/sitemap.xml`` (when in scope): probes."""
        return self._added([f"{origin}/sitemap.xml" for origin in self._origins], 0, None, 0, (), probe=True)

    def found_none(self, item: FrontierURL, result: FetchResult) -> bool:
        """Whether ``result`` is a probe's 4xx: no sitemap there, which is an answer, not a failure
        (the URL is done, not an error).  Not a 408 or a 429, which say "not now" rather than "none"."""
        status = result.status
        return (self.is_sitemap(item) and item.url in self._probes and result.error is None
                and status is not None and 400 <= status < 500 and status not in _NOT_NOW)

    def from_robots(self, origin: Origin, rules: RobotsRules | None) -> list[Entry]:
        """The frontier entries of the ``Sitemap:`` lines of a seed host's robots.txt, once a run
        (rules None: not settled yet)."""
        if rules is None or origin not in self._origins or origin in self._robots_read:
            return []
        self._robots_read.add(origin)
        robots_url = f"{origin}/robots.txt"
        urls = [url for url in (absolute_url(line, robots_url) for line in rules.sitemaps) if url is not None]
        return self._added(urls, 0, robots_url, 0, (normalize_url(f"{origin}/"),))

    def entries(
        self, item: FrontierURL, result: FetchResult, max_depth: int | None, lastmods: dict[str, str]
    ) -> list[Entry]:
        """What a fetched sitemap leads to: the URLs it lists, the sitemaps an index lists, or a
        redirect's target (a sitemap still).  A 404 or another failure leads nowhere.  The
        ``<lastmod>`` of the URLs listed goes in ``lastmods``, for the frontier's ``add_many()``."""
        url = item.url
        level, vouched = self._known.get(url) or self._standing(item)
        probe = url in self._probes
        if is_redirect(result):
            target = absolute_url(result.header("location") or "", result.url)
            return self._added([target] if target else [], item.depth, url, level, (*vouched, _directory(url)), probe)
        if not result.ok:
            if self.found_none(item, result):
                self.report["missing"] += 1
            return []
        sitemap = read_sitemap(result.body)
        if probe and not sitemap.kind:  # a soft 404: no sitemap here
            self.report["missing"] += 1
            return []
        self.report["read"] += 1
        if sitemap.cut:
            self.report["cut"] += 1
            log.warning("sitemap %s: %s; the rest of it is not read", url, sitemap.cut)
        if sitemap.error:
            self.report["invalid"] += 1
            self._errors["sitemap_invalid"] += 1
            log.warning("sitemap %s: %s", url, sitemap.error)
        base = result.final_url
        allowed = (_directory(normalize_url(base)), *vouched)
        if sitemap.kind == "sitemapindex":
            if level >= MAX_NESTING:
                self.report["too_deep"] += 1
                log.warning("sitemap %s: an index %d levels down is not followed", url, level)
                return []
            listed = self._listed(sitemap, base, url, allowed)
            return self._added([page for page, _ in listed], item.depth, url, level + 1, allowed)
        depth = item.depth + 1
        if max_depth is not None and depth > max_depth:
            return []
        found: list[Entry] = []
        for page, lastmod in self._listed(sitemap, base, url, allowed):
            found.append((page, depth, url, 0))
            if lastmod is not None:
                lastmods[page] = lastmod
        self.report["urls"] += len(found)
        return found

    @staticmethod
    def _standing(item: FrontierURL) -> tuple[int, tuple[str, ...]]:
        """The nesting and the vouchers of a sitemap that this run did not add (left waiting by an
        earlier run, or due again under a revisit policy, while robots.txt is read back from the
        frontier and its ``Sitemap:`` lines are not added again), by who added it, its parent: one
        that a robots.txt named is a root that may list what the robots.txt's site has, as in the run
        that read robots.txt; one that an index listed or a redirect led to is a level down, and one
        of none (a probe) a root, each vouched for by its own host."""
        parent = item.parent
        if parent is not None and "//" in parent and parent == f"{host_key(parent)}/robots.txt":
            return 0, (_directory(parent),)
        return 0 if parent is None else 1, (_directory(host_key(item.url) + "/"),)

    def _listed(self, sitemap: Sitemap, base: str, url: str, allowed: tuple[str, ...]) -> list[tuple[str, str | None]]:
        """The entries of ``sitemap`` (fetched at ``url``) in the crawl's scope, as absolute URLs in
        normal form, with their lastmod: those under one of the ``allowed`` prefixes; the others are
        counted ``foreign`` (out of scope: left out as a link would be, uncounted)."""
        listed: list[tuple[str, str | None]] = []
        foreign = 0
        for loc, lastmod in sitemap.entries:
            page = normal_or_none(absolute_url(loc, base))
            if page is None or not self._scope.in_scope(page):
                continue
            if page.startswith(allowed):
                listed.append((page, lastmod))
            else:
                foreign += 1
        if foreign:
            if not self.report["foreign"]:
                log.warning("sitemap %s: %d URLs outside what it may list (%s) left out", url, foreign, ", ".join(allowed))
            self.report["foreign"] += foreign
        return listed

    def _added(
        self, urls: list[str], depth: int, parent: str | None, level: int, vouched: tuple[str, ...], probe: bool = False,
    ) -> list[Entry]:
        """Frontier entries for sitemap files: in scope, within the per-host cap, their level and
        what vouches for them kept (added up when a sitemap is named twice).  ``probe``: made up by
        the crawl; a sitemap named by anyone (robots.txt, an index) is none, even if made up too."""
        entries: list[Entry] = []
        for url in dict.fromkeys(normal for normal in map(normal_or_none, urls) if normal is not None):
            if not self._scope.in_scope(url):
                continue
            known = self._known.get(url)
            if known is not None:
                self._known[url] = (known[0], tuple(dict.fromkeys((*known[1], *vouched))))
                if not probe:
                    self._probes.discard(url)
            else:
                host = host_key(url)
                if self._per_host[host] >= MAX_PER_HOST:
                    self.report["too_many"] += 1
                    if self.report["too_many"] == 1:
                        log.warning("sitemaps of %s: more than %d in this run; the rest are left out", host, MAX_PER_HOST)
                    continue
                self._per_host[host] += 1
                self._known[url] = (level, vouched)
                if probe:
                    self._probes.add(url)
            entries.append((url, depth, parent, SITEMAP_PRIORITY))
        return entries


def _directory(url: str) -> str:
    """The directory of a URL in normal form, up to its last ``/`` before any query: what a
    sitemap there may list."""
    path = url.partition("?")[0]
    return path[: path.rindex("/") + 1]

"""Sitemaps (``CrawlConfig(sitemaps=True)``, docs/crawler.md), against the real test site.

What the server was asked for is the proof: a page that only a sitemap lists (an orphan) is
fetched once with sitemaps and never without; a URL out of scope never is.  The reader alone
(``read_sitemap``) is held to the bounds: 50,000 entries, 50 MB, a gzip known by its bytes, no
entity expanded.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import logging
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_cli_crawl import crawl as cli_crawl

from niofetcher.crawl import CrawlConfig, CrawledPage, Crawler, CrawlSummary, sitemaps
from niofetcher.crawl.frontier import FrontierURL
from niofetcher.crawl.policy import LinkScope
from niofetcher.crawl.robots import RobotsRules
from niofetcher.crawl.sitemaps import SITEMAP_PRIORITY, Sitemaps, read_sitemap
from niofetcher.models import FetchResult, URLBean
from niofetcher.testing import TestSite
from niofetcher.testing.pages import LASTMOD, OUT_OF_SCOPE, sitemap_index, urlset


def crawl(tmp_path: Path, site: TestSite, **options: Any) -> tuple[CrawlSummary, list[CrawledPage]]:
    options.setdefault("parse_mode", "thread")
    options.setdefault("sitemaps", True)
    pages: list[CrawledPage] = []
    config = CrawlConfig(seeds=[site.base_urls[0]], db_path=str(tmp_path / "crawl.sqlite"), **options)
    return Crawler(config, on_page=pages.append).run(), pages


def served(site: TestSite) -> Counter[str]:
    return site.counters().paths


def orphans(site: TestSite) -> set[str]:
    return {f"/orphan/{i}" for i in range(site.orphan_pages)}


def test_sitemap_xml_seeds_orphans_once_and_drops_out_of_scope(tmp_path: Path) -> None:
    with TestSite(pages=5, sitemap="urlset", orphan_pages=3) as site:
        summary, pages = crawl(tmp_path, site)
        paths = served(site)
    assert all(paths[p] == 1 for p in orphans(site) | {"/sitemap.xml", "/", "/page/4"}), paths
    assert max(paths.values()) == 1  # every page once, though both the sitemap and links lead there
    assert OUT_OF_SCOPE not in {page.url for page in pages}
    assert summary.counts["error"] == 0 and summary.errors == {}
    assert summary.sitemaps == {"read": 1, "urls": 9}  # /, 5 pages, 3 orphans
    by_url = {page.url: page for page in pages}
    orphan = by_url[site.base_urls[0] + "orphan/0"]
    assert (orphan.depth, orphan.parent, orphan.lastmod) == (1, site.base_urls[0] + "sitemap.xml", LASTMOD)
    assert by_url[site.base_urls[0] + "sitemap.xml"].depth == 0


def test_without_sitemaps_nothing_of_it_is_fetched(tmp_path: Path) -> None:
    with TestSite(pages=5, sitemap="urlset", orphan_pages=3, robots_sitemaps=["/sitemap.xml"]) as site:
        summary, _ = crawl(tmp_path, site, sitemaps=False)
        paths = served(site)
    assert "/sitemap.xml" not in paths and not orphans(site) & set(paths)
    assert summary.sitemaps == {}


def test_index_with_a_gzip_sitemap_known_by_its_bytes(tmp_path: Path) -> None:
    with TestSite(pages=4, sitemap="index", orphan_pages=2) as site:
        summary, _ = crawl(tmp_path, site)
        paths = served(site)
    assert paths["/sitemaps/pages"] == 1 and paths["/sitemaps/orphans.xml"] == 1
    assert all(paths[p] == 1 for p in orphans(site))
    assert summary.sitemaps == {"read": 3, "urls": 7}  # the index, then / + 4 pages and 2 orphans


def test_robots_sitemap_lines_and_a_sitemap_behind_a_404(tmp_path: Path) -> None:
    with TestSite(pages=3, sitemap="urlset", orphan_pages=1, robots_sitemaps=["/missing.xml", "/sitemap.xml"]) as site:
        summary, pages = crawl(tmp_path, site)
        paths = served(site)
    assert paths["/missing.xml"] == 1 and paths["/sitemap.xml"] == 1 and paths["/orphan/0"] == 1
    assert summary.errors == {"http_404": 1}  # the missing sitemap, a result like any 404
    missing = next(page for page in pages if page.url.endswith("/missing.xml"))
    assert missing.parent == site.base_urls[0] + "robots.txt"


@pytest.mark.timeout(30)
def test_a_probe_of_sitemap_xml_that_finds_none_is_done_and_no_error(tmp_path: Path) -> None:
    """The crawl's own guess at /sitemap.xml, answered 404, is an answer: done with its status, counted
    ``missing``, not an error (before, an ``http_404`` in the errors of every site without one)."""
    with TestSite(pages=3) as site:
        summary, pages = crawl(tmp_path, site)
    assert summary.errors == {} and summary.counts["error"] == 0
    assert summary.counts["done"] == len(site.page_urls()) + 1
    assert summary.sitemaps == {"missing": 1}
    probe = site.base_urls[0] + "sitemap.xml"
    assert [page.result.status for page in pages if page.url == probe] == [404]  # handed over like any fetch
    with contextlib.closing(sqlite3.connect(tmp_path / "crawl.sqlite")) as conn:
        row = conn.execute("SELECT state, status, error FROM urls WHERE url = ?", (probe,)).fetchone()
    assert row == ("done", 404, None)


@pytest.mark.timeout(60)
def test_crawl_command_with_sitemaps_and_fail_on_error_exits_0_on_a_site_without_a_sitemap(tmp_path: Path) -> None:
    with TestSite(pages=3) as site:
        done = cli_crawl(site.base_urls[0], tmp_path / "crawl.sqlite", "--sitemaps", "--fail-on-error",
                         "--parse-mode", "thread")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "crawl complete" in done.stdout and "failed URLs" not in done.stdout


@pytest.mark.timeout(30)
def test_a_sitemap_robots_txt_names_at_sitemap_xml_that_is_missing_is_an_error(tmp_path: Path) -> None:
    """The same URL, named by robots.txt: no guess, but a broken promise of the site's."""
    with TestSite(pages=3, robots_sitemaps=["/sitemap.xml"]) as site:
        summary, _ = crawl(tmp_path, site)
    assert summary.errors == {"http_404": 1} and summary.sitemaps == {}


def test_robots_txt_disallow_holds_for_sitemaps(tmp_path: Path) -> None:
    with TestSite(pages=3, sitemap="urlset", orphan_pages=2, robots_disallow=["/orphan/1"]) as site:
        crawl(tmp_path, site)
        paths = served(site)
    assert paths["/orphan/0"] == 1 and "/orphan/1" not in paths


def test_malformed_sitemap_counts_one_error_and_the_crawl_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with TestSite(pages=3, sitemap="malformed", orphan_pages=2) as site, caplog.at_level(logging.WARNING, "niofetcher"):
        summary, _ = crawl(tmp_path, site)
        paths = served(site)
    assert summary.errors == {"sitemap_invalid": 1}
    assert summary.sitemaps == {"read": 1, "invalid": 1, "urls": 1}  # the entry before the break is kept
    assert paths["/orphan/0"] == 1 and "/orphan/1" not in paths and paths["/page/2"] == 1
    assert "malformed XML" in caplog.text


def test_oversized_sitemap_is_cut_and_the_cut_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sitemaps, "MAX_URLS", 3)
    with TestSite(pages=20, links_per_page=1, cross_host_links=False, sitemap="urlset", orphan_pages=5) as site, \
            caplog.at_level(logging.WARNING, "niofetcher"):
        summary, _ = crawl(tmp_path, site, max_depth=1)
        paths = served(site)
    assert summary.sitemaps == {"read": 1, "cut": 1, "urls": 3}
    assert "more than 3 entries" in caplog.text and "sitemap.xml" in caplog.text
    assert not orphans(site) & set(paths)  # listed after the cut


def test_max_depth_zero_reads_sitemaps_but_fetches_nothing_they_list(tmp_path: Path) -> None:
    with TestSite(pages=3, sitemap="index", orphan_pages=2) as site:
        summary, _ = crawl(tmp_path, site, max_depth=0)
        paths = served(site)
    assert set(paths) == {"/robots.txt", "/", "/sitemap.xml", "/sitemaps/pages", "/sitemaps/orphans.xml"}
    assert summary.sitemaps["read"] == 3


def test_resumed_crawl_reads_no_sitemap_twice(tmp_path: Path) -> None:
    with TestSite(pages=3, sitemap="index", orphan_pages=2) as site:
        crawl(tmp_path, site)
        site.reset_counters()
        summary, _ = crawl(tmp_path, site)
        paths = served(site)
    assert not paths and summary.pages == 0  # all done: not even robots.txt is asked for again


def test_lastmod_kept_for_a_retried_fetch(tmp_path: Path) -> None:
    # The orphan answers 503 first: its second fetch, the one recorded, still has its lastmod.
    with TestSite(pages=2, sitemap="urlset", orphan_pages=1, orphans_unavailable=1) as site:
        _, pages = crawl(tmp_path, site, retry_delay=0.05)
        paths = served(site)
    assert paths["/orphan/0"] == 2
    orphan = next(page for page in pages if page.url.endswith("/orphan/0"))
    assert orphan.result.status == 200 and orphan.lastmod == LASTMOD


def test_lastmod_kept_in_the_frontier_for_a_resumed_run(tmp_path: Path) -> None:
    """The lastmods live in the frontier's lastmod column: a run stopped after the sitemap was
    read, and then resumed, records the orphans it fetches with theirs."""
    with TestSite(pages=2, sitemap="urlset", orphan_pages=3) as site:
        first, before = crawl(tmp_path, site, max_pages=2)
        _, after = crawl(tmp_path, site)
    assert first.stopped and [page.url for page in before if "/orphan/" in page.url] == []
    orphans_seen = [page for page in after if "/orphan/" in page.url]
    assert len(orphans_seen) == 3 and all(page.lastmod == LASTMOD for page in orphans_seen)
    with contextlib.closing(sqlite3.connect(tmp_path / "crawl.sqlite")) as conn:
        dated = dict(conn.execute("SELECT url, lastmod FROM urls WHERE lastmod IS NOT NULL").fetchall())
    assert {page.url: dated.get(page.url) for page in orphans_seen} == {page.url: LASTMOD for page in orphans_seen}
    assert site.base_urls[0] + "sitemap.xml" not in dated  # a link's row, or the sitemap's own: NULL


def test_a_sitemap_lists_only_urls_of_its_own_host(tmp_path: Path) -> None:
    # Both hosts are in scope (one IP), but host 1's orphans are not host 0's sitemap's to list.
    with TestSite(hosts=2, pages=2, cross_host_links=False, sitemap="neighbour", orphan_pages=2) as site:
        summary, _ = crawl(tmp_path, site)
        mine, theirs = (site.counters(port).paths for port in site.ports)
    assert mine["/orphan/0"] == 1 and mine["/orphan/1"] == 1
    assert not theirs, theirs
    assert summary.sitemaps == {"read": 1, "urls": 2, "foreign": 2}


# -- which sitemap may list what (sitemaps.org cross-submission) ------------------------------


SCOPE = LinkScope(domains=("h.test", "cdn.test", "x.test"))


def fetched(url: str, body: bytes) -> FetchResult:
    return FetchResult(URLBean(url), url, url, status=200, body=body)


def claimed(entry: tuple[str, int, str | None, int]) -> FrontierURL:
    url, depth, parent, priority = entry
    return FrontierURL(url, depth, priority, 1, parent)


def test_a_sitemap_named_by_robots_txt_may_list_that_host() -> None:
    errors: Counter[str] = Counter()
    maps = Sitemaps(SCOPE, ["http://h.test/"], errors)
    rules = RobotsRules(sitemaps=("http://cdn.test/h/sitemap.xml",))
    [entry] = maps.from_robots(next(iter(maps._origins)), rules)
    listed = ["http://h.test/a", "http://cdn.test/h/b", "http://cdn.test/other/c", "http://x.test/d"]
    found = maps.entries(claimed(entry), fetched(entry[0], urlset(listed)), None, {})
    assert [url for url, *_ in found] == ["http://h.test/a", "http://cdn.test/h/b"]  # robots.txt's host, its directory
    assert maps.report["foreign"] == 2


def test_root_index_on_a_default_port_is_followed_and_its_sitemaps_may_list_the_site() -> None:
    # /sitemap.xml is added as http://h.test:80/sitemap.xml and claimed as http://h.test/sitemap.xml.
    maps = Sitemaps(SCOPE, ["http://h.test/"], Counter())
    [root] = maps.roots()
    index = sitemap_index(["http://h.test:80/maps/a.xml", "http://x.test/b.xml"])
    lastmods: dict[str, str] = {}
    children = maps.entries(claimed(root), fetched("http://h.test/sitemap.xml", index), None, lastmods)
    assert children == [("http://h.test/maps/a.xml", 0, "http://h.test/sitemap.xml", SITEMAP_PRIORITY)]
    assert maps.report["too_deep"] == 0 and maps.report["foreign"] == 1
    listed = maps.entries(claimed(children[0]), fetched(children[0][0], urlset(["http://h.test:80/p%c3%a9"])), None,
                          lastmods)
    assert listed == [("http://h.test/p%C3%A9", 1, "http://h.test/maps/a.xml", 0)]  # the index's directory
    assert lastmods == {"http://h.test/p%C3%A9": LASTMOD}  # as the frontier hands the URL out (no index's)


def test_a_redirected_sitemap_may_list_what_its_first_url_could() -> None:
    maps = Sitemaps(SCOPE, ["http://h.test/"], Counter())
    [root] = maps.roots()
    moved = FetchResult(URLBean(root[0]), "http://h.test/sitemap.xml", "http://h.test/sitemap.xml", status=301,
                        headers=[("Location", "http://cdn.test/h/map.xml")])
    [target] = maps.entries(claimed(root), moved, None, {})
    found = maps.entries(claimed(target), fetched(target[0], urlset(["http://h.test/a", "http://x.test/b"])), None, {})
    assert [url for url, *_ in found] == ["http://h.test/a"]


def answered(url: str, status: int, body: bytes = b"", headers: list[tuple[str, str]] | None = None) -> FetchResult:
    return FetchResult(URLBean(url), url, url, status=status, body=body, headers=headers or [])


def test_a_probe_redirected_to_a_404_or_answered_with_a_page_found_no_sitemap() -> None:
    errors: Counter[str] = Counter()
    maps = Sitemaps(SCOPE, ["http://h.test/"], errors)
    [root] = maps.roots()
    probe = claimed(root)
    soft_404 = answered(root[0], 200, b"<html><body>Not found</body></html>")
    assert maps.entries(probe, soft_404, None, {}) == [] and not maps.found_none(probe, soft_404)  # a 200 is done
    moved = answered(root[0], 301, headers=[("Location", "/sitemap_index.xml")])
    [target] = maps.entries(probe, moved, None, {})
    gone = answered(target[0], 404)
    assert maps.found_none(claimed(target), gone) and maps.entries(claimed(target), gone, None, {}) == []
    assert maps.report == {"missing": 2} and errors == {}
    assert not maps.found_none(probe, answered(root[0], 429)) and not maps.found_none(probe, answered(root[0], 503))


def test_sitemap_xml_named_by_robots_txt_or_as_a_page_is_no_probe() -> None:
    errors: Counter[str] = Counter()
    maps = Sitemaps(SCOPE, ["http://h.test/"], errors)
    [root] = maps.roots()
    named = maps.from_robots(next(iter(maps._origins)), RobotsRules(sitemaps=("http://h.test/sitemap.xml",)))
    assert [url for url, *_ in named] == [root[0]]
    assert not maps.found_none(claimed(root), answered(root[0], 404))
    maps.entries(claimed(root), answered(root[0], 200, b"<html>Not found</html>"), None, {})
    assert errors == {"sitemap_invalid": 1} and maps.report == {"read": 1, "invalid": 1, "urls": 0}
    page = FrontierURL(root[0], 0, 0, 1, None)  # /sitemap.xml as a seed or a link: a page
    fresh = Sitemaps(SCOPE, ["http://h.test/"], Counter())
    fresh.roots()
    assert not fresh.found_none(page, answered(root[0], 404))


# -- the reader ----------------------------------------------------------------


def test_read_sitemap_bounds() -> None:
    big = urlset([f"http://h.test/p/{i}" for i in range(sitemaps.MAX_URLS + 1)])
    read = read_sitemap(big)
    assert len(read.entries) == sitemaps.MAX_URLS and read.cut == f"more than {sitemaps.MAX_URLS} entries"
    assert read_sitemap(gzip.compress(big)).entries == read.entries


def test_read_sitemap_size_cap_also_on_gzip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sitemaps, "MAX_BYTES", 1000)
    body = urlset([f"http://h.test/p/{i}" for i in range(100)])
    for data in (body, gzip.compress(body)):
        read = read_sitemap(data)
        assert read.cut == "larger than 1000 bytes" and not read.error and 0 < len(read.entries) < 100


def test_read_sitemap_kinds_and_errors() -> None:
    assert read_sitemap(sitemap_index(["/a.xml"])).kind == "sitemapindex"
    no_namespace = read_sitemap(b"<urlset><url><loc> http://h.test/a </loc><lastmod>2020</lastmod></url></urlset>")
    assert no_namespace.entries == [("http://h.test/a", "2020")]
    assert read_sitemap(b"http://h.test/a\n\nhttp://h.test/b\n").entries == [("http://h.test/a", None), ("http://h.test/b", None)]
    assert read_sitemap(b"<html><a href=x>x</a></html>").error == "not a sitemap: its root element is <html>"
    assert read_sitemap(b"\x1f\x8b not gzip").error.startswith("bad gzip")
    assert read_sitemap(b"").error == "empty"


def test_read_sitemap_expands_no_entity() -> None:
    lol = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
    bomb = f'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY l0 "lol">{lol}]><urlset><url><loc>http://h.test/&l9;</loc></url></urlset>'
    read = read_sitemap(bomb.encode())
    assert all(len(loc) < 100 for loc, _ in read.entries)
    external = b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY e SYSTEM "file:///etc/passwd">]><urlset><url><loc>http://h.test/&e;</loc></url></urlset>'
    assert read_sitemap(external).entries == [("http://h.test/", None)]


def test_read_text_sitemap_utf8_bom_and_lines_that_are_no_urls() -> None:
    read = read_sitemap(b"\xef\xbb\xbfhttp://h.test/a\r\nnot a URL\nHTTPS://h.test/b\n")
    assert read.entries == [("http://h.test/a", None), ("HTTPS://h.test/b", None)]
    soft_404 = read_sitemap(b"Not found\n")  # would be http://host/Not%20found
    assert soft_404.entries == [] and soft_404.error.startswith("not a sitemap")


def test_read_sitemap_with_bare_ampersands() -> None:
    body = b"<urlset><url><loc>http://h.test/a?x=1&y=2</loc></url><url><loc>http://h.test/b?&amp;z&#38;</loc></url></urlset>"
    assert read_sitemap(body).entries == [("http://h.test/a?x=1&y=2", None), ("http://h.test/b?&z&", None)]
    cdata = b"<urlset><url><loc><![CDATA[http://h.test/a?x=1&y=2]]></loc></url></urlset>"
    assert read_sitemap(cdata).entries == [("http://h.test/a?x=1&y=2", None)]  # well-formed: read as it is


def test_read_sitemap_keeps_what_a_broken_off_gzip_held() -> None:
    packed = gzip.compress(urlset([f"http://h.test/p/{i}" for i in range(1000)]))
    read = read_sitemap(packed[: len(packed) // 2])
    assert 100 < len(read.entries) < 1000 and read.error == "bad gzip: the stream breaks off"
    assert len(read_sitemap(packed + packed).entries) == 1000  # two members, one document: the rest is malformed


def test_read_sitemap_gzip_bomb_inflates_no_further_than_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sitemaps, "MAX_BYTES", 1 << 20)
    bomb = gzip.compress(b"<urlset>" + b" " * (64 << 20))  # 64 MB of spaces, 64 KB packed
    read = read_sitemap(bomb)
    assert read.cut == f"larger than {1 << 20} bytes" and not read.entries


def test_read_sitemap_inflates_members_that_span_many_chunks_and_no_more_members_than_the_cap() -> None:
    """Members read a chunk at a time are whole (the first here is several chunks packed); past
    MAX_GZIP_MEMBERS the sitemap is cut.  Without the cap, every member of a body of many empty
    ones copied the rest of the body: 4 MiB took 8 s."""
    lines = [f"http://h.test/{hashlib.sha256(str(i).encode()).hexdigest()}\n".encode() for i in range(6000)]
    first = gzip.compress(b"".join(lines))
    assert len(first) > 3 * 64 * 1024
    read = read_sitemap(first + gzip.compress(b"http://h.test/last\n"))
    assert len(read.entries) == 6001 and read.entries[-1] == ("http://h.test/last", None) and not read.cut
    many = b"".join(gzip.compress(f"http://h.test/p/{i}\n".encode()) for i in range(sitemaps.MAX_GZIP_MEMBERS + 1))
    read = read_sitemap(many)
    assert read.cut == f"more than {sitemaps.MAX_GZIP_MEMBERS} gzip members" and not read.error
    assert read.entries == [(f"http://h.test/p/{i}", None) for i in range(sitemaps.MAX_GZIP_MEMBERS)]


def test_read_sitemap_reads_no_more_elements_than_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Elements that are no entries count too: 50 MB of ``<a/>`` took 19 s, entries or none."""
    monkeypatch.setattr(sitemaps, "MAX_ELEMENTS", 1000)
    read = read_sitemap(b"<urlset><url><loc>http://h.test/a</loc></url>" + b"<a/>" * 2000 + b"</urlset>")
    assert read.cut == "more than 1000 elements" and read.entries == [("http://h.test/a", None)]
    assert not read_sitemap(b"<urlset>" + b"<a/>" * 999 + b"</urlset>").cut  # 1,000 elements with the root


def test_read_sitemap_drops_the_children_of_an_entry_as_it_reads_them() -> None:
    """One ``<url>`` holding 900,000 elements, read in a process of its own (whose peak resident
    memory, VmHWM, is the reader's: ru_maxrss would start at this one's): they were all kept until
    ``</url>``, 100 MB more; the lastmod after them is still read."""
    script = (
        "from niofetcher.crawl.sitemaps import read_sitemap\n"
        "def peak():\n"
        "    with open('/proc/self/status') as status:\n"
        "        return next(int(line.split()[1]) for line in status if line.startswith('VmHWM:'))\n"
        "body = b'<urlset><url><loc>http://h.test/x</loc>' + b'<a/>' * 900_000"
        " + b'<lastmod>2020</lastmod></url></urlset>'\n"
        "before = peak()\n"
        "read = read_sitemap(body)\n"
        "print(read.entries, read.cut, (peak() - before) // 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60).stdout
    entries, cut, grown = out.rsplit(" ", 2)
    assert entries == "[('http://h.test/x', '2020')]" and cut == "" and int(grown) < 40, out

"""A sitemap ``<lastmod>`` later than a URL's last visit makes it due at once (issue 27, item 2):
real crawls of a loopback site (test_revisits.KeptSite) that publishes sitemaps whose dates a test
moves.  What the server was asked for is the proof.

- run 1 crawls the pages with a long revisit interval (a day); a sitemap read in a later run that
  dates one page after that visit has it fetched in that run, and only it: the pages it dates
  before the visit, in the future or not at all are not due and are not fetched;
- the same on PostgreSQL;
- the dates read: every form of a W3C datetime, nothing else, nothing in the future;
- the negative controls: without a revisit policy the dated page stays done, and a run after that
  fetches nothing;
- sitemap files come round under the policy like pages (a robots.txt ``Sitemap:`` index, the
  sitemaps it lists, the ``/sitemap.xml`` probe): an unchanged one answers 304 and re-adds nothing,
  a changed one wakes the pages it dates anew, and a changed index read back in a later run is
  followed as the root it is.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from test_crawler_sitemaps import SCOPE, fetched
from test_revisits import POLICY, KeptSite, later, links, rows, run

from niofetcher.crawl import CrawlConfig, CrawledPage, Crawler
from niofetcher.crawl.frontier import FrontierURL
from niofetcher.crawl.frontier.service import lastmod_time, modified_times
from niofetcher.crawl.schedule import RevisitPolicy
from niofetcher.crawl.sitemaps import SITEMAP_PRIORITY, Sitemaps
from niofetcher.testing import pages

pytest_plugins = ["pg_cluster"]
pytestmark = pytest.mark.timeout(60)

# Every page fetched in run 1 is due again in a day: nothing of it is due in the runs of a test.
DAY = RevisitPolicy(interval=86400.0, min_interval=3600.0, max_interval=30 * 86400.0)
PAGES = ("/a", "/b", "/c")


def now_w3c() -> str:
    """Now as a W3C datetime, to the microsecond: later than any fetch before it."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def urlset(**dated: str | None) -> str:
    """A sitemap of the pages named (``a=...`` for /a), each with its <lastmod> when not None."""
    entries = "".join(
        f"<url><loc>/{name}</loc>{'' if lastmod is None else f'<lastmod>{lastmod}</lastmod>'}</url>"
        for name, lastmod in dated.items())
    return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'


def index(*paths: str) -> str:
    entries = "".join(f"<sitemap><loc>{path}</loc></sitemap>" for path in paths)
    return f'<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</sitemapindex>'


def site_of() -> KeptSite:
    """/ links to /a, /b and /c; no sitemap yet."""
    return KeptSite(pages={"/": links(*PAGES), **{path: links("/") for path in PAGES}})


def asked(site: KeptSite, since: int) -> list[str]:
    return sorted(request.path for request in site.served(since))


def visits(db: Path) -> dict[str, int]:
    return {path: row[3] for path, row in rows(db).items() if path in ("/", *PAGES)}


def test_a_sitemap_dating_a_page_after_its_visit_has_it_fetched_in_that_run_and_only_it(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    with site_of().running() as site:
        first, _ = run(site, db, DAY)
        assert first.counts["done"] == 4 and asked(site, 0) == ["/", *PAGES]
        # The site publishes a sitemap after run 1: /a changed since, /b long before, /c says a
        # date to come (no evidence), / has none.
        changed = now_w3c()
        site.pages["/sitemap.xml"] = urlset(a=changed, b="2020-01-01", c="2999-01-01T00:00:00Z", **{"": None})
        mark = len(site.requests)
        second, seen = run(site, db, DAY, sitemaps=True)
        assert asked(site, mark) == ["/a", "/sitemap.xml"]
        assert second.counts == {"waiting": 0, "processing": 0, "done": 5, "error": 0}
        (page,) = [page for page in seen if page.url.endswith("/a")]
        assert page.result.status == 304 and page.lastmod == changed  # a conditional GET, as any revisit
        assert visits(db) == {"/": 1, "/a": 2, "/b": 1, "/c": 1}
        # Fetched since its date: another run does not fetch it again (nothing is due).
        mark = len(site.requests)
        third, _ = run(site, db, DAY, sitemaps=True)
        assert asked(site, mark) == [] and third.pages == 0


def test_without_a_revisit_policy_a_sitemap_date_wakes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    with site_of().running() as site:
        run(site, db, None)
        site.pages["/sitemap.xml"] = urlset(a=now_w3c())
        mark = len(site.requests)
        second, _ = run(site, db, None, sitemaps=True)
        assert asked(site, mark) == ["/sitemap.xml"]  # new, so fetched; /a stays done
        assert second.counts["done"] == 5 and visits(db) == {"/": 0, "/a": 0, "/b": 0, "/c": 0}
        assert rows(db)["/a"][:2] == ("done", 200)
        mark = len(site.requests)
        third, _ = run(site, db, None, sitemaps=True)
        assert asked(site, mark) == [] and third.pages == 0


def test_sitemaps_come_round_under_the_policy_and_a_changed_one_wakes_what_it_dates(tmp_path: Path) -> None:
    """The pages are kept for a day (run 1); the sitemaps, found in run 2, under a policy of a tenth
    of a second.  Each later run fetches every sitemap file again with a conditional GET -- the
    /sitemap.xml index and the sitemap it lists -- and of the pages only those a changed sitemap
    dates after their visit."""
    db = tmp_path / "crawl.db"
    with site_of().running() as site:
        run(site, db, DAY)
        site.pages.update({"/sitemap.xml": index("/maps/pages.xml"),
                           "/maps/pages.xml": urlset(a="2020-01-01", b="2020-01-01", c=None)})
        mark = len(site.requests)
        second, _ = run(site, db, POLICY, sitemaps=True)
        assert asked(site, mark) == ["/maps/pages.xml", "/sitemap.xml"]  # the pages, dated before their visit: not
        assert second.sitemaps == {"read": 2, "urls": 3}
        site.change("/maps/pages.xml", urlset(a="2020-01-01", b=now_w3c(), c=None))
        later()
        mark = len(site.requests)
        third, _ = run(site, db, POLICY, sitemaps=True)
        statuses = {request.path: request.status for request in site.served(mark)}
        assert statuses == {"/sitemap.xml": 304, "/maps/pages.xml": 200, "/b": 304}
        assert third.sitemaps == {"read": 1, "urls": 3}  # the unchanged index re-adds nothing
        assert visits(db) == {"/": 1, "/a": 1, "/b": 2, "/c": 1}
        with contextlib.closing(sqlite3.connect(db)) as conn:  # every sitemap file kept for its next visit
            assert conn.execute("SELECT COUNT(*) FROM urls WHERE priority = ? AND next_due IS NULL",
                                (SITEMAP_PRIORITY,)).fetchone() == (0,)


def test_a_changed_index_that_robots_txt_named_is_followed_when_it_comes_round(tmp_path: Path) -> None:
    """Run 2 reads robots.txt back from the frontier (fetched within the day), so it does not know
    who named the index it revisits: the frontier's row does (its parent is robots.txt), and the
    index is followed as the root it is -- the sitemap it lists now too, and the pages of that one.
    The /sitemap.xml probe (none there) comes round as well."""
    db = tmp_path / "crawl.db"
    site = site_of()
    site.pages.update({"/robots.txt": "User-agent: *\nAllow: /\nSitemap: /maps/index.xml\n",
                       "/maps/index.xml": index("/maps/pages.xml"), "/maps/pages.xml": urlset(a="2020-01-01"),
                       "/d": links("/")})
    with site.running():
        first, _ = run(site, db, POLICY, sitemaps=True)
        assert first.sitemaps == {"read": 2, "urls": 1, "missing": 1}
        site.change("/maps/index.xml", index("/maps/pages.xml", "/maps/more.xml"))
        site.pages["/maps/more.xml"] = urlset(d=None)
        later()
        mark = len(site.requests)
        second, _ = run(site, db, POLICY, sitemaps=True)
        statuses = {request.path: request.status for request in site.served(mark)}
        assert "/robots.txt" not in {request.path for request in site.requests[mark:]}
        assert statuses == {"/maps/index.xml": 200, "/maps/pages.xml": 304, "/maps/more.xml": 200, "/d": 200,
                            "/sitemap.xml": 404, "/": 304, **dict.fromkeys(PAGES, 304)}
        assert second.sitemaps == {"read": 2, "urls": 1, "missing": 1}


def test_on_postgresql_a_sitemap_date_has_the_page_fetched_in_that_run(postgres_dsn: str) -> None:
    options: dict[str, Any] = {"frontier": postgres_dsn, "crawl_name": f"lastmod_{int(time.time() * 1000)}",
                               "parse_mode": "thread", "revisit": DAY}
    with site_of().running() as site:
        Crawler(CrawlConfig(seeds=[site.base_url], **options)).run()
        site.pages["/sitemap.xml"] = urlset(a=now_w3c(), b="2020-01-01")
        mark = len(site.requests)
        seen: list[CrawledPage] = []
        second = Crawler(CrawlConfig(seeds=[site.base_url], sitemaps=True, **options), on_page=seen.append).run()
        assert asked(site, mark) == ["/a", "/sitemap.xml"]
        assert second.counts == {"waiting": 0, "processing": 0, "done": 5, "error": 0}
        assert [page.result.status for page in seen if page.url.endswith("/a")] == [304]


@pytest.mark.parametrize(("lastmod", "iso"), [
    ("2026", "2026-01-01T00:00:00+00:00"),
    ("2026-12", "2026-12-01T00:00:00+00:00"),
    ("2026-12-03", "2026-12-03T00:00:00+00:00"),  # a date alone: midnight UTC
    ("2026-12-03T10:20Z", "2026-12-03T10:20:00+00:00"),
    ("2026-12-03T10:20:30+01:00", "2026-12-03T09:20:30+00:00"),
    (" 2026-12-03T10:20:30-05:30\n", "2026-12-03T15:50:30+00:00"),
    ("2026-12-03T10:20:30.25Z", "2026-12-03T10:20:30.250000+00:00"),
])
def test_every_form_of_a_w3c_datetime_is_read(lastmod: str, iso: str) -> None:
    assert lastmod_time(lastmod) == datetime.fromisoformat(iso).timestamp()


@pytest.mark.parametrize("lastmod", [
    "", "yesterday", "2026-13-01", "2026-12-32", "2026-12-03T10:20:30",  # a time needs its zone
    "03/12/2026", "2026-12-03 10:20:30Z", "1733220000",
])
def test_what_is_no_w3c_datetime_is_ignored(lastmod: str) -> None:
    assert lastmod_time(lastmod) is None


def test_only_dates_up_to_now_are_evidence_against_fetches_before_the_due_period() -> None:
    now = datetime(2026, 12, 3, 12, tzinfo=timezone.utc).timestamp()
    dated = {"http://a.test/1": "2026-12-03T12:00:00Z", "http://a.test/2": "2026-12-03T12:00:01Z",
             "http://a.test/3": "2026-12-04", "http://a.test/4": "soon", "http://a.test/5": "2026-12-03"}
    assert modified_times(dated, now, now) == {"http://a.test/1": now, "http://a.test/5": now - 12 * 3600}
    # A period that began at 6:00: a URL fetched since is not due again by a later date.
    assert modified_times(dated, now, now - 6 * 3600) == {"http://a.test/1": now - 6 * 3600,
                                                          "http://a.test/5": now - 12 * 3600}


def test_a_sitemap_this_run_did_not_add_is_placed_by_its_parent() -> None:
    """What the crawler does with a sitemap that comes round in a run that did not add it: one that
    robots.txt named is a root (an index is followed) that may list what robots.txt's host has; one
    an index listed is a level down (an index it is may list sitemaps, one those list may not)."""
    maps = Sitemaps(SCOPE, ["http://h.test/"], Counter())
    named = FrontierURL("http://cdn.test/h/map.xml", 0, SITEMAP_PRIORITY, 1, "http://h.test/robots.txt")
    listed = ["http://h.test/a", "http://cdn.test/h/b", "http://cdn.test/other/c", "http://x.test/d"]
    found = maps.entries(named, fetched(named.url, pages.urlset(listed)), None, {})
    assert [url for url, *_ in found] == ["http://h.test/a", "http://cdn.test/h/b"]
    root = FrontierURL("http://h.test/maps/index.xml", 0, SITEMAP_PRIORITY, 1, "http://h.test/robots.txt")
    [child] = maps.entries(root, fetched(root.url, pages.sitemap_index(["http://h.test/maps/1.xml"])), None, {})
    assert child == ("http://h.test/maps/1.xml", 0, root.url, SITEMAP_PRIORITY)
    after = Sitemaps(SCOPE, ["http://h.test/"], Counter())  # a run after: the child comes round alone
    nested = FrontierURL(child[0], 0, SITEMAP_PRIORITY, 1, root.url)
    [grandchild] = after.entries(nested, fetched(nested.url, pages.sitemap_index(["http://h.test/maps/2.xml"])),
                                 None, {})
    deepest = FrontierURL(grandchild[0], 0, SITEMAP_PRIORITY, 1, nested.url)
    assert after.entries(deepest, fetched(deepest.url, pages.sitemap_index(["http://h.test/maps/3.xml"])),
                         None, {}) == []
    assert after.report["too_deep"] == 1 and maps.report["too_deep"] == 0

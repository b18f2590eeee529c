"""One record schema for ``fetch --out`` and ``crawl --out`` (issue 14, item 9; docs/cli.md "Records").

- A fetch and a crawl of the same pages give records with the same keys, in
  the same order, and the same values where both know them; the docs' field
  table is those keys.
- A 404 has status 404 and error null in both, and the crawl's summary shows
  it as an ``HTTP 404`` row, not an ``error:`` one.
- ``sha256`` is the SHA-256 of the body the server served, ``bytes`` its
  length; ``fetched_at`` falls within the run; ``title`` is the page's
  ``<title>``; ``--links`` lists the links, as many as ``links`` counts.
- Redirects are ``{"status", "url"}`` objects; a result without a response
  has nulls where a response would have said something.

The commands run in a subprocess against a TestSite, as a user runs them.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from rawserver import get_unused_port
from test_cli_crawl import niofetcher, served_body, summary_rows

from niofetcher.cli.progress import CrawlRun, print_summary
from niofetcher.cli.records import record
from niofetcher.crawl import CrawlSummary
from niofetcher.models import FetchResult, URLBean
from niofetcher.testing import TestSite

ROOT = Path(__file__).resolve().parent.parent


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """URL -> its record, each URL once."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    by_url = {str(r["url"]): r for r in records}
    assert len(by_url) == len(records)
    return by_url


def documented_fields() -> list[str]:
    """The field column of the table under ``## Records`` in docs/cli.md, in its order."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("\n## Records\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)


def page_title(body: bytes) -> str:
    match = re.search(rb"<title>(.*?)</title>", body, re.DOTALL)
    assert match is not None
    return " ".join(html.unescape(match[1].decode("utf-8")).split())


@pytest.mark.timeout(90)
def test_fetch_and_crawl_of_the_same_pages_write_the_same_record(tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=4, links_per_page=3, max_seconds=60) as site:
        seed, missing = site.base_urls[0], site.base_urls[0] + "missing"
        started = time.time()
        crawled = niofetcher("crawl", seed, missing, "--db", str(tmp_path / "c.sqlite"), "--out",
                             str(tmp_path / "crawl.jsonl"), "--links", "--parse-mode", "thread", "--progress", "none")
        crawl_ended = time.time()
        crawl_records = read_records(tmp_path / "crawl.jsonl")
        fetched = niofetcher("fetch", *crawl_records, "--out", str(tmp_path / "fetch.jsonl"), "--links")
        ended = time.time()
        bodies = {url: served_body(url) for url in crawl_records}
    assert (crawled.returncode, fetched.returncode) == (0, 0), crawled.stderr + fetched.stderr
    fetch_records = read_records(tmp_path / "fetch.jsonl")
    assert set(fetch_records) == set(crawl_records) and len(crawl_records) > 2

    for url, body in bodies.items():
        crawl, fetch = crawl_records[url], fetch_records[url]
        assert list(crawl) == list(fetch) == documented_fields(), url
        assert started <= crawl["fetched_at"] <= crawl_ended <= fetch["fetched_at"] <= ended
        same = ("url", "final_url", "status", "reason", "content_type", "bytes", "sha256", "redirects", "error",
                "error_detail", "title", "links", "link_urls")
        assert {k: crawl[k] for k in same} == {k: fetch[k] for k in same}, url
        # What only a crawl knows is null in a fetch record.
        assert [fetch[k] for k in ("depth", "parent", "canonical", "noindex", "lastmod", "duplicate_of",
                                   "changed")] == [None] * 7
        assert crawl["changed"] is True  # a first visit
        assert crawl["sha256"] == hashlib.sha256(body).hexdigest() and crawl["bytes"] == len(body)
        if url == missing:
            assert (crawl["status"], crawl["reason"], crawl["error"], crawl["error_detail"]) == (404, "Not Found", None,
                                                                                                  None)
            assert (crawl["title"], crawl["links"], crawl["link_urls"]) == (None, None, None)  # a 404 is not parsed
        else:
            assert (crawl["status"], crawl["error"], crawl["redirects"]) == (200, None, [])
            assert crawl["title"] == page_title(body)
            assert isinstance(crawl["link_urls"], list) and len(crawl["link_urls"]) == crawl["links"] > 0
            assert crawl["depth"] == 0 or crawl["parent"] in crawl_records

    rows = summary_rows(crawled.stdout)
    assert rows["HTTP 404"] == "1" and not [name for name in rows if name.startswith("error:")], crawled.stdout


@pytest.mark.timeout(60)
def test_without_links_fetch_parses_nothing_and_crawl_only_counts(tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=2) as site:
        url = site.base_urls[0]
        fetched = niofetcher("fetch", url, "--out", str(tmp_path / "f.jsonl"))
        crawled = niofetcher("crawl", url, "--db", str(tmp_path / "c.sqlite"), "--out", str(tmp_path / "c.jsonl"),
                             "--parse-mode", "thread", "--progress", "none")
    assert (fetched.returncode, crawled.returncode) == (0, 0), fetched.stderr + crawled.stderr
    fetch, crawl = read_records(tmp_path / "f.jsonl")[url], read_records(tmp_path / "c.jsonl")[url]
    assert (fetch["title"], fetch["links"], fetch["link_urls"]) == (None, None, None)
    assert crawl["title"] is not None and crawl["links"] and crawl["link_urls"] is None


@pytest.mark.timeout(60)
def test_fetch_records_redirects_as_status_and_url(tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=1, robots_redirects=2) as site:
        base = site.base_urls[0]
        done = niofetcher("fetch", base + "robots.txt", "--out", str(tmp_path / "f.jsonl"), "--links")
    assert done.returncode == 0, done.stderr
    r = read_records(tmp_path / "f.jsonl")[base + "robots.txt"]
    assert r["redirects"] == [{"status": 301, "url": base + "robots/0/1"}, {"status": 301, "url": base + "robots/0/2"}]
    assert (r["final_url"], r["status"]) == (base + "robots/0/2", 200)
    assert (r["title"], r["links"]) == (None, None)  # not HTML: not parsed


@pytest.mark.timeout(60)
def test_a_result_without_a_response_has_nulls_where_a_response_would_speak(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{get_unused_port()}/"
    done = niofetcher("fetch", url, "--out", str(tmp_path / "f.jsonl"), "--links")
    assert done.returncode == 0, done.stderr
    r = read_records(tmp_path / "f.jsonl")[url]
    assert r["error"] == "connect_error" and r["error_detail"]
    assert [r[k] for k in ("status", "reason", "content_type", "sha256", "title", "links", "link_urls")] == [None] * 7
    assert (r["bytes"], r["redirects"]) == (0, [])


def test_fetch_links_without_out_is_a_usage_error() -> None:
    done = niofetcher("fetch", "http://127.0.0.1:1/", "--links")
    assert done.returncode == 2 and done.stderr.startswith("niofetcher: error: --links"), done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_the_documented_fields_are_the_records_keys() -> None:
    """docs/cli.md's table is the schema: it cannot drift from what the code writes."""
    result = FetchResult(URLBean("http://a.test/"), "http://a.test/", "http://a.test/", fetched_at=1.0)
    assert list(record(result)) == documented_fields()


def test_the_summary_shows_http_statuses_apart_from_errors() -> None:
    summary = CrawlSummary(counts={"done": 5, "error": 4}, errors={"http_503": 1, "connect_error": 1, "http_404": 2},
                           pages=9, bytes=0, seconds=1.0, stopped=False)
    out = io.StringIO()
    print_summary(CrawlRun(summary, interrupted=False), file=out)
    rows = list(summary_rows(out.getvalue()).items())
    assert rows[:5] == [("done", "5"), ("error", "4"), ("HTTP 404", "2"), ("HTTP 503", "1"),
                        ("error: connect_error", "1")]

"""Keeping a crawl (issue 27, the first increment): ``CrawlConfig(revisit=RevisitPolicy(...))``.

Real crawls of a small site on 127.0.0.1 (:class:`KeptSite`, below) that sends an ETag and a
Last-Modified with each page, answers a conditional request that matches with a 304, counts every
request with its conditional headers, and can change a page between runs.  Intervals are tiny (a
tenth of a second), so that a second run a little later finds every page due; nothing is timed.

- a second run revisits every done page with a conditional GET, gets 304s, records them
  unchanged (``CrawledPage.changed``, the summary, the rows) and adds no link;
- a changed page is parsed and its new links followed; a page without validators is found
  unchanged by its digest, a redirect by where it leads;
- adaptive intervals shrink and grow within their bounds, and a fixed one stays;
- an 'error' URL comes round again after the longest interval;
- a file of the version before (8) is upgraded in place and the crawl resumes with its rows;
- the negative control: without a policy a done URL is never fetched again;
- the command line: ``--revisit`` and its bounds, a bad duration, ``"changed"`` in the records,
  the summary's rows.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_cli_crawl import crawl as cli_crawl
from test_cli_crawl import niofetcher as cli
from test_cli_crawl import summary_rows

import niofetcher
from niofetcher.crawl import CrawlConfig, CrawledPage, Crawler, CrawlSummary
from niofetcher.crawl.frontier import Frontier, schema
from niofetcher.crawl.schedule import RevisitPolicy

pytest_plugins = ["pg_cluster"]
pytestmark = pytest.mark.timeout(60)

# Tiny intervals: a run a little later than TICK after the one before finds everything due.
TICK = 0.15
POLICY = RevisitPolicy(interval=0.05, min_interval=0.01, max_interval=0.1)


@dataclass
class Request:
    path: str
    if_none_match: str | None
    if_modified_since: str | None
    status: int
    at: float = field(default_factory=time.time)  # when it was answered, by the wall clock


@dataclass
class KeptSite:
    """A loopback site whose pages change only when a test says so.

    Each page has a version: its ETag is ``"<path>-<version>"`` and its Last-Modified moves with it;
    a request whose If-None-Match names the current ETag, or (without one) whose If-Modified-Since
    is the current Last-Modified, gets a 304.  ``plain`` pages send neither header (only a digest
    can tell they did not change); ``gone`` pages answer 404, ``moved`` ones 301.
    """

    pages: dict[str, str] = field(default_factory=dict)  # path -> HTML
    plain: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    moved: dict[str, str] = field(default_factory=dict)  # path -> where a 301 sends it
    versions: dict[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    base_url: str = ""

    def change(self, path: str, html: str) -> None:
        self.pages[path] = html
        self.versions[path] = self.versions.get(path, 1) + 1

    def etag(self, path: str) -> str:
        return f'"{path.strip("/") or "root"}-{self.versions.get(path, 1)}"'

    def last_modified(self, path: str) -> str:
        return f"Tue, 0{self.versions.get(path, 1)} Dec 2026 00:00:00 GMT"

    def served(self, since: int = 0) -> list[Request]:
        """The page requests since the ``since``-th (robots.txt left out)."""
        return [request for request in self.requests[since:] if request.path != "/robots.txt"]

    @contextlib.contextmanager
    def running(self) -> Iterator[KeptSite]:
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path = self.path
                inm, ims = self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")
                headers: dict[str, str] = {}
                if path in site.moved:
                    status, body, headers = 301, b"", {"Location": site.moved[path]}
                elif path not in site.pages or path in site.gone:
                    status, body = 404, b"not here"
                else:
                    validators = path not in site.plain
                    if validators:
                        headers = {"ETag": site.etag(path), "Last-Modified": site.last_modified(path)}
                    matched = validators and (inm == site.etag(path) if inm is not None
                                              else ims == site.last_modified(path))
                    status, body = (304, b"") if matched else (200, site.pages[path].encode())
                    headers["Content-Type"] = "text/html; charset=utf-8"
                site.requests.append(Request(path, inm, ims, status))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if status != 304:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if status != 304:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{server.server_address[1]}/"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


def links(*paths: str) -> str:
    return "<html><head><title>t</title></head><body>" + "".join(
        f'<a href="{path}">{path}</a>' for path in paths) + "</body></html>"


def site_of(**extra: str) -> KeptSite:
    """/ links to /a and /b; /a and /b link back to /."""
    return KeptSite(pages={"/": links("/a", "/b"), "/a": links("/"), "/b": links("/"), **extra})


def run(site: KeptSite, db: Path, policy: RevisitPolicy | None = POLICY,
        **options: Any) -> tuple[CrawlSummary, list[CrawledPage]]:
    seen: list[CrawledPage] = []
    config = CrawlConfig(seeds=[site.base_url], db_path=str(db), parse_mode="thread", revisit=policy, **options)
    return Crawler(config, on_page=seen.append).run(), seen


def rows(db: Path) -> dict[str, tuple[Any, ...]]:
    """path -> (state, status, etag, visits, changes, interval) as the file keeps them."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        found = conn.execute("SELECT url, state, status, etag, visits, changes, next_due - fetched_at FROM urls")
        return {"/" + url.split("/", 3)[3]: tuple(row) for url, *row in found}


def interval(db: Path, path: str) -> float:
    value = rows(db)[path][5]
    assert value is not None
    return float(value)


def later() -> None:
    """Past every interval of POLICY: everything done is due."""
    time.sleep(TICK)


def test_a_second_run_revisits_with_conditional_gets_and_records_304s_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    with site_of().running() as site:
        first, seen = run(site, db)
        assert first.counts["done"] == 3 and first.unchanged == 0 and first.errors == {}
        assert all(page.changed for page in seen)
        assert [(r.if_none_match, r.if_modified_since) for r in site.served()] == [(None, None)] * 3
        assert {path: row[3:5] for path, row in rows(db).items()} == {"/": (1, 0), "/a": (1, 0), "/b": (1, 0)}
        later()
        mark = len(site.requests)
        second, seen = run(site, db)
        revisits = site.served(mark)
        assert sorted(r.path for r in revisits) == ["/", "/a", "/b"]  # each once, nothing else
        for r in revisits:
            assert (r.if_none_match, r.if_modified_since, r.status) == (
                site.etag(r.path), site.last_modified(r.path), 304)
        assert second.unchanged == 3 and second.errors == {} and second.pages == 3
        assert second.counts == {"waiting": 0, "processing": 0, "done": 3, "error": 0}
        assert sorted((page.url, page.changed, page.links) for page in seen) == [
            (site.base_url + path, False, None) for path in ("", "a", "b")]  # not parsed
        kept = rows(db)
        assert len(kept) == 3  # no link added
        assert {path: row[:5] for path, row in kept.items()} == {
            path: ("done", 304, site.etag(path), 2, 0) for path in ("/", "/a", "/b")}
        # Unchanged: the interval grew by Nutch's rate, 0.05 * 1.2.
        assert interval(db, "/a") == pytest.approx(0.06, abs=1e-5)


def test_a_changed_page_is_parsed_and_its_new_links_followed(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    with site_of(**{"/new": links()}).running() as site:
        run(site, db)
        assert "/new" not in rows(db)
        site.change("/a", links("/", "/new"))
        later()
        mark = len(site.requests)
        summary, seen = run(site, db)
        statuses = {r.path: r.status for r in site.served(mark)}
        assert statuses == {"/": 304, "/b": 304, "/a": 200, "/new": 200}
        changed = {page.url.removeprefix(site.base_url.rstrip("/")): page.changed for page in seen}
        assert changed == {"/": False, "/b": False, "/a": True, "/new": True}
        assert summary.unchanged == 2 and summary.counts["done"] == 4
        kept = rows(db)
        assert kept["/a"][:5] == ("done", 200, site.etag("/a"), 2, 1)
        assert kept["/new"][3:5] == (1, 0)
        # Changed: the interval shrank by Nutch's rate, 0.05 * 0.8.
        assert interval(db, "/a") == pytest.approx(0.04, abs=1e-5)


def test_a_page_without_validators_is_found_unchanged_by_its_digest(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    site = site_of()
    site.plain = {"/", "/a", "/b"}
    with site.running():
        run(site, db)
        later()
        mark = len(site.requests)
        summary, seen = run(site, db)
        assert {(r.path, r.if_none_match, r.if_modified_since, r.status) for r in site.served(mark)} == {
            ("/", None, None, 200), ("/a", None, None, 200), ("/b", None, None, 200)}
        assert summary.unchanged == 3 and all(not page.changed and page.links is None for page in seen)
        assert {row[4] for row in rows(db).values()} == {0}  # no change counted
        site.change("/b", links("/", "/a"))
        later()
        summary, seen = run(site, db)
        assert summary.unchanged == 2 and [page.url for page in seen if page.changed] == [site.base_url + "b"]


def test_a_redirect_to_the_same_place_is_unchanged_and_one_elsewhere_is_followed(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    site = site_of(**{"/": links("/old"), "/c": links()})
    site.moved = {"/old": "/b"}
    with site.running():
        run(site, db)
        later()
        summary, seen = run(site, db)
        assert summary.unchanged == 3 and not any(page.changed for page in seen)  # /, /old and /b
        site.moved["/old"] = "/c"
        later()
        mark = len(site.requests)
        summary, seen = run(site, db)
        assert {r.path: r.status for r in site.served(mark)} == {"/": 304, "/old": 301, "/b": 304, "/c": 200}
        assert sorted(page.url for page in seen if page.changed) == [site.base_url + "c", site.base_url + "old"]
        assert rows(db)["/old"][4] == 1  # one change


def test_adaptive_intervals_move_within_their_bounds_and_a_fixed_one_stays(tmp_path: Path) -> None:
    policy = RevisitPolicy(interval=0.05, min_interval=0.03, max_interval=0.08)
    with site_of().running() as site:
        grown, shrunk = [], []
        run(site, tmp_path / "adaptive.db", policy)
        for turn in range(4):
            later()
            site.change("/a", links("/", f"/a?{turn}"))  # /a changes every time, / and /b never
            site.pages[f"/a?{turn}"] = links()
            run(site, tmp_path / "adaptive.db", policy)
            grown.append(interval(tmp_path / "adaptive.db", "/b"))
            shrunk.append(interval(tmp_path / "adaptive.db", "/a"))
        assert grown == pytest.approx([0.06, 0.072, 0.08, 0.08], abs=1e-5)  # x1.2 up to max_interval
        assert shrunk == pytest.approx([0.04, 0.032, 0.03, 0.03], abs=1e-5)  # x0.8 down to min_interval
        fixed = RevisitPolicy(interval=0.05, min_interval=0.03, max_interval=0.08, adaptive=False)
        run(site, tmp_path / "fixed.db", fixed)
        for _ in range(2):
            later()
            site.change("/a", links("/"))
            run(site, tmp_path / "fixed.db", fixed)
            assert interval(tmp_path / "fixed.db", "/a") == pytest.approx(0.05, abs=1e-5)
            assert interval(tmp_path / "fixed.db", "/b") == pytest.approx(0.05, abs=1e-5)


def test_an_error_url_comes_round_again_after_the_longest_interval(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    site = site_of(**{"/a": links("/", "/gone")})
    with site.running():
        summary, _ = run(site, db)
        assert summary.counts["error"] == 1 and rows(db)["/gone"][:2] == ("error", 404)
        assert interval(db, "/gone") == pytest.approx(POLICY.max_interval, abs=1e-5)
        site.pages["/gone"] = links()  # back
        later()
        mark = len(site.requests)
        summary, _ = run(site, db)
        assert {r.path: r.status for r in site.served(mark)}["/gone"] == 200
        assert summary.counts == {"waiting": 0, "processing": 0, "done": 4, "error": 0}


def test_a_file_of_the_version_before_is_upgraded_and_the_crawl_resumes(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.db"
    with site_of().running() as site:
        with monkeypatch.context() as patch:  # a file as version 8 made it: its seed done, /a waiting
            patch.setattr(schema, "SCHEMA_VERSION", 8)
            with Frontier(db) as frontier:
                frontier.add([site.base_url, site.base_url + "a"])
            with contextlib.closing(sqlite3.connect(db)) as conn:
                conn.execute("UPDATE urls SET state = 'done', status = 200, fetched_at = 1.0 WHERE url = ?",
                             (site.base_url,))
                conn.execute("UPDATE state_counts SET n = 1 WHERE state IN ('waiting', 'done')")
                conn.commit()
                assert "next_due" not in {row[1] for row in conn.execute("PRAGMA table_info(urls)")}
        summary, _ = run(site, db)
        # The seed stays done (a row from before revisits has no next_due); /a is crawled.
        assert [r.path for r in site.served()] == ["/a"]
        assert summary.counts == {"waiting": 0, "processing": 0, "done": 2, "error": 0}
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("11",)
        kept = rows(db)
        assert kept["/"][:5] == ("done", 200, None, 0, 0) and kept["/a"][3:5] == (1, 0)


def test_without_a_policy_a_done_url_is_never_fetched_again(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    with site_of().running() as site:
        first, seen = run(site, db, policy=None)
        assert first.counts["done"] == 3 and all(page.changed for page in seen)
        later()
        mark = len(site.requests)
        second, seen = run(site, db, policy=None)
        assert site.served(mark) == [] and seen == [] and second.pages == 0
        assert (second.unchanged, second.due, second.next_due) == (0, 0, None)
        assert {row[3] for row in rows(db).values()} == {0}  # no visit kept, no next_due
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert conn.execute("SELECT COUNT(*) FROM urls WHERE next_due IS NOT NULL").fetchone() == (0,)


def test_the_summary_tells_when_the_next_url_is_due(tmp_path: Path) -> None:
    db = tmp_path / "crawl.db"
    slow = RevisitPolicy(interval=3600.0, min_interval=60.0, max_interval=7200.0)
    with site_of().running() as site:
        before = time.time()
        summary, _ = run(site, db, slow)
        assert summary.due == 0 and summary.next_due is not None
        assert before + 3600.0 <= summary.next_due <= time.time() + 3600.0
        mark = len(site.requests)
        summary, _ = run(site, db, slow)  # nothing due yet: nothing fetched
        assert site.served(mark) == [] and summary.pages == 0 and summary.due == 0
        status = cli("status", "--db", str(db))
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(summary.next_due))
        assert f"revisits: 0 due now; next due {when}" in status.stdout, status.stdout


def test_on_postgresql_a_later_worker_revisits_with_conditional_gets(postgres_dsn: str) -> None:
    """The same lifecycle on a shared frontier: another worker (a second run) wakes what is due,
    revisits it with the validators the first stored, and records the 304s unchanged."""
    with site_of().running() as site:
        options: dict[str, Any] = {"frontier": postgres_dsn, "crawl_name": f"revisit_{int(time.time() * 1000)}",
                                   "parse_mode": "thread", "revisit": POLICY}
        first = Crawler(CrawlConfig(seeds=[site.base_url], **options)).run()
        assert first.counts["done"] == 3 and first.next_due is not None
        later()
        mark = len(site.requests)
        seen: list[CrawledPage] = []
        second = Crawler(CrawlConfig(seeds=[site.base_url], **options), on_page=seen.append).run()
        assert sorted((r.path, r.if_none_match, r.status) for r in site.served(mark)) == [
            (path, site.etag(path), 304) for path in ("/", "/a", "/b")]
        assert second.unchanged == 3 and second.counts["done"] == 3 and not any(page.changed for page in seen)
        later()
        status = cli("status", "--frontier", postgres_dsn, "--crawl", options["crawl_name"])
        assert status.returncode == 0 and "revisits: 3 due now; next due none" in status.stdout, status.stderr


def test_revisit_policy_is_exported_and_checks_its_bounds() -> None:
    assert niofetcher.RevisitPolicy is RevisitPolicy
    policy = RevisitPolicy()
    assert (policy.interval, policy.min_interval, policy.max_interval, policy.adaptive) == (
        86400.0, 3600.0, 30 * 86400.0, True)
    assert policy.revisit_in(None, True) == 86400.0
    assert policy.revisit_in(86400.0, False) == pytest.approx(86400.0 * 1.2)
    assert policy.revisit_in(86400.0, True) == pytest.approx(86400.0 * 0.8)
    assert policy.revisit_in(4000.0, True) == 3600.0 and policy.revisit_in(29 * 86400.0, False) == 30 * 86400.0
    values: list[dict[str, Any]] = [{"interval": 60.0}, {"interval": 0}, {"max_interval": 60.0}, {"interval": float("inf")}]
    for bad in values:
        with pytest.raises(ValueError):
            RevisitPolicy(**bad)
    types: list[dict[str, Any]] = [{"interval": True}, {"interval": "1d"}, {"adaptive": 1}]
    for bad in types:
        with pytest.raises(TypeError):
            RevisitPolicy(**bad)
    with pytest.raises(TypeError):
        CrawlConfig(seeds=["http://example.com/"], revisit=86400.0)  # type: ignore[arg-type]


# -- the command line -------------------------------------------------------------


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_crawl_revisit_on_the_command_line(tmp_path: Path) -> None:
    db, out = tmp_path / "crawl.db", tmp_path / "pages.jsonl"
    with site_of().running() as site:
        options = ("--revisit", "0.05s", "--min-revisit", "0.01s", "--max-revisit", "0.1s", "--out", str(out))
        first = cli_crawl(site.base_url, db, *options)
        assert first.returncode == 0, first.stderr
        assert [record["changed"] for record in records(out)] == [True] * 3
        later()
        second = cli_crawl(site.base_url, db, *options)
        assert second.returncode == 0, second.stderr
        again = records(out)[3:]
        assert sorted((r["url"], r["status"], r["changed"], r["error"]) for r in again) == [
            (site.base_url + path, 304, False, None) for path in ("", "a", "b")]
        table = summary_rows(second.stdout)
        assert table["unchanged this run"] == "3" and table["done"] == "3" and "due again now" in table
        assert "error" not in " ".join(name for name in table if name.startswith("HTTP"))
        later()
        status = cli("status", "--db", str(db))
        assert "revisits: 3 due now; next due none" in status.stdout, status.stdout


@pytest.mark.parametrize(("options", "says"), [
    (("--revisit", "1x"), "not a duration"),
    (("--revisit", "0d"), "not a positive duration"),
    (("--min-revisit", "1h"), "--min-revisit goes with --revisit"),
    (("--revisit", "1h", "--min-revisit", "2h"), "between min_interval"),
])
def test_a_bad_revisit_option_is_a_one_line_usage_error(tmp_path: Path, options: tuple[str, ...], says: str) -> None:
    done = cli_crawl("http://127.0.0.1:9/", tmp_path / "crawl.db", *options)
    assert done.returncode == 2 and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "crawl.db").exists()

"""``user:pass@`` in a seed is HTTP Basic auth to that seed's origin only (issue 24, item 8).

- Every request of the crawl to the seed's origin -- its pages, the redirect it follows, and its
  robots.txt, which a site behind Basic auth would answer with a 401 (read as "allow all")
  otherwise -- carries ``Authorization: Basic ...``; the site answers 401 to any request without
  it, so a crawl that dropped the credentials gets no page.
- A link to another origin (another port of 127.0.0.1), and a redirect there, gets no
  Authorization header: counted by that server.
- The password is nowhere else: not in the frontier (the SQLite file, read byte by byte), not in
  the pages handed to ``on_page``, not in the logs; and, from the command line, not in ``--out``,
  ``--warc`` (whose request records hold the headers sent), stdout or stderr.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from rawserver import Handler, RawServer, http_response, serve_keepalive
from test_cli_crawl import crawl
from test_crawler import crawl_config

from niofetcher.crawl import CrawledPage, Crawler
from niofetcher.urls import parse_target

USER, PASSWORD = "crawler", "s3cret-pa55"
AUTHORIZATION = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
#: What must appear nowhere the crawl keeps or shows its URLs.
SECRETS = (PASSWORD.encode(), AUTHORIZATION.split()[1].encode())

_HTML = [("Content-Type", "text/html")]


def authorization(head: bytes) -> str | None:
    """The Authorization header of a request head, None without one."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            return value.strip().decode()
    return None


def path_of(head: bytes) -> str:
    return head.split(b" ", 2)[1].decode()


def behind_basic_auth(elsewhere: str) -> Handler:
    """A site that answers 401 to any request without the right credentials; with them, a home page
    linking to a page, a private page (robots.txt disallows it), a page ``elsewhere`` and a redirect
    there."""
    pages = {
        "/robots.txt": http_response(200, b"User-agent: *\nDisallow: /private\n", [("Content-Type", "text/plain")]),
        "/": http_response(200, (f'<a href="/a">a</a> <a href="/private">p</a> <a href="{elsewhere}landing">x</a> '
                                 f'<a href="/go">go</a>').encode(), _HTML),
        "/a": http_response(200, b"<p>a page</p>", _HTML),
        "/private": http_response(200, b"<p>private</p>", _HTML),
        "/go": http_response(302, b"", [("Location", f"{elsewhere}from-redirect")]),
    }
    unauthorized = http_response(401, b"who are you?", [("WWW-Authenticate", 'Basic realm="test"')])
    missing = http_response(404, b"not here", [("Content-Type", "text/plain")])

    def respond(head: bytes) -> bytes:
        if authorization(head) != AUTHORIZATION:
            return unauthorized
        return pages.get(path_of(head), missing)

    return serve_keepalive(respond)


def anyone() -> Handler:
    """Another origin: a page for every path but robots.txt (a 404)."""
    page = http_response(200, b"<p>elsewhere</p>", _HTML)
    missing = http_response(404, b"", [])
    return serve_keepalive(lambda head: missing if path_of(head) == "/robots.txt" else page)


@pytest.fixture
def sites() -> Iterator[tuple[RawServer, RawServer]]:
    """(the site behind Basic auth, another origin it links to), both on 127.0.0.1."""
    with RawServer(anyone()) as other, RawServer(behind_basic_auth(other.url("/"))) as guarded:
        yield guarded, other


def seed_with_credentials(server: RawServer) -> str:
    return server.url("/").replace("://", f"://{USER}:{PASSWORD}@", 1)


def assert_no_secret_in(data: bytes, where: str) -> None:
    for secret in SECRETS:
        assert secret not in data, f"{secret!r} in {where}"


def assert_no_secret_in_the_frontier(db: Path) -> None:
    files = [path for path in db.parent.iterdir() if path.name.startswith(db.name)]  # with its -wal, -shm
    assert db in files
    for path in files:
        assert_no_secret_in(path.read_bytes(), path.name)


def assert_credentials_went_to_their_origin_only(guarded: RawServer, other: RawServer) -> None:
    asked = [path_of(head) for head in guarded.requests]
    assert sorted(asked) == ["/", "/a", "/go", "/robots.txt"]  # not /private: robots.txt was read, with them
    assert {authorization(head) for head in guarded.requests} == {AUTHORIZATION}
    assert sorted(path_of(head) for head in other.requests) == ["/from-redirect", "/landing", "/robots.txt"]
    assert [authorization(head) for head in other.requests] == [None, None, None]


@pytest.mark.timeout(60)
def test_a_seed_with_credentials_crawls_its_site_behind_basic_auth_and_keeps_the_password_to_itself(
    tmp_path: Path, sites: tuple[RawServer, RawServer], caplog: pytest.LogCaptureFixture
) -> None:
    guarded, other = sites
    pages: list[CrawledPage] = []
    config = crawl_config(tmp_path, [seed_with_credentials(guarded)])
    crawler = Crawler(config, on_page=pages.append)
    with caplog.at_level(logging.DEBUG, "niofetcher"):
        summary = crawler.run()

    assert summary.counts == {"waiting": 0, "processing": 0, "done": 5, "error": 1}  # error: /private, disallowed
    assert {page.url for page in pages} == {
        guarded.url("/"), guarded.url("/a"), guarded.url("/go"), other.url("/landing"), other.url("/from-redirect"),
    }
    assert {page.result.status for page in pages} == {200, 302}
    assert crawler.config.seeds == [guarded.url("/")]
    assert_credentials_went_to_their_origin_only(guarded, other)
    assert_no_secret_in_the_frontier(tmp_path / "crawl.sqlite")
    assert_no_secret_in(repr([(page.url, page.result.final_url, page.parent) for page in pages]).encode(), "the pages")
    assert_no_secret_in(caplog.text.encode(), "the logs")


@pytest.mark.timeout(60)
def test_crawl_command_with_credentials_in_its_seed_keeps_them_out_of_its_records_and_output(
    tmp_path: Path, sites: tuple[RawServer, RawServer]
) -> None:
    guarded, other = sites
    db, out, warc = tmp_path / "crawl.sqlite", tmp_path / "pages.jsonl", tmp_path / "crawl.warc"
    done = crawl(seed_with_credentials(guarded), db, "--out", str(out), "--warc", str(warc), "--parse-mode", "thread")
    assert done.returncode == 0, done.stdout + done.stderr
    assert_credentials_went_to_their_origin_only(guarded, other)
    assert_no_secret_in_the_frontier(db)
    assert_no_secret_in(out.read_bytes(), "--out")
    assert_no_secret_in(warc.read_bytes(), "--warc")  # its request records included (uncompressed: .warc)
    assert out.read_text().count("\n") == 5
    assert_no_secret_in((done.stdout + done.stderr).encode(), "stdout and stderr")


@pytest.mark.timeout(10)
def test_seeds_of_one_origin_with_different_credentials_use_the_first_and_say_so_without_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seeds = [f"http://{USER}:{PASSWORD}@127.0.0.1:9/a", "http://other:0ther-pa55@127.0.0.1:9/b", "http://127.0.0.1:9/c"]
    with caplog.at_level(logging.WARNING, "niofetcher"):
        crawler = Crawler(crawl_config(tmp_path, seeds))
    assert crawler.config.seeds == ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b", "http://127.0.0.1:9/c"]
    assert "different credentials" in caplog.text and "http://127.0.0.1:9" in caplog.text
    assert PASSWORD not in caplog.text and "0ther-pa55" not in caplog.text
    origin = parse_target(seeds[2]).origin
    assert crawler._headers(origin) == {"Authorization": AUTHORIZATION}

"""The options a crawler user expects, as the real console script takes them (issue 14, item 6; docs/cli.md).

-H/--header, --insecure and --ca-file, --max-body-size, --follow-nofollow, --retry-status,
--seeds-file (a file or standard input), --proxy and --no-proxy; ``fetch --out`` appends as
``crawl --out`` does.  Each against a TestSite (TLS with a trustme CA, a ForwardProxy).
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from test_cli_crawl import crawl, niofetcher

from niofetcher.cli.args import build_parser
from niofetcher.crawl import CrawlConfig
from niofetcher.testing import ForwardProxy, TestSite


@pytest.fixture
def header_echo() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A server that records the headers of each request it gets: (its URL, the headers seen)."""
    seen: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(dict(self.headers.items()))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(60)
def test_header_is_sent_with_every_request_and_a_later_one_of_the_same_name_wins(
    header_echo: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = header_echo
    done = niofetcher("fetch", url, url + "2", "-H", "X-Token: one", "--header", "x-token: two",
                      "-H", "Accept: text/html")
    assert done.returncode == 0, done.stderr
    assert len(seen) == 2
    for headers in seen:
        assert [v for k, v in headers.items() if k.lower() == "x-token"] == ["two"]
        assert headers["Accept"] == "text/html"


@pytest.mark.parametrize("bad", ["no colon", "Bad Name: x", ": empty name"])
def test_a_malformed_header_is_a_one_line_usage_error(bad: str) -> None:
    done = niofetcher("fetch", "http://127.0.0.1:9/", "-H", bad)
    assert done.returncode == 2
    assert done.stderr == f"niofetcher: error: --header takes 'NAME: VALUE', not {bad!r}\n"


def test_a_user_agent_that_would_break_its_header_line_is_a_one_line_usage_error() -> None:
    """It was accepted, and every URL then failed as protocol_error with exit status 0."""
    done = niofetcher("fetch", "http://127.0.0.1:9/", "--user-agent", "a\rb")
    assert done.returncode == 2
    assert done.stderr == "niofetcher: error: --user-agent must not contain CR, LF or NUL: 'a\\rb'\n"


@pytest.fixture(scope="module")
def tls_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestSite, str]]:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca_file = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with TestSite(hosts=1, pages=1, tls=context) as site:
        yield site, str(ca_file)


@pytest.mark.timeout(60)
def test_tls_is_checked_against_ca_file_and_not_at_all_with_insecure(tls_site: tuple[TestSite, str]) -> None:
    site, ca_file = tls_site
    url = site.base_urls[0]
    assert url.startswith("https://")
    refused = niofetcher("fetch", url)
    trusted = niofetcher("fetch", url, "--ca-file", ca_file, "--fail-on-error")
    insecure = niofetcher("fetch", url, "--insecure", "--fail-on-error")
    assert "tls_error" in refused.stdout and "certificate verify failed" in refused.stdout
    assert trusted.returncode == 0 and " 200 " in trusted.stdout, trusted.stdout + trusted.stderr
    assert insecure.returncode == 0 and " 200 " in insecure.stdout, insecure.stdout + insecure.stderr


def test_a_ca_file_that_is_not_there_is_a_one_line_usage_error(tmp_path: Path) -> None:
    done = niofetcher("fetch", "https://127.0.0.1:9/", "--ca-file", str(tmp_path / "none.pem"))
    assert done.returncode == 2
    assert done.stderr.startswith("niofetcher: error: --ca-file must name a readable PEM file")


@pytest.mark.timeout(60)
def test_max_body_size_makes_a_longer_body_too_large() -> None:
    with TestSite(hosts=1, pages=1, page_size=4096) as site:
        small = niofetcher("fetch", site.base_urls[0], "--max-body-size", "1K")
        large = niofetcher("fetch", site.base_urls[0], "--max-body-size", "1M")
    assert "too_large" in small.stdout, small.stdout
    assert " 200 " in large.stdout, large.stdout


@pytest.mark.timeout(60)
def test_follow_nofollow_follows_the_links_of_a_nofollow_page(tmp_path: Path) -> None:
    chain = {"pages": 4, "links_per_page": 1, "cross_host_links": False, "meta_robots": {1: "nofollow"}}
    with TestSite(**chain) as site:  # type: ignore[arg-type]
        crawl(site.base_urls[0], tmp_path / "a.sqlite", "--parse-mode", "thread")
        obeyed = dict(site.counters().paths)
        site.reset_counters()
        crawl(site.base_urls[0], tmp_path / "b.sqlite", "--parse-mode", "thread", "--follow-nofollow")
        followed = dict(site.counters().paths)
    assert "/page/1" in obeyed and "/page/2" not in obeyed
    assert followed.get("/page/3") == 1


@pytest.mark.timeout(60)
def test_retry_status_tries_that_status_again(tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=1) as site:
        missing = site.base_urls[0] + "missing"
        crawl(missing, tmp_path / "a.sqlite", "--max-attempts", "2")
        once = site.counters().paths["/missing"]
        site.reset_counters()
        crawl(missing, tmp_path / "b.sqlite", "--max-attempts", "2", "--retry-status", "404")
        twice = site.counters().paths["/missing"]
    assert (once, twice) == (1, 2)


def test_the_retry_status_default_is_the_configs() -> None:
    args = build_parser().parse_args(["crawl", "http://a.test/"])
    assert args.retry_status is None  # CrawlConfig's own default then
    help_text = build_parser().commands["crawl"].format_help()
    listed = ", ".join(str(status) for status in CrawlConfig.retry_statuses)
    assert f"default {listed})" in " ".join(help_text.split())


@pytest.mark.timeout(60)
def test_seeds_file_adds_urls_from_a_file_or_standard_input(tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=3) as site:
        base = site.base_urls[0]
        listing = tmp_path / "urls.txt"
        listing.write_text(f"# pages\n{base}page/1\n\n  {base}page/2  \n")
        fetched = niofetcher("fetch", f"{base}page/0", "--seeds-file", str(listing))
        piped = niofetcher("fetch", "--seeds-file", "-", stdin=f"{base}page/0\n")
        crawled = crawl(base, tmp_path / "c.sqlite", "--seeds-file", str(listing), "--max-depth", "0")
        crawled_paths = site.counters().paths
    assert sorted(line.split()[-1] for line in fetched.stdout.splitlines()) == [f"{base}page/{i}" for i in range(3)]
    assert piped.stdout.split()[-1] == f"{base}page/0"
    assert crawled.returncode == 0, crawled.stderr
    assert crawled_paths["/page/1"] == 2 and crawled_paths["/page/2"] == 2  # fetch once, the crawl once


@pytest.mark.timeout(60)
def test_a_seeds_file_skips_a_bom_and_reports_each_bad_line_and_goes_on(tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=4) as site:
        base = site.base_urls[0]
        listing = tmp_path / "seeds.txt"
        # A BOM, as Windows editors save UTF-8; two URLs on a line; a typo; a line that is not UTF-8.
        listing.write_bytes(
            b"\xef\xbb\xbf" + f"{base}page/0\n{base}page/1 {base}page/2\nhtp:/typo\n".encode()
            + b"\xff\xfe\n" + f"# a comment\n\n{base}page/3\n".encode()
        )
        done = niofetcher("fetch", "--seeds-file", str(listing))
        paths = site.counters().paths
    assert done.returncode == 0, done.stderr
    assert sorted(line.split()[-1] for line in done.stdout.splitlines()) == [f"{base}page/0", f"{base}page/3"]
    assert "/page/1" not in paths and "/page/2" not in paths  # never as one URL with %20 in it
    assert done.stderr.splitlines() == [
        f"niofetcher: {listing}:2: 2 URLs on one line (give one a line); line skipped",
        (f"niofetcher: {listing}:3: only absolute http:// and https:// URLs are supported, not 'htp:/typo'; "
         "line skipped"),
        f"niofetcher: {listing}:4: not UTF-8 text (invalid start byte); line skipped",
    ]


@pytest.mark.parametrize("content", ["", "# nothing but a comment\n\n", "not a url\n"])
def test_a_seeds_file_without_one_url_is_one_line_and_starts_nothing(tmp_path: Path, content: str) -> None:
    path = tmp_path / "seeds.txt"
    path.write_text(content)
    done = niofetcher("crawl", "--seeds-file", str(path), "--db", str(tmp_path / "c.sqlite"))
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "niofetcher: error: no URL given: name at least one, or give --seeds-file FILE"
    assert not (tmp_path / "c.sqlite").exists()


@pytest.mark.timeout(60)
def test_fetch_out_appends_as_crawl_out_does(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    with TestSite(hosts=1, pages=2) as site:
        niofetcher("fetch", f"{site.base_urls[0]}page/0", "--out", str(out))
        niofetcher("fetch", f"{site.base_urls[0]}page/1", "--out", str(out))
    assert [json.loads(line)["url"] for line in out.read_text().splitlines()] == [
        f"{site.base_urls[0]}page/0", f"{site.base_urls[0]}page/1"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["fetch", "crawl"])
def test_proxy_carries_the_requests_and_no_proxy_goes_direct(tmp_path: Path, command: str) -> None:
    with TestSite(hosts=1, pages=2) as site, ForwardProxy() as proxy:
        url = f"{site.base_urls[0]}page/0"
        extra = ["--db", str(tmp_path / "a.sqlite"), "--max-depth", "0", "--progress", "none"] if command == "crawl" else []
        via = niofetcher(command, url, *extra, "--proxy", f"http://127.0.0.1:{proxy.port}", "--fail-on-error")
        through = proxy.counters().requests
        extra = ["--db", str(tmp_path / "b.sqlite"), "--max-depth", "0", "--progress", "none"] if command == "crawl" else []
        direct = niofetcher(command, url, *extra, "--proxy", f"http://127.0.0.1:{proxy.port}",
                            "--no-proxy", "example.test,127.0.0.1", "--fail-on-error")
        after = proxy.counters().requests
    assert via.returncode == 0 and direct.returncode == 0, via.stderr + direct.stderr
    assert any("/page/0" in request for request in through), through
    assert after == through  # nothing more through the proxy


@pytest.mark.parametrize("option, value, message", [
    ("--proxy", "http://p.test:99999", "--proxy: "),
    ("--proxy", "socks5://p.test:1080", "--proxy: only http:// proxies"),
    ("--no-proxy", "not a host!", "--no-proxy: "),
])
def test_a_bad_proxy_value_is_a_one_line_usage_error(option: str, value: str, message: str) -> None:
    done = niofetcher("fetch", "http://127.0.0.1:9/", option, value)
    assert done.returncode == 2
    assert done.stderr.startswith("niofetcher: error: " + message) and done.stderr.count("\n") == 1, done.stderr

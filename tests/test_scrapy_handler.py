"""niofetcher.scrapy: niofetcher as Scrapy's download handler, under a real Scrapy crawl.

Two kinds of test.  The handler alone, in this process, on an asyncio event
loop (``asyncio.run``; no Twisted reactor is installed): settings in,
requests in, responses and exceptions out, against loopback servers.  And
whole crawls: a CrawlSpider in a child process (a Twisted reactor cannot be
started twice in one process), over the test site of several hosts, counted
from the servers' side: sockets per host, every page, robots.txt's 503 and
redirects, a gzip page, a page that answers 503 once, a closed port, one
host reached through a forward proxy with credentials.  The same crawl with
Scrapy's own handler is the negative control of the socket count.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import gzip
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

scrapy = pytest.importorskip("scrapy", minversion="2.15", reason="Scrapy 2.15+ not installed: pip install -e '.[scrapy]'")

from rawserver import RawServer, get_unused_port, hang, http_response, serve_keepalive
from scrapy import Request, Spider
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadCancelledError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
    NotSupported,
    UnsupportedURLSchemeError,
)
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from niofetcher import ErrorKind, FetcherConfig, FetchResult, URLBean
from niofetcher.scrapy import EXCEPTIONS, NIOFetcherDownloadHandler, fetcher_config
from niofetcher.testing import ForwardProxy, TestSite

ROOT = Path(__file__).resolve().parent.parent
HANDLERS = {scheme: "niofetcher.scrapy.NIOFetcherDownloadHandler" for scheme in ("http", "https")}
PAGE = b"<html><head><title>gzip</title></head><body><p>" + b"squeezed " * 200 + b"</p></body></html>"


# -- settings ------------------------------------------------------------------------------


def test_scrapy_settings_map_onto_the_fetcher_config() -> None:
    config = fetcher_config(Settings({
        "CONCURRENT_REQUESTS": 40, "CONCURRENT_REQUESTS_PER_DOMAIN": 5, "DOWNLOAD_TIMEOUT": 7,
        "DOWNLOAD_MAXSIZE": 12345, "USER_AGENT": "bot/1", "DOWNLOAD_VERIFY_CERTIFICATES": True,
        "NIOFETCHER_CONFIG": {"idle_timeout": 3.0, "max_connections": 50},
    }))
    assert (config.max_connections, config.max_connections_per_host) == (50, 5)  # NIOFETCHER_CONFIG wins
    assert (config.request_timeout, config.connect_timeout, config.read_timeout) == (7, 7, 7)
    assert (config.max_body_size, config.user_agent, config.verify_tls, config.idle_timeout) == (12345, "bot/1", True, 3.0)
    assert not config.follow_redirects and not config.decode_content  # Scrapy's middlewares do both


def test_scrapy_defaults_and_zeros() -> None:
    """Scrapy's defaults (it checks no certificate), and its zeros ("no limit") leave FetcherConfig's limits."""
    defaults = FetcherConfig()
    config = fetcher_config(Settings())
    assert (config.max_connections, config.max_connections_per_host, config.request_timeout) == (16, 8, 180)
    assert (config.connect_timeout, config.read_timeout) == (defaults.connect_timeout, defaults.read_timeout)
    assert not config.verify_tls
    config = fetcher_config(Settings({"DOWNLOAD_TIMEOUT": 0, "DOWNLOAD_MAXSIZE": 0, "CONCURRENT_REQUESTS": 0}))
    assert (config.request_timeout, config.max_body_size, config.max_connections) == (
        defaults.request_timeout, defaults.max_body_size, defaults.max_connections)


def test_the_fetcher_adds_no_user_agent_or_accept_of_its_own() -> None:
    """Scrapy's middlewares put them on the request; a NIOFETCHER_CONFIG header still goes out."""
    assert fetcher_config(Settings()).headers == {"User-Agent": "", "Accept": ""}
    config = fetcher_config(Settings({"NIOFETCHER_CONFIG": {"headers": {"Accept": "text/html", "X-Crawl": "1"}}}))
    assert config.headers == {"User-Agent": "", "Accept": "text/html", "X-Crawl": "1"}


@pytest.mark.parametrize("name", ["DOWNLOAD_TLS_MIN_VERSION", "DOWNLOAD_TLS_MAX_VERSION"])
def test_a_tls_version_that_is_none_is_refused_as_scrapy_refuses_it(name: str) -> None:
    with pytest.raises(ValueError, match=f"Unknown {name} value: TLSv9"):
        fetcher_config(Settings({name: "TLSv9"}))
    fetcher_config(Settings({name: "TLSv1.2"}))


@pytest.mark.parametrize(("overrides", "message"), [
    ({"follow_redirects": True}, "RedirectMiddleware"),
    ({"decode_content": True}, "HttpCompressionMiddleware"),
    ({"max_conections": 3}, "no FetcherConfig field"),
    ({"max_connections": 0}, "max_connections"),
])
def test_niofetcher_config_refuses_what_it_may_not_set(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fetcher_config(Settings({"NIOFETCHER_CONFIG": overrides}))


def test_every_error_kind_has_an_exception_that_scrapy_retries_or_means_to_drop() -> None:
    retried = tuple(cls for cls in Settings().getlist("RETRY_EXCEPTIONS") if not isinstance(cls, str)) + tuple(
        scrapy.utils.misc.load_object(path) for path in Settings().getlist("RETRY_EXCEPTIONS") if isinstance(path, str))
    assert set(EXCEPTIONS) == set(ErrorKind)
    dropped = {ErrorKind.TOO_LARGE, ErrorKind.CANCELLED}
    for kind, cls in EXCEPTIONS.items():
        assert issubclass(cls, retried) == (kind not in dropped), kind


# -- the handler in this process --------------------------------------------------------------


def _handler_run(settings: dict[str, Any], body: Any) -> Any:
    """``await body(handler)`` on a fresh event loop, both schemes' handlers made and closed as Scrapy does."""

    async def main() -> Any:
        crawler = get_crawler(Spider, {"DOWNLOAD_HANDLERS": HANDLERS, **settings})
        handlers = [NIOFetcherDownloadHandler.from_crawler(crawler) for _ in ("http", "https")]
        try:
            return await body(handlers[0])
        finally:
            for handler in handlers:
                await handler.close()

    return asyncio.run(main())


def _site_responses(head: bytes) -> bytes:
    """The loopback origin of the in-process tests: a gzip page, a 503, anything else 200 "plain"."""
    path = head.split(b" ", 2)[1]
    if path == b"/gzip":
        return http_response(200, gzip.compress(PAGE), [("Content-Type", "text/html"), ("Content-Encoding", "gzip")])
    if path == b"/busy":
        return http_response(503, b"busy", [("Content-Type", "text/plain")])
    return http_response(200, b"plain", [("Content-Type", "text/plain"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")])


@pytest.fixture
def origin() -> Iterator[RawServer]:
    with RawServer(serve_keepalive(_site_responses)) as server:
        yield server


def _niofetcher_threads() -> list[str]:
    # AsyncFetcher's shutdown helper posts its last word to the event loop and then ends: give it a moment.
    deadline = time.monotonic() + 5.0
    while True:
        alive = [t.name for t in threading.enumerate() if t.name.startswith("niofetcher")]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.01)


def test_responses_come_back_raw_for_scrapys_middlewares(origin: RawServer) -> None:
    """The gzip body as it came, Content-Encoding kept (HttpCompressionMiddleware decodes it, once); a 503 is a
    response (RetryMiddleware's); repeated headers kept; download_latency set; close() leaves no thread."""

    async def body(handler: NIOFetcherDownloadHandler) -> list[Any]:
        requests = [Request(origin.url(path), headers={"User-Agent": "mine/2"}) for path in ("/gzip", "/busy", "/x")]
        return [(request, await handler.download_request(request)) for request in requests]

    (gz_request, gz), (_, busy), (_, plain) = _handler_run({"USER_AGENT": "settings/1"}, body)
    assert gz.status == 200 and gz.headers[b"Content-Encoding"] == b"gzip" and gzip.decompress(gz.body) == PAGE
    assert busy.status == 503 and busy.body == b"busy"
    assert isinstance(plain, scrapy.http.TextResponse) and plain.headers.getlist(b"Set-Cookie") == [b"a=1", b"b=2"]
    assert 0 < gz_request.meta["download_latency"] < 10
    assert all(b"\r\nUser-Agent: mine/2\r\n" in head for head in origin.requests)  # the request's own wins
    assert not any(b"accept-encoding" in head.lower() for head in origin.requests)  # Scrapy's to send, not ours
    assert (plain.protocol, str(plain.ip_address)) == ("HTTP/1.1", "127.0.0.1")
    assert _niofetcher_threads() == []


def test_only_the_headers_scrapy_asks_for_go_out(origin: RawServer) -> None:
    """No User-Agent or Accept the request has not got (Scrapy's middlewares set those), none set to None;
    an empty POST says Content-Length: 0."""

    async def body(handler: NIOFetcherDownloadHandler) -> None:
        await handler.download_request(Request(origin.url("/x"), headers={"Cookie": None, "X-Kept": "1"}))
        await handler.download_request(Request(origin.url("/x"), method="POST"))

    _handler_run({}, body)
    get, post = (head.lower() for head in origin.requests)
    names = {line.split(b":")[0] for line in get.split(b"\r\n")[1:] if line}
    assert names == {b"host", b"x-kept"}
    assert b"\r\ncontent-length: 0\r\n" in post


def test_a_url_of_another_scheme_is_unsupported() -> None:
    async def body(handler: NIOFetcherDownloadHandler) -> None:
        with pytest.raises(UnsupportedURLSchemeError, match="unsupp"):
            await handler.download_request(Request("unsupp://example.test/"))

    _handler_run({}, body)


def test_fetch_errors_become_the_exceptions_scrapy_retries() -> None:
    closed = get_unused_port()

    async def body(handler: NIOFetcherDownloadHandler) -> list[type[Exception]]:
        raised = []
        with RawServer(hang()) as silent:
            for request in (Request(f"http://127.0.0.1:{closed}/"), Request(silent.url("/"), meta={"download_timeout": 0.3})):
                with pytest.raises(Exception) as caught:
                    await handler.download_request(request)
                raised.append(caught.type)
        return raised

    assert _handler_run({}, body) == [DownloadConnectionRefusedError, DownloadTimeoutError]


def test_a_name_that_does_not_resolve_is_cannot_resolve_host() -> None:
    def resolver(host: str, port: int) -> list[Any]:
        raise OSError(f"no such host {host}")

    async def body(handler: NIOFetcherDownloadHandler) -> None:
        with pytest.raises(CannotResolveHostError, match="dns_error"):
            await handler.download_request(Request("http://nowhere.test/"))

    _handler_run({"NIOFETCHER_CONFIG": {"resolver": resolver}}, body)


def test_a_body_cut_short_is_data_loss_or_a_flagged_response() -> None:
    handler = _bare_handler()
    cut = FetchResult(URLBean("http://a.test/"), "http://a.test/", "http://a.test/", status=200,
                      headers=[("Content-Type", "text/html")], body=b"<p>ha", error=ErrorKind.CONNECTION_CLOSED)
    with pytest.raises(scrapy.exceptions.ResponseDataLossError):
        handler.response_for(Request("http://a.test/"), cut)
    kept = handler.response_for(Request("http://a.test/", meta={"download_fail_on_dataloss": False}), cut)
    assert kept.flags == ["dataloss"] and kept.body == b"<p>ha"
    with pytest.raises(scrapy.exceptions.DownloadCancelledError):
        handler.response_for(Request("http://a.test/", meta={"download_maxsize": 3}), dataclasses.replace(cut, error=None))


def _bare_handler() -> NIOFetcherDownloadHandler:
    """A handler without a crawl, for response_for: DOWNLOAD_MAXSIZE 100, DOWNLOAD_FAIL_ON_DATALOSS on."""
    handler = NIOFetcherDownloadHandler.__new__(NIOFetcherDownloadHandler)
    handler.config = FetcherConfig(max_body_size=100)
    handler._fail_on_dataloss, handler._dataloss_warned, handler._warnsize = True, False, 0
    return handler


def test_a_body_past_the_limit_is_cancelled_in_scrapys_words(caplog: pytest.LogCaptureFixture) -> None:
    """By its Content-Length when the head says it ("Expected to receive"), else by what came."""
    handler = _bare_handler()
    url = "http://a.test/"
    announced = FetchResult(URLBean(url), url, url, status=200, headers=[("Content-Length", "500")],
                            error=ErrorKind.TOO_LARGE)
    with pytest.raises(DownloadCancelledError, match=r"Expected to receive 500 bytes which is larger than "
                                                     r"download max size \(100\)"):
        handler.response_for(Request(url), announced)
    chunked = dataclasses.replace(announced, headers=[("Transfer-Encoding", "chunked")])
    with pytest.raises(DownloadCancelledError, match=r"Received more than 100 bytes"):
        handler.response_for(Request(url), chunked)
    assert caplog.text.count("larger than download max size (100)") == 2


# -- proxies -------------------------------------------------------------------------------------


def _bean(request: Request) -> URLBean:
    handler = NIOFetcherDownloadHandler.__new__(NIOFetcherDownloadHandler)
    handler._auth_encoding = "latin-1"
    return handler.bean_for(request)


def test_proxy_credentials_leave_the_request_for_the_proxy_url() -> None:
    """HttpProxyMiddleware's Proxy-Authorization header is the proxy's: never among the origin's headers."""
    token = base64.b64encode(b"us@r:p:ss").decode()
    bean = _bean(Request("https://a.test/x", meta={"proxy": "http://127.0.0.1:3128"},
                         headers={"Proxy-Authorization": f"Basic {token}", "Accept": "text/html"}))
    assert bean.proxy == "http://us%40r:p%3Ass@127.0.0.1:3128"
    assert {name.lower() for name in bean.headers} == {"accept"}
    assert _bean(Request("http://a.test/", meta={"proxy": "127.0.0.1:3128"})).proxy == "http://127.0.0.1:3128"
    assert _bean(Request("http://a.test/", meta={"proxy": "http://u:p@p.test"})).proxy == "http://u:p@p.test:80"
    assert _bean(Request("http://a.test/", meta={"proxy": None})).proxy == ""  # Scrapy's "no proxy": direct
    assert _bean(Request("http://a.test/")).proxy is None  # the configuration's route
    alone = _bean(Request("http://a.test/", headers={"Proxy-Authorization": f"Basic {token}"}))
    assert alone.proxy is None and not alone.headers  # no proxy: the header goes nowhere


@pytest.mark.parametrize(("proxy", "authorization"), [
    ("https://127.0.0.1:3128", None), ("socks5://127.0.0.1:1080", None), ("http://127.0.0.1:3128", "Digest x=1"),
])
def test_proxies_niofetcher_cannot_speak_to_are_not_supported(proxy: str, authorization: str | None) -> None:
    headers = {"Proxy-Authorization": authorization} if authorization else {}
    with pytest.raises(NotSupported):
        _bean(Request("http://a.test/", meta={"proxy": proxy}, headers=headers))


def test_a_request_through_a_proxy_with_credentials(origin: RawServer) -> None:
    with ForwardProxy(credentials=("crawler", "s3cret")) as proxy:
        token = base64.b64encode(b"crawler:s3cret").decode()

        async def body(handler: NIOFetcherDownloadHandler) -> int:
            request = Request(origin.url("/x"), meta={"proxy": f"http://127.0.0.1:{proxy.port}"},
                              headers={"Proxy-Authorization": f"Basic {token}"})
            return int((await handler.download_request(request)).status)

        assert _handler_run({}, body) == 200
        seen = proxy.counters()
    assert seen.requests == [f"GET {origin.url('/x')}"] and seen.authorizations == [f"Basic {token}"]
    assert not any(b"proxy-authorization" in head.lower() for head in origin.requests)


# -- whole crawls ------------------------------------------------------------------------------------------

#: The child process: a CrawlSpider over the seeds, one download slot per request (so that Scrapy's
#: per-slot limit never holds its requests back and the per-host socket limit is the handler's alone),
#: one host through a proxy; one JSON line out.
CRAWL = r'''
import json, sys, threading, time
from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

job = json.loads(sys.argv[1])
items = []

def route(request, response):
    request.meta["download_slot"] = request.url  # Scrapy's slots hold nothing back
    if job["proxied"] and request.url.startswith(job["proxied"]):
        request.meta["proxy"] = job["proxy"]  # credentials in it: HttpProxyMiddleware makes the header
    return request

class Site(CrawlSpider):
    name = "site"
    allowed_domains = ["127.0.0.1"]
    start_urls = job["seeds"]
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True, process_request=route),)

    def parse_start_url(self, response, **kwargs):
        return self.parse_page(response)

    def parse_page(self, response):
        items.append({"url": response.url, "status": response.status, "class": type(response).__name__,
                      "latency": response.meta.get("download_latency"), "body": response.text[:40],
                      "encoding": response.headers.get("Content-Encoding"), "length": len(response.body),
                      "redirected": response.meta.get("redirect_urls", [])})
        return []

settings = {"LOG_LEVEL": "WARNING", "ROBOTSTXT_OBEY": True, "TELNETCONSOLE_ENABLED": False,
            "COOKIES_ENABLED": False, "HTTPERROR_ALLOW_ALL": True, "RETRY_TIMES": 2, **job["settings"]}
process = CrawlerProcess(settings)
crawler = process.create_crawler(Site)
process.crawl(crawler)
process.start()
deadline = time.monotonic() + 5
while any(t.name.startswith("niofetcher") for t in threading.enumerate()) and time.monotonic() < deadline:
    time.sleep(0.01)
stats = crawler.stats.get_stats()
print(json.dumps({"items": items, "stats": {k: v for k, v in stats.items() if isinstance(v, (int, float, str))},
                  "threads": [t.name for t in threading.enumerate() if t.name.startswith("niofetcher")]}))
'''


def _crawl(tmp_path: Path, job: dict[str, Any]) -> dict[str, Any]:
    script = tmp_path / "crawl.py"
    script.write_text(CRAWL, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), json.dumps(job)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["stderr"] = done.stderr
    return out


def _flaky_responses() -> Any:
    """The extra origin of the crawl: a gzip page, a page answering 503 once, a redirect to a page."""
    served: dict[bytes, int] = {}

    def responses(head: bytes) -> bytes:
        path = head.split(b" ", 2)[1]
        served[path] = served.get(path, 0) + 1
        if path == b"/flaky" and served[path] == 1:
            return http_response(503, b"busy", [("Content-Type", "text/plain")])
        if path == b"/moved":
            return http_response(302, b"", [("Location", "/target")])
        if path == b"/robots.txt":
            return http_response(404, b"", [("Content-Type", "text/plain")])
        return _site_responses(head)

    return serve_keepalive(responses)


PER_HOST = 3
TOTAL = 24


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One crawl through the handler, with everything the servers saw."""
    tmp_path = tmp_path_factory.mktemp("crawl")
    with (TestSite(hosts=3, pages=40, delay=0.02, robots_redirects=2, robots_unavailable=1) as site,
          RawServer(_flaky_responses()) as extra, ForwardProxy(credentials=("crawler", "s3cret")) as proxy):
        closed = get_unused_port()
        proxied = site.base_urls[2]
        job = {
            "seeds": [site.base_urls[0], extra.url("/gzip"), extra.url("/flaky"), extra.url("/moved"),
                      f"http://127.0.0.1:{closed}/"],
            "proxied": proxied, "proxy": f"http://crawler:s3cret@127.0.0.1:{proxy.port}",
            "settings": {"DOWNLOAD_HANDLERS": HANDLERS, "CONCURRENT_REQUESTS": TOTAL,
                         "CONCURRENT_REQUESTS_PER_DOMAIN": PER_HOST},
        }
        out = _crawl(tmp_path, job)
        out.update(site=site, ports=[site.counters(port) for port in site.ports], extra=extra.requests,
                   extra_base=extra.url("/"),
                   proxy=proxy.counters(), proxied=proxied, closed=closed)
        yield out


def test_no_host_saw_more_sockets_than_the_per_domain_setting(crawled: dict[str, Any]) -> None:
    peaks = [counters.max_open for counters in crawled["ports"]]
    assert max(peaks) <= PER_HOST, peaks
    assert PER_HOST in peaks  # the limit was reached: Scrapy had more than that in flight


def test_every_page_was_fetched_and_became_an_item(crawled: dict[str, Any]) -> None:
    site: TestSite = crawled["site"]
    pages = set(site.page_urls())
    urls = [item["url"] for item in crawled["items"]]
    assert pages <= set(urls)
    extras = {crawled["extra_base"] + path for path in ("gzip", "flaky", "target")}
    assert set(urls) == pages | extras
    # Each page once; each host's index twice at most (the seed: start requests skip the duplicate filter).
    assert len(urls) == len(set(urls)) + 1
    for index, counters in enumerate(crawled["ports"]):
        assert all(n == 1 for path, n in counters.paths.items() if path.startswith("/page/")), index
    assert all(item["status"] == 200 for item in crawled["items"])
    classes = {item["url"].rpartition("/")[2]: item["class"] for item in crawled["items"] if item["url"] in extras}
    assert all(item["class"] == "HtmlResponse" for item in crawled["items"] if item["url"] in pages)
    assert classes == {"gzip": "HtmlResponse", "flaky": "TextResponse", "target": "TextResponse"}


def test_redirects_and_retries_are_scrapys(crawled: dict[str, Any]) -> None:
    """robots.txt: a 503 (retried), then two redirects (followed by RedirectMiddleware); a page's 302;
    a page's 503 retried; a closed port retried RETRY_TIMES then given up."""
    for j, counters in enumerate(crawled["ports"]):
        assert counters.paths["/robots.txt"] == 2 and counters.paths[f"/robots/{j}/1"] == 1
        assert counters.paths[f"/robots/{j}/2"] == 1
    target = next(item for item in crawled["items"] if item["url"].endswith("/target"))
    assert target["redirected"] and target["redirected"][0].endswith("/moved")
    assert sum(1 for head in crawled["extra"] if head.startswith(b"GET /flaky ")) == 2
    stats = crawled["stats"]
    assert stats["retry/reason_count/503 Service Unavailable"] == 3 + 1  # each host's robots.txt, /flaky
    # The closed port's robots.txt and its index: each tried 1 + RETRY_TIMES times.
    assert stats["retry/reason_count/scrapy.exceptions.DownloadConnectionRefusedError"] == 2 * 2
    assert stats["retry/max_reached"] == 2
    assert stats["downloader/response_status_count/302"] == 1 and stats["downloader/response_status_count/301"] == 6


def test_a_gzip_page_is_decoded_once(crawled: dict[str, Any]) -> None:
    page = next(item for item in crawled["items"] if item["url"].endswith("/gzip"))
    assert page["body"] == PAGE.decode()[:40] and page["length"] == len(PAGE) and page["encoding"] is None
    assert any(head.startswith(b"GET /gzip ") and b"accept-encoding: gzip" in head.lower() for head in crawled["extra"])


def test_download_latency_is_set(crawled: dict[str, Any]) -> None:
    latencies = [item["latency"] for item in crawled["items"]]
    assert all(isinstance(latency, float) and 0 < latency < 30 for latency in latencies)
    assert max(latencies) >= 0.02  # the site's delay is in it


def test_one_host_went_through_the_proxy_with_its_credentials(crawled: dict[str, Any]) -> None:
    seen = crawled["proxy"]
    token = "Basic " + base64.b64encode(b"crawler:s3cret").decode()
    through = [line for line in seen.requests if line.startswith(f"GET {crawled['proxied']}")]
    assert len(through) == crawled["site"].pages + 1  # every page and the index, robots.txt (direct) aside
    assert len(seen.requests) == len(through) and set(seen.authorizations) == {token}
    assert seen.max_open <= PER_HOST


def test_the_crawl_left_no_thread_behind_and_logged_only_the_closed_port(crawled: dict[str, Any]) -> None:
    assert crawled["threads"] == []
    logged = [line for line in crawled["stderr"].splitlines() if " ERROR: " in line or " WARNING: " in line]
    assert logged and all(f"127.0.0.1:{crawled['closed']}" in line for line in logged), logged


#: The child process of the forced stop: four requests to a server that never answers, and two Ctrl-C
#: once it holds their four sockets: the second stops the reactor at once, and the handlers are never closed.
FORCED_STOP = r'''
import json, os, signal, sys, threading, time
from rawserver import RawServer, hang
from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess

with RawServer(hang()) as slow:
    class Stuck(Spider):
        name = "stuck"

        async def start(self):
            for i in range(4):
                yield Request(slow.url(f"/{i}"), dont_filter=True)

    def stop_when_all_wait():
        while slow.accepted < 4:
            time.sleep(0.01)
        graceful = signal.getsignal(signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # Scrapy waits for the downloads, and takes the next Ctrl-C as "force"
        while signal.getsignal(signal.SIGINT) is graceful:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    process = CrawlerProcess({"LOG_LEVEL": "ERROR", "TELNETCONSOLE_ENABLED": False, "DOWNLOAD_TIMEOUT": 60,
                              "DOWNLOAD_HANDLERS": json.loads(sys.argv[1])})
    threading.Thread(target=stop_when_all_wait, daemon=True).start()
    process.crawl(Stuck)
    process.start()
    deadline = time.monotonic() + 5
    while (slow.open_now or any(t.name.startswith("niofetcher") for t in threading.enumerate())) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(json.dumps({"threads": [t.name for t in threading.enumerate() if t.name.startswith("niofetcher")],
                      "accepted": slow.accepted, "open": slow.open_now}))
'''


@pytest.mark.timeout(60)
def test_a_forced_stop_of_the_reactor_shuts_the_fetcher_down(tmp_path: Path) -> None:
    """A second Ctrl-C ends the crawl without closing the handlers: the fetcher's threads and its
    sockets to the server lived on."""
    script = tmp_path / "forced_stop.py"
    script.write_text(FORCED_STOP, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), json.dumps(HANDLERS)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"threads": [], "accepted": 4, "open": 0}


def test_negative_control_scrapys_own_handler_opens_more_sockets(tmp_path: Path) -> None:
    """The same crawl with Scrapy's own handler: the per-domain setting bounds its slots, not its sockets,
    so the server's count can tell a handler that does not hold the limit (counted, not a claim about how
    many Scrapy opens)."""
    with TestSite(hosts=3, pages=40, delay=0.02) as site:
        job = {"seeds": [site.base_urls[0]], "proxied": None, "proxy": None,
               "settings": {"CONCURRENT_REQUESTS": TOTAL, "CONCURRENT_REQUESTS_PER_DOMAIN": PER_HOST}}
        out = _crawl(tmp_path, job)
        peaks = [site.counters(port).max_open for port in site.ports]
    assert len(out["items"]) == 3 * 41 + 1
    assert max(peaks) > PER_HOST, peaks

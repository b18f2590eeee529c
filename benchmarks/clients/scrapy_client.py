"""Scrapy crawling the test site: a CrawlSpider with one Rule(LinkExtractor(), follow=True), as Scrapy's docs show.

    python benchmarks/clients/scrapy_client.py --seed http://127.0.0.1:PORT/ --total 64 --per-host 16

Scenarios D and E of ``benchmarks/compare.py``. The spider follows every
``<a href>`` its LinkExtractor finds on 127.0.0.1 (``allowed_domains``, the
OffsiteMiddleware's check, which ignores ports), or only those matching
``--allow`` (the same regex niofetcher gets as ``--include``); robots.txt is
obeyed, as niofetcher obeys it. Every response reaching the callback is
counted by status; the page is not turned into an item (no pipeline, no feed):
the least work Scrapy can be asked to do per page.

Settings are tuned for speed, the way Scrapy's "Broad Crawls" page advises:
``CONCURRENT_REQUESTS`` = ``--total``, no download delay, no AutoThrottle, no
cookies, no telnet console, no memory-usage extension, logging at WARNING.

The test site's hosts are ports of 127.0.0.1, and Scrapy keys its download
slots by hostname (``CONCURRENT_REQUESTS_PER_IP`` by address: the same), so all
hosts would share one slot. ``--slots per-host`` (the default) puts each request
in a slot named after its ``host:port`` through the ``download_slot`` meta key,
with ``CONCURRENT_REQUESTS_PER_DOMAIN`` = ``--per-host``: the same layout as
niofetcher's. ``--slots shared`` leaves the one slot with ``--total`` requests.

``--download-handler niofetcher`` fetches through niofetcher instead of Scrapy's
own Twisted handler (``niofetcher.scrapy.NIOFetcherDownloadHandler`` for http
and https, the same settings): the "Scrapy + niofetcher handler" row of D and E.

It prints one JSON line: pages, ok (status 200), errors, the crawl's own
seconds (Scrapy's ``elapsed_time_seconds`` stat: engine start to spider
close), and a few of Scrapy's stats. CPU is measured from outside, by
``run_tree.py``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", required=True)
    parser.add_argument("--total", type=int, default=64, help="CONCURRENT_REQUESTS")
    parser.add_argument("--per-host", type=int, default=16, help="CONCURRENT_REQUESTS_PER_DOMAIN (per slot)")
    parser.add_argument("--slots", choices=("per-host", "shared"), default="per-host",
                        help="one download slot per host:port (default), or Scrapy's own: one for 127.0.0.1")
    parser.add_argument("--concurrent-items", type=int, default=10, help="CONCURRENT_ITEMS (Scrapy's default: 100)")
    parser.add_argument("--reactor", choices=("asyncio", "epoll"), default="asyncio",
                        help="Twisted reactor: asyncio (Scrapy's default) or epoll")
    parser.add_argument("--download-handler", choices=tuple(HANDLERS), default="scrapy",
                        help="scrapy: its own HTTP/1.1 handler (Twisted); niofetcher: niofetcher.scrapy's")
    parser.add_argument("--allow", default=None, metavar="REGEX", help="follow only links matching")
    parser.add_argument("--lean", action="store_true",
                        help="also switch off the middlewares and extensions a crawl of this site does not use "
                             "(referer, URL length, depth, meta refresh, auth, default headers, proxy, "
                             "downloader stats, meta-copy check; feed export, log count, remote control); "
                             "kept: offsite, robots.txt, timeouts, user agent, retry, redirect, decompression")
    return parser.parse_args(argv)


HANDLERS: dict[str, dict[str, str]] = {
    "scrapy": {},
    "niofetcher": dict.fromkeys(("http", "https"), "niofetcher.scrapy.NIOFetcherDownloadHandler"),
}

REACTORS = {
    "asyncio": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
    "epoll": "twisted.internet.epollreactor.EPollReactor",
}


def main() -> None:
    args = parse_args()
    started = time.perf_counter()

    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy.linkextractors import LinkExtractor
    from scrapy.spiders import CrawlSpider, Rule

    statuses: collections.Counter[int] = collections.Counter()
    samples: list[str] = []
    per_host = args.slots == "per-host"

    def to_slot(request: scrapy.Request, response: scrapy.http.Response) -> scrapy.Request:
        request.meta["download_slot"] = request.url.split("/", 3)[2]  # host:port
        return request

    class SiteSpider(CrawlSpider):  # type: ignore[misc,unused-ignore]  # scrapy is Any without the bench extra
        name = "testsite"
        allowed_domains = ["127.0.0.1"]
        start_urls = [args.seed]
        rules = (
            Rule(LinkExtractor(allow=args.allow or ()), callback="parse_page", follow=True,
                 process_request=to_slot if per_host else None),
        )

        def parse_start_url(self, response: scrapy.http.Response, **kwargs: object) -> list[object]:
            return self.parse_page(response)

        def parse_page(self, response: scrapy.http.Response) -> list[object]:
            statuses[response.status] += 1
            if response.status != 200 and len(samples) < 5:
                samples.append(f"{response.url}: status {response.status}")
            return []

    settings = {
        "CONCURRENT_REQUESTS": args.total,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.per_host if per_host else args.total,
        "CONCURRENT_ITEMS": args.concurrent_items,
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "ROBOTSTXT_OBEY": True,
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "MEMUSAGE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
        "TWISTED_REACTOR": REACTORS[args.reactor],
        "HTTPERROR_ALLOW_ALL": True,  # count non-200 pages in the callback rather than drop them unseen
        "USER_AGENT": f"Scrapy/{scrapy.__version__} (benchmark)",
        "DOWNLOAD_HANDLERS": HANDLERS[args.download_handler],
    }
    if args.lean:
        off = [f"scrapy.spidermiddlewares.{name}" for name in (
            "referer.RefererMiddleware", "urllength.UrlLengthMiddleware", "depth.DepthMiddleware",
            "metacopy.MetaCopyDetectionMiddleware")]
        settings["SPIDER_MIDDLEWARES"] = dict.fromkeys(off)
        off = [f"scrapy.downloadermiddlewares.{name}" for name in (
            "redirect.MetaRefreshMiddleware", "httpauth.HttpAuthMiddleware",
            "defaultheaders.DefaultHeadersMiddleware", "httpproxy.HttpProxyMiddleware", "stats.DownloaderStats")]
        settings["DOWNLOADER_MIDDLEWARES"] = dict.fromkeys(off)
        off = [f"scrapy.extensions.{name}" for name in (
            "feedexport.FeedExporter", "logcount.LogCount", "remote_control.RemoteControl", "logstats.LogStats",
            "spiderstate.SpiderState", "memdebug.MemoryDebugger", "closespider.CloseSpider")]
        settings["EXTENSIONS"] = dict.fromkeys(off)
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(SiteSpider)
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    pages = sum(statuses.values())
    ok = statuses.get(200, 0)
    errors = pages - ok + int(stats.get("spider_exceptions/count", 0) or 0) \
        + int(stats.get("downloader/exception_count", 0) or 0)
    keep = ("downloader/request_count", "downloader/response_count", "downloader/response_status_count/200",
            "downloader/response_status_count/404", "robotstxt/request_count", "dupefilter/filtered",
            "offsite/filtered", "retry/count", "downloader/exception_count", "finish_reason")
    line = {
        "client": "scrapy",
        "pages": pages,
        "ok": ok,
        "errors": errors,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "crawl_seconds": float(stats.get("elapsed_time_seconds") or 0.0),
        "seconds_in_process": time.perf_counter() - started,
        "error_samples": samples,
        "settings": {k: v for k, v in settings.items() if k != "USER_AGENT"},
        "lean": args.lean,
        "download_handler": args.download_handler,
        "slots": args.slots,
        "stats": {k: stats[k] for k in keep if k in stats},
        "version": scrapy.__version__,
        "python": sys.version.split()[0],
    }
    sys.stdout.write(json.dumps(line, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

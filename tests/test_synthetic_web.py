"""The synthetic web: many host names on a few ports, its shape, its counters, and a crawl of it."""

from __future__ import annotations

import http.client
import re
import socket
from collections import Counter
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

from niofetcher import FetcherConfig
from niofetcher.crawl import CrawlConfig, Crawler
from niofetcher.testing import SyntheticWeb
from niofetcher.testing.web import zipf_sizes

pytestmark = pytest.mark.timeout(60)

HREF = re.compile(r'href="([^"]+)"')


def get(web: SyntheticWeb, url: str, host: str | None = None) -> tuple[int, bytes]:
    """GET ``url`` from the web's port for it, with its Host (or ``host``)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=10)
    try:
        connection.request("GET", parts.path or "/", headers={"Host": host or parts.netloc})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def links(web: SyntheticWeb, url: str) -> list[str]:
    status, body = get(web, url)
    assert status == 200, url
    return [urljoin(url, href) for href in HREF.findall(body.decode())]


def test_sizes_are_zipf_like_and_add_up_exactly() -> None:
    sizes = zipf_sizes(10_000, 1_000_000, 1.0)
    assert sum(sizes) == 1_000_000 and min(sizes) >= 1
    assert sizes == sorted(sizes, reverse=True)
    assert 95_000 < sizes[0] < 115_000  # about pages / ln(hosts)
    assert sum(sizes[5_000:]) < 100_000  # the smaller half of the hosts holds under a tenth of the pages
    assert zipf_sizes(4, 10, 0.0) == [3, 3, 2, 2]
    assert zipf_sizes(3, 3, 2.0) == [1, 1, 1]


def test_hosts_are_names_on_a_few_ports_and_resolve_maps_every_one_to_loopback() -> None:
    with SyntheticWeb(hosts=10, pages=40, ports=3) as web:
        assert len(set(web.ports)) == 3
        assert web.base_urls[4] == f"http://h4.web.test:{web.ports[1]}/"
        assert web.resolve == {urlsplit(base).netloc: "127.0.0.1" for base in web.base_urls}
        assert len(web.page_urls()) == 10 + 40
        status, body = get(web, web.base_urls[4] + "robots.txt")
        assert (status, body) == (200, b"User-agent: *\nDisallow:\n")
        status, _ = get(web, web.base_urls[4], host="nobody.web.test")
        assert status == 404
        assert web.counters(web.ports[1]).requests == 1  # the unknown name is counted on its port
        assert web.host_counters("h4.web.test").requests == 1


def test_every_page_is_reachable_from_host_0_links_mostly_leave_their_host_and_the_web_is_seeded() -> None:
    with SyntheticWeb(hosts=30, pages=300, ports=2, links_per_page=10, cross_host_share=0.8) as web:
        graph = {}
        todo, seen = [web.base_urls[0]], {web.base_urls[0]}
        while todo:
            url = todo.pop()
            graph[url] = links(web, url)
            for link in graph[url]:
                if link not in seen:
                    seen.add(link)
                    todo.append(link)
        assert seen == set(web.page_urls())
        assert all(len(out) == 10 for out in graph.values())
        elsewhere = sum(urlsplit(link).netloc != urlsplit(url).netloc for url, out in graph.items() for link in out)
        assert 0.55 < elsewhere / (10 * len(graph)) < 0.85  # 0.8 of the 9 drawn, some landing at home
        assert web.requested_urls() == Counter(dict.fromkeys(web.page_urls(), 1))


def page_links(seed: int) -> list[list[str]]:
    """The links of every page of a small web, its ports written as PORT."""
    with SyntheticWeb(hosts=20, pages=60, ports=2, seed=seed) as web:
        ports = "|".join(map(str, web.ports))
        return [[re.sub(f":({ports})/", ":PORT/", link) for link in links(web, url)] for url in web.page_urls()]


def test_the_links_are_deterministic_from_the_seed() -> None:
    assert page_links(5) == page_links(5)
    assert page_links(5) != page_links(6)


def test_delays_are_per_host_within_the_range_and_deterministic() -> None:
    web = SyntheticWeb(hosts=50, pages=50, delay=(0.01, 0.05), seed=3)
    assert all(0.01 <= delay < 0.05 for delay in web.delays)
    assert len(set(web.delays)) == 50
    assert SyntheticWeb(hosts=50, pages=50, delay=(0.01, 0.05), seed=3).delays == web.delays
    assert SyntheticWeb(hosts=5, pages=5, delay=0.02).delays == [0.02] * 5


def test_connections_are_counted_per_host_name_by_their_first_request() -> None:
    with SyntheticWeb(hosts=4, pages=8, ports=1) as web:
        port = web.ports[0]
        socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
        for sock, name in zip(socks, ["h1.web.test", "h1.web.test", "h1.web.test", "h2.web.test"]):
            sock.sendall(f"GET / HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n".encode())
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
        for sock in socks:
            sock.close()
        socks[0] = socket.create_connection(("127.0.0.1", port), timeout=10)
        socks[0].sendall(f"GET / HTTP/1.1\r\nHost: H1.Web.Test:{port}\r\n\r\n".encode())  # names fold case
        assert socks[0].recv(65536).startswith(b"HTTP/1.1 200 OK")
        socks[0].close()
        assert web.peak_connections() == {"h1.web.test": 3, "h2.web.test": 1}
        assert web.host_counters("h1.web.test").accepted == 4
        web.reset_counters()
        assert web.peak_connections() == {}


@pytest.mark.parametrize("kwargs", [
    {"hosts": 0}, {"pages": 5, "hosts": 6}, {"links_per_page": 1}, {"zipf": -1.0}, {"cross_host_share": 1.5},
    {"delay": -0.1}, {"delay": (0.2, 0.1)}, {"robots_crawl_delay": -1.0}, {"host": "10.0.0.1"},
])
def test_bad_arguments_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SyntheticWeb(**kwargs)  # type: ignore[arg-type]


def test_a_crawl_of_200_hosts_fetches_every_page_once_and_no_host_over_its_limit(tmp_path: Path) -> None:
    with SyntheticWeb(hosts=200, pages=2_000, ports=4, delay=0.002) as web:
        fetcher = FetcherConfig(resolve=web.resolve, max_connections=64, max_connections_per_host=2)
        config = CrawlConfig(seeds=[web.base_urls[0]], db_path=str(tmp_path / "crawl.sqlite"),
                             allowed_domains=["web.test"], parse_mode="thread", fetcher=fetcher)
        summary = Crawler(config).run()
        requested = web.requested_urls()
        peaks = web.peak_connections()
    pages = Counter({url: n for url, n in requested.items() if not url.endswith("/robots.txt")})
    assert pages == Counter(dict.fromkeys(web.page_urls(), 1))
    assert summary.pages == 2_200 and not summary.stopped
    assert sum(url.endswith("/robots.txt") for url in requested) == 200
    assert len(peaks) == 200 and max(peaks.values()) <= 2

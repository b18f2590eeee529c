"""The generated test site, driven by plain sockets and http.client over loopback."""

from __future__ import annotations

import http.client
import re
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
import trustme

from niofetcher import testing as testsite
from niofetcher.testing import PortCounters, TestSite, tls_context_from_files
from niofetcher.testing.counters import Durations

pytestmark = pytest.mark.timeout(30)

HREF = re.compile(r'href="([^"]+)"')
TITLE = re.compile(r"<title>([^<]*)</title>")


class RawClient:
    """A socket that reads whole HTTP responses (Content-Length framed), so pipelining is visible."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers["content-length"])
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return int(status_line.split()[1]), headers, body

    def read_to_eof(self) -> bytes:
        """Everything left until the server closes (a reset counts as closed)."""
        while True:
            try:
                self._fill()
            except EOFError:
                data, self.buf = self.buf, b""
                return data

    def _fill(self) -> None:
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            raise EOFError
        self.buf += data

    def close(self) -> None:
        self.sock.close()


def get(path: str, host: str = "127.0.0.1", extra: str = "", version: str = "HTTP/1.1") -> bytes:
    return f"GET {path} {version}\r\nHost: {host}\r\n{extra}\r\n".encode("ascii")


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """The server counts in its own thread: poll until it has caught up."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite(hosts=2, pages=20, page_size=1500, links_per_page=5) as running:
        yield running


@pytest.fixture
def client(site: TestSite) -> Iterator[RawClient]:
    raw = RawClient(site.ports[0])
    yield raw
    raw.close()


# --------------------------------------------------------------------------- content


def test_every_page_has_content_length_title_and_links(site: TestSite) -> None:
    urls = site.page_urls()
    assert len(urls) == 2 * (1 + 20)
    assert urls[0] == site.base_urls[0] and urls[21] == site.base_urls[1]
    connections = {port: http.client.HTTPConnection("127.0.0.1", port, timeout=10) for port in site.ports}
    try:
        for url in urls:
            parts = urlsplit(url)
            connection = connections[parts.port]  # type: ignore[index]
            connection.request("GET", parts.path)
            response = connection.getresponse()
            body = response.read()
            assert response.status == 200
            assert response.getheader("Content-Type") == "text/html; charset=utf-8"
            assert int(response.getheader("Content-Length", "-1")) == len(body) == 1500
            html = body.decode("utf-8")
            assert TITLE.search(html)
            hrefs = HREF.findall(html)
            host_index = site.ports.index(parts.port)  # type: ignore[arg-type]
            next_base = site.base_urls[(host_index + 1) % 2]
            if parts.path == "/":
                assert hrefs == [f"/page/{i}" for i in range(5)] + [next_base]
            else:
                page = int(parts.path.rsplit("/", 1)[1])
                same_host = hrefs[:-1]
                assert len(same_host) == len(set(same_host)) == 5
                assert f"/page/{(page + 1) % 20}" in same_host  # the chain
                assert parts.path not in same_host
                assert hrefs[-1] == f"{next_base}page/{page}"
    finally:
        for connection in connections.values():
            connection.close()


def test_a_crawl_from_host_0_reaches_every_page_of_every_host_exactly_once() -> None:
    with TestSite(hosts=3, pages=50, page_size=800) as site:
        start = site.base_urls[0]
        seen = {start}
        queue = [start]
        connections = {port: http.client.HTTPConnection("127.0.0.1", port, timeout=10) for port in site.ports}
        try:
            while queue:
                url = queue.pop(0)
                parts = urlsplit(url)
                connection = connections[parts.port]  # type: ignore[index]
                connection.request("GET", parts.path)
                response = connection.getresponse()
                html = response.read().decode("utf-8")
                assert response.status == 200, url
                for href in HREF.findall(html):
                    link = urljoin(url, href)
                    if link not in seen:
                        seen.add(link)
                        queue.append(link)
        finally:
            for connection in connections.values():
                connection.close()
        assert seen == set(site.page_urls())
        for port in site.ports:
            paths = site.counters(port).paths
            assert set(paths.values()) == {1} and len(paths) == 51


def test_without_cross_host_links_pages_link_only_to_their_own_host() -> None:
    with TestSite(hosts=2, pages=5, cross_host_links=False) as site:
        client = RawClient(site.ports[0])
        try:
            for path in ["/", "/page/3"]:
                client.send(get(path))
                _, _, body = client.read_response()
                assert all(href.startswith("/page/") for href in HREF.findall(body.decode()))
        finally:
            client.close()


def test_links_per_page_is_capped_by_the_number_of_other_pages() -> None:
    with TestSite(pages=3, links_per_page=10) as site:
        client = RawClient(site.ports[0])
        try:
            client.send(get("/page/0"))
            _, _, body = client.read_response()
            assert sorted(HREF.findall(body.decode())) == ["/page/1", "/page/2"]
        finally:
            client.close()


def test_corpus_bodies_get_the_site_links_before_body_end() -> None:
    bodies = [b"<html><body><p>first</p></BODY></html>", b"no body tag at all"]
    with TestSite(pages=4, bodies=bodies) as site:
        client = RawClient(site.ports[0])
        try:
            client.send(get("/page/2"))
            _, headers, body = client.read_response()
            assert int(headers["content-length"]) == len(body)
            assert body.startswith(b"<html><body><p>first</p><ul")
            assert body.endswith(b"</ul>\n</BODY></html>")
            assert b'href="/page/3"' in body
            client.send(get("/page/3"))
            _, _, body = client.read_response()
            assert body.startswith(b"no body tag at all<ul") and b'href="/page/0"' in body
        finally:
            client.close()


def test_robots_txt_lists_disallow_lines() -> None:
    with TestSite(robots_disallow=["/page/1", "/private/"]) as site:
        client = RawClient(site.ports[0])
        try:
            client.send(get("/robots.txt"))
            status, headers, body = client.read_response()
        finally:
            client.close()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert body == b"User-agent: *\nDisallow: /page/1\nDisallow: /private/\n"


def test_robots_txt_without_rules_has_an_empty_disallow(client: RawClient) -> None:
    client.send(get("/robots.txt"))
    assert client.read_response()[2] == b"User-agent: *\nDisallow:\n"


def test_robots_txt_can_carry_a_crawl_delay() -> None:
    with TestSite(robots_crawl_delay=2.5) as site:
        client = RawClient(site.ports[0])
        try:
            client.send(get("/robots.txt"))
            body = client.read_response()[2]
        finally:
            client.close()
    assert body == b"User-agent: *\nDisallow:\nCrawl-delay: 2.5\n"


def fetch_following_redirects(url: str) -> list[tuple[str, int]]:
    """``(url, status)`` of every hop from ``url`` to a final answer, one connection per hop."""
    hops = []
    while True:
        parts = urlsplit(url)
        assert parts.hostname is not None
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        try:
            connection.request("GET", parts.path)
            response = connection.getresponse()
            response.read()
        finally:
            connection.close()
        hops.append((url, response.status))
        location = response.getheader("Location")
        if location is None:
            return hops
        url = urljoin(url, location)


@pytest.mark.parametrize("cross_host", [False, True], ids=["same-host", "cross-host"])
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_robots_txt_can_redirect_in_a_chain_to_the_same_or_the_next_hosts(cross_host: bool, status: int) -> None:
    with TestSite(hosts=3, robots_redirects=3, robots_redirect_status=status, robots_redirect_cross_host=cross_host,
                  robots_disallow=["/private/"], log_requests=True) as site:
        hops = fetch_following_redirects(site.base_urls[1] + "robots.txt")
        logs = [site.counters(port).log for port in site.ports]
    bases = site.base_urls
    on = [bases[(1 + k) % 3] if cross_host else bases[1] for k in range(4)]
    assert hops == [(bases[1] + "robots.txt", status), (on[1] + "robots/1/1", status),
                    (on[2] + "robots/1/2", status), (on[3] + "robots/1/3", 200)]
    assert [path for log in logs for _, path in log] == [
        path for base in bases for url, _ in hops if url.startswith(base) for path in [url[len(base) - 1:]]]


def test_robots_txt_can_be_unavailable_for_its_first_requests() -> None:
    with TestSite(hosts=2, robots_unavailable=2, robots_disallow=["/private/"]) as site:
        answers = [fetch_following_redirects(base + "robots.txt")[0][1] for base in site.base_urls * 3]
    assert answers == [503, 503, 503, 503, 200, 200]  # counted per host


def test_requests_are_logged_with_their_arrival_time_only_when_asked() -> None:
    with TestSite(log_requests=True) as site:
        before = time.monotonic()
        fetch_following_redirects(site.base_urls[0] + "page/1")
        fetch_following_redirects(site.base_urls[0] + "page/2")
        after = time.monotonic()
        log = site.counters().log
        site.reset_counters()
        assert site.counters().log == []
    assert [path for _, path in log] == ["/page/1", "/page/2"]
    assert before <= log[0][0] <= log[1][0] <= after
    with TestSite() as site:
        fetch_following_redirects(site.base_urls[0] + "page/1")
        assert site.counters().log == [] and site.counters().requests == 1


def test_unknown_paths_are_404_and_the_connection_stays_usable(client: RawClient) -> None:
    client.send(get("/nothing/here") + get("/page/20") + get("/page/1?query=dropped"))
    assert client.read_response()[0] == 404
    assert client.read_response()[0] == 404
    assert client.read_response()[0] == 200


def test_head_gets_the_headers_without_a_body(site: TestSite) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", site.ports[0], timeout=10)
    try:
        connection.request("HEAD", "/page/1")
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("Content-Length") == "1500"
        assert response.read() == b""
        connection.request("GET", "/page/1")  # the same connection, still in step
        assert len(connection.getresponse().read()) == 1500
    finally:
        connection.close()


# --------------------------------------------------------------------------- connections


def test_keep_alive_and_pipelined_requests_are_answered_in_order(site: TestSite, client: RawClient) -> None:
    client.send(get("/page/1") + get("/page/2"))  # two requests in one send
    titles = [TITLE.search(client.read_response()[2].decode()).group(1) for _ in range(2)]  # type: ignore[union-attr]
    assert titles == ["Test site host 0 page 1", "Test site host 0 page 2"]
    client.send(get("/page/3"))
    assert b"page 3</title>" in client.read_response()[2]
    counters = site.counters(site.ports[0])
    assert counters.accepted == 1 and counters.requests == 3


def test_request_bodies_are_read_and_discarded(client: RawClient) -> None:
    body = b"x" * 100_000
    post = b"POST /page/4 HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(body)
    client.send(post + body[:1000])  # the body arrives in pieces
    client.send(body[1000:] + get("/page/5"))
    assert b"page 4</title>" in client.read_response()[2]
    assert b"page 5</title>" in client.read_response()[2]


def test_connection_close_is_honoured(client: RawClient) -> None:
    client.send(get("/page/1", extra="Connection: close\r\n") + get("/page/2"))
    status, headers, _ = client.read_response()
    assert status == 200 and headers["connection"] == "close"
    assert client.read_to_eof() == b""  # the pipelined second request is not answered


def test_http_10_closes_unless_it_asks_for_keep_alive(site: TestSite) -> None:
    plain = RawClient(site.ports[0])
    keep = RawClient(site.ports[0])
    try:
        plain.send(get("/page/1", version="HTTP/1.0"))
        assert plain.read_response()[0] == 200
        assert plain.read_to_eof() == b""
        keep.send(get("/page/1", version="HTTP/1.0", extra="Connection: Keep-Alive\r\n"))
        assert keep.read_response()[1]["connection"] == "keep-alive"
        keep.send(get("/page/2", version="HTTP/1.0", extra="Connection: keep-alive\r\n"))
        assert keep.read_response()[0] == 200
    finally:
        plain.close()
        keep.close()


def test_a_half_closed_client_still_gets_its_answers(client: RawClient) -> None:
    client.send(get("/page/1") + get("/page/2"))
    client.sock.shutdown(socket.SHUT_WR)
    assert client.read_response()[0] == 200
    assert client.read_response()[0] == 200
    assert client.read_to_eof() == b""


# --------------------------------------------------------------------------- counters


def test_counters_count_connections_peaks_requests_and_paths(site: TestSite) -> None:
    port = site.ports[0]
    clients = [RawClient(port) for _ in range(10)]
    try:
        wait_for(lambda: site.counters(port).open_now == 10)
        for client in clients[:3]:
            client.send(get("/page/7"))
            client.read_response()
        clients[0].send(get("/"))
        clients[0].read_response()
        counters = site.counters(port)
        assert (counters.accepted, counters.open_now, counters.max_open, counters.requests) == (10, 10, 10, 4)
        assert counters.paths == {"/page/7": 3, "/": 1}
        assert site.counters(site.ports[1]) == PortCounters()
    finally:
        for client in clients[5:]:
            client.close()
    wait_for(lambda: site.counters(port).open_now == 5)
    assert site.counters(port).max_open == 10

    other = RawClient(site.ports[1])
    try:
        wait_for(lambda: site.counters().open_now == 6)
        total = site.counters()
        assert (total.accepted, total.max_open, total.requests) == (11, 10, 4)  # a true peak, not a sum
        site.reset_counters()
        assert site.counters(port) == PortCounters(open_now=5, max_open=5)
        assert site.counters().max_open == 6
    finally:
        other.close()
        for client in clients[:5]:
            client.close()
    wait_for(lambda: site.counters().open_now == 0)


def test_counters_are_a_copy(site: TestSite, client: RawClient) -> None:
    snapshot = site.counters(site.ports[0])
    client.send(get("/"))
    client.read_response()
    assert snapshot.requests == 0 and not snapshot.paths
    with pytest.raises(ValueError):
        site.counters(1)  # not one of the site's ports


def test_connection_age_is_measured_when_a_request_arrives(site: TestSite, client: RawClient) -> None:
    client.send(get("/"))
    client.read_response()
    time.sleep(0.15)
    client.send(get("/"))
    client.read_response()
    age = site.counters(site.ports[0]).max_conn_age_at_request
    assert 0.15 <= age < 5


# --------------------------------------------------------------------------- turnaround


@pytest.mark.parametrize("delay", [0.0, 0.02])  # with a delay, arrivals carry the kernel's stamp
def test_turnaround_is_the_clients_wait_between_a_response_and_its_next_request(delay: float) -> None:
    """A client that waits 50 ms before each next request on one connection shows 50 ms, once per
    request after the first; the lower bound is exact up to the buckets' 2%, the upper one loose."""
    wait = 0.05
    with TestSite(hosts=2, pages=5, delay=delay) as site:
        client = RawClient(site.ports[1])
        try:
            for index in range(5):
                if index:
                    time.sleep(wait)
                client.send(get(f"/page/{index}"))
                assert client.read_response()[0] == 200
        finally:
            client.close()
        turnaround = site.counters(site.ports[1]).turnaround
        assert turnaround.count == 4
        assert site.counters().turnaround == turnaround  # the sum over ports
        assert site.counters(site.ports[0]).turnaround.count == 0
        low, high = turnaround.percentile(0.0), turnaround.percentile(1.0)
        assert low is not None and high is not None
        assert wait * 0.97 <= low <= high < wait + 0.5


def test_a_first_request_or_a_pipelined_one_counts_no_turnaround(site: TestSite) -> None:
    """Only a request that a client sent after it had every response counts: not one on a fresh
    connection, nor one sent while a response was still owed."""
    for _ in range(3):
        fresh = RawClient(site.ports[0])
        fresh.send(get("/"))
        assert fresh.read_response()[0] == 200
        fresh.close()
    pipelining = RawClient(site.ports[0])
    try:
        pipelining.send(get("/page/1") + get("/page/2") + get("/page/3"))
        for _ in range(3):
            assert pipelining.read_response()[0] == 200
        assert site.counters().turnaround.count == 0
        pipelining.send(get("/page/4"))  # after every answer: one turnaround
        pipelining.read_response()
        wait_for(lambda: site.counters().turnaround.count == 1)
    finally:
        pipelining.close()
    site.reset_counters()
    assert site.counters().turnaround == Durations()


def test_durations_percentiles_are_within_their_buckets_2_percent() -> None:
    durations = Durations()
    assert durations.percentile(0.5) is None
    for ms in range(1, 101):  # 1 .. 100 ms
        durations.add(ms / 1000)
    durations.add(-1e-6)  # clock jitter: counted as 0
    assert durations.count == 101
    assert durations.percentile(0.0) == 0.0
    for fraction, expected in ((0.5, 0.050), (0.9, 0.090), (0.99, 0.099), (1.0, 0.100)):
        value = durations.percentile(fraction)
        assert value is not None and abs(value - expected) <= 0.02 * expected
    snapshot = durations.copy()
    buckets = len(durations.buckets)
    durations.add(1e6)  # beyond the last bucket, both: kept in it, so memory stays bounded
    durations.add(1e9)
    assert len(durations.buckets) == buckets + 1 and snapshot.count == 101


# --------------------------------------------------------------------------- delay


def test_delay_is_honoured_for_each_pipelined_request_in_order() -> None:
    with TestSite(pages=5, delay=0.2) as site:
        client = RawClient(site.ports[0])
        try:
            started = time.monotonic()
            client.send(get("/page/1") + get("/page/2"))
            first = client.read_response()
            assert time.monotonic() - started >= 0.2
            second = client.read_response()
            assert b"page 1</title>" in first[2] and b"page 2</title>" in second[2]
            started = time.monotonic()
            client.send(get("/page/3", extra="Connection: close\r\n"))
            assert client.read_response()[0] == 200
            assert time.monotonic() - started >= 0.2
            assert client.read_to_eof() == b""
        finally:
            client.close()


def test_delay_does_not_serialise_connections() -> None:
    with TestSite(pages=5, delay=0.3) as site:
        clients = [RawClient(site.ports[0]) for _ in range(20)]
        try:
            started = time.monotonic()
            for client in clients:
                client.send(get("/page/1"))
            for client in clients:
                assert client.read_response()[0] == 200
            assert 0.3 <= time.monotonic() - started < 3.0
        finally:
            for client in clients:
                client.close()


def test_a_delay_is_never_shortened_and_not_grossly_lengthened() -> None:
    """Scenario B of the benchmarks counts on it: every response D after its request, not much later.

    The lower bound is exact (measured from before the request is sent, it can only
    overestimate the server's delay); the upper bound is deliberately loose (a median
    under D + 20 ms), so that a loaded machine cannot fail it.
    """
    delay = 0.05
    with TestSite(hosts=2, pages=5, delay=delay) as site:
        clients = [RawClient(port) for port in site.ports for _ in range(2)]
        try:
            elapsed = []
            for round_no in range(4):
                started = []
                for index, client in enumerate(clients):
                    started.append(time.monotonic())
                    client.send(get(f"/page/{(round_no + index) % 5}"))
                for client, began in zip(clients, started):
                    assert client.read_response()[0] == 200
                    elapsed.append(time.monotonic() - began)
            assert min(elapsed) >= delay
            assert sorted(elapsed)[len(elapsed) // 2] < delay + 0.02
        finally:
            for client in clients:
                client.close()


def test__arrival_keeps_the_kernel_stamp_between_the_previous_wait_and_the_read() -> None:
    """A receive timestamp can move a delay's start earlier only as far as the bytes can be old."""
    site = TestSite(delay=0.05)
    server = site._bind()
    try:
        if not server.timestamps:
            pytest.skip("no kernel receive timestamps on this platform")
        server.clock_offset = 0.0

        option = testsite._SO_TIMESTAMPNS
        assert option is not None  # server.timestamps says so

        def stamped(when: float) -> list[tuple[int, int, bytes]]:
            seconds = int(when)
            nanoseconds = int((when - seconds) * 1e9)
            return [(socket.SOL_SOCKET, option, struct.pack("@qq", seconds, nanoseconds))]

        now = time.monotonic()
        server.arrival_floor = now - 1.0
        assert now - 0.5 - 1e-6 <= server._arrival(stamped(now - 0.5)) <= now - 0.5 + 1e-6
        assert server._arrival(stamped(now - 5.0)) == now - 1.0  # older than the wait before last: clamped
        assert server._arrival(stamped(now + 5.0)) <= time.monotonic()  # in the future: the read's time
        before = time.monotonic()
        assert before <= server._arrival([]) <= time.monotonic()  # no stamp: the read's time
    finally:
        server.close()  # the listeners too
        server.wake_w.close()


# --------------------------------------------------------------------------- robustness


@pytest.mark.parametrize(
    "garbage",
    [
        b"garbage\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET /\r\n\r\n",
        b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: lots\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS hello, more or less
    ],
)
def test_garbage_gets_400_and_a_close_and_the_server_goes_on(site: TestSite, garbage: bytes) -> None:
    bad = RawClient(site.ports[0])
    try:
        bad.send(garbage)
        status, headers, _ = bad.read_response()
        assert status == 400 and headers["connection"] == "close"
        assert bad.read_to_eof() == b""
    finally:
        bad.close()
    good = RawClient(site.ports[0])
    try:
        good.send(get("/page/1"))
        assert good.read_response()[0] == 200
    finally:
        good.close()


def test_an_oversized_head_gets_the_connection_closed(site: TestSite, client: RawClient) -> None:
    client.send(b"GET / HTTP/1.1\r\nX-Long: " + b"a" * 70_000)
    assert client.read_to_eof() == b""
    wait_for(lambda: site.counters().open_now == 0)


def test_resets_and_abandoned_requests_do_not_hurt_the_server(site: TestSite) -> None:
    port = site.ports[0]
    for payload in [b"", b"GET /page/1 HTTP/1.1\r\n", get("/page/1") * 50]:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(payload)
        # SO_LINGER 0: close with a RST instead of a FIN.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    wait_for(lambda: site.counters().open_now == 0)
    client = RawClient(port)
    try:
        client.send(get("/page/2"))
        assert client.read_response()[0] == 200
    finally:
        client.close()


def test_a_client_that_does_not_read_cannot_stall_others(site: TestSite) -> None:
    greedy = RawClient(site.ports[0])
    polite = RawClient(site.ports[0])
    try:
        greedy.send(get("/page/1") * 20_000)  # ~30 MB of answers it never reads
        polite.send(get("/page/2"))
        assert polite.read_response()[0] == 200
    finally:
        greedy.close()
        polite.close()


# --------------------------------------------------------------------------- lifecycle


def test_stop_closes_every_socket_and_joins_the_thread() -> None:
    before = set(threading.enumerate())
    site = TestSite(hosts=3, pages=5).start()
    loop_threads = set(threading.enumerate()) - before
    assert len(loop_threads) == 1 and all(thread.daemon for thread in loop_threads)
    client = RawClient(site.ports[1])
    try:
        client.send(get("/"))
        client.read_response()
        site.stop()
        assert not any(thread.is_alive() for thread in loop_threads)
        assert client.read_to_eof() == b""  # the open connection was closed too
    finally:
        client.close()
    for port in site.ports:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert site.counters().open_now == 0
    site.stop()  # idempotent
    with pytest.raises(RuntimeError):
        site.start()


def test_max_seconds_stops_the_server_by_itself() -> None:
    site = TestSite(max_seconds=0.2).start()
    try:
        time.sleep(0.5)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", site.ports[0]), timeout=2).close()
    finally:
        site.stop()


def test_serve_forever_runs_in_the_calling_thread_until_max_seconds() -> None:
    site = TestSite(max_seconds=0.3)
    seen: list[list[str]] = []
    started = time.monotonic()
    site.serve_forever(on_ready=lambda ready: seen.append(ready.base_urls))
    assert 0.3 <= time.monotonic() - started < 5
    assert seen == [site.base_urls]


def test_fixed_ports_are_consecutive() -> None:
    for _ in range(20):  # the probed range may be taken by someone else in between
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port > 65000:
            continue
        site = TestSite(hosts=3, port=port)
        assert site.ports == [port, port + 1, port + 2]
        try:
            site.start()
        except OSError:
            continue
        try:
            assert site.ports == [port, port + 1, port + 2]
            assert site.base_urls[2] == f"http://127.0.0.1:{port + 2}/"
        finally:
            site.stop()
        return
    pytest.skip("no free range of three ports found")


def test_ephemeral_ports_are_unknown_before_start() -> None:
    with pytest.raises(RuntimeError):
        TestSite().ports  # noqa: B018 - reading the property is the test


@pytest.mark.parametrize(
    "kwargs",
    [
        {"host": "0.0.0.0"},
        {"host": "192.168.1.1"},
        {"host": "localhost"},
        {"hosts": 0},
        {"pages": 0},
        {"links_per_page": 0},
        {"delay": -1},
        {"port": 65535, "hosts": 2},
        {"max_seconds": 0},
        {"bodies": []},
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        TestSite(**kwargs)  # type: ignore[arg-type]


def test_ipv6_loopback_works() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        site = TestSite(host="::1", pages=3).start()
    except OSError:
        pytest.skip("::1 not available")
    try:
        assert site.base_urls[0].startswith("http://[::1]:")
        connection = http.client.HTTPConnection("::1", site.ports[0], timeout=10)
        connection.request("GET", "/page/0")
        assert connection.getresponse().status == 200
        connection.close()
    finally:
        site.stop()


# --------------------------------------------------------------------------- load


def test_2000_requests_over_8_keep_alive_connections(site: TestSite) -> None:
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", site.ports[index % 2], timeout=10)
        try:
            for i in range(250):
                connection.request("GET", f"/page/{i % 20}")
                response = connection.getresponse()
                assert response.status == 200 and len(response.read()) == 1500
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    total = site.counters()
    assert total.requests == 2000 and total.accepted == 8
    assert sum(total.paths.values()) == 2000


def test_2000_simultaneous_connections_are_accepted() -> None:
    with TestSite(pages=2) as site:
        clients: list[socket.socket] = []
        try:
            for _ in range(2000):
                clients.append(socket.create_connection(("127.0.0.1", site.ports[0]), timeout=10))
            wait_for(lambda: site.counters().open_now == 2000, timeout=15)
            assert site.counters().max_open == 2000
        finally:
            for sock in clients:
                sock.close()
        wait_for(lambda: site.counters().open_now == 0, timeout=15)



# --------------------------------------------------------------------------- TLS


class TLSFiles:
    """A trustme CA and a certificate for 127.0.0.1, written as PEM files."""

    def __init__(self, directory: Path) -> None:
        self.ca = trustme.CA()
        leaf = self.ca.issue_cert("127.0.0.1")
        self.ca_file = str(directory / "ca.pem")
        self.cert_file = str(directory / "cert.pem")
        self.key_file = str(directory / "key.pem")
        self.ca.cert_pem.write_to_path(self.ca_file)
        with open(self.cert_file, "wb") as out:
            out.writelines(pem.bytes() for pem in leaf.cert_chain_pems)
        leaf.private_key_pem.write_to_path(self.key_file)

    def server_context(self, tickets: bool = True) -> ssl.SSLContext:
        return tls_context_from_files(self.cert_file, self.key_file, tickets=tickets)

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return TLSFiles(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_site(tls_files: TLSFiles) -> Iterator[TestSite]:
    with TestSite(hosts=2, pages=20, page_size=1500, tls=tls_files.server_context()) as running:
        yield running


def https_connection(tls_files: TLSFiles, port: int) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("127.0.0.1", port, context=tls_files.client_context(), timeout=10)


class TLSClient(RawClient):
    """RawClient over a verified TLS connection (``session=`` to offer an earlier session)."""

    def __init__(self, port: int, context: ssl.SSLContext, session: ssl.SSLSession | None = None) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1", session=session)
        self.buf = b""


@pytest.mark.timeout(30)
def test_tls_serves_every_page_over_keep_alive_and_counts_handshakes(tls_site: TestSite, tls_files: TLSFiles) -> None:
    assert all(url.startswith("https://127.0.0.1:") for url in tls_site.base_urls)
    urls = tls_site.page_urls()
    assert urls[0] == tls_site.base_urls[0] and all(url.startswith("https://") for url in urls)
    connections = {port: https_connection(tls_files, port) for port in tls_site.ports}
    try:
        for _ in range(3):  # every page three times, on the same two connections
            for url in urls:
                parts = urlsplit(url)
                connection = connections[parts.port]  # type: ignore[index]
                connection.request("GET", parts.path)
                response = connection.getresponse()
                body = response.read()
                assert response.status == 200 and len(body) == 1500
                assert response.getheader("Connection") == "keep-alive"
                if parts.path == "/":  # the cross-host link is https too
                    next_base = tls_site.base_urls[(tls_site.ports.index(parts.port) + 1) % 2]  # type: ignore[arg-type]
                    assert next_base in HREF.findall(body.decode("utf-8"))
        for connection in connections.values():
            assert connection.sock.version() in ("TLSv1.3", "TLSv1.2")
    finally:
        for connection in connections.values():
            connection.close()
    total = tls_site.counters()
    assert total.requests == 3 * len(urls)
    assert total.accepted == total.tls_handshakes == 2 and total.tls_resumed == total.tls_failed == 0
    assert tls_site.counters(tls_site.ports[1]).tls_handshakes == 1
    wait_for(lambda: tls_site.counters().open_now == 0)
    tls_site.reset_counters()
    assert tls_site.counters().tls_handshakes == 0


@pytest.mark.timeout(30)
def test_tls_large_pages_arrive_whole_and_equal_the_plain_ones(tls_files: TLSFiles) -> None:
    kwargs = {"pages": 3, "page_size": 2_000_000}
    with TestSite(**kwargs) as plain:  # type: ignore[arg-type]
        connection = http.client.HTTPConnection("127.0.0.1", plain.ports[0], timeout=10)
        expected = []
        for i in range(3):
            connection.request("GET", f"/page/{i}")
            expected.append(connection.getresponse().read())
        connection.close()
    with TestSite(**kwargs, tls=tls_files.server_context()) as site:  # type: ignore[arg-type]
        connection = https_connection(tls_files, site.ports[0])
        try:
            for i in range(3):
                connection.request("GET", f"/page/{i}")
                response = connection.getresponse()
                body = response.read()
                assert response.status == 200
                assert len(body) == int(response.getheader("Content-Length", "-1")) == len(expected[i])
                assert body == expected[i]
        finally:
            connection.close()
        assert site.counters().tls_handshakes == 1


@pytest.mark.timeout(30)
def test_tls_pipelined_requests_in_one_write_are_all_answered_in_order(
    tls_site: TestSite, tls_files: TLSFiles
) -> None:
    client = TLSClient(tls_site.ports[0], tls_files.client_context())
    try:
        client.send(b"".join(get(f"/page/{i % 20}") for i in range(300)))  # ~20 TLS records
        for i in range(300):
            status, _, body = client.read_response()
            assert status == 200 and f"page {i % 20}</title>".encode() in body
        client.send(get("/page/3", extra="Connection: close\r\n"))
        status, headers, _ = client.read_response()
        assert status == 200 and headers["connection"] == "close"
        assert client.read_to_eof() == b""
    finally:
        client.close()
    wait_for(lambda: tls_site.counters().open_now == 0)
    assert tls_site.counters().requests == 301


@pytest.mark.timeout(30)
def test_tls_data_left_decrypted_in_the_ssl_object_is_read_without_waiting(
    tls_files: TLSFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a read smaller than a TLS record, the rest of the record stays decrypted
    # inside the SSL object, where select() cannot see it: only pending() tells.
    monkeypatch.setattr(testsite.server, "RECV_SIZE", 100)
    with TestSite(pages=20, tls=tls_files.server_context()) as site:
        client = TLSClient(site.ports[0], tls_files.client_context())
        try:
            client.send(b"".join(get(f"/page/{i % 20}") for i in range(200)))  # one ~8 KB record
            for i in range(200):
                status, _, body = client.read_response()
                assert status == 200 and f"page {i % 20}</title>".encode() in body
        finally:
            client.close()


@pytest.mark.timeout(30)
def test_tls_delay_is_honoured(tls_files: TLSFiles) -> None:
    with TestSite(pages=5, delay=0.2, tls=tls_files.server_context()) as site:
        client = TLSClient(site.ports[0], tls_files.client_context())
        try:
            started = time.monotonic()
            client.send(get("/page/1") + get("/page/2"))
            assert client.read_response()[0] == 200
            assert time.monotonic() - started >= 0.2
            assert client.read_response()[0] == 200
        finally:
            client.close()


@pytest.mark.timeout(60)
def test_tls_a_client_that_does_not_read_cannot_stall_others_and_gets_everything_later(tls_files: TLSFiles) -> None:
    with TestSite(pages=5, page_size=200_000, tls=tls_files.server_context()) as site:
        greedy = TLSClient(site.ports[0], tls_files.client_context())
        polite = TLSClient(site.ports[0], tls_files.client_context())
        try:
            greedy.send(get("/page/1") * 60)  # 12 MB of answers, not read for now
            time.sleep(0.2)  # the server fills the socket buffers and hits WANT_WRITE
            polite.send(get("/page/2"))
            status, _, body = polite.read_response()
            assert status == 200 and len(body) == 200_000
            for _ in range(60):  # the interrupted TLS writes resumed exactly where they stopped
                status, _, body = greedy.read_response()
                assert status == 200 and len(body) == 200_000 and b"page 1</title>" in body
        finally:
            greedy.close()
            polite.close()


@pytest.mark.timeout(30)
def test_tls_plain_http_on_the_tls_port_is_closed_and_the_server_goes_on(
    tls_site: TestSite, tls_files: TLSFiles
) -> None:
    port = tls_site.ports[0]
    plain = RawClient(port)
    try:
        plain.send(get("/page/1"))
        assert b"HTTP/1.1 200" not in plain.read_to_eof()  # closed (at most a TLS alert)
    finally:
        plain.close()
    # A client that connects and leaves, one that resets mid-ClientHello.
    socket.create_connection(("127.0.0.1", port), timeout=10).close()
    half = socket.create_connection(("127.0.0.1", port), timeout=10)
    half.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    half.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    half.close()
    wait_for(lambda: tls_site.counters().tls_failed == 3 and tls_site.counters().open_now == 0)
    assert tls_site.counters().accepted == 3 and tls_site.counters().tls_handshakes == 0
    connection = https_connection(tls_files, port)
    try:
        connection.request("GET", "/page/2")
        assert connection.getresponse().status == 200
    finally:
        connection.close()


@pytest.mark.timeout(30)
def test_tls_a_client_that_refuses_the_certificate_does_not_hurt_the_server(tls_site: TestSite) -> None:
    untrusting = ssl.create_default_context()  # the system store does not know our CA
    raw = socket.create_connection(("127.0.0.1", tls_site.ports[0]), timeout=10)
    with pytest.raises(ssl.SSLCertVerificationError):
        untrusting.wrap_socket(raw, server_hostname="127.0.0.1")
    raw.close()
    wait_for(lambda: tls_site.counters().open_now == 0)
    assert tls_site.counters().tls_failed == 1 and tls_site.counters().tls_handshakes == 0


def _two_connections(site: TestSite, tls_files: TLSFiles, version: ssl.TLSVersion) -> tuple[bool, bool]:
    """``session_reused`` of a first connection and of a second one offering the first's session."""
    context = tls_files.client_context()
    context.minimum_version = context.maximum_version = version
    first = TLSClient(site.ports[0], context)
    try:
        first.send(get("/page/1"))
        assert first.read_response()[0] == 200  # TLS 1.3 tickets arrive after the handshake
        session = first.sock.session  # type: ignore[attr-defined]
        first_reused = first.sock.session_reused  # type: ignore[attr-defined]
    finally:
        first.close()
    second = TLSClient(site.ports[0], context, session=session)
    try:
        second.send(get("/page/2"))
        assert second.read_response()[0] == 200
        return first_reused, second.sock.session_reused  # type: ignore[attr-defined]
    finally:
        second.close()


TLS_VERSIONS = pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2])


@pytest.mark.timeout(30)
@TLS_VERSIONS
def test_tls_sessions_are_resumed_with_tickets(tls_files: TLSFiles, version: ssl.TLSVersion) -> None:
    with TestSite(pages=5, tls=tls_files.server_context(tickets=True)) as site:
        assert _two_connections(site, tls_files, version) == (False, True)
        wait_for(lambda: site.counters().tls_handshakes == 2)
        assert site.counters().tls_resumed == 1


@pytest.mark.timeout(30)
@TLS_VERSIONS
def test_tls_no_tickets_means_no_resumption(tls_files: TLSFiles, version: ssl.TLSVersion) -> None:
    context = tls_files.server_context(tickets=False)
    assert context.num_tickets == 0
    with TestSite(pages=5, tls=context) as site:
        assert _two_connections(site, tls_files, version) == (False, False)
        wait_for(lambda: site.counters().tls_handshakes == 2)
        assert site.counters().tls_resumed == 0


@pytest.mark.timeout(30)
def test_tls_stop_closes_open_tls_connections(tls_files: TLSFiles) -> None:
    site = TestSite(pages=3, tls=tls_files.server_context()).start()
    client = TLSClient(site.ports[0], tls_files.client_context())
    try:
        client.send(get("/"))
        client.read_response()
        site.stop()
        assert client.read_to_eof() == b""
    finally:
        client.close()
    assert site.counters().open_now == 0


@pytest.mark.timeout(30)
def test_plain_site_counts_no_tls_and_a_bad_tls_argument_is_refused() -> None:
    with TestSite(pages=2) as site:
        assert site.base_urls[0].startswith("http://") and site.tls is None
        connection = http.client.HTTPConnection("127.0.0.1", site.ports[0], timeout=10)
        connection.request("GET", "/")
        assert connection.getresponse().status == 200
        connection.close()
        assert site.counters().tls_handshakes == site.counters().tls_failed == 0
    with pytest.raises(ValueError):
        TestSite(tls="cert.pem")  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_tls_testsite_command_serves_https(tls_files: TLSFiles) -> None:
    command = [sys.executable, "-m", "niofetcher", "testsite", "--port", "0", "--pages", "3",
               "--tls-cert", tls_files.cert_file, "--tls-key", tls_files.key_file, "--no-tickets"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        try:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line.startswith("serving https://127.0.0.1:")
            port = urlsplit(line.split()[1]).port
            assert port is not None
            connection = https_connection(tls_files, port)
            try:
                connection.request("GET", "/page/2")
                assert connection.getresponse().status == 200
            finally:
                connection.close()
        finally:
            proc.terminate()
            proc.wait(10)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("which", "message"),
    [
        (["--tls-cert", "CERT"], "--tls-cert and --tls-key must be given together"),
        (["--tls-key", "KEY"], "--tls-cert and --tls-key must be given together"),
        (["--no-tickets"], "--no-tickets needs --tls-cert and --tls-key"),
        (["--tls-cert", "MISSING", "--tls-key", "KEY"], "cannot read"),
        (["--tls-cert", "KEY", "--tls-key", "KEY"], "cannot use --tls-cert"),
    ],
)
def test_tls_testsite_command_refuses_bad_tls_options(tls_files: TLSFiles, which: list[str], message: str) -> None:
    names = {"CERT": tls_files.cert_file, "KEY": tls_files.key_file, "MISSING": tls_files.cert_file + ".missing"}
    args = [names.get(arg, arg) for arg in which]
    done = subprocess.run([sys.executable, "-m", "niofetcher", "testsite", "--port", "0", *args],
                          check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

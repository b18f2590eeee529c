"""HTTP behaviour of a fetch, over real loopback sockets against scripted raw servers.

Proves the FetchResult and FetcherConfig contract (docs/fetcher.md) as a server
sees it: redirects (301 302 303 307 308, method and body rules, credentials
kept within one origin, ``follow_redirects``), ``decode_content`` (gzip,
deflate, br), the framings h11 must get right on the wire (HEAD, 204, 304,
read-until-close, chunked, 1xx), the ``text`` charset rules, the result
fields, the request headers sent (Host, ``user_agent``, ``headers``, bean
headers, method), ``meta`` travelling untouched, keep-alive reuse and the
``host_delay`` / ``host_delay_jitter`` politeness spacing.  Wherever it can,
a test judges by what the server received and counted, not by the client's
own account.
"""

from __future__ import annotations

import gzip
import itertools
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import brotli  # type: ignore[import-untyped,unused-ignore]
import pytest
from conftest import MakeServer
from rawserver import (
    ConnInfo,
    Handler,
    get_unused_port,
    http_response,
    ok,
    read_request,
    serve_keepalive,
)

from niofetcher import FetcherConfig, FetchResult, NIOFetcher, URLBean, __version__

# Failures should show as error results, long before a test's own timeout.
QUICK = {"connect_timeout": 2.0, "read_timeout": 4.0}


# -- helpers -----------------------------------------------------------------


def fetch(*items: str | URLBean, stats: list[Any] | None = None, **config: Any) -> list[FetchResult]:
    """Fetch ``items`` with one fetcher; results in registration order.

    ``stats``, when given, receives the fetcher's final ``stats()``.
    """
    beans = [item if isinstance(item, URLBean) else URLBean(item) for item in items]
    order = {id(bean): i for i, bean in enumerate(beans)}
    with NIOFetcher(FetcherConfig(**{**QUICK, **config})) as fetcher:
        for bean in beans:
            assert fetcher.register(bean)
        results = list(fetcher.results())
        if stats is not None:
            stats.append(fetcher.stats())
    assert len(results) == len(beans)
    return sorted(results, key=lambda r: order[id(r.bean)])


def head_lines(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    """A request head as (request line, [(name, value)])."""
    first, *rest = head.decode("latin-1").split("\r\n")
    pairs = []
    for line in rest:
        name, sep, value = line.partition(":")
        if sep:
            pairs.append((name.strip(), value.strip()))
    return first, pairs


def values(head: bytes, name: str) -> list[str]:
    """Every value of header ``name`` in a request head (case-insensitive)."""
    return [v for k, v in head_lines(head)[1] if k.lower() == name.lower()]


@dataclass
class Seen:
    """One request as the server received it, body included."""

    method: str
    target: str
    head: bytes
    body: bytes
    at: float  # time.monotonic() when its head was complete
    conn: int  # index of the connection it came on


def _read_exchange(sock: socket.socket, buf: bytearray, info: ConnInfo) -> Seen | None:
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None
        buf += data
    at = time.monotonic()
    end = buf.index(b"\r\n\r\n") + 4
    head = bytes(buf[:end])
    del buf[:end]
    length = int((values(head, "content-length") or ["0"])[0])
    while len(buf) < length:
        data = sock.recv(65536)
        if not data:
            return None
        buf += data
    body = bytes(buf[:length])
    del buf[:length]
    method, target, _ = head_lines(head)[0].split(" ", 2)
    return Seen(method, target, head, body, at, info.index)


class App:
    """A keep-alive handler that records every request with its body and answers through ``route``.

    (rawserver's ``read_request`` throws request bodies away; the redirect
    tests need to see them.)
    """

    def __init__(self, route: Callable[[Seen], bytes]) -> None:
        self.route = route
        self.seen: list[Seen] = []
        self._lock = threading.Lock()

    def __call__(self, sock: socket.socket, info: ConnInfo) -> None:
        buf = bytearray()
        while (request := _read_exchange(sock, buf, info)) is not None:
            with self._lock:
                self.seen.append(request)
            response = self.route(request)
            sock.sendall(response)
            if b"\r\nconnection: close\r\n" in response.split(b"\r\n\r\n", 1)[0].lower() + b"\r\n":
                return


def routes(table: dict[str, bytes]) -> App:
    """An App answering by request target; 404 for anything else."""
    return App(lambda seen: table.get(seen.target, http_response(404, b"no route")))


def moved(status: int, location: str) -> bytes:
    return http_response(status, b"", [("Location", location)])


def scripted(*parts: bytes, gap: float = 0.03) -> Handler:
    """Read one request, send ``parts`` one by one with a pause between them, then close."""

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        if read_request(sock, info) is None:
            return
        for i, part in enumerate(parts):
            if i and not info.sleep(gap):
                return
            sock.sendall(part)

    return handler


# -- redirects ---------------------------------------------------------------


@pytest.mark.timeout(15)
def test_redirect_chain_records_each_hop(no_leaks: Any, raw_server: MakeServer) -> None:
    table: dict[str, bytes] = {}
    app = routes(table)
    srv = raw_server(app, max_seconds=15)
    table.update({
        "/start": moved(301, srv.url("/mid/b")),  # absolute
        "/mid/b": moved(302, "c?x=1"),  # relative to /mid/b
        "/mid/c?x=1": http_response(200, b"final", [("Content-Type", "text/plain")]),
    })

    (result,) = fetch(srv.url("/start"))

    assert (result.error, result.status, result.body) == (None, 200, b"final")
    assert result.redirects == [(301, srv.url("/mid/b")), (302, srv.url("/mid/c?x=1"))]
    assert result.url == srv.url("/start")
    assert result.final_url == srv.url("/mid/c?x=1")
    assert [s.target for s in app.seen] == ["/start", "/mid/b", "/mid/c?x=1"]
    assert srv.accepted == 1, "same-origin hops reuse the keep-alive connection"


@pytest.mark.timeout(15)
@pytest.mark.parametrize("status, method, body", [
    (301, "GET", b""),
    (302, "GET", b""),
    (303, "GET", b""),
    (307, "POST", b"name=value&x=1"),
    (308, "POST", b"name=value&x=1"),
])
def test_redirect_method_and_body_as_the_server_sees_them(
    no_leaks: Any, raw_server: MakeServer, status: int, method: str, body: bytes
) -> None:
    app = routes({"/form": moved(status, "/done"), "/done": http_response(200, b"done")})
    srv = raw_server(app, max_seconds=15)
    post = URLBean(srv.url("/form"), method="POST", body=b"name=value&x=1",
                   headers={"Content-Type": "application/x-www-form-urlencoded"})

    (result,) = fetch(post)

    assert (result.error, result.status, result.body) == (None, 200, b"done")
    assert result.redirects == [(status, srv.url("/done"))]
    first, second = app.seen
    assert (first.method, first.target, first.body) == ("POST", "/form", b"name=value&x=1")
    assert (second.method, second.target, second.body) == (method, "/done", body)
    assert values(second.head, "content-length") == ([str(len(body))] if body else [])


@pytest.mark.timeout(15)
def test_cross_origin_redirect_drops_credentials(no_leaks: Any, raw_server: MakeServer) -> None:
    other_app = routes({"/final": http_response(200, b"other origin")})
    other = raw_server(other_app, max_seconds=15)
    app = routes({"/start": moved(302, "/same"), "/same": moved(302, other.url("/final"))})
    srv = raw_server(app, max_seconds=15)
    secrets = {"Authorization": "Bearer s3cret", "Cookie": "session=1"}
    bean = URLBean(srv.url("/start"), headers={**secrets, "X-Trace": "t1"})

    (result,) = fetch(bean)

    assert (result.error, result.status, result.body) == (None, 200, b"other origin")
    assert result.final_url == other.url("/final")
    assert result.redirects == [(302, srv.url("/same")), (302, other.url("/final"))]
    for seen in app.seen:  # within the first origin the credentials stay
        assert values(seen.head, "authorization") == ["Bearer s3cret"]
        assert values(seen.head, "cookie") == ["session=1"]
    (there,) = other_app.seen
    assert values(there.head, "authorization") == []
    assert values(there.head, "cookie") == []
    assert values(there.head, "x-trace") == ["t1"]
    assert values(there.head, "host") == [f"127.0.0.1:{other.port}"]


@pytest.mark.timeout(15)
def test_follow_redirects_false_returns_the_3xx(no_leaks: Any, raw_server: MakeServer) -> None:
    other = raw_server(ok(b"never"), max_seconds=15)
    app = routes({"/start": moved(302, other.url("/x"))})
    srv = raw_server(app, max_seconds=15)

    (result,) = fetch(srv.url("/start"), follow_redirects=False)

    assert (result.error, result.status, result.ok) == (None, 302, False)
    assert result.header("location") == other.url("/x")
    assert result.redirects == []
    assert result.final_url == srv.url("/start")
    assert len(app.seen) == 1
    assert other.accepted == 0


# -- content codings ---------------------------------------------------------

PAGE = b"<p>niofetcher decodes this</p>\n" * 300

CODINGS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "gzip": ("gzip", gzip.compress),
    "deflate-zlib": ("deflate", zlib.compress),
    "deflate-raw": ("deflate", lambda data: zlib.compress(data)[2:-4]),
    "br": ("br", brotli.compress),
}


@pytest.mark.timeout(10)
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("name", list(CODINGS))
def test_content_encoding_is_decoded(no_leaks: Any, raw_server: MakeServer, name: str, chunked: bool) -> None:
    token, encode = CODINGS[name]
    response = http_response(200, encode(PAGE), [("Content-Encoding", token)], chunked=chunked)
    srv = raw_server(serve_keepalive(lambda head: response), max_seconds=10)

    (result,) = fetch(srv.url())

    assert result.error is None
    assert result.body == PAGE
    assert result.header("content-encoding") == token
    (accept,) = values(srv.requests[0], "accept-encoding")
    assert token in [t.strip() for t in accept.split(",")]


@pytest.mark.timeout(10)
def test_decode_content_false_returns_raw_bytes(no_leaks: Any, raw_server: MakeServer) -> None:
    raw = gzip.compress(PAGE)
    srv = raw_server(ok(raw, headers=[("Content-Encoding", "gzip")]), max_seconds=10)

    (result,) = fetch(srv.url(), decode_content=False)

    assert result.error is None
    assert result.body == raw
    assert values(srv.requests[0], "accept-encoding") == []


# -- framing -----------------------------------------------------------------

BODILESS = {
    # A Content-Length on HEAD and 304 describes the representation: a client
    # that waited for those 1000 bytes would hang and lose the connection.
    "HEAD": http_response(200, b"", [("Content-Length", "1000"), ("Content-Type", "text/html")]),
    "204": http_response(204),
    "304": http_response(304, b"", [("Content-Length", "1000"), ("ETag", '"v1"')]),
}


@pytest.mark.timeout(15)
@pytest.mark.parametrize("case", list(BODILESS))
def test_bodiless_response_completes_and_the_connection_is_reused(
    no_leaks: Any, raw_server: MakeServer, case: str
) -> None:
    app = routes({"/first": BODILESS[case], "/after": http_response(200, b"after")})
    srv = raw_server(app, max_seconds=15)
    first = URLBean(srv.url("/first"), method="HEAD" if case == "HEAD" else "GET")

    done, after = fetch(first, srv.url("/after"), max_connections_per_host=1, read_timeout=3.0)

    assert (done.error, done.status, done.body) == (None, 200 if case == "HEAD" else int(case), b"")
    assert (after.error, after.body, after.connection_reused) == (None, b"after", True)
    assert [s.method for s in app.seen] == [first.method, "GET"]
    assert srv.accepted == 1


@pytest.mark.timeout(10)
def test_http10_response_without_length_is_read_until_close(no_leaks: Any, raw_server: MakeServer) -> None:
    srv = raw_server(scripted(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nfirst ", b"second ", b"third"),
                     max_seconds=10)

    (result,) = fetch(srv.url())

    assert (result.error, result.status, result.body) == (None, 200, b"first second third")


@pytest.mark.timeout(10)
def test_chunked_body_is_reassembled(no_leaks: Any, raw_server: MakeServer) -> None:
    srv = raw_server(scripted(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        b"lo\r\n7;ext=1\r\n, world\r\n1",  # a chunk-size line split across sends
        b"0\r\n0123456789abcdef\r\n0\r\nX-Trailer: t\r\n\r\n",
    ), max_seconds=10)

    (result,) = fetch(srv.url())

    assert (result.error, result.status, result.body) == (None, 200, b"hello, world0123456789abcdef")


@pytest.mark.timeout(10)
def test_100_continue_before_the_response_is_ignored(no_leaks: Any, raw_server: MakeServer) -> None:
    srv = raw_server(scripted(
        b"HTTP/1.1 100 Continue\r\nX-Interim: yes\r\n\r\n",
        http_response(200, b"the real one", [("X-Final", "yes")]),
    ), max_seconds=10)

    (result,) = fetch(srv.url())

    assert (result.error, result.status, result.body) == (None, 200, b"the real one")
    assert result.header("x-final") == "yes"
    assert result.header("x-interim") is None


# -- text --------------------------------------------------------------------

CYRILLIC = '<html><head><meta charset="windows-1251"><title>Привет, мир</title></head></html>'
HTTP_EQUIV = '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251"><p>Ёлка</p>'


@pytest.mark.timeout(10)
@pytest.mark.parametrize("content_type, body, text", [
    ("text/html; charset=ISO-8859-1", "café".encode("latin-1"), "café"),
    ("text/html", CYRILLIC.encode("cp1251"), CYRILLIC),
    ("text/html", HTTP_EQUIV.encode("cp1251"), HTTP_EQUIV),
    ("text/html; charset=utf-8", CYRILLIC.encode("utf-8"), CYRILLIC),  # the header beats the meta tag
    ("text/plain", "ok ✓".encode() + b"\xff", "ok ✓\ufffd"),
], ids=["content-type", "meta-charset", "meta-http-equiv", "header-beats-meta", "utf8-default"])
def test_text_is_decoded_by_the_charset_rules(
    no_leaks: Any, raw_server: MakeServer, content_type: str, body: bytes, text: str
) -> None:
    srv = raw_server(ok(body, headers=[("Content-Type", content_type)]), max_seconds=10)
    (result,) = fetch(srv.url())
    assert result.body == body
    assert result.text == text


# -- result fields -----------------------------------------------------------


@pytest.mark.timeout(10)
def test_result_fields(no_leaks: Any, raw_server: MakeServer) -> None:
    srv = raw_server(ok(b"hello", headers=[("X-Custom-Thing", "Some Value")]), max_seconds=10)

    before = time.time()
    first, second = fetch(srv.url("/1"), srv.url("/2"), max_connections_per_host=1)
    after = time.time()

    for result in (first, second):
        assert (result.error, result.status, result.reason, result.ok) == (None, 200, "OK", True)
        assert result.header("x-custom-thing") == result.header("X-CUSTOM-THING") == "Some Value"
        assert result.header("missing") is None and result.header("missing", "dflt") == "dflt"
        assert ("X-Custom-Thing", "Some Value") in result.headers
        assert all(type(k) is str and type(v) is str for k, v in result.headers)
        assert result.elapsed > 0
        assert result.queue_wait >= 0
        assert before + result.elapsed <= result.fetched_at <= after
        assert (result.replayed, result.session_reused) == (False, False)
    assert (first.connection_reused, second.connection_reused) == (False, True)
    assert srv.accepted == 1


@pytest.mark.timeout(10)
@pytest.mark.parametrize("status, is_ok", [(200, True), (204, True), (299, True), (404, False), (500, False), (302, False)])
def test_ok_means_no_error_and_2xx(no_leaks: Any, raw_server: MakeServer, status: int, is_ok: bool) -> None:
    srv = raw_server(serve_keepalive(lambda head: http_response(status, b"", [("Location", "/elsewhere")])),
                     max_seconds=10)
    (result,) = fetch(srv.url(), follow_redirects=False)
    assert (result.error, result.status, result.ok) == (None, status, is_ok)


@pytest.mark.timeout(10)
def test_ok_is_false_for_an_error_result(no_leaks: Any) -> None:
    (result,) = fetch(f"http://127.0.0.1:{get_unused_port()}/")
    assert result.error == "connect_error"
    assert (result.status, result.ok) == (None, False)


# -- request headers ---------------------------------------------------------


@pytest.mark.timeout(10)
def test_request_line_host_and_default_user_agent(no_leaks: Any, raw_server: MakeServer) -> None:
    srv = raw_server(ok(), max_seconds=10)
    (result,) = fetch(srv.url("/path/page?q=1&r=2"))
    assert result.ok
    (head,) = srv.requests
    assert head_lines(head)[0] == "GET /path/page?q=1&r=2 HTTP/1.1"
    assert values(head, "host") == [f"127.0.0.1:{srv.port}"]
    assert values(head, "user-agent") == [f"niofetcher/{__version__}"]


@pytest.mark.timeout(10)
def test_config_and_bean_headers_are_sent_and_the_bean_wins(no_leaks: Any, raw_server: MakeServer) -> None:
    srv = raw_server(ok(), max_seconds=10)
    bean = URLBean(srv.url(), headers={"x-both": "bean", "X-Bean": "b"})
    (result,) = fetch(bean, user_agent="TestBot/2.0 (+http://bot.test)",
                      headers={"X-Config": "c", "X-Both": "config"})
    assert result.ok
    (head,) = srv.requests
    assert values(head, "x-config") == ["c"]
    assert values(head, "x-bean") == ["b"]
    assert values(head, "x-both") == ["bean"]
    assert values(head, "user-agent") == ["TestBot/2.0 (+http://bot.test)"]


@pytest.mark.timeout(10)
def test_custom_method_is_sent(no_leaks: Any, raw_server: MakeServer) -> None:
    srv = raw_server(ok(b"listed"), max_seconds=10)
    (result,) = fetch(URLBean(srv.url("/dav/"), method="PROPFIND", headers={"Depth": "1"}))
    assert (result.error, result.body) == (None, b"listed")
    (head,) = srv.requests
    assert head_lines(head)[0] == "PROPFIND /dav/ HTTP/1.1"
    assert values(head, "depth") == ["1"]


@pytest.mark.timeout(10)
def test_meta_travels_to_the_result_untouched(no_leaks: Any, raw_server: MakeServer) -> None:
    srv = raw_server(ok(), max_seconds=10)
    marker = object()
    good = URLBean(srv.url(), meta={"depth": 3, "parent": "http://a.test/", "obj": marker})
    bad = URLBean(f"http://127.0.0.1:{get_unused_port()}/", meta={"depth": 4, "obj": marker})
    snapshots = [dict(good.meta), dict(bad.meta)]

    results = fetch(good, bad)

    for bean, result, snapshot in zip((good, bad), results, snapshots):
        assert result.bean is bean
        assert result.bean.meta is bean.meta
        assert result.bean.meta == snapshot
        assert result.bean.meta["obj"] is marker
    assert results[0].ok and results[1].error == "connect_error"


# -- keep-alive and politeness -------------------------------------------------


@pytest.mark.timeout(10)
def test_keepalive_reuse_counted_by_the_server(no_leaks: Any, raw_server: MakeServer) -> None:
    n = 6
    srv = raw_server(ok(b"again"), max_seconds=10)
    stats: list[Any] = []

    results = fetch(*(srv.url(f"/{i}") for i in range(n)), max_connections_per_host=1, stats=stats)

    assert all(r.ok for r in results)
    assert srv.accepted == 1
    assert len(srv.requests) == n
    assert stats[0].reused_requests == n - 1
    assert stats[0].connections_opened == 1
    assert sum(r.connection_reused for r in results) == n - 1


def answer_before_the_body(seen: list[tuple[bytes, int]]) -> Handler:
    """Keep-alive, answering each request as soon as its head is in (as nginx answers a 413 or a
    401), then reading its body and throwing it away; ``seen`` gets each request line and body length."""

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        buf = bytearray()
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            head, _, rest = bytes(buf).partition(b"\r\n\r\n")
            buf[:] = rest
            lines = head.split(b"\r\n")
            length = next((int(v) for k, _, v in (line.partition(b":") for line in lines[1:])
                           if k.strip().lower() == b"content-length"), 0)
            seen.append((lines[0], length))
            sock.sendall(http_response(200, b"early"))
            if not info.sleep(0.3):  # the client has the whole answer long before its body is sent
                return
            while length:
                if not buf:
                    data = sock.recv(min(length, 1 << 20))
                    if not data:
                        return
                    buf += data
                taken = min(length, len(buf))
                del buf[:taken]
                length -= taken

    return handler


def test_an_answer_before_the_body_is_sent_closes_the_connection(no_leaks: Any, raw_server: MakeServer) -> None:
    """The rest of an unsent body would go out ahead of the next request on a kept-alive
    connection, and the server would read that request as body bytes: the connection closes."""
    seen: list[tuple[bytes, int]] = []
    srv = raw_server(answer_before_the_body(seen), max_seconds=20)
    body = b"x" * (16 << 20)  # more than the socket buffers take while the server does not read

    results = fetch(URLBean(srv.url("/upload"), method="POST", body=body), srv.url("/next"),
                    max_connections_per_host=1)

    assert [(r.status, r.body) for r in results] == [(200, b"early"), (200, b"early")], results
    assert not results[1].connection_reused
    assert seen == [(b"POST /upload HTTP/1.1", len(body)), (b"GET /next HTTP/1.1", 0)]
    assert srv.accepted == 2


# Loopback delivery and thread wake-up shift each arrival by a little;
# the scheduler's own spacing is exact.
ARRIVAL_SLACK = 0.02


def _arrival_gaps(app: App) -> list[float]:
    times = sorted(s.at for s in app.seen)
    return [b - a for a, b in itertools.pairwise(times)]


@pytest.mark.timeout(15)
def test_host_delay_spaces_request_starts(no_leaks: Any, raw_server: MakeServer) -> None:
    delay = 0.2
    app = App(lambda seen: http_response(200, b"polite"))
    srv = raw_server(app, max_seconds=15)

    results = fetch(*(srv.url(f"/{i}") for i in range(4)), host_delay=delay, max_connections_per_host=2)

    assert all(r.ok for r in results)
    gaps = _arrival_gaps(app)
    assert len(gaps) == 3
    assert min(gaps) >= delay - ARRIVAL_SLACK, gaps


@pytest.mark.timeout(15)
def test_host_delay_jitter_keeps_spacing_within_its_bounds(no_leaks: Any, raw_server: MakeServer) -> None:
    delay, jitter = 0.2, 0.5
    app = App(lambda seen: http_response(200, b"polite"))
    srv = raw_server(app, max_seconds=15)

    results = fetch(*(srv.url(f"/{i}") for i in range(6)), host_delay=delay, host_delay_jitter=jitter)

    assert all(r.ok for r in results)
    gaps = _arrival_gaps(app)
    assert len(gaps) == 5
    assert min(gaps) >= delay * (1 - jitter) - ARRIVAL_SLACK, gaps
    # Generous: only a gross overshoot (a jitter that multiplies the delay) may fail this.
    assert max(gaps) <= delay * (1 + jitter) + 0.4, gaps
    # Five draws from a 0.2 s wide range all within 10 ms of each other: p < 1e-4.
    assert max(gaps) - min(gaps) > 0.01, f"the spacing was not randomised: {gaps}"

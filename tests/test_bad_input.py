"""Bad input never stops the loop (docs/guarantees.md, "bad input stays with its URL") and memory stays bounded ("memory does not grow").

Every faulty endpoint -- malformed, truncated or reset responses, oversize
heads and bodies, a decompression bomb, slow servers, redirect loops, DNS
failures, refused or forbidden addresses -- must end as exactly one error
result of the right ``ErrorKind`` for that URL, with a readable
``error_detail``, while a good URL on a good server, fetched at the same
time and again afterwards with the same fetcher, succeeds.

Not covered here: a real TCP connect timeout needs a peer that never answers
a SYN.  On loopback the only way is a listener whose accept queue is full;
that case probes the kernel first and skips itself where the trick does not
work (``tcp_abort_on_overflow`` set, other kernels).
"""

from __future__ import annotations

import contextlib
import gc
import resource
import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
import pytest
from conftest import MakeServer, results_by_url
from rawserver import (
    Handler,
    RawServer,
    big_body,
    broken_chunked,
    close_after_head,
    close_before_response,
    garbage_status,
    get_unused_port,
    gzip_bomb,
    http_response,
    ok,
    oversize_header,
    redirect,
    reset_mid_body,
    serve_keepalive,
    slow_body,
    truncated_body,
)

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher, URLBean
from niofetcher.testing import TestSite

# Generous: only the case under test shortens the timeout it is about.
BASE_CONFIG: dict[str, Any] = {"connect_timeout": 3.0, "read_timeout": 3.0, "request_timeout": 10.0}
GOOD_BODY = b"good page"
MiB = 1 << 20


def fetch(fetcher: NIOFetcher, url: str) -> FetchResult:
    return results_by_url(fetcher, [url])[url]


def assert_good(result: FetchResult) -> None:
    assert result.ok, f"the good URL failed: {result.error} {result.error_detail!r}"
    assert result.body == GOOD_BODY


def assert_readable_reason(detail: str) -> None:
    assert detail.strip(), "error_detail is empty"
    assert detail.isprintable(), f"error_detail is not readable text: {detail!r}"


def request_paths(srv: RawServer) -> list[bytes]:
    return [head.split(b" ", 2)[1] for head in srv.requests]


# -- the faulty endpoints --------------------------------------------------------


@dataclass
class Env:
    """What a case may use to build its endpoint."""

    serve: MakeServer  # the raw_server factory
    good: RawServer  # the good server, on 127.0.0.1
    stack: contextlib.ExitStack  # closed after the fetcher has shut down


@dataclass
class Bad:
    """A faulty endpoint: the URL to fetch, the config it needs, and its server-side checks."""

    url: str
    config: dict[str, Any] = field(default_factory=dict)
    check: Callable[[FetchResult], None] = lambda result: None
    release: Callable[[], None] = lambda: None  # unblocks whatever the endpoint holds, before shutdown


Make = Callable[[Env], Bad]


@dataclass(frozen=True)
class Case:
    make: Make
    kind: ErrorKind
    status: int | None  # None: no response head came
    detail: str = ""  # a word the reason must contain (case-insensitive)
    good_after: bool = True  # False when the config itself forbids the good server


def served(handler: Callable[[], Handler], path: str = "/", **config: Any) -> Make:
    """An endpoint played by a RawServer handler on 127.0.0.1."""

    def make(env: Env) -> Bad:
        return Bad(env.serve(handler()).url(path), config)

    return make


def never_contacted(srv: RawServer) -> Callable[[FetchResult], None]:
    def check(result: FetchResult) -> None:
        assert srv.accepted == 0, "the fetcher connected to an address it had to refuse"

    return check


def redirect_loop(env: Env) -> Bad:
    """/a -> /b -> /a."""

    def answer(head: bytes) -> bytes:
        target = "/b" if head.split(b" ", 2)[1] == b"/a" else "/a"
        return http_response(302, headers=[("Location", target)])

    srv = env.serve(serve_keepalive(answer))

    def check(result: FetchResult) -> None:
        # Caught at the first URL seen twice, not after going round max_redirects times.
        assert request_paths(srv)[:2] == [b"/a", b"/b"] and len(srv.requests) <= 3, request_paths(srv)

    return Bad(srv.url("/a"), {}, check)


def endless_chain(env: Env) -> Bad:
    """/0 -> /1 -> /2 -> ... with max_redirects=3."""

    def answer(head: bytes) -> bytes:
        n = int(head.split(b" ", 2)[1][1:])
        return http_response(302, headers=[("Location", f"/{n + 1}")])

    srv = env.serve(serve_keepalive(answer))

    def check(result: FetchResult) -> None:
        assert request_paths(srv) == [b"/0", b"/1", b"/2", b"/3"], "max_redirects=3 allows 4 requests, no more"
        assert [status for status, _ in result.redirects] == [302, 302, 302]

    return Bad(srv.url("/0"), {"max_redirects": 3}, check)


def refused_port(env: Env) -> Bad:
    return Bad(f"http://127.0.0.1:{get_unused_port()}/")


def unknown_host(env: Env) -> Bad:
    def resolver(host: str, port: int) -> list:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    return Bad("http://nowhere.test/", {"resolver": resolver})


def hanging_resolver(env: Env) -> Bad:
    """A lookup that takes longer than connect_timeout (until released)."""
    gate = threading.Event()

    def resolver(host: str, port: int) -> list:
        gate.wait(10.0)
        return [(socket.AF_INET, ("127.0.0.1", env.good.port))]

    return Bad("http://slow-dns.test/", {"resolver": resolver, "connect_timeout": 0.3}, release=gate.set)


def unanswered_syn(env: Env) -> Bad:
    """A listener with backlog 0 whose accept queue is already full: Linux drops further SYNs."""
    listener = env.stack.enter_context(socket.socket())
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    env.stack.enter_context(socket.create_connection(address, timeout=2.0))  # fills the queue
    probe = env.stack.enter_context(socket.socket())
    probe.setblocking(False)
    probe.connect_ex(address)
    _, writable, _ = select.select([], [probe], [], 0.2)
    if writable:
        pytest.skip("this kernel answers a SYN to a full accept queue: no loopback connect timeout")
    return Bad(f"http://127.0.0.1:{address[1]}/", {"connect_timeout": 0.3})


def loopback_denied(env: Env) -> Bad:
    srv = env.serve(ok())
    config = {"deny_networks": ["loopback"], "resolve": {"local.test": "127.0.0.1"}}
    return Bad(f"http://local.test:{srv.port}/", config, never_contacted(srv))


def cidr_denied(env: Env) -> Bad:
    srv = env.serve(ok(), host="127.0.0.2")
    config = {"deny_networks": ["127.0.0.2/32"], "resolve": {"denied.test": "127.0.0.2"}}
    return Bad(f"http://denied.test:{srv.port}/", config, never_contacted(srv))


def redirect_to_denied(env: Env) -> Bad:
    """An allowed name redirects to a name that resolves into a denied network."""
    denied = env.serve(ok(), host="127.0.0.2")
    target = f"http://denied.test:{denied.port}/"
    allowed = env.serve(redirect(target))
    config = {"deny_networks": ["127.0.0.2/32"], "resolve": {"allowed.test": "127.0.0.1", "denied.test": "127.0.0.2"}}

    def check(result: FetchResult) -> None:
        assert result.redirects == [(302, target)]
        assert len(allowed.requests) == 1
        never_contacted(denied)(result)

    return Bad(f"http://allowed.test:{allowed.port}/", config, check)


def port_not_allowed(env: Env) -> Bad:
    srv = env.serve(ok())
    return Bad(srv.url(), {"allowed_ports": [env.good.port]}, never_contacted(srv))


CASES = [
    pytest.param(Case(served(garbage_status), ErrorKind.PROTOCOL_ERROR, None), id="garbage-status-line"),
    pytest.param(Case(served(truncated_body), ErrorKind.CONNECTION_CLOSED, 200), id="truncated-body"),
    pytest.param(Case(served(close_before_response), ErrorKind.CONNECTION_CLOSED, None), id="close-before-any-byte"),
    pytest.param(Case(served(close_after_head), ErrorKind.CONNECTION_CLOSED, 200), id="close-after-head"),
    pytest.param(Case(served(reset_mid_body), ErrorKind.CONNECTION_CLOSED, 200), id="reset-mid-body"),
    pytest.param(Case(served(broken_chunked), ErrorKind.PROTOCOL_ERROR, 200), id="broken-chunked"),
    pytest.param(
        # 40 KB sent at once: it reaches the client in one read, as a fast server's head does.
        Case(served(lambda: oversize_header(40_000), max_header_size=16 * 1024),
             ErrorKind.PROTOCOL_ERROR, None, "max_header_size"),
        id="oversize-head-in-one-read",
    ),
    pytest.param(
        Case(served(lambda: oversize_header(200_000)), ErrorKind.PROTOCOL_ERROR, None, "max_header_size"),
        id="oversize-head-streamed",
    ),
    pytest.param(
        Case(served(lambda: slow_body(interval=0.5, total_seconds=5.0), read_timeout=0.2),
             ErrorKind.READ_TIMEOUT, 200),
        id="slowloris-read-timeout",
    ),
    pytest.param(
        Case(served(lambda: slow_body(interval=0.05, total_seconds=3.0), low_speed_limit=1000, low_speed_time=0.3),
             ErrorKind.READ_TIMEOUT, 200, "low_speed_limit"),
        id="below-low-speed-limit",
    ),
    pytest.param(
        Case(served(lambda: slow_body(interval=0.05, total_seconds=3.0), request_timeout=0.4),
             ErrorKind.TIMEOUT, 200, "request_timeout"),
        id="request-timeout-while-trickling",
    ),
    pytest.param(
        Case(served(lambda: big_body(MiB), max_body_size=64 * 1024), ErrorKind.TOO_LARGE, 200, "max_body_size"),
        id="oversize-plain-body",
    ),
    pytest.param(Case(redirect_loop, ErrorKind.TOO_MANY_REDIRECTS, 302), id="redirect-loop"),
    pytest.param(Case(endless_chain, ErrorKind.TOO_MANY_REDIRECTS, 302, "max_redirects"), id="redirect-chain"),
    pytest.param(
        Case(served(lambda: redirect("ftp://127.0.0.1/file")), ErrorKind.PROTOCOL_ERROR, 302, "ftp://"),
        id="redirect-to-ftp",
    ),
    pytest.param(Case(refused_port, ErrorKind.CONNECT_ERROR, None, "refused"), id="connection-refused"),
    pytest.param(Case(unknown_host, ErrorKind.DNS_ERROR, None, "nowhere.test"), id="unknown-host"),
    pytest.param(Case(hanging_resolver, ErrorKind.DNS_ERROR, None), id="resolver-slower-than-connect-timeout"),
    pytest.param(Case(unanswered_syn, ErrorKind.CONNECT_TIMEOUT, None), id="connect-timeout"),
    pytest.param(
        Case(loopback_denied, ErrorKind.CONNECT_ERROR, None, "denied network", good_after=False),
        id="deny-loopback",
    ),
    pytest.param(Case(cidr_denied, ErrorKind.CONNECT_ERROR, None, "denied network"), id="deny-cidr"),
    pytest.param(Case(redirect_to_denied, ErrorKind.CONNECT_ERROR, None, "denied network"), id="redirect-to-denied"),
    pytest.param(Case(port_not_allowed, ErrorKind.CONNECT_ERROR, None, "allowed_ports"), id="port-not-allowed"),
]


@pytest.mark.timeout(20)
@pytest.mark.parametrize("case", CASES)
def test_bad_endpoint_becomes_one_error_result_and_the_loop_goes_on(
    case: Case, raw_server: MakeServer, no_leaks: object
) -> None:
    good = raw_server(ok(GOOD_BODY))
    with contextlib.ExitStack() as stack:
        bad = case.make(Env(raw_server, good, stack))
        with NIOFetcher(FetcherConfig(**{**BASE_CONFIG, **bad.config})) as fetcher:
            during = [good.url("/during")] if case.good_after else []
            results = results_by_url(fetcher, [bad.url, *during])
            bad.release()
            result = results[bad.url]
            assert result.error == case.kind, f"{result.error}: {result.error_detail!r}"
            assert not result.ok
            assert result.status == case.status
            assert_readable_reason(result.error_detail)
            assert case.detail.lower() in result.error_detail.lower()
            bad.check(result)
            if case.good_after:
                assert_good(results[good.url("/during")])
                assert_good(fetch(fetcher, good.url("/after")))
                assert request_paths(good) == [b"/during", b"/after"]
            assert fetcher.join(5.0)
            assert fetcher.drain() == [], "a registration produced more than one result"
            stats = fetcher.stats()
            assert stats.completed == stats.registered


class PeakRSS:
    """The process's peak resident set size while the block runs (a 5 ms sampler, plus ru_maxrss)."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="test-rss-sampler", daemon=True)
        self.before = 0
        self.peak = 0
        self._maxrss_before = 0

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __enter__(self) -> PeakRSS:
        gc.collect()
        self.before = self.peak = self._proc.memory_info().rss
        self._maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if maxrss > self._maxrss_before:  # a new lifetime peak was set during the block: that is the peak
            self.peak = max(self.peak, maxrss * 1024)

    @property
    def growth(self) -> int:
        return self.peak - self.before


@pytest.mark.timeout(30)
def test_gzip_bomb_is_too_large_and_memory_stays_bounded(raw_server: MakeServer, no_leaks: object) -> None:
    bomb = raw_server(gzip_bomb(1 << 30))  # ~1 MB on the wire, 1 GiB decoded; built here, before measuring
    good = raw_server(ok(GOOD_BODY))
    with NIOFetcher(FetcherConfig(**BASE_CONFIG)) as fetcher:
        with PeakRSS() as rss:
            result = fetch(fetcher, bomb.url("/bomb"))
        assert result.error == ErrorKind.TOO_LARGE, f"{result.error}: {result.error_detail!r}"
        assert result.status == 200
        assert "max_body_size" in result.error_detail
        assert rss.growth < 100 * MiB, f"RSS grew by {rss.growth / MiB:.0f} MiB while decoding the bomb"
        assert_good(fetch(fetcher, good.url("/after")))


@pytest.mark.timeout(15)
def test_next_address_is_tried_when_one_refuses(raw_server: MakeServer, no_leaks: object) -> None:
    good = raw_server(ok(GOOD_BODY))
    answers = [(socket.AF_INET, ("127.0.0.3", good.port)), (socket.AF_INET, ("127.0.0.1", good.port))]

    def resolver(host: str, port: int) -> list:
        assert (host, port) == ("multi.test", good.port)
        return answers

    with NIOFetcher(FetcherConfig(**BASE_CONFIG, resolver=resolver)) as fetcher:
        assert_good(fetch(fetcher, f"http://multi.test:{good.port}/"))
    assert good.accepted == 1


EXCESS_AFTER_RESPONSE = [
    pytest.param(http_response(200, b"page"), http_response(200, b"smuggled"), 200, b"page", id="second-response"),
    pytest.param(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", b"stray", 204, b"", id="204-with-body"),
    pytest.param(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n", b"abc", 304, b"", id="304-with-body"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n", b"pageEXTRA", 200, b"page", id="body-past-length"),
]


@pytest.mark.timeout(15)
@pytest.mark.parametrize("response, excess, status, body", EXCESS_AFTER_RESPONSE)
def test_bytes_past_the_end_of_a_response_never_answer_the_next_request(
    response: bytes, excess: bytes, status: int, body: bytes, raw_server: MakeServer, no_leaks: object
) -> None:
    """A server that sends more than one response's worth (in the same packet) must not desynchronise
    the connection: the next URL gets the answer to its own request, not the leftovers."""
    srv = raw_server(serve_keepalive(lambda head: response + excess))
    with NIOFetcher(FetcherConfig(**BASE_CONFIG, max_connections_per_host=1)) as fetcher:
        for path in ("/1", "/2", "/3"):
            result = fetch(fetcher, srv.url(path))
            assert (result.error, result.status, result.body) == (None, status, body), (
                f"{path}: {result.error} {result.error_detail!r} status={result.status} body={result.body!r}"
            )
    assert request_paths(srv) == [b"/1", b"/2", b"/3"]


@pytest.mark.timeout(15)
def test_a_request_refused_on_a_reused_connection_reports_no_earlier_response(no_leaks: object) -> None:
    """Headers h11 refuses fail that URL alone, with no status or headers of the page fetched before it on the
    same keep-alive connection, and the next URL is fetched."""
    with TestSite(hosts=1, pages=3) as site, NIOFetcher(FetcherConfig(max_connections_per_host=1)) as fetcher:
        base = site.base_urls[0]
        fetcher.register(f"{base}page/1")
        first = fetcher.get(timeout=10)
        assert first is not None and first.status == 200
        fetcher.register(URLBean(f"{base}page/2", headers={"X-Bad": "a\r\nb"}))
        refused = fetcher.get(timeout=10)
        fetcher.register(f"{base}page/0")
        after = fetcher.get(timeout=10)
    assert refused is not None and refused.error is ErrorKind.PROTOCOL_ERROR
    assert "Illegal header value" in refused.error_detail
    assert (refused.status, refused.headers, refused.body) == (None, [], b"")
    assert after is not None and after.status == 200
    assert site.counters().requests == 2

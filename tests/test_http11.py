"""The sans-IO HTTP/1.1 layer (niofetcher/http11.py) against an h11 server in memory.

No sockets: the client's request bytes go into an ``h11.Connection(SERVER)``
and the server's response bytes come back through ``ClientHTTP11.receive``,
the ConnectionPair pattern of h11's own tests.  This proves the protocol half
of docs/guarantees.md, "bad input stays with its URL" (malformed, truncated and oversize responses become
one error kind each: ``connection_closed``, ``protocol_error``, ``too_large``),
the keep-alive decision behind connection reuse, and the ``response_started``
flag on which guarantee 6 (replaying a request on a stale connection) rests.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Sequence

import h11
import pytest

from niofetcher.errors import ErrorKind, FetchFailure
from niofetcher.http11 import ClientHTTP11
from niofetcher.models import SharedHeaders

pytestmark = pytest.mark.timeout(10)

Headers = Sequence[tuple[str, str]]
ResponseHeaders = Sequence[tuple[str, "str | bytes"]]


def _latin1(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("latin-1")


class Pair:
    """A ClientHTTP11 and an h11 server joined by a fake network link."""

    def __init__(
        self, max_header_size: int = 64 * 1024, max_body_size: int = 1 << 20, decode: bool = True, record: bool = False,
    ) -> None:
        self.client = ClientHTTP11(max_header_size, max_body_size, decode, record)
        self.server = h11.Connection(h11.SERVER)

    def request(self, method: str = "GET", target: str = "/", headers: Headers | None = None) -> h11.Request:
        """Send a request from the client; returns it as the server parsed it."""
        wire = self.client.start_request(method, target, [("Host", "a.test"), *(headers or [])], b"")
        self.server.receive_data(wire)
        event = self.server.next_event()
        assert isinstance(event, h11.Request)
        assert isinstance(self.server.next_event(), h11.EndOfMessage)
        return event

    def respond(
        self, status: int = 200, headers: ResponseHeaders = (), body: bytes = b"", reason: bytes = b""
    ) -> bytes:
        """The server's bytes for a whole response."""
        raw = [(_latin1(name), _latin1(value)) for name, value in headers]
        out = self.server.send(h11.Response(status_code=status, headers=raw, reason=reason))
        assert out is not None
        if body:
            out += self.server.send(h11.Data(data=body)) or b""
        return out + (self.server.send(h11.EndOfMessage()) or b"")

    def feed(self, data: bytes, piece: int) -> list[bool]:
        """Hand ``data`` to the client ``piece`` bytes at a time; what each receive() returned."""
        return [self.client.receive(data[i:i + piece]) for i in range(0, len(data), piece)]


def failure_of(client: ClientHTTP11, *pieces: bytes) -> FetchFailure:
    """Feed ``pieces`` in turn and return the FetchFailure that one of them must raise."""
    with pytest.raises(FetchFailure) as caught:
        for piece in pieces:
            client.receive(piece)
    return caught.value


@pytest.mark.parametrize("framing", [[("Content-Length", "26")], []], ids=["content-length", "chunked"])
def test__response_in_one_byte_pieces(framing: Headers) -> None:
    pair = Pair()
    pair.request()
    body = b"abcdefghijklmnopqrstuvwxyz"
    wire = pair.respond(201, [("X-Mixed-Case", b"Value \xe9"), *framing], body, reason=b"Created")
    assert (b"chunked" in wire) == (not framing)

    done = pair.feed(wire, 1)

    assert done == [False] * (len(wire) - 1) + [True]
    client = pair.client
    assert (client.status, client.reason, client.body) == (201, "Created", body)
    assert ("X-Mixed-Case", "Value \xe9") in client.headers
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in client.headers)


def test__keep_alive_cycle_then_a_second_exchange() -> None:
    pair = Pair()
    pair.request(target="/one")
    assert pair.feed(pair.respond(200, [("X-First", "1"), ("Content-Length", "3")], b"one"), 4096) == [True]
    assert pair.client.next_cycle() is True
    pair.server.start_next_cycle()

    second = pair.request(target="/two")
    assert second.target == b"/two"
    assert pair.feed(pair.respond(404, [("Content-Length", "3")], b"two"), 4096) == [True]

    client = pair.client
    assert (client.status, client.body) == (404, b"two")
    assert not any(name == "X-First" for name, _ in client.headers), "headers of the first response leaked"
    assert client.next_cycle() is True


@pytest.mark.parametrize("side", ["response", "request"])
def test__connection_close_ends_the_cycle(side: str) -> None:
    pair = Pair()
    close = [("Connection", "close")]
    pair.request(headers=close if side == "request" else None)
    wire = pair.respond(200, [("Content-Length", "2")] + (close if side == "response" else []), b"ok")
    assert pair.feed(wire, 4096) == [True]
    assert pair.client.body == b"ok"
    assert pair.client.next_cycle() is False


def test__http10_body_read_until_close() -> None:
    pair = Pair()
    pair.request()
    client = pair.client
    assert client.receive(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhel") is False
    assert client.receive(b"lo, ") is False
    assert client.receive(b"world") is False
    assert client.receive(b"") is True  # the peer's close ends the body
    assert (client.status, client.body) == (200, b"hello, world")
    assert client.next_cycle() is False


@pytest.mark.parametrize("received", [
    b"",
    b"HTTP/1.1 200 OK\r\nContent-Le",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n012",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
], ids=["nothing", "half-head", "short-content-length", "unterminated-chunked"])
def test__eof_before_the_response_ends_is_connection_closed(received: bytes) -> None:
    pair = Pair()
    pair.request()
    failure = failure_of(pair.client, received, b"")
    assert failure.kind is ErrorKind.CONNECTION_CLOSED


@pytest.mark.parametrize("status_line", [
    b"HELLO WORLD",
    b"HTTP/1.1 abc OK",
    b"HTTP/1.1 2000 OK",
    b"HTTP/x 200 OK",
    b"\x16\x03\x01\x00\x05 binary",
])
def test__malformed_status_line_is_protocol_error(status_line: bytes) -> None:
    pair = Pair()
    pair.request()
    failure = failure_of(pair.client, status_line + b"\r\nContent-Length: 0\r\n\r\n")
    assert failure.kind is ErrorKind.PROTOCOL_ERROR


def _head_of(size: int) -> bytes:
    """A complete response head (empty body) of exactly ``size`` bytes."""
    start, end = b"HTTP/1.1 200 OK\r\n", b"Content-Length: 0\r\n\r\n"
    filler = size - len(start) - len(end) - len(b"X-Pad: \r\n")
    head = start + b"X-Pad: " + b"p" * filler + b"\r\n" + end
    assert len(head) == size
    return head


@pytest.mark.parametrize("piece", [1, 700, 1 << 16], ids=["byte-by-byte", "in-pieces", "in-one-piece"])
def test__head_over_max_header_size_is_protocol_error(piece: int) -> None:
    pair = Pair(max_header_size=1024)
    pair.request()
    with pytest.raises(FetchFailure) as caught:
        pair.feed(_head_of(1500), piece)
    assert caught.value.kind is ErrorKind.PROTOCOL_ERROR


def test__head_within_max_header_size_is_accepted() -> None:
    pair = Pair(max_header_size=1024)
    pair.request()
    assert pair.feed(_head_of(1000), 1)[-1] is True
    assert pair.client.status == 200


@pytest.mark.parametrize("size, encoding, fails", [
    (100, None, False),
    (101, None, True),
    (100, "gzip", False),
    (101, "gzip", True),  # the cap applies to the decoded body
], ids=["at-limit", "over-limit", "gzip-at-limit", "gzip-over-limit"])
def test__body_over_max_body_size_is_too_large(size: int, encoding: str | None, fails: bool) -> None:
    pair = Pair(max_body_size=100)
    pair.request()
    body = b"z" * size
    headers = [("Content-Encoding", encoding)] if encoding else []
    wire = pair.respond(200, headers, gzip.compress(body) if encoding else body)
    if fails:
        failure = failure_of(pair.client, wire)
        assert failure.kind is ErrorKind.TOO_LARGE
    else:
        assert pair.feed(wire, 4096) == [True]
        assert pair.client.body == body


def test__response_started_only_from_the_first_byte() -> None:
    pair = Pair()
    client = pair.client
    assert client.response_started is False
    pair.request()
    assert client.response_started is False, "sending the request is not a response byte"
    wire = pair.respond(200, [("Content-Length", "1")], b"x")
    client.receive(wire[:1])
    assert client.response_started is True
    assert client.receive(wire[1:]) is True
    assert client.response_started is True
    assert client.next_cycle() is True
    pair.server.start_next_cycle()
    pair.request()
    assert client.response_started is False, "a new exchange starts unstarted"


def test__eof_without_a_byte_leaves_response_unstarted() -> None:
    pair = Pair()
    pair.request()
    failure = failure_of(pair.client, b"")
    assert failure.kind is ErrorKind.CONNECTION_CLOSED
    assert pair.client.response_started is False  # so the engine may replay the request


@pytest.mark.parametrize("interim", [
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n",
])
def test__informational_responses_are_skipped(interim: bytes) -> None:
    pair = Pair()
    pair.request()
    wire = interim + pair.respond(200, [("Content-Length", "4")], b"real")
    assert pair.feed(wire, 3)[-1] is True
    client = pair.client
    assert (client.status, client.body) == (200, b"real")
    assert not any(name.lower() == "link" for name, _ in client.headers)


@pytest.mark.parametrize("method, status", [("HEAD", 200), ("GET", 204), ("GET", 304)])
def test__bodiless_responses_complete_at_the_head(method: str, status: int) -> None:
    pair = Pair()
    pair.request(method=method)
    # A Content-Length here describes the representation, not a body that follows.
    length = [] if status == 204 else [("Content-Length", "1000")]
    head = f"HTTP/1.1 {status} X\r\n".encode() + b"".join(f"{k}: {v}\r\n".encode() for k, v in length) + b"\r\n"
    assert pair.feed(head, len(head)) == [True]
    assert (pair.client.status, pair.client.body) == (status, b"")
    assert pair.client.next_cycle() is True


def test__unsendable_request_is_protocol_error() -> None:
    client = ClientHTTP11(1024, 1024, True)
    with pytest.raises(FetchFailure) as caught:
        client.start_request("GET", "/", [("Host", "a.test"), ("X-Bad", "line\r\nbreak")], b"")
    assert caught.value.kind is ErrorKind.PROTOCOL_ERROR


@pytest.mark.parametrize(("raw", "text"), [
    (b"/dir/\xc3\xbcn\xc3\xaf.html", "/dir/\u00fcn\u00ef.html"),  # raw UTF-8, as nginx sends it
    (b"/dir/\xfcn.html", "/dir/\u00fcn.html"),  # not UTF-8: Latin-1
    (b"/dir/%C3%BC.html", "/dir/%C3%BC.html"),  # ASCII stays as it is
])
def test__location_is_utf8_first_then_latin1(raw: bytes, text: str) -> None:
    """docs/guarantees.md, "URLs": a redirect Location is decoded as UTF-8 first; other header values stay Latin-1."""
    pair = Pair()
    pair.request()
    wire = pair.respond(301, [("location", raw), ("X-Other", b"\xc3\xbc"), ("Content-Length", "0")])
    assert pair.feed(wire, 4096) == [True]
    assert ("location", text) in pair.client.headers
    assert ("X-Other", "\xc3\xbc") in pair.client.headers


@pytest.mark.parametrize("shared", [True, False], ids=["shared-headers", "plain-list"])
def test__a_recorded_exchange_is_what_went_over_the_wire(shared: bool) -> None:
    pair = Pair(record=True)
    sent = [("Host", "a.test"), ("User-Agent", "ua/1"), ("X-Mixed-Case", "v")]
    wire = pair.client.start_request("GET", "/p?q=1", SharedHeaders(sent) if shared else sent, b"")
    pair.server.receive_data(wire)
    assert isinstance(pair.server.next_event(), h11.Request)
    packed = gzip.compress(b"hello " * 100)
    # Chunked (h11's server adds it, last) and gzip: the payload keeps its Content-Encoding, h11 takes
    # the chunked framing off.
    response = pair.respond(200, [("Content-Encoding", "gzip"), ("Location", b"/caf\xc3\xa9")], packed)
    before = time.time()
    assert pair.feed(response, 7)[-1]
    exchange = pair.client.exchange("http://a.test/p?q=1", "[::1]:8080")
    assert (exchange.peer, exchange.error) == ("[::1]:8080", None)
    assert pair.client.body == b"hello " * 100
    assert (exchange.method, exchange.target, exchange.request_headers, exchange.request_body) == ("GET", "/p?q=1", sent, b"")
    assert (exchange.http_version, exchange.status, exchange.payload) == ("1.1", 200, packed)
    # As received: the Location in latin-1, not the UTF-8 the result's headers give.
    assert exchange.response_headers == [("Content-Encoding", "gzip"), ("Location", "/caf\xc3\xa9"),
                                         ("Transfer-Encoding", "chunked")]
    assert exchange.sent_at <= before <= exchange.received_at


def test__a_content_length_over_max_body_size_fails_with_the_head() -> None:
    """too_large as soon as the head says so: no body byte has come, and none is waited for."""
    pair = Pair(max_body_size=1000)
    pair.request()
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1001\r\nContent-Encoding: gzip\r\n\r\n"
    failure = failure_of(pair.client, head)
    assert failure.kind is ErrorKind.TOO_LARGE and "Content-Length 1001" in failure.detail
    assert pair.client.head() is not None and pair.client.head().status == 200  # type: ignore[union-attr]


@pytest.mark.parametrize(("method", "response"), [
    ("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000),  # at the limit exactly
    # The length of what a GET would bring: no body follows.
    ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"),
    ("GET", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5000\r\n\r\n"),
    # The chunks frame the body, not the length (RFC 9112 6.3).
    ("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
], ids=["at-the-limit", "HEAD", "304", "chunked"])
def test__a_content_length_of_no_body_over_the_limit_is_no_failure(method: str, response: bytes) -> None:
    pair = Pair(max_body_size=1000)
    pair.request(method)
    assert pair.client.receive(response)


def test__a_response_cut_off_after_its_head_is_recorded_as_far_as_it_came() -> None:
    pair = Pair(record=True)
    pair.request()
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
    pair.client.receive(head + b"partial")
    failure = failure_of(pair.client, b"")  # the server closes 93 bytes early
    assert failure.kind is ErrorKind.CONNECTION_CLOSED
    cut = pair.client.cut_exchange("http://a.test/", "127.0.0.1:80", failure.kind)
    assert cut is not None
    assert (cut.url, cut.status, cut.payload, cut.peer, cut.error) == (
        "http://a.test/", 200, b"partial", "127.0.0.1:80", ErrorKind.CONNECTION_CLOSED)
    assert cut.response_headers == [("Content-Length", "100")]


def test__a_cut_exchange_is_none_without_a_head_or_after_a_complete_response() -> None:
    pair = Pair(record=True)
    pair.request()
    assert pair.client.cut_exchange("http://a.test/", None, ErrorKind.READ_TIMEOUT) is None  # no head yet
    assert pair.client.receive(pair.respond(200, [("Content-Length", "2")], b"ok"))
    assert pair.client.cut_exchange("http://a.test/", None, ErrorKind.READ_TIMEOUT) is None
    unrecorded = Pair(record=False)
    unrecorded.request()
    unrecorded.client.receive(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")
    assert unrecorded.client.cut_exchange("http://a.test/", None, ErrorKind.READ_TIMEOUT) is None

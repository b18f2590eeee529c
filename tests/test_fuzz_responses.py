"""Random response byte streams never stop the loop (docs/guarantees.md, "bad input stays with its URL").

Hypothesis builds response streams out of valid and invalid pieces -- 1xx
interim responses, good and malformed status lines, header lines with and
without a colon, obs-folds and NULs, Content-Length right, short, long,
duplicated or conflicting, chunked framing with extensions, trailers, huge
or non-hex sizes, read-until-close bodies (HTTP/1.0 and 1.1), 204/304 with
a body, LF-only line endings -- then truncates them at a random point,
splits them into separately sent pieces and ends the connection with a FIN,
an RST, or not at all.  A raw server plays the stream to every request.

For each stream two URLs are fetched over one connection slot (so the second
reuses the first's connection whenever it may) next to a URL on a good
server.  What must hold:

- every URL gets exactly one result, and the good one succeeds;
- the result is what an h11 client makes of the whole stream (the
  reference, since the fetcher promises h11's framing): the same status and
  body when the stream holds a complete response, an error when it does
  not -- whatever the read boundaries, however the connection is reused;
- errors are the I/O kinds (protocol_error, connection_closed,
  read_timeout), never a crash of a handler inside the loop;
- when it is over no connection is left open and, after shutdown, no
  descriptor or thread (``no_leaks``).
"""

from __future__ import annotations

import itertools
import socket
import time
from dataclasses import dataclass

import h11
import pytest
from conftest import results_by_url
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rawserver import ConnInfo, Handler, RawServer, ok, read_request, reset

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher

READ_TIMEOUT = 0.5
CONFIG = FetcherConfig(
    read_timeout=READ_TIMEOUT,
    connect_timeout=2.0,
    request_timeout=5.0,
    max_connections_per_host=1,  # the second URL of a stream goes on the first one's connection if it can
)
IO_ERRORS = {ErrorKind.PROTOCOL_ERROR, ErrorKind.CONNECTION_CLOSED, ErrorKind.READ_TIMEOUT}
GOOD_BODY = b"still alive"

# -- the pieces a stream is made of ----------------------------------------------

STATUS_CODES = [200, 201, 203, 204, 206, 299, 302, 304, 404, 410, 500, 503, 600]
BAD_STATUS_LINES = [
    b"HTTP/1.1 2000 OK",
    b"HTTP/1.1 099 Too Low",
    b"HTTP/1.1 101 Switching Protocols",
    b"HTTP/2 200 OK",
    b"http/1.1 200 ok",
    b"ICY 200 OK",
    b"HTTP/1.1 OK",
    b"HELLO WORLD",
    b"",
    b"\x16\x03\x01\x02\x00\x01",  # a TLS record where HTTP was expected
]
INTERIM = [[b"HTTP/1.1 100 Continue"], [b"HTTP/1.1 103 Early Hints", b"Link: </style.css>; rel=preload"]]
GOOD_HEADER_LINES = [
    b"Content-Type: text/html; charset=utf-8",
    b"Server: fuzz",
    b"X-Empty:",
    b"Set-Cookie: a=b; Path=/",
    b"Connection: close",
    b"Connection: keep-alive",
    b"Keep-Alive: timeout=5",
    b"X-Latin-1: caf\xe9",
    b"X-Long: " + b"v" * 2000,
    b"\tobs-fold continuation",  # valid after a header line, invalid first
]
BAD_HEADER_LINES = [
    b"NoColonHere",
    b"X-Space-Before-Colon : v",
    b"X-Nul: a\x00b",
    b": no-name",
]
FRAMINGS = [
    "length", "dup-length", "conflicting-lengths", "length-short", "length-long",
    "chunked", "chunked+length", "chunked-then-gzip", "huge-chunk", "oversize-chunk-size", "non-hex-chunk",
    "until-close",
]
ENDINGS = ["fin", "rst", "hold"]


@dataclass(frozen=True)
class Reading:
    """What an h11 client makes of a byte stream."""

    status: int
    body: bytes
    consumed: int  # bytes up to the end of the response; the rest is excess


def h11_reading(data: bytes, eof: bool) -> Reading | None:
    """The complete response an h11 client reads from ``data`` (then EOF if ``eof``), or None."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "fuzz")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    if eof:
        conn.receive_data(b"")
    status, body = 0, b""
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return Reading(status, body, len(data) - len(conn.trailing_data[0]))
            elif not isinstance(event, h11.InformationalResponse):
                return None  # NEED_DATA, PAUSED or ConnectionClosed: no complete response
    except h11.RemoteProtocolError:
        return None


@dataclass(frozen=True)
class Script:
    """What the server sends after every request, and what each URL must then get."""

    data: bytes
    cuts: tuple[int, ...]  # the data is sent in pieces split here, with a pause between them
    ending: str  # "fin": close; "rst": reset; "hold": keep the connection and answer the next request
    expect: Reading | None  # the exact status and body every URL must get
    must_fail: bool  # no complete response in the stream: every URL must end with an error

    def __repr__(self) -> str:
        outcome = f"expect={self.expect}" if self.expect else "must_fail" if self.must_fail else "either"
        return f"Script(data={self.data!r}, cuts={self.cuts}, ending={self.ending!r}, {outcome})"


def _chunked(body: bytes, pieces: list[int], eol: bytes, extension: bool, trailer: bool) -> bytes:
    out, start = [], 0
    for end in [*sorted(p for p in pieces if 0 < p < len(body)), len(body)]:
        if end > start:
            out.append(b"%x%s%s%s%s" % (end - start, b";ext=1" if extension else b"", eol, body[start:end], eol))
        start = end
    out.append(b"0" + eol + (b"X-Trailer: 1" + eol if trailer else b"") + eol)
    return b"".join(out)


def _framed(framing: str, body: bytes, eol: bytes, draw: st.DrawFn) -> tuple[list[bytes], bytes]:
    """The framing header lines and the payload that carries ``body``."""
    n = len(body)
    chunked = lambda: _chunked(
        body, draw(st.lists(st.integers(0, max(n, 1)), max_size=3)), eol, draw(st.booleans()), draw(st.booleans())
    )
    te = b"Transfer-Encoding: chunked"
    return {
        "length": lambda: ([b"Content-Length: %d" % n], body),
        "dup-length": lambda: ([b"Content-Length: %d" % n] * 2, body),
        "conflicting-lengths": lambda: ([b"Content-Length: %d" % n, b"Content-Length: %d" % (n + 1)], body),
        "length-short": lambda: ([b"Content-Length: %d" % (n // 2)], body),
        "length-long": lambda: ([b"Content-Length: %d" % (n + 10)], body),
        "chunked": lambda: ([te], chunked()),
        "chunked+length": lambda: ([te, b"Content-Length: 3"], chunked()),
        "chunked-then-gzip": lambda: ([b"Transfer-Encoding: chunked, gzip"], chunked()),
        "huge-chunk": lambda: ([te], b"ffffffffffffffff" + eol + body),
        "oversize-chunk-size": lambda: ([te], b"f" * 25 + eol + body),
        "non-hex-chunk": lambda: ([te], b"zz" + eol + body + eol + b"0" + eol + eol),
        "until-close": lambda: ([], body),
    }[framing]()


def one_in_four(draw: st.DrawFn) -> bool:
    """A fault, now and then (shrinking goes towards no fault)."""
    return draw(st.sampled_from([False, False, False, True]))


@st.composite
def scripts(draw: st.DrawFn) -> Script:
    eol = draw(st.sampled_from([b"\r\n", b"\n"]))
    interim = b"".join(eol.join(lines) + eol + eol for lines in draw(st.lists(st.sampled_from(INTERIM), max_size=2)))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0"]))
    code = draw(st.sampled_from(STATUS_CODES))
    good_status = b"%s %d %s" % (version, code, draw(st.sampled_from([b"OK", b"Whatever It Says", b""])))
    status_line = draw(st.sampled_from(BAD_STATUS_LINES)) if one_in_four(draw) else good_status
    headers = draw(st.lists(st.sampled_from(GOOD_HEADER_LINES), max_size=4))
    if one_in_four(draw):
        headers.insert(draw(st.integers(0, len(headers))), draw(st.sampled_from(BAD_HEADER_LINES)))
    framing_headers, payload = _framed(draw(st.sampled_from(FRAMINGS)), draw(st.binary(max_size=200)), eol, draw)
    headers[draw(st.integers(0, len(headers))):0] = framing_headers
    full = interim + eol.join([status_line, *headers]) + eol + eol + payload
    data = full[: draw(st.integers(0, len(full)))] if one_in_four(draw) else full
    ending = draw(st.sampled_from(ENDINGS))

    # An RST never reads as a clean EOF, and it may destroy data the client has not read yet:
    # then only a stream without a complete response has a predictable outcome (an error).
    reading = h11_reading(data, eof=ending == "fin")
    expect = reading if ending != "rst" else None
    must_fail = reading is None
    # Splits only inside the response: excess bytes after it go in the same send, or a client
    # could not tell them from the answer to its next request on that connection.
    end = reading.consumed if reading else len(data)
    cuts = tuple(sorted(set(draw(st.lists(st.integers(1, max(1, end - 1)), max_size=3))) & set(range(1, end))))
    return Script(data, cuts, ending, expect, must_fail)


def play(script: Script) -> Handler:
    """Answer every request on a connection with ``script``."""

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        while read_request(sock, info) is not None:
            start = 0
            for cut in script.cuts:
                sock.sendall(script.data[start:cut])
                start = cut
                info.sleep(0.005)  # so that the client reads this piece on its own
            sock.sendall(script.data[start:])
            if script.ending == "rst":
                reset(sock)
                return
            if script.ending == "fin":
                return

    return handler


# -- the test ---------------------------------------------------------------------


def check(result: FetchResult, script: Script) -> None:
    outcome = f"{result.url}: error={result.error} {result.error_detail!r} status={result.status} body={result.body!r}"
    if result.error is not None:
        assert result.error in IO_ERRORS, outcome
        assert not result.error_detail.startswith("internal error"), f"a handler crashed in the loop: {outcome}"
        assert result.error_detail.strip(), outcome
    else:
        assert result.status is not None, outcome
    if script.expect is not None:
        assert (result.error, result.status, result.body) == (None, script.expect.status, script.expect.body), outcome
    if script.must_fail:
        assert result.error is not None, f"no complete response was sent, yet: {outcome}"


@pytest.mark.timeout(60)
def test_random_response_streams_each_end_in_one_sound_result(no_leaks: object) -> None:
    numbers = itertools.count()
    with RawServer(ok(GOOD_BODY), max_seconds=120) as good, NIOFetcher(CONFIG) as fetcher:

        @settings(
            max_examples=40,
            deadline=None,
            database=None,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(script=scripts())
        def stream_is_survived(script: Script) -> None:
            n = next(numbers)
            with RawServer(play(script), max_seconds=20) as srv:
                urls = [srv.url(f"/{n}/first"), srv.url(f"/{n}/second"), good.url(f"/{n}")]
                results = results_by_url(fetcher, urls)
                for url in urls[:2]:
                    check(results[url], script)
                assert results[urls[2]].ok and results[urls[2]].body == GOOD_BODY
                assert not srv.unexpected_errors, srv.unexpected_errors

        stream_is_survived()

        final = results_by_url(fetcher, [good.url("/final")])[good.url("/final")]
        assert final.ok and final.body == GOOD_BODY
        assert fetcher.drain() == []
        stats = fetcher.stats()
        assert stats.completed == stats.registered
        # Every fuzz server has stopped: only the good server's idle connection may remain.
        deadline = time.monotonic() + 3.0
        while fetcher.stats().open_connections > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fetcher.stats().open_connections <= 1, fetcher.stats()

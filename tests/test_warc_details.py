"""WARC details and the body limit at the head (issue 25, item 4).

- ``FetchResult.peer`` is the "ip:port" the response came from, each hop's
  recorded in its Exchange; None without a connection; a proxy's own address
  through a proxy.
- Every WARC record but a warcinfo carries WARC-Warcinfo-ID, pointing at the
  warcinfo record its own run wrote before its first records -- also when
  that run appends to a file another run began, or another tool, and after a
  resume cut the file back to nothing (more in tests/test_warc_runs.py) --
  and the records of an exchange carry WARC-IP-Address.
- A response cut off after its head is archived as far as it came, with
  WARC-Truncated: ``disconnect`` (the server closed early), ``time`` (a read
  timeout), ``length`` (past max_body_size); the result delivered keeps its
  error.  ``warcio check`` passes on the file.
- A Content-Length over max_body_size is ``too_large`` when the head arrives:
  no body is waited for (the read timeout is a minute, the test's bound is
  far less), and the connection is closed, never reused.

Servers are RawServers on 127.0.0.1 that the tests start; the WARC files are
written by the writers ``crawl --warc`` and ``fetch --warc`` use and read back
with warcio.
"""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rawserver import (
    ConnInfo,
    Handler,
    RawServer,
    get_unused_port,
    http_response,
    ok,
    read_request,
    redirect,
    respond_raw,
    truncated_body,
    wait_for_eof,
)
from test_warc import records, runs
from warcio.recordloader import ArcWarcRecord
from warcio.warcwriter import WARCWriter

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher, URLBean
from niofetcher.cli.output import PageWriter, ResultWriter
from niofetcher.crawl import CrawledPage
from niofetcher.testing import ForwardProxy, TestSite

HUGE = 10**12  # a Content-Length no test ever sends the body of


def fetch_all(config: FetcherConfig, urls: list[str]) -> dict[str, FetchResult]:
    with NIOFetcher(config) as fetcher:
        for url in urls:
            fetcher.register(url)
        return {result.url: result for result in fetcher.results()}


def assert_warcio_checks(path: Path, count: int) -> None:
    """``warcio check`` (its own command line) passes every digest of all ``count`` records."""
    checked = subprocess.run([sys.executable, "-m", "warcio.cli", "check", "-v", str(path)],
                             capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("digest pass") == count, checked.stdout


def header(record: ArcWarcRecord, name: str) -> str | None:
    return record.rec_headers.get_header(name)  # type: ignore[no-any-return]


def head_then(body: bytes, length: int, then_close: bool) -> Handler:
    """Answer one request with a head promising ``length`` bytes and ``body`` of them; then close, or wait
    for the client to close."""
    head = http_response(200, b"", [("Content-Type", "text/plain"), ("Content-Length", str(length))])

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        if read_request(sock, info) is not None:
            sock.sendall(head + body)
            if not then_close:
                wait_for_eof(sock, info)

    return handler


# -- FetchResult.peer -------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_each_hop_records_the_address_it_came_from() -> None:
    with RawServer(ok(b"landed")) as target, RawServer(redirect(target.url("/end"), 301)) as start:
        result = fetch_all(FetcherConfig(record_exchanges=True), [start.url("/go")])[start.url("/go")]
    assert (result.status, result.body) == (200, b"landed")
    assert result.peer == f"127.0.0.1:{target.port}"
    assert [exchange.peer for exchange in result.exchanges] == [f"127.0.0.1:{start.port}", f"127.0.0.1:{target.port}"]


@pytest.mark.timeout(30)
def test_no_connection_no_peer() -> None:
    url = f"http://127.0.0.1:{get_unused_port()}/"
    result = fetch_all(FetcherConfig(connect_timeout=5), [url])[url]
    assert result.error is ErrorKind.CONNECT_ERROR and result.peer is None


@pytest.mark.timeout(30)
def test_through_a_proxy_the_peer_is_the_proxy() -> None:
    with TestSite(hosts=1, pages=1) as site, ForwardProxy() as proxy:
        url = f"{site.base_urls[0]}page/0"
        result = fetch_all(FetcherConfig(proxy=proxy.url), [url])[url]
    assert result.ok and result.peer == f"127.0.0.1:{proxy.port}"


# -- WARC-IP-Address, WARC-Warcinfo-ID ----------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_every_record_points_at_its_runs_warcinfo_and_names_its_address(tmp_path: Path) -> None:
    """As ``fetch --warc`` writes: a second run appends to the file its own warcinfo, then its records,
    which point at it."""
    warc = tmp_path / "fetched.warc.gz"
    with RawServer(ok(b"landed")) as target, RawServer(redirect(target.url("/end"), 301)) as start:
        for _ in range(2):
            results = fetch_all(FetcherConfig(record_exchanges=True), [start.url("/go")])
            with ResultWriter(None, str(warc), "ua/1") as writer:
                for result in results.values():
                    writer.write(result, None)
    split = runs(warc)  # each record checked to point at the warcinfo of its run
    assert [[record.rec_type for record in rest] for _, rest in split] == [["response", "request"] * 2] * 2
    assert {header(record, "WARC-IP-Address") for _, rest in split for record in rest} == {"127.0.0.1"}
    assert_warcio_checks(warc, 2 * (1 + 4))


def written(warc: Path, result: FetchResult, offsets: dict[str, int] | None = None) -> None:
    """Write ``result`` into ``warc`` as a crawl does, after cutting the file back as a resume does."""
    with PageWriter(None, str(warc), "ua/1") as writer:
        if offsets is not None:
            writer.restore(offsets)
        writer.prepare(CrawledPage(result, 0, None, None))
        writer.commit([result.url])


def delivered(url: str, peer: str | None = "[::1]:8080") -> FetchResult:
    """A result as the fetcher delivers it without recorded exchanges (no socket: its peer is given)."""
    return FetchResult(bean=URLBean(url), url=url, final_url=url, status=200, reason="OK", body=b"page",
                       fetched_at=time.time(), peer=peer)


def test_a_resume_that_cut_the_file_to_nothing_points_at_its_own_new_warcinfo(tmp_path: Path) -> None:
    warc = tmp_path / "crawl.warc"
    written(warc, delivered("http://a.test/1"))
    first_info = header(records(warc)[0][0], "WARC-Record-ID")
    written(warc, delivered("http://a.test/2"), offsets={f"warc {warc.resolve()}": 0})
    read = records(warc)
    assert [record.rec_type for record, _ in read] == ["warcinfo", "response", "request"]
    info = header(read[0][0], "WARC-Record-ID")
    assert info != first_info
    assert [header(record, "WARC-Warcinfo-ID") for record, _ in read[1:]] == [info, info]
    assert [header(record, "WARC-IP-Address") for record, _ in read[1:]] == ["::1", "::1"]  # no brackets


def test_a_file_begun_by_another_tool_gets_the_runs_warcinfo_after_what_it_holds(tmp_path: Path) -> None:
    """Appended to a file whose first record is no warcinfo (begun by another tool): the run's warcinfo
    comes after that record, and the run's records point at it; the other tool's record is left as it
    was."""
    warc = tmp_path / "begun.warc"
    with open(warc, "wb") as stream:
        writer = WARCWriter(stream, gzip=False)
        writer.write_record(writer.create_warc_record("http://a.test/0", "resource", payload=io.BytesIO(b"x"),
                                                      length=1))
    written(warc, delivered("http://a.test/1", peer=None))
    read = [record for record, _ in records(warc)]
    assert [record.rec_type for record in read] == ["resource", "warcinfo", "response", "request"]
    info = header(read[1], "WARC-Record-ID")
    assert [header(record, "WARC-Warcinfo-ID") for record in read] == [None, None, info, info]
    assert [header(record, "WARC-IP-Address") for record in read] == [None] * 4


# -- WARC-Truncated -----------------------------------------------------------------------------------------

CHUNKED_BODY = b"".join(b"%04d " % n for n in range(600))  # 3,000 bytes, chunked: no length known ahead


@pytest.mark.timeout(60)
def test_a_response_cut_off_after_its_head_is_archived_as_far_as_it_came(tmp_path: Path) -> None:
    cases = {
        # path: (handler, the result's error, WARC-Truncated)
        "/closed": (truncated_body(), ErrorKind.CONNECTION_CLOSED, "disconnect"),
        "/silent": (head_then(b"x" * 10, 1000, then_close=False), ErrorKind.READ_TIMEOUT, "time"),
        "/long": (head_then(b"", HUGE, then_close=False), ErrorKind.TOO_LARGE, "length"),
        "/chunked": (respond_raw(http_response(200, CHUNKED_BODY, chunked=True)), ErrorKind.TOO_LARGE, "length"),
    }
    servers = {path: RawServer(handler).start() for path, (handler, _, _) in cases.items()}
    try:
        config = FetcherConfig(record_exchanges=True, max_body_size=1000, read_timeout=1.0)
        results = fetch_all(config, [server.url(path) for path, server in servers.items()])
    finally:
        for server in servers.values():
            server.stop()
    warc = tmp_path / "cut.warc"
    with ResultWriter(None, str(warc), "ua/1") as writer:
        for result in results.values():
            writer.write(result, None)
    read = records(warc)
    responses = {header(record, "WARC-Target-URI"): (record, payload) for record, payload in read
                 if record.rec_type == "response"}
    assert len(read) == 1 + 2 * len(cases)  # a request record for each too
    for path, (_, error, truncated) in cases.items():
        url = servers[path].url(path)
        result = results[url]
        assert (result.status, result.error) == (200, error), result  # delivered as before: an error
        record, payload = responses[url]
        assert header(record, "WARC-Truncated") == truncated, path
        assert header(record, "WARC-IP-Address") == "127.0.0.1"
        assert record.http_headers.get_statuscode() == "200"
        # A replay serves the length stored, the payload's, not the one that promised more.
        assert record.http_headers.get_header("Content-Length") == str(len(payload)), path
        expected = {"/closed": b"0123456789", "/silent": b"x" * 10, "/long": b""}.get(path)
        if expected is not None:
            assert payload == expected, path
        else:  # what arrived of the chunked body, up to the limit, without its framing
            assert 0 < len(payload) <= 1000 and CHUNKED_BODY.startswith(payload)
    assert_warcio_checks(warc, len(read))


# -- the body limit at the head --------------------------------------------------------------------------------


@pytest.mark.timeout(20)
@pytest.mark.parametrize("encoding", [None, "gzip"])
def test_a_content_length_over_max_body_size_fails_when_the_head_arrives(encoding: str | None) -> None:
    """The server sends the head and then nothing: only the head can have ended the fetch, long before
    the minute of read timeout; and the connection is closed (the server sees its end), not kept."""
    closed = threading.Event()
    head = [("Content-Length", str(HUGE))] + ([("Content-Encoding", encoding)] if encoding else [])

    def promise_a_huge_body(sock: socket.socket, info: ConnInfo) -> None:
        if read_request(sock, info) is not None:
            sock.sendall(http_response(200, b"", head))
            if wait_for_eof(sock, info):
                closed.set()

    config = FetcherConfig(max_body_size=1 << 20, read_timeout=60.0, request_timeout=None)
    with RawServer(promise_a_huge_body) as server, NIOFetcher(config) as fetcher:
        fetcher.register(server.url("/huge"))
        result = fetcher.get(timeout=15)
        assert result is not None
        assert (result.status, result.error, result.body) == (200, ErrorKind.TOO_LARGE, b"")
        assert f"Content-Length {HUGE}" in result.error_detail
        assert closed.wait(10), "the connection was kept open"
        fetcher.register(server.url("/again"))
        again = fetcher.get(timeout=15)
        assert again is not None and again.error is ErrorKind.TOO_LARGE
        assert (server.accepted, fetcher.stats().reused_requests) == (2, 0)

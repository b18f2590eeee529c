"""WARC fidelity: response heads as the bytes that came, no proxy credentials in a recorded
exchange, no payload kept by an idle connection, no digest of a body never delivered."""

from __future__ import annotations

import io
import socket

import pytest
from rawserver import ConnInfo, RawServer, big_body
from warcio.archiveiterator import ArchiveIterator
from warcio.warcwriter import WARCWriter

from niofetcher import FetcherConfig, NIOFetcher
from niofetcher.cli.records import record
from niofetcher.cli.warc import exchange_records
from niofetcher.testing import ForwardProxy, TestSite

RAW = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Name: caf\xc3\xa9\r\n\r\nok"


def raw_once(sock: socket.socket, info: ConnInfo) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    sock.sendall(RAW)


def warc_of(exchange: object) -> bytes:
    buffer = io.BytesIO()
    writer = WARCWriter(buffer, gzip=False)
    for rec in exchange_records(writer, exchange):  # type: ignore[arg-type]
        writer.write_record(rec)
    return buffer.getvalue()


@pytest.mark.timeout(30)
def test_a_response_head_is_stored_with_the_bytes_that_came() -> None:
    with RawServer(raw_once) as srv, NIOFetcher(FetcherConfig(record_exchanges=True)) as fetcher:
        fetcher.register(srv.url("/x"))
        result = fetcher.get(timeout=10)
    assert result is not None and result.ok
    data = warc_of(result.exchanges[0])
    response = next(r for r in ArchiveIterator(io.BytesIO(data), check_digests=True) if r.rec_type == "response")
    assert b"X-Name: caf\xc3\xa9\r\n" in data, response.http_headers.get_header("X-Name")


@pytest.mark.timeout(30)
def test_the_proxy_s_credentials_stay_out_of_the_recorded_exchange() -> None:
    with TestSite(hosts=1, pages=2) as site, ForwardProxy(credentials=("crawler", "s3cret")) as proxy, \
            NIOFetcher(FetcherConfig(proxy=proxy.url, record_exchanges=True)) as fetcher:
        fetcher.register(f"{site.base_urls[0]}page/0")
        result = fetcher.get(timeout=10)
    assert result is not None and result.ok
    exchange = result.exchanges[0]
    assert all(name.lower() != "proxy-authorization" for name, _ in exchange.request_headers)
    assert b"Proxy-Authorization" not in warc_of(exchange)


@pytest.mark.timeout(30)
def test_an_idle_connection_keeps_no_recorded_payload() -> None:
    with RawServer(big_body(2_000_000)) as srv, NIOFetcher(FetcherConfig(record_exchanges=True)) as fetcher:
        fetcher.register(srv.url("/big"))
        result = fetcher.get(timeout=10)
        assert result is not None and result.ok
        fetcher.join(timeout=5)
        (conn,) = list(fetcher._engine.connections)
        assert conn.http._payload == b"" and conn.http._sent is None


@pytest.mark.timeout(30)
def test_a_too_large_result_has_no_digest_of_a_body_it_never_delivered() -> None:
    with RawServer(big_body(5000)) as srv, NIOFetcher(FetcherConfig(max_body_size=1000)) as fetcher:
        fetcher.register(srv.url("/big"))
        result = fetcher.get(timeout=10)
    assert result is not None and result.status == 200 and result.error is not None
    assert record(result)["sha256"] is None

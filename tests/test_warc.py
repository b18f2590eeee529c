"""The crawl's WARC file as archivists and their tools expect it (issue 14, item 10).

The real console script crawls, with ``--warc``, the test site and a RawServer
whose responses are bytes the test chose (gzip-encoded, chunked, a redirect);
then warcio's own command line checks and indexes the file, and the records
are read back with its ArchiveIterator:

- the first record is a ``warcinfo`` (software, format, user agent, robots);
  each later run into the file writes its own (tests/test_warc_runs.py);
- each exchange is a response record and a request record that points at it
  (WARC-Concurrent-To), with WARC-Block-Digest and WARC-Payload-Digest, and
  ``warcio check`` verifies every digest -- and fails on a payload altered
  by one byte (the negative control);
- a request record holds the head the server received, header for header;
- a response payload is what the server sent: a gzip body stays gzip with its
  Content-Encoding, a chunked one is stored without its framing and without
  Transfer-Encoding; a redirect is a pair of its own.

The fetcher half: ``FetcherConfig(record_exchanges=True)`` gives one
Exchange per hop in ``FetchResult.exchanges``, and none without it.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from rawserver import RawServer, http_response, routes
from warcio.archiveiterator import ArchiveIterator
from warcio.recordloader import ArcWarcRecord

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher, URLBean
from niofetcher._version import __version__
from niofetcher.cli.output import PageWriter
from niofetcher.crawl import CrawledPage
from niofetcher.testing import TestSite

HTML = b"<html><body><a href='/gz'>gz</a> <a href='/chunked'>chunked</a> <a href='/old'>old</a></body></html>"
GZ_BODY = b"<html><body>" + b"compressed " * 300 + b"</body></html>"
GZ_BYTES = gzip.compress(GZ_BODY, mtime=0)
CHUNKED_BODY = b"<html><body>" + b"chunk " * 200 + b"</body></html>"
SITE = {
    b"/": http_response(200, HTML, [("Content-Type", "text/html")]),
    b"/gz": http_response(200, GZ_BYTES, [("Content-Type", "text/html"), ("Content-Encoding", "gzip")]),
    b"/chunked": http_response(200, CHUNKED_BODY, [("Content-Type", "text/html")], chunked=True),
    b"/old": http_response(301, b"", [("Location", "/gz")]),
}


def niofetcher(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "niofetcher", *args], capture_output=True, text=True, timeout=60,
                          check=False, input="")


def warcio(*args: str) -> subprocess.CompletedProcess[str]:
    """warcio's own command line (its module: a ``warcio`` script may not be on PATH)."""
    return subprocess.run([sys.executable, "-m", "warcio.cli", *args], capture_output=True, text=True, timeout=60,
                          check=False)


def records(path: Path) -> list[tuple[ArcWarcRecord, bytes]]:
    """Every record with its payload as stored (not decoded), each record's digests checked on the way."""
    read = []
    with open(path, "rb") as stream:
        for record in ArchiveIterator(stream, check_digests=True):
            payload = record.raw_stream.read()
            assert record.digest_checker.passed is not False, record.digest_checker.problems
            read.append((record, payload))
    return read


def runs(path: Path) -> list[tuple[ArcWarcRecord, list[ArcWarcRecord]]]:
    """The runs that wrote ``path``, in the file's order: each one's warcinfo record and the records after
    it up to the next warcinfo.  Checked on the way: the file starts with a warcinfo, every other record
    names the warcinfo of its run (WARC-Warcinfo-ID), and no warcinfo stands without records after it (a
    run writes it with its first ones, and a cut takes it away with them)."""
    split: list[tuple[ArcWarcRecord, list[ArcWarcRecord]]] = []
    for record, _ in records(path):
        if record.rec_type == "warcinfo":
            assert record.rec_headers.get_header("WARC-Warcinfo-ID") is None
            split.append((record, []))
            continue
        assert split, f"{record.rec_type} record before any warcinfo"
        info, rest = split[-1]
        assert record.rec_headers.get_header("WARC-Warcinfo-ID") == info.rec_headers.get_header("WARC-Record-ID")
        rest.append(record)
    assert all(rest for _, rest in split), "a warcinfo with no record of its run"
    return split


def assert_warcio_checks_and_indexes(path: Path, count: int) -> None:
    """``warcio check`` and ``warcio index`` exit 0 and name all ``count`` records, every digest passing."""
    checked = warcio("check", "-v", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("digest pass") == count, checked.stdout
    indexed = warcio("index", str(path))
    assert indexed.returncode == 0, indexed.stderr
    assert len(indexed.stdout.splitlines()) == count


def request_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    """A request head's request line and headers, in order."""
    line, *fields = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    return line, [(name, value.strip()) for name, _, value in (field.partition(":") for field in fields)]


def http_of(record: ArcWarcRecord) -> tuple[str, list[tuple[str, str]]]:
    head = record.http_headers
    return f"{head.protocol} {head.statusline}", list(head.headers)


@pytest.mark.timeout(90)
def test_a_crawl_of_the_test_site_writes_a_warcinfo_then_a_checked_pair_per_page(tmp_path: Path) -> None:
    db, warc = tmp_path / "crawl.sqlite", tmp_path / "crawl.warc.gz"
    with TestSite(hosts=1, pages=20, max_seconds=60) as site:
        pages = set(site.page_urls())
        started = time.time()
        done = niofetcher("crawl", site.base_urls[0], "--db", str(db), "--warc", str(warc), "--progress", "none",
                          "--user-agent", "archiver/1.0")
        ended = time.time()
    assert done.returncode == 0, done.stderr
    assert_warcio_checks_and_indexes(warc, 1 + 2 * (len(pages) + 1))  # robots.txt is a pair too
    read = records(warc)
    info, fields = read[0]
    assert info.rec_type == "warcinfo" and [r for r, _ in read].count(info) == 1
    assert {"software: niofetcher/" + __version__, "http-header-user-agent: archiver/1.0",
            "robots: obey"} <= set(fields.decode().splitlines())
    responses = {r.rec_headers.get_header("WARC-Record-ID"): r for r, _ in read if r.rec_type == "response"}
    requests = [r for r, _ in read if r.rec_type == "request"]
    assert Counter(r.rec_headers.get_header("WARC-Target-URI") for r in requests) == Counter(
        [*pages, site.base_urls[0] + "robots.txt"])
    for request in requests:
        response = responses[request.rec_headers.get_header("WARC-Concurrent-To")]
        uri = request.rec_headers.get_header("WARC-Target-URI")
        assert response.rec_headers.get_header("WARC-Target-URI") == uri
        assert response.rec_headers.get_header("WARC-Payload-Digest") and response.rec_headers.get_header(
            "WARC-Block-Digest")
        assert ("User-Agent", "archiver/1.0") in request.http_headers.headers
        for record in (request, response):
            when = time.mktime(time.strptime(record.rec_headers.get_header("WARC-Date"), "%Y-%m-%dT%H:%M:%SZ"))
            assert started - 2 <= when - time.timezone <= ended + 1


@pytest.mark.timeout(90)
def test_the_warc_holds_the_requests_as_sent_and_the_responses_as_they_came(tmp_path: Path) -> None:
    db, warc = tmp_path / "crawl.sqlite", tmp_path / "crawl.warc"
    with RawServer(routes(SITE)) as server:
        done = niofetcher("crawl", server.url("/"), "--db", str(db), "--warc", str(warc), "--progress", "none",
                          "-H", "X-Archive-Test: yes")
        received = [request_head(head) for head in server.requests]
    assert done.returncode == 0, done.stderr
    assert_warcio_checks_and_indexes(warc, 1 + 2 * 5)  # the 4 pages and robots.txt (a 404)
    read = records(warc)
    assert read[0][0].rec_type == "warcinfo"
    requests = [http_of(record) for record, _ in read if record.rec_type == "request"]
    assert Counter(map(repr, requests)) == Counter(map(repr, received))  # header for header, in order
    assert all(("X-Archive-Test", "yes") in headers for _, headers in requests)
    by_path = {record.rec_headers.get_header("WARC-Target-URI").removeprefix(server.url("")): (record, payload)
               for record, payload in read if record.rec_type == "response"}

    record, payload = by_path["/gz"]
    gz_record_id = record.rec_headers.get_header("WARC-Record-ID")
    assert payload == GZ_BYTES  # the bytes sent, not decoded
    assert record.http_headers.get_header("Content-Encoding") == "gzip"
    assert record.http_headers.get_header("Content-Length") == str(len(GZ_BYTES))
    record, payload = by_path["/chunked"]
    assert payload == CHUNKED_BODY  # without its chunked framing, and so without Transfer-Encoding
    assert record.http_headers.get_header("Transfer-Encoding") is None
    record, _ = by_path["/old"]
    assert (record.http_headers.get_statuscode(), record.http_headers.get_header("Location")) == ("301", "/gz")
    with open(warc, "rb") as stream:  # a reader decodes the stored gzip body as it would the response
        decoded = {r.rec_headers.get_header("WARC-Target-URI"): r.content_stream().read()
                   for r in ArchiveIterator(stream) if r.rec_type == "response"}
    assert decoded[server.url("/gz")] == GZ_BODY

    # The negative control: one byte of the gzip payload changed, and warcio check fails on it.
    data = warc.read_bytes()
    at = data.index(GZ_BYTES) + len(GZ_BYTES) // 2
    altered = tmp_path / "altered.warc"
    altered.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:])
    checked = warcio("check", str(altered))
    assert checked.returncode != 0
    assert checked.stdout.count("payload digest failed") == 1 and f"{gz_record_id} response" in checked.stdout


def test_a_result_without_recorded_exchanges_is_written_as_delivered(tmp_path: Path) -> None:
    """The fetcher kept no exchange (record_exchanges off): the decoded body, and a head that agrees with it;
    nothing for a response that failed before its end."""
    url, failed = "http://a.test/page", "http://a.test/too-large"
    result = FetchResult(bean=URLBean(url), url=url, final_url=url, status=200, reason="OK",
                         headers=[("Content-Encoding", "gzip"), ("Content-Length", "20")], body=b"decoded",
                         fetched_at=time.time(), elapsed=0.5)
    too_large = FetchResult(bean=URLBean(failed), url=failed, final_url=failed, status=200, reason="OK",
                            error=ErrorKind.TOO_LARGE, fetched_at=time.time())
    warc = tmp_path / "out.warc"
    with PageWriter(None, str(warc), "ua/2") as writer:
        writer.prepare(CrawledPage(result, 0, None, None))
        writer.prepare(CrawledPage(too_large, 0, None, None))
        writer.commit([url, failed])
    read = records(warc)
    assert [record.rec_type for record, _ in read] == ["warcinfo", "response", "request"]
    response, payload = read[1]
    assert payload == b"decoded" and response.http_headers.get_header("Content-Encoding") is None
    assert response.http_headers.get_header("Content-Length") == "7"
    assert ("User-Agent", "ua/2") in read[2][0].http_headers.headers
    assert_warcio_checks_and_indexes(warc, 3)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("record", [True, False])
def test_record_exchanges_gives_one_exchange_per_hop(record: bool) -> None:
    with RawServer(routes(SITE)) as server, NIOFetcher(FetcherConfig(record_exchanges=record)) as fetcher:
        fetcher.register(server.url("/old"))
        (result,) = list(fetcher.results())
        sent = [request_head(head) for head in server.requests]
    assert (result.status, result.body) == (200, GZ_BODY)
    if not record:
        assert result.exchanges == []
        return
    assert [(e.url, e.status, e.payload) for e in result.exchanges] == [
        (server.url("/old"), 301, b""), (server.url("/gz"), 200, GZ_BYTES)]
    assert [(f"{e.method} {e.target} HTTP/1.1", e.request_headers) for e in result.exchanges] == sent
    hop, final = result.exchanges
    assert hop.sent_at <= hop.received_at <= final.sent_at <= final.received_at <= result.fetched_at

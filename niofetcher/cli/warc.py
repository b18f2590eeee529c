"""The WARC records of what was fetched: one home for ``crawl --warc`` and ``fetch --warc``.

Bytes in memory only: the caller decides when they go into a file (a crawl
with its batch, ``fetch`` after each result).  Nothing here imports the
crawler: ``fetch --warc`` loads warcio, never the crawler (tests/test_layers.py).
"""

from __future__ import annotations

import io
import time

from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from .._version import __version__
from ..models import Exchange, FetchResult
from ..urls import parse_target

#: Left out of a rebuilt response head, whose body is the decoded one (see _as_delivered).
_NOT_WITH_DECODED_BODY = frozenset(("content-encoding", "transfer-encoding", "content-length"))


class _WireHead(StatusAndHeaders):  # type: ignore[misc]  # warcio has no type hints
    """An HTTP head written back as the bytes that went over the wire (latin-1), where warcio's
    own would percent-encode every value that is not ASCII (a UTF-8 Location, a filename)."""

    def compute_headers_buffer(self, header_filter: object = None) -> None:
        self.headers_buff = self.to_str(header_filter).encode("latin-1") + b"\r\n"


class WarcRecords:
    """The records of one WARC file: its opening warcinfo record, then each result's exchanges.

    Each exchange the fetcher recorded (``FetcherConfig(record_exchanges=True)``)
    is a response record and a request record pointing at it with
    WARC-Concurrent-To: the request as sent (the fetcher keeps credentials out
    of what it records), the response as received, its Content-Encoding kept.
    A complete result without recorded exchanges is written as it was
    delivered (see _as_delivered).  ``gzip``: a gzip member per record, as
    warcio writes a ``.warc.gz``.
    """

    def __init__(self, user_agent: str, gzip: bool) -> None:
        self.user_agent = user_agent
        self.gzip = gzip

    def warcinfo(self, filename: str, obey_robots: bool) -> bytes:
        """The warcinfo record that opens the file: the software and the settings a reader asks about."""
        buffer = io.BytesIO()
        writer = WARCWriter(buffer, gzip=self.gzip)
        writer.write_record(writer.create_warcinfo_record(filename, {
            "software": f"niofetcher/{__version__}",
            "format": "WARC File Format 1.0",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.0/",
            "http-header-user-agent": self.user_agent,
            "robots": "obey" if obey_robots else "ignore",  # Heritrix's words for robots.txt honoured or not
        }))
        return buffer.getvalue()

    def of(self, result: FetchResult) -> bytes:
        """The records of every exchange of ``result``, as the bytes that go into the file.  Nothing for
        a response that failed before its end (a body too large, a timeout): the fetcher recorded no
        exchange of it, and what it delivered would be a record of an empty body."""
        exchanges = result.exchanges
        if not exchanges and result.status is not None and result.error is None:
            exchanges = [_as_delivered(result, self.user_agent)]
        buffer = io.BytesIO()
        writer = WARCWriter(buffer, gzip=self.gzip)
        for exchange in exchanges:
            for record in exchange_records(writer, exchange):
                writer.write_record(record)
        return buffer.getvalue()


def exchange_records(writer: WARCWriter, exchange: Exchange) -> tuple[ArcWarcRecord, ArcWarcRecord]:
    """The response record of ``exchange`` and its request record, which points at it (WARC-Concurrent-To).

    The payload is stored with its Content-Encoding, as Heritrix and wget store it and replay tools
    (pywb) expect.  Its chunked framing is not, where those two keep the bytes as they came: h11 takes
    it off, and Transfer-Encoding goes from the stored head with it.  So the payload is the entity body
    whatever the framing was -- what WARC 1.1 (6.3.2) means by the payload, and one content has one
    WARC-Payload-Digest whether it came chunked or not -- and the record is one that pywb and warcio
    read as it is: they de-chunk a payload only when the stored head says Transfer-Encoding: chunked.
    """
    response_head = _WireHead(
        f"{exchange.status} {exchange.reason}".strip(),
        [(k, v) for k, v in exchange.response_headers if k.lower() != "transfer-encoding"],
        protocol=f"HTTP/{exchange.http_version}",
    )
    # Lengths given: without them warcio copies each payload into a temporary file it never closes.
    response = writer.create_warc_record(
        exchange.url, "response", payload=io.BytesIO(exchange.payload), length=len(exchange.payload),
        http_headers=response_head,
        warc_headers_dict={"WARC-Type": "response", "WARC-Date": _warc_date(exchange.received_at)},
    )
    request_head = _WireHead(f"{exchange.method} {exchange.target} HTTP/1.1", exchange.request_headers,
                             is_http_request=True)
    request = writer.create_warc_record(
        exchange.url, "request", payload=io.BytesIO(exchange.request_body), length=len(exchange.request_body),
        http_headers=request_head, warc_headers_dict={
            "WARC-Type": "request",
            "WARC-Date": _warc_date(exchange.sent_at),
            "WARC-Concurrent-To": response.rec_headers.get_header("WARC-Record-ID"),
        },
    )
    return response, request


def _as_delivered(result: FetchResult, user_agent: str) -> Exchange:
    """The final hop of a result whose exchanges the fetcher did not record, rebuilt from what it delivered:
    the decoded body, so its head has no Content-Encoding or Transfer-Encoding and the decoded length as
    Content-Length, and a request of Host and User-Agent, all that is known of it."""
    target = parse_target(result.final_url)
    headers = [(k, v) for k, v in result.headers if k.lower() not in _NOT_WITH_DECODED_BODY]
    headers.append(("Content-Length", str(len(result.body))))
    return Exchange(
        url=result.final_url, method=result.bean.method, target=target.path,
        request_headers=[("Host", target.host_header), ("User-Agent", user_agent)], request_body=b"",
        http_version="1.1", status=result.status or 0, reason=result.reason, response_headers=headers,
        payload=result.body, sent_at=result.fetched_at - result.elapsed, received_at=result.fetched_at,
    )


def _warc_date(when: float) -> str:
    """A WARC/1.0 date: UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))

"""The WARC records of what was fetched: one home for ``crawl --warc`` and ``fetch --warc``.

Bytes in memory only: the caller decides when they go into a file (a crawl
with its batch, ``fetch`` after each result).  Nothing here imports the
crawler: ``fetch --warc`` loads warcio, never the crawler (tests/test_layers.py).
"""

from __future__ import annotations

import io
import time
import uuid

from warcio.recordbuilder import RecordBuilder
from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.utils import Digester
from warcio.warcwriter import WARCWriter

from .._version import __version__
from ..errors import ErrorKind
from ..models import Exchange, FetchResult, capture_time
from ..urls import parse_target

#: Left out of a rebuilt response head, whose body is the decoded one (see _as_delivered).
_NOT_WITH_DECODED_BODY = frozenset(("content-encoding", "transfer-encoding", "content-length"))

#: The WARC-Truncated reason (its words in WARC 1.0 and 1.1) of a response cut off by each failure: past a
#: configured limit, past a timeout, a dropped connection.  Any other (a malformed rest, a shutdown) is
#: "unspecified".
_TRUNCATED = {
    ErrorKind.TOO_LARGE: "length",
    ErrorKind.READ_TIMEOUT: "time",
    ErrorKind.TIMEOUT: "time",
    ErrorKind.CONNECTION_CLOSED: "disconnect",
}


#: The WARC 1.1 revisit profiles (6.7.2, 6.7.3): the payload's digest is that of an earlier capture's; the
#: server answered a conditional request with 304 Not Modified.
_IDENTICAL_PAYLOAD_DIGEST = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
_SERVER_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"


class _WireHead(StatusAndHeaders):  # type: ignore[misc]  # warcio has no type hints
    """An HTTP head written back as the bytes that went over the wire (latin-1), where warcio's
    own would percent-encode every value that is not ASCII (a UTF-8 Location, a filename)."""

    def compute_headers_buffer(self, header_filter: object = None) -> None:
        self.headers_buff = self.to_str(header_filter).encode("latin-1") + b"\r\n"


class WarcRecords:
    """The records one run writes into a WARC file: its own warcinfo record, then each result's exchanges.

    Each exchange the fetcher recorded (``FetcherConfig(record_exchanges=True)``)
    is a response record and a request record pointing at it with
    WARC-Concurrent-To: the request as sent (the fetcher keeps credentials out
    of what it records), the response as received, its Content-Encoding kept;
    a response cut off after its head, as far as it came, with WARC-Truncated.
    A complete result without recorded exchanges is written as it was
    delivered (see _as_delivered).  ``gzip``: a gzip member per record, as
    warcio writes a ``.warc.gz``.

    A page of a crawl (``of(result, (unchanged, repeats))``) is a capture: its
    final response record has an ID made from its URL and capture time, for
    the revisit records that will refer to it; and a revisit that found its
    page unchanged is a revisit record instead of a response record: see
    _revisit_records().  Any other record's ID is random.

    Every record but the warcinfo carries WARC-Warcinfo-ID, the WARC-Record-ID
    of this run's warcinfo record (``warcinfo_id``), and WARC-IP-Address, the
    address its exchange went to.  The warcinfo is the run's, not the file's:
    a run that appends to a file another run began (a resumed crawl, a second
    ``fetch --warc``) may differ from it in every setting the warcinfo states,
    so the caller writes ``warcinfo`` before the run's first records in the
    file, wherever in the file they start.
    """

    def __init__(self, user_agent: str, gzip: bool, filename: str, obey_robots: bool) -> None:
        self.user_agent = user_agent
        self.gzip = gzip
        #: The software and the settings a reader asks about, as the bytes that go into the file.
        self.warcinfo, self.warcinfo_id = self._new_warcinfo(filename, obey_robots)

    def _new_warcinfo(self, filename: str, obey_robots: bool) -> tuple[bytes, str]:
        buffer = io.BytesIO()
        writer = WARCWriter(buffer, gzip=self.gzip)
        record = writer.create_warcinfo_record(filename, {
            "software": f"niofetcher/{__version__}",
            "format": "WARC File Format 1.0",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.0/",
            "http-header-user-agent": self.user_agent,
            "robots": "obey" if obey_robots else "ignore",  # Heritrix's words for robots.txt honoured or not
        })
        writer.write_record(record)
        return buffer.getvalue(), record.rec_headers.get_header("WARC-Record-ID")

    def of(self, result: FetchResult, visit: tuple[bool, float | None] | None = None) -> bytes:
        """The records of every exchange of ``result``, as the bytes that go into the file.  Nothing for
        a response that failed without any exchange recorded (or none at all): what it delivered would
        be a record of an empty body.

        ``visit``: ``result`` is a visit of a crawl's page, ``(unchanged, repeats)``, whose final
        exchange is a capture (a response record with a named ID, _capture_id()) -- or, when the
        visit found the page ``unchanged``, a 304 or a 2xx, a revisit record of the capture made at
        ``repeats`` (a ``models.capture_time``; None: not known) (_revisit_records()).  An unchanged redirect is written whole: what made it unchanged is
        where it leads, not its payload."""
        exchanges = result.exchanges
        if not exchanges and result.status is not None and result.error is None:
            exchanges = [_as_delivered(result, self.user_agent)]
        buffer = io.BytesIO()
        writer = WARCWriter(buffer, gzip=self.gzip)
        unchanged, repeats = visit if visit is not None else (False, None)
        for number, exchange in enumerate(exchanges, 1):
            final = visit is not None and number == len(exchanges)
            if final and unchanged and (exchange.status == 304 or 200 <= exchange.status < 300):
                records = _revisit_records(writer, exchange, repeats, self.warcinfo_id)
            else:
                records = exchange_records(writer, exchange, self.warcinfo_id, capture=final)
            for record in records:
                writer.write_record(record)
        return buffer.getvalue()


def exchange_records(
    writer: WARCWriter, exchange: Exchange, warcinfo_id: str | None = None, capture: bool = False
) -> tuple[ArcWarcRecord, ArcWarcRecord]:
    """The response record of ``exchange`` and its request record, which points at it (WARC-Concurrent-To);
    both point at the run's warcinfo record when ``warcinfo_id`` is given.  ``capture``: the final
    exchange of a crawl's page, whose response record's ID is made from its URL and capture time
    (_capture_id()), for the revisit records that will refer to it; else the ID is random.

    The payload is stored with its Content-Encoding, as Heritrix and wget store it and replay tools
    (pywb) expect.  Its chunked framing is not, where those two keep the bytes as they came: h11 takes
    it off, and Transfer-Encoding goes from the stored head with it.  So the payload is the entity body
    whatever the framing was -- what WARC 1.1 (6.3.2) means by the payload, and one content has one
    WARC-Payload-Digest whether it came chunked or not -- and the record is one that pywb and warcio
    read as it is: they de-chunk a payload only when the stored head says Transfer-Encoding: chunked.
    """
    shared = _shared_fields(exchange, warcinfo_id)
    response_fields = {"WARC-Type": "response", "WARC-Date": _warc_date(exchange.received_at), **shared}
    if capture:
        response_fields["WARC-Record-ID"] = _capture_id(exchange.url, capture_time(exchange.received_at))
    if exchange.error is not None:  # the payload is what came before the response was cut off
        response_fields["WARC-Truncated"] = _TRUNCATED.get(exchange.error, "unspecified")
    # Lengths given: without them warcio copies each payload into a temporary file it never closes.
    response = writer.create_warc_record(
        exchange.url, "response", payload=io.BytesIO(exchange.payload), length=len(exchange.payload),
        http_headers=_response_head(exchange), warc_headers_dict=response_fields,
    )
    return response, _request_record(writer, exchange, response, shared)


def _revisit_records(
    writer: WARCWriter, exchange: Exchange, repeats: float | None, warcinfo_id: str | None = None
) -> tuple[ArcWarcRecord, ArcWarcRecord]:
    """The WARC/1.1 revisit record of ``exchange``, a revisit that found its page unchanged, and its
    request record, as exchange_records() makes a response's; the rest of the file may be WARC/1.0,
    since each record states its own version.

    The block is the response's HTTP head alone.  A 304 has the profile server-not-modified; a 2xx,
    identical-payload-digest, with the WARC-Payload-Digest its payload has as this visit got it (what
    a response record of it would say).  *Identical* is the crawler's judgement on the decoded body
    (the sha256 the frontier keeps): a server that encodes the same body to other bytes (a gzip of
    another time) makes a revisit whose payload digest differs from its capture's.

    WARC-Refers-To-Target-URI is the URL; WARC-Refers-To-Date the WARC-Date of the capture the page
    repeats (``repeats``, unix time: the last visit that found it changed, so that a run of unchanged
    visits all refer to one response record), and WARC-Refers-To that capture's WARC-Record-ID, made
    again from the URL and the time (_capture_id()); both left out when the time is not known (a row
    from before these times were kept).  A replay tool (pywb) finds the capture by the URL and the
    closest date, and for this profile by the digest as well.
    """
    shared = _shared_fields(exchange, warcinfo_id)
    fields = {"WARC-Type": "revisit", "WARC-Date": _warc_date(exchange.received_at), **shared}
    if exchange.status == 304:
        fields["WARC-Profile"] = _SERVER_NOT_MODIFIED
    else:
        fields["WARC-Profile"] = _IDENTICAL_PAYLOAD_DIGEST
        digest = Digester("sha1")  # warcio's own, as on a response record
        digest.update(exchange.payload)
        fields["WARC-Payload-Digest"] = str(digest)
    fields["WARC-Refers-To-Target-URI"] = exchange.url
    if repeats is not None:
        fields["WARC-Refers-To"] = _capture_id(exchange.url, repeats)
        fields["WARC-Refers-To-Date"] = _warc_date(repeats)
    revisit = RecordBuilder(warc_version="1.1").create_warc_record(
        exchange.url, "revisit", http_headers=_response_head(exchange), warc_headers_dict=fields,
    )
    return revisit, _request_record(writer, exchange, revisit, shared)


def _capture_id(url: str, captured_at: float) -> str:
    """The WARC-Record-ID of the response record of ``url`` captured at ``captured_at`` (a
    ``models.capture_time``): a name-based UUID of the two, so that a later revisit record names the
    capture it repeats (WARC-Refers-To) from the time the frontier keeps, with no ID stored.  Only a
    crawl's pages are named so: a crawl has one visit of a URL at a time, where ``fetch`` may fetch
    one URL twice in the same millisecond (two IDs alike), and so may a redirect hop and a page."""
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{url} {captured_at!r}')}>"


def _response_head(exchange: Exchange) -> StatusAndHeaders:
    """The head of ``exchange``'s response as its record stores it (see exchange_records())."""
    headers = [(k, v) for k, v in exchange.response_headers if k.lower() != "transfer-encoding"]
    if exchange.error is not None:
        # Cut off: the head promised more than the payload holds, and a replay that served that
        # Content-Length would leave a keep-alive client waiting for bytes that never come.  The
        # length stored is the payload's; the server's stays beside it, as X-Orig- (warcio's word).
        headers = [(f"X-Orig-{k}" if k.lower() == "content-length" else k, v) for k, v in headers]
        headers.append(("Content-Length", str(len(exchange.payload))))
    return _WireHead(f"{exchange.status} {exchange.reason}".strip(), headers, protocol=f"HTTP/{exchange.http_version}")


def _shared_fields(exchange: Exchange, warcinfo_id: str | None) -> dict[str, str]:
    """The fields an exchange's records all carry: where it went, and the run's warcinfo record."""
    shared = {}
    if exchange.peer is not None:
        shared["WARC-IP-Address"] = _ip_of(exchange.peer)
    if warcinfo_id is not None:
        shared["WARC-Warcinfo-ID"] = warcinfo_id
    return shared


def _request_record(writer: WARCWriter, exchange: Exchange, answer: ArcWarcRecord,
                    shared: dict[str, str]) -> ArcWarcRecord:
    """The request record of ``exchange``, pointing at the record of its answer (WARC-Concurrent-To)."""
    request_head = _WireHead(f"{exchange.method} {exchange.target} HTTP/1.1", exchange.request_headers,
                             is_http_request=True)
    return writer.create_warc_record(
        exchange.url, "request", payload=io.BytesIO(exchange.request_body), length=len(exchange.request_body),
        http_headers=request_head, warc_headers_dict={
            "WARC-Type": "request",
            "WARC-Date": _warc_date(exchange.sent_at),
            "WARC-Concurrent-To": answer.rec_headers.get_header("WARC-Record-ID"),
            **shared,
        },
    )


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
        peer=result.peer,
    )


def _ip_of(peer: str) -> str:
    """The address alone of an "ip:port", as WARC-IP-Address holds it: an IPv6 one without its brackets."""
    address = peer.rpartition(":")[0]
    return address[1:-1] if address.startswith("[") else address


def _warc_date(when: float) -> str:
    """A WARC/1.0 date: UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))

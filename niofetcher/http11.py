"""HTTP/1.1 for one client connection, sans-IO: bytes in, a response out.

h11 does all of the framing (Content-Length, chunked, read-until-close,
keep-alive, HEAD/204/304 without body); this module only turns its events
into a ``Response`` value and its exceptions into ErrorKinds.  It never
touches a socket, so it can be driven in tests against an h11 server in
memory.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import h11

from .content import BodyBuffer
from .errors import ErrorKind, FetchFailure
from .models import Exchange, HeaderPairs, SharedHeaders
from .urls import decode_location

try:
    # h11 normalises and validates a plain header list on every Request; a Headers
    # object it takes as already valid.  Validating the defaults once per host instead
    # of once per request saved ~7% of the loop's CPU (scenario C profile).
    from h11._headers import normalize_and_validate

    _h11_validate: Callable[[list[tuple[str, str]]], Any] | None = normalize_and_validate
except ImportError:  # pragma: no cover - an h11 without it: validate per request, as h11 does
    _h11_validate = None

_NEED_DATA = h11.NEED_DATA
_DONE = h11.DONE
_IDLE = h11.IDLE
_Response = h11.Response
_Data = h11.Data
_EndOfMessage = h11.EndOfMessage
_Informational = h11.InformationalResponse
_CREDENTIALS = frozenset(("authorization", "proxy-authorization"))  # request headers an Exchange leaves out
_END_OF_MESSAGE = h11.EndOfMessage()  # events are immutable: one will do for every request


class Response(NamedTuple):
    """What one exchange brought back: the head, latin-1 decoded (a UTF-8 Location excepted), and the body.

    The body is decoded (Content-Encoding) and at most ``max_body_size`` long.
    A response whose exchange failed after its head has the body that had
    arrived (see ``ClientHTTP11.head``).

    A NamedTuple, not a frozen dataclass: both are immutable and carry no
    ``__dict__``, but one is made per response, and a frozen dataclass's
    ``__init__`` (an ``object.__setattr__`` call per field) costs 566 ns
    where this costs 201 ns (Python 3.11).
    """

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


def _prepared(headers: SharedHeaders) -> Any:
    """``headers`` validated by h11, kept in it for the next request that sends it; FetchFailure if refused."""
    if _h11_validate is None:
        return headers
    try:
        prepared = headers.prepared = _h11_validate(headers)
    except h11.LocalProtocolError as exc:
        raise FetchFailure(ErrorKind.PROTOCOL_ERROR, f"cannot send request: {exc}") from None
    return prepared


class ClientHTTP11:
    """The h11 state of one connection plus the exchange in progress on it."""

    __slots__ = (
        "_body",
        "_decode",
        "_h11",
        "_head_request",
        "_max_body",
        "_max_head",
        "_payload",
        "_received",
        "_record",
        "_sent",
        "_wire_head",
        "headers",
        "reason",
        "response",
        "response_started",
        "status",
    )

    def __init__(self, max_header_size: int, max_body_size: int, decode_content: bool, record: bool = False) -> None:
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_header_size)
        self._max_head = max_header_size
        self._max_body = max_body_size
        self._decode = decode_content
        # record_exchanges: what was sent and received is kept for exchange(); each step asks
        # this one flag, so that a fetcher that does not record pays for nothing else.
        self._record = record
        self._sent: tuple[str, str, HeaderPairs, bytes, float] | None = None
        # Recording: the HTTP version and headers of the response head, and the body as received.
        # Set anew by each response before exchange() reads them, so never reset.
        self._wire_head: tuple[str, list[tuple[str, str]]] | None = None
        self._payload = b""
        self._head_request = False  # the request in progress is a HEAD: its answer's Content-Length has no body
        self._reset()

    def _reset(self) -> None:
        # The head of the exchange in progress, as it arrives; ``response`` once it is complete.
        self.status: int | None = None
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self._body: BodyBuffer | None = None
        self.response: Response | None = None
        self.response_started = False  # any response byte seen: a replay is no longer safe
        self._received = 0  # bytes of this response so far: a head can be no longer

    def start_request(self, method: str, target: str, headers: HeaderPairs, body: bytes) -> bytes:
        """Begin an exchange; returns the bytes to send.  Raises FetchFailure for an unsendable request."""
        conn = self._h11
        sent: Any = headers
        if type(headers) is SharedHeaders:  # the defaults of a Host: validated once, not per request
            sent = headers.prepared
            if sent is None:
                sent = _prepared(headers)
        try:
            head = conn.send(h11.Request(method=method, target=target, headers=sent))
            data = conn.send(h11.Data(data=body)) if body else b""
            end = conn.send(_END_OF_MESSAGE)
        except h11.LocalProtocolError as exc:
            raise FetchFailure(ErrorKind.PROTOCOL_ERROR, f"cannot send request: {exc}") from None
        self._head_request = method == "HEAD"
        if self._record:
            self._sent = (method, target, headers, body, time.time())
        return head + data + end

    @property
    def body(self) -> bytes:
        """The body of the complete response; ``b""`` until then."""
        response = self.response
        return response.body if response is not None else b""

    def head(self) -> Response | None:
        """The response received so far, None before a head: its head and, until it is complete, the body
        that has arrived, decoded as far as it came (at most ``max_body_size``).  After a complete
        response the body is ``response``'s, and this one's is empty.

        What a failure after the head delivers: a body cut short is what a client keeps when it
        accepts data loss (Scrapy's DOWNLOAD_FAIL_ON_DATALOSS = False), and nothing else of it is known.
        """
        status = self.status
        if status is None:
            return None
        return Response(status, self.reason, self.headers, self._body_so_far())

    def _body_so_far(self) -> bytes:
        buffer = self._body
        if buffer is None:
            return b""
        so_far = buffer.received_so_far()
        if not self._record:
            return so_far  # the buffer holds the body only, decoded
        # Recording, the buffer gives the bytes as they were received, for the archive: decoded again
        # here, in a buffer of the same limit, on this one path of a failed response only.
        decoded = BodyBuffer(header_value(self.headers, "content-encoding"), self._max_body, self._decode)
        with contextlib.suppress(FetchFailure):  # a corrupt stream, or past the limit: what came before it
            decoded.feed(so_far)
        return decoded.received_so_far()

    def receive(self, data: bytes) -> bool:
        """Feed received bytes (``b""`` = the peer closed).  True once ``response`` is complete."""
        if data:
            self.response_started = True
            self._received += len(data)
        conn = self._h11
        conn.receive_data(data)
        try:
            while True:
                event = conn.next_event()
                kind = type(event)
                if kind is _Data:
                    self._body.feed(event.data)  # type: ignore[union-attr]
                elif event is _NEED_DATA:
                    if not data:  # h11 normally raises on a premature close; be sure anyway
                        raise FetchFailure(ErrorKind.CONNECTION_CLOSED, "peer closed before the response ended")
                    return False
                elif kind is _Response:
                    if self._received > self._max_head:  # _check_head_size's own first test, spared a call here
                        self._check_head_size(event)  # type: ignore[arg-type]
                    self._on_head(event)  # type: ignore[arg-type]
                elif kind is _EndOfMessage:
                    buffer = self._body
                    body = buffer.finish() if buffer is not None else b""
                    if self._record and buffer is not None:
                        self._payload = buffer.received(body)
                    self._body = None
                    self.response = Response(self.status, self.reason, self.headers, body)  # type: ignore[arg-type]
                    return True
                elif kind is _Informational:
                    self._check_head_size(event)  # type: ignore[arg-type]
                    continue  # 100 Continue and friends precede the real response
                else:  # ConnectionClosed or PAUSED before the end: the response never completed
                    raise FetchFailure(ErrorKind.CONNECTION_CLOSED, "peer closed before the response ended")
        except h11.RemoteProtocolError as exc:
            raise self._translate(exc, eof=not data) from None

    def exchange(self, url: str, peer: str | None) -> Exchange:
        """The complete exchange, as it went over the wire, when recording (``record``); call it
        before next_cycle(), which forgets it.  ``peer``: the "ip:port" it went to."""
        response = self.response
        assert response is not None, "no complete response"
        payload = self._payload
        self._payload = b""
        return self._recorded(url, peer, response.status, response.reason, payload, None)

    def cut_exchange(self, url: str, peer: str | None, error: ErrorKind) -> Exchange | None:
        """The exchange of a response that ``error`` cut off after its head, with the payload that arrived
        before it; None when recording is off, no head came, or the response was complete."""
        status = self.status
        # The wire head is kept only when recording.
        if status is None or self._wire_head is None or self.response is not None:
            return None
        buffer = self._body
        payload = buffer.received_so_far() if buffer is not None else b""
        return self._recorded(url, peer, status, self.reason, payload, error)

    def _recorded(
        self, url: str, peer: str | None, status: int, reason: str, payload: bytes, error: ErrorKind | None
    ) -> Exchange:
        sent, wire_head = self._sent, self._wire_head
        assert sent is not None and wire_head is not None, "no recorded exchange"
        method, target, headers, body, sent_at = sent
        # Forgotten now: an idle connection must not pin its last response (and request body).
        self._sent, self._wire_head = None, None
        # Credentials never go into an archive (or a repr): the origin's (a URL's user:pass@, the
        # caller's Authorization header) as little as the proxy's.  ``url`` has no user:pass@: a Task
        # goes by its URL without them.
        request_headers = [(name, value) for name, value in headers if name.lower() not in _CREDENTIALS]
        return Exchange(
            url=url, method=method, target=target, request_headers=request_headers, request_body=body,
            http_version=wire_head[0], status=status, reason=reason, response_headers=wire_head[1],
            payload=payload, sent_at=sent_at, received_at=time.time(), peer=peer, error=error,
        )

    def _check_head_size(self, event: h11.Response | h11.InformationalResponse) -> None:
        # h11 bounds only an *incomplete* head; a whole oversize head read at once
        # would pass.  Nothing to count while all bytes received so far would fit.
        if self._received <= self._max_head:
            return
        # Its size on the wire, give or take stripped whitespace.
        size = 17 + len(event.reason) + sum(len(n) + len(v) + 4 for n, v in event.headers.raw_items())
        if size > self._max_head:
            raise FetchFailure(ErrorKind.PROTOCOL_ERROR, "response head exceeds max_header_size")

    def _on_head(self, event: h11.Response) -> None:
        self.status = event.status_code
        self.reason = event.reason.decode("latin-1")
        # One pass over raw_items(): iterating h11's Headers itself goes through
        # collections.abc.Sequence, an index lookup per header.
        headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in event.headers.raw_items()]
        self.headers = headers
        if self._record:  # a copy: a UTF-8 Location is rewritten below, the record keeps what came
            self._wire_head = (event.http_version.decode("ascii"), headers[:])
        encoding = length = None
        for index, (name, value) in enumerate(headers):
            size = len(name)
            if size == 16 and name.lower() == "content-encoding":
                encoding = value
            elif size == 14 and name.lower() == "content-length":
                length = value  # h11 checked it: digits, one value
            elif size == 8 and not value.isascii() and name.lower() == "location":
                # Latin-1 gave back every byte as one character: undo it and read the URL as UTF-8.
                headers[index] = (name, decode_location(value.encode("latin-1")))
        self._body = BodyBuffer(encoding, self._max_body, self._decode, self._record)
        if length is not None and int(length) > self._max_body and self._announces_body(event.status_code):
            raise FetchFailure(
                ErrorKind.TOO_LARGE, f"Content-Length {length} exceeds max_body_size ({self._max_body} bytes)"
            )

    def _announces_body(self, status: int) -> bool:
        """Whether a Content-Length in this response's head is the length of a body that follows.

        Not for an answer to HEAD, nor a 204 or 304 (the length of what a GET would have had), nor
        with Transfer-Encoding, which frames the body instead (RFC 9112 6.3).

        A Content-Encoding does not matter, by choice.  The length is then the compressed one and the
        limit is on the decoded body, but gzip, deflate and brotli store data that does not compress as
        it is, so a stream decodes to at least its own length bar its framing (a gzip header and
        trailer, 5 bytes per 64 KiB stored block): a length over the limit is one the decoded body
        passes too.  What could come out under it is a body within its framing of the limit, or one
        padded with what a decoder skips (a long gzip file name, bytes after the stream): refused
        here, as Scrapy's DOWNLOAD_MAXSIZE refuses it, rather than waited for.  When exchanges are
        recorded the body as received is held to the limit anyway (BodyBuffer).
        """
        if self._head_request or status == 204 or status == 304:
            return False
        return not any(name.lower() == "transfer-encoding" for name, _ in self.headers)

    def _translate(self, exc: h11.RemoteProtocolError, eof: bool) -> FetchFailure:
        if eof:
            where = "after the response head" if self.status is not None else "before a complete response head"
            return FetchFailure(ErrorKind.CONNECTION_CLOSED, f"peer closed {where}: {exc}")
        if exc.error_status_hint == 431:
            return FetchFailure(ErrorKind.PROTOCOL_ERROR, "response head exceeds max_header_size")
        return FetchFailure(ErrorKind.PROTOCOL_ERROR, f"malformed response: {exc}")

    @property
    def capacity(self) -> int:
        """Requests it can take now: HTTP/1.1 carries one at a time, so 1 between exchanges, else 0."""
        return 1 if self._h11.our_state is _IDLE else 0

    def next_cycle(self) -> bool:
        """After a complete response: True (and ready for the next request) if the connection may be reused."""
        conn = self._h11
        if conn.our_state is not _DONE or conn.their_state is not _DONE:
            return False
        if conn.trailing_data[0]:
            # Bytes past the end of the response: whatever they are, they must
            # never be read as the answer to the next request.
            return False
        conn.start_next_cycle()
        # Forget the last exchange now, not when the next request starts: a request
        # refused before it starts (its headers) must not report the last response's head.
        self._reset()
        return True


class TunnelRequest:
    """A ``CONNECT`` to an HTTP proxy and its answer, sans-IO, on a client h11 Connection of its own.

    After a 2xx answer to CONNECT h11 switches protocol: both sides go to
    SWITCHED_PROTOCOL, ``next_event()`` gives PAUSED after the head, and any
    bytes past the head wait in ``trailing_data`` -- the start of the tunnel,
    which must be empty here, since TLS speaks first and the origin has had
    nothing to answer yet.  Any other answer is an ordinary response whose
    head is all we need: the connection closes after it.
    """

    __slots__ = ("_h11", "_max_head", "_received")

    def __init__(self, max_header_size: int) -> None:
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=max_header_size)
        self._max_head = max_header_size
        self._received = 0

    def start(self, authority: str, headers: list[tuple[str, str]]) -> bytes:
        """The CONNECT request for ``authority`` (``host:port``); Host is added first.  FetchFailure if unsendable."""
        conn = self._h11
        try:
            request = h11.Request(method="CONNECT", target=authority, headers=[("Host", authority), *headers])
            return conn.send(request) + conn.send(_END_OF_MESSAGE)
        except h11.LocalProtocolError as exc:
            raise FetchFailure(ErrorKind.PROTOCOL_ERROR, f"cannot send CONNECT: {exc}") from None

    def receive(self, data: bytes) -> Response | None:
        """Feed the proxy's bytes (``b""`` = it closed): its answer's head once complete, else None.

        Raises FetchFailure: CONNECTION_CLOSED when the proxy closes first,
        PROTOCOL_ERROR for a malformed or oversize answer, or bytes after a 2xx head.
        """
        self._received += len(data)
        conn = self._h11
        conn.receive_data(data)
        try:
            while True:
                event = conn.next_event()
                if event is _NEED_DATA:
                    if not data:
                        raise FetchFailure(ErrorKind.CONNECTION_CLOSED, "closed before answering CONNECT")
                    if self._received > self._max_head:
                        raise FetchFailure(ErrorKind.PROTOCOL_ERROR, "answer to CONNECT exceeds max_header_size")
                    return None
                kind = type(event)
                if kind is _Informational:
                    continue
                if kind is not _Response:
                    raise FetchFailure(ErrorKind.CONNECTION_CLOSED, "closed before answering CONNECT")
                head: h11.Response = event  # type: ignore[assignment]
                if 200 <= head.status_code < 300 and conn.trailing_data[0]:
                    raise FetchFailure(ErrorKind.PROTOCOL_ERROR, "sent data after its 2xx answer to CONNECT")
                headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in head.headers.raw_items()]
                return Response(head.status_code, head.reason.decode("latin-1"), headers, b"")
        except h11.RemoteProtocolError as exc:
            if not data:
                raise FetchFailure(ErrorKind.CONNECTION_CLOSED, f"closed before answering CONNECT: {exc}") from None
            if exc.error_status_hint == 431:
                raise FetchFailure(ErrorKind.PROTOCOL_ERROR, "answer to CONNECT exceeds max_header_size") from None
            raise FetchFailure(ErrorKind.PROTOCOL_ERROR, f"malformed answer to CONNECT: {exc}") from None


def header_value(headers: list[tuple[str, str]], name: str) -> str | None:
    """The first value of header ``name`` (given in lowercase) in a head's ``headers``, or None."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None

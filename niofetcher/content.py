"""Body decoding: Content-Encoding streamed under a size cap, and charset detection.

A decompression bomb is the reason the cap is applied *while* decoding: a
1 MB gzip body can inflate to 1 GB, so every decompress call is told how much
room is left (zlib's ``max_length``, brotli's ``output_buffer_limit``) and the
fetch fails with ``too_large`` the moment one byte more would come out.
"""

from __future__ import annotations

import codecs
import re
import zlib
from typing import Protocol

from .errors import ErrorKind, FetchFailure

try:  # brotli is optional; only >= 1.2 can bound its output, so only that is used.
    import brotli

    _HAVE_BROTLI = hasattr(brotli.Decompressor(), "can_accept_more_data")
except ImportError:  # pragma: no cover - depends on the environment
    _HAVE_BROTLI = False

ACCEPT_ENCODING = "gzip, deflate, br" if _HAVE_BROTLI else "gzip, deflate"

_CHARSET_PARAM = re.compile(r"""charset\s*=\s*["']?([\w.:-]+)""", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta[^>]{0,512}?charset\s*=\s*["']?\s*([\w.:-]+)""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


class BodyBuffer:
    """Collects a body as it arrives, decoding it if asked, never holding more than ``limit``.

    With ``keep_received`` the bytes as received are kept too, for an archive, but only when
    they differ from the body (it is decoded): an undecoded body is kept once.
    """

    __slots__ = ("_chunks", "_limit", "_received", "_received_size", "_size", "_stream")

    def __init__(self, content_encoding: str | None, limit: int, decode: bool, keep_received: bool = False) -> None:
        self._limit = limit
        self._size = 0
        self._chunks: list[bytes] = []
        self._stream: _Decompressor | None = None
        self._received: list[bytes] | None = None  # kept, and _received_size set, only when decoding
        if decode and content_encoding:
            coding = content_encoding.strip().lower()
            if coding in ("gzip", "x-gzip"):
                self._stream = _Zlib(16 + zlib.MAX_WBITS)
            elif coding == "deflate":
                self._stream = _Deflate()
            elif coding == "br" and _HAVE_BROTLI:
                self._stream = _Brotli()
            # Anything else (stacked or unknown codings) is delivered as it came.
            if keep_received and self._stream is not None:
                self._received = []
                self._received_size = 0

    def feed(self, data: bytes) -> None:
        """Add received body bytes; raises FetchFailure when the decoded size (or the size received,
        when it is kept) passes the limit."""
        if self._stream is None:
            self._add(data)
        else:
            received = self._received
            if received is not None:
                # Bounded too: bytes after the end of a gzip stream are ignored by the decoder, not here.
                self._received_size += len(data)
                if self._received_size > self._limit:
                    raise FetchFailure(ErrorKind.TOO_LARGE, f"body exceeds max_body_size ({self._limit} bytes)")
                received.append(data)
            self._stream.feed(data, self)

    def finish(self) -> bytes:
        """The whole body, once the response has ended."""
        if self._stream is not None:
            self._stream.finish(self)
        return b"".join(self._chunks)

    def received(self, body: bytes) -> bytes:
        """The body as received, given ``body`` from finish(): it is that body unless it was decoded."""
        return body if self._received is None else b"".join(self._received)

    def received_so_far(self) -> bytes:
        """The bytes received before the response failed, as received when they were kept (else the body
        so far, the same bytes unless it was decoded).  A chunk that would have passed the limit is not in it."""
        return b"".join(self._received if self._received is not None else self._chunks)

    def room(self) -> int:
        """How many more decoded bytes fit, plus one, so that overflow is detectable."""
        return self._limit - self._size + 1

    def _add(self, data: bytes) -> None:
        if data:
            self._size += len(data)
            if self._size > self._limit:
                raise FetchFailure(ErrorKind.TOO_LARGE, f"body exceeds max_body_size ({self._limit} bytes)")
            self._chunks.append(data)


class _Decompressor(Protocol):
    """Streams one Content-Encoding into a BodyBuffer, which enforces the size limit."""

    def feed(self, data: bytes, out: BodyBuffer) -> None: ...

    def finish(self, out: BodyBuffer) -> None: ...


class _Zlib:
    """gzip or zlib streams, concatenated gzip members included (RFC 1952 2.2)."""

    __slots__ = ("_d", "_wbits")

    def __init__(self, wbits: int) -> None:
        self._wbits = wbits
        self._d = zlib.decompressobj(wbits)

    def feed(self, data: bytes, out: BodyBuffer) -> None:
        try:
            while data:
                out._add(self._d.decompress(data, out.room()))
                data = self._d.unconsumed_tail
                if self._d.eof:
                    rest = self._d.unused_data
                    if not rest.startswith(b"\x1f\x8b"):
                        return  # trailing garbage after the stream is ignored, as browsers do
                    self._d = zlib.decompressobj(self._wbits)
                    data = rest
        except zlib.error as exc:
            raise FetchFailure(ErrorKind.PROTOCOL_ERROR, f"corrupt compressed body: {exc}") from None

    def finish(self, out: BodyBuffer) -> None:
        try:
            out._add(self._d.flush())
        except zlib.error as exc:
            raise FetchFailure(ErrorKind.PROTOCOL_ERROR, f"corrupt compressed body: {exc}") from None


class _Deflate:
    """"deflate" means zlib-wrapped by RFC 9110, but many servers send raw deflate: look at the header."""

    __slots__ = ("_head", "_inner")

    def __init__(self) -> None:
        self._head = b""
        self._inner: _Zlib | None = None

    def feed(self, data: bytes, out: BodyBuffer) -> None:
        if self._inner is None:
            self._head += data
            if len(self._head) < 2:
                return
            cmf, flg = self._head[0], self._head[1]
            zlib_wrapped = cmf & 0x0F == 8 and ((cmf << 8) | flg) % 31 == 0
            self._inner = _Zlib(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)
            data, self._head = self._head, b""
        self._inner.feed(data, out)

    def finish(self, out: BodyBuffer) -> None:
        if self._inner is None:
            self._inner = _Zlib(-zlib.MAX_WBITS)
            self._inner.feed(self._head, out)
        self._inner.finish(out)


class _Brotli:
    __slots__ = ("_d",)

    def __init__(self) -> None:
        self._d = brotli.Decompressor()

    def feed(self, data: bytes, out: BodyBuffer) -> None:
        try:
            out._add(self._d.process(data, output_buffer_limit=out.room()))
            while not self._d.can_accept_more_data():
                out._add(self._d.process(b"", output_buffer_limit=out.room()))
        except brotli.error as exc:
            raise FetchFailure(ErrorKind.PROTOCOL_ERROR, f"corrupt brotli body: {exc}") from None

    def finish(self, out: BodyBuffer) -> None:
        if not self._d.is_finished():
            raise FetchFailure(ErrorKind.PROTOCOL_ERROR, "brotli body ended early")


def charset_of(content_type: str | None) -> str | None:
    """The charset parameter of a Content-Type header, if it names a codec Python knows."""
    if content_type:
        match = _CHARSET_PARAM.search(content_type)
        if match:
            return _known_codec(match.group(1))
    return None


def sniff_charset(body: bytes) -> str | None:
    """A byte-order mark, else a ``<meta charset>`` in the first 4 KiB (the HTML prescan looks at 1024)."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name
    match = _META_CHARSET.search(body, 0, 4096)
    return _known_codec(match.group(1).decode("ascii", "replace")) if match else None


def decode_text(body: bytes, content_type: str | None) -> str:
    """Decode by the Content-Type charset, else a meta charset, else UTF-8 with replacement."""
    encoding = charset_of(content_type) or sniff_charset(body) or "utf-8"
    return body.decode(encoding, errors="replace")


def _known_codec(name: str) -> str | None:
    """A text codec Python knows by this name; None for unknown names and for bytes-to-bytes
    codecs such as base64, which a hostile Content-Type could otherwise smuggle in."""
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None
    return info.name if getattr(info, "_is_text_encoding", True) else None

"""Body decoding under a cap, and charset detection."""

from __future__ import annotations

import gzip
import zlib

import brotli
import pytest

from niofetcher.content import BodyBuffer, decode_text
from niofetcher.errors import ErrorKind, FetchFailure


def feed_all(buf: BodyBuffer, data: bytes, step: int = 997) -> bytes:
    for i in range(0, len(data), step):
        buf.feed(data[i:i + step])
    return buf.finish()


@pytest.mark.parametrize("encoding, encode", [
    ("gzip", gzip.compress),
    ("deflate", zlib.compress),
    ("deflate", lambda d: zlib.compress(d)[2:-4]),  # raw deflate, as some servers send
    ("br", brotli.compress),
])
def test__decodes_each_coding(encoding: str, encode) -> None:
    data = b"niofetcher " * 5000
    assert feed_all(BodyBuffer(encoding, 1 << 20, True), encode(data)) == data


def test__concatenated_gzip_members() -> None:
    data = gzip.compress(b"one ") + gzip.compress(b"two")
    assert feed_all(BodyBuffer("gzip", 100, True), data) == b"one two"


@pytest.mark.parametrize("encoding, encode", [("gzip", gzip.compress), ("br", brotli.compress)])
def test__bomb_is_capped_while_decoding(encoding: str, encode) -> None:
    bomb = encode(b"\0" * (20 << 20))
    buf = BodyBuffer(encoding, 1 << 20, True)
    with pytest.raises(FetchFailure) as err:
        feed_all(buf, bomb, step=len(bomb))
    assert err.value.kind is ErrorKind.TOO_LARGE


def test__corrupt_gzip_is_a_protocol_error() -> None:
    with pytest.raises(FetchFailure) as err:
        feed_all(BodyBuffer("gzip", 1000, True), b"\x1f\x8b\x08\x00garbage-garbage")
    assert err.value.kind is ErrorKind.PROTOCOL_ERROR


def test__identity_and_undecoded_are_capped_too() -> None:
    with pytest.raises(FetchFailure):
        feed_all(BodyBuffer(None, 10, True), b"x" * 11)
    raw = gzip.compress(b"abc")
    assert feed_all(BodyBuffer("gzip", 100, False), raw) == raw


def test__kept_as_received_beside_the_decoded_body() -> None:
    data = b"niofetcher " * 500
    raw = gzip.compress(data)
    buf = BodyBuffer("gzip", 1 << 20, True, keep_received=True)
    body = feed_all(buf, raw, step=100)
    assert (body, buf.received(body)) == (data, raw)
    plain = BodyBuffer(None, 1 << 20, True, keep_received=True)
    body = feed_all(plain, data)
    assert buf.received(body) is not body and plain.received(body) is body  # undecoded: kept once


def test__bytes_kept_as_received_are_capped_too() -> None:
    # The decoder ignores what follows the end of a gzip stream; what is kept of it must not grow for ever.
    raw = gzip.compress(b"abc") + b"x" * 200
    assert feed_all(BodyBuffer("gzip", 100, True), raw) == b"abc"
    with pytest.raises(FetchFailure) as err:
        feed_all(BodyBuffer("gzip", 100, True, keep_received=True), raw)
    assert err.value.kind is ErrorKind.TOO_LARGE


def test__text_by_header_meta_or_utf8() -> None:
    cyrillic = "Привет".encode("windows-1251")
    assert decode_text(cyrillic, "text/html; charset=windows-1251") == "Привет"
    page = b'<html><head><meta charset="windows-1251"></head><body>' + cyrillic + b"</body>"
    assert "Привет" in decode_text(page, "text/html")
    assert decode_text(b"caf\xc3\xa9 \xff", None) == "café \ufffd"
    assert decode_text(b"x", "text/html; charset=no-such-codec") == "x"
    assert decode_text(b"x", "text/html; charset=base64") == "x"  # not a text codec: ignored, not raised

"""Non-ASCII URLs everywhere (issue 9 case 2; DESIGN.md "URLs"), over real loopback sockets.

One stored form (``normalize_url``) whichever way a URL arrived, and the
request target (``parse_target``) that form sends: IDNA A-label hosts, UTF-8
percent-encoding of non-ASCII and spaces with existing escapes kept, dot
segments removed.  End to end: a registered non-ASCII URL, a redirect whose
``Location`` holds raw UTF-8 (or Latin-1) bytes, a Unicode host name mapped
by ``resolve`` in either form, and the ``fetch`` command; each judged by what
the server received.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeServer
from hypothesis import given, settings
from hypothesis import strategies as st
from rawserver import Handler, RawServer, http_response, ok, serve_keepalive

from niofetcher import FetcherConfig, FetchResult, NIOFetcher
from niofetcher.urls import (
    _normalize_split,
    normalize_url,
    parse_target,
    remove_dot_segments,
)

QUICK = {"connect_timeout": 2.0, "read_timeout": 4.0}


def _request_target(head: bytes) -> bytes:
    return head.split(b" ", 2)[1]


def _host_header(head: bytes) -> bytes:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"host":
            return value.strip()
    raise AssertionError(f"no Host header in {head!r}")


def _fetch_one(url: str, **config: Any) -> FetchResult:
    with NIOFetcher(FetcherConfig(**{**QUICK, **config})) as fetcher:
        assert fetcher.register(url)
        results = list(fetcher.results())
    assert len(results) == 1
    return results[0]


def _no_dns(host: str, port: int) -> list[tuple[int, tuple[Any, ...]]]:
    """A resolver for tests: no name may leave the machine (the ``resolve`` map must answer)."""
    raise OSError(f"no DNS in tests: {host}")


# -- the stored form --------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # The rules normalize_url had in frontier.py, unchanged.
        ("HTTP://Example.COM/Path?Q=A", "http://example.com/Path?Q=A"),
        ("https://EXAMPLE.com", "https://example.com/"),
        ("http://example.com:80/x", "http://example.com/x"),
        ("https://example.com:443/x", "https://example.com/x"),
        ("http://example.com:443/x", "http://example.com:443/x"),
        ("http://example.com:/x", "http://example.com/x"),
        ("http://example.com:0080/x", "http://example.com/x"),
        ("http://example.com/x?a=1#frag", "http://example.com/x?a=1"),
        ("http://example.com?b=2&a=1", "http://example.com/?b=2&a=1"),
        ("http://example.com/a%2Fb?x=%41&x=B", "http://example.com/a%2Fb?x=%41&x=B"),
        ("http://[::1]:80/x", "http://[::1]/x"),
        ("https://[2001:DB8::1]:8443", "https://[2001:db8::1]:8443/"),
        ("http://user:Pass@Example.com:80/", "http://user:Pass@example.com/"),
        ("  http://example.com/x  ", "http://example.com/x"),
        # The new ones: IDNA hosts, UTF-8 escapes, dot segments.
        ("http://EXAMPLE.com/a/../\u00fcn\u00ef", "http://example.com/%C3%BCn%C3%AF"),
        ("http://example.com/%C3%BCn%C3%AF", "http://example.com/%C3%BCn%C3%AF"),
        ("http://example.com/./\u00fcn\u00ef#x", "http://example.com/%C3%BCn%C3%AF"),
        ("http://b\u00fccher.example/", "http://xn--bcher-kva.example/"),
        ("http://B\u00dcCHER.Example.:80", "http://xn--bcher-kva.example/"),
        ("http://xn--bcher-kva.example/", "http://xn--bcher-kva.example/"),
        ("http://example.com./x", "http://example.com/x"),  # the host parse_target connects to
        ("http://h/a b?q=c d&e=\u20ac", "http://h/a%20b?q=c%20d&e=%E2%82%AC"),
        ("http://h/x ?", "http://h/x%20"),
        ("http://h/a/b/c/./../../g", "http://h/a/g"),  # RFC 3986 5.2.4's own example
        ("http://h/a/..", "http://h/"),
        ("http://h/..?x=/../", "http://h/?x=/../"),  # the query keeps its dots
        ("http://h/.well-known/a", "http://h/.well-known/a"),
        ("http://h/%2E%2E/a", "http://h/%2E%2E/a"),  # escapes stay as they are
        ("http://\u00fcser:p\u00e4ss@h/", "http://%C3%BCser:p%C3%A4ss@h/"),
    ],
)
def test_normalize_url(url: str, expected: str) -> None:
    assert normalize_url(url) == expected
    assert normalize_url(expected) == expected  # a normal form stays as it is
    assert _normalize_split(url) == expected


@pytest.mark.parametrize(
    "forms",
    [
        ["http://EXAMPLE.com/a/../\u00fcn\u00ef", "http://example.com/%C3%BCn%C3%AF", "http://example.com/./\u00fcn\u00ef#x",
         "http://example.com:80/b/../%C3%BCn\u00ef"],
        ["http://b\u00fccher.example/", "http://xn--bcher-kva.example/", "http://B\u00dcCHER.example:80"],
        ["http://h/a%20b", "http://h/a b", "http://h/x/../a b#c"],
        ["http://h/%c3%bc?q=%2f", "http://h/%C3%BC?q=%2F", "http://h/\u00fc?q=%2f", "http://h/%C3%bc?q=%2F"],
    ],
)
def test_one_stored_form_whichever_way_a_url_arrived(forms: list[str]) -> None:
    assert len({normalize_url(url) for url in forms}) == 1
    assert len({parse_target(url) for url in forms}) == 1


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/", "/relative/path", "http://", "http://[::1/", "http://example.com:99999/",
     "http://exa mple.com/", "http://./", "http://\u00fc..x/", "http://" + "\u00fc" * 64 + ".x/", "http://xn--\u00fc/",
     "http://a\u00a0\u00fc/", "http://a.test/\udcff", "http://a.test/x\x00y"],
)
def test_normalize_url_rejects(url: str) -> None:
    with pytest.raises(ValueError):
        normalize_url(url)


def test_normalize_url_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        normalize_url(b"http://example.com/")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/a/b/c/./../../g", "/a/g"), ("/./a", "/a"), ("/../a", "/a"), ("/a/.", "/a/"), ("/a/..", "/"), ("/.", "/"),
     ("/a//../b", "/a/b"), ("//x/../y", "//y"), ("/.a/..b/...", "/.a/..b/..."), ("/a/b/", "/a/b/")],
)
def test__remove_dot_segments(path: str, expected: str) -> None:
    assert remove_dot_segments(path) == expected


_url_parts = st.tuples(
    st.sampled_from(["http", "https", "HTTP", "Https", "ftp"]),
    st.sampled_from(["a.test", "A.Test", "a.test.", "127.0.0.1", "[::1]", "[FE80::1]", "user@a.test", "", "x_y.test",
                     "b\u00fccher.test", "B\u00dcCHER.test", "xn--bcher-kva.test", "\u00fc\u00fc.\u00fc", "u\u00e9@a.test"]),
    st.sampled_from(["", ":", ":80", ":443", ":8080", ":0", ":65535", ":65536", ":080", ":x"]),
    st.text(alphabet="/abcAB%?#&=.:@ \t\x1f\x7f\xa0\u00e9\u20ac[]\\", max_size=14),
)


@settings(max_examples=1500, deadline=None)
@given(_url_parts)
def test__normal_form_shortcut_agrees_with_the_long_way(parts: tuple[str, str, str, str]) -> None:
    scheme, host, port, rest = parts
    url = f"{scheme}://{host}{port}{rest}"
    try:
        expected = _normalize_split(url)
    except ValueError:
        with pytest.raises(ValueError):
            normalize_url(url)
        with pytest.raises(ValueError):
            parse_target(url)
        return
    assert normalize_url(url) == expected
    assert normalize_url(expected) == expected
    # The stored form asks the server for exactly what the URL as it came asks for.
    assert parse_target(expected) == parse_target(url)


# -- on the wire ------------------------------------------------------------


def test_a_non_ascii_url_goes_out_percent_encoded(raw_server: MakeServer, no_leaks: object) -> None:
    """Today start_request raised UnicodeEncodeError on the loop thread for this URL."""
    srv = raw_server(ok(b"found"))
    result = _fetch_one(srv.url("/\u00fcn\u00ef/a/../b c?q=\u20ac"))
    assert (result.error, result.status, result.body) == (None, 200, b"found")
    assert [_request_target(head) for head in srv.requests] == [b"/%C3%BCn%C3%AF/b%20c?q=%E2%82%AC"]


def _redirect_site(location: bytes) -> Handler:
    """/start redirects to ``location`` (sent as these very bytes); any other path answers 200 with its target."""

    def respond(head: bytes) -> bytes:
        target = _request_target(head)
        if target == b"/start":
            return http_response(301, headers=[(b"Location", location)])
        return http_response(200, b"served " + target)

    return serve_keepalive(respond)


@pytest.mark.parametrize(
    ("location", "path"),
    [
        (b"/dir/\xc3\xbcn\xc3\xaf.html", "/dir/%C3%BCn%C3%AF.html"),  # raw UTF-8, as nginx sends it
        (b"/dir/\xfcn.html", "/dir/%C3%BCn.html"),  # not UTF-8: read as Latin-1, sent as UTF-8
        (b"/dir/x/../\xc3\xbc", "/dir/%C3%BC"),
    ],
    ids=["utf-8", "latin-1", "dot-segments"],
)
def test_a_redirect_to_raw_bytes_reaches_the_path_wget_and_curl_reach(
    raw_server: MakeServer, no_leaks: object, location: bytes, path: str
) -> None:
    srv = raw_server(_redirect_site(location))
    result = _fetch_one(srv.url("/start"))
    assert (result.error, result.status) == (None, 200)
    assert [_request_target(head) for head in srv.requests] == [b"/start", path.encode()]
    assert result.body == b"served " + path.encode()
    assert normalize_url(result.final_url) == srv.url(path)


def _unicode_host_cases() -> list[tuple[str, str]]:
    # (the URL's host, the resolve key's host); both A-labels already worked.
    return [("b\u00fccher.test", "b\u00fccher.test"), ("b\u00fccher.test", "xn--bcher-kva.test"),
            ("xn--bcher-kva.test", "B\u00fccher.test")]


@pytest.mark.parametrize(("url_host", "key_host"), _unicode_host_cases())
def test_a_unicode_host_mapped_by_resolve_goes_out_as_a_labels(
    raw_server: MakeServer, no_leaks: object, url_host: str, key_host: str
) -> None:
    srv = raw_server(ok(b"found"))
    port = srv.address[1]
    result = _fetch_one(f"http://{url_host}:{port}/x", resolve={f"{key_host}:{port}": "127.0.0.1"}, resolver=_no_dns)
    assert (result.error, result.status, result.body) == (None, 200, b"found")
    assert [_host_header(head) for head in srv.requests] == [b"xn--bcher-kva.test:%d" % port]


@pytest.mark.timeout(60)
def test_fetch_command_sends_a_non_ascii_url(tmp_path: Path) -> None:
    """The issue's reproduction: ``niofetcher fetch 'http://127.0.0.1:P/ünï'``."""
    out = tmp_path / "results.jsonl"
    with RawServer(ok(b"found")) as srv:
        done = subprocess.run(
            [sys.executable, "-m", "niofetcher", "fetch", srv.url("/\u00fcn\u00ef"), "--out", str(out)],
            capture_output=True, text=True, timeout=50, check=False,
        )
        requests = list(srv.requests)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert [_request_target(head) for head in requests] == [b"/%C3%BCn%C3%AF"]
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["status"] == 200

"""parse_target's fast path for plain URLs must agree with the general urlsplit path on every input."""

from __future__ import annotations

from typing import Union

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from niofetcher.urls import Origin, Target, _parse_target_general, parse_target

_SCHEMES = ["http", "https", "HTTP", "hTtPs", "ftp", "", "http:", "https:/"]
_HOSTS = ["example.com", "Example.COM.", "a_b-c.d", "127.0.0.1", "[::1]", "", ".", "..", "h%41", "user@h",
          "u:p@h", "h h", "xn--bcher-kva.example", "b\u00fccher.example"]
_PORTS = ["", ":", ":0", ":80", ":080", ":443", ":65535", ":65536", ":99999", ":123456", ":8a", ":-1"]
_PATHS = ["", "/", "/a/b", "/a b", "/caf\u00e9", "/a?b=c", "/a?", "?q", "/a#f", "#f", "/a?b#c d", "/%20",
          "/a\tb", "/a\nb", "/a\rb", "\\x", "/a?b?c", "/[x]", "/a#b#c", "/\x7f", "//x", "/a\x00b", "/\udcff",
          "?\ud800", "#\udcff"]


def _outcome(parse: object, url: str) -> Union[Target, str]:
    try:
        return parse(url)  # type: ignore[operator,no-any-return]
    except ValueError as exc:
        return f"ValueError: {exc}"


@settings(max_examples=2000, deadline=None)
@given(
    scheme=st.sampled_from(_SCHEMES), host=st.sampled_from(_HOSTS), port=st.sampled_from(_PORTS),
    path=st.lists(st.sampled_from(_PATHS), max_size=3).map("".join),
    padding=st.sampled_from(["", " ", "\t", "\n"]),
)
def test_fast_path_agrees_with_urlsplit(scheme: str, host: str, port: str, path: str, padding: str) -> None:
    url = f"{padding}{scheme}://{host}{port}{path}{padding}"
    assert _outcome(parse_target, url) == _outcome(_parse_target_general, url)


@pytest.mark.parametrize(("url", "expected"), [
    ("http://Example.com", Target(Origin("http", "example.com", 80), "example.com", "/")),
    ("HTTPS://example.com.:8443/a?b=c#frag",
     Target(Origin("https", "example.com", 8443), "example.com:8443", "/a?b=c")),
    ("http://127.0.0.1:080/x?", Target(Origin("http", "127.0.0.1", 80), "127.0.0.1", "/x")),
])
def test_plain_urls(url: str, expected: Target) -> None:
    assert parse_target(url) == expected


@pytest.mark.parametrize("url", ["http://h:65536/", "http://./", "ftp://h/", "http://", "http:///x", 42,
                                 "http://h/a\x00b", "http://h/\udcff", "http://h/?q=\ud800", "http://h/#\udcff"])
def test_bad_urls_raise(url: object) -> None:
    with pytest.raises(ValueError):
        parse_target(url)  # type: ignore[arg-type]

"""parse_target's fast path for plain URLs must agree with the general urlsplit path on every input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from niofetcher.urls import Origin, Target, _parse_target_general, parse_target

_SCHEMES = ["http", "https", "HTTP", "hTtPs", "ftp", "", "http:", "https:/"]
_HOSTS = ["example.com", "Example.COM.", "a_b-c.d", "127.0.0.1", "[::1]", "", ".", "..", "h%41", "user@h",
          "u:p@h", "h h", "xn--bcher-kva.example", "b\u00fccher.example", "B\u00dcCHER.Example.", "\u00fc..x",
          "a\u00a0\u00fc", "xn--\u00fc", "\uff21.test", "h\x1fx"]
_PORTS = ["", ":", ":0", ":80", ":080", ":443", ":65535", ":65536", ":99999", ":123456", ":8a", ":-1"]
_PATHS = ["", "/", "/a/b", "/a b", "/caf\u00e9", "/a?b=c", "/a?", "?q", "/a#f", "#f", "/a?b#c d", "/%20",
          "/a\tb", "/a\nb", "/a\rb", "\\x", "/a?b?c", "/[x]", "/a#b#c", "/\x7f", "//x", "/a\x00b", "/\udcff",
          "?\ud800", "#\udcff", "/.", "/..", "/./", "/../", "/.well-known", "/a/../b", "/a/./b", "/..a", "/...",
          "/\u00fcn\u00ef", "?q=\u00fc", "#\u00fc", "/%C3%BC", "/%2E%2E/", "/a%zz", "/\u20ac?\u20ac=/./"]


def _outcome(parse: object, url: str) -> Target | str:
    try:
        return parse(url)  # type: ignore[operator,no-any-return]
    except ValueError as exc:
        return f"ValueError: {exc}"


@settings(max_examples=2000, deadline=None)
@given(
    scheme=st.sampled_from(_SCHEMES), host=st.sampled_from(_HOSTS), port=st.sampled_from(_PORTS),
    path=st.lists(st.sampled_from(_PATHS), max_size=3).map("".join),
    padding=st.sampled_from(["", " ", "\t", "\n", "\x1f", "\xa0"]),
)
def test_fast_path_agrees_with_urlsplit(scheme: str, host: str, port: str, path: str, padding: str) -> None:
    url = f"{padding}{scheme}://{host}{port}{path}{padding}"
    assert _outcome(parse_target, url) == _outcome(_parse_target_general, url)


@pytest.mark.parametrize(("url", "expected"), [
    ("http://Example.com", Target(Origin("http", "example.com", 80), "example.com", "/")),
    # DESIGN.md "URLs": non-ASCII as UTF-8 %XX escapes, escapes kept, dot segments removed, IDNA hosts.
    ("http://127.0.0.1:8080/\u00fcn\u00ef", Target(Origin("http", "127.0.0.1", 8080), "127.0.0.1:8080", "/%C3%BCn%C3%AF")),
    ("http://h/%C3%BC/\u00fc?q=\u20ac%20 x#\u00fc", Target(Origin("http", "h", 80), "h", "/%C3%BC/%C3%BC?q=%E2%82%AC%20%20x")),
    ("http://h/a/b/../../c/./d/..", Target(Origin("http", "h", 80), "h", "/c/")),
    ("http://h/a/..?x=/../", Target(Origin("http", "h", 80), "h", "/?x=/../")),  # the query keeps its dots
    ("http://h/.well-known/x", Target(Origin("http", "h", 80), "h", "/.well-known/x")),
    ("https://B\u00fccher.Example.:8443/x",
     Target(Origin("https", "xn--bcher-kva.example", 8443), "xn--bcher-kva.example:8443", "/x")),
    ("HTTPS://example.com.:8443/a?b=c#frag",
     Target(Origin("https", "example.com", 8443), "example.com:8443", "/a?b=c")),
    ("http://127.0.0.1:080/x?", Target(Origin("http", "127.0.0.1", 80), "127.0.0.1", "/x")),
])
def test_plain_urls(url: str, expected: Target) -> None:
    assert parse_target(url) == expected


@pytest.mark.parametrize("url", ["http://h:65536/", "http://./", "ftp://h/", "http://", "http:///x", 42,
                                 "http://h/a\x00b", "http://h/\udcff", "http://h/?q=\ud800", "http://h/#\udcff",
                                 "http://\u00fc..x/", "http://" + "\u00fc" * 64 + ".x/", "http://xn--\u00fc.x/"])
def test_bad_urls_raise(url: object) -> None:
    with pytest.raises(ValueError):
        parse_target(url)  # type: ignore[arg-type]

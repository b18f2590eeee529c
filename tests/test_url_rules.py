"""The URL rules (niofetcher/urls/): the request target, the stored form and the absolute link, held to the table.

The module docstring of niofetcher.urls has one table of what each of the
three forms accepts, refuses and guarantees.  First each form alone: its
fast path against its general path (hypothesis, and every href of the real
corpus), its own cases.  Then "the three forms" runs the same inputs through
all three and checks each row of the table, and hypothesis checks the
agreements it states.  Last, end to end (issue 9 case 2, docs/guarantees.md, "URLs"),
over real loopback sockets: a registered non-ASCII URL, a redirect whose
``Location`` holds raw UTF-8 (or Latin-1) bytes, a Unicode host name mapped
by ``resolve`` in either form, and the ``fetch`` command; each judged by
what the server received.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import MakeServer
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree
from rawserver import Handler, RawServer, http_response, ok, serve_keepalive
from test_parse import NO_CORPUS, PAGES

from niofetcher import FetcherConfig, FetchResult, NIOFetcher
from niofetcher.urls import (
    Origin,
    Target,
    absolute_url,
    bracketed,
    normalize_url,
    parse_target,
    redirect_url,
    remove_dot_segments,
)
from niofetcher.urls import targets as targets_module
from niofetcher.urls.links import _absolute_general
from niofetcher.urls.targets import _normalize_split, _parse_target_general

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


# -- the request target -------------------------------------------------------

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
    # docs/guarantees.md, "URLs": non-ASCII as UTF-8 %XX escapes, escapes kept, dot segments removed, IDNA hosts.
    ("http://127.0.0.1:8080/\u00fcn\u00ef", Target(Origin("http", "127.0.0.1", 8080), "127.0.0.1:8080", "/%C3%BCn%C3%AF")),
    ("http://h/%C3%BC/\u00fc?q=\u20ac%20 x#\u00fc", Target(Origin("http", "h", 80), "h", "/%C3%BC/%C3%BC?q=%E2%82%AC%20%20x")),
    ("http://h/a/b/../../c/./d/..", Target(Origin("http", "h", 80), "h", "/c/")),
    ("http://h/a/..?x=/../", Target(Origin("http", "h", 80), "h", "/?x=/../")),  # the query keeps its dots
    ("http://h/.well-known/x", Target(Origin("http", "h", 80), "h", "/.well-known/x")),
    ("https://B\u00fccher.Example.:8443/x",
     Target(Origin("https", "xn--bcher-kva.example", 8443), "xn--bcher-kva.example:8443", "/x")),
    ("HTTPS://example.com.:8443/a?b=c#frag",
     Target(Origin("https", "example.com", 8443), "example.com:8443", "/a?b=c")),
    ("http://127.0.0.1:080/x?", Target(Origin("http", "127.0.0.1", 80), "127.0.0.1", "/x?")),  # WHATWG keeps "?"
])
def test_plain_urls(url: str, expected: Target) -> None:
    assert parse_target(url) == expected


@pytest.mark.parametrize("url", ["http://h:65536/", "http://./", "ftp://h/", "http://", "http:///", 42,
                                 "http://h/a\x00b", "http://h/\udcff", "http://h/?q=\ud800", "http://h/#\udcff",
                                 "http://xn--\u00fc.x/", "http://a\u00a0\u00fc/"])
def test_bad_urls_raise(url: object) -> None:
    with pytest.raises(ValueError):
        parse_target(url)  # type: ignore[arg-type]


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
        ("http://user:Pass@Example.com:80/", "http://example.com/"),  # credentials are never stored
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
        ("http://h/x ?", "http://h/x%20?"),
        ("http://h/a/b/c/./../../g", "http://h/a/g"),  # RFC 3986 5.2.4's own example
        ("http://h/a/..", "http://h/"),
        ("http://h/..?x=/../", "http://h/?x=/../"),  # the query keeps its dots
        ("http://h/.well-known/a", "http://h/.well-known/a"),
        ("http://h/%2E%2E/a", "http://h/a"),  # WHATWG: "%2e" is a dot in a dot segment
        ("http://h/%2E%2E.a", "http://h/%2E%2E.a"),  # and an escape like any other elsewhere
        ("http://\u00fcser:p\u00e4ss@h/", "http://h/"),
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
     "http://exa mple.com/", "http://./", "http://xn--\u00fc/",
     "http://a\u00a0\u00fc/", "http://a.test/\udcff", "http://a.test/x\x00y"],
)
def test_normalize_url_rejects(url: str) -> None:
    with pytest.raises(ValueError):
        normalize_url(url)


def test_a_non_ascii_host_is_mapped_as_whatwg_maps_it() -> None:
    # UTS #46 as the URL Standard applies it: non-transitional ("ß" stays), no DNS length checks
    assert normalize_url("http://fa\u00df.de/") == "http://xn--fa-hia.de/"
    assert normalize_url("http://\u00fc..x/") == "http://xn--tda..x/"
    assert normalize_url("http://" + "\u00fc" * 64 + ".x/") == "http://xn--tda" + "a" * 63 + ".x/"


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


@settings(max_examples=300, deadline=None)
@given(st.lists(_url_parts, min_size=1, max_size=6))
def test_normal_forms_remembered_are_the_normal_forms(urls: list[tuple[str, str, str, str]]) -> None:
    """normalize_url remembers what it answered (a memory that starts again when full): asked again,
    in any order and after the memory was emptied, it answers as the long way and refuses what it refused."""
    texts = ["{}://{}{}{}".format(*parts) for parts in urls]
    for _ in range(2):
        for url in [*texts, *reversed(texts)]:
            try:
                expected = _normalize_split(url)
            except ValueError:
                with pytest.raises(ValueError):
                    normalize_url(url)
                continue
            assert normalize_url(url) == expected
        targets_module._normal_forms.clear()


def test_normal_forms_are_remembered_up_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(targets_module, "_MAX_NORMAL_FORMS", 4)
    urls = [f"HTTP://H{i}.test:80/a/../b" for i in range(10)]
    assert [normalize_url(url) for url in urls * 2] == [f"http://h{i}.test/b" for i in range(10)] * 2
    assert len(targets_module._normal_forms) <= 4


def test_a_str_subclass_is_normalised_not_remembered() -> None:
    class Odd(str):
        pass

    targets_module._normal_forms.clear()
    assert normalize_url(Odd("http://H.test/x")) == "http://h.test/x"
    assert not targets_module._normal_forms



# -- the absolute link ---------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
def test__absolute_fast_path_agrees_with_general() -> None:
    """Every href, src and action in the corpus: the fast path answers as urljoin would."""
    raws: set[str] = set()
    for path in PAGES:
        root = etree.fromstring(path.read_bytes(), etree.HTMLParser(encoding="utf-8", huge_tree=True))
        if root is None:
            continue
        for el in root.iter("a", "area", "img", "frame", "iframe", "form", "base"):
            for attr in ("href", "src", "action"):
                value = el.get(attr)
                if value is not None:
                    raws.add(value)
    raws |= {"/", "//", "///x", "/./a", "/a/../b", "/a?", "/a?#", "https://a.b", "https://a.b?x", "//h/p?q#f"}
    assert len(raws) > 1000
    for base in ("https://example.org/articles/x/", "http://example.org", "https://Ex.ORG:8443/a/b;p?q#f", ""):
        base = absolute_url(base, "") or ""
        for raw in raws:
            stripped = raw.strip("".join(map(chr, range(0x21))))
            assert absolute_url(raw, base) == _absolute_general(stripped, base), (raw, base)


_PORT_HREFS = ["/x", "/x?a=1#f", "//127.0.0.1:8080/y", "http://127.0.0.1:8080", "http://h:0/", "http://h:080/z",
               "http://h:65535/", "http://h:65536/", "http://h:99999/", "https://h:/", "http://h:8a/", "z", "../z"]


@pytest.mark.parametrize("base", ["http://127.0.0.1:8080/a/b", "http://h:65536/a", "https://h:443/", "http://h/"])
@pytest.mark.parametrize("href", _PORT_HREFS)
def test_absolute_fast_path_agrees_with_general_on_ports(href: str, base: str) -> None:
    """Test sites and many intranets have ports in every URL: the fast path takes them, and agrees."""
    assert absolute_url(href, base) == _absolute_general(href, base)


# -- the three forms, held to the table of niofetcher.urls ------------------------

REFUSED = "refused"  # ValueError from parse_target and normalize_url, None from absolute_url
# The characters absolute_url percent-encodes (WHATWG path and query sets) and the other two keep.
_ONLY_ABSOLUTE_ENCODES = re.compile(r"[\"<>`{}']").search


def _target(url: str) -> tuple[str, str, str] | str:
    try:
        target = parse_target(url)
    except ValueError:
        return REFUSED
    return str(target.origin), target.host_header, target.path


def _normal(url: str) -> str:
    try:
        return normalize_url(url)
    except ValueError:
        return REFUSED


def _absolute(url: str) -> str:
    return absolute_url(url, "") or REFUSED


# One URL a row, through the three functions: (url, parse_target, normalize_url, absolute_url(url, "")).
THE_TABLE = [
    # scheme and host lower case; IDNA A-labels; trailing dots dropped, but kept by absolute_url as written
    ("http://example.com/a", ("http://example.com:80", "example.com", "/a"), "http://example.com/a",
     "http://example.com/a"),
    ("HTTP://Example.COM/Path?Q=A", ("http://example.com:80", "example.com", "/Path?Q=A"),
     "http://example.com/Path?Q=A", "http://example.com/Path?Q=A"),
    ("http://b\u00fccher.example/", ("http://xn--bcher-kva.example:80", "xn--bcher-kva.example", "/"),
     "http://xn--bcher-kva.example/", "http://xn--bcher-kva.example/"),
    ("http://B\u00dcCHER.Example./x", ("http://xn--bcher-kva.example:80", "xn--bcher-kva.example", "/x"),
     "http://xn--bcher-kva.example/x", "http://xn--bcher-kva.example./x"),
    ("http://example.com./x", ("http://example.com:80", "example.com", "/x"), "http://example.com/x",
     "http://example.com./x"),
    ("http://fa\u00df.de/", ("http://xn--fa-hia.de:80", "xn--fa-hia.de", "/"), "http://xn--fa-hia.de/", "http://xn--fa-hia.de/"),  # UTS #46
    # non-ASCII and spaces as UTF-8 escapes; escapes in upper case, but kept as written by absolute_url
    ("http://h/\u00fcn\u00ef", ("http://h:80", "h", "/%C3%BCn%C3%AF"), "http://h/%C3%BCn%C3%AF",
     "http://h/%C3%BCn%C3%AF"),
    ("http://h/?q=\u20ac", ("http://h:80", "h", "/?q=%E2%82%AC"), "http://h/?q=%E2%82%AC", "http://h/?q=%E2%82%AC"),
    ("http://h/a b?c d", ("http://h:80", "h", "/a%20b?c%20d"), "http://h/a%20b?c%20d", "http://h/a%20b?c%20d"),
    ("http://h/%c3%bc?q=%2f", ("http://h:80", "h", "/%C3%BC?q=%2F"), "http://h/%C3%BC?q=%2F", "http://h/%c3%bc?q=%2f"),
    ("http://h/%2E%2E/a", ("http://h:80", "h", "/a"), "http://h/a", "http://h/a"),
    # the WHATWG sets, in all three forms: a seed is sent and stored as the same link on a page would be
    ('http://h/"q"?a=<b>', ("http://h:80", "h", "/%22q%22?a=%3Cb%3E"), "http://h/%22q%22?a=%3Cb%3E",
     "http://h/%22q%22?a=%3Cb%3E"),
    ("http://h/it's?it's", ("http://h:80", "h", "/it's?it%27s"), "http://h/it's?it%27s", "http://h/it's?it%27s"),
    # dot segments removed ("%2e" is a dot in them); "\\" is "/" before the query
    ("http://h/a/../b/./c", ("http://h:80", "h", "/b/c"), "http://h/b/c", "http://h/b/c"),
    ("http://h/a/..", ("http://h:80", "h", "/"), "http://h/", "http://h/"),
    ("http://h/a\\b/%2e%2E/c?d\\e", ("http://h:80", "h", "/a/c?d\\e"), "http://h/a/c?d\\e", "http://h/a/c?d\\e"),
    # two backslashes for the slashes after the scheme, or one slash, or none
    ("https:\\\\h\\x", ("https://h:443", "h", "/x"), "https://h/x", "https://h/x"),
    ("http:/h/x", ("http://h:80", "h", "/x"), "http://h/x", "http://h/x"),
    # IPv6 literals: bare in the Origin, in brackets everywhere else, lower case
    ("http://[::1]:8080/x", ("http://[::1]:8080", "[::1]:8080", "/x"), "http://[::1]:8080/x", "http://[::1]:8080/x"),
    ("http://[FE80::1]/", ("http://[fe80::1]:80", "[fe80::1]", "/"), "http://[fe80::1]/", "http://[fe80::1]/"),
    # ... in their canonical form (RFC 5952), as WHATWG writes them
    ("http://[0:0::1]/", ("http://[::1]:80", "[::1]", "/"), "http://[::1]/", "http://[::1]/"),
    ("http://[::127.0.0.1]/", ("http://[::7f00:1]:80", "[::7f00:1]", "/"), "http://[::7f00:1]/", "http://[::7f00:1]/"),
    # a host that ends in a number is an IPv4 address, written in dotted decimal, or no host at all
    ("http://0x7f.1/", ("http://127.0.0.1:80", "127.0.0.1", "/"), "http://127.0.0.1/", "http://127.0.0.1/"),
    ("http://3232235521./", ("http://192.168.0.1:80", "192.168.0.1", "/"), "http://192.168.0.1/",
     "http://192.168.0.1/"),
    # a percent-encoded host is decoded
    ("http://h%4Fst/", ("http://host:80", "host", "/"), "http://host/", "http://host/"),
    # ports: explicit in the Origin, the default one dropped everywhere else, a number (WHATWG)
    ("http://h:80/x", ("http://h:80", "h", "/x"), "http://h/x", "http://h/x"),
    ("https://h:443/", ("https://h:443", "h", "/"), "https://h/", "https://h/"),
    ("http://h:443/", ("http://h:443", "h:443", "/"), "http://h:443/", "http://h:443/"),
    ("http://h:0080/x", ("http://h:80", "h", "/x"), "http://h/x", "http://h/x"),
    ("http://h:08080/x", ("http://h:8080", "h:8080", "/x"), "http://h:8080/x", "http://h:8080/x"),
    # userinfo: never sent, never stored, kept by absolute_url as WHATWG writes it (percent-encoded)
    ("http://User:Pass@H/x", ("http://h:80", "h", "/x"), "http://h/x", "http://User:Pass@h/x"),
    ("http://\u00fcser:@h/", ("http://h:80", "h", "/"), "http://h/", "http://%C3%BCser@h/"),
    # fragment and empty query dropped; tab inside removed, C0 and space at the ends stripped
    ("http://h/x#frag", ("http://h:80", "h", "/x"), "http://h/x", "http://h/x"),
    ("http://h/x?", ("http://h:80", "h", "/x?"), "http://h/x?", "http://h/x?"),  # an empty query is kept
    ("http://h/a\tb", ("http://h:80", "h", "/ab"), "http://h/ab", "http://h/ab"),
    ("  http://h/x \n", ("http://h:80", "h", "/x"), "http://h/x", "http://h/x"),
    # refused by all three
    ("ftp://h/", REFUSED, REFUSED, REFUSED),
    ("mailto:a@b.test", REFUSED, REFUSED, REFUSED),
    ("http://", REFUSED, REFUSED, REFUSED),
    ("http://h:65536/", REFUSED, REFUSED, REFUSED),
    ("http://[::1/", REFUSED, REFUSED, REFUSED),
    ("http://h h/", REFUSED, REFUSED, REFUSED),
    ("http://xn--\u00fc.x/", REFUSED, REFUSED, REFUSED),
    ("http://a^b/", REFUSED, REFUSED, REFUSED),  # a WHATWG forbidden host code point
    ("http://h%00/", REFUSED, REFUSED, REFUSED),
    ("http://foo.09/", REFUSED, REFUSED, REFUSED),  # ends in a number, and no IPv4 address
    ("http://1.2.3.256/", REFUSED, REFUSED, REFUSED),
    # where they part: NUL; the host "."; a "\\" before an "@" in the authority (tools read two hosts in it);
    # three slashes after the scheme
    ("http://h/a\x00b", REFUSED, REFUSED, "http://h/a%00b"),
    ("http://./", REFUSED, REFUSED, "http://./"),
    ("http://a\\b@c/", REFUSED, REFUSED, "http://a/b@c/"),
    ("http:///h/x", REFUSED, REFUSED, "http://h/x"),  # a seed without its host; browsers skip the slashes
]


@pytest.mark.parametrize(("url", "target", "normal", "absolute"), THE_TABLE)
def test_the_three_forms(url: str, target: tuple[str, str, str] | str, normal: str, absolute: str) -> None:
    assert (_target(url), _normal(url), _absolute(url)) == (target, normal, absolute)
    if normal != REFUSED:
        assert _normal(normal) == normal  # a normal form stays as it is
        assert _target(normal) == target  # and asks for what the URL asked for
    if absolute != REFUSED and normal != REFUSED:
        assert _absolute(absolute) == absolute  # an absolute link stays as it is
        if not _ONLY_ABSOLUTE_ENCODES(url):
            assert _normal(absolute) == normal


@pytest.mark.parametrize("host", ["h", "[::1]", "[fe80::a]", "xn--bcher-kva.test", "127.0.0.1"])
def test_one_bracket_rule(host: str) -> None:
    bare = host.strip("[]")
    assert bracketed(bare) == host
    assert str(Origin("http", bare, 8080)) == f"http://{host}:8080"
    assert parse_target(f"http://{host}:8080/").host_header == f"{host}:8080"
    assert normalize_url(f"http://{host}:8080/") == absolute_url(f"http://{host}:8080/", "") == f"http://{host}:8080/"


_more_parts = st.tuples(
    st.sampled_from(["http", "HTTPS"]),
    st.sampled_from(["a.test", "A.Test.", "[::1]", "[FE80::1]", "U:P@H", "b\u00fccher.test", "a^b", "a|b", "h%41", ".",
                     "fa\u00df.de"]),
    st.sampled_from(["", ":", ":0", ":80", ":080", ":443", ":8443"]),
    st.text(alphabet="/abcAB%?#&=.:@ \t\n\x7f\xa0\u00e9[]\\\"<>`{}'^|~2cf", max_size=12),
)


@settings(max_examples=1500, deadline=None)
@given(st.one_of(_url_parts, _more_parts))
def test_absolute_links_land_in_the_stored_form_of_their_url(parts: tuple[str, str, str, str]) -> None:
    """The table's agreements, on any URL: what absolute_url gives, the other two take, and store as the URL itself."""
    url = "{}://{}{}{}".format(*parts)
    absolute, normal = _absolute(url), _normal(url)
    if absolute == REFUSED:
        assert normal == REFUSED, url  # one host parser (whatwg_host) refuses for all three
        return
    assert absolute.startswith(("http://", "https://")) and "#" not in absolute
    assert _absolute(absolute) == absolute
    if _normal(absolute) == REFUSED:
        # the host ".", kept as WHATWG keeps it, and no name once its dots are dropped: never stored
        assert normal == REFUSED and (urlsplit(absolute).hostname or "").strip(".") == "", url
        return
    assert _target(absolute) == _target(_normal(absolute))
    if normal != REFUSED and not _ONLY_ABSOLUTE_ENCODES(url.partition("#")[0]):
        assert _normal(absolute) == normal, url
        assert _target(absolute) == _target(url)


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


@pytest.mark.parametrize("location", [
    "/café", "//EXAMPLE.com/x", "http://bücher.test/", "/a b", "../x#f", " /sp ", "/a/./b/../c", "?q=1",
    "http://h.test:80/x", "/%c3%a9", "/a\tb", "HTTPS://h.test/up", "/x?", "?", "?#f",
])
def test_the_fetchers_redirect_and_the_crawlers_link_land_in_one_stored_form(location: str) -> None:
    """The fetcher follows a Location with redirect_url, the crawler reads it with absolute_url: one URL either way."""
    base = "http://h.test/a/b"
    followed, scheme = redirect_url(location, base)
    assert scheme in ("http", "https") and "#" not in followed
    linked = absolute_url(location, base)
    assert linked is not None and normalize_url(followed) == normalize_url(linked)

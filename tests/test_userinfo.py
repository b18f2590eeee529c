"""``user:pass@`` in a registered URL (issue 24): sent as HTTP Basic auth to that origin only.

Judged by what raw servers on 127.0.0.1 received:

- the first request and its same-origin redirect hops carry ``Authorization: Basic`` of the
  percent-decoded user and password; the request line and Host carry no userinfo;
- a redirect to another origin goes without it;
- an Authorization header of the bean's or the configuration's own wins;
- an "@" in a path is no userinfo: no header;
- the exchanges recorded for a WARC hold neither the Authorization header nor the userinfo,
  while ``FetchResult.url`` is the URL as registered.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from conftest import MakeServer
from rawserver import http_response
from test_http_behaviour import fetch, head_lines, moved, routes, values

from niofetcher import FetcherConfig, NIOFetcher, URLBean
from niofetcher.urls import parse_target, split_credentials

# "p%40ss" is "p@ss" once percent-decoded, as a user must write an "@" in a password.
BASIC = "Basic " + base64.b64encode(b"user:p@ss").decode("ascii")
pytestmark = pytest.mark.timeout(15)


def with_userinfo(url: str) -> str:
    return url.replace("http://", "http://user:p%40ss@", 1)


def test_basic_auth_goes_to_that_origin_only_and_never_into_the_exchanges(no_leaks: Any,
                                                                          raw_server: MakeServer) -> None:
    other_app = routes({"/away": http_response(200, b"ok")})
    other = raw_server(other_app, max_seconds=15)
    app = routes({"/start": moved(302, "/same"), "/same": moved(302, other.url("/away"))})
    srv = raw_server(app, max_seconds=15)
    url = with_userinfo(srv.url("/start"))

    (result,) = fetch(url, record_exchanges=True)

    assert (result.error, result.status) == (None, 200)
    assert result.url == url  # as registered
    # Every hop goes by the URL without them: a relative Location resolved against it, too.
    assert result.final_url == other.url("/away")
    assert result.redirects == [(302, srv.url("/same")), (302, other.url("/away"))]
    assert "p%40ss" not in repr(result) and "user:***@" in repr(result)
    assert [seen.target for seen in app.seen] == ["/start", "/same"]
    for seen in app.seen:  # the first request and the same-origin hop
        assert values(seen.head, "authorization") == [BASIC]
        assert values(seen.head, "host") == [f"127.0.0.1:{srv.port}"]
        request_line = head_lines(seen.head)[0]
        assert "@" not in request_line and "user" not in request_line
    (there,) = other_app.seen
    assert values(there.head, "authorization") == []
    assert len(result.exchanges) == 3
    for exchange in result.exchanges:
        assert "authorization" not in {name.lower() for name, _ in exchange.request_headers}
        assert "user" not in exchange.url and "p%40ss" not in exchange.url
    assert result.exchanges[0].url == split_credentials(url)[0] == srv.url("/start")


def test_a_url_registered_as_a_str_sends_it_too(no_leaks: Any, raw_server: MakeServer) -> None:
    """A str waits in its host queue as plain data; its request is made when it starts."""
    app = routes({"/x": http_response(200, b"ok")})
    srv = raw_server(app, max_seconds=15)
    with NIOFetcher(FetcherConfig(connect_timeout=2.0, read_timeout=4.0)) as fetcher:
        assert fetcher.register(with_userinfo(srv.url("/x")))
        (result,) = fetcher.results()
    assert result.status == 200
    (seen,) = app.seen
    assert values(seen.head, "authorization") == [BASIC]


@pytest.mark.parametrize("where", ["bean", "config"])
def test_an_authorization_header_of_ones_own_wins(no_leaks: Any, raw_server: MakeServer, where: str) -> None:
    app = routes({"/x": http_response(200, b"ok")})
    srv = raw_server(app, max_seconds=15)
    own = {"Authorization": "Bearer token"}
    if where == "bean":
        (result,) = fetch(URLBean(with_userinfo(srv.url("/x")), headers=own))
    else:
        (result,) = fetch(with_userinfo(srv.url("/x")), headers=own)

    assert result.status == 200
    (seen,) = app.seen
    assert values(seen.head, "authorization") == ["Bearer token"]


def test_an_at_sign_in_the_path_is_no_userinfo(no_leaks: Any, raw_server: MakeServer) -> None:
    app = routes({"/@user:pass": http_response(200, b"ok")})
    srv = raw_server(app, max_seconds=15)

    (result,) = fetch(srv.url("/@user:pass"))

    assert result.status == 200
    (seen,) = app.seen
    assert values(seen.head, "authorization") == []


@pytest.mark.parametrize("url", [
    "http://user:s3cret@h:99999/", "ftp://user:s3cret@h/", "http://user:s3cret@/x", "http://user:s3cret@h\x00/",
    "http://user:s3cret@a\\x@127.0.0.1/",
])
def test_an_error_about_a_url_never_repeats_its_password(url: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_target(url)
    assert "s3cret" not in str(refused.value) and "user:***@" in str(refused.value)


def test_an_error_repeats_at_most_200_characters_of_a_url() -> None:
    with pytest.raises(ValueError) as refused:
        parse_target("ftp://h/" + "x" * 5_000_000)  # a line of a seeds file may be megabytes long
    assert len(str(refused.value)) < 300


def test_a_backslash_ends_the_authority_as_browsers_read_it() -> None:
    # A browser sends u:secret to 127.0.0.2 (path /x@127.0.0.1/a); urlsplit would go to 127.0.0.1 with them.
    url = "http://u:secret@127.0.0.2:9\\x@127.0.0.1:18082/a"
    bare, authorization = split_credentials(url)
    assert bare == "http://127.0.0.2:9\\x@127.0.0.1:18082/a" and authorization is not None
    with pytest.raises(ValueError, match="in its authority"):
        parse_target(bare)  # so the credentials go nowhere: the URL is refused


@pytest.mark.parametrize("url", ["http://@h/", "http://:@h/"])
def test_an_empty_userinfo_is_no_credentials(url: str) -> None:
    assert split_credentials(url) == ("http://h/", None)

"""HTTPS: non-blocking TLS on the loop thread, verification, resumption, network safety.

The servers are RawServer handlers that wrap their accepted socket with the
standard ssl module, using a CA and certificates made by trustme.
"""

from __future__ import annotations

import datetime
import socket
import ssl

import pytest
import trustme
from rawserver import ConnInfo, Handler, http_response, ok, redirect, serve_keepalive

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher, Origin

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def server_context(cert: trustme.LeafCert) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    return context


def tls(context: ssl.SSLContext, inner: Handler) -> Handler:
    """Play ``inner`` over TLS on the accepted socket."""

    def handler(sock: socket.socket, info: ConnInfo) -> None:
        try:
            tls_sock = context.wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError):
            return  # the client refused our certificate: that is what some tests want
        with tls_sock:
            inner(tls_sock, info)

    return handler


@pytest.fixture
def good_context(ca: trustme.CA) -> ssl.SSLContext:
    return server_context(ca.issue_cert("127.0.0.1", "localhost", "site.test"))


def fetch_all(config: FetcherConfig, urls: list[str]) -> list:
    with NIOFetcher(config) as fetcher:
        for url in urls:
            assert fetcher.register(url)
        results = list(fetcher.results())
        results.sort(key=lambda r: urls.index(r.url))
        fetch_all.stats = fetcher.stats()  # type: ignore[attr-defined]
        fetch_all.host_stats = fetcher.host_stats()  # type: ignore[attr-defined]
    return results


def https(srv, path: str = "/") -> str:
    return f"https://127.0.0.1:{srv.port}{path}"


def test_verified_with_ca_file_and_refused_without(raw_server, good_context, ca_file, no_leaks) -> None:
    srv = raw_server(tls(good_context, ok(b"secure")), sock_timeout=3)
    good, = fetch_all(FetcherConfig(ca_file=ca_file), [https(srv)])
    assert good.ok and good.body == b"secure"
    bad, = fetch_all(FetcherConfig(), [https(srv, "/system-store")])
    assert bad.error is ErrorKind.TLS_ERROR and "certificate verify failed" in bad.error_detail
    unverified, = fetch_all(FetcherConfig(verify_tls=False), [https(srv, "/no-verify")])
    assert unverified.ok


def test_hostname_mismatch(raw_server, ca, ca_file, no_leaks) -> None:
    srv = raw_server(tls(server_context(ca.issue_cert("other.test")), ok()), sock_timeout=3)
    result, = fetch_all(FetcherConfig(ca_file=ca_file), [https(srv)])
    assert result.error is ErrorKind.TLS_ERROR
    assert "mismatch" in result.error_detail or "match" in result.error_detail


def test_expired_certificate(raw_server, ca, ca_file, no_leaks) -> None:
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    cert = ca.issue_cert("127.0.0.1", not_before=past - datetime.timedelta(days=30), not_after=past)
    srv = raw_server(tls(server_context(cert), ok()), sock_timeout=3)
    result, = fetch_all(FetcherConfig(ca_file=ca_file), [https(srv)])
    assert result.error is ErrorKind.TLS_ERROR and "expired" in result.error_detail


def test_plain_http_on_the_tls_port(raw_server, ca_file, no_leaks) -> None:
    srv = raw_server(ok(), sock_timeout=3)
    result, = fetch_all(FetcherConfig(ca_file=ca_file), [https(srv)])
    assert result.error is ErrorKind.TLS_ERROR and result.status is None


def test_handshake_stall_is_a_connect_timeout(raw_server, ca_file, no_leaks) -> None:
    def silent(sock: socket.socket, info: ConnInfo) -> None:
        info.sleep(5)

    srv = raw_server(silent, sock_timeout=6)
    result, = fetch_all(FetcherConfig(ca_file=ca_file, connect_timeout=0.4), [https(srv)])
    assert result.error is ErrorKind.CONNECT_TIMEOUT


def test_keepalive_and_per_host_limit_over_tls(raw_server, good_context, ca_file, no_leaks) -> None:
    srv = raw_server(tls(good_context, serve_keepalive(lambda head: http_response(body=head[:64]))), sock_timeout=3)
    urls = [https(srv, f"/{i}") for i in range(60)]
    results = fetch_all(FetcherConfig(ca_file=ca_file, max_connections_per_host=2), urls)
    assert all(r.ok for r in results)
    assert srv.max_open <= 2 and srv.accepted == 2
    assert sum(r.connection_reused for r in results) == 58
    assert fetch_all.host_stats[Origin("https", "127.0.0.1", srv.port)].peak_connections == 2  # type: ignore[attr-defined]


def test_session_resumed_on_the_next_connection(raw_server, good_context, ca_file, no_leaks) -> None:
    srv = raw_server(tls(good_context, serve_keepalive(lambda head: http_response(body=b"x"))), sock_timeout=3)
    urls = [https(srv, f"/{i}") for i in range(4)]
    config = FetcherConfig(ca_file=ca_file, max_connections_per_host=1, max_requests_per_connection=1)
    results = fetch_all(config, urls)
    assert all(r.ok for r in results) and srv.accepted == 4
    assert [r.session_reused for r in results] == [False, True, True, True]
    stats = fetch_all.stats  # type: ignore[attr-defined]
    assert stats.tls_handshakes == 4 and stats.tls_resumed == 3


def test_large_body_over_tls_arrives_whole(raw_server, good_context, ca_file, no_leaks) -> None:
    body = bytes(range(256)) * (24 * 1024)  # 6 MiB: many TLS records per readiness event
    srv = raw_server(tls(good_context, serve_keepalive(lambda head: http_response(body=body))), sock_timeout=5)
    results = fetch_all(FetcherConfig(ca_file=ca_file), [https(srv, "/a"), https(srv, "/b")])
    assert [r.body == body for r in results] == [True, True]


def test_redirect_from_http_to_https(raw_server, good_context, ca_file, no_leaks) -> None:
    secure = raw_server(tls(good_context, ok(b"arrived")), sock_timeout=3)
    plain = raw_server(redirect(https(secure, "/landing")), sock_timeout=3)
    result, = fetch_all(FetcherConfig(ca_file=ca_file), [f"http://127.0.0.1:{plain.port}/start"])
    assert result.ok and result.body == b"arrived"
    assert result.final_url == https(secure, "/landing") and result.redirects == [(302, https(secure, "/landing"))]


def test_http_and_https_of_one_host_are_separate_keys(raw_server, good_context, ca_file, no_leaks) -> None:
    secure = raw_server(tls(good_context, ok()), sock_timeout=3)
    plain = raw_server(ok(), sock_timeout=3)
    config = FetcherConfig(ca_file=ca_file, resolve={"site.test": "127.0.0.1"})
    urls = [f"https://site.test:{secure.port}/", f"http://site.test:{plain.port}/"]
    assert all(r.ok for r in fetch_all(config, urls))
    keys = set(fetch_all.host_stats)  # type: ignore[attr-defined]
    assert keys == {Origin("https", "site.test", secure.port), Origin("http", "site.test", plain.port)}


def test_deny_networks_checks_the_resolved_address_also_after_a_redirect(raw_server, no_leaks) -> None:
    inner = raw_server(ok(b"internal"), sock_timeout=3)
    outer = raw_server(redirect(f"http://intranet.test:{inner.port}/secret"), sock_timeout=3)
    config = FetcherConfig(
        resolve={"public.test": "127.0.0.1", "intranet.test": "127.0.0.2"}, deny_networks=["127.0.0.2/32"]
    )
    direct, via_redirect = fetch_all(config, [f"http://intranet.test:{inner.port}/", f"http://public.test:{outer.port}/"])
    for result in (direct, via_redirect):
        assert result.error is ErrorKind.CONNECT_ERROR and "denied network" in result.error_detail
    assert inner.accepted == 0 and outer.accepted == 1
    refused, = fetch_all(FetcherConfig(deny_networks=["loopback"]), [f"http://localhost:{inner.port}/"])
    assert refused.error is ErrorKind.CONNECT_ERROR and inner.accepted == 0


def test_exactly_once_over_tls_with_faults_and_abort(raw_server, good_context, ca_file, no_leaks) -> None:
    """Good, broken and slow TLS endpoints; shut down mid-flight: one result each, nothing left open."""

    def reset_in_handshake(sock: socket.socket, info: ConnInfo) -> None:
        sock.recv(10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")

    def slow(sock: socket.socket, info: ConnInfo) -> None:
        info.sleep(3)

    good = raw_server(tls(good_context, serve_keepalive(lambda head: http_response(body=b"ok"))), sock_timeout=3)
    broken = raw_server(reset_in_handshake, sock_timeout=3)
    stuck = raw_server(tls(good_context, slow), sock_timeout=4)
    urls = [https(srv, f"/{i}") for i in range(150) for srv in (good, broken, stuck)]
    with NIOFetcher(FetcherConfig(ca_file=ca_file, max_connections_per_host=4)) as fetcher:
        for url in urls:
            assert fetcher.register(url)
        seen: list[FetchResult] = []
        while len([r for r in seen if r.url.startswith(https(good))]) < 150:
            result = fetcher.get(timeout=10)
            assert result is not None
            seen.append(result)
        fetcher.shutdown(wait=False)
        seen.extend(fetcher.drain())
    assert sorted(r.url for r in seen) == sorted(urls)
    kinds = {(r.url.split("/")[2], r.error) for r in seen}
    assert (f"127.0.0.1:{good.port}", None) in kinds
    assert (f"127.0.0.1:{broken.port}", ErrorKind.TLS_ERROR) in kinds
    assert {e for host, e in kinds if host == f"127.0.0.1:{stuck.port}"} == {ErrorKind.CANCELLED}

"""HTTPS: non-blocking TLS on the loop thread, verification, resumption, network safety.

The servers are RawServer handlers that wrap their accepted socket with the
standard ssl module, using a CA and certificates made by trustme.
"""

from __future__ import annotations

import datetime
import gc
import os
import re
import socket
import ssl
import threading
from collections.abc import Callable

import pytest
import trustme
from rawserver import ConnInfo, Handler, http_response, ok, redirect, serve_keepalive

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher, Origin
from niofetcher.transport import WANT_READ, TLSTransport

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
    # Each connection closed before the next opened: the first one's session was read from its closed
    # SSL object, once; the resumed ones left none to read.
    assert stats.tls_sessions_read == 1


def test_a_host_whose_one_connection_is_reused_reads_no_session(raw_server, good_context, ca_file, no_leaks) -> None:
    """A TLS session is read when the host's next connection opens, not after a first response
    (docs/benchmarks.md, "Where the CPU goes"): one kept-alive connection reads none."""
    srv = raw_server(tls(good_context, serve_keepalive(lambda head: http_response(body=b"x"))), sock_timeout=3)
    results = fetch_all(FetcherConfig(ca_file=ca_file, max_connections_per_host=1), [https(srv, f"/{i}") for i in range(5)])
    assert all(r.ok for r in results) and srv.accepted == 1
    stats = fetch_all.stats  # type: ignore[attr-defined]
    assert (stats.tls_handshakes, stats.reused_requests, stats.tls_sessions_read) == (1, 4, 0)


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


# -- the key log, TLS versions and ciphers ----------------------------------------------


Negotiated = list[tuple[str | None, str | None]]  # (TLS version, cipher) of each connection


def recording_versions(context: ssl.SSLContext, seen: Negotiated) -> Handler:
    """``ok()`` over TLS, noting each connection's TLS version and cipher as the server saw them."""

    def inner(sock: socket.socket, info: ConnInfo) -> None:
        assert isinstance(sock, ssl.SSLSocket)
        cipher = sock.cipher()
        seen.append((sock.version(), cipher[0] if cipher else None))
        ok()(sock, info)

    return tls(context, inner)


def test_an_unwritable_key_log_is_said_once_and_tls_goes_on(
    raw_server, good_context, ca_file, tmp_path, monkeypatch, caplog, no_leaks
) -> None:
    """Python's default context opens SSLKEYLOGFILE and raises when it cannot: every https fetch failed."""
    monkeypatch.setenv("SSLKEYLOGFILE", str(tmp_path / "missing" / "keys.log"))
    srv = raw_server(tls(good_context, ok(b"secure")), sock_timeout=3)
    config = FetcherConfig(ca_file=ca_file, max_connections_per_host=1, max_requests_per_connection=1)
    with caplog.at_level("WARNING", logger="niofetcher"):
        results = fetch_all(config, [https(srv, "/a"), https(srv, "/b")])
    assert [r.body for r in results] == [b"secure", b"secure"] and srv.accepted == 2
    warned = [r.getMessage() for r in caplog.records if "Cannot write TLS session keys" in r.getMessage()]
    assert len(warned) == 1 and str(tmp_path / "missing" / "keys.log") in warned[0]


def test_a_writable_key_log_gets_the_sessions_keys(
    raw_server, good_context, ca_file, tmp_path, monkeypatch, no_leaks
) -> None:
    keys = tmp_path / "keys.log"
    monkeypatch.setenv("SSLKEYLOGFILE", str(keys))
    srv = raw_server(tls(good_context, ok()), sock_timeout=3)
    (result,) = fetch_all(FetcherConfig(ca_file=ca_file), [https(srv)])
    assert result.ok
    lines = [line for line in keys.read_text().splitlines() if not line.startswith("#")]
    assert lines and all(len(line.split()) == 3 for line in lines)  # NSS key log: label, client random, secret
    # The context holds the file open, as Python's own does, until the fetcher's objects (a cycle) are
    # collected; no_leaks counts descriptors.
    gc.collect()


@pytest.mark.parametrize(("server_min", "server_max", "client", "expected"), [
    (None, None, {}, "TLSv1.3"),
    (None, None, {"tls_max_version": "TLSv1.2"}, "TLSv1.2"),
    (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2, {"tls_min_version": "TLSv1.2"}, "TLSv1.2"),
    (ssl.TLSVersion.TLSv1_3, None, {"tls_max_version": "TLSv1.2"}, None),
    (None, ssl.TLSVersion.TLSv1_2, {"tls_min_version": "TLSv1.3"}, None),
], ids=["default", "client-max-1.2", "both-1.2", "client-max-below-server-min", "client-min-above-server-max"])
def test_the_tls_versions_are_the_configurations(
    raw_server, ca, ca_file, server_min, server_max, client, expected, no_leaks
) -> None:
    context = server_context(ca.issue_cert("127.0.0.1"))
    context.minimum_version = server_min or context.minimum_version
    context.maximum_version = server_max or context.maximum_version
    seen: Negotiated = []
    srv = raw_server(recording_versions(context, seen), sock_timeout=3)
    (result,) = fetch_all(FetcherConfig(ca_file=ca_file, **client), [https(srv)])
    if expected is None:
        assert result.error is ErrorKind.TLS_ERROR and not seen
    else:
        assert result.ok and [version for version, _ in seen] == [expected]


def test_the_ciphers_are_the_configurations(raw_server, ca, ca_file, no_leaks) -> None:
    """A server that speaks TLS 1.2 with one cipher Python's default list leaves out (as Scrapy's test server)."""
    context = server_context(ca.issue_cert("127.0.0.1", key_type=trustme.KeyType.RSA))  # RSA key exchange
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers("CAMELLIA256-SHA")
    seen: Negotiated = []
    srv = raw_server(recording_versions(context, seen), sock_timeout=3)
    refused, = fetch_all(FetcherConfig(ca_file=ca_file), [https(srv, "/default")])
    assert refused.error is ErrorKind.TLS_ERROR
    agreed, = fetch_all(FetcherConfig(ca_file=ca_file, tls_ciphers="CAMELLIA256-SHA"), [https(srv, "/own")])
    assert agreed.ok and seen == [("TLSv1.2", "CAMELLIA256-SHA")]


@pytest.mark.parametrize(("options", "message"), [
    ({"tls_min_version": "TLSv1.4"},
     "tls_min_version must be one of TLSv1.0, TLSv1.1, TLSv1.2, TLSv1.3 or None, not 'TLSv1.4'"),
    ({"tls_max_version": ssl.TLSVersion.TLSv1_2}, "tls_max_version must be one of"),
    ({"tls_min_version": "TLSv1.3", "tls_max_version": "TLSv1.2"},
     "tls_min_version TLSv1.3 is above tls_max_version TLSv1.2"),
    ({"tls_ciphers": "NO-SUCH-CIPHER"},
     "tls_ciphers must be an OpenSSL cipher list that names a cipher, not 'NO-SUCH-CIPHER'"),
    ({"tls_ciphers": ""}, "tls_ciphers must be an OpenSSL cipher list"),
])
def test_tls_options_are_refused_when_the_configuration_is_made(options, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as refused:
        FetcherConfig(**options)
    assert "\n" not in str(refused.value)


# -- reading: every record the socket holds, in one read ------------------------------------


class _Peer:
    """A TLSTransport, handshake done, over a socketpair whose other end ``serve`` plays in a thread;
    every byte it sent is in our socket once ``sent`` is set, and it keeps its end open until close()."""

    def __init__(self, context: ssl.SSLContext, ca_file: str, serve: Callable[[ssl.SSLSocket], None]) -> None:
        ours, theirs = socket.socketpair()
        self.sent, self._done = threading.Event(), threading.Event()

        def server() -> None:
            with context.wrap_socket(theirs, server_side=True) as tls_sock:
                serve(tls_sock)
                self.sent.set()
                self._done.wait(10)

        self._thread = threading.Thread(target=server, daemon=True)
        self._thread.start()
        ours.settimeout(10)  # blocking for the handshake: the server thread answers it
        self.transport = TLSTransport(ours, ssl.create_default_context(cafile=ca_file), "site.test", None)
        assert self.transport.handshake() == 0
        self.transport.sock.setblocking(False)
        assert self.sent.wait(10)

    def close(self) -> None:
        self.transport.sock.close()
        self._done.set()
        self._thread.join(10)


def _records(count: int) -> Callable[[ssl.SSLSocket], None]:
    def serve(tls_sock: ssl.SSLSocket) -> None:
        for n in range(count):
            tls_sock.sendall(bytes([n]) * 10_000)  # a record each
    return serve


def test_a_tls_read_takes_every_record_the_socket_holds(good_context, ca_file) -> None:
    peer = _Peer(good_context, ca_file, _records(5))
    buffer = memoryview(bytearray(256 * 1024))
    # One SSL read gives one record: the five would take five readiness events, each a pass through h11.
    assert peer.transport.recv_into(buffer) == 50_000
    assert bytes(buffer[:50_000]) == b"".join(bytes([n]) * 10_000 for n in range(5))
    assert not peer.transport.pending()
    assert peer.transport.recv_into(buffer) == WANT_READ
    peer.close()


def test_a_tls_read_stops_when_the_buffer_is_full(good_context, ca_file) -> None:
    peer = _Peer(good_context, ca_file, _records(3))
    buffer = memoryview(bytearray(25_000))
    assert peer.transport.recv_into(buffer) == 25_000
    assert peer.transport.pending()  # the rest of the third record, already decrypted
    assert peer.transport.recv_into(buffer) == 5_000
    peer.close()


def test_a_close_notify_read_ahead_comes_with_the_next_read(good_context, ca_file) -> None:
    def serve(tls_sock: ssl.SSLSocket) -> None:
        _records(2)(tls_sock)
        tls_sock.setblocking(False)
        with pytest.raises(ssl.SSLWantReadError):  # close_notify sent; ours is not awaited
            tls_sock.unwrap()

    peer = _Peer(good_context, ca_file, serve)
    buffer = memoryview(bytearray(256 * 1024))
    assert peer.transport.recv_into(buffer) == 20_000
    assert peer.transport.pending()  # the end, read ahead: the connection reads again before it waits
    assert peer.transport.recv_into(buffer) == 0
    peer.close()


def test_a_bare_end_of_stream_after_records_is_the_next_read(good_context, ca_file) -> None:
    def serve(tls_sock: ssl.SSLSocket) -> None:
        _records(2)(tls_sock)
        tls_sock.shutdown(socket.SHUT_WR)  # TCP's end, no close_notify: how many servers end a body

    peer = _Peer(good_context, ca_file, serve)
    buffer = memoryview(bytearray(256 * 1024))
    assert peer.transport.recv_into(buffer) == 20_000
    assert peer.transport.recv_into(buffer) == 0
    peer.close()


def test_an_error_read_ahead_is_raised_by_the_next_read(good_context, ca_file) -> None:
    def serve(tls_sock: ssl.SSLSocket) -> None:
        _records(1)(tls_sock)
        os.write(tls_sock.fileno(), b"this is not a TLS record at all")

    peer = _Peer(good_context, ca_file, serve)
    buffer = memoryview(bytearray(256 * 1024))
    assert peer.transport.recv_into(buffer) == 10_000
    assert peer.transport.pending()
    with pytest.raises(ssl.SSLError):
        peer.transport.recv_into(buffer)
    peer.close()

"""Proxies: plain http in absolute form, https through CONNECT, limits, and a proxy's failures.

Against a real forward proxy, Debian's tinyproxy, started by the tests on
loopback with a generated configuration (skipped, with the reason, only when
no tinyproxy binary is found), and against the test site's ForwardProxy
(niofetcher/testing/proxy.py), which counts the connections it accepts and
plays the faults.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from conftest import wait_until

from niofetcher import ErrorKind, FetcherConfig, FetchResult, NIOFetcher, URLBean
from niofetcher.pool import HostTable
from niofetcher.request import RequestDefaults, Task
from niofetcher.testing import ForwardProxy, TestSite, tls_context_from_files
from niofetcher.urls import NoProxy, parse_proxy, parse_target

TINYPROXY = shutil.which("tinyproxy") or next(
    (path for path in ("/usr/bin/tinyproxy", "/usr/sbin/tinyproxy") if Path(path).exists()), None
)


def fetch(config: FetcherConfig, items: list[str | URLBean], timeout: float = 30.0) -> list[FetchResult]:
    with NIOFetcher(config) as fetcher:
        for item in items:
            assert fetcher.register(item)
        assert fetcher.join(timeout)
        return fetcher.drain()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- tinyproxy -------------------------------------------------------------------------


class Tinyproxy:
    """One tinyproxy process in the foreground (``-d``), its configuration generated, its log read back."""

    def __init__(self, directory: Path, connect_ports: list[int], basic_auth: tuple[str, str] | None = None) -> None:
        assert TINYPROXY is not None
        self.port = free_port()
        self.log = directory / f"tinyproxy-{self.port}.log"
        lines = [f"Port {self.port}", "Listen 127.0.0.1", "Allow 127.0.0.1", "Timeout 30", "MaxClients 200",
                 "LogLevel Info", "DisableViaHeader Yes", *(f"ConnectPort {port}" for port in connect_ports)]
        if basic_auth is not None:
            lines.append(f"BasicAuth {basic_auth[0]} {basic_auth[1]}")
        conf = directory / f"tinyproxy-{self.port}.conf"
        conf.write_text("\n".join(lines) + "\n")
        self._out = self.log.open("wb")
        self.process = subprocess.Popen([TINYPROXY, "-d", "-c", str(conf)], stdout=self._out, stderr=subprocess.STDOUT)
        if not wait_until(self._listening, timeout=10):
            self.stop()
            raise RuntimeError(f"tinyproxy did not listen: {self.log.read_text(errors='replace')[-2000:]}")

    def _listening(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"tinyproxy exited: {self.log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True
        return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> list[str]:
        """The request lines tinyproxy logged, e.g. ``GET http://127.0.0.1:1234/page/1 HTTP/1.1``."""
        text = self.log.read_text(errors="replace")
        return [line.split("): ", 1)[1] for line in text.splitlines() if "]: Request (file descriptor" in line]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._out.close()


@pytest.fixture
def tinyproxy(tmp_path: Path) -> Iterator[type[Tinyproxy]]:
    """A factory: ``tinyproxy(tmp_path, connect_ports)``; every one started is stopped (by its pid) after."""
    if TINYPROXY is None:
        pytest.skip("tinyproxy not found (apt-get install -y tinyproxy)")
    started: list[Tinyproxy] = []

    class Started(Tinyproxy):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            started.append(self)

    yield Started
    for proxy in started:
        proxy.stop()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ssl.SSLContext]:
    """A CA file to trust, and a server context for 127.0.0.1 signed by it."""
    directory = tmp_path_factory.mktemp("proxy-tls")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    ca_file, cert_file, key_file = (str(directory / name) for name in ("ca.pem", "cert.pem", "key.pem"))
    ca.cert_pem.write_to_path(ca_file)
    with open(cert_file, "wb") as out:
        out.writelines(pem.bytes() for pem in leaf.cert_chain_pems)
    leaf.private_key_pem.write_to_path(key_file)
    return ca_file, tls_context_from_files(cert_file, key_file)


def test_plain_http_through_tinyproxy_and_no_proxy_going_direct(tinyproxy, tmp_path: Path) -> None:
    with TestSite(hosts=2, pages=10) as site:
        proxy = tinyproxy(tmp_path, [])
        urls = site.page_urls()
        results = fetch(FetcherConfig(proxy=proxy.url), list(urls))
        assert all(r.ok and len(r.body) > 1000 for r in results), [(r.url, r.error, r.error_detail) for r in results]
        direct = {r.url: r.body for r in fetch(FetcherConfig(), list(urls))}
        assert {r.url: r.body for r in results} == direct
        # Every request went to the proxy in absolute form, and the site served each once.
        assert sorted(proxy.requests()) == sorted(f"GET {url} HTTP/1.1" for url in urls)
        assert sum(site.counters(port).requests for port in site.ports) == 2 * len(urls)
        # The negative control: no_proxy sends the same URLs direct, and the proxy sees none of them.
        before = len(proxy.requests())
        skipped = fetch(FetcherConfig(proxy=proxy.url, no_proxy=("127.0.0.1",)), list(urls))
        assert all(r.ok for r in skipped) and len(proxy.requests()) == before


def test_https_through_a_tinyproxy_tunnel_reuses_it(tinyproxy, tmp_path: Path, tls_files) -> None:
    ca_file, server_context = tls_files
    with TestSite(hosts=2, pages=15, tls=server_context) as site:
        proxy = tinyproxy(tmp_path, list(site.ports))
        urls = site.page_urls()
        config = FetcherConfig(proxy=proxy.url, ca_file=ca_file, max_connections_per_host=2)
        results = fetch(config, list(urls))
        assert all(r.ok and r.url.startswith("https://") for r in results), [(r.url, r.error_detail) for r in results]
        tunnels = [line for line in proxy.requests() if line.startswith("CONNECT")]
        assert tunnels and all(line.split()[1] in {f"127.0.0.1:{port}" for port in site.ports} for line in tunnels)
        for port in site.ports:
            counters = site.counters(port)
            # Each tunnel is one TLS connection to the origin; keep-alive carried the rest through it.
            assert counters.requests == len(urls) // 2 and counters.accepted <= 2 and counters.max_open <= 2
            assert counters.tls_handshakes == counters.accepted
        assert len(tunnels) == sum(site.counters(port).accepted for port in site.ports)
        assert sum(r.connection_reused for r in results) >= len(urls) - 4


def test_tinyproxy_refusing_a_connect_port_is_a_proxy_error(tinyproxy, tmp_path: Path, tls_files) -> None:
    ca_file, server_context = tls_files
    with TestSite(pages=3, tls=server_context) as site, TestSite(pages=3) as plain:
        proxy = tinyproxy(tmp_path, [1])  # the site's port is not a ConnectPort: tinyproxy refuses the CONNECT
        config = FetcherConfig(proxy=proxy.url, ca_file=ca_file)
        refused, fine = fetch(config, [site.base_urls[0], plain.base_urls[0]])
        if refused.url != site.base_urls[0]:
            refused, fine = fine, refused
        assert refused.error is ErrorKind.PROXY_ERROR and refused.status == 403
        assert refused.error_detail.startswith(f"proxy 127.0.0.1:{proxy.port}: answered 403")
        assert f"CONNECT 127.0.0.1:{site.ports[0]}" in refused.error_detail
        assert fine.ok  # the loop went on: plain http through the same proxy
        assert site.counters().accepted == 0


def test_tinyproxy_basic_auth(tinyproxy, tmp_path: Path, tls_files) -> None:
    ca_file, server_context = tls_files
    with TestSite(pages=3) as site, TestSite(pages=3, tls=server_context) as secure:
        proxy = tinyproxy(tmp_path, [secure.ports[0]], basic_auth=("crawler", "s3cret"))
        urls = [site.base_urls[0], secure.base_urls[0]]
        good = fetch(FetcherConfig(proxy=f"http://crawler:s3cret@127.0.0.1:{proxy.port}", ca_file=ca_file), list(urls))
        assert all(r.ok for r in good), [(r.url, r.error_detail) for r in good]
        missing = fetch(FetcherConfig(proxy=proxy.url, ca_file=ca_file), list(urls))
        assert [(r.error, r.status) for r in missing] == [(ErrorKind.PROXY_ERROR, 407)] * 2
        assert all(r.error_detail.startswith(f"proxy 127.0.0.1:{proxy.port}") for r in missing)
        # Wrong ones: tinyproxy answers 401, not 407.  To CONNECT that is a proxy_error like any other
        # status; to a plain request it is an ordinary answer, which nothing tells from the origin's.
        config = FetcherConfig(proxy=f"http://crawler:wrong@127.0.0.1:{proxy.port}", ca_file=ca_file)
        plain, tunnel = sorted(fetch(config, list(urls)), key=lambda r: r.url)
        assert (plain.error, plain.status) == (None, 401)
        assert (tunnel.error, tunnel.status) == (ErrorKind.PROXY_ERROR, 401) and "wrong" not in tunnel.error_detail
        assert site.counters().requests == secure.counters().requests == 1  # the good ones only


# -- the scripted proxy: keep-alive, limits, faults ---------------------------------------


def test_plain_http_keeps_proxy_connections_alive_and_sends_credentials() -> None:
    with TestSite(pages=30) as site, ForwardProxy(credentials=("user@x", "p:ss")) as proxy:
        results = fetch(FetcherConfig(proxy=proxy.url, max_connections_per_host=2), list(site.page_urls()))
        assert all(r.ok for r in results)
        seen = proxy.counters()
        assert seen.accepted == 2 and sum(r.connection_reused for r in results) == len(results) - 2
        assert seen.requests == [] or all(line.startswith(f"GET http://127.0.0.1:{site.ports[0]}/") for line in seen.requests)
        expected = "Basic " + base64.b64encode(b"user@x:p:ss").decode()  # percent-decoded from the URL
        assert set(seen.authorizations) == {expected}


def test_the_per_host_limit_counts_origins_through_a_proxy() -> None:
    with TestSite(hosts=3, pages=12, delay=0.05) as site, ForwardProxy() as proxy:
        results = fetch(FetcherConfig(proxy=proxy.url, max_connections_per_host=2), list(site.page_urls()))
        assert all(r.ok for r in results)
        # Counted by the site: each origin had at most (and, with the delay, exactly) 2 at once.
        assert [site.counters(port).max_open for port in site.ports] == [2, 2, 2]
        assert proxy.counters().max_open == 6


def test_max_connections_per_proxy_holds_with_a_direct_host_beside_it() -> None:
    with TestSite(hosts=4, pages=8, delay=0.05) as site, ForwardProxy() as proxy:
        urls = site.page_urls()
        direct_base = site.base_urls[3]
        items: list[str | URLBean] = [URLBean(u, proxy="") if u.startswith(direct_base) else u for u in urls]
        config = FetcherConfig(proxy=proxy.url, max_connections_per_host=2, max_connections_per_proxy=3)
        started = time.monotonic()
        results = fetch(config, items)
        assert all(r.ok for r in results), [(r.url, r.error_detail) for r in results]
        assert proxy.counters().max_open == 3  # counted by the proxy
        assert proxy.counters().accepted >= 3
        assert site.counters(site.ports[3]).max_open == 2  # the direct host was not held behind the proxy
        assert time.monotonic() - started < 20
    # The negative control: without the limit the same proxy gets the 6 the hosts' limits allow.
    with TestSite(hosts=3, pages=8, delay=0.05) as site, ForwardProxy() as proxy:
        assert all(r.ok for r in fetch(FetcherConfig(proxy=proxy.url, max_connections_per_host=2), list(site.page_urls())))
        assert proxy.counters().max_open == 6


def test_a_beans_proxy_wins_and_an_empty_one_goes_direct() -> None:
    with TestSite(pages=4) as site, ForwardProxy() as first, ForwardProxy() as second:
        url = site.base_urls[0]
        results = fetch(FetcherConfig(proxy=first.url),
                        [url, URLBean(f"{url}page/1", proxy=second.url), URLBean(f"{url}page/2", proxy="")])
        assert all(r.ok for r in results)
        assert first.counters().requests == [f"GET {url}"]
        assert second.counters().requests == [f"GET {url}page/1"]
        assert site.counters().requests == 3


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_407_is_a_proxy_error_naming_the_proxy_never_the_password(scheme: str, tls_files) -> None:
    ca_file, server_context = tls_files
    with TestSite(pages=2, tls=server_context if scheme == "https" else None) as site, \
            ForwardProxy(credentials=("u", "right")) as proxy, TestSite(pages=2) as other:
        config = FetcherConfig(proxy=f"http://u:hunter2@127.0.0.1:{proxy.port}", ca_file=ca_file)
        failed, fine = fetch(config, [site.base_urls[0], URLBean(other.base_urls[0], proxy="")])
        if failed.url != site.base_urls[0]:
            failed, fine = fine, failed
        assert failed.error is ErrorKind.PROXY_ERROR and failed.status == 407
        assert failed.error_detail.startswith(f"proxy 127.0.0.1:{proxy.port}")
        assert "407 Proxy Authentication Required" in failed.error_detail
        assert "hunter2" not in failed.error_detail and failed.header("proxy-authenticate") == 'Basic realm="test"'
        assert fine.ok and site.counters().requests == 0


def test_a_connect_answered_with_an_error_status(tls_files) -> None:
    ca_file, server_context = tls_files
    with TestSite(pages=2, tls=server_context) as site, ForwardProxy(fault="502") as proxy:
        result, = fetch(FetcherConfig(proxy=proxy.url, ca_file=ca_file), [site.base_urls[0]])
        assert result.error is ErrorKind.PROXY_ERROR and result.status == 502
        assert result.error_detail == (
            f"proxy 127.0.0.1:{proxy.port}: answered 502 Bad Gateway to CONNECT 127.0.0.1:{site.ports[0]}"
        )


def test_a_proxy_closing_mid_answer_and_a_refused_proxy(tls_files) -> None:
    ca_file, server_context = tls_files
    nobody = free_port()
    with TestSite(pages=2, tls=server_context) as site, ForwardProxy(fault="close") as proxy, \
            TestSite(pages=2) as other:
        url = site.base_urls[0]
        closed, refused, fine = fetch(FetcherConfig(proxy=proxy.url, ca_file=ca_file), [
            url, URLBean(f"{url}page/1", proxy=f"http://127.0.0.1:{nobody}"), URLBean(other.base_urls[0], proxy=""),
        ])
        by_url = {r.url: r for r in (closed, refused, fine)}
        closed, refused, fine = by_url[url], by_url[f"{url}page/1"], by_url[other.base_urls[0]]
        assert closed.error is ErrorKind.CONNECTION_CLOSED and closed.status is None
        assert closed.error_detail.startswith(f"proxy 127.0.0.1:{proxy.port}: closed before answering CONNECT")
        assert refused.error is ErrorKind.CONNECT_ERROR
        assert refused.error_detail == f"proxy 127.0.0.1:{nobody}: 127.0.0.1:{nobody}: Connection refused"
        assert fine.ok


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_silent_proxy_times_out(scheme: str, tls_files) -> None:
    ca_file, server_context = tls_files
    with TestSite(pages=2, tls=server_context if scheme == "https" else None) as site, \
            ForwardProxy(fault="silent") as proxy:
        config = FetcherConfig(proxy=proxy.url, ca_file=ca_file, connect_timeout=0.5, read_timeout=0.5)
        started = time.monotonic()
        result, = fetch(config, [site.base_urls[0]])
        assert time.monotonic() - started < 5
        if scheme == "https":  # the CONNECT phase is under the connect timeout
            assert result.error is ErrorKind.CONNECT_TIMEOUT
            assert result.error_detail == f"proxy 127.0.0.1:{proxy.port}: no answer to CONNECT within 0.5 s"
        else:  # plain http is an ordinary request to the proxy
            assert result.error is ErrorKind.READ_TIMEOUT


# -- the rules, without sockets ---------------------------------------------------------------


@pytest.mark.parametrize(("value", "message"), [
    ("https://p.test:3128", "proxy: only http:// proxies are supported"),
    ("http://p.test", "proxy: the port must be given"),
    ("http://p.test:0", "proxy: the port must be given"),
    ("http://u:topsecret@p.test:65536", "proxy: the port must be 1-65535, in 'http://u:***@p.test:65536'"),
    ("http://p.test:3128/path", "proxy: a proxy URL is scheme, host and port only"),
    ("http://p test:3128", "proxy: invalid host"),
    ("p.test:3128", "proxy: only http:// proxies are supported"),
])
def test_a_bad_proxy_setting_is_a_one_line_value_error(value: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace("*", r"\*")) as raised:
        FetcherConfig(proxy=value)
    assert "\n" not in str(raised.value) and "topsecret" not in str(raised.value)


def test_bad_no_proxy_and_limit_settings() -> None:
    with pytest.raises(ValueError, match="^no_proxy is a sequence"):
        FetcherConfig(no_proxy="a.test,b.test")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^no_proxy: 'a b'"):
        FetcherConfig(no_proxy=("a b",))
    with pytest.raises(ValueError, match="^max_connections_per_proxy must be a positive int or None"):
        FetcherConfig(max_connections_per_proxy=0)


def test_a_bad_beans_proxy_is_refused_at_register() -> None:
    fetcher = NIOFetcher(FetcherConfig())
    try:
        with pytest.raises(ValueError, match="^URLBean.proxy: only http:// proxies"):
            fetcher.register(URLBean("http://a.test/", proxy="socks5://p.test:1080"))
        assert fetcher.stats().registered == 0
    finally:
        fetcher.shutdown(wait=False)


def test_parse_proxy() -> None:
    proxy = parse_proxy("HTTP://us%65r:p%40ss%3Aword@Proxy.Example:3128/")
    assert (proxy.host, proxy.port, proxy.authority) == ("proxy.example", 3128, "proxy.example:3128")
    assert proxy.authorization == "Basic " + base64.b64encode(b"user:p@ss:word").decode()
    assert "p@ss" not in repr(proxy) and "word" not in repr(proxy) and str(proxy) == "proxy.example:3128"
    assert parse_proxy("http://[::1]:8080").authority == "[::1]:8080"
    assert parse_proxy("http://p.test:1").authorization is None


def test_no_proxy_follows_curls_rules() -> None:
    rules = NoProxy(["example.com", ".b.test", "bücher.test", "10.0.0.0/8", "::1", "[fe80::1]", "192.168.1.7"])
    goes_direct = ["example.com", "www.example.com", "a.b.example.com", "b.test", "x.b.test", "xn--bcher-kva.test",
                   "10.9.8.7", "::1", "fe80::1", "192.168.1.7"]
    proxied = ["notexample.com", "example.com.org", "test", "11.0.0.1", "::2", "192.168.1.8", "example.co"]
    assert [host for host in goes_direct if not rules.matches(host)] == []
    assert [host for host in proxied if rules.matches(host)] == []
    assert NoProxy(["*"]).matches("anything.test") and not NoProxy([])
    assert not NoProxy(["10.0.0.1"]).matches("10.0.0.1.example")  # an address never matches a name


def test_a_redirect_takes_the_route_of_its_new_host() -> None:
    defaults = RequestDefaults({}, parse_proxy("http://p.test:3128"), NoProxy(["inside.test"]))
    task = Task(URLBean("http://outside.test/"), parse_target("http://outside.test/"), 0, 0.0, defaults)
    assert task.proxy is not None and task.proxy.authority == "p.test:3128"
    task.retarget("http://www.inside.test/", parse_target("http://www.inside.test/"))
    assert task.proxy is None
    own = Task(URLBean("http://outside.test/", proxy="http://q.test:8080"), parse_target("http://outside.test/"), 1,
               0.0, defaults)
    own.retarget("http://inside.test/", parse_target("http://inside.test/"))
    assert own.proxy is not None and own.proxy.authority == "q.test:8080"  # a bean's own proxy stays


class FakeConn:
    def __init__(self, slot, proxy) -> None:
        self.slot = slot
        self.proxy = proxy


def test__a_host_waiting_for_its_proxy_blocks_no_other_host() -> None:
    proxy = parse_proxy("http://p.test:3128")
    t = HostTable(10, 2, 0.0, 0.0, lambda when, cb, arg: None, lambda: 0.0, per_proxy=1)
    defaults = RequestDefaults({}, proxy)
    direct = RequestDefaults({})
    for seq, (url, d) in enumerate([("http://a.test/1", defaults), ("http://b.test/1", defaults),
                                    ("http://c.test/1", direct)]):
        t.enqueue(Task(URLBean(url), parse_target(url), seq, 0.0, d), 0.0)
    first = t.next_assignment(0.0)
    assert first is not None and first.task.url == "http://a.test/1"
    conn: Any = FakeConn(first.slot, proxy)
    t.connection_opened(first.slot, conn)
    t.refresh(first.slot, 0.0)
    second = t.next_assignment(0.0)
    assert second is not None and second.task.url == "http://c.test/1"  # b.test waits for the proxy, c.test does not
    t.connection_opened(second.slot)
    assert t.next_assignment(0.0) is None and t.proxy_open == {"p.test:3128": 1}
    # The proxy's connection goes idle: b.test takes its place by closing it.
    t.exchange_ended(first.slot, True, 0.0)
    t.connection_idle(conn, 0.0)
    third = t.next_assignment(0.0)
    assert third is not None and third.task.url == "http://b.test/1" and third.evict is conn


def test_no_repr_and_no_error_message_shows_a_proxy_password() -> None:
    url = "http://crawler:hunter2@p.test:3128"
    bean = URLBean("http://a.test/", proxy=url)
    # A config or a result logged whole must not carry the password (Proxy's own repr hides it too).
    assert "hunter2" not in repr(FetcherConfig(proxy=url))
    assert "hunter2" not in repr(bean) and "hunter2" not in repr(FetchResult(bean, bean.url, bean.url))
    # A password with an unescaped "@" or "/": urlsplit reads the host after the last "@", and
    # the message masks up to that one as well.
    for bad in ("http://u:hunt@er2@p.test", "http://u:hunt/er2@p.test:1", "http://u/x:hunter2@p.test:99999"):
        with pytest.raises(ValueError) as raised:
            FetcherConfig(proxy=bad)
        assert "er2" not in str(raised.value), str(raised.value)
        assert str(raised.value).endswith("@p.test'") or "@p.test:" in str(raised.value)


def test_a_no_proxy_entry_with_a_port_is_refused_an_ipv6_one_too() -> None:
    # Ports play no part, so an entry with one is refused rather than read as something else:
    # "[::1]:8080" without its brackets is the address ::1:8080, which no loopback URL has.
    for entry in ("example.com:8080", "127.0.0.1:80", "[::1]:8080", "[::1]8080"):
        with pytest.raises(ValueError, match="is neither a host name nor an IP address"):
            NoProxy([entry])
    assert NoProxy(["[::1]"]).matches("::1") and NoProxy(["[fe80::]/10"]).matches("fe80::1")

"""Cookies (issue 30, item 2): ``FetcherConfig(cookies=True)``, one ``http.cookiejar`` jar.

A loopback server gates ``/private`` behind a session cookie that ``/login`` sets on a redirect to
it, and says what each request carried; host names map to 127.0.0.1 through ``resolve``, so the
jar's domain rules are tested with real names and no name is looked up:

- the cookie a redirect sets goes with the next hop, and with later requests to the same host;
- it never goes to another host, nor over http when it is Secure, nor outside its Path, nor
  after the server expired it;
- without ``cookies`` nothing is kept (the gated page stays 403: the negative control);
- a ``Cookie`` header of the caller's own goes as it is; ``NIOFetcher.cookie_jar`` is the jar;
- ``fetch --cookies`` on the command line; the Scrapy handler refuses a jar of its own;
- a ``Domain`` attribute reaches no host it does not name (RFC 6265 5.1.3 and 5.3): an IP host
  only names itself, a domain without a dot or a public suffix is refused, a single-label host
  gets no made-up ``.local`` domain to share;
- the jar is bounded (50 cookies a domain, 3,000 in all: the least recently used domain goes) and
  a request asks it only about its own host and that host's parent domains.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.cookiejar import Cookie, DefaultCookiePolicy
from urllib.parse import parse_qs, urlsplit

import pytest

from niofetcher import FetcherConfig, NIOFetcher, URLBean
from niofetcher.cookies import MAX_COOKIES, MAX_COOKIES_PER_DOMAIN, cookie_header, new_jar, store_cookies
from niofetcher.models import FetchResult


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str | None]]  # (Host, path, Cookie) of every request, set per server

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        host, cookie = self.headers.get("Host", ""), self.headers.get("Cookie")
        self.seen.append((host.split(":")[0], self.path, cookie))
        if self.path == "/login":
            self._answer(302, b"", [("Location", "/private"),
                                    ("Set-Cookie", "session=s3cret; Path=/; HttpOnly"),
                                    ("Set-Cookie", "secure_one=x; Path=/; Secure"),
                                    ("Set-Cookie", "narrow=n; Path=/private/area"),
                                    ("Set-Cookie", "wide=w; Domain=shop.test; Path=/")])
        elif self.path.startswith("/set?"):  # /set?domain=D: a cookie with that Domain attribute
            domain = parse_qs(urlsplit(self.path).query)["domain"][0]
            self._answer(200, b"set", [("Set-Cookie", f"sid=SECRET; Domain={domain}; Path=/")])
        elif self.path.startswith("/many?"):  # /many?n=N: N cookies in one response, c0 first
            count = int(parse_qs(urlsplit(self.path).query)["n"][0])
            self._answer(200, b"many", [("Set-Cookie", f"c{i}={i}; Path=/") for i in range(count)])
        elif self.path == "/logout":
            self._answer(200, b"bye", [("Set-Cookie", "session=; Path=/; Max-Age=0")])
        elif self.path.startswith("/private"):
            allowed = cookie is not None and "session=s3cret" in cookie
            self._answer(200 if allowed else 403, b"members only" if allowed else b"log in first", [])
        else:
            self._answer(200, b"public", [])

    def _answer(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[tuple[int, list[tuple[str, str, str | None]]]]:
    seen: list[tuple[str, str, str | None]] = []
    handler = type("Handler", (_Handler,), {"seen": seen})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def config(port: int, names: tuple[str, ...] = ("shop.test", "www.shop.test", "other.test"),
           **options: object) -> FetcherConfig:
    return FetcherConfig(resolve={f"{name}:{port}": "127.0.0.1" for name in names}, **options)  # type: ignore[arg-type]


def fetch_in_turn(fetcher: NIOFetcher, urls: list[str]) -> list[FetchResult]:
    """One after another: each request sees what the responses before it set."""
    results = []
    for url in urls:
        assert fetcher.register(url)
        result = fetcher.get(timeout=10)
        assert result is not None, url
        results.append(result)
    return results


def fetch_done(fetcher: NIOFetcher) -> list[FetchResult]:
    """The result of the one URL registered last."""
    result = fetcher.get(timeout=10)
    assert result is not None
    return [result]


@pytest.mark.timeout(30)
def test_a_session_cookie_set_on_a_redirect_opens_the_gated_page_and_goes_nowhere_else(server: tuple[int, list]) -> None:
    port, seen = server
    base = f"http://shop.test:{port}"
    with NIOFetcher(config(port, cookies=True)) as fetcher:
        login, again, other, outside, area = fetch_in_turn(fetcher, [
            f"{base}/login", f"{base}/private", f"http://other.test:{port}/private", f"{base}/public",
            f"{base}/private/area/x"])
        assert (login.status, login.body, login.final_url) == (200, b"members only", f"{base}/private")
        assert again.status == 200  # later requests to the host carry it too
        assert other.status == 403  # another host never gets it
        jar = fetcher.cookie_jar
        assert jar is not None and {cookie.name for cookie in jar} == {"session", "secure_one", "narrow", "wide"}
        assert (outside.status, area.status) == (200, 200)
    sent = {(host, path): set(cookie.split("; ")) if cookie else set() for host, path, cookie in seen}
    assert sent[("shop.test", "/login")] == set()
    # The redirect's hop: not the Secure one over http, not the one for /private/area.
    assert sent[("shop.test", "/private")] == {"session=s3cret", "wide=w"}
    assert sent[("other.test", "/private")] == set()
    assert sent[("shop.test", "/public")] == {"session=s3cret", "wide=w"}
    assert sent[("shop.test", "/private/area/x")] == {"session=s3cret", "wide=w", "narrow=n"}


@pytest.mark.timeout(30)
def test_a_host_only_cookie_stays_on_its_host_a_domain_one_goes_to_subdomains_and_an_expired_one_is_gone(
    server: tuple[int, list],
) -> None:
    port, seen = server
    with NIOFetcher(config(port, cookies=True)) as fetcher:
        results = fetch_in_turn(fetcher, [
            f"http://shop.test:{port}/login", f"http://www.shop.test:{port}/private",
            f"http://shop.test:{port}/logout", f"http://shop.test:{port}/private"])
        assert [result.status for result in results] == [200, 403, 200, 403]
        assert fetcher.cookie_jar is not None and "session" not in {cookie.name for cookie in fetcher.cookie_jar}
    # www.shop.test gets the Domain=shop.test cookie, not the host-only session; after /logout, no session.
    assert [cookie for host, path, cookie in seen if path == "/private"][1:] == ["wide=w", "wide=w"]


@pytest.mark.timeout(30)
def test_without_cookies_nothing_is_kept_and_a_cookie_of_the_callers_own_goes_as_it_is(server: tuple[int, list]) -> None:
    port, seen = server
    base = f"http://shop.test:{port}"
    with NIOFetcher(config(port)) as fetcher:
        assert fetcher.cookie_jar is None
        login, = fetch_in_turn(fetcher, [f"{base}/login"])
        assert (login.status, login.body) == (403, b"log in first")  # the negative control: the gate holds
        assert fetcher.register(URLBean(f"{base}/private", headers={"Cookie": "session=s3cret"}))
        assert [result.status for result in fetch_done(fetcher)] == [200]
    with NIOFetcher(config(port, cookies=True)) as fetcher:
        fetch_in_turn(fetcher, [f"{base}/login"])
        assert fetcher.register(URLBean(f"{base}/public", headers={"Cookie": "mine=1"}))
        fetch_done(fetcher)
    assert seen[-1] == ("shop.test", "/public", "mine=1")  # the caller's own, not the jar's besides


def test_cookies_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="cookies must be True or False"):
        FetcherConfig(cookies="yes")  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_fetch_cookies_on_the_command_line(server: tuple[int, list]) -> None:
    port, _ = server
    url = f"http://shop.test:{port}/login"
    for flag, status in ((["--cookies"], 200), ([], 403)):
        done = subprocess.run([sys.executable, "-m", "niofetcher", "fetch", url, "--out", "-", "--resolve",
                               f"shop.test:{port}:127.0.0.1", *flag], capture_output=True, text=True, timeout=50, check=False)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[0])["status"] == status


def test_the_scrapy_handler_leaves_cookies_to_scrapy() -> None:
    pytest.importorskip("scrapy")
    from scrapy.settings import Settings

    from niofetcher.scrapy import fetcher_config

    with pytest.raises(ValueError, match="CookiesMiddleware"):
        fetcher_config(Settings({"NIOFETCHER_CONFIG": {"cookies": True}}))
    assert fetcher_config(Settings()).cookies is False


def test_a_fetcher_without_cookies_never_imports_the_jar() -> None:
    """http.cookiejar brings urllib.request, http.client and email with it (about 15 ms and 47 M
    instructions at start, by callgrind): only a fetcher with cookies loads it."""
    code = ("import sys\nfrom niofetcher import FetcherConfig, NIOFetcher\n"
            "with NIOFetcher(FetcherConfig()) as f: pass\n"
            "print(sorted(m for m in ('http.cookiejar', 'urllib.request', 'http.client') if m in sys.modules))\n"
            "with NIOFetcher(FetcherConfig(cookies=True)) as f: pass\n"
            "print('http.cookiejar' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True"]


@pytest.mark.timeout(30)
def test_a_domain_attribute_reaches_no_host_it_does_not_name(server: tuple[int, list]) -> None:
    """RFC 6265 5.1.3 and 5.3 step 5-6; the standard library's default policy accepted the first
    three (an IP's last labels as a domain, and ``local``, which it adds to every single-label
    host) and ``co.uk``."""
    port, seen = server
    names = ("10.9.0.1", "10.8.0.1", "alpha", "beta", "alpha.local", "localhost", "shop.co.uk", "other.co.uk",
             "shop.test", "other.test")
    # (who sets it, its Domain, who must not get it)
    refused = [("10.9.0.1", "0.1", "10.8.0.1"), ("alpha", "local", "beta"), ("alpha", "alpha.local", "alpha.local"),
               ("shop.co.uk", "co.uk", "other.co.uk"), ("shop.test", "test", "other.test")]
    with NIOFetcher(config(port, names, cookies=True)) as fetcher:
        for setter, domain, other in refused:
            fetch_in_turn(fetcher, [f"http://{setter}:{port}/set?domain={domain}", f"http://{other}:{port}/x",
                                    f"http://{setter}:{port}/x"])
        jar = fetcher.cookie_jar
        assert jar is not None and list(jar) == []
        # A Domain naming the host itself is kept, for that host alone when it has no other name below it.
        for host in ("10.9.0.1", "localhost"):
            fetch_in_turn(fetcher, [f"http://{host}:{port}/set?domain={host}", f"http://{host}:{port}/again",
                                    f"http://10.8.0.1:{port}/again", f"http://beta:{port}/again"])
        assert sorted((cookie.domain, cookie.name) for cookie in jar) == [(".10.9.0.1", "sid"), (".localhost", "sid")]
    assert [(host, path, cookie) for host, path, cookie in seen if cookie is not None] == [
        ("10.9.0.1", "/again", "sid=SECRET"), ("localhost", "/again", "sid=SECRET")]


@pytest.mark.timeout(30)
def test_a_domain_keeps_its_50_newest_cookies(server: tuple[int, list]) -> None:
    port, seen = server
    count = MAX_COOKIES_PER_DOMAIN + 10
    with NIOFetcher(config(port, cookies=True)) as fetcher:
        fetch_in_turn(fetcher, [f"http://shop.test:{port}/many?n={count}", f"http://shop.test:{port}/x"])
        assert fetcher.cookie_jar is not None and len(fetcher.cookie_jar) == MAX_COOKIES_PER_DOMAIN
    sent = seen[-1][2]
    assert sent is not None and sorted(sent.split("; ")) == sorted(f"c{i}={i}" for i in range(10, count))


def _one_cookie(jar: object, host: str) -> None:
    store_cookies(jar, f"http://{host}/", [("Set-Cookie", f"sid={host}; Path=/")])  # type: ignore[arg-type]


def test_the_jar_holds_3000_cookies_and_lets_the_least_recently_used_domain_go() -> None:
    """The loop thread's own calls (store_cookies, cookie_header) on the fetcher's jar: a crawl meets
    hosts by the thousand, and each may set a cookie."""
    jar = new_jar()
    _one_cookie(jar, "h0.test")
    _one_cookie(jar, "h1.test")
    for i in range(2, MAX_COOKIES + 500):
        _one_cookie(jar, f"h{i}.test")
        if i % 1000 == 0:
            assert cookie_header(jar, "http://h0.test/x") == "sid=h0.test"  # used: kept
    assert len(jar) == len(list(jar)) == MAX_COOKIES
    assert cookie_header(jar, "http://h0.test/x") == "sid=h0.test"
    assert cookie_header(jar, "http://h1.test/x") is None  # the least recently used went first
    last = MAX_COOKIES + 499
    assert cookie_header(jar, f"http://h{last}.test/x") == f"sid=h{last}.test"


class _Asked(DefaultCookiePolicy):
    """A policy that notes which domains of the jar a request makes it look at."""

    def __init__(self) -> None:
        super().__init__(strict_ns_domain=DefaultCookiePolicy.DomainStrictNonDomain)
        self.asked: set[str] = set()

    def domain_return_ok(self, domain: str, request: object) -> bool:
        self.asked.add(domain)
        return super().domain_return_ok(domain, request)  # type: ignore[arg-type]


def test_a_request_looks_only_at_its_host_and_parent_domains() -> None:
    """Each request's Cookie header is made on the loop thread: with every domain of the jar asked,
    it cost 31 ms at 10,000 hosts and 333 ms at 100,000."""
    jar = new_jar()
    for i in range(1000):
        _one_cookie(jar, f"h{i}.test")
    store_cookies(jar, "http://shop.test/", [("Set-Cookie", "wide=w; Domain=shop.test; Path=/")])
    _one_cookie(jar, "www.shop.test")
    _one_cookie(jar, "alpha")
    policy = _Asked()
    jar.set_policy(policy)
    assert sorted(str(cookie_header(jar, "http://www.shop.test/x")).split("; ")) == ["sid=www.shop.test", "wide=w"]
    assert policy.asked <= {"www.shop.test", ".www.shop.test", "shop.test", ".shop.test", "test", ".test"}
    policy.asked.clear()
    assert cookie_header(jar, "http://alpha/x") == "sid=alpha"  # kept as alpha.local, the library's name for it
    assert policy.asked <= {"alpha", ".alpha", "alpha.local", ".alpha.local"}
    _one_cookie(jar, "[::1]")
    policy.asked.clear()
    assert cookie_header(jar, "http://[::1]/x") == "sid=[::1]"  # kept as [::1].local: no dot in it either
    assert policy.asked <= {"[::1]", ".[::1]", "[::1].local", ".[::1].local"}


def test_expired_cookies_leave_the_jar_when_due() -> None:
    jar = new_jar()
    now = int(time.time())
    for name, expires in (("gone", now - 10), ("kept", now + 3600), ("session", None)):
        jar.set_cookie(Cookie(0, name, "v", None, False, "shop.test", False, False, "/", True, False, expires,
                              expires is None, None, None, {}))
    cookie_header(jar, "http://other.test/")  # a request clears what expired, as the library's jar does
    assert sorted(cookie.name for cookie in jar) == ["kept", "session"]
    assert len(jar) == 2

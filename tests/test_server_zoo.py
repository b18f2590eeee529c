"""A server zoo: niofetcher against eight real HTTP servers, each answer compared with curl's.

The servers, each started here on a free port of 127.0.0.1 with a short keep-alive
idle timeout (``IDLE``) and stopped by its pid (its whole process group) however
the test ends: nginx, Apache httpd (``apache2``), lighttpd, gunicorn, uvicorn,
Twisted Web, node and Python's ``http.server``. Their configurations and small
sites are in ``tests/zoo/``; they all serve one document root made here, with
deterministic contents, and the same paths:

- ``/files/1k.bin``, ``/files/1m.bin``, ``/files/30m.bin``: static files;
- ``/gzip/page.txt``: a 2 MB text, gzip-encoded;
- ``/chunked/page.txt``: the same text, sent chunked;
- ``/redirect``: a 302 to ``/files/1k.bin``;
- ``/missing``: a 404;
- ``HEAD /files/1m.bin``.

Each endpoint is fetched by niofetcher and by ``curl --compressed``; the two must
give the same statuses (redirects included), the same body bytes after decoding
(equal to the file too, where there is one) and the same response headers but
for those that change from one response to the next (``Date``, ``Keep-Alive``,
``Connection``). The gzip and chunked endpoints must really be gzip-encoded and
chunked, for both clients.

No server skips an endpoint; where one has no natural way, it gets the cheapest:

- nginx: gzip on the fly (``gzip on``, which is also chunked); chunked through SSI
  (``ssi on`` takes the file's length away).
- Apache: ``mod_deflate`` for gzip; chunked from a CGI script (``tests/zoo/cat.cgi``):
  Apache sends even an SSI-filtered static file with a length it computes.
- lighttpd: ``mod_deflate`` for gzip (it sends a length); chunked from the same CGI
  script with ``server.stream-response-body``.
- gunicorn (a WSGI app, the ``gthread`` worker: the ``sync`` worker has no
  keep-alive) and uvicorn (an ASGI app): ``tests/zoo/pyservers.py``.
- Twisted: its ``File``, ``GzipEncoderFactory`` and ``Redirect`` resources, and a
  resource that writes pieces for chunked (``tests/zoo/pyservers.py``).
- node: ``http`` and ``zlib``, ``tests/zoo/server.js``.
- ``http.server``: ``SimpleHTTPRequestHandler`` at HTTP/1.1 for the files; gzip,
  chunked framing and the redirect written by hand (``tests/zoo/pyservers.py``).

Keep-alive: 300 requests on at most 2 connections, in two halves with a pause
between them until the server has closed every connection for being idle. The
connections are counted from the server's side, in its own log of requests, by
the connection it names: nginx's ``$connection``, the client's port for the
others (Apache's ``%{remote}p``, lighttpd's ``%{remote}p``, gunicorn's
``REMOTE_PORT``, uvicorn's access log, the apps' own lines). Every request must
succeed, none replayed, the halves on different connections, each on at most 2.

A server is skipped, with the reason, only when its program or package is not
installed (Debian: ``apt-get install -y nginx apache2 lighttpd nodejs curl``;
gunicorn and uvicorn are in the ``test`` extra, Twisted comes with Scrapy); the
whole module when curl is missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin

import pytest
from conftest import wait_until

from niofetcher import FetcherConfig, FetchResult, NIOFetcher, URLBean

ZOO = Path(__file__).resolve().parent / "zoo"
IDLE = 1  # seconds: every server's keep-alive idle timeout, short so that waiting past it stays cheap
KEEPALIVE_REQUESTS = 300
PER_HOST = 2
MIB = 1024 * 1024
FILES = {"1k.bin": 1024, "1m.bin": MIB, "30m.bin": 30 * MIB}
# 2.2 MB of text, for gzip and chunked: smaller, and Apache's mod_deflate sends it with a length it
# computes (as it does a small CGI output); text, so that gzip has something to do.
PAGE = "".join(f"line {n:06d}: the quick brown fox jumps over the lazy dog\n" for n in range(40_000)).encode()
# These change between two responses of one server, or with the request's place on its connection.
VOLATILE_HEADERS = {"date", "keep-alive", "connection"}
START_TIMEOUT = 20.0
CURL = shutil.which("curl")

pytestmark = pytest.mark.skipif(CURL is None, reason="curl not found (Debian: apt-get install -y curl)")


def program(*names: str) -> str | None:
    """The first of ``names`` found on PATH or in /usr/sbin (not on every user's PATH)."""
    for name in names:
        found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the document root ---------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """The document root every server serves, and what its files hold."""

    root: Path
    files: dict[str, bytes]


@pytest.fixture(scope="module")
def zoo_dir() -> Iterator[Path]:
    """A temporary directory others can enter: Apache's children run as ``nobody`` when we are root."""
    directory = Path(tempfile.mkdtemp(prefix="niofetcher-zoo-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def site(zoo_dir: Path) -> Site:
    root = zoo_dir / "root"
    rng = random.Random(25)
    files = {name: rng.randbytes(size) for name, size in FILES.items()}
    for sub, contents in (("files", files), ("gzip", {"page.txt": PAGE}), ("chunked", {"page.txt": PAGE})):
        (root / sub).mkdir(parents=True)
        for name, data in contents.items():
            (root / sub / name).write_bytes(data)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return Site(root, files)


# -- the servers -----------------------------------------------------------------------

# One request per line, naming its connection: "conn=N" (nginx) or "port=N" (the client's port),
# then the method and target, maybe quoted in a request line, then the status.
LOG_LINE = re.compile(r'^(?:conn|port)=(\d+) .*?"?(GET|HEAD) ([^\s"]+)(?: HTTP/\d\.\d)?"? (\d{3})\b', re.MULTILINE)
# uvicorn's access log as it comes: ``INFO:     127.0.0.1:PORT - "GET /x HTTP/1.1" 200 OK``.
UVICORN_LINE = re.compile(r'127\.0\.0\.1:(\d+) - "(GET|HEAD) (\S+) HTTP/\d\.\d" (\d{3})\b')


@dataclass
class Launch:
    """How to start one server: its command, and where it writes its request lines."""

    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    line: re.Pattern[str] = LOG_LINE
    flush_signal: signal.Signals | None = None  # sent before the log is read


def fill(template: str, run: Path, **values: str) -> Path:
    """Write ``tests/zoo/TEMPLATE`` into ``run`` with its ``@NAME@`` placeholders filled in."""
    text = (ZOO / template).read_text()
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    assert not re.search(r"@[A-Z]+@", text), f"a placeholder left in {template}"
    out = run / template
    out.write_text(text)
    return out


def copy_cgi(run: Path) -> None:
    target = run / "cat.cgi"
    shutil.copyfile(ZOO / "cat.cgi", target)
    target.chmod(0o755)


def launch_nginx(site: Site, run: Path, port: int) -> Launch:
    conf = fill("nginx.conf", run, RUN=str(run), ROOT=str(site.root), PORT=str(port), IDLE=str(IDLE))
    nginx = program("nginx")
    assert nginx is not None
    # -e: the error log before the configuration is read, which would otherwise be /var/log/nginx's.
    return Launch([nginx, "-e", str(run / "error.log"), "-p", str(run), "-c", str(conf)], run / "access.log")


def launch_apache(site: Site, run: Path, port: int) -> Launch:
    copy_cgi(run)
    # As root Apache's children must become somebody else; otherwise they stay who we are.
    user = f"User nobody\nGroup #{pwd.getpwnam('nobody').pw_gid}" if os.geteuid() == 0 else ""
    conf = fill("apache2.conf", run, RUN=str(run), ROOT=str(site.root), PORT=str(port), IDLE=str(IDLE), USER=user)
    apache = program("apache2", "httpd")
    assert apache is not None
    return Launch([apache, "-f", str(conf), "-DFOREGROUND"], run / "access.log")


def launch_lighttpd(site: Site, run: Path, port: int) -> Launch:
    copy_cgi(run)
    conf = fill("lighttpd.conf", run, RUN=str(run), ROOT=str(site.root), PORT=str(port), IDLE=str(IDLE), USER="")
    lighttpd = program("lighttpd")
    assert lighttpd is not None
    # lighttpd holds its access log in a buffer; SIGHUP (reopen the logs) writes it out.
    return Launch([lighttpd, "-D", "-f", str(conf)], run / "access.log", flush_signal=signal.SIGHUP)


def launch_gunicorn(site: Site, run: Path, port: int) -> Launch:
    log = run / "access.log"
    argv = [
        sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--chdir", str(ZOO),
        "--workers", "1", "--worker-class", "gthread", "--threads", "4", "--keep-alive", str(IDLE),
        "--graceful-timeout", "1", "--access-logfile", str(log),
        "--access-logformat", 'port=%({remote_port}e)s "%(r)s" %(s)s', "pyservers:wsgi_app",
    ]
    # HOME: where gunicorn would put its control socket (~/.gunicorn), kept in the run directory.
    return Launch(argv, log, env={"ZOO_ROOT": str(site.root), "HOME": str(run)})


def launch_uvicorn(site: Site, run: Path, port: int) -> Launch:
    argv = [
        sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--app-dir", str(ZOO),
        "--timeout-keep-alive", str(IDLE), "--timeout-graceful-shutdown", "1", "--lifespan", "off",
        "pyservers:asgi_app",
    ]
    return Launch(argv, run / "output.log", env={"ZOO_ROOT": str(site.root)}, line=UVICORN_LINE)


def launch_pyserver(kind: str) -> Callable[[Site, Path, int], Launch]:
    def launch(site: Site, run: Path, port: int) -> Launch:
        log = run / "access.log"
        argv = [sys.executable, str(ZOO / "pyservers.py"), kind, "--root", str(site.root), "--port", str(port),
                "--idle", str(IDLE), "--log", str(log)]
        return Launch(argv, log)

    return launch


def launch_node(site: Site, run: Path, port: int) -> Launch:
    node = program("node", "nodejs")
    assert node is not None
    return Launch([node, str(ZOO / "server.js"), str(site.root), str(port), str(IDLE)], run / "output.log")


@dataclass(frozen=True)
class Kind:
    name: str
    launch: Callable[[Site, Path, int], Launch]
    missing: Callable[[], str | None]  # why it cannot run here, None when it can


def needs_program(*names: str, debian: str) -> Callable[[], str | None]:
    return lambda: None if program(*names) else f"{names[0]} not found (Debian: apt-get install -y {debian})"


def needs_module(module: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[test]')"
        return None

    return missing


KINDS = [
    Kind("nginx", launch_nginx, needs_program("nginx", debian="nginx")),
    Kind("apache2", launch_apache, needs_program("apache2", debian="apache2")),
    Kind("lighttpd", launch_lighttpd, needs_program("lighttpd", debian="lighttpd")),
    Kind("gunicorn", launch_gunicorn, needs_module("gunicorn")),
    Kind("uvicorn", launch_uvicorn, needs_module("uvicorn")),
    Kind("twisted", launch_pyserver("twisted"), needs_module("twisted")),
    Kind("node", launch_node, needs_program("node", "nodejs", debian="nodejs")),
    Kind("http.server", launch_pyserver("httpserver"), lambda: None),
]


class Server:
    """One server process, started in a process group of its own so that stopping it stops its children."""

    def __init__(self, kind: Kind, site: Site, run: Path) -> None:
        self.name = kind.name
        self.port = free_port()
        self.run = run
        self.launch = kind.launch(site, run, self.port)
        self.output_path = run / "output.log"
        self._output = self.output_path.open("ab")
        self.process = subprocess.Popen(
            self.launch.argv, cwd=run, env={**os.environ, **self.launch.env}, stdin=subprocess.DEVNULL,
            stdout=self._output, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            if not wait_until(self._listening, timeout=START_TIMEOUT, interval=0.05):
                raise RuntimeError(f"{self.name} did not listen within {START_TIMEOUT} s:\n{self.output()}")
        except BaseException:
            self.stop()
            raise

    def _listening(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.output()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True
        return False

    def output(self) -> str:
        """The end of what the server printed and logged as errors, for a failure's message."""
        texts = [path.read_text(errors="replace")[-3000:] for path in (self.output_path, self.run / "error.log")
                 if path.exists()]
        return "\n".join(texts)

    def url(self, target: str) -> str:
        return f"http://127.0.0.1:{self.port}{target}"

    def logged(self) -> list[tuple[str, str, str, int]]:
        """Every request of the server's log: (connection, method, target, status)."""
        if self.launch.flush_signal is not None and self.process.poll() is None:
            self.process.send_signal(self.launch.flush_signal)
            time.sleep(0.05)
        text = self.launch.log.read_text(errors="replace") if self.launch.log.exists() else ""
        return [(conn, method, target, int(status)) for conn, method, target, status in self.launch.line.findall(text)]

    def connections_of(self, targets: list[str], timeout: float = 10.0) -> dict[str, str]:
        """The connection each of ``targets`` (all distinct) was served on, as the server logged it;
        a server may write its line after the response, so this waits for them all."""
        wanted = set(targets)
        found: dict[str, str] = {}

        def complete() -> bool:
            found.clear()
            found.update({target: conn for conn, _, target, _ in self.logged() if target in wanted})
            return len(found) == len(wanted)

        assert wait_until(complete, timeout=timeout, interval=0.1), (
            f"{self.name} logged {len(found)} of {len(wanted)} requests:\n{self.output()}"
        )
        return found

    def established(self) -> int:
        """Connections the server holds open now: its side of each, ESTABLISHED, in /proc/net/tcp{,6}."""
        count = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(FileNotFoundError), open(table) as lines:
                next(lines, None)
                for line in lines:
                    local, _, state = line.split()[1:4]
                    if int(local.rsplit(":", 1)[1], 16) == self.port and state == "01":
                        count += 1
        return count

    def stop(self) -> None:
        try:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.process.kill()
            # Children (Apache's, gunicorn's worker) that outlived their parent go with its group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
        finally:
            self._output.close()


@pytest.fixture(scope="module", params=KINDS, ids=[kind.name for kind in KINDS])
def server(request: pytest.FixtureRequest, site: Site, zoo_dir: Path) -> Iterator[Server]:
    kind: Kind = request.param
    reason = kind.missing()
    if reason is not None:
        pytest.skip(reason)
    run = zoo_dir / kind.name
    run.mkdir(mode=0o755)
    run.chmod(0o755)  # whatever the umask: Apache's children run cat.cgi from here
    started = Server(kind, site, run)
    try:
        yield started
    finally:
        started.stop()


# -- the two clients -------------------------------------------------------------------


def fetcher_config() -> FetcherConfig:
    # The default max_body_size, 10 MiB, would end the 30 MiB file as too_large.
    return FetcherConfig(max_connections_per_host=PER_HOST, max_body_size=64 * MIB, request_timeout=60.0)


def fetch_all(fetcher: NIOFetcher, beans: list[URLBean], timeout: float = 60.0) -> dict[str, FetchResult]:
    """Register ``beans`` (distinct URLs) and wait for all their results, by URL."""
    assert fetcher.register_many(beans) == len(beans)
    results: dict[str, FetchResult] = {}
    deadline = time.monotonic() + timeout
    while len(results) < len(beans):
        result = fetcher.get(timeout=max(0.0, deadline - time.monotonic()))
        assert result is not None, f"{len(beans) - len(results)} results missing after {timeout} s"
        results[result.url] = result
    return results


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]


@dataclass
class CurlResult:
    responses: list[Response]  # one per hop, the redirects first
    body: bytes


def curl(url: str, method: str, directory: Path, follow: bool) -> CurlResult:
    assert CURL is not None
    heads, body = directory / "curl-head", directory / "curl-body"
    argv = [CURL, "--silent", "--show-error", "--compressed", "--max-time", "60", "-D", str(heads), "-o", str(body)]
    if method == "HEAD":
        argv.append("--head")
    if follow:
        argv.append("--location")
    done = subprocess.run([*argv, url], capture_output=True, timeout=90, check=False)
    assert done.returncode == 0, f"curl {url}: {done.stderr.decode(errors='replace')}"
    responses: list[Response] = []
    for line in heads.read_bytes().decode("latin-1").split("\r\n"):
        if line.startswith("HTTP/"):
            responses.append(Response(int(line.split()[1]), []))
        elif ":" in line:
            name, value = line.split(":", 1)
            responses[-1].headers.append((name.strip(), value.strip()))
    # With --head the "body" curl writes is the head once more.
    return CurlResult(responses, b"" if method == "HEAD" else body.read_bytes())


def comparable(headers: list[tuple[str, str]]) -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = {}
    for name, value in headers:
        if name.lower() not in VOLATILE_HEADERS:
            by_name.setdefault(name.lower(), []).append(value)
    return by_name


def header(headers: list[tuple[str, str]], name: str) -> str | None:
    return next((value for key, value in headers if key.lower() == name), None)


# -- the endpoints ---------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str
    target: str
    expected: Callable[[Site], bytes | None]  # the body it must have; None: whatever curl got
    check: Callable[[list[tuple[str, str]]], None] = lambda headers: None  # on the final head, for both


def has(name: str, value: str) -> Callable[[list[tuple[str, str]]], None]:
    def check(headers: list[tuple[str, str]]) -> None:
        got = header(headers, name)
        assert got is not None and value in got.lower(), f"{name}: {got!r}, not {value!r}"

    return check


def file_named(name: str) -> Callable[[Site], bytes]:
    return lambda site: site.files[name]


ENDPOINTS = [
    *(Endpoint(name.split(".")[0], "GET", f"/files/{name}", file_named(name), has("content-length", str(size)))
      for name, size in FILES.items()),
    Endpoint("gzip", "GET", "/gzip/page.txt", lambda site: PAGE, has("content-encoding", "gzip")),
    Endpoint("chunked", "GET", "/chunked/page.txt", lambda site: PAGE, has("transfer-encoding", "chunked")),
    Endpoint("redirect", "GET", "/redirect", lambda site: site.files["1k.bin"]),
    Endpoint("404", "GET", "/missing", lambda site: None),
    Endpoint("head", "HEAD", "/files/1m.bin", lambda site: b"", has("content-length", str(MIB))),
]


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[endpoint.name for endpoint in ENDPOINTS])
def test_niofetcher_gets_what_curl_gets(server: Server, site: Site, endpoint: Endpoint) -> None:
    url = server.url(endpoint.target)
    with NIOFetcher(fetcher_config()) as fetcher:
        result = fetch_all(fetcher, [URLBean(url, method=endpoint.method)])[url]
    assert result.error is None, f"{server.name} {endpoint.target}: {result.error} {result.error_detail}"
    theirs = curl(url, endpoint.method, server.run, follow=True)

    statuses = [status for status, _ in result.redirects] + [result.status]
    assert statuses == [response.status for response in theirs.responses]
    for (_, target), response in zip(result.redirects, theirs.responses):
        location = header(response.headers, "location")
        assert location is not None and urljoin(url, location) == target
    assert result.body == theirs.body, (
        f"{server.name} {endpoint.target}: niofetcher {len(result.body)} bytes, curl {len(theirs.body)}"
    )
    expected = endpoint.expected(site)
    if expected is not None:
        assert result.body == expected
    final = theirs.responses[-1].headers
    assert comparable(result.headers) == comparable(final)
    endpoint.check(result.headers)
    endpoint.check(final)
    if endpoint.name == "404":
        assert result.status == 404


def test_keep_alive_over_hundreds_of_requests_and_an_idle_close(server: Server, site: Site) -> None:
    """300 requests: the first half, a pause until the server has closed its idle connections, the other."""
    targets = [f"/files/1k.bin?n={n}" for n in range(KEEPALIVE_REQUESTS)]
    half = KEEPALIVE_REQUESTS // 2
    beans = [URLBean(server.url(target)) for target in targets]
    with NIOFetcher(fetcher_config()) as fetcher:
        results = fetch_all(fetcher, beans[:half])
        paused = time.monotonic()
        # The server's own idle timeout ends the connections, not ours (15 s).
        assert wait_until(lambda: server.established() == 0, timeout=IDLE + 10, interval=0.02), (
            f"{server.name} kept {server.established()} idle connections past {IDLE + 10} s"
        )
        idle_close = time.monotonic() - paused
        # niofetcher notices the close while the connection is idle, before any request is put on it.
        assert wait_until(lambda: fetcher.stats().open_connections == 0, timeout=5)
        results.update(fetch_all(fetcher, beans[half:]))
        stats = fetcher.stats()

    failed = [(r.url, r.status, r.error, r.error_detail) for r in results.values()
              if not r.ok or r.body != site.files["1k.bin"]]
    assert not failed, failed
    assert stats.replayed_requests == 0
    assert sum(r.connection_reused for r in results.values()) >= KEEPALIVE_REQUESTS - 2 * PER_HOST

    served_on = server.connections_of(targets)
    before = {served_on[target] for target in targets[:half]}
    after = {served_on[target] for target in targets[half:]}
    print(f"{server.name}: {len(before)} + {len(after)} connections for {KEEPALIVE_REQUESTS} requests "
          f"(niofetcher opened {stats.connections_opened}); idle close after {idle_close:.2f} s")
    assert 1 <= len(before) <= PER_HOST and 1 <= len(after) <= PER_HOST, (before, after)
    assert before.isdisjoint(after), "a connection the server closed for idleness served again"
    assert stats.connections_opened == len(before) + len(after)

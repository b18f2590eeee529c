"""A small HTTP forward proxy on loopback, for tests and examples: real forwarding, or scripted faults.

``ForwardProxy()`` forwards the way a real proxy does: a plain http request
in absolute form (``GET http://127.0.0.1:8080/page/1``) goes on to its
origin, keep-alive on both sides (one upstream connection per origin per
client connection); a ``CONNECT host:port`` is answered ``200`` and the
bytes are relayed both ways until either side closes.  It forwards only to
loopback addresses (anything else gets ``502``), so nothing it does can
leave the machine.

Given ``credentials=(user, password)``, a request without the matching
``Proxy-Authorization: Basic`` gets ``407`` (and the connection closes).
Given ``fault``, it misbehaves instead of forwarding:

=============  ==============================================================
``"502"``      answers every CONNECT ``502 Bad Gateway`` (plain http forwards)
``"close"``    writes half a status line, then closes the connection
``"silent"``   reads the request and never answers (until it is stopped)
=============  ==============================================================

``counters()`` tells what it saw, from its side: connections accepted, open
and at most open at once, the request lines and the ``Proxy-Authorization``
values.  The standard library only (``http.server`` and ``http.client``), a
thread per connection: it serves tests, not load.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import selectors
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, urlsplit

from .server import peer_closed

__all__ = ["FAULTS", "ForwardProxy", "ProxyCounters"]

FAULTS = ("502", "close", "silent")
_HOP_BY_HOP = frozenset((
    "connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "proxy-connection", "te", "trailer",
    "transfer-encoding", "upgrade", "content-length",
))


@dataclass
class ProxyCounters:
    """What the proxy saw, counted on its side."""

    accepted: int = 0
    """Client connections accepted."""
    open_now: int = 0
    """Client connections open now: not closed by the proxy, nor by their client (on Linux)."""
    max_open: int = 0
    """Peak of ``open_now``, counted as each connection is accepted."""
    requests: list[str] = field(default_factory=list)
    """``METHOD target`` of every request, in order (``CONNECT host:port`` or ``GET http://...``)."""
    authorizations: list[str | None] = field(default_factory=list)
    """The ``Proxy-Authorization`` value of every request (None when absent), in the same order."""

    def copy(self) -> ProxyCounters:
        """A snapshot that the proxy's threads will not change under the caller."""
        return ProxyCounters(self.accepted, self.open_now, self.max_open, list(self.requests),
                             list(self.authorizations))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() must not wait for a client that holds a tunnel open

    def __init__(self, proxy: ForwardProxy) -> None:
        self.proxy = proxy
        self._clients: set[socket.socket] = set()  # under the proxy's lock
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        counters = self.proxy._counters
        with self.proxy._lock:
            counters.accepted += 1
            self._clients.add(request)
            # The connections whose client has not closed them: a client that closes one and
            # then opens another sent its FIN first, but the thread serving the old one may not
            # have read it yet, and counting threads would see both open at once.
            counters.open_now = sum(1 for client in self._clients if not peer_closed(client))
            counters.max_open = max(counters.max_open, counters.open_now)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.proxy._lock:
            self._clients.discard(request)
            self.proxy._counters.open_now = sum(1 for client in self._clients if not peer_closed(client))
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self._upstream: dict[tuple[str, int], http.client.HTTPConnection] = {}

    def finish(self) -> None:
        for upstream in self._upstream.values():
            upstream.close()
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a test's output is its own."""

    # -- the common part of every request

    def _admitted(self) -> bool:
        """Record the request, and play the fault or the 407 if there is one: True when it goes on."""
        proxy = self.server.proxy
        given = self.headers.get("Proxy-Authorization")
        with proxy._lock:
            proxy._counters.requests.append(f"{self.command} {self.path}")
            proxy._counters.authorizations.append(given)
        fault = proxy.fault
        if fault == "close":
            self.wfile.write(b"HTTP/1.1 200 Conn")
            self.wfile.flush()
            self.close_connection = True
            return False
        if fault == "silent":
            proxy._stopping.wait()
            self.close_connection = True
            return False
        if proxy.expected_authorization is not None and given != proxy.expected_authorization:
            self._answer(407, "Proxy Authentication Required", [("Proxy-Authenticate", 'Basic realm="test"')])
            self.close_connection = True
            return False
        return True

    def _answer(self, status: int, reason: str, headers: Sequence[tuple[str, str]] = (), body: bytes = b"") -> None:
        self.send_response_only(status, reason)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    # -- CONNECT: a tunnel

    def do_CONNECT(self) -> None:
        """Answer 200 and relay bytes both ways (or play the fault)."""
        if not self._admitted():
            return
        self.close_connection = True  # after a tunnel, the connection is done
        if self.server.proxy.fault == "502":
            self._answer(502, "Bad Gateway")
            return
        host, _, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection(_loopback(host.strip("[]"), int(port)), timeout=5)
        except (OSError, ValueError):
            self._answer(502, "Bad Gateway")
            return
        with upstream:
            self.send_response_only(200, "Connection established")
            self.end_headers()
            self.wfile.flush()
            self._relay(self.connection, upstream)

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        stopping = self.server.proxy._stopping
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            while not stopping.is_set():
                for key, _ in selector.select(timeout=0.2):
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not data:
                            return
                        key.data.sendall(data)
                    except OSError:
                        return

    # -- plain http: forwarded

    def _forward(self) -> None:
        if not self._admitted():
            return
        parts = urlsplit(self.path)
        try:
            if parts.scheme != "http" or not parts.hostname:
                raise ValueError(self.path)
            address = _loopback(parts.hostname, parts.port or 80)
        except ValueError:
            self._answer(502, "Bad Gateway")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP}
        target = parts.path or "/"
        if parts.query:
            target = f"{target}?{parts.query}"
        upstream = self._upstream.get(address)
        if upstream is None:
            upstream = self._upstream[address] = http.client.HTTPConnection(*address, timeout=10)
        try:
            upstream.request(self.command, target, body=body, headers=headers)
            response = upstream.getresponse()
            content = response.read()
        except (OSError, http.client.HTTPException):
            upstream.close()
            del self._upstream[address]
            self._answer(502, "Bad Gateway")
            return
        if response.will_close:
            upstream.close()
            del self._upstream[address]
        kept = [(name, value) for name, value in response.getheaders() if name.lower() not in _HOP_BY_HOP]
        self._answer(response.status, response.reason, kept, b"" if self.command == "HEAD" else content)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = _forward


def _loopback(host: str, port: int) -> tuple[str, int]:
    """``(host, port)`` when host is a loopback address (or ``localhost``); ValueError otherwise."""
    if host == "localhost":
        return "127.0.0.1", port
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"{host} is not a loopback address")
    return host, port


class ForwardProxy:
    """The proxy of the module docstring; a context manager (``with ForwardProxy() as proxy:``).

    Args:
        credentials: ``(user, password)`` a client must send as ``Proxy-Authorization: Basic``;
            None = none needed.
        fault: one of ``FAULTS`` to misbehave that way; None = forward.
    """

    def __init__(self, credentials: tuple[str, str] | None = None, fault: str | None = None) -> None:
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS} or None, not {fault!r}")
        self.fault = fault
        self.credentials = credentials
        self.expected_authorization = None
        if credentials is not None:
            token = base64.b64encode(":".join(credentials).encode()).decode("ascii")
            self.expected_authorization = f"Basic {token}"
        self._lock = threading.Lock()
        self._counters = ProxyCounters()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        where = f"port={self._server.server_address[1]}" if self._server is not None else "stopped"
        return f"<ForwardProxy {where} fault={self.fault}>"

    def start(self) -> ForwardProxy:
        """Listen on an ephemeral loopback port and serve from a thread of its own."""
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="niofetcher-test-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; tunnels and silent answers end too."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ForwardProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self._server is not None, "not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, with the credentials in it when it has some: the ``proxy`` setting."""
        userinfo = ""
        if self.credentials is not None:
            userinfo = f"{quote(self.credentials[0], safe='')}:{quote(self.credentials[1], safe='')}@"
        return f"http://{userinfo}127.0.0.1:{self.port}"

    def counters(self) -> ProxyCounters:
        """A snapshot of what it has seen so far."""
        with self._lock:
            return self._counters.copy()

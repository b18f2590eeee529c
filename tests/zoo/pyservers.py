"""The Python servers of tests/test_server_zoo.py: one small site for gunicorn, uvicorn, Twisted and http.server.

Every server serves the same paths from one document root (``ZOO_ROOT``, or ``--root``):

- ``/files/NAME``: the file as it is, with its length;
- ``/gzip/NAME``: the file gzip-encoded for a client that accepts gzip;
- ``/chunked/NAME``: the file in pieces with no length, so HTTP/1.1 sends it chunked;
- ``/redirect``: a 302 to ``/files/1k.bin``;
- anything else: a 404.

Each does it the way its framework would: gunicorn gets a WSGI callable
(``wsgi_app``), uvicorn an ASGI one (``asgi_app``); ``python3 pyservers.py
twisted|httpserver --root DIR --port N --idle S --log FILE`` runs the other two,
Twisted with its own static ``File``, gzip wrapper and ``Redirect``, http.server
with ``SimpleHTTPRequestHandler`` and the rest written by hand. These two log
one line per request that names its connection by the client's port; gunicorn
and uvicorn do the same in their own access logs.
"""

from __future__ import annotations

import argparse
import gzip
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

PIECE = 64 * 1024
REDIRECT_TO = "/files/1k.bin"
TYPES = {".txt": "text/plain", ".bin": "application/octet-stream"}


def _content_type(path: Path) -> str:
    return TYPES.get(path.suffix, "application/octet-stream")


def _file_under(root: Path, prefix: str, url_path: str) -> Path | None:
    """The regular file of ``root`` that ``url_path`` (``/prefix/NAME``) names, or None."""
    if not url_path.startswith(f"/{prefix}/"):
        return None
    name = url_path[len(prefix) + 2:]
    if not name or "/" in name or name.startswith("."):
        return None
    path = root / prefix / name
    return path if path.is_file() else None


def _accepts_gzip(accept_encoding: str) -> bool:
    return any(part.split(";")[0].strip().lower() == "gzip" for part in accept_encoding.split(","))


def _pieces(path: Path) -> Iterator[bytes]:
    with path.open("rb") as stream:
        while piece := stream.read(PIECE):
            yield piece


def _gzipped(path: Path) -> bytes:
    # mtime=0: the same bytes for every request, as a precompressed file would be.
    return gzip.compress(path.read_bytes(), mtime=0)


NOT_FOUND = b"not found\n"


# -- gunicorn: WSGI ---------------------------------------------------------------

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def wsgi_app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """The site as a WSGI application; its root is ``$ZOO_ROOT``."""
    root = Path(os.environ["ZOO_ROOT"])
    path: str = environ.get("PATH_INFO", "/")
    head = environ["REQUEST_METHOD"] == "HEAD"
    if (found := _file_under(root, "files", path)) is not None:
        start_response("200 OK", [("Content-Type", _content_type(found)), ("Content-Length", str(found.stat().st_size))])
        if head:
            return []
        wrapper: Callable[[IO[bytes], int], Iterable[bytes]] = environ["wsgi.file_wrapper"]
        return wrapper(found.open("rb"), PIECE)  # gunicorn sends a file wrapper with sendfile()
    if (found := _file_under(root, "gzip", path)) is not None:
        if _accepts_gzip(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = _gzipped(found)
            headers = [("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")]
        else:
            body = found.read_bytes()
            headers = [("Vary", "Accept-Encoding")]
        start_response("200 OK", [("Content-Type", _content_type(found)), *headers, ("Content-Length", str(len(body)))])
        return [] if head else [body]
    if (found := _file_under(root, "chunked", path)) is not None:
        # No Content-Length: gunicorn frames an HTTP/1.1 response of unknown length as chunked.
        start_response("200 OK", [("Content-Type", _content_type(found))])
        return [] if head else _pieces(found)
    if path == "/redirect":
        start_response("302 Found", [("Location", REDIRECT_TO), ("Content-Length", "0")])
        return []
    start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(NOT_FOUND)))])
    return [] if head else [NOT_FOUND]


# -- uvicorn: ASGI ----------------------------------------------------------------

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def asgi_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The site as an ASGI application; its root is ``$ZOO_ROOT``."""
    if scope["type"] != "http":
        return
    root = Path(os.environ["ZOO_ROOT"])
    path: str = scope["path"]
    head = scope["method"] == "HEAD"
    request_headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}

    async def start(status: int, headers: list[tuple[str, str]]) -> None:
        encoded = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
        await send({"type": "http.response.start", "status": status, "headers": encoded})

    async def body(data: bytes, more: bool = False) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": more})

    if (found := _file_under(root, "files", path)) is not None:
        await start(200, [("Content-Type", _content_type(found)), ("Content-Length", str(found.stat().st_size))])
        if not head:
            for piece in _pieces(found):
                await body(piece, more=True)
        await body(b"")
    elif (found := _file_under(root, "gzip", path)) is not None:
        data = found.read_bytes()
        headers = [("Vary", "Accept-Encoding")]
        if _accepts_gzip(request_headers.get("accept-encoding", "")):
            data = _gzipped(found)
            headers.append(("Content-Encoding", "gzip"))
        await start(200, [("Content-Type", _content_type(found)), *headers, ("Content-Length", str(len(data)))])
        await body(b"" if head else data)
    elif (found := _file_under(root, "chunked", path)) is not None:
        # No Content-Length and more_body: uvicorn sends it chunked.
        await start(200, [("Content-Type", _content_type(found))])
        if not head:
            for piece in _pieces(found):
                await body(piece, more=True)
        await body(b"")
    elif path == "/redirect":
        await start(302, [("Location", REDIRECT_TO), ("Content-Length", "0")])
        await body(b"")
    else:
        await start(404, [("Content-Type", "text/plain"), ("Content-Length", str(len(NOT_FOUND)))])
        await body(b"" if head else NOT_FOUND)


# -- http.server ------------------------------------------------------------------


def run_httpserver(root: Path, port: int, idle: float, log: Path) -> None:
    """``SimpleHTTPRequestHandler`` for the files, the other paths written by hand, until killed."""
    log_file = log.open("a", buffering=1)

    class Handler(SimpleHTTPRequestHandler):
        # HTTP/1.1 is what keeps connections open; the default HTTP/1.0 closes after each response.
        protocol_version = "HTTP/1.1"
        # The socket timeout is the idle timeout: a request that does not come in time ends the connection.
        timeout = idle
        # The head and the body go out in two writes; with Nagle's algorithm the second waits for the
        # client's delayed ACK, 40 ms a response on a kept-alive connection (curl sees it as well).
        disable_nagle_algorithm = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self) -> None:
            if not self._special():
                super().do_GET()

        def do_HEAD(self) -> None:
            if not self._special():
                super().do_HEAD()

        def _special(self) -> bool:
            path = self.path.split("?", 1)[0]
            head = self.command == "HEAD"
            if (found := _file_under(root, "gzip", path)) is not None:
                data = found.read_bytes()
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", _content_type(found))
                self.send_header("Vary", "Accept-Encoding")
                if _accepts_gzip(self.headers.get("Accept-Encoding", "")):
                    data = _gzipped(found)
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)
            elif (found := _file_under(root, "chunked", path)) is not None:
                # http.server has no chunked encoding of its own: the framing is written here.
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", _content_type(found))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if not head:
                    for piece in _pieces(found):
                        self.wfile.write(b"%x\r\n%b\r\n" % (len(piece), piece))
                    self.wfile.write(b"0\r\n\r\n")
            elif path == "/redirect":
                self.send_response(HTTPStatus.FOUND)
                self.send_header("Location", REDIRECT_TO)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path.startswith("/files/"):
                return False
            else:
                # SimpleHTTPRequestHandler would list directories and send "/" as an index.
                self.send_error(HTTPStatus.NOT_FOUND)
            return True

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            status = code.value if isinstance(code, HTTPStatus) else code
            log_file.write(f"port={self.client_address[1]} \"{self.requestline}\" {status}\n")

    with ThreadingHTTPServer(("127.0.0.1", port), Handler) as server:
        server.serve_forever()


# -- Twisted ----------------------------------------------------------------------


def run_twisted(root: Path, port: int, idle: float, log: Path) -> None:
    """Twisted's own resources: ``File``, ``EncodingResourceWrapper`` with gzip, ``Redirect``; until killed."""
    from twisted.internet import reactor as the_reactor
    from twisted.web.resource import EncodingResourceWrapper, Resource
    from twisted.web.server import NOT_DONE_YET, GzipEncoderFactory, Site
    from twisted.web.static import File
    from twisted.web.util import Redirect

    # Twisted declares its interfaces with zope.interface, which mypy cannot follow (a File is an
    # IResource, the reactor an IReactorTCP): what crosses them is Any here.
    reactor: Any = the_reactor
    wrap_encoding: Any = EncodingResourceWrapper
    make_site: Any = Site

    class Chunked(Resource):
        """The file written in pieces with no length: Twisted sends such a response chunked."""

        isLeaf = True

        def render_GET(self, request: Any) -> bytes | int:
            name = b"/".join(request.postpath or []).decode("utf-8", "replace")
            found = _file_under(root, "chunked", f"/chunked/{name}")
            if found is None:
                request.setResponseCode(404)
                return NOT_FOUND
            request.setHeader(b"Content-Type", _content_type(found).encode())
            for piece in _pieces(found):
                request.write(piece)
            request.finish()
            return NOT_DONE_YET

    class GzipFiles(File):
        """A directory whose files are gzip-encoded for a client that accepts it."""

        def getChild(self, path: bytes, request: Any) -> Any:
            # The wrapper encodes only the resource it wraps, so it goes on each file, not on the directory.
            return wrap_encoding(super().getChild(path, request), [GzipEncoderFactory()])  # type: ignore[no-untyped-call]

    def log_line(timestamp: str | None, request: Any) -> str:
        method, uri = request.method.decode("latin-1"), request.uri.decode("latin-1")
        return f'port={request.getClientAddress().port} "{method} {uri}" {request.code}'

    site_root: Any = File(str(root), defaultType="application/octet-stream")
    site_root.contentTypes = {**site_root.contentTypes, **TYPES}
    gzip_dir = GzipFiles(str(root / "gzip"), defaultType="application/octet-stream")
    gzip_dir.contentTypes = site_root.contentTypes
    # File answers for the files and every missing path (with its own 404 page).
    site_root.putChild(b"gzip", gzip_dir)
    site_root.putChild(b"chunked", Chunked())  # type: ignore[no-untyped-call]
    site_root.putChild(b"redirect", Redirect(REDIRECT_TO.encode()))
    site = make_site(site_root, logPath=str(log), timeout=idle, logFormatter=log_line)
    reactor.listenTCP(port, site, interface="127.0.0.1")
    reactor.run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("server", choices=["twisted", "httpserver"])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--idle", type=float, required=True, help="seconds an idle keep-alive connection lasts")
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args(argv)
    run = run_twisted if args.server == "twisted" else run_httpserver
    run(args.root, args.port, args.idle, args.log)


if __name__ == "__main__":
    main()

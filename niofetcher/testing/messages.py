"""HTTP/1.1 as the test site speaks it, without a socket: request heads in, prebuilt responses out.

The server never formats a response while it serves: every answer is a
``Resource`` built once, at start (``pages`` builds the site's), holding the
chunks of bytes to send, and serving a request is a dict lookup. A request
head is parsed by hand, only for what changes the answer: method, path,
version, ``Connection`` and ``Content-Length`` (bodies are discarded).
"""

from __future__ import annotations

from collections.abc import Sequence

Chunk = bytes | memoryview


class Resource:
    """One prebuilt response, as the tuples of chunks to send for each case.

    Both connection flavours are prebuilt so that serving a request never formats
    anything. ``Connection: keep-alive`` is always sent on reusable responses: an
    HTTP/1.1 client ignores it and an HTTP/1.0 client needs it.
    """

    __slots__ = ("close", "close_head_only", "keep_alive", "keep_alive_head_only")

    def __init__(self, status: str, content_type: str, body: Sequence[Chunk], headers: str = "") -> None:
        length = sum(len(chunk) for chunk in body)
        head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n{headers}"
        keep_alive_head = (head + "Connection: keep-alive\r\n\r\n").encode("ascii")
        close_head = (head + "Connection: close\r\n\r\n").encode("ascii")
        self.keep_alive: tuple[Chunk, ...] = (keep_alive_head, *body)
        self.close: tuple[Chunk, ...] = (close_head, *body)
        self.keep_alive_head_only: tuple[Chunk, ...] = (keep_alive_head,)
        self.close_head_only: tuple[Chunk, ...] = (close_head,)

    def chunks(self, keep_alive: bool, head_only: bool) -> tuple[Chunk, ...]:
        """The prebuilt bytes to send: with a keep-alive or a close head, the body left out for a HEAD."""
        if head_only:
            return self.keep_alive_head_only if keep_alive else self.close_head_only
        return self.keep_alive if keep_alive else self.close


class InTurn(Resource):
    """A resource whose answer changes: its n-th request gets ``answers[n]`` (the last one from then on).

    A subclass, so the prebuilt resources of every other path keep their one method call.  Only the
    loop thread calls ``chunks``, under the counters' lock.
    """

    __slots__ = ("answers", "served")

    def __init__(self, answers: Sequence[Resource]) -> None:
        self.answers = list(answers)
        self.served = 0

    def chunks(self, keep_alive: bool, head_only: bool) -> tuple[Chunk, ...]:
        """The next answer's bytes; the last answer once the others have been given."""
        answer = self.answers[min(self.served, len(self.answers) - 1)]
        self.served += 1
        return answer.chunks(keep_alive, head_only)


HTML_TYPE = "text/html; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"
NOT_FOUND = Resource("404 Not Found", TEXT_TYPE, [b"404 not found\n"])
BAD_REQUEST = Resource("400 Bad Request", TEXT_TYPE, [b"400 bad request\n"])


def parse_head(head: bytes) -> tuple[bytes, str, bool, int, bytes, bytes] | None:
    """``(method, path, keep_alive, content_length, host, target)`` of a request head, or None when
    malformed.

    ``host`` is the ``Host`` field lowercased (``b""`` without one): a site of many
    host names on one port tells them apart by it.  ``path`` is the target without its query,
    ``target`` the whole of it (origin-form): only a host that answers by query looks at it.

    Only what changes our answer is looked at. Chunked request bodies are not
    supported (no client of this site sends them) and count as malformed.
    """
    line, _, fields = head.partition(b"\r\n")
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[0].isalpha():
        return None
    method, target, version = parts
    if version == b"HTTP/1.1":
        keep_alive = True
    elif version == b"HTTP/1.0":
        keep_alive = False  # HTTP/1.0 closes unless the client asks otherwise
    else:
        return None
    content_length = 0
    host = b""
    if fields:
        for header in fields.split(b"\r\n"):
            name, colon, value = header.partition(b":")
            if not colon:
                return None
            name = name.lower()
            if name == b"connection":
                value = value.lower()
                if b"close" in value:
                    keep_alive = False
                elif b"keep-alive" in value:
                    keep_alive = True
            elif name == b"content-length":
                value = value.strip()
                if not value.isdigit():
                    return None
                content_length = int(value)
            elif name == b"host":
                host = value.strip().lower()
            elif name == b"transfer-encoding":
                return None
    if target.startswith((b"http://", b"https://")):  # absolute-form, as sent to proxies
        slash = target.find(b"/", target.index(b"//") + 2)
        target = target[slash:] if slash >= 0 else b"/"
    path = target.partition(b"?")[0].decode("latin-1")
    return method, path, keep_alive, content_length, host, target

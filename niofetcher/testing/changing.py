"""``ChangingSite``: pages that change as Poisson processes of known rates, on an accelerated clock.

Theory of operation
-------------------
A revisit schedule is judged by how fresh it keeps a crawl's copies, and freshness can only be
measured against a site whose history is known exactly.  This site draws that history up front:

* page ``i`` (``/page/{i}``) changes as a Poisson process of rate ``rates[i]`` changes a
  *simulated day*; the rates are log-uniform between ``rate_range``'s two ends, and every change
  time over ``days`` simulated days is drawn at construction from ``random.Random(seed)``
  (:attr:`ChangingSite.changes`), so the version a page had at any moment is known afterwards
  (:meth:`ChangingSite.version_at`).  After ``days`` nothing changes any more.
* The clock is accelerated: a simulated day lasts ``seconds_per_day`` real seconds, counted from
  :meth:`ChangingSite.start`.  ``clock`` is injectable (``time.monotonic`` by default), so a test
  can move time itself.
* A page's body carries its version; its ``ETag`` is ``"p{i}-v{version}"`` and its
  ``Last-Modified`` the simulated date of its last change (day 0 is :data:`EPOCH`), so neither
  repeats across versions even when many changes fall in one real second.  A GET whose
  ``If-None-Match`` names the current ETag, or, without one, whose ``If-Modified-Since`` is not
  older than the last change, gets a ``304`` (RFC 9110, 13.1.2: ``If-None-Match`` wins).
* ``/`` links every page and never changes (a crawl's seed); ``/robots.txt`` allows everything.
* Every request is logged (:meth:`ChangingSite.log`): the simulated day its answer was decided,
  the path, the status, the bytes sent for it (status line, headers and body, counted on the
  socket's writer) and the version it stood for.

Python's ``http.server``, a thread per connection: it serves a benchmark's few hundred requests a
second, not a load test.  The standard library only.
"""

from __future__ import annotations

import bisect
import email.utils
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO

from .pages import generated_page, links_html, robots_txt

__all__ = ["EPOCH", "ChangingSite", "LoggedRequest"]

#: The unix time of simulated day 0: what ``Last-Modified`` dates count from.
EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z
_DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    """One request as the site answered it."""

    day: float
    """The simulated day at which the answer was decided (the page's version then)."""
    path: str
    status: int
    sent: int
    """Bytes written for the response: status line, headers and body."""
    version: int | None
    """The page's version at ``day`` (what a 200 carried, what a 304 confirmed); None off the pages."""


class ChangingSite:
    """``pages`` pages changing at known rates (module docstring) on 127.0.0.1, served from a thread.

    Use it as ``with ChangingSite(...) as site:``; crawl ``site.base_url``; read ``site.log()``.

    Args:
        pages: how many pages, ``/page/0`` .. ``/page/{pages-1}``.
        rate_range: ``(lowest, highest)`` changes a simulated day; rates are log-uniform between.
        days: the simulated days whose changes are drawn; nothing changes after them.
        seconds_per_day: real seconds a simulated day lasts.
        seed: the seed of the rates and change times: two sites of one seed change alike.
        page_size: about how many bytes a page's body has.
        clock: real seconds, monotonic; the simulated day is counted from its value at ``start()``.
        max_seconds: the site stops by itself this long after ``start()``; None = never.
    """

    __test__ = False

    def __init__(
        self,
        pages: int = 200,
        rate_range: tuple[float, float] = (0.1, 10.0),
        days: float = 30.0,
        seconds_per_day: float = 2.0,
        seed: int = 27,
        page_size: int = 8192,
        clock: Callable[[], float] = time.monotonic,
        max_seconds: float | None = 600.0,
    ) -> None:
        low, high = rate_range
        if pages < 1 or not 0 < low <= high or days <= 0 or seconds_per_day <= 0 or page_size < 0:
            raise ValueError(f"pages >= 1, 0 < rates, days > 0, seconds_per_day > 0 and page_size >= 0 are "
                             f"needed, not {pages!r}, {rate_range!r}, {days!r}, {seconds_per_day!r}, {page_size!r}")
        if max_seconds is not None and max_seconds <= 0:
            raise ValueError(f"max_seconds must be > 0 or None, not {max_seconds!r}")
        self.days = days
        self.seconds_per_day = seconds_per_day
        self.page_size = page_size
        self.max_seconds = max_seconds
        self._clock = clock
        rng = random.Random(seed)
        self.rates: list[float] = [low * (high / low) ** rng.random() for _ in range(pages)]
        """Changes a simulated day of each page."""
        self.changes: list[list[float]] = [_poisson_times(rng, rate, days) for rate in self.rates]
        """The simulated days at which each page changes, ascending."""
        self._lock = threading.Lock()
        self._log: list[LoggedRequest] = []
        self._started: float | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None

    def __repr__(self) -> str:
        state = "running" if self._server is not None else "new" if self._started is None else "stopped"
        return f"<ChangingSite pages={len(self.rates)} days={self.days} {state}>"

    # -- what the site is, at any moment

    @property
    def paths(self) -> list[str]:
        """The pages' paths, in page order."""
        return [f"/page/{i}" for i in range(len(self.rates))]

    def version_at(self, page: int, day: float) -> int:
        """The version page ``page`` had at simulated ``day``: how many changes it had by then."""
        return bisect.bisect_right(self.changes[page], day)

    def today(self) -> float:
        """The simulated day now (0 before ``start()``)."""
        if self._started is None:
            return 0.0
        return (self._clock() - self._started) / self.seconds_per_day

    def log(self) -> list[LoggedRequest]:
        """Every request so far, in the order they were answered."""
        with self._lock:
            return list(self._log)

    # -- lifecycle

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:{port}/``: the seed page, which links every page."""
        if self._server is None:
            raise RuntimeError("the site is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def start(self) -> ChangingSite:
        """Listen on an ephemeral loopback port, start the clock and serve from a daemon thread."""
        if self._started is not None:
            raise RuntimeError("a ChangingSite can be started only once")
        self._server = _Server(self)
        self._started = self._clock()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="niofetcher-changing-site", daemon=True)
        self._thread.start()
        if self.max_seconds is not None:
            self._timer = threading.Timer(self.max_seconds, self.stop)
            self._timer.daemon = True
            self._timer.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket.  Safe to call twice, and from the timer."""
        with self._lock:
            server, self._server = self._server, None
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ChangingSite:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- answers (in the server's threads)

    def _answer(self, path: str, headers: Message) -> tuple[int, list[tuple[str, str]], bytes, float, int | None]:
        """``(status, headers, body, day, version)`` for a GET of ``path`` with request ``headers``."""
        day = self.today()
        if path == "/robots.txt":
            return 200, [("Content-Type", "text/plain; charset=utf-8")], robots_txt(()), day, None
        if path == "/":
            hrefs = [(href, f"page {i}") for i, href in enumerate(self.paths)]
            body = generated_page("Changing site", links_html(hrefs), 0)
            return 200, [("Content-Type", "text/html; charset=utf-8")], body, day, None
        page = _page_number(path, len(self.rates))
        if page is None:
            return 404, [("Content-Type", "text/plain; charset=utf-8")], b"404 not found\n", day, None
        version = self.version_at(page, day)
        last_change = self.changes[page][version - 1] if version else 0.0
        modified = math.floor(EPOCH + last_change * _DAY)
        etag = f'"p{page}-v{version}"'
        validators = [("ETag", etag), ("Last-Modified", email.utils.formatdate(modified, usegmt=True))]
        if _not_modified(headers, etag, modified):
            return 304, validators, b"", day, version
        body = generated_page(f"Page {page}", f"<p>Page {page}, version {version}.</p>\n", self.page_size)
        return 200, [("Content-Type", "text/html; charset=utf-8"), *validators], body, day, version

    def _record(self, entry: LoggedRequest) -> None:
        with self._lock:
            self._log.append(entry)


def _poisson_times(rng: random.Random, rate: float, days: float) -> list[float]:
    """The arrival times of a Poisson process of ``rate`` over ``(0, days]``: exponential gaps."""
    times: list[float] = []
    at = rng.expovariate(rate)
    while at <= days:
        times.append(at)
        at += rng.expovariate(rate)
    return times


def _page_number(path: str, pages: int) -> int | None:
    """``i`` of ``/page/{i}`` when the site has that page, else None."""
    prefix = "/page/"
    number = path[len(prefix):]
    if not path.startswith(prefix) or not number.isdigit() or len(number) > 9:
        return None
    i = int(number)
    return i if i < pages else None


def _not_modified(headers: Message, etag: str, modified: int) -> bool:
    """Whether a GET with these request ``headers`` gets a 304 (RFC 9110, 13.1.2 and 13.1.3)."""
    if_none_match = headers.get("If-None-Match")
    if if_none_match is not None:
        tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
        return "*" in tags or etag in tags
    if_modified_since = headers.get("If-Modified-Since")
    if if_modified_since is None:
        return False
    try:
        since = email.utils.parsedate_to_datetime(if_modified_since).timestamp()
    except (TypeError, ValueError):  # an invalid date is ignored (13.1.3)
        return False
    return modified <= since


class _CountingWriter:
    """The handler's socket writer, counting the bytes written through it."""

    __slots__ = ("sent", "writer")

    def __init__(self, writer: BinaryIO) -> None:
        self.writer = writer
        self.sent = 0

    def write(self, data: bytes) -> int:
        self.sent += len(data)
        return self.writer.write(data)

    def flush(self) -> None:
        self.writer.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() must not wait for a crawler's idle keep-alive connection

    def __init__(self, site: ChangingSite) -> None:
        self.site = site
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body are two writes: with Nagle's algorithm the body would wait for the
    # client's delayed ACK of the head, 40 ms a response.
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.counting = _CountingWriter(self.wfile)  # type: ignore[arg-type]  # a _SocketWriter is a BufferedIOBase
        self.wfile = self.counting  # type: ignore[assignment]

    def finish(self) -> None:
        self.wfile = self.counting.writer  # type: ignore[assignment]  # socketserver flushes and closes its own
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the site keeps its own log."""

    def do_GET(self) -> None:
        site = self.server.site
        path = self.path.partition("?")[0]
        status, headers, body, day, version = site._answer(path, self.headers)
        before = self.counting.sent
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if status != 304:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        site._record(LoggedRequest(day, path, status, self.counting.sent - before, version))

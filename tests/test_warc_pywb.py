"""pywb replays what ``crawl --warc`` archived (issue 25, item 4).

A crawl by the real command line of a site on 127.0.0.1 that serves a gzip
page, a chunked page, a redirect whose Location is raw UTF-8 bytes and a 404;
``warcio check`` passes on the file; then pywb -- the replay tool archives
run, installed from the package registry into a venv of its own (kept under
the temporary directory, by pywb's release and Python's version) -- takes
the file into a collection (``wb-manager``) and serves it (``wayback``, a
child process on a free loopback port, stopped by its pid).  The site is
stopped before pywb starts: what it serves comes from the archive.

``id_`` replay serves a capture as it was archived, no rewriting:
- a page's body is the bytes the site sent; a gzip one as stored, with its
  Content-Encoding, to a client that accepts gzip, and decoded by pywb (the
  encoding kept as X-Archive-Orig-Content-Encoding) to one that does not;
- the redirect is a 301 whose Location is the site's text -- pywb's own doing
  leaves it as the bytes of that text in latin-1, see below -- and in the
  rewriting mode a browser uses (``mp_``), a redirect to the target's replay;
- the 404 is a 404, with the site's body;
- a page a revisit found unchanged (issue 27, item 3): a second crawl of a site that answers
  conditional GETs (tests/test_revisits.py's KeptSite), a second later, wrote revisit records; at
  the revisit's time pywb serves the identical-payload-digest one as the capture it refers to,
  the capture's bytes under the revisit's date, and the server-not-modified one as the 304 it
  stores (pywb 2.10 serves a revisit of a 3xx as it is), the capture staying at its own time.
Skipped, with pip's reason, where pywb cannot be installed.
"""

from __future__ import annotations

import contextlib
import email.utils
import fcntl
import gzip
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import wait_until
from rawserver import RawServer, get_unused_port, http_response, routes
from test_revisits import site_of
from test_warc import niofetcher, records, warcio
from test_warc_revisits import IDENTICAL, NOT_MODIFIED, REVISIT, header, next_second
from warcio.recordloader import ArcWarcRecord

#: The release of pywb taken from the registry (the newest there; it installs on Python 3.11).
PYWB = "2.10.0"
INSTALL_SECONDS = 600  # a first install on a slow mirror; a cached one takes a second
COLLECTION = "crawl"

LOCATION = "/café/ñ".encode()  # as the site sends it: raw UTF-8, no percent-encoding
LANDED_PATH = "/caf%C3%A9/%C3%B1"  # where the crawler goes for it, as a browser would
HTML = b"<html><body><a href='/gz'>gz</a> <a href='/chunked'>chunked</a> <a href='/moved'>moved</a> " \
       b"<a href='/missing'>missing</a></body></html>"
GZ_BODY = b"<html><body>" + b"compressed " * 300 + b"</body></html>"
GZ_BYTES = gzip.compress(GZ_BODY, mtime=0)
CHUNKED_BODY = b"<html><body>" + b"chunk " * 200 + b"</body></html>"
LANDED = b"<html><body>landed</body></html>"
MISSING = b"not here"  # rawserver.routes' 404 body
SITE = {
    b"/": http_response(200, HTML, [("Content-Type", "text/html")]),
    b"/gz": http_response(200, GZ_BYTES, [("Content-Type", "text/html"), ("Content-Encoding", "gzip")]),
    b"/chunked": http_response(200, CHUNKED_BODY, [("Content-Type", "text/html")], chunked=True),
    b"/moved": http_response(301, b"", [(b"Location", LOCATION)]),
    LANDED_PATH.encode(): http_response(200, LANDED, [("Content-Type", "text/html")]),
}

pytestmark = pytest.mark.timeout(INSTALL_SECONDS + 120)  # a backstop: every step has its own bound


# -- pywb in a venv of its own -------------------------------------------------------------------------------


def _clean_env() -> dict[str, str]:
    """The environment for pywb's commands: without a PYTHONPATH or PYTHONHOME that would put other
    packages before its venv's."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _works(venv: Path) -> bool:
    """Whether ``venv`` holds an installed pywb that imports (its Python may have moved since)."""
    if not (venv / "installed").exists():
        return False
    check = subprocess.run([str(venv / "bin" / "python"), "-c", "import pywb.apps.cli"], capture_output=True,
                           timeout=60, check=False, env=_clean_env())
    return check.returncode == 0


def _install(venv: Path) -> None:
    """A venv at ``venv`` with pywb in it, or a skip with the reason there is none."""
    shutil.rmtree(venv, ignore_errors=True)
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-input", "--retries", "1", "--timeout", "30", f"pywb=={PYWB}"],
    ]
    for step in steps:
        try:
            subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_SECONDS, check=True,
                           env=_clean_env())
        except subprocess.CalledProcessError as exc:  # pip says why last: no network, no such release
            lines = (exc.stderr or exc.stdout or "").strip().splitlines() or [f"exit status {exc.returncode}"]
            shutil.rmtree(venv, ignore_errors=True)
            pytest.skip(f"cannot install pywb {PYWB} ({step[2]} {step[3]}): {lines[-1][:300]}")
        except subprocess.TimeoutExpired:
            shutil.rmtree(venv, ignore_errors=True)
            pytest.skip(f"cannot install pywb {PYWB}: {step[2]} {step[3]} took over {INSTALL_SECONDS} s")
    # Written last: a venv without it was left half-made (a kill mid-install), and is made again.
    (venv / "installed").write_text(f"pywb=={PYWB}\n")


@pytest.fixture(scope="session")
def pywb_bin() -> Path:
    """The bin directory of a venv with pywb, made once and kept for later runs."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    venv = Path(tempfile.gettempdir()) / f"niofetcher-pywb-{PYWB}-py{version}"
    # Two test runs at once (two checkouts) would each make the venv in the other's way.
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _works(venv):
            _install(venv)
    return venv / "bin"


# -- the archive, and pywb serving it -----------------------------------------------------------------------


@dataclass(frozen=True)
class Archive:
    warc: Path
    base: str  # the site's http://127.0.0.1:PORT, without the trailing slash
    crawl: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Archive:
    """The crawl of the site, into a WARC file; the site is stopped once the crawl is over."""
    folder = tmp_path_factory.mktemp("pywb-crawl")
    warc = folder / "crawl.warc.gz"
    with RawServer(routes(SITE)) as site:
        done = niofetcher("crawl", site.url("/"), "--db", str(folder / "crawl.sqlite"), "--warc", str(warc),
                          "--progress", "none")
        base = site.url("")
    return Archive(warc, base, done)


@dataclass(frozen=True)
class Revisited:
    """Two crawls of a site that answers conditional GETs, a second apart, into one WARC file."""

    warc: Path
    base: str
    records: list[ArcWarcRecord]
    pages: dict[str, bytes]  # path -> the body the site served each time

    def record(self, path: str, kind: str) -> ArcWarcRecord:
        (found,) = [record for record in self.records
                    if record.rec_type == kind and header(record, "WARC-Target-URI") == self.base + path]
        return found


@pytest.fixture(scope="module")
def revisited(tmp_path_factory: pytest.TempPathFactory) -> Revisited:
    """/a answers the second crawl's conditional GET with a 304; /b, which has no validators, sends
    the same body again."""
    folder = tmp_path_factory.mktemp("pywb-revisits")
    warc = folder / "revisits.warc.gz"
    site = site_of()
    site.plain = {"/b"}
    with site.running():
        for _ in range(2):
            done = niofetcher("crawl", site.base_url, "--db", str(folder / "crawl.sqlite"), "--warc", str(warc),
                              "--progress", "none", *REVISIT)
            assert done.returncode == 0, done.stderr
            next_second()
    return Revisited(warc, site.base_url.rstrip("/"), [record for record, _ in records(warc)],
                     {path: html.encode() for path, html in site.pages.items()})


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


@dataclass(frozen=True)
class Replay:
    port: int
    base: str

    def get(self, mode: str, path: str, headers: Mapping[str, str] | None = None) -> Answer:
        """pywb's answer for the capture of the site's ``path`` in ``mode`` (``id_``, ``mp_``); a redirect
        is not followed."""
        return self.at("", mode, self.base + path, headers)

    def at(self, timestamp: str, mode: str, url: str, headers: Mapping[str, str] | None = None) -> Answer:
        """pywb's answer for the capture of ``url`` closest to ``timestamp`` (``YYYYMMDDhhmmss``; "" for
        the latest) in ``mode``; a redirect is not followed."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        try:
            conn.request("GET", f"/{COLLECTION}/{timestamp}{mode}/{url}", headers=dict(headers or {}))
            response = conn.getresponse()
            return Answer(response.status, response.headers, response.read())
        finally:
            conn.close()


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def _start_wayback(bin_dir: Path, root: Path, port: int, log: Path) -> subprocess.Popen[bytes] | None:
    """``wayback`` serving the collections of ``root`` on 127.0.0.1:``port``, once it listens; None when
    it exited first (another process took the port), with its words in ``log``."""
    with open(log, "wb") as output:
        child = subprocess.Popen([str(bin_dir / "wayback"), "--port", str(port), "--bind", "127.0.0.1"],
                                 cwd=root, stdout=output, stderr=subprocess.STDOUT, env=_clean_env())
    try:
        listening = wait_until(lambda: _listening(port) or child.poll() is not None, timeout=30, interval=0.05)
    except BaseException:  # the test's timeout, an interrupt: nothing left running
        _stop(child)
        raise
    if listening and child.poll() is None:
        return child
    _stop(child)
    return None


def _stop(child: subprocess.Popen[bytes]) -> None:
    """End ``child`` by its pid: SIGTERM, then SIGKILL if it has not gone within 10 s."""
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)


@pytest.fixture(scope="module")
def replay(pywb_bin: Path, archive: Archive, revisited: Revisited,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replay]:
    """pywb's ``wayback`` serving a collection of the crawls' WARC files on a free loopback port."""
    assert archive.crawl.returncode == 0, archive.crawl.stderr
    root = tmp_path_factory.mktemp("pywb")  # wb-manager and wayback work in collections/ of their cwd
    for command in (["init", COLLECTION], ["add", COLLECTION, str(archive.warc), str(revisited.warc)]):
        made = subprocess.run([str(pywb_bin / "wb-manager"), *command], cwd=root, capture_output=True, text=True,
                              timeout=60, check=False, env=_clean_env())
        assert made.returncode == 0, made.stdout + made.stderr
    log = root / "wayback.log"
    # A free port may be taken between the look and wayback's bind: then it exits, and another is tried.
    for _ in range(3):
        port = get_unused_port()
        child = _start_wayback(pywb_bin, root, port, log)
        if child is not None:
            break
    else:
        pytest.fail(f"wayback did not listen: {log.read_text()[-2000:]}")
    try:
        yield Replay(port, archive.base)
    finally:
        _stop(child)


# -- the tests --------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_the_crawl_archived_each_page_and_warcio_checks_the_file(archive: Archive) -> None:
    assert archive.crawl.returncode == 0, archive.crawl.stderr
    checked = warcio("check", "-v", str(archive.warc))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    read = records(archive.warc)
    assert checked.stdout.count("digest pass") == len(read)
    responses = {record.rec_headers.get_header("WARC-Target-URI").removeprefix(archive.base):
                 record for record, _ in read if record.rec_type == "response"}
    assert sorted(responses) == sorted(["/robots.txt", "/", "/gz", "/chunked", "/moved", "/missing", LANDED_PATH])
    # The archive keeps the Location's bytes; warcio, like pywb, reads a head's lines as UTF-8 text.
    assert responses["/moved"].http_headers.get_header("Location").encode() == LOCATION


def test_a_gzip_page_replays_as_stored_or_decoded_as_the_client_accepts(replay: Replay) -> None:
    stored = replay.get("id_", "/gz", {"Accept-Encoding": "gzip"})
    assert (stored.status, stored.body, stored.header("Content-Encoding")) == (200, GZ_BYTES, "gzip")
    decoded = replay.get("id_", "/gz", {"Accept-Encoding": "identity"})
    assert (decoded.status, decoded.body, decoded.header("Content-Encoding")) == (200, GZ_BODY, None)
    assert decoded.header("X-Archive-Orig-Content-Encoding") == "gzip"


@pytest.mark.parametrize(("path", "body"), [("/", HTML), ("/chunked", CHUNKED_BODY), (LANDED_PATH, LANDED)],
                         ids=["links", "chunked", "redirect-target"])
def test_a_page_replays_byte_for_byte(replay: Replay, path: str, body: bytes) -> None:
    page = replay.get("id_", path)
    assert (page.status, page.body) == (200, body)
    assert page.header("Memento-Datetime")  # a capture, not a page of pywb's own


def test_a_redirect_with_a_raw_utf8_location_replays_as_a_redirect_to_its_target(replay: Replay) -> None:
    moved = replay.get("id_", "/moved")
    # pywb reads the stored head as UTF-8 text and its WSGI server writes header values as latin-1:
    # the Location comes out as the site's text ("/café/ñ"), in latin-1 bytes ("/caf\xe9/\xf1"), which
    # http.client reads back as latin-1.  What the archive holds is checked above: the site's bytes.
    assert (moved.status, moved.header("Location")) == (301, LOCATION.decode())
    assert moved.header("Memento-Datetime")
    # The rewriting mode, as a browser replays the site: a redirect to the target's replay.
    rewritten = replay.get("mp_", "/moved")
    assert (rewritten.status, rewritten.header("Location")) == (301, f"/{COLLECTION}/mp_/{replay.base}{LANDED_PATH}")
    landed = replay.get("id_", LANDED_PATH)
    assert (landed.status, landed.body) == (200, LANDED)


def test_a_404_replays_as_a_404_and_a_page_never_archived_is_not_found(replay: Replay) -> None:
    missing = replay.get("id_", "/missing")
    assert (missing.status, missing.body) == (404, MISSING)
    assert missing.header("Memento-Datetime")  # the site's 404, archived, not pywb's own
    never = replay.get("id_", "/never-crawled")
    assert never.status == 404 and never.header("Memento-Datetime") is None
    assert never.body != MISSING


def _timestamp(record: ArcWarcRecord) -> str:
    """A record's WARC-Date as a replay URL's timestamp, YYYYMMDDhhmmss."""
    return "".join(character for character in header(record, "WARC-Date") or "" if character.isdigit())


def _memento(answer: Answer) -> str:
    """The Memento-Datetime of pywb's answer as a timestamp, YYYYMMDDhhmmss."""
    when = answer.header("Memento-Datetime")
    assert when is not None, answer
    return email.utils.parsedate_to_datetime(when).strftime("%Y%m%d%H%M%S")


def test_an_identical_payload_revisit_replays_as_the_page_it_repeats(replay: Replay, revisited: Revisited) -> None:
    capture, revisit = revisited.record("/b", "response"), revisited.record("/b", "revisit")
    assert header(revisit, "WARC-Profile") == IDENTICAL and _timestamp(revisit) > _timestamp(capture)
    url = revisited.base + "/b"
    for timestamp in (_timestamp(revisit), ""):  # at its time, and as the latest capture
        page = replay.at(timestamp, "id_", url)
        assert (page.status, page.body) == (200, revisited.pages["/b"])
        assert _memento(page) == _timestamp(revisit)  # the revisit, resolved to the capture's payload
    first = replay.at(_timestamp(capture), "id_", url)
    assert (first.status, _memento(first), first.body) == (200, _timestamp(capture), revisited.pages["/b"])


def test_a_server_not_modified_revisit_replays_as_its_304_and_the_capture_stays(replay: Replay,
                                                                               revisited: Revisited) -> None:
    capture, revisit = revisited.record("/a", "response"), revisited.record("/a", "revisit")
    assert header(revisit, "WARC-Profile") == NOT_MODIFIED
    url = revisited.base + "/a"
    not_modified = replay.at(_timestamp(revisit), "id_", url)
    assert (not_modified.status, not_modified.body, _memento(not_modified)) == (304, b"", _timestamp(revisit))
    first = replay.at(_timestamp(capture), "id_", url)
    assert (first.status, _memento(first), first.body) == (200, _timestamp(capture), revisited.pages["/a"])

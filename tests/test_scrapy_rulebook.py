"""Scrapy's own tests of its HTTP/1.1 download handler, and the fetcher defects they found.

Scrapy's ``tests/test_downloader_handler_twisted_http11.py``, with its base
classes and mock servers, comes from the sdist of the Scrapy release
installed (downloaded from PyPI into a temporary directory: Scrapy's code
stays Scrapy's). It runs twice, at the same time, in subprocesses with the
plugin of ``scrapy_suite.py``: once with Scrapy's own handler, the yardstick,
once with NIOFetcherDownloadHandler swapped in. Every test the first run
passes must pass in the second, apart from the table of docs/scrapy.md
("Scrapy's own tests"), the one place that lists the differences and why;
and every row of that table must still name a test that differs.

The fetcher defects the suite showed have tests of their own, through
NIOFetcher on a raw socket server: the request head it records, the body
cut short it sends. Scrapy's TLS settings have theirs here too, as the
FetcherConfig they become (tests/test_tls.py has the fetcher honour it).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from conftest import MakeServer
from rawserver import http_response, respond_raw
from scrapy_suite import matches, suite_id
from test_http_behaviour import fetch, routes, values

import niofetcher
from niofetcher import ErrorKind, URLBean

TESTS = Path(__file__).resolve().parent
DOC = TESTS.parent / "docs" / "scrapy.md"
NIOFETCHER_ROOT = Path(niofetcher.__file__).resolve().parent.parent
TABLE_MARK = "<!-- scrapy-suite-differences"
SCRAPY_TESTS = "tests/test_downloader_handler_twisted_http11.py"
RUN_SECONDS = 300  # each run (the two run at once); about 35 s on a quiet 2-core machine
PER_TEST_SECONDS = 60
DOWNLOAD_SECONDS = 180
# The first test to use suite_runs pays for the download and both runs (pytest-timeout counts setup).
SUITE_TIMEOUT = pytest.mark.timeout(DOWNLOAD_SECONDS + RUN_SECONDS + 60)


@dataclass(frozen=True)
class Difference:
    """A row of docs/scrapy.md's table: Scrapy tests whose outcome differs with niofetcher, and why."""

    patterns: tuple[str, ...]
    reason: str
    run: bool  # False: deselected (the reason says why running it would only wait)

    def names(self, test: str) -> bool:
        return any(matches(pattern, test) for pattern in self.patterns)


def documented_differences() -> list[Difference]:
    """The rows of the table that follows TABLE_MARK in docs/scrapy.md."""
    text = DOC.read_text(encoding="utf-8")
    lines = text[text.index(TABLE_MARK):].splitlines()[1:]
    rows: list[Difference] = []
    for line in lines[2:]:  # past the header and its rule
        if not line.startswith("|"):
            break
        tests, reason, run = (cell.strip() for cell in line.strip("|").split(" | "))
        rows.append(Difference(tuple(re.findall(r"`([^`]+)`", tests)), reason, run == "yes"))
    return rows


def test_the_documented_differences_are_well_formed() -> None:
    rows = documented_differences()
    assert rows
    for row in rows:
        assert row.patterns and all("::" in p or p.startswith("test_") for p in row.patterns), row
        assert len(row.reason) > 40, row  # a reason, not a word


# -- the two runs ---------------------------------------------------------------


@pytest.fixture(scope="module")
def scrapy_sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unpacked sdist of the installed Scrapy release, or a skip saying why there is none."""
    pytest.importorskip("scrapy", reason="Scrapy is not installed: pip install -e '.[test]'")
    if find_spec("pytest_twisted") is None:
        pytest.skip("Scrapy's tests need pytest-twisted: pip install -e '.[test]'")
    release = version("scrapy")
    where = tmp_path_factory.mktemp("scrapy-sdist")
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             f"scrapy=={release}", "-d", str(where)],
            check=True, capture_output=True, text=True, timeout=DOWNLOAD_SECONDS,
        )
    except subprocess.CalledProcessError as exc:  # pip says why on its stderr: no network, no such release
        pytest.skip(f"could not download Scrapy {release}'s sdist from PyPI: {exc.stderr.strip()[-300:]}")
    except subprocess.TimeoutExpired:
        pytest.skip(f"could not download Scrapy {release}'s sdist from PyPI in {DOWNLOAD_SECONDS} s")
    (archive,) = where.glob("scrapy-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    return where / f"scrapy-{release}"


def _start_run(sdist: Path, name: str, extra: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
    """Start pytest on Scrapy's handler tests in ``sdist``; its junit XML goes to the returned path."""
    junit = sdist.parent / f"{name}.xml"
    # Scrapy's run is a pytest session of its own: not a worker of ours (xdist's PYTEST_XDIST_* would
    # tell its plugins they run under xdist), nor given our options.
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS" and not k.startswith("PYTEST_XDIST_")}
    # The niofetcher this run imports, installed or not: the child's cwd is the sdist, not this checkout.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), str(NIOFETCHER_ROOT), env.get("PYTHONPATH")]))
    command = [
        sys.executable, "-m", "pytest", SCRAPY_TESTS, "-p", "scrapy_suite", "-p", "no:cacheprovider", "-q",
        "-m", "not requires_internet and not requires_mitmproxy", f"--junitxml={junit}", "-o", "junit_family=xunit1",
        "-o", f"timeout={PER_TEST_SECONDS}",
        # pytest 9.1+ warns (an error under Scrapy's filterwarnings) of Scrapy's session fixtures defined as
        # methods: a note to Scrapy's test authors, not a result of either handler.
        "-W", "ignore::pytest.PytestRemovedIn10Warning", *extra,
    ]
    with (sdist.parent / f"{name}.log").open("wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            command, cwd=sdist, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    return process, junit


def _outcomes(junit: Path) -> dict[str, str]:
    """Each test of a junit XML report by its id (``suite_id``): passed, failed or skipped."""
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        cls = case.get("classname", "").rpartition(".")[2]
        class_name = cls if cls.startswith("Test") else None
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
        outcomes[suite_id(class_name, case.get("name", ""))] = outcome
    return outcomes


@pytest.fixture(scope="module")
def suite_runs(scrapy_sdist: Path) -> dict[str, dict[str, str]]:
    """Scrapy's handler tests with its own handler ("scrapy") and with niofetcher's ("niofetcher")."""
    not_run = [f"--not-run={p}" for row in documented_differences() if not row.run for p in row.patterns]
    runs = {
        "scrapy": _start_run(scrapy_sdist, "scrapy", []),
        "niofetcher": _start_run(scrapy_sdist, "niofetcher", ["--niofetcher-handler", *not_run]),
    }
    deadline = time.monotonic() + RUN_SECONDS  # for both: they run at once
    outcomes = {}
    try:
        for name, (process, junit) in runs.items():
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"Scrapy's handler tests with the {name} handler took over {RUN_SECONDS} s")
            log = junit.with_suffix(".log").read_text(errors="replace")
            assert junit.exists(), f"no report from the {name} run:\n{log[-3000:]}"
            outcomes[name] = _outcomes(junit)
    finally:
        for process, _ in runs.values():
            # Its session, whether pytest is still running or not: the mock servers it started may be.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return outcomes


@SUITE_TIMEOUT
def test_scrapys_own_handler_passes_its_suite_with_its_servers_on_loopback(
    suite_runs: dict[str, dict[str, str]],
) -> None:
    """The yardstick: every test runs and passes or skips (Scrapy's mock servers, which the plugin
    checks on starting, listen on loopback only: a check that fails is an error here)."""
    scrapy = suite_runs["scrapy"]
    failed = sorted(test for test, outcome in scrapy.items() if outcome == "failed")
    assert not failed
    assert sum(outcome == "passed" for outcome in scrapy.values()) > 200


@SUITE_TIMEOUT
def test_niofetcher_passes_what_scrapys_handler_passes_apart_from_the_documented_differences(
    suite_runs: dict[str, dict[str, str]],
) -> None:
    differences = documented_differences()
    ours = suite_runs["niofetcher"]
    undocumented = [
        f"{test}: {ours.get(test, 'not run')}"
        for test, outcome in suite_runs["scrapy"].items()
        if outcome == "passed" and ours.get(test) != "passed" and not any(row.names(test) for row in differences)
    ]
    assert not undocumented


@SUITE_TIMEOUT
def test_every_documented_difference_still_differs(suite_runs: dict[str, dict[str, str]]) -> None:
    """A row whose tests all pass now is out of date: docs/scrapy.md must say so no longer."""
    scrapy, ours = suite_runs["scrapy"], suite_runs["niofetcher"]
    unnamed, passing = [], []
    for row in documented_differences():
        named = [test for test in scrapy if row.names(test)]
        unnamed += [] if named else [row.patterns]
        passing += [p for p in row.patterns if all(ours.get(t) == "passed" for t in named if matches(p, t))]
    assert not unnamed, "rows of docs/scrapy.md that name no test of Scrapy's suite"
    assert not passing, "these pass with niofetcher now: take them out of docs/scrapy.md"


@SUITE_TIMEOUT
def test_the_figures_in_the_docs_are_the_runs(suite_runs: dict[str, dict[str, str]]) -> None:
    scrapy, ours = suite_runs["scrapy"], suite_runs["niofetcher"]
    passed = sum(outcome == "passed" for outcome in scrapy.values())
    both = sum(outcome == "passed" and ours.get(test) == "passed" for test, outcome in scrapy.items())
    release = version("scrapy")
    sentence = f"Scrapy {release}: {both} of the {passed} its own handler passes, the {passed - both} below apart."
    assert sentence in " ".join(DOC.read_text(encoding="utf-8").split()), f"docs/scrapy.md should say: {sentence}"


# -- the fetcher defects the suite found ------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_an_empty_body_is_announced_where_the_method_gives_content_a_meaning(
    no_leaks: Any, raw_server: MakeServer, method: str
) -> None:
    """RFC 9110 8.6: a user agent SHOULD send Content-Length for such a method, even 0 (some servers
    answer 411 without one; Scrapy's own handler sends it)."""
    app = routes({"/x": http_response(200, b"ok")})
    srv = raw_server(app, max_seconds=15)
    (result,) = fetch(URLBean(srv.url("/x"), method=method))
    assert result.status == 200
    (seen,) = app.seen
    assert values(seen.head, "content-length") == ["0"]
    assert values(seen.head, "transfer-encoding") == []


@pytest.mark.parametrize("method", ["GET", "HEAD", "DELETE", "OPTIONS"])
def test_other_methods_without_a_body_announce_none(no_leaks: Any, raw_server: MakeServer, method: str) -> None:
    app = routes({"/x": http_response(200, b"" if method == "HEAD" else b"ok")})
    srv = raw_server(app, max_seconds=15)
    (result,) = fetch(URLBean(srv.url("/x"), method=method))
    assert result.status == 200
    (seen,) = app.seen
    assert values(seen.head, "content-length") == []


def test_a_length_of_ones_own_is_sent_once(no_leaks: Any, raw_server: MakeServer) -> None:
    app = routes({"/x": http_response(200, b"ok")})
    srv = raw_server(app, max_seconds=15)
    fetch(URLBean(srv.url("/x"), method="POST", headers={"Content-Length": "0"}))
    (seen,) = app.seen
    assert values(seen.head, "content-length") == ["0"]


def test_a_configuration_header_with_an_empty_value_takes_that_default_away(
    no_leaks: Any, raw_server: MakeServer
) -> None:
    """As curl's ``-H 'Accept:'``: what Scrapy's handler does to send only the headers Scrapy asks for."""
    app = routes({"/plain": http_response(200, b"ok"), "/own": http_response(200, b"ok")})
    srv = raw_server(app, max_seconds=15)
    fetch(srv.url("/plain"), URLBean(srv.url("/own"), headers={"Accept": "text/html"}),
          headers={"Accept": "", "User-Agent": "", "X-Crawl": "1"}, max_connections_per_host=1)
    seen = {request.target: request for request in app.seen}
    plain, own = seen["/plain"], seen["/own"]
    assert values(plain.head, "accept") == values(plain.head, "user-agent") == []
    assert values(plain.head, "x-crawl") == ["1"]
    assert values(own.head, "accept") == ["text/html"] and values(own.head, "user-agent") == []


# A body cut short: what Scrapy hands over, flagged "dataloss", under DOWNLOAD_FAIL_ON_DATALOSS = False.
_PAGE = b"".join(b"<p>%d</p>" % (n * 7919 % 100_003) for n in range(3000))  # compresses, but not to nothing
_PACKED = gzip.compress(_PAGE)


@pytest.mark.parametrize(("head", "sent", "delivered"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", b"partial", b"partial"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"6\r\nchunks\r\n3\r\n so\r\n4\r\n fa", b"chunks so fa"),
], ids=["content-length", "chunked"])
def test_a_body_cut_short_comes_with_the_bytes_that_arrived(
    no_leaks: Any, raw_server: MakeServer, head: bytes, sent: bytes, delivered: bytes
) -> None:
    srv = raw_server(respond_raw(head + sent), max_seconds=15)
    (result,) = fetch(srv.url("/cut"))
    assert (result.error, result.status, result.ok) == (ErrorKind.CONNECTION_CLOSED, 200, False)
    assert result.body == delivered


@pytest.mark.parametrize("record", [False, True], ids=["alone", "recorded"])
def test_a_compressed_body_cut_short_comes_decoded_as_far_as_it_came(
    no_leaks: Any, raw_server: MakeServer, record: bool
) -> None:
    """Decoded as a whole body is, whether its exchange is recorded (the bytes as received kept for the
    archive) or not."""
    sent = _PACKED[: len(_PACKED) // 2]
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(_PACKED)
    srv = raw_server(respond_raw(head + sent), max_seconds=15)
    (result,) = fetch(srv.url("/cut"), record_exchanges=record)
    assert result.error is ErrorKind.CONNECTION_CLOSED
    assert result.body and _PAGE.startswith(result.body)
    if record:
        (cut,) = result.exchanges
        assert (cut.error, cut.payload) == (ErrorKind.CONNECTION_CLOSED, sent)


def test_a_body_cut_short_is_held_to_max_body_size_all_the_same(no_leaks: Any, raw_server: MakeServer) -> None:
    srv = raw_server(respond_raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 60), max_seconds=15)
    (result,) = fetch(srv.url("/cut"), max_body_size=50)
    assert (result.error, result.status) == (ErrorKind.TOO_LARGE, 200)
    assert len(result.body) <= 50


# Scrapy's TLS settings, which its suite's TestHttpsTLSVersion and TestHttpsCustomCiphers found ignored:
# what they become (the fetcher honouring the fields is tests/test_tls.py's).


def _tls_config(**settings: Any) -> tuple[str | None, str | None, str | None]:
    scrapy_settings = pytest.importorskip("scrapy.settings", reason="Scrapy is not installed: pip install -e '.[test]'")
    from niofetcher.scrapy import fetcher_config

    config = fetcher_config(scrapy_settings.Settings(settings))
    return config.tls_min_version, config.tls_max_version, config.tls_ciphers


def test_scrapys_tls_settings_become_the_fetchers() -> None:
    assert _tls_config() == (None, None, "DEFAULT")  # Scrapy's default cipher list is OpenSSL's DEFAULT
    assert _tls_config(DOWNLOADER_CLIENT_TLS_CIPHERS=None) == (None, None, None)  # the TLS library's own
    assert _tls_config(DOWNLOAD_TLS_MIN_VERSION="TLSv1.3", DOWNLOADER_CLIENT_TLS_CIPHERS="CAMELLIA256-SHA") == (
        "TLSv1.3", None, "CAMELLIA256-SHA")
    assert _tls_config(DOWNLOAD_TLS_MAX_VERSION="TLSv1.2")[:2] == (None, "TLSv1.2")


def test_the_deprecated_tls_method_pins_its_version_unless_a_limit_is_set() -> None:
    from scrapy.exceptions import ScrapyDeprecationWarning

    with pytest.warns(ScrapyDeprecationWarning, match="DOWNLOADER_CLIENT_TLS_METHOD to a non-default value"):
        assert _tls_config(DOWNLOADER_CLIENT_TLS_METHOD="TLSv1.2")[:2] == ("TLSv1.2", "TLSv1.2")
    with pytest.warns(ScrapyDeprecationWarning):
        assert _tls_config(DOWNLOADER_CLIENT_TLS_METHOD="TLSv1.2", DOWNLOAD_TLS_MAX_VERSION="TLSv1.3")[:2] == (
            None, "TLSv1.3")


@pytest.mark.parametrize(("settings", "message"), [
    ({"DOWNLOAD_TLS_MIN_VERSION": "TLSv9"}, "Unknown DOWNLOAD_TLS_MIN_VERSION value: TLSv9"),
    ({"DOWNLOAD_TLS_MAX_VERSION": "SSLv3"}, "Unknown DOWNLOAD_TLS_MAX_VERSION value: SSLv3"),
    ({"DOWNLOAD_TLS_MIN_VERSION": "TLSv1.3", "DOWNLOAD_TLS_MAX_VERSION": "TLSv1.2"},
     "tls_min_version TLSv1.3 is above tls_max_version TLSv1.2"),
    ({"DOWNLOADER_CLIENT_TLS_CIPHERS": "NO-SUCH-CIPHER"}, "tls_ciphers must be an OpenSSL cipher list"),
], ids=["min", "max", "min-above-max", "ciphers"])
def test_a_tls_setting_scrapy_refuses_is_refused_when_the_crawl_starts(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _tls_config(**settings)


def test_a_tls_method_that_names_no_version_is_refused() -> None:
    """Scrapy's own handler raises a KeyError for it; the handler says what is wrong, as for the limits."""
    from scrapy.exceptions import ScrapyDeprecationWarning

    with pytest.warns(ScrapyDeprecationWarning), pytest.raises(
        ValueError, match="Unknown DOWNLOADER_CLIENT_TLS_METHOD value: bad"
    ):
        _tls_config(DOWNLOADER_CLIENT_TLS_METHOD="bad")

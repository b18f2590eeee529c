"""``crawl --warc`` with a revisit policy (issue 27, item 3): an unchanged page is a WARC/1.1 revisit record.

Real crawls by the command line of :class:`~test_revisits.KeptSite` on 127.0.0.1, which answers a
conditional GET that matches with a 304, and serves ``/b`` without validators (only its digest
tells it did not change).  Runs start a new second each (WARC-Date is to the second), so that a
revisit record that pointed at the visit before it rather than at the capture would show it.

- the first run writes a response record per page; each later run that finds a page unchanged
  writes a revisit record instead -- server-not-modified for a 304, identical-payload-digest
  (the response's payload digest) for the same body -- with its request record, and every
  revisit, the third run's too, refers to the first capture; warcio reads and checks each record;
- a page that changed is a response record again, and the revisits after refer to that one;
- a file of schema 9 is upgraded and its pages' revisits name no capture date (none was kept)
  until they are captured again; a PostgreSQL crawl without the column gets it when opened.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_crawl import crawl as cli_crawl
from test_cli_crawl import niofetcher as cli
from test_revisits import KeptSite, links, site_of
from test_warc import records, warcio
from warcio.recordloader import ArcWarcRecord

from niofetcher.crawl.frontier import Frontier, schema

pytest_plugins = ["pg_cluster"]
pytestmark = pytest.mark.timeout(90)

REVISIT = ("--revisit", "0.05s", "--min-revisit", "0.01s", "--max-revisit", "0.1s")
NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"


def next_second() -> None:
    """Wait until the wall clock is in a second after this one, and past every interval of REVISIT."""
    time.sleep(1.0 - time.time() % 1.0 + 0.02)


def header(record: ArcWarcRecord, name: str) -> str | None:
    value = record.rec_headers.get_header(name)
    return None if value is None else str(value)


class Archive:
    """The records of a WARC file that warcio read and checked, by URL path."""

    def __init__(self, warc: Path, base: str) -> None:
        checked = warcio("check", "-v", str(warc))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        self.read = records(warc)  # every record's digests checked on the way
        revisits = sum(record.rec_type == "revisit" for record, _ in self.read)
        # warcio checks no revisit record's digests: what a revisit's payload digest names is elsewhere.
        assert checked.stdout.count("digest present but not checked (revisit)") == revisits
        assert checked.stdout.count("digest pass") == len(self.read) - revisits
        self.base = base.rstrip("/")
        self.by_id = {header(record, "WARC-Record-ID"): record for record, _ in self.read}

    def of(self, path: str, kind: str) -> list[tuple[ArcWarcRecord, bytes]]:
        """The records of one kind of ``path``, in the file's order."""
        return [(record, payload) for record, payload in self.read
                if record.rec_type == kind and header(record, "WARC-Target-URI") == self.base + path]

    def request_of(self, record: ArcWarcRecord) -> ArcWarcRecord:
        """The request record that points at ``record`` (WARC-Concurrent-To)."""
        (request,) = [other for other, _ in self.read if other.rec_type == "request"
                      and header(other, "WARC-Concurrent-To") == header(record, "WARC-Record-ID")]
        return request


def assert_revisit(archive: Archive, revisit: ArcWarcRecord, payload: bytes, capture: ArcWarcRecord,
                   profile: str) -> None:
    """``revisit`` is a WARC/1.1 revisit record of ``profile`` that refers to ``capture``, a response
    record, with the response's head alone as its block, and its request record beside it."""
    assert revisit.rec_headers.protocol == "WARC/1.1" and capture.rec_headers.protocol == "WARC/1.0"
    assert header(revisit, "WARC-Profile") == profile
    assert header(revisit, "WARC-Refers-To-Target-URI") == header(capture, "WARC-Target-URI")
    assert header(revisit, "WARC-Refers-To-Date") == header(capture, "WARC-Date")
    assert header(revisit, "WARC-Refers-To") == header(capture, "WARC-Record-ID")
    assert header(revisit, "WARC-Date") != header(capture, "WARC-Date")  # a later run: the capture, not itself
    assert payload == b""  # the head only
    status = revisit.http_headers.get_statuscode()
    if profile == NOT_MODIFIED:
        assert status == "304" and header(revisit, "WARC-Payload-Digest") is None
    else:
        assert status == "200"
        assert header(revisit, "WARC-Payload-Digest") == header(capture, "WARC-Payload-Digest")
    request = archive.request_of(revisit)
    assert request.rec_headers.get_header("WARC-Target-URI") == revisit.rec_headers.get_header("WARC-Target-URI")


@contextlib.contextmanager
def kept_site() -> Iterator[KeptSite]:
    """/ links to /a and /b; /b has no validators."""
    site = site_of()
    site.plain = {"/b"}
    with site.running():
        yield site


def run(site: KeptSite, db: Path, warc: Path, *options: str) -> None:
    done = cli_crawl(site.base_url, db, *REVISIT, "--warc", str(warc), *options)
    assert done.returncode == 0, done.stderr


def test_unchanged_revisits_are_revisit_records_of_the_first_capture(tmp_path: Path) -> None:
    db, warc = tmp_path / "crawl.db", tmp_path / "crawl.warc.gz"
    with kept_site() as site:
        for _ in range(3):
            run(site, db, warc)
            next_second()
        assert sorted((r.path, r.status) for r in site.served()) == [  # each run visited each page once
            ("/", 200), ("/", 304), ("/", 304), ("/a", 200), ("/a", 304), ("/a", 304), ("/b", 200), ("/b", 200),
            ("/b", 200)]
    archive = Archive(warc, site.base_url)
    for path, profile in (("/", NOT_MODIFIED), ("/a", NOT_MODIFIED), ("/b", IDENTICAL)):
        ((capture, body),) = archive.of(path, "response")  # the first visit's, and only that one
        assert body == site.pages[path].encode()
        revisits = archive.of(path, "revisit")
        assert len(revisits) == 2  # one for each unchanged visit, the third run's too
        for revisit, payload in revisits:
            assert_revisit(archive, revisit, payload, capture, profile)
    # The 304s answered conditional GETs; the revisit records' requests say so.
    (revisit, _), _ = archive.of("/a", "revisit")
    assert archive.request_of(revisit).http_headers.get_header("If-None-Match") == site.etag("/a")


def test_a_changed_page_is_a_capture_again_and_later_revisits_refer_to_it(tmp_path: Path) -> None:
    db, warc = tmp_path / "crawl.db", tmp_path / "crawl.warc"
    with kept_site() as site:
        run(site, db, warc)
        next_second()
        site.change("/a", links("/", "/b"))  # its ETag changes with it
        site.change("/b", links("/a"))  # a new body, still without validators
        run(site, db, warc)
        next_second()
        run(site, db, warc)
    archive = Archive(warc, site.base_url)
    for path, profile in (("/a", NOT_MODIFIED), ("/b", IDENTICAL)):
        (_, first), (second, body) = archive.of(path, "response")
        assert first != body == site.pages[path].encode()
        ((revisit, payload),) = archive.of(path, "revisit")
        assert_revisit(archive, revisit, payload, second, profile)  # the capture of the change
    ((capture, _),) = archive.of("/", "response")
    for revisit, payload in archive.of("/", "revisit"):
        assert_revisit(archive, revisit, payload, capture, NOT_MODIFIED)


def test_a_schema_9_file_is_upgraded_and_a_page_captured_before_names_no_date(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crawl of an older file: the seed, visited under schema 9 (its ETag kept, no capture time),
    gets a 304 and a revisit record that names its URL but no date it cannot know; /a and /b,
    waiting there, are captured in this run, and their revisits in the next one refer to those
    captures."""
    db, warc = tmp_path / "old.db", tmp_path / "crawl.warc"
    with kept_site() as site:
        with monkeypatch.context() as patch:
            patch.setattr(schema, "SCHEMA_VERSION", 9)
            with Frontier(db) as frontier:
                frontier.add([site.base_url + path for path in ("", "a", "b")])
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert "captured_at" not in {row[1] for row in conn.execute("PRAGMA table_info(urls)")}
            conn.execute("UPDATE urls SET state = 'done', status = 200, fetched_at = 1.0, etag = ?, visits = 1,"
                         " next_due = 2.0 WHERE url = ?", (site.etag("/"), site.base_url))
            conn.execute("UPDATE state_counts SET n = CASE state WHEN 'done' THEN 1 WHEN 'waiting' THEN 2 ELSE 0 END")
            conn.commit()
        run(site, db, warc)
        next_second()
        run(site, db, warc)
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("11",)
    archive = Archive(warc, site.base_url)
    assert archive.of("/", "response") == []
    for revisit, _ in archive.of("/", "revisit"):
        assert header(revisit, "WARC-Profile") == NOT_MODIFIED
        assert header(revisit, "WARC-Refers-To-Target-URI") == site.base_url
        assert header(revisit, "WARC-Refers-To-Date") is None and header(revisit, "WARC-Refers-To") is None
    for path, profile in (("/a", NOT_MODIFIED), ("/b", IDENTICAL)):
        ((capture, _),) = archive.of(path, "response")
        ((revisit, payload),) = archive.of(path, "revisit")
        assert_revisit(archive, revisit, payload, capture, profile)


def test_a_postgresql_crawl_without_the_column_gets_it_and_refers_to_its_captures(
        postgres_dsn: str, tmp_path: Path) -> None:
    import psycopg  # here: installed with the postgres extra, which the fixture skips without

    from niofetcher.crawl.frontier.postgres import PostgresFrontier

    crawl = f"warc_revisit_{int(time.time() * 1000)}"
    PostgresFrontier(postgres_dsn, crawl).close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # a crawl as made before the column
        conn.execute(f'ALTER TABLE "{crawl}".urls DROP COLUMN captured_at')
    warc = tmp_path / "crawl.warc"
    options = ("--frontier", postgres_dsn, "--crawl", crawl)
    with kept_site() as site:
        for _ in range(2):
            done = cli("crawl", site.base_url, *options, *REVISIT, "--warc", str(warc), "--progress", "none")
            assert done.returncode == 0, done.stderr
            next_second()
    archive = Archive(warc, site.base_url)
    for path, profile in (("/", NOT_MODIFIED), ("/a", NOT_MODIFIED), ("/b", IDENTICAL)):
        ((capture, _),) = archive.of(path, "response")
        ((revisit, payload),) = archive.of(path, "revisit")
        assert_revisit(archive, revisit, payload, capture, profile)

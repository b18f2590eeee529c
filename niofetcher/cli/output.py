"""The crawl command's files: JSONL (``--out``) and WARC (``--warc``), each page's records in them exactly once."""

from __future__ import annotations

import io
import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType

from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from .._version import __version__
from ..crawl import CrawledPage
from ..models import Exchange, FetchResult
from ..urls import parse_target
from .records import page_record

#: Left out of a rebuilt response head, whose body is the decoded one (see _as_delivered).
_NOT_WITH_DECODED_BODY = frozenset(("content-encoding", "transfer-encoding", "content-length"))


class _WireHead(StatusAndHeaders):  # type: ignore[misc]  # warcio has no type hints
    """An HTTP head written back as the bytes that went over the wire (latin-1), where warcio's
    own would percent-encode every value that is not ASCII (a UTF-8 Location, a filename)."""

    def compute_headers_buffer(self, header_filter: object = None) -> None:
        self.headers_buff = self.to_str(header_filter).encode("latin-1") + b"\r\n"


class ResumeError(Exception):
    """Raised by PageWriter.restore() when an output file is not what the frontier recorded of it."""


class PageWriter:
    """The crawl's JSONL (``--out``) and WARC (``--warc``) files, each page's records in them exactly once.

    A CrawlOutput: the delivery threads prepare() each page's records in
    memory; the coordinator commit()s a batch -- writes its records, fsyncs --
    and keeps the end offset of each file in the frontier in the transaction
    that records the batch's outcomes; before a resumed crawl fetches
    anything, restore() cuts each file back to its recorded offset, dropping
    the records of pages whose outcome the last run never recorded (it was
    killed, or its disk filled up, in between).  So every URL the frontier
    calls done has one record, and none has two, however the last run ended.
    A file with no recorded offset (a new crawl) is appended to.

    The WARC file starts with a warcinfo record, written with the first batch
    into an empty file (so not again when a crawl appends or resumes; a resume
    cut back to nothing writes it again).  Then each exchange the fetcher
    recorded (``FetcherConfig(record_exchanges=True)``, which a crawl writing a
    WARC needs) is a response record and a request record pointing at it with
    WARC-Concurrent-To: the request as sent, the response as received, its
    Content-Encoding kept.  A complete result without recorded exchanges is
    written as it was delivered (see _as_delivered).  A .gz file gets a gzip
    member per record, as warcio writes it.  Raises OSError when a file cannot
    be opened.
    """

    def __init__(self, out_path: str | None, warc_path: str | None, user_agent: str, *, list_links: bool = False,
                 obey_robots: bool = True, per_worker: bool = False) -> None:
        self._user_agent = user_agent
        # A crawl shared by workers (--frontier) keeps each worker's files' lengths apart, by the
        # machine and the file's absolute path; a crawl of one process keeps "out" and "warc", so
        # that its files can move with its --db.
        self._machine = socket.gethostname() if per_worker else None
        self._list_links = list_links  # --links: each JSONL record lists its page's links
        self._warc_gzip = bool(warc_path and warc_path.endswith(".gz"))
        self._warcinfo = b""
        self._lock = threading.Lock()
        self._prepared: dict[str, tuple[bytes, bytes]] = {}  # URL -> (its JSONL line, its WARC records)
        self._out: _OutputFile | None = None
        self._warc: _OutputFile | None = None
        try:
            if out_path:
                self._out = _OutputFile("--out", out_path)
            if warc_path:
                self._warc = _OutputFile("--warc", warc_path)
                self._warcinfo = self._warcinfo_record(os.path.basename(warc_path), obey_robots)
        except OSError:
            self.close()
            raise

    @property
    def writes(self) -> bool:
        """False when there is no file to write to: then the crawl needs no output at all."""
        return self._out is not None or self._warc is not None

    def _files(self) -> dict[str, _OutputFile]:
        """The open files by their checkpoint key, in the order of a prepared record's parts."""
        files = {key: file for key, file in (("out", self._out), ("warc", self._warc)) if file is not None}
        if self._machine is None:
            return files
        return {f"{key} {self._machine}:{os.path.abspath(file.path)}": file for key, file in files.items()}

    def prepare(self, page: CrawledPage) -> None:
        """A delivery thread: build the page's records; they are written when its batch is committed."""
        line = (json.dumps(page_record(page, self._list_links)) + "\n").encode("utf-8") if self._out is not None else b""
        warc = self._warc_records(page.result) if self._warc is not None else b""
        with self._lock:
            self._prepared[page.url] = (line, warc)

    def commit(self, urls: Sequence[str]) -> dict[str, int]:
        """The coordinator: write the prepared records of ``urls``, in that order, fsync, and return the
        end offset of each file.  When a write fails (a full disk) every file is cut back to where it was,
        so that it holds no record of a page whose outcome is not recorded, and the OSError is raised."""
        with self._lock:
            records = [self._prepared.pop(url) for url in urls if url in self._prepared]
        files = (self._out, self._warc)
        written: list[tuple[_OutputFile, int]] = []  # and where each stood before this batch
        try:
            for part, file in enumerate(files):
                data = b"".join(record[part] for record in records)
                if file is not None and data:
                    if file is self._warc and file.end == 0:
                        data = self._warcinfo + data  # a new (or emptied) WARC file starts with it
                    written.append((file, file.end))
                    file.append(data)
        except OSError:
            # Back to before the batch, the files that took it whole too: its outcomes will not be
            # recorded, so a record of it in one file would be a second one after the resume.
            for file, start in written:
                file.cut_back(start)
            raise
        return {key: file.end for key, file in self._files().items()}

    def discard(self, urls: Iterable[str]) -> None:
        """Forget the prepared records of ``urls``: their outcomes are another worker's to record."""
        with self._lock:
            for url in urls:
                self._prepared.pop(url, None)

    def restore(self, offsets: Mapping[str, int]) -> None:
        """Before the crawl starts: cut each file back to the offset the frontier recorded for it.
        Raises ResumeError when a file is shorter than that (or missing): it is not this crawl's file."""
        for key, file in self._files().items():
            offset = offsets.get(key)
            if offset is not None:
                file.truncate(offset)

    def _warcinfo_record(self, filename: str, obey_robots: bool) -> bytes:
        """The warcinfo record that opens the file: the software and the settings a reader asks about."""
        buffer = io.BytesIO()
        writer = WARCWriter(buffer, gzip=self._warc_gzip)
        writer.write_record(writer.create_warcinfo_record(filename, {
            "software": f"niofetcher/{__version__}",
            "format": "WARC File Format 1.0",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.0/",
            "http-header-user-agent": self._user_agent,
            "robots": "obey" if obey_robots else "ignore",  # Heritrix's words for robots.txt honoured or not
        }))
        return buffer.getvalue()

    def _warc_records(self, result: FetchResult) -> bytes:
        """The records of every exchange of ``result``, as the bytes that go into the file.  Nothing for
        a response that failed before its end (a body too large, a timeout): the fetcher recorded no
        exchange of it, and what it delivered would be a record of an empty body."""
        exchanges = result.exchanges
        if not exchanges and result.status is not None and result.error is None:
            exchanges = [_as_delivered(result, self._user_agent)]
        buffer = io.BytesIO()
        writer = WARCWriter(buffer, gzip=self._warc_gzip)
        for exchange in exchanges:
            for record in _exchange_records(writer, exchange):
                writer.write_record(record)
        return buffer.getvalue()

    def close(self) -> None:
        """Close the files (what was committed is already on disk); a second call does nothing."""
        for file in (self._out, self._warc):
            if file is not None:
                file.close()
        self._out = self._warc = None

    def __enter__(self) -> PageWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _exchange_records(writer: WARCWriter, exchange: Exchange) -> tuple[ArcWarcRecord, ArcWarcRecord]:
    """The response record of ``exchange`` and its request record, which points at it (WARC-Concurrent-To).

    The payload is stored with its Content-Encoding, as Heritrix and wget store it and replay tools
    (pywb) expect.  Its chunked framing is not, where those two keep the bytes as they came: h11 takes
    it off, and Transfer-Encoding goes from the stored head with it.  So the payload is the entity body
    whatever the framing was -- what WARC 1.1 (6.3.2) means by the payload, and one content has one
    WARC-Payload-Digest whether it came chunked or not -- and the record is one that pywb and warcio
    read as it is: they de-chunk a payload only when the stored head says Transfer-Encoding: chunked.
    """
    response_head = _WireHead(
        f"{exchange.status} {exchange.reason}".strip(),
        [(k, v) for k, v in exchange.response_headers if k.lower() != "transfer-encoding"],
        protocol=f"HTTP/{exchange.http_version}",
    )
    # Lengths given: without them warcio copies each payload into a temporary file it never closes.
    response = writer.create_warc_record(
        exchange.url, "response", payload=io.BytesIO(exchange.payload), length=len(exchange.payload),
        http_headers=response_head,
        warc_headers_dict={"WARC-Type": "response", "WARC-Date": _warc_date(exchange.received_at)},
    )
    request_head = _WireHead(f"{exchange.method} {exchange.target} HTTP/1.1", exchange.request_headers,
                                    is_http_request=True)
    request = writer.create_warc_record(
        exchange.url, "request", payload=io.BytesIO(exchange.request_body), length=len(exchange.request_body),
        http_headers=request_head, warc_headers_dict={
            "WARC-Type": "request",
            "WARC-Date": _warc_date(exchange.sent_at),
            "WARC-Concurrent-To": response.rec_headers.get_header("WARC-Record-ID"),
        },
    )
    return response, request


def _as_delivered(result: FetchResult, user_agent: str) -> Exchange:
    """The final hop of a result whose exchanges the fetcher did not record, rebuilt from what it delivered:
    the decoded body, so its head has no Content-Encoding or Transfer-Encoding and the decoded length as
    Content-Length, and a request of Host and User-Agent, all that is known of it."""
    target = parse_target(result.final_url)
    headers = [(k, v) for k, v in result.headers if k.lower() not in _NOT_WITH_DECODED_BODY]
    headers.append(("Content-Length", str(len(result.body))))
    return Exchange(
        url=result.final_url, method=result.bean.method, target=target.path,
        request_headers=[("Host", target.host_header), ("User-Agent", user_agent)], request_body=b"",
        http_version="1.1", status=result.status or 0, reason=result.reason, response_headers=headers,
        payload=result.body, sent_at=result.fetched_at - result.elapsed, received_at=result.fetched_at,
    )


def _warc_date(when: float) -> str:
    """A WARC/1.0 date: UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


class _OutputFile:
    """One output file, appended to without a buffer of its own: what is not committed is not in it.

    ``end`` is its committed length.  Every OSError names the file as the user gave it (the option and
    the path), since an error of a write or an fsync names none.
    """

    def __init__(self, option: str, path: str) -> None:
        self.option = option
        self.path = path
        self.existed = os.path.exists(path)
        self._handle = open(path, "ab", buffering=0)  # noqa: SIM115 - open for the crawl's life, closed by close()
        self.end = os.fstat(self._handle.fileno()).st_size
        self._unusable: OSError | None = None  # set when a failed batch could not be cut away

    def append(self, data: bytes) -> None:
        """Write all of ``data`` at the end and fsync; ``end`` moves only once it is on disk."""
        if self._unusable is not None:
            raise self._unusable
        try:
            fd = self._handle.fileno()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]  # a write may take only a part
            os.fsync(fd)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, self.path) from None
        self.end += len(data)

    def cut_back(self, offset: int) -> None:
        """After a failed batch: drop what was written of it.  Should even that fail, the file takes no
        more records: appended after the leftovers, they would sit where no offset says."""
        try:
            os.ftruncate(self._handle.fileno(), offset)
        except OSError as exc:
            self._unusable = OSError(exc.errno, exc.strerror, self.path)
        self.end = offset

    def truncate(self, offset: int) -> None:
        """Before a resume: cut the file back to ``offset``; ResumeError when it is shorter than that."""
        size = os.fstat(self._handle.fileno()).st_size
        if offset > size:
            if not self.existed:
                os.unlink(self.path)  # created by this run, which does not start after all
            state = "is missing" if not self.existed else f"has {size} bytes"
            raise ResumeError(f"cannot resume: {self.option} {self.path} {state}, but this crawl's --db "
                              f"recorded {offset} bytes written to it (moved, replaced or truncated?)")
        if offset < size:
            try:
                os.ftruncate(self._handle.fileno(), offset)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, self.path) from None
        self.end = offset

    def close(self) -> None:
        self._handle.close()


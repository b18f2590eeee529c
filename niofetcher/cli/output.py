"""The crawl command's files: JSONL (``--out``) and WARC (``--warc``), each page's records in them exactly once."""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from ..crawl import CrawledPage
from ..urls import parse_target
from .records import page_record

_NOT_IN_WARC = frozenset(("content-encoding", "transfer-encoding", "content-length"))


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

    WARC response records hold the body as the fetcher delivered it, decoded:
    Content-Encoding and Transfer-Encoding are left out of the stored head and
    Content-Length is the decoded length, so the record stays self-consistent.
    A .gz file gets a gzip member per record, as warcio writes it.
    Raises OSError when a file cannot be opened.
    """

    def __init__(self, out_path: str | None, warc_path: str | None, user_agent: str, list_links: bool = False) -> None:
        self._user_agent = user_agent
        self._list_links = list_links  # --links: each JSONL record lists its page's links
        self._warc_gzip = bool(warc_path and warc_path.endswith(".gz"))
        self._lock = threading.Lock()
        self._prepared: dict[str, tuple[bytes, bytes]] = {}  # URL -> (its JSONL line, its WARC records)
        self._out: _OutputFile | None = None
        self._warc: _OutputFile | None = None
        try:
            if out_path:
                self._out = _OutputFile("--out", out_path)
            if warc_path:
                self._warc = _OutputFile("--warc", warc_path)
        except OSError:
            self.close()
            raise

    @property
    def writes(self) -> bool:
        """False when there is no file to write to: then the crawl needs no output at all."""
        return self._out is not None or self._warc is not None

    def _files(self) -> dict[str, _OutputFile]:
        """The open files by their checkpoint key, in the order of a prepared record's parts."""
        return {key: file for key, file in (("out", self._out), ("warc", self._warc)) if file is not None}

    def prepare(self, page: CrawledPage) -> None:
        """A delivery thread: build the page's records; they are written when its batch is committed."""
        line = (json.dumps(page_record(page, self._list_links)) + "\n").encode("utf-8") if self._out is not None else b""
        warc = self._warc_records(page) if self._warc is not None and page.result.status is not None else b""
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
                    written.append((file, file.end))
                    file.append(data)
        except OSError:
            # Back to before the batch, the files that took it whole too: its outcomes will not be
            # recorded, so a record of it in one file would be a second one after the resume.
            for file, start in written:
                file.cut_back(start)
            raise
        return {key: file.end for key, file in self._files().items()}

    def restore(self, offsets: Mapping[str, int]) -> None:
        """Before the crawl starts: cut each file back to the offset the frontier recorded for it.
        Raises ResumeError when a file is shorter than that (or missing): it is not this crawl's file."""
        for key, file in self._files().items():
            offset = offsets.get(key)
            if offset is not None:
                file.truncate(offset)

    def _warc_records(self, page: CrawledPage) -> bytes:
        """The request and response records of ``page``, as the bytes that go into the file."""
        result = page.result
        target = parse_target(result.final_url)
        request_head = StatusAndHeaders(
            f"{result.bean.method} {target.path} HTTP/1.1",
            [("Host", target.host_header), ("User-Agent", self._user_agent)],
            is_http_request=True,
        )
        headers = [(k, v) for k, v in result.headers if k.lower() not in _NOT_IN_WARC]
        headers.append(("Content-Length", str(len(result.body))))
        response_head = StatusAndHeaders(f"{result.status} {result.reason}".strip(), headers, protocol="HTTP/1.1")
        buffer = io.BytesIO()
        writer = WARCWriter(buffer, gzip=self._warc_gzip)
        # Lengths given: without them warcio copies each payload into a temporary file it never closes.
        request = writer.create_warc_record(result.final_url, "request", payload=io.BytesIO(b""), length=0,
                                            http_headers=request_head)
        response = writer.create_warc_record(result.final_url, "response", payload=io.BytesIO(result.body),
                                             length=len(result.body), http_headers=response_head)
        writer.write_request_response_pair(request, response)
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


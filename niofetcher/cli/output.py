"""The commands' output files: ``--out`` (JSONL) and ``--warc`` of ``crawl`` and ``fetch``.

A crawl's records are in its files exactly once (PageWriter); ``fetch``
appends each result's (ResultWriter).  Either may be ``-`` (standard output)
or any other file that is not a regular one -- a pipe, a FIFO, a terminal --:
a *stream*, written as it comes and never cut back (see _OutputFile).  Before
anything is opened, check_distinct_files() refuses two options naming one
file.

``fetch`` imports this module too, so nothing here loads the crawler, nor
warcio unless a WARC file is written (tests/test_layers.py).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from .errors import UsageError
from .records import page_record, record

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's own from Python 3.11

    from ..crawl import CrawledPage
    from ..crawl.parse import PageLinks
    from ..models import FetchResult
    from .warc import WarcRecords

#: What ``--out -`` (or ``--warc -``) names: standard output.
STDOUT = "-"
#: The files SQLite keeps beside a database (its write-ahead log, its shared memory, its rollback journal).
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def check_distinct_files(out: str | None, warc: str | None, db: str | None = None) -> None:
    """Raise UsageError when ``--out``, ``--warc`` and the SQLite ``--db`` (with the files SQLite keeps
    beside it) name one file between them: each would overwrite, cut back or corrupt the other.

    Done before anything is opened, so that the refusal touches nothing.  Two names are one file when
    they reach the same inode -- through ``./``, ``..``, a symlink or a hard link -- or, for a file
    not there yet, resolve to the same path; ``-`` is whatever standard output is.
    """
    named = [(f"--out {out}", out), (f"--warc {warc}", warc)]
    if db is not None:
        named.append((f"--db {db}", db))
        named += [(f"--db {db} (its SQLite file {db}{suffix})", f"{db}{suffix}") for suffix in SQLITE_SIDE_FILES]
    seen: dict[tuple[object, ...], str] = {}
    for option, path in named:
        if path is None:
            continue
        identity = _identity(path)
        if identity in seen:
            raise UsageError(f"{seen[identity]} and {option} are the same file: give each its own")
        seen[identity] = option


def writes_to_stdout(path: str | None) -> bool:
    """Whether ``path`` (an --out or --warc) is standard output, by name (``-``, ``/dev/stdout``) or as
    the file it was redirected to: then the command's own lines go to standard error instead."""
    return path is not None and (path == STDOUT or _identity(path) == _identity(STDOUT))


def _identity(path: str) -> tuple[object, ...]:
    """What makes two names one file: the device and inode of a file that is there, else its resolved path."""
    try:
        # Standard output by its descriptor: "-" names no file, and "/dev/stdout" is another name of it.
        status = os.fstat(1) if path == STDOUT else os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path)) if path != STDOUT else ("stdout",)
    return ("inode", status.st_dev, status.st_ino)


def open_error(exc: OSError, out: str | None) -> UsageError:
    """The one line for an ``--out`` or ``--warc`` file (``exc.filename``) that cannot be opened."""
    option = "--out" if exc.filename == out else "--warc"
    return UsageError(f"cannot write {option} {exc.filename}: {exc.strerror or exc}")


class ResumeError(Exception):
    """Raised by PageWriter.restore() when an output file is not what the frontier recorded of it."""


class _OutputFiles:
    """An ``--out`` and a ``--warc`` file, each optional, open until close().

    Each run (each process: a crawl, a resumed crawl, a ``fetch``) writes its own warcinfo record into
    the WARC file, with its first records, wherever the file ends then; each result's records
    (WarcRecords) point at it.  Raises OSError when a file cannot be opened.  ``sync``: fsync each
    write (see _OutputFile).
    """

    def __init__(self, out_path: str | None, warc_path: str | None, user_agent: str, *, list_links: bool,
                 obey_robots: bool, sync: bool) -> None:
        self._list_links = list_links  # --links: each JSONL record lists its page's links
        self._out: _OutputFile | None = None
        self._warc: _OutputFile | None = None
        self._warc_records: WarcRecords | None = None
        #: Where this run's warcinfo record starts in the WARC file; None until it is written.
        self._warcinfo_at: int | None = None
        try:
            if out_path:
                self._out = _OutputFile("--out", out_path, sync)
            if warc_path:
                from .warc import WarcRecords  # here: warcio only for a command that writes a WARC

                self._warc = _OutputFile("--warc", warc_path, sync)
                self._warc_records = WarcRecords(user_agent, warc_path.endswith(".gz"),
                                                 os.path.basename(warc_path), obey_robots)
        except OSError:
            self.close()
            raise

    def _warc_data(self, result: FetchResult, visit: tuple[bool, float | None] | None = None) -> bytes:
        """The WARC records of a result (WarcRecords.of(): ``visit`` is a crawl's page's
        ``(unchanged, repeats)``), b"" without --warc."""
        return self._warc_records.of(result, visit) if self._warc_records is not None else b""

    def _append(self, file: _OutputFile, data: bytes) -> None:
        records = self._warc_records
        if file is self._warc and records is not None and not self._warcinfo_written(file):
            # In the same write as the records that point at it: a file is only ever cut back to where a
            # write began, so the warcinfo goes with them or stays, never without them.
            self._warcinfo_at = file.end
            data = records.warcinfo + data
        file.append(data)

    def _warcinfo_written(self, file: _OutputFile) -> bool:
        """Whether this run's warcinfo record is in ``file`` now: not yet, or no longer when a failed
        write was cut back to where it began (or before)."""
        return self._warcinfo_at is not None and file.end > self._warcinfo_at

    def close(self) -> None:
        """Close the files (what was written is already in them); a second call does nothing."""
        for file in (self._out, self._warc):
            if file is not None:
                file.close()
        self._out = self._warc = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class PageWriter(_OutputFiles):
    """The crawl's JSONL (``--out``) and WARC (``--warc``) files, each page's records in them exactly once.

    A CrawlOutput: the delivery threads prepare() each page's records in
    memory; the coordinator commit()s a batch -- writes its records, fsyncs --
    and keeps the end offset of each file in the frontier in the transaction
    that records the batch's outcomes; before a resumed crawl fetches
    anything, restore() cuts each file back to its recorded offset, dropping
    the records of pages whose outcome the last run never recorded (it was
    killed, or its disk filled up, in between).  So every URL the frontier
    calls done has one record, and none has two, however the last run ended.
    The fetches of robots.txt are archived in the WARC file alone, as the
    crawl settles them (commit_robots()), under the same checkpoint.
    A file with no recorded offset (a new crawl, or another --out on a rerun)
    is appended to.  Each run's records in the WARC file follow its own
    warcinfo record, written in one write with its first batch, so that the
    resume that cuts a killed run's first batch away cuts its warcinfo too.

    A stream (standard output, a pipe) has no offset: what a run sent down it
    cannot be taken back, so the records of a batch whose outcomes a killed
    run never recorded are sent again by the next run.
    """

    def __init__(self, out_path: str | None, warc_path: str | None, user_agent: str, *, list_links: bool = False,
                 obey_robots: bool = True, per_worker: bool = False) -> None:
        # A crawl shared by workers (--frontier) keeps each worker's files' lengths apart, by the
        # machine and the file's path.  A crawl of one process (--db) leaves the machine out: a
        # container's host name changes at each restart, and its files are the same.
        self._machine = socket.gethostname() if per_worker else None
        self._lock = threading.Lock()
        self._prepared: dict[str, tuple[bytes, bytes]] = {}  # URL -> (its JSONL line, its WARC records)
        super().__init__(out_path, warc_path, user_agent, list_links=list_links, obey_robots=obey_robots, sync=True)

    @property
    def writes(self) -> bool:
        """False when there is no file to write to: then the crawl needs no output at all."""
        return self._out is not None or self._warc is not None

    def _files(self) -> dict[str, _OutputFile]:
        """The files whose length is checkpointed, by their key: "out" or "warc", then where the file is.

        Known by the file's resolved absolute path, never by the option alone: a rerun with another
        --out then starts that file instead of cutting it to the length of the last one, and a symlink
        pointed elsewhere is not taken for the file it used to name.  Keys written by older versions
        ("out", "warc") are never applied: nothing proves that the file named now is the one they
        measured.  A stream has no key: it cannot be cut back."""
        machine = f"{self._machine}:" if self._machine is not None else ""
        return {f"{key} {machine}{file.resolved}": file
                for key, file in (("out", self._out), ("warc", self._warc)) if file is not None and not file.is_stream}

    def prepare(self, page: CrawledPage) -> None:
        """A delivery thread: build the page's records; they are written when its batch is committed.
        A revisit that found the page unchanged is a WARC revisit record of the capture it repeats."""
        line = _json_line(page_record(page, self._list_links)) if self._out is not None else b""
        records = (line, self._warc_data(page.result, (not page.changed, page.repeats)))
        with self._lock:
            self._prepared[page.url] = records

    def commit(self, urls: Sequence[str]) -> dict[str, int]:
        """The coordinator: write the prepared records of ``urls``, in that order, fsync, and return the
        end offset of each file.  When a write fails (a full disk, a reader gone) every file is cut back
        to where it was, so that it holds no record of a page whose outcome is not recorded, and the
        OSError is raised."""
        with self._lock:
            records = [self._prepared.pop(url) for url in urls if url in self._prepared]
        return self._write_batch([(file, b"".join(record[part] for record in records))
                                  for part, file in enumerate((self._out, self._warc)) if file is not None])

    def commit_robots(self, fetches: Sequence[FetchResult]) -> dict[str, int]:
        """The coordinator: write the WARC records of these fetches of robots.txt, fsync, and return the
        end offset of each file, as commit() does; the crawl stores what they said after that.

        Only the WARC archives them: ``--out`` has one line per URL of the frontier, and robots.txt is
        none (what it said is kept in the frontier, not as a page of the crawl)."""
        batch = [(self._warc, b"".join(self._warc_data(fetch) for fetch in fetches))] if self._warc is not None else []
        return self._write_batch(batch)

    def _write_batch(self, batch: list[tuple[_OutputFile, bytes]]) -> dict[str, int]:
        """Append each file's part of one batch and return the end offset of each file.  When a write
        fails every file is cut back to where it stood before the batch, and the OSError is raised."""
        # Streams last: a batch that a file could not take is then sent nowhere, since a stream
        # cannot take anything back.
        batch.sort(key=lambda entry: entry[0].is_stream)
        written: list[tuple[_OutputFile, int]] = []  # and where each stood before this batch
        try:
            for file, data in batch:
                if data:
                    written.append((file, file.end))
                    self._append(file, data)
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


class ResultWriter(_OutputFiles):
    """The files of ``fetch``: each result's JSONL record (``--out``) and WARC records (``--warc``),
    appended as it comes, as ``crawl`` writes them.

    Written through at once (no buffer of its own), not fsynced: a fetch keeps no checkpoint that a
    file must agree with.  Its warcinfo record says robots.txt is ignored: a fetch reads none.
    """

    def __init__(self, out_path: str | None, warc_path: str | None, user_agent: str, *,
                 list_links: bool = False) -> None:
        super().__init__(out_path, warc_path, user_agent, list_links=list_links, obey_robots=False, sync=False)

    def write(self, result: FetchResult, links: PageLinks | None) -> None:
        """Append ``result``'s records; ``links``: its page as parsed (``--links``), else None."""
        if self._out is not None:
            self._append(self._out, _json_line(record(result, links, self._list_links)))
        data = self._warc_data(result)
        if self._warc is not None and data:
            self._append(self._warc, data)


def _json_line(fields: dict[str, object]) -> bytes:
    """A record as its line in a JSONL file."""
    return (json.dumps(fields) + "\n").encode("utf-8")


class _OutputFile:
    """One output file, appended to without a buffer of its own: what is not committed is not in it.

    ``end`` is its committed length.  Every OSError names the file as the user gave it (the option and
    the path), since an error of a write or an fsync names none.

    A *stream* -- standard output (``-``) or any file that is not a regular one: a pipe, a FIFO, a
    terminal, a socket -- is written as it comes: never fsynced (a pipe refuses fsync with EINVAL),
    never cut back, and kept out of the crawl's checkpoint (PageWriter._files), since what went down
    it cannot be taken back.  ``sync``: fsync each write to a regular file, as a crawl does before it
    records the outcomes the records belong to.
    """

    def __init__(self, option: str, path: str, sync: bool = True) -> None:
        self.option = option
        self.path = path
        self.name = "standard output" if path == STDOUT else path  # as errors name it
        # Resolved once, as opened: a symlink pointed elsewhere while the command runs changes nothing.
        self.resolved = os.path.realpath(path)
        self.existed = path == STDOUT or os.path.exists(path)
        if path == STDOUT:
            # Its descriptor, not sys.stdout: records go out as whole writes, past any text buffer.
            self._handle = open(1, "ab", buffering=0, closefd=False)  # noqa: SIM115 - closed by close()
        else:
            self._handle = open(path, "ab", buffering=0)  # noqa: SIM115 - open for the command's life, closed by close()
        status = os.fstat(self._handle.fileno())
        regular = stat.S_ISREG(status.st_mode)
        # "-" is a stream even when the shell sent it to a file: that file has no name here to key it by.
        self.is_stream = path == STDOUT or not regular
        self._sync = sync and not self.is_stream
        self.end = status.st_size if regular else 0
        self._unusable: OSError | None = None  # set when a failed batch could not be cut away

    def append(self, data: bytes) -> None:
        """Write all of ``data`` at the end (fsynced with ``sync``); ``end`` moves only once it is there."""
        if self._unusable is not None:
            raise self._unusable
        try:
            fd = self._handle.fileno()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]  # a write may take only a part
            if self._sync:
                os.fsync(fd)
        except OSError as exc:
            raise type(exc)(exc.errno, exc.strerror, self.name) from None
        self.end += len(data)

    def cut_back(self, offset: int) -> None:
        """After a failed batch: drop what was written of it.  Should even that fail, the file takes no
        more records: appended after the leftovers, they would sit where no offset says.  A stream
        keeps what it was sent."""
        if self.is_stream:
            return
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


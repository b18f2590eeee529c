"""Parse processes that never import the user's ``__main__``: ``ParseProcessPool``.

    with ParseProcessPool(2, preload=("niofetcher.crawl.parsing",)) as pool:
        future = pool.submit(parse_pages, pages, "lxml", scope, False)

Theory of operation
-------------------

Why not ``ProcessPoolExecutor``.  Its "spawn" and "forkserver" children start
by importing the parent's ``__main__`` module, so that functions defined there
can be unpickled.  For a crawl script without an ``if __name__ ==
"__main__":`` guard that means running the crawl again, once per parse process
(issue 9, case 4).  Scrapy users never needed the guard; neither should ours.
"fork" would not import anything, but forking a process whose other threads
hold locks can hang the child.  So each worker here is a fresh interpreter,
``sys.executable -c <bootstrap>``, whose only code is ``_serve()`` below: it
imports niofetcher, the parsers and whatever ``preload`` names, and reads
jobs.  A job is a module-level function and its arguments, pickled; a function
of the user's ``__main__`` cannot be one (the worker has no such module), which
is the price of the guarantee and no loss for the crawler, whose job is
``niofetcher.crawl.parsing.parse_pages``.

The same package.  The child's ``sys.path`` is the parent's, with the
directory holding the parent's ``niofetcher`` put first, and it is set by the
bootstrap before anything is imported (the paths come as arguments), so the
child never picks up another copy of niofetcher from its working directory or
``PYTHONPATH``.

Wire.  Every worker has its own two pipes, its stdin for jobs and its stdout
for replies (the worker moves them to private descriptors at once and points
0 and 1 at /dev/null and stderr, so a job that prints or reads stdin cannot
corrupt the stream).  A frame is an 8-byte big-endian length, then the number
of out-of-band buffers and their lengths, a pickle (protocol 5), and those
buffers.  An argument wrapped in ``pickle.PickleBuffer`` (the crawler wraps the
page bodies) travels out of band: the parent writes it from its owner's memory
in the frame's one ``writev``, instead of copying it into a pickle first (a
fresh multi-megabyte pickle per job cost the parent more in page faults than
the copy itself), and the job gets a read-only ``memoryview`` of it, valid
while the job runs.  Replies are pickled whole, in band.  Each side reads into
one reusable buffer per pipe, as much as has arrived in one call (a frame too
large for it gets a buffer of its own), so a frame is usually one read.  A
worker answers its jobs in order, so a reply carries no job id: the parent
pairs it with the oldest job in flight on that worker.  Nothing is shared
between workers, least of all a lock: the result queue of
``ProcessPoolExecutor`` has one that every worker takes to hand a result back,
and it showed in a profile as half of the hand-back cost.  Both pipes are
grown to 1 MiB (``F_SETPIPE_SZ``, where allowed) so that a job of the
crawler's size (see ``parsing.jobs``) or a typical reply fits at once and the
writer goes on without waiting for the reader.

Threads in the parent.  Jobs wait in one queue in the parent and are given to
the least loaded worker that has fewer than ``_DEPTH`` (2) jobs: one to run,
one already on its way through the pipe, so that a worker never waits for the
parent between two jobs (a busy parent can take milliseconds to get the GIL).
Each worker has a *writer* thread that writes its job frames with plain
blocking writes: a job goes through in one ``writev`` call that releases the
GIL for the whole transfer, where a selector loop would need
the GIL back for each pipe-full.  It must be a thread of its own per worker:
the writer of a busy worker blocks until that worker reads, and the reply of
another worker must not wait behind it.  One *reader* thread reads every
worker's replies (non-blocking, one selector) and completes the futures, so
``Future`` callbacks run there; before it unpickles a reply or runs a
callback it gives the worker its next job.

Failure.  A worker that dies (killed, crashed, or an import that failed) is
seen as EOF on its stdout.  The pool is then broken, once and for good: the
dead worker's jobs in flight and every job still queued fail with
``BrokenProcessPool`` (naming the process and how it ended), ``submit()``
raises it from then on, the other workers finish the jobs they hold (good
work is not thrown away) and are then closed.  An exception raised by a job
comes back as its future's exception, with the worker's traceback as its
``__cause__``; one that cannot be pickled (or unpickled) becomes a
``RuntimeError`` with its text.

Signals and orphans.  Workers ignore SIGINT and SIGTERM and run in a session of
their own: Ctrl-C at a terminal, or a SIGTERM to the whole process group or
cgroup (systemd, ``timeout``), is the parent's to handle as a graceful stop,
and the parse processes keep serving it.  A worker ends when its stdin reaches
EOF - ``shutdown()`` closes it, and so does the kernel when the parent dies in
any way, SIGKILL included - so no worker outlives its parent by more than the
job it is running.

Shutdown.  ``shutdown()`` refuses new jobs; once nothing is queued or in
flight, each writer closes its worker's stdin, the workers exit, and the
reader, seeing every EOF, reaps them and ends.  ``wait=True`` waits for all of
that; ``cancel_futures=True`` cancels the jobs that no worker has taken yet.
The threads are daemons: a program that never shuts its pool down still
exits, and its workers then see EOF.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import importlib
import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from queue import SimpleQueue
from typing import Any, TypeVar

__all__ = ["ParseProcessPool", "RemoteTraceback"]

_T = TypeVar("_T")

_LENGTH = struct.Struct("!Q")  # a frame's length, before it
_COUNT = struct.Struct("!I")  # a frame's out-of-band buffers, each then given by its 8-byte length
_PROTOCOL = 5
_DEPTH = 2  # jobs a worker holds at most: the one it runs and the next, already in its pipe
_PIPE_SIZE = 1 << 20  # the default /proc/sys/fs/pipe-max-size: an unprivileged process may ask for it
_BUFFER_SIZE = 2 * _PIPE_SIZE  # a reader's reusable buffer: a frame the size of the pipe and the next one's start
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 16  # the pieces one writev takes
# The child's first code: the parent's sys.path (argv[2:]), then the worker loop; argv[1]: modules to preload.
_BOOTSTRAP = (
    "import sys; sys.path[:] = sys.argv[2:]; "
    "from niofetcher.crawl.workers import _serve; _serve(sys.argv[1])"
)
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)  # the directory holding this niofetcher


class RemoteTraceback(Exception):
    """The ``__cause__`` of an exception raised by a job: its traceback in the worker, as text."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(eq=False)
class _Worker:
    """One parse process and the parent's side of its two pipes."""

    process: subprocess.Popen[bytes]
    replies: _FrameReader
    jobs: SimpleQueue[list[memoryview] | None] = field(default_factory=SimpleQueue)  # frames for the writer; None: close
    in_flight: deque[concurrent.futures.Future[Any]] = field(default_factory=deque)  # oldest first
    writer: threading.Thread | None = None
    closing: bool = False  # its writer was told to close the worker's stdin


class ParseProcessPool(concurrent.futures.Executor):
    """An Executor of ``workers`` processes started on niofetcher's own entry point; see the module docstring.

    Args:
        workers: how many processes, at least 1. All start now; their imports run while the
            caller goes on, and a job submitted meanwhile waits for the first worker ready.
        preload: modules each worker imports before its first job (``niofetcher.crawl.parse``, which
            imports lxml, always is): the modules of the functions it will run.

    Raises:
        ValueError: for a ``workers`` that is not a positive int.
        OSError: when a process cannot be started (those already started are stopped).
    """

    def __init__(self, workers: int, *, preload: Sequence[str] = ()) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, not {workers!r}")
        self._lock = threading.Lock()
        self._queued: deque[tuple[concurrent.futures.Future[Any], list[memoryview]]] = deque()
        self._shutdown = False
        self._closing = False
        self._broken: str | None = None  # why the pool is broken, once it is
        paths = [_PACKAGE_ROOT, *(p for p in sys.path if p != _PACKAGE_ROOT)]
        argv = [sys.executable, "-c", _BOOTSTRAP, ",".join(["niofetcher.crawl.parse", *preload]), *paths]
        self._workers: list[_Worker] = []
        try:
            for _ in range(workers):
                process = _start(argv)
                assert process.stdout is not None
                self._workers.append(_Worker(process, _FrameReader(process.stdout.fileno())))
        except BaseException:
            for worker in self._workers:
                _stop(worker.process)
            raise
        for i, worker in enumerate(self._workers):
            worker.writer = threading.Thread(
                target=_write_jobs, args=(worker,), name=f"niofetcher-parse-writer-{i}", daemon=True
            )
            worker.writer.start()
        self._reader = threading.Thread(target=self._read_replies, name="niofetcher-parse-reader", daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        with self._lock:
            in_flight = sum(len(w.in_flight) for w in self._workers)
            state = "broken" if self._broken else "shut down" if self._shutdown else "running"
            return (
                f"<ParseProcessPool [{state} | workers: {len(self._workers)} | jobs: {in_flight} in flight,"
                f" {len(self._queued)} queued]>"
            )

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[_T]:
        """Run ``fn(*args, **kwargs)`` in a worker; ``fn`` must be a module-level function.

        A job that cannot be pickled gets a future with that error.  An argument wrapped in
        ``pickle.PickleBuffer`` is not copied into the job's pickle but written from its own
        memory (it must stay unchanged until the job is done), and ``fn`` gets a read-only
        ``memoryview`` of it, valid while the job runs: the crawler's page bodies travel so.

        Raises:
            BrokenProcessPool: a worker has died.
            RuntimeError: after ``shutdown()``.
        """
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        try:
            buffers: list[pickle.PickleBuffer] = []
            payload = pickle.dumps((fn, args, kwargs), _PROTOCOL, buffer_callback=buffers.append)
            frame = _frame(payload, [buffer.raw() for buffer in buffers])
        except Exception as exc:  # noqa: BLE001 - any pickling failure is the job's, not the pool's
            future.set_exception(exc)
            return future
        with self._lock:
            if self._broken is not None:
                raise BrokenProcessPool(self._broken)
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queued.append((future, frame))
            self._dispatch()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new jobs; the queued ones run (or are cancelled), then the workers exit.

        Args:
            wait: return only when every job has ended and every process, thread and pipe is gone.
            cancel_futures: cancel the jobs no worker has taken yet.
        """
        with self._lock:
            self._shutdown = True
            cancelled = [future for future, _ in self._queued] if cancel_futures else []
            if cancel_futures:
                self._queued.clear()
            self._close_when_idle()
        for future in cancelled:
            future.cancel()
        if wait and threading.current_thread() is not self._reader:  # a done callback may call shutdown()
            self._reader.join()
            for worker in self._workers:
                assert worker.writer is not None
                worker.writer.join()

    # -- with the lock held -------------------------------------------------------

    def _dispatch(self) -> None:
        """Give queued jobs to the least loaded workers that can take one."""
        queued = self._queued
        while queued:
            worker = min(self._workers, key=lambda w: len(w.in_flight))
            if len(worker.in_flight) >= _DEPTH or worker.closing:
                return
            future, frame = queued.popleft()
            if future.set_running_or_notify_cancel():
                worker.in_flight.append(future)
                worker.jobs.put(frame)

    def _close_when_idle(self) -> None:
        """Once shut down (or broken) and out of jobs, tell every writer to close its worker's stdin."""
        if self._closing or (not self._shutdown and self._broken is None) or self._queued:
            return
        if any(w.in_flight for w in self._workers):
            return
        self._closing = True
        for worker in self._workers:
            self._close_input(worker)

    @staticmethod
    def _close_input(worker: _Worker) -> None:
        if not worker.closing:
            worker.closing = True
            worker.jobs.put(None)

    # -- the reader thread ----------------------------------------------------------

    def _read_replies(self) -> None:
        """Reader thread: read every worker's replies until each has reached EOF, then reap them."""
        try:
            with selectors.DefaultSelector() as selector:
                for worker in self._workers:
                    assert worker.process.stdout is not None
                    selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
                while selector.get_map():
                    for key, _ in selector.select():
                        worker = key.data
                        try:
                            alive = worker.replies.fill()
                        except BlockingIOError:  # nothing after all
                            continue
                        self._complete_all(worker)
                        if not alive:
                            selector.unregister(key.fileobj)
                            self._ended(worker)
        except BaseException as exc:  # a bug here must not leave futures waiting for ever
            self._abandon(f"the parse pool's reader failed: {type(exc).__name__}: {exc}")
            raise

    def _abandon(self, why: str) -> None:
        """The reader cannot go on: kill every worker and fail every job still waiting."""
        with self._lock:
            self._broken = self._broken or why
            broken = self._broken
            running = [f for w in self._workers for f in w.in_flight]
            queued = [f for f, _ in self._queued]
            self._queued.clear()
            for worker in self._workers:
                worker.in_flight.clear()
                self._close_input(worker)
        for worker in self._workers:
            if worker.process.returncode is None:
                worker.process.kill()
                worker.process.wait()
            assert worker.process.stdout is not None
            worker.process.stdout.close()
        _fail(running, queued, broken)

    def _complete_all(self, worker: _Worker) -> None:
        """Complete every reply read so far.  A function of its own so that no view into the read
        buffer outlives it: one left bound would make the next fill() give the buffer up."""
        for reply in worker.replies.frames():
            self._complete(worker, reply)

    def _complete(self, worker: _Worker, reply: memoryview) -> None:
        with self._lock:
            future = worker.in_flight.popleft()
            self._dispatch()  # the next job first: the worker should not wait for this reply's callbacks
            self._close_when_idle()
        try:
            data, _ = _unframe(reply)
            ok, value, remote_traceback = pickle.loads(data)
        except Exception as exc:  # noqa: BLE001 - a result that does not unpickle here is this job's failure
            future.set_exception(exc)
            return
        if ok:
            future.set_result(value)
        else:
            value.__cause__ = RemoteTraceback(remote_traceback)
            future.set_exception(value)

    def _ended(self, worker: _Worker) -> None:
        """``worker``'s stdout is at EOF: reap it; unless it was told to close, the pool is broken."""
        assert worker.process.stdout is not None
        worker.process.stdout.close()
        code = worker.process.wait()
        with self._lock:
            if worker.closing and not worker.in_flight:
                return
            if self._broken is None:
                how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with status {code}"
                self._broken = f"a parse process (pid {worker.process.pid}) {how}"
            failed = list(worker.in_flight)
            worker.in_flight.clear()
            queued = [future for future, _ in self._queued]
            self._queued.clear()
            self._close_input(worker)
            self._close_when_idle()
            broken = self._broken
        _fail(failed, queued, broken)


def _fail(
    running: list[concurrent.futures.Future[Any]], queued: list[concurrent.futures.Future[Any]], why: str
) -> None:
    """Fail jobs of a broken pool: those a worker had, and those still queued (unless cancelled)."""
    for future in running:
        future.set_exception(BrokenProcessPool(why))
    for future in queued:
        if future.set_running_or_notify_cancel():
            future.set_exception(BrokenProcessPool(why))


def _start(argv: list[str]) -> subprocess.Popen[bytes]:
    # start_new_session: no Ctrl-C or terminal hang-up reaches a worker (see "Signals and orphans").
    process = subprocess.Popen(
        argv, bufsize=0, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    assert process.stdin is not None and process.stdout is not None
    for pipe in (process.stdin, process.stdout):
        _grow(pipe.fileno())
    os.set_blocking(process.stdout.fileno(), False)
    return process


def _stop(process: subprocess.Popen[bytes]) -> None:
    """A worker the pool could not finish starting: end it and close its pipes."""
    process.kill()
    process.wait()
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()


def _grow(fd: int) -> None:
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    except (AttributeError, OSError):  # not Linux, or a lower pipe-max-size: the default size works, slower
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _write_jobs(worker: _Worker) -> None:
    """Writer thread of one worker: its job frames, blocking, until told to close its stdin."""
    stdin = worker.process.stdin
    assert stdin is not None
    try:
        while (frame := worker.jobs.get()) is not None:
            _write(stdin.fileno(), frame)
    except OSError:  # the worker died (EPIPE): the reader sees its EOF and fails its jobs
        pass
    finally:
        stdin.close()


# -- both sides ------------------------------------------------------------------


def _frame(payload: bytes, buffers: list[memoryview]) -> list[memoryview]:
    """The pieces of one frame, for one writev: its length, the buffers' count and lengths, the
    pickle, the out-of-band buffers (empty pieces left out: a writev of them writes nothing)."""
    sizes = [buffer.nbytes for buffer in buffers]
    body = _COUNT.size + _LENGTH.size * len(sizes) + len(payload) + sum(sizes)
    head = _LENGTH.pack(body) + _COUNT.pack(len(sizes)) + struct.pack(f"!{len(sizes)}Q", *sizes)
    return [piece for piece in (memoryview(head), memoryview(payload), *buffers) if piece.nbytes]


def _unframe(body: memoryview) -> tuple[memoryview, list[memoryview]]:
    """A frame's body (without its length) -> its pickle and its out-of-band buffers, views of ``body``."""
    (count,) = _COUNT.unpack_from(body)
    sizes = struct.unpack_from(f"!{count}Q", body, _COUNT.size)
    at = len(body) - sum(sizes)
    pickled = body[_COUNT.size + _LENGTH.size * count : at]
    buffers = []
    for size in sizes:
        buffers.append(body[at : at + size])
        at += size
    return pickled, buffers


def _write(fd: int, frame: list[memoryview]) -> None:
    """One frame, whole, to a blocking descriptor: one writev, more only when a signal interrupts
    it or the frame has more pieces than one call takes."""
    pieces = list(frame)  # each a view of bytes ("B"): its len() is its size
    first = 0
    while first < len(pieces):
        n = os.writev(fd, pieces[first : first + _IOV_MAX])
        while n:
            if n >= len(pieces[first]):
                n -= len(pieces[first])
                first += 1
            else:
                pieces[first] = pieces[first][n:]
                n = 0


class _FrameReader:
    """The frames arriving on one pipe, read into one reusable buffer: as much per read as has arrived.

    A frame is handed out as a view of the buffer; the buffer is only written over once no such
    view is left (a job that keeps one gets the old buffer for good, and the reader a new one).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray(_BUFFER_SIZE)
        self._start = 0  # the first byte not yet handed out in a frame
        self._end = 0  # the end of what was read
        self._large: bytearray | None = None  # the body of a frame larger than the buffer, while it is read
        self._got = 0  # ... and how much of it has been read

    def fill(self) -> bool:
        """Read once what has arrived (blocking, on a blocking pipe); False at EOF.

        Raises:
            BlockingIOError: a non-blocking pipe had nothing.
        """
        if self._large is not None:
            n = os.readv(self._fd, [memoryview(self._large)[self._got :]])
            self._got += n
            return n > 0
        pending = self._pending()
        if pending is not None and _LENGTH.size + pending > len(self._buffer):
            # Too large for the buffer: a buffer of its own, which takes what has come of it.
            self._large = bytearray(pending)
            self._got = self._end - self._start - _LENGTH.size
            self._large[: self._got] = self._buffer[self._start + _LENGTH.size : self._end]
            self._start = self._end = 0
            return self.fill()
        free = len(self._buffer) - self._end
        if self._start == self._end or not free or (pending is not None and self._start + _LENGTH.size + pending > len(self._buffer)):
            self._reclaim()
        n = os.readv(self._fd, [memoryview(self._buffer)[self._end :]])
        self._end += n
        return n > 0

    def frames(self) -> Iterator[memoryview]:
        """The bodies of the whole frames read so far, each a view to drop before the next fill()."""
        if self._large is not None:
            if self._got == len(self._large):
                large, self._large = self._large, None
                yield memoryview(large)
            return
        while (pending := self._pending()) is not None and self._end - self._start - _LENGTH.size >= pending:
            begin = self._start + _LENGTH.size
            self._start = begin + pending
            yield memoryview(self._buffer)[begin : self._start]

    def _pending(self) -> int | None:
        """The body length of the next frame, once its length has been read."""
        if self._end - self._start < _LENGTH.size:
            return None
        return int(_LENGTH.unpack_from(self._buffer, self._start)[0])

    def _reclaim(self) -> None:
        """Move the unread rest to the buffer's start, or to a new buffer while a frame's view is alive."""
        rest = self._buffer[self._start : self._end]
        if _exported(self._buffer):
            self._buffer = bytearray(_BUFFER_SIZE)
        self._buffer[: len(rest)] = rest
        self._start, self._end = 0, len(rest)


def _exported(buffer: bytearray) -> bool:
    """Whether a view of ``buffer`` is alive: a bytearray with one cannot change its size."""
    try:
        buffer.append(0)
    except BufferError:
        return True
    del buffer[-1]
    return False


# -- the worker ----------------------------------------------------------------


def _serve(preload: str) -> None:
    """A worker's life: take the pipes, import, then run jobs until stdin reaches EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    jobs, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # print() in a job goes to stderr, not into the reply stream
    for name in filter(None, preload.split(",")):
        importlib.import_module(name)
    reader = _FrameReader(jobs)
    while reader.fill():  # EOF, even mid-frame: the parent is gone
        for job in reader.frames():
            reply = _run(job)
            del job  # the job's views of the buffer end with it
            try:
                _write(replies, _frame(reply, []))
            except BrokenPipeError:  # the parent is gone
                return


def _run(job: memoryview) -> bytes:
    """One job -> its pickled reply: (True, result, "") or (False, exception, traceback text)."""
    try:
        pickled, buffers = _unframe(job)
        fn, args, kwargs = pickle.loads(pickled, buffers=buffers)
        return pickle.dumps((True, fn(*args, **kwargs), ""), _PROTOCOL)
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: it is the job's outcome, not the worker's
        return _failure(exc)


def _failure(exc: BaseException) -> bytes:
    text = "".join(traceback.format_exception(exc))
    try:
        reply = pickle.dumps((False, exc, text), _PROTOCOL)
        pickle.loads(reply)  # an exception with required keyword arguments pickles, but does not unpickle
    except Exception:  # noqa: BLE001 - whatever it is, the text still tells
        summary = "".join(traceback.format_exception_only(exc)).strip()
        reply = pickle.dumps((False, RuntimeError(summary), text), _PROTOCOL)
    return reply

"""One owner per frontier file: the exclusive ``flock()`` on ``<path>.lock``.

A second crawl on the same file would put the first one's 'processing'
rows back to 'waiting' (the crash recovery of the SQLite frontier) and fetch
them again.  So opening a file takes an exclusive ``flock()`` on a sidecar
file, ``<path>.lock`` (``path`` with symlinks resolved), before it reads
anything, and holds it until close(); the kernel drops it when the process
dies, so a SIGKILL leaves no stale lock, and a child the crawl forks lets go
of its copy at once (it would outlive the crawl).  A second opener --
another process, or another Frontier in the same process -- gets :class:`FrontierLocked` naming the owner's pid (written into
the lock file) and changes nothing.  Why a sidecar rather than a ``flock()``
on the database itself, although on Linux flock locks and SQLite's POSIX
(fcntl) locks do not see each other: locking the database needs a file
descriptor of our own on it, and closing *any* descriptor of a file drops
every POSIX lock the process holds on it -- so a second Frontier in the same
process, closing its descriptor after finding the file locked, would silently
drop the first one's SQLite locks (SQLite's "How To Corrupt" §2.2).  On NFS,
Linux implements flock() with POSIX locks, so it would clash with SQLite's
own there.  And a sidecar can say who owns it.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import socket
import stat
import weakref
from typing import ClassVar

from ..base import FrontierError, FrontierErrorKind

__all__ = ["FrontierLocked", "OwnerLock", "path_problem"]


class FrontierLocked(FrontierError):
    """Raised when a frontier file is open in another Frontier, in this process or another."""

    default_kind = FrontierErrorKind.LOCKED


class OwnerLock:
    """The exclusive flock() on ``<path>.lock`` that makes a Frontier the one owner of its file
    (see above).  The lock file holds the owner's pid and host, for the message of
    whoever finds it locked; close() removes it."""

    # Locks held by this process, to be let go in a forked child: the child shares the open file
    # (and so the lock), and would keep it after the crawl that took it had died.
    _held: ClassVar[weakref.WeakSet[OwnerLock]] = weakref.WeakSet()

    def __init__(self, db_path: str) -> None:
        # Beside the file itself, however it is named (a symlink, "./crawl.db"): where SQLite puts its -wal.
        self.path = os.path.realpath(db_path) + ".lock"
        while True:
            try:
                file = open(self.path, "a+b", buffering=0)  # noqa: SIM115 -- held open until release()
            except OSError as exc:
                raise FrontierError(f"cannot open {db_path}: cannot create {self.path}: {exc.strerror}",
                                    FrontierErrorKind.UNAVAILABLE) from exc
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = self._owner(file)
                file.close()
                raise FrontierLocked(f"{db_path} is in use by another crawl{owner}") from None
            except BaseException:
                file.close()
                raise
            # The owner before us removes the file when it lets go: if it did so after our open(),
            # the lock is on a file nobody else will ever open, so try again.
            try:
                same = os.path.samestat(os.fstat(file.fileno()), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            file.close()
        file.truncate(0)
        file.write(f"{os.getpid()} {socket.gethostname()}\n".encode())
        self._file: io.FileIO | None = file
        self._pid = os.getpid()
        OwnerLock._held.add(self)

    @staticmethod
    def _owner(file: io.FileIO) -> str:
        """" (pid 1234)", from the lock file's first line; "" while the owner has not written it yet."""
        pid, _, host = os.pread(file.fileno(), 200, 0).decode("utf-8", "replace").strip().partition(" ")
        if not pid.isdigit():
            return ""
        if host and host != socket.gethostname():
            return f" (pid {pid} on {host})"
        return f" (pid {pid}, this process)" if int(pid) == os.getpid() else f" (pid {pid})"

    def release(self) -> None:
        """Remove the lock file and let go (the removal first, while the lock is still ours)."""
        file, self._file = self._file, None
        if file is None:
            return
        OwnerLock._held.discard(self)
        if os.getpid() == self._pid:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        file.close()

    @classmethod
    def _forget_in_child(cls) -> None:
        for lock in list(cls._held):
            lock.release()  # in the child: closes its descriptor, leaves the file and the parent's lock


os.register_at_fork(after_in_child=OwnerLock._forget_in_child)


def path_problem(path: str) -> str | None:
    """What keeps ``path`` from holding a frontier, in words, for the problems that SQLite words
    as "unable to open database file" or finds only later; None when nothing is seen wrong."""
    directory = os.path.dirname(path) or "."
    try:
        is_directory = stat.S_ISDIR(os.stat(directory).st_mode)
    except FileNotFoundError:
        return f"directory {directory} does not exist"
    except OSError as exc:  # a file on the way (ENOTDIR), a directory we may not enter (EACCES)
        return f"directory {directory}: {exc.strerror}"
    if not is_directory:
        return f"{directory} is not a directory"
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        return "permission denied: it must be readable and writable"
    if not os.access(directory, os.W_OK | os.X_OK):
        # SQLite keeps its log (-wal, -shm) beside the file, and the lock file goes there too.
        return f"permission denied: directory {directory} is not writable"
    return None

"""``PostgresCluster``: a throwaway PostgreSQL server for tests and benchmarks, standard library only.

It needs the server's programs (Debian's ``postgresql`` package: ``initdb``, ``postgres``,
``pg_isready``), found through ``pg_config --bindir``, ``PATH`` or ``/usr/lib/postgresql/*/bin``.
``start()`` makes a cluster with ``initdb`` in a new temporary directory and runs the server on
127.0.0.1 at a free port, with its Unix socket in that directory too; ``stop()`` shuts it down
and removes the directory.  ``dsn`` is what a client connects with:
``postgresql://postgres@127.0.0.1:PORT/postgres`` (trust authentication, loopback only).

Theory of operation
-------------------
*Not as root.*  PostgreSQL refuses to run as root, and a test run here is often root (a
container): then ``initdb`` and the server run as the ``postgres`` user (``subprocess``'s
``user=``, the temporary directory chowned to it).  Run by anyone else, they run as that user.

*Speed over durability.*  ``fsync=off``, ``synchronous_commit=off`` and ``full_page_writes=off``:
a test's data dies with the cluster anyway, and a commit then costs no disk flush.  So figures
measured on this cluster are those of a server that never waits for its disk.

*Nothing outlives its starter.*  The server is the starter's child, not a daemon (not
``pg_ctl start``): ``stop()`` sends it SIGINT -- PostgreSQL's "fast" shutdown, which is what
``pg_ctl stop -m fast`` sends -- waits for it, and kills it if it does not go within the bound.
Should the starting thread die without stopping it (a SIGKILLed test run), the kernel sends
the server SIGQUIT, an immediate shutdown (``PR_SET_PDEATHSIG``, Linux), and its backends
follow their postmaster; only the temporary directory is left then.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["PostgresCluster", "PostgresUnavailable", "find_bindir"]

# How long the server may take to accept connections, and to shut down.
_START_SECONDS = 60.0
_STOP_SECONDS = 30.0
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class PostgresUnavailable(RuntimeError):
    """Raised when PostgreSQL's server programs cannot be found, or the cluster cannot be started."""


def find_bindir() -> Path | None:
    """The directory of PostgreSQL's server programs (``initdb``, ``postgres``), None when none is installed."""
    candidates: list[str] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=10, check=True)
        candidates.append(done.stdout.strip())
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(str(Path(initdb).resolve().parent))
    # Debian keeps the server programs out of PATH, one directory per major version: the newest first.
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    for candidate in candidates:
        path = Path(candidate)
        if all((path / program).is_file() for program in ("initdb", "postgres", "pg_isready")):
            return path
    return None


def _version_key(path: str) -> tuple[int, ...]:
    version = Path(path).parent.name
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def free_port() -> int:
    """A loopback port free a moment ago: bound, read and closed again (for a server started after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def death_signal(sig: int = signal.SIGQUIT) -> Callable[[], None] | None:
    """A ``preexec_fn`` for a server process: ``sig`` for it when the thread that started it dies
    (``PR_SET_PDEATHSIG``; None where there is no such call).  Looked up here, in the parent: the
    child between fork and exec should do little."""
    import ctypes  # here: a program that imports the test site need not load it

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no such safety net
        return None

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, sig)

    return die_with_parent


class PostgresCluster:
    """A PostgreSQL cluster in a temporary directory, run until :meth:`stop` (see above).

    Args:
        bindir: the server programs' directory; found by :func:`find_bindir` when None.
        settings: more server settings (``{"max_connections": "50"}``), given as ``-c name=value``.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    __test__ = False

    def __init__(self, bindir: str | os.PathLike[str] | None = None, settings: dict[str, str] | None = None) -> None:
        found = Path(bindir) if bindir is not None else find_bindir()
        if found is None:
            raise PostgresUnavailable("PostgreSQL's server programs (initdb, postgres) are not installed")
        self.bindir = found
        self.settings = dict(settings or {})
        self.port = 0
        self.directory: Path | None = None
        self._server: subprocess.Popen[bytes] | None = None
        # PostgreSQL will not run as root: as root, run it as the postgres user.
        self._user = "postgres" if os.geteuid() == 0 else None

    @property
    def dsn(self) -> str:
        """The URL a client connects with (over TCP on 127.0.0.1)."""
        if not self.port:
            raise RuntimeError("the cluster is not started")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def socket_dir(self) -> Path:
        """The directory of the server's Unix socket (``host=`` of a libpq connection string)."""
        if self.directory is None:
            raise RuntimeError("the cluster is not started")
        return self.directory / "socket"

    def start(self) -> PostgresCluster:
        """Create the cluster and start its server; return when it accepts connections.

        Raises:
            PostgresUnavailable: when ``initdb`` or the server fails (its output in the message).
        """
        if self._server is not None:
            raise RuntimeError("the cluster is started already")
        self.directory = Path(tempfile.mkdtemp(prefix="niofetcher-pg-"))
        try:
            self._initdb()
            self._run_server()
        except BaseException:
            self.stop()
            raise
        return self

    def _initdb(self) -> None:
        assert self.directory is not None
        (self.directory / "socket").mkdir()
        if self._user is not None:
            for path in (self.directory, self.directory / "socket"):
                shutil.chown(path, self._user, self._user)
        command = [str(self.bindir / "initdb"), "-D", str(self.directory / "data"), "-U", "postgres",
                   "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, user=self._user,
                              cwd=self.directory)
        if done.returncode != 0:
            raise PostgresUnavailable(f"initdb failed ({done.returncode}): {_last_line(done.stderr or done.stdout)}")

    def _run_server(self) -> None:
        assert self.directory is not None
        settings = {
            "listen_addresses": "127.0.0.1", "unix_socket_directories": str(self.directory / "socket"),
            "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            "logging_collector": "off", **self.settings,
        }
        for _ in range(5):  # a free port taken by someone else in between: another one
            self.port = free_port()
            command = [str(self.bindir / "postgres"), "-D", str(self.directory / "data"), "-p", str(self.port)]
            for name, value in settings.items():
                command += ["-c", f"{name}={value}"]
            log = open(self.directory / "server.log", "ab")  # noqa: SIM115 -- the server's; closed right after
            # The preexec_fn is one prctl() call through ctypes, looked up beforehand: it takes no lock
            # that a thread of the parent could have held at the fork.
            with log:
                self._server = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, user=self._user, cwd=self.directory,
                    preexec_fn=death_signal())  # noqa: PLW1509
            if self._wait_ready():
                return
            self._end_server()
        raise PostgresUnavailable(f"the PostgreSQL server did not start: {_last_line(self.log())}")

    def _wait_ready(self) -> bool:
        """Whether the server accepts connections before the bound (False when it exited)."""
        assert self._server is not None
        deadline = time.monotonic() + _START_SECONDS
        while time.monotonic() < deadline:
            if self._server.poll() is not None:
                return False
            ready = subprocess.run([str(self.bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port),
                                    "-t", "1"], check=False, timeout=10)
            if ready.returncode == 0:
                return True
            time.sleep(0.05)
        return False

    def log(self) -> str:
        """What the server wrote to its log so far."""
        if self.directory is None:
            return ""
        try:
            return (self.directory / "server.log").read_text(errors="replace")
        except OSError:
            return ""

    def _end_server(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        if server.poll() is None:
            server.send_signal(signal.SIGINT)  # a fast shutdown: clients are disconnected
            try:
                server.wait(_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(_STOP_SECONDS)

    def stop(self) -> None:
        """Shut the server down (its backends with it) and remove the directory.  Stopping twice is fine."""
        try:
            self._end_server()
        finally:
            directory, self.directory = self.directory, None
            self.port = 0
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"on 127.0.0.1:{self.port}" if self._server is not None else "stopped"
        return f"<PostgresCluster {state}>"


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"

"""Run a command and measure its whole process tree: wall time, and CPU of every process it started.

    python benchmarks/clients/run_tree.py --report OUT.json -- python -m niofetcher crawl ...

A crawl is more than one process: niofetcher parses in a process pool (a
forkserver and its workers), and some of those may outlive the command's main
process by a moment. Their CPU only reaches a parent's ``RUSAGE_CHILDREN`` when
they are waited for, and an orphan is waited for by whoever adopts it. So this
runner makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``,
Linux): orphans of the tree are re-parented to it, and it waits for every one
of them before it reads ``getrusage(RUSAGE_CHILDREN)``. Its own CPU (it only
waits) is not counted.

The command's stdout and stderr pass through. The report (one JSON object) is
written to ``--report``: ``wall`` (start of the command to the exit of its main
process), ``cpu_user``, ``cpu_system`` (the whole tree), ``maxrss_mb`` (the
largest single process of the tree), ``returncode``, ``subreaper`` (whether
orphans could be collected), ``reaped`` (processes waited for after the main one).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) < 4 or argv[0] != "--report" or argv[2] != "--":
        print("usage: run_tree.py --report OUT.json -- COMMAND...", file=sys.stderr)
        return 2
    report_path, command = argv[1], argv[3:]
    subreaper = _become_subreaper()
    started = time.perf_counter()
    proc = subprocess.Popen(command)
    returncode = proc.wait()
    wall = time.perf_counter() - started
    reaped = 0
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:  # every orphan of the tree, until none is left
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid:
            reaped += 1
        else:
            time.sleep(0.01)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = {"wall": wall, "cpu_user": usage.ru_utime, "cpu_system": usage.ru_stime,
              "maxrss_mb": usage.ru_maxrss / 1024, "returncode": returncode, "subreaper": subreaper,
              "reaped": reaped}
    with open(report_path, "w", encoding="utf-8") as out:
        json.dump(report, out)
    return returncode


if __name__ == "__main__":
    sys.exit(main())

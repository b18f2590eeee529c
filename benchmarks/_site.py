"""Start the test site in its own process, so that it never shares a GIL with the client measured."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator


def free_port_block(count: int) -> int:
    """A first port P such that P..P+count-1 are free on 127.0.0.1 right now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count >= 65536:
            continue
        socks = []
        try:
            for port in range(first, first + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no block of free ports found")


@contextmanager
def site_process(hosts: int = 1, pages: int = 1000, delay_ms: float = 0.0, page_size: int = 4096) -> Iterator[list[str]]:
    """Run ``niofetcher testsite`` in a subprocess; yields its base URLs."""
    port = free_port_block(hosts)
    cmd = [sys.executable, "-m", "niofetcher", "testsite", "--port", str(port), "--hosts", str(hosts),
           "--pages", str(pages), "--delay", str(delay_ms), "--page-size", str(page_size)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        urls = []
        deadline = time.monotonic() + 30
        while len(urls) < hosts and time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise RuntimeError("test site exited before it was ready")
            if line.startswith("serving "):
                urls.append(line.split()[1])
        yield urls
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

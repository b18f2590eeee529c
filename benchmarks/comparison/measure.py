"""What the runner measures besides the clients: body sizes, the machine, and one client process's costs."""

from __future__ import annotations

import collections
import importlib.metadata
import os
import platform
import re
import resource
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

#: Flag a run when the rest of the machine used more than this many cores meanwhile.
OTHER_LOAD_FLAG = 0.8


def probe_sizes(urls: list[str], timeout: float = 60.0) -> dict[str, int]:
    """The body length of each distinct URL, asked of the site once (pipelined, one connection per host).

    Plain sockets and a minimal response reader: the sizes must not depend on any client measured.
    Raises when any answer is not a 200 with a Content-Length.
    """
    by_host: dict[str, list[str]] = collections.defaultdict(list)
    for url in dict.fromkeys(urls):
        by_host[urlsplit(url).netloc].append(url)

    def one_host(netloc: str, host_urls: list[str]) -> dict[str, int]:
        host, _, port = netloc.rpartition(":")
        sizes = {}
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            requests = b"".join(
                f"GET {urlsplit(u).path or '/'} HTTP/1.1\r\nHost: {netloc}\r\n\r\n".encode("ascii") for u in host_urls
            )
            sock.sendall(requests)
            buf = bytearray()
            for url in host_urls:
                while (end := buf.find(b"\r\n\r\n")) < 0:
                    chunk = sock.recv(1 << 20)
                    if not chunk:
                        raise RuntimeError(f"site closed while probing {url}")
                    buf += chunk
                head = bytes(buf[:end]).decode("latin-1").split("\r\n")
                match = re.search(r"(?im)^content-length:\s*(\d+)\s*$", "\n".join(head[1:]))
                if head[0].split()[1] != "200" or match is None:
                    raise RuntimeError(f"probe of {url}: {head[0]!r}")
                length = int(match.group(1))
                del buf[: end + 4]
                while len(buf) < length:
                    chunk = sock.recv(1 << 20)
                    if not chunk:
                        raise RuntimeError(f"site closed while probing {url}")
                    buf += chunk
                del buf[:length]
                sizes[url] = length
        return sizes

    result: dict[str, int] = {}
    with ThreadPoolExecutor(max_workers=min(16, len(by_host))) as pool:
        for sizes in pool.map(lambda item: one_host(*item), by_host.items()):
            result.update(sizes)
    return result


def listen_drops() -> int | None:
    """The kernel's ListenOverflows + ListenDrops so far (a listen queue that overflowed: the site fell behind)."""
    try:
        with open("/proc/net/netstat", encoding="ascii") as f:
            lines = [line.split() for line in f if line.startswith("TcpExt:")]
    except OSError:
        return None
    if len(lines) < 2:
        return None
    values = dict(zip(lines[0][1:], lines[1][1:], strict=False))
    return int(values.get("ListenOverflows", 0)) + int(values.get("ListenDrops", 0))


def machine_busy() -> float | None:
    """Busy CPU seconds of the whole machine so far (all CPUs, steal included), from /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, _irq, _softirq, steal = (int(v) for v in fields[1:9])
    # irq and softirq time left out: loopback networking is largely softirq work done for the
    # benchmark itself, not charged to any process.
    return (user + nice + system + steal) / os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, Any]:
    """The CPU, cores, platform, Python and the versions of every library compared."""
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            found = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.MULTILINE)
            model = found.group(1).strip() if found else model
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for dist in ("niofetcher", "h11", "aiohttp", "uvloop", "httpx", "requests", "urllib3", "pycurl",
                 "scrapy", "twisted", "matplotlib"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {"cpu": model, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": sys.version.split()[0], "versions": versions}


@dataclass
class ClientProcess:
    """One client command run to its end: its output (or why it has none) and what it cost around it."""

    proc: subprocess.CompletedProcess[str] | None
    failed: str | None  # "killed after ...", when it ran out of time
    wall: float
    children_cpu: float  # user + sys of the reaped children (the client; not what it left to others)
    own_cpu: float  # user + sys of this process meanwhile
    machine_before: float | None

    def other_load(self, run: dict[str, Any], ours: float) -> None:
        """Record in ``run`` the cores the rest of the machine used while the client ran (``ours``: CPU seconds
        this benchmark used meanwhile: client, site, this process), flagged when large over a long enough run.

        /proc/stat is sampled by ticks, so this is rough (+-0.3 cores over a 1 s run).
        """
        after = machine_busy()
        if self.machine_before is None or after is None:
            return
        run["other_load"] = max(0.0, (after - self.machine_before - ours) / self.wall)
        run["other_load_flag"] = self.wall >= 5.0 and run["other_load"] > OTHER_LOAD_FLAG

    @property
    def output_tail(self) -> str:
        """The last three lines of the command's stderr (or stdout), for a failure's message."""
        assert self.proc is not None
        return " | ".join((self.proc.stderr or self.proc.stdout).strip().splitlines()[-3:])


def run_client_process(cmd: list[str], timeout: float) -> ClientProcess:
    """Run ``cmd`` with its output captured; what it cost comes from the clocks around it."""
    machine0 = machine_busy()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self0 = os.times()
    started = time.perf_counter()
    proc: subprocess.CompletedProcess[str] | None
    failed = None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        proc, failed = None, f"killed after {timeout:g} s"
    wall = time.perf_counter() - started
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self1 = os.times()
    return ClientProcess(
        proc=proc, failed=failed, wall=wall,
        children_cpu=children1.ru_utime - children0.ru_utime + children1.ru_stime - children0.ru_stime,
        own_cpu=self1.user - self0.user + self1.system - self0.system,
        machine_before=machine0,
    )

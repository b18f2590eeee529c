"""niofetcher side by side with the libraries people would use instead (issue 5).

    python benchmarks/compare.py                                # every scenario, 3 rounds
    python benchmarks/compare.py --scenario A --rounds 1 --quick  # smoke check, well under a minute
    python benchmarks/compare.py --scenario B --clients niofetcher,pycurl

For each scenario it starts the test site in its own process on loopback
(``benchmarks/site_runner.py``: one port per host, its counters readable over a
pipe), learns the exact body length of every URL it will ask for, then runs
every client in a fresh subprocess (``benchmarks/clients/*_client.py``),
alternating clients round by round (A B C A B C ...) so that a drift of the
machine hits all alike. Each client fetches the same URL list with the same
limits, checks the status and body length of every response and prints one
JSON line; after each run the site's counters give the server-side peak of
open connections per host.

It prints one table per scenario — medians over the rounds of pages/s, client
CPU ms per page (user + sys of the client process), peak RSS, efficiency
against the ideal where one exists, the server-counted peak connections per
host, errors, and each client's pages/s as a ratio to niofetcher's — then the
targets of issue 5 met or missed. Raw runs go to ``benchmarks/results/`` as
JSON, the tables as Markdown, and a PNG chart (matplotlib).

Scenarios (``--quick`` divides the GET counts and the crawled pages by 5):

A  throughput: 1 host, 64 connections, 20,000 GETs of 4 KiB pages, keep-alive.
B  latency-bound: 50 hosts, 4 per host, 200 in all, 50 ms latency, 10,000 GETs;
   ideal 50 x 4 / 0.05 = 4,000 pages/s.
C  many connections: 1 host, 2,000 connections, 200 ms latency, 20,000 GETs;
   ideal 2,000 / 0.2 = 10,000 pages/s. Clients and site raise their open-file limit.
D  crawl: the real ``niofetcher crawl`` command (bs4 and lxml extractors) against Scrapy (a CrawlSpider with
   a LinkExtractor, settings tuned) crawling a generated site from host 0's index: 4 hosts x 2,500 pages
   of 4 KiB (10,004 with the indexes), 16 per host, 64 in all, robots.txt obeyed by both.
E  real-page crawl: the same with the real pages of ../shared/corpus/pages as the bodies (the site's
   links added to each), both crawlers following only the site's own pages; skipped without the corpus.
   Each crawl runs under ``clients/run_tree.py``, which counts the CPU of the whole process tree
   (niofetcher's parse processes included) and the wall time of the whole command; the site's
   counters check that every page was fetched. ``--quick`` divides the pages per host by 5.

A client whose library cannot be imported is skipped with a line saying so; a
client with errors is reported as such, and gets no ratio.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as _dt
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import resource
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS_DIR = os.path.join(HERE, "clients")
RESULTS_DIR = os.path.join(HERE, "results")
SITE_RUNNER = os.path.join(HERE, "site_runner.py")
BASELINE = "niofetcher"
#: Flag a run when the rest of the machine used more than this many cores meanwhile.
OTHER_LOAD_FLAG = 0.8


# --------------------------------------------------------------------------- clients


@dataclass(frozen=True)
class Client:
    """One fetching client: a script under ``benchmarks/clients/`` and the modules it needs."""

    name: str
    script: str
    requires: tuple[str, ...]
    args: tuple[str, ...] = ()
    note: Callable[[FetchScenario, dict], str] = lambda scenario, run: ""

    def missing(self) -> list[str]:
        return [module for module in self.requires if importlib.util.find_spec(module) is None]


def _httpx_note(scenario: FetchScenario, run: dict) -> str:
    return "no per-host limit in httpx" + (" (total only)" if scenario.hosts > 1 else "")


def _requests_note(scenario: FetchScenario, run: dict) -> str:
    threads = run.get("threads")
    if threads is None:
        return ""
    capped = " (capped)" if threads < scenario.total else ""
    return f"{threads} threads{capped}, 1 Session each"


FETCH_CLIENTS: tuple[Client, ...] = (
    Client("niofetcher", "niofetcher_client.py", ("niofetcher", "h11")),
    Client("aiohttp", "aiohttp_client.py", ("aiohttp",), ("--loop", "asyncio")),
    Client("aiohttp+uvloop", "aiohttp_client.py", ("aiohttp", "uvloop"), ("--loop", "uvloop")),
    Client("httpx", "httpx_client.py", ("httpx",), note=_httpx_note),
    Client("requests", "requests_client.py", ("requests",), note=_requests_note),
    Client("pycurl", "pycurl_client.py", ("pycurl",), note=lambda s, r: "C reference (libcurl)"),
)


@dataclass(frozen=True)
class CrawlClient:
    """One crawler of scenarios D and E: the real ``niofetcher crawl`` command, or Scrapy's client script.

    ``hidden`` clients (Scrapy with other settings) run only when named in ``--clients``:
    they are how the Scrapy settings used were chosen.
    """

    name: str
    kind: str  # "niofetcher" or "scrapy"
    requires: tuple[str, ...]
    args: tuple[str, ...] = ()
    note: str = ""
    hidden: bool = False

    def missing(self) -> list[str]:
        return [module for module in self.requires if importlib.util.find_spec(module) is None]


#: Scrapy's settings for D and E, chosen by running the hidden variants below side by side
#: (see the README): CONCURRENT_ITEMS=10 and the asyncio reactor (Scrapy's default).
SCRAPY_TUNED = ("--concurrent-items", "10", "--reactor", "asyncio", "--slots", "per-host")

CRAWL_CLIENTS: tuple[CrawlClient, ...] = (
    CrawlClient("niofetcher", "niofetcher", ("niofetcher",), ("--extractor", "bs4"),
                note="niofetcher crawl, bs4 extractor (the default), 2 parse processes"),
    CrawlClient("niofetcher-lxml", "niofetcher", ("niofetcher",), ("--extractor", "lxml"),
                note="niofetcher crawl --extractor lxml, 2 parse processes"),
    CrawlClient("scrapy", "scrapy", ("scrapy",), SCRAPY_TUNED,
                note="CrawlSpider + LinkExtractor, CONCURRENT_ITEMS=10, asyncio reactor, a slot per host:port"),
    CrawlClient("scrapy-items100", "scrapy", ("scrapy",),
                ("--concurrent-items", "100", "--reactor", "asyncio", "--slots", "per-host"),
                note="as scrapy, CONCURRENT_ITEMS=100 (Scrapy's default)", hidden=True),
    CrawlClient("scrapy-epoll", "scrapy", ("scrapy",),
                ("--concurrent-items", "10", "--reactor", "epoll", "--slots", "per-host"),
                note="as scrapy, Twisted's epoll reactor", hidden=True),
    CrawlClient("scrapy-items1", "scrapy", ("scrapy",),
                ("--concurrent-items", "1", "--reactor", "asyncio", "--slots", "per-host"),
                note="as scrapy, CONCURRENT_ITEMS=1", hidden=True),
    CrawlClient("scrapy-lean", "scrapy", ("scrapy",), (*SCRAPY_TUNED, "--lean"),
                note="as scrapy, unused middlewares and extensions switched off", hidden=True),
    CrawlClient("scrapy-shared-slot", "scrapy", ("scrapy",),
                ("--concurrent-items", "10", "--reactor", "asyncio", "--slots", "shared"),
                note="as scrapy, one download slot for 127.0.0.1 (64 requests)", hidden=True),
)


# --------------------------------------------------------------------------- the site process


class Site:
    """``site_runner.py`` in a subprocess: its base URLs, and its counters on request."""

    def __init__(self, hosts: int, pages: int, delay_ms: float, page_size: int, corpus: str | None = None) -> None:
        cmd = [sys.executable, SITE_RUNNER, "--hosts", str(hosts), "--pages", str(pages),
               "--delay", str(delay_ms), "--page-size", str(page_size)]
        if corpus is not None:
            cmd += ["--corpus", corpus]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            self.close()
            raise RuntimeError("the test site exited before it was ready")
        self.info = json.loads(line)
        self.bases: list[str] = self.info["bases"]

    def ask(self, command: str) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the test site process died")
        return json.loads(line)

    def counters(self) -> dict:
        return self.ask("counters")

    def reset_when_idle(self, wait: float = 15.0) -> dict:
        """Wait until the last client's connections are closed on the server's side, then zero the counters."""
        deadline = time.monotonic() + wait
        while self.counters()["open_now"] and time.monotonic() < deadline:
            time.sleep(0.05)
        self.ask("reset")
        return self.counters()

    def close(self) -> None:
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> Site:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def probe_sizes(urls: list[str], timeout: float = 60.0) -> dict[str, int]:
    """The body length of each distinct URL, asked of the site once (pipelined, one connection per host).

    Plain sockets and a minimal response reader: the sizes must not depend on any client measured.
    Raises when any answer is not a 200 with a Content-Length.
    """
    by_host: dict[str, list[str]] = collections.defaultdict(list)
    for url in dict.fromkeys(urls):
        parts = urlsplit(url)
        by_host[parts.netloc].append(url)

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


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """Something compare.py can run: FetchScenario (A-C) or CrawlScenario (D, E)."""

    key: str
    title: str

    def describe(self) -> str:
        return f"Scenario {self.key}: {self.title}"

    def shrink(self, factor: int) -> Scenario:  # for --quick
        return self

    def run(self, options: argparse.Namespace) -> dict:
        raise NotImplementedError


@dataclass(frozen=True)
class PendingScenario(Scenario):
    """A scenario of issue 5 that cannot run yet; it says so and gives no numbers."""

    reason: str = ""

    def run(self, options: argparse.Namespace) -> dict:
        print(f"\n{self.describe()}\n  not yet: {self.reason}")
        return {"key": self.key, "title": self.title, "status": "not yet", "reason": self.reason}


@dataclass(frozen=True)
class FetchScenario(Scenario):
    """Fetch a URL list from the test site with every fetching client."""

    hosts: int = 1
    per_host: int = 64
    total: int = 64
    gets: int = 20_000
    delay_ms: float = 0.0
    page_size: int = 4096
    max_pages_per_host: int = 1000
    show_ceiling: bool = False
    targets: Callable[[dict[str, dict]], list[tuple[str, bool | None]]] | None = field(
        default=None, compare=False, repr=False)

    @property
    def pages_per_host(self) -> int:
        return min(self.max_pages_per_host, math.ceil(self.gets / self.hosts))

    @property
    def ideal(self) -> float | None:
        """Pages/s with every allowed connection always busy waiting out the latency."""
        if self.delay_ms <= 0:
            return None
        return min(self.total, self.hosts * self.per_host) / (self.delay_ms / 1000.0)

    def describe(self) -> str:
        delay = f", {self.delay_ms:g} ms latency" if self.delay_ms else ", no added latency"
        ideal = f", ideal {self.ideal:,.0f} pages/s" if self.ideal else ""
        return (f"Scenario {self.key}: {self.title} — {self.hosts} host(s), {self.per_host} per host, "
                f"{self.total} in all{delay}, {self.gets:,} GETs of {self.page_size} B pages{ideal}")

    def shrink(self, factor: int) -> FetchScenario:
        return replace(self, gets=max(self.hosts, self.gets // factor))

    def urls(self, bases: list[str]) -> list[str]:
        """GET i goes to host i mod hosts, page (i div hosts) mod pages: spread evenly, round robin."""
        hosts, pages = len(bases), self.pages_per_host
        return [f"{bases[i % hosts]}page/{(i // hosts) % pages}" for i in range(self.gets)]

    # -- running

    def run(self, options: argparse.Namespace) -> dict:
        print(f"\n{self.describe()}")
        clients = []
        for client in FETCH_CLIENTS:
            if options.clients and client.name not in options.clients:
                continue
            missing = client.missing()
            if missing:
                print(f"  skipped {client.name}: cannot import {', '.join(missing)} "
                      f"(pip install -e '.[bench]')")
                continue
            clients.append(client)
        record: dict[str, Any] = {"key": self.key, "title": self.title, "status": "ran",
                                  "config": {k: v for k, v in asdict(self).items() if k != "targets"},
                                  "ideal": self.ideal, "runs": [], "skipped": [
                                      c.name for c in FETCH_CLIENTS
                                      if c not in clients and (not options.clients or c.name in options.clients)]}
        with tempfile.TemporaryDirectory(prefix="niofetcher-compare-") as tmp, \
                Site(self.hosts, self.pages_per_host, self.delay_ms, self.page_size) as site:
            record["site"] = {k: v for k, v in site.info.items() if k != "bases"}
            if self.total > (site.info.get("nofile") or 0) - 64:
                print(f"  warning: the site's open-file limit ({site.info.get('nofile')}) is below "
                      f"{self.total} connections")
            somaxconn = site.info.get("somaxconn")
            if somaxconn is not None and somaxconn < min(self.total, site.info["listen_backlog"]):
                print(f"  note: net.core.somaxconn={somaxconn} caps the site's listen backlog "
                      f"({site.info['listen_backlog']}) below {self.total} connections")
            urls = self.urls(site.bases)
            sizes = probe_sizes(urls)
            job = os.path.join(tmp, "job.tsv")
            with open(job, "w", encoding="utf-8") as out:
                out.writelines(f"{url}\t{sizes[url]}\n" for url in urls)
            if self.show_ceiling:
                record["wrk"] = self._wrk(site.bases[0])
            for round_no in range(1, options.rounds + 1):
                for client in clients:
                    run = self._run_client(client, job, site, options)
                    run["round"] = round_no
                    record["runs"].append(run)
                    print("  " + _progress_line(self, run))
            if options.profile and any(c.name == BASELINE for c in clients):
                record["profile"] = self._profile(job, site, options)
        record["summary"] = summarise(self, record["runs"], [c.name for c in clients])
        record["table"] = table_lines(self, record)
        print()
        for line in record["table"]:
            print(line)
        return record

    def _run_client(self, client: Client, job: str, site: Site, options: argparse.Namespace) -> dict:
        before = site.reset_when_idle()
        cmd = [sys.executable, os.path.join(CLIENTS_DIR, client.script), "--urls", job,
               "--total", str(self.total), "--per-host", str(self.per_host), *client.args]
        if options.deadline:
            cmd += ["--deadline", str(options.deadline)]
        run: dict[str, Any] = {"client": client.name}
        machine0 = _machine_busy()
        drops0 = _listen_drops()
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self0 = os.times()
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=options.run_timeout, check=False)
        except subprocess.TimeoutExpired:
            run["failed"] = f"killed after {options.run_timeout:g} s"
        else:
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            if proc.returncode != 0 or not lines:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                run["failed"] = f"exit {proc.returncode}: " + " | ".join(tail)
            else:
                run.update(json.loads(lines[-1]))
                run["client"] = client.name
        run["process_seconds"] = wall = time.perf_counter() - started
        after = site.counters()
        children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self1 = os.times()
        machine1 = _machine_busy()
        drops1 = _listen_drops()
        if machine0 is not None and machine1 is not None:
            ours = (children1.ru_utime - children0.ru_utime + children1.ru_stime - children0.ru_stime
                    + self1.user - self0.user + self1.system - self0.system + after["cpu"] - before["cpu"])
            # CPU the machine spent on anything but this benchmark (other jobs, steal) while the client ran.
            # /proc/stat is sampled by ticks, so this is rough (+-0.3 cores over a 1 s run): it is flagged
            # only when large over a run long enough to tell.
            run["other_load"] = max(0.0, (machine1 - machine0 - ours) / wall)
            run["other_load_flag"] = wall >= 5.0 and run["other_load"] > OTHER_LOAD_FLAG
        run["server"] = {
            "peak_per_host": max(p["max_open"] for p in after["ports"]),
            "peak_total": after["max_open_total"],
            "accepted": after["accepted"],
            "requests": after["requests"],
            "cpu": after["cpu"] - before["cpu"],
            "listen_drops": None if drops0 is None or drops1 is None else drops1 - drops0,
        }
        if "failed" not in run:
            run["pages_per_s"] = run["ok"] / run["seconds"]
            run["cpu_ms_per_page"] = run["cpu"] * 1000.0 / max(1, run["done"])
            run["site_cpu_share"] = run["server"]["cpu"] / run["seconds"]
            if self.ideal:
                run["efficiency"] = run["pages_per_s"] / self.ideal
        run["note"] = client.note(self, run)
        return run

    def _profile(self, job: str, site: Site, options: argparse.Namespace) -> dict:
        """One more niofetcher run, not counted, with its loop thread under cProfile: the top costs."""
        import pstats

        os.makedirs(RESULTS_DIR, exist_ok=True)
        path = os.path.join(RESULTS_DIR, f"profile-{self.key}{'-quick' if options.quick else ''}.pstats")
        site.reset_when_idle()
        cmd = [sys.executable, os.path.join(CLIENTS_DIR, "niofetcher_client.py"), "--urls", job,
               "--total", str(self.total), "--per-host", str(self.per_host), "--profile", path]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=options.run_timeout, check=False)
        if proc.returncode != 0:
            print(f"  profile run failed: {proc.stderr.strip()[-300:]}")
            return {"failed": proc.stderr[-300:]}
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        stats = pstats.Stats(path)
        total = stats.total_tt  # type: ignore[attr-defined]
        rows = []
        for (filename, line, func), (_cc, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
            rows.append({"function": f"{os.path.relpath(filename) if filename.startswith('/') else filename}"
                                     f":{line}({func})", "calls": nc, "tottime": tt, "cumtime": ct})
        rows.sort(key=lambda r: r["tottime"], reverse=True)
        groups: collections.Counter[str] = collections.Counter()
        for (filename, _line, func), (_cc, _nc, tt, _ct, _) in stats.stats.items():  # type: ignore[attr-defined]
            if "/h11/" in filename:
                groups["h11 (all of it)"] += tt
            elif "/niofetcher/" in filename:
                groups["niofetcher's own Python"] += tt
            elif filename == "~" and re.search(r"'(send|recv|recv_into|connect_ex|connect|close)' of '_socket", func):
                groups["socket calls (send/recv/connect/close)"] += tt
            elif filename == "~" and "epoll" in func or filename.endswith("selectors.py"):
                groups["selectors / epoll"] += tt
            else:
                groups["other (stdlib, builtins)"] += tt
        print(f"\n  niofetcher loop thread under cProfile ({result['pages']:,} pages, "
              f"{result['ok'] / result['seconds']:,.0f} pages/s with the profiler on; {total:.2f} s profiled; "
              f"stats in {path}):")
        for name, tt in groups.most_common():
            print(f"  {tt:8.3f} s {tt / total:6.1%}  {name}")
        print(f"\n  {'tottime':>8} {'share':>6} {'per page us':>11} {'calls':>9}  function")
        for row in rows[:25]:
            print(f"  {row['tottime']:8.3f} {row['tottime'] / total:6.1%} "
                  f"{row['tottime'] * 1e6 / result['pages']:11.2f} {row['calls']:9d}  {row['function']}")
        return {"path": path, "total_seconds": total, "groups": dict(groups), "top": rows[:40], "run": result}

    def _wrk(self, base: str) -> dict:
        wrk = shutil.which("wrk")
        if wrk is None:
            print("  wrk: not installed (not on PATH); the site's ceiling is shown as the fastest client's rate, "
                  "a lower bound")
            return {"available": False}
        cmd = [wrk, "-t2", f"-c{self.total}", "-d5s", f"{base}page/1"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        match = re.search(r"Requests/sec:\s*([\d.]+)", out)
        rate = float(match.group(1)) if match else None
        print(f"  wrk {' '.join(cmd[1:])}: {rate:,.0f} requests/s" if rate else f"  wrk failed: {out[-200:]!r}")
        return {"available": True, "requests_per_s": rate, "command": cmd[1:]}


#: Where scenario E's real pages are: ../shared/corpus/pages beside the repository.
CORPUS_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "corpus", "pages"))
RUN_TREE = os.path.join(CLIENTS_DIR, "run_tree.py")
#: E follows only the site's own pages: real pages carry relative links to paths the
#: site does not have (404s) and to files LinkExtractor skips by extension but niofetcher
#: does not; both crawlers get this same regex (niofetcher --include, Scrapy allow=).
SITE_PAGES_ONLY = r"^http://127\.0\.0\.1:\d+/(page/\d+)?$"


@dataclass(frozen=True)
class CrawlScenario(Scenario):
    """Crawl the whole test site from host 0's index with each crawler; every page once, robots.txt obeyed."""

    hosts: int = 4
    pages_per_host: int = 2500
    per_host: int = 16
    total: int = 64
    page_size: int = 4096
    corpus: bool = False
    targets: Callable[[dict[str, dict]], list[tuple[str, bool | None]]] | None = field(
        default=None, compare=False, repr=False)

    @property
    def site_pages(self) -> int:
        """Every page a full crawl fetches: each host's index and its generated pages (robots.txt not counted)."""
        return self.hosts * (self.pages_per_host + 1)

    def describe(self) -> str:
        bodies = ("real pages of ../shared/corpus/pages as bodies, site links added; only the site's pages "
                  "followed" if self.corpus else f"generated pages of {self.page_size} B")
        return (f"Scenario {self.key}: {self.title} — {self.hosts} hosts x {self.pages_per_host:,} pages "
                f"(+ index) = {self.site_pages:,} pages, {bodies}; {self.per_host} per host, "
                f"{self.total} in all, robots.txt obeyed")

    def shrink(self, factor: int) -> CrawlScenario:
        return replace(self, pages_per_host=max(1, self.pages_per_host // factor))

    def run(self, options: argparse.Namespace) -> dict:
        print(f"\n{self.describe()}")
        if self.corpus and not os.path.isdir(CORPUS_DIR):
            reason = f"no corpus at {CORPUS_DIR} (a clone without ../shared)"
            print(f"  skipped: {reason}")
            return {"key": self.key, "title": self.title, "status": "skipped", "reason": reason}
        clients = []
        for client in CRAWL_CLIENTS:
            if options.clients and client.name not in options.clients:
                continue
            if client.hidden and not options.clients:
                continue
            missing = client.missing()
            if missing:
                print(f"  skipped {client.name}: cannot import {', '.join(missing)} (pip install -e '.[bench]')")
                continue
            clients.append(client)
        record: dict[str, Any] = {"key": self.key, "title": self.title, "status": "ran", "kind": "crawl",
                                  "config": {k: v for k, v in asdict(self).items() if k != "targets"},
                                  "site_pages": self.site_pages, "runs": [],
                                  "skipped": [c.name for c in CRAWL_CLIENTS if c not in clients and not c.hidden
                                              and (not options.clients or c.name in options.clients)],
                                  "chart_title": (f"{self.key}: {'real-page crawl' if self.corpus else 'crawl'} "
                                                  f"({self.site_pages:,} pages, {self.total} conns)")}
        corpus = CORPUS_DIR if self.corpus else None
        with tempfile.TemporaryDirectory(prefix="niofetcher-compare-") as tmp, \
                Site(self.hosts, self.pages_per_host, 0.0, self.page_size, corpus=corpus) as site:
            record["site"] = {k: v for k, v in site.info.items() if k != "bases"}
            for round_no in range(1, options.rounds + 1):
                for client in clients:
                    run = self._run_client(client, site, tmp, options)
                    run["round"] = round_no
                    record["runs"].append(run)
                    print("  " + _crawl_progress_line(run))
        record["summary"] = summarise_crawl(self, record["runs"], [c.name for c in clients])
        record["table"] = crawl_table_lines(self, record)
        print()
        for line in record["table"]:
            print(line)
        return record

    def _command(self, client: CrawlClient, seed: str, db: str) -> list[str]:
        if client.kind == "niofetcher":
            cmd = [sys.executable, "-m", "niofetcher", "crawl", seed, "--db", db, "--per-host", str(self.per_host),
                   "--connections", str(self.total), "--progress", "none", *client.args]
            return cmd + (["--include", SITE_PAGES_ONLY] if self.corpus else [])
        cmd = [sys.executable, os.path.join(CLIENTS_DIR, "scrapy_client.py"), "--seed", seed,
               "--total", str(self.total), "--per-host", str(self.per_host), *client.args]
        return cmd + (["--allow", SITE_PAGES_ONLY] if self.corpus else [])

    def _run_client(self, client: CrawlClient, site: Site, tmp: str, options: argparse.Namespace) -> dict:
        before = site.reset_when_idle()
        db = os.path.join(tmp, f"crawl-{client.name}-{time.monotonic_ns()}.sqlite")
        report_path = os.path.join(tmp, "tree.json")
        if os.path.exists(report_path):
            os.remove(report_path)
        cmd = [sys.executable, RUN_TREE, "--report", report_path, "--", *self._command(client, site.bases[0], db)]
        run: dict[str, Any] = {"client": client.name, "command": cmd[4:]}
        machine0 = _machine_busy()
        self0 = os.times()
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=options.run_timeout, check=False)
        except subprocess.TimeoutExpired:
            run["failed"] = f"killed after {options.run_timeout:g} s"
            proc = None
        wall_outside = time.perf_counter() - started
        after = site.counters()
        paths = site.ask("paths")
        self1 = os.times()
        machine1 = _machine_busy()
        tree = None
        if os.path.exists(report_path):
            with open(report_path, encoding="utf-8") as f:
                tree = json.load(f)
        if proc is not None and (proc.returncode != 0 or tree is None):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            run["failed"] = f"exit {proc.returncode}: " + " | ".join(tail)
        if "failed" not in run and proc is not None and tree is not None:
            try:
                run.update(_niofetcher_crawl_outcome(proc.stdout, db) if client.kind == "niofetcher"
                           else _scrapy_outcome(proc.stdout))
            except (ValueError, KeyError, sqlite3.Error) as exc:
                run["failed"] = f"could not read the outcome: {exc!r}: " + " | ".join(
                    (proc.stderr or proc.stdout).strip().splitlines()[-3:])
        run["server"] = {
            "peak_per_host": max(p["max_open"] for p in after["ports"]),
            "peak_total": after["max_open_total"],
            "accepted": after["accepted"],
            "requests": after["requests"],
            "cpu": after["cpu"] - before["cpu"],
            **paths,
        }
        if "failed" in run or tree is None:
            return run
        run["seconds"] = tree["wall"]
        run["cpu"] = tree["cpu_user"] + tree["cpu_system"]
        run["peak_rss_mb"] = tree["maxrss_mb"]
        run["tree"] = tree
        missing_paths = paths["site_paths"] - paths["paths_served"]
        run["complete"] = missing_paths == 0
        run["repeated"] = paths["paths_repeated"]
        if missing_paths:
            run["errors"] += missing_paths
            run.setdefault("error_samples", []).append(
                f"crawl incomplete: the server saw {paths['paths_served']:,} of the site's "
                f"{paths['site_paths']:,} paths")
        if run["ok"] < self.site_pages:
            run["error_samples"] = [*run.get("error_samples", []),
                                    f"{run['ok']:,} pages ok, the site has {self.site_pages:,}"]
        run["pages_per_s"] = run["ok"] / run["seconds"]
        run["crawl_pages_per_s"] = run["ok"] / run["crawl_seconds"] if run.get("crawl_seconds") else None
        run["cpu_ms_per_page"] = run["cpu"] * 1000.0 / max(1, run["ok"])
        run["site_cpu_share"] = run["server"]["cpu"] / run["seconds"]
        if machine0 is not None and machine1 is not None:
            ours = run["cpu"] + self1.user - self0.user + self1.system - self0.system + run["server"]["cpu"]
            run["other_load"] = max(0.0, (machine1 - machine0 - ours) / wall_outside)
            run["other_load_flag"] = wall_outside >= 5.0 and run["other_load"] > OTHER_LOAD_FLAG
        run["note"] = client.note
        return run


def _niofetcher_crawl_outcome(stdout: str, db: str) -> dict:
    """Pages, statuses and the crawl's own seconds, from the frontier database and the summary table."""
    match = re.search(r"^\s*seconds\s+([\d.]+)\s*$", stdout, re.MULTILINE)
    if match is None:
        raise ValueError("no 'seconds' line in the crawl summary")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT state, status, COUNT(*) FROM urls GROUP BY state, status").fetchall()
        samples = [f"{url}: {state} {status} {error}" for url, state, status, error in conn.execute(
            "SELECT url, state, status, error FROM urls WHERE state != 'done' OR status != 200 LIMIT 5")]
    ok = sum(n for state, status, n in rows if state == "done" and status == 200)
    pages = sum(n for _state, _status, n in rows)
    return {"pages": pages, "ok": ok, "errors": pages - ok, "crawl_seconds": float(match.group(1)),
            "states": {f"{state} {status}": n for state, status, n in rows}, "error_samples": samples}


def _scrapy_outcome(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError("no JSON line from scrapy_client.py")
    out = json.loads(lines[-1])
    return {k: out[k] for k in ("pages", "ok", "errors", "crawl_seconds", "statuses", "error_samples",
                                "settings", "stats", "slots", "version")}


def _crawl_progress_line(run: dict) -> str:
    head = f"round {run['round']} {run['client']:<18}"
    if "failed" in run:
        return f"{head} FAILED: {run['failed']}"
    errors = f", {run['errors']} ERRORS e.g. {run['error_samples'][:1]}" if run["errors"] else ""
    if run.get("repeated"):
        errors += f", {run['repeated']} page(s) fetched twice"
    if run.get("other_load_flag"):
        errors += f", OTHER LOAD on the machine ~{run['other_load']:.1f} cores"
    crawl_rate = f" ({run['crawl_pages_per_s']:,.0f} crawl only)" if run.get("crawl_pages_per_s") else ""
    return (f"{head} {run['ok']:,} pages in {run['seconds']:.2f} s: {run['pages_per_s']:7,.0f} pages/s"
            f"{crawl_rate}, {run['cpu_ms_per_page']:.3f} CPU ms/page, {run['peak_rss_mb']:.0f} MB, "
            f"server peak {run['server']['peak_per_host']}/host, site CPU {run['site_cpu_share']:.0%}{errors}")


def summarise_crawl(scenario: CrawlScenario, runs: list[dict], names: list[str]) -> dict[str, dict]:
    """Per crawler: medians over its good rounds, worst server peaks and summed errors over all rounds."""
    summary: dict[str, dict] = {}
    for name in names:
        mine = [r for r in runs if r["client"] == name]
        good = [r for r in mine if "failed" not in r]
        row = _summary_row(mine, good)
        row.update({
            "error_samples": [s for r in good for s in r.get("error_samples", [])][:5],
            "pages": _median([r["ok"] for r in good]),
            "crawl_pages_per_s": _median([r["crawl_pages_per_s"] for r in good if r.get("crawl_pages_per_s")]),
            "efficiency": None,
            "repeated": max((r.get("repeated", 0) for r in good), default=0),
        })
        summary[name] = row
    return _with_ratios(summary)


def crawl_table_lines(scenario: CrawlScenario, record: dict, markdown: bool = False) -> list[str]:
    summary = record["summary"]
    columns: list[Column] = [
        ("pages/s", lambda row: _fmt(row["pages_per_s"], ",.0f") + ("!" if row["errors"] else "")),
        ("crawl-only pages/s", lambda row: _fmt(row["crawl_pages_per_s"], ",.0f")),
        ("CPU ms/page", lambda row: _fmt(row["cpu_ms_per_page"], ".3f")),
        ("peak RSS MB", lambda row: _fmt(row["peak_rss_mb"], ".0f")),
        ("pages", lambda row: _fmt(row["pages"], ",.0f")),
        *_server_and_ratio_columns(scenario),
    ]
    rounds = max((r["rounds"] for r in summary.values()), default=0)
    legend = (f"  medians of {rounds} round(s); pages/s = pages / wall time of the whole command (start, imports, "
              "crawl, exit); crawl-only = the crawler's own clock; CPU = user + sys of the command's whole "
              "process tree (parse processes included) per page; peak RSS = its largest process; 'x niofetcher' = "
              "pages/s / niofetcher's")
    return _table_text(scenario, summary, columns, legend, markdown, _target_lines(scenario, summary))


def _listen_drops() -> int | None:
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


def _machine_busy() -> float | None:
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


def _progress_line(scenario: FetchScenario, run: dict) -> str:
    head = f"round {run['round']} {run['client']:<15}"
    if "failed" in run:
        return f"{head} FAILED: {run['failed']}"
    eff = f", efficiency {run['efficiency']:.3f}" if "efficiency" in run else ""
    errors = f", {run['errors']} ERRORS e.g. {run['error_samples'][:1]}" if run["errors"] else ""
    if run.get("incomplete"):
        errors += f", INCOMPLETE: deadline reached after {run['done']:,} of {run['pages']:,} pages"
        if run.get("watchdog"):
            errors += " (its loop did not stop by itself: ended by the watchdog)"
    if run["server"].get("listen_drops"):
        errors += f", listen queue overflows {run['server']['listen_drops']}"
    if run.get("other_load_flag"):
        errors += f", OTHER LOAD on the machine ~{run['other_load']:.1f} cores"
    return (f"{head} {run['pages_per_s']:9,.0f} pages/s, {run['cpu_ms_per_page']:.3f} CPU ms/page, "
            f"{run['peak_rss_mb']:.0f} MB, server peak {run['server']['peak_per_host']}/host "
            f"{run['server']['peak_total']} in all, site CPU {run['site_cpu_share']:.0%}{eff}{errors}")


# --------------------------------------------------------------------------- summary and table


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(scenario: FetchScenario, runs: list[dict], names: list[str]) -> dict[str, dict]:
    """Per client: medians over its good rounds, worst server peaks and summed errors over all rounds."""
    summary: dict[str, dict] = {}
    for name in names:
        mine = [r for r in runs if r["client"] == name]
        good = [r for r in mine if "failed" not in r]
        row = _summary_row(mine, good)
        row.update({
            "efficiency": _median([r["efficiency"] for r in good if "efficiency" in r]),
            "server_requests": [r["server"]["requests"] for r in good],
            "listen_drops": sum(r["server"].get("listen_drops") or 0 for r in mine),
            "incomplete": [f"{r['done']:,}/{r['pages']:,}" for r in good if r.get("incomplete")],
        })
        summary[name] = row
    return _with_ratios(summary)


def _summary_row(mine: list[dict], good: list[dict]) -> dict[str, Any]:
    """What every scenario's summary says of one client: ``mine`` are its rounds, ``good`` those that ran."""
    errors = sum(r["errors"] for r in good)
    return {
        "rounds": len(mine),
        "failed_rounds": len(mine) - len(good),
        "failures": [r["failed"] for r in mine if "failed" in r],
        "errors": errors,
        "pages_per_s": _median([r["pages_per_s"] for r in good]),
        "pages_per_s_all": [r["pages_per_s"] for r in good],
        "cpu_ms_per_page": _median([r["cpu_ms_per_page"] for r in good]),
        "peak_rss_mb": _median([r["peak_rss_mb"] for r in good]),
        "site_cpu_share": _median([r["site_cpu_share"] for r in good]),
        "peak_per_host": max((r["server"]["peak_per_host"] for r in mine), default=None),
        "peak_total": max((r["server"]["peak_total"] for r in mine), default=None),
        "accepted": _median([r["server"]["accepted"] for r in good]),
        "note": next((r["note"] for r in reversed(mine) if r.get("note")), ""),
        "other_load": max((r["other_load"] for r in mine if r.get("other_load_flag")), default=0.0),
        "clean": bool(good) and not errors and len(mine) == len(good),
    }


def _with_ratios(summary: dict[str, dict]) -> dict[str, dict]:
    """Each clean client's pages/s as a ratio to niofetcher's (None where either had errors)."""
    base = summary.get(BASELINE)
    for row in summary.values():
        if base is not None and base["clean"] and row["clean"] and base["pages_per_s"]:
            row["ratio"] = row["pages_per_s"] / base["pages_per_s"]
        else:
            row["ratio"] = None
    return summary


Column = tuple[str, Callable[[dict], str]]  # a table column: its title, and its cell from a summary row


def _fmt(value: float | None, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def table_lines(scenario: FetchScenario, record: dict, markdown: bool = False) -> list[str]:
    summary = record["summary"]
    columns: list[Column] = [
        ("pages/s", lambda row: _fmt(row["pages_per_s"], ",.0f") + ("!" if row["errors"] else "")),
        ("CPU ms/page", lambda row: _fmt(row["cpu_ms_per_page"], ".3f")),
        ("peak RSS MB", lambda row: _fmt(row["peak_rss_mb"], ".0f")),
        ("efficiency", lambda row: _fmt(row["efficiency"], ".3f")),
        *_server_and_ratio_columns(scenario),
    ]
    rounds = max((r["rounds"] for r in summary.values()), default=0)
    legend = (f"  medians of {rounds} round(s); server peaks are the worst round; 'x niofetcher' = client "
              "pages/s / niofetcher pages/s; site CPU = test-site process CPU / client wall time")
    return _table_text(scenario, summary, columns, legend, markdown,
                       _ceiling_lines(scenario, record) + _target_lines(scenario, summary))


def _server_and_ratio_columns(scenario: FetchScenario | CrawlScenario) -> list[Column]:
    return [
        ("server peak conns/host",
         lambda row: "-" if row["peak_per_host"] is None else f"{row['peak_per_host']} (limit {scenario.per_host})"),
        ("conns opened", lambda row: _fmt(row["accepted"], ".0f")),
        ("errors",
         lambda row: str(row["errors"]) + (f" +{row['failed_rounds']} failed" if row["failed_rounds"] else "")),
        ("x niofetcher", lambda row: _fmt(row["ratio"], ".2f")),
        ("site CPU", lambda row: _fmt(row["site_cpu_share"], ".0%")),
    ]


def _notes(scenario: FetchScenario | CrawlScenario, name: str, row: dict) -> list[str]:
    """What a reader must know about one client's row; each summary kind has its own keys."""
    notes = [row["note"]] if row["note"] else []
    if row["failed_rounds"]:
        notes.append(f"{row['failed_rounds']} round(s) FAILED: {row['failures'][0][:80]}")
    if row["errors"]:
        samples = row.get("error_samples")
        notes.append("HAS ERRORS: not comparable" + (f" ({'; '.join(samples[:2])})" if samples else ""))
    if row.get("repeated"):
        notes.append(f"{row['repeated']} page(s) fetched twice" + (
            " (the seed: Scrapy's start requests skip its duplicate filter)" if name.startswith("scrapy") else ""))
    if row.get("incomplete"):
        notes.append(f"stopped at the deadline in {len(row['incomplete'])} round(s) "
                     f"({', '.join(row['incomplete'])} pages): rate of the part done")
    if row["other_load"]:
        notes.append(f"other load on the machine up to ~{row['other_load']:.1f} cores")
    peak = row["peak_per_host"]
    if peak is not None and peak > scenario.per_host:
        if name.startswith("scrapy"):
            notes.append(f"more than {scenario.per_host} connections to one host: Scrapy's per-slot limit "
                         "counts requests, not sockets, and with the asyncio reactor its Twisted pool opened "
                         "extra ones (with the epoll reactor it stayed at the limit, but was slower)")
        else:
            notes.append(f"per-host limit {scenario.per_host} EXCEEDED")
    if row.get("listen_drops"):
        notes.append(f"{row['listen_drops']} listen-queue overflows on the machine meanwhile "
                     "(the site fell behind, or another program's did)")
    if isinstance(scenario, FetchScenario) and not row.get("incomplete"):
        extra = [n - scenario.gets for n in row["server_requests"] if n != scenario.gets]
        if extra:
            notes.append(f"server saw {max(extra):+d} requests")
    return notes


def _table_text(scenario: FetchScenario | CrawlScenario, summary: dict[str, dict], columns: list[Column],
                legend: str, markdown: bool, verdicts: list[tuple[str, bool | None]]) -> list[str]:
    """The table as text (padded columns, notes as footnotes) or Markdown, then the ceiling and target lines."""
    headers = ["client", *(title for title, _ in columns), "notes"]
    rows = []
    footnotes: list[str] = []
    for name, row in summary.items():
        notes = _notes(scenario, name, row)
        note_cell = "; ".join(notes) if markdown else f"[{len(footnotes) + 1}]" if notes else ""
        rows.append([name, *(cell(row) for _, cell in columns), note_cell])
        if notes and not markdown:
            footnotes.append(f"  [{len(footnotes) + 1}] {name}: " + "; ".join(notes))
    left = (0, len(headers) - 1)  # the client and the notes
    lines = [scenario.describe(), legend]
    if markdown:
        lines = [f"**{lines[0]}**", "", lines[1].strip(), ""]
        lines.append("| " + " | ".join(headers) + " |")
        lines.append("|" + "|".join("---" if i in left else "---:" for i in range(len(headers))) + "|")
        lines += ["| " + " | ".join(cells) + " |" for cells in rows]
        lines.append("")
    else:
        widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) if rows else len(headers[i])
                  for i in range(len(headers))]

        def fmt_row(cells: list[str]) -> str:
            return "  ".join(c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(cells))
        lines.append(fmt_row(headers))
        lines.append("  ".join("-" * w for w in widths))
        lines += [fmt_row(r) for r in rows]
        lines += footnotes
    for text, met in verdicts:
        mark = "" if met is None else ("MET     " if met else "MISSED  ")
        lines.append(("- " if markdown else "  ") + mark + text)
    return lines


def _ceiling_lines(scenario: FetchScenario, record: dict) -> list[tuple[str, bool | None]]:
    if not scenario.show_ceiling:
        return []
    wrk = record.get("wrk") or {}
    if wrk.get("available") and wrk.get("requests_per_s"):
        return [(f"site ceiling (wrk, {scenario.total} connections): {wrk['requests_per_s']:,.0f} requests/s", None)]
    clean = {n: r for n, r in record["summary"].items() if r["clean"]}
    if not clean:
        return [("site ceiling: unknown (wrk not installed and no clean client run)", None)]
    name, row = max(clean.items(), key=lambda item: item[1]["pages_per_s"])
    best = max(row["pages_per_s_all"])
    text = (f"site ceiling: wrk not installed; the fastest client ({name}) reached {best:,.0f} pages/s "
            f"with the site at {row['site_cpu_share']:.0%} of a core, so the ceiling is at least that")
    return [(text, None)]


def _target_lines(scenario: FetchScenario | CrawlScenario, summary: dict) -> list[tuple[str, bool | None]]:
    if scenario.targets is None or BASELINE not in summary:
        return []
    return scenario.targets(summary)


def _clean(summary: dict, name: str) -> dict | None:
    row = summary.get(name)
    return row if row is not None and row["clean"] else None


def _targets_a(summary: dict) -> list[tuple[str, bool | None]]:
    nio = _clean(summary, BASELINE)
    out: list[tuple[str, bool | None]] = []
    for peer, need in (("aiohttp", 1.3), ("aiohttp+uvloop", 1.0)):
        row = _clean(summary, peer)
        if nio is None or row is None:
            out.append((f"target A vs {peer} >= {need}x: not measured cleanly", None))
            continue
        ratio = nio["pages_per_s"] / row["pages_per_s"]
        out.append((f"target A: niofetcher / {peer} = {ratio:.2f} (target >= {need})", ratio >= need))
    return out


def _targets_b(summary: dict) -> list[tuple[str, bool | None]]:
    nio = _clean(summary, BASELINE)
    if nio is None:
        return [("target B: niofetcher did not run cleanly", False)]
    peers = {n: r["efficiency"] for n, r in summary.items()
             if n != BASELINE and r["clean"] and r["efficiency"] is not None}
    best_name, best = max(peers.items(), key=lambda kv: kv[1]) if peers else ("-", 0.0)
    eff = nio["efficiency"]
    limit_ok = nio["peak_per_host"] is not None and nio["peak_per_host"] <= 4
    return [
        (f"target B: niofetcher efficiency {eff:.3f} (target >= 0.97)", eff >= 0.97),
        (f"target B (fallback): beat the best peer's efficiency, {best_name} {best:.3f}", eff > best),
        (f"target B: server-counted peak per host {nio['peak_per_host']} (limit 4)", limit_ok),
    ]


def _targets_c(summary: dict) -> list[tuple[str, bool | None]]:
    nio = _clean(summary, BASELINE)
    if nio is None:
        return [("target C: niofetcher did not run cleanly", False)]
    out: list[tuple[str, bool | None]] = []
    curl = _clean(summary, "pycurl")
    if curl is None:
        out.append(("target C: pycurl not measured cleanly", None))
    else:
        text = (f"target C: niofetcher efficiency {nio['efficiency']:.3f} vs pycurl {curl['efficiency']:.3f} "
                "(target >= pycurl)")
        out.append((text, nio["efficiency"] >= curl["efficiency"]))
    aio = summary.get("aiohttp")
    if aio is None or aio["peak_rss_mb"] is None:
        out.append(("target C: aiohttp RSS not measured", None))
    else:
        text = (f"target C: niofetcher peak RSS {nio['peak_rss_mb']:.0f} MB vs aiohttp "
                f"{aio['peak_rss_mb']:.0f} MB (target below)")
        out.append((text, nio["peak_rss_mb"] < aio["peak_rss_mb"]))
    return out


def _crawl_target(summary: dict, mine: str, need: float, key: str) -> tuple[str, bool | None]:
    nio, scrapy = _clean(summary, mine), _clean(summary, "scrapy")
    if nio is None or scrapy is None:
        missing = " and ".join(n for n, r in ((mine, nio), ("scrapy", scrapy)) if r is None)
        return (f"target {key}: {mine} / scrapy >= {need}x: {missing} not measured cleanly", None if
                summary.get(mine) is None or summary.get("scrapy") is None else False)
    ratio = nio["pages_per_s"] / scrapy["pages_per_s"]
    return ((f"target {key}: {mine} / scrapy = {ratio:.2f} in pages/s ({nio['pages_per_s']:,.0f} vs "
             f"{scrapy['pages_per_s']:,.0f}; target >= {need})"), ratio >= need)


def _targets_d(summary: dict) -> list[tuple[str, bool | None]]:
    return [_crawl_target(summary, BASELINE, 3.0, "D")]


def _targets_e(summary: dict) -> list[tuple[str, bool | None]]:
    return [_crawl_target(summary, "niofetcher-lxml", 2.0, "E"), _crawl_target(summary, BASELINE, 1.0, "E")]


SCENARIOS: dict[str, Scenario] = {
    "A": FetchScenario("A", "throughput", hosts=1, per_host=64, total=64, gets=20_000, show_ceiling=True,
                       targets=_targets_a),
    "B": FetchScenario("B", "latency-bound", hosts=50, per_host=4, total=200, gets=10_000, delay_ms=50.0,
                       targets=_targets_b),
    "C": FetchScenario("C", "many connections", hosts=1, per_host=2000, total=2000, gets=20_000, delay_ms=200.0,
                       targets=_targets_c),
    "D": CrawlScenario("D", "crawl: `niofetcher crawl` of a generated site vs Scrapy", hosts=4,
                       pages_per_host=2500, per_host=16, total=64, page_size=4096, targets=_targets_d),
    "E": CrawlScenario("E", "real-page crawl vs Scrapy, each extractor", hosts=4, pages_per_host=2500,
                       per_host=16, total=64, corpus=True, targets=_targets_e),
}


# --------------------------------------------------------------------------- machine, files, chart


def machine() -> dict:
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


def chart(records: list[dict], path: str, stamp: str, info: dict) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no chart: matplotlib is not installed (pip install -e '.[bench]')")
        return None
    ran = [r for r in records if r.get("status") == "ran" and r.get("summary")]
    if not ran:
        return None
    fig, axes = plt.subplots(1, len(ran), figsize=(6.2 * len(ran), 4.2), squeeze=False)
    for ax, record in zip(axes[0], ran, strict=True):
        names = list(record["summary"])[::-1]
        rows = [record["summary"][n] for n in names]
        values = [r["pages_per_s"] or 0.0 for r in rows]
        lows = [v - min(r["pages_per_s_all"], default=v) for v, r in zip(values, rows, strict=True)]
        highs = [max(r["pages_per_s_all"], default=v) - v for v, r in zip(values, rows, strict=True)]
        colors = ["#c0392b" if not r["clean"] else ("#2e86c1" if n == BASELINE else "#95a5a6")
                  for n, r in zip(names, rows, strict=True)]
        ax.barh(names, values, xerr=[lows, highs], color=colors, capsize=3)
        for y, (v, r) in enumerate(zip(values, rows, strict=True)):
            label = f"{v:,.0f}" + ("" if r["clean"] else " (errors)")
            if r["efficiency"] is not None:
                label += f"  eff {r['efficiency']:.2f}"
            ax.text(max(r["pages_per_s_all"], default=v), y, "  " + label, va="center", fontsize=8)
        if record.get("ideal"):
            ax.axvline(record["ideal"], color="k", linestyle="--", linewidth=1)
            ax.text(record["ideal"], len(names) - 0.5, " ideal", fontsize=8, va="bottom")
        cfg = record["config"]
        title = record.get("chart_title") or (f"{record['key']}: {record['title']} ({cfg['hosts']} host(s), "
                                              f"{cfg['total']} conns, {cfg['delay_ms']:g} ms)")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("pages/s (median, min-max)")
        top = max([max(r["pages_per_s_all"], default=0.0) for r in rows] + [record.get("ideal") or 0])
        ax.set_xlim(0, top * 1.45 or 1)
    fig.suptitle(f"niofetcher vs peers — {stamp} — {info['cpu']}, {info['cores']} cores, Python {info['python']}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_results(records: list[dict], args: argparse.Namespace, info: dict, started: str) -> None:
    os.makedirs(RESULTS_DIR, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    stamp = started.replace(":", "").replace("-", "")[:15]
    data = {"date": started, "machine": info, "command": sys.argv[1:], "args": vars(args), "scenarios": records}
    for name in (f"compare-{stamp}{suffix}.json", f"{_latest_name(vars(args))}{suffix}.json"):
        with open(os.path.join(RESULTS_DIR, name), "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1, default=str)
    print(f"\nraw runs: {os.path.join(RESULTS_DIR, f'compare-{stamp}{suffix}.json')}")
    write_reports(data)


def _latest_name(args: dict) -> str:
    """``compare`` for a run of every scenario, ``compare-D`` for a run of D alone: one never overwrites the other."""
    key = str(args.get("scenario", "all")).upper()
    return "compare" if key == "ALL" else f"compare-{key}"


def replot(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    write_reports(data)
    return 0


def write_reports(data: dict) -> None:
    """The Markdown tables and the PNG chart of one raw-runs document."""
    records, info, started = data["scenarios"], data["machine"], data["date"]
    quick = bool(data["args"].get("quick"))
    suffix = "-quick" if quick else ""
    args = data["args"]
    command = " ".join(data["command"]) if "command" in data else (
        f"--scenario {str(args.get('scenario', 'all')).lower()} --rounds {args.get('rounds')}"
        + (" --quick" if quick else ""))
    md = [f"# niofetcher vs peers ({started})", "",
          f"Machine: {info['cpu']}, {info['cores']} cores, {info['platform']}, Python {info['python']}.  ",
          "Versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v) + ".  ",
          f"Command: `python benchmarks/compare.py {command}`", ""]
    for record in records:
        if record.get("status") == "ran":
            scenario = SCENARIOS[record["key"]]
            if quick:
                scenario = scenario.shrink(5)
            if isinstance(scenario, CrawlScenario):
                md += crawl_table_lines(scenario, record, markdown=True) + [""]
            else:
                md += table_lines(scenario, record, markdown=True) + [""]  # type: ignore[arg-type]
        else:
            md += [(f"**Scenario {record['key']}: {record['title']}** — {record.get('status')}: "
                    f"{record.get('reason', '')}"), ""]
    latest = _latest_name(args)
    md_path = os.path.join(RESULTS_DIR, f"{latest}{suffix}.md")
    with open(md_path, "w", encoding="utf-8") as out:
        out.write("\n".join(md) + "\n")
    png = chart(records, os.path.join(RESULTS_DIR, f"{latest}{suffix}.png"), started, info)
    print(f"tables:   {md_path}")
    if png:
        print(f"chart:    {png}")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="all", type=str.upper, choices=[*SCENARIOS, "ALL"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="GET counts and crawled pages / 5: a smoke check")
    parser.add_argument("--clients", type=lambda s: [c.strip() for c in s.split(",") if c.strip()], default=None,
                        help="comma-separated subset of: " + ", ".join(c.name for c in FETCH_CLIENTS)
                        + " (A-C); " + ", ".join(c.name for c in CRAWL_CLIENTS)
                        + " (D, E; the scrapy-* variants run only when named)")
    parser.add_argument("--deadline", type=float, default=None, metavar="S",
                        help="a client stops taking URLs after S s of fetching and its run is marked incomplete "
                             "(its rate is that of the part done), so that a very slow peer (httpx with "
                             "2,000 connections) costs S per round, not an hour (default 60, with --quick 5; "
                             "0 = none)")
    parser.add_argument("--run-timeout", type=float, default=600.0, metavar="S",
                        help="kill a client process after this long (default 600)")
    parser.add_argument("--profile", action="store_true",
                        help="after the rounds, one extra niofetcher run with its loop thread under cProfile "
                             "(not counted): prints the top costs, writes results/profile-<scenario>.pstats")
    parser.add_argument("--replot", metavar="RAW.json",
                        help="run nothing: rewrite the tables (.md) and the chart (.png) from a raw-runs JSON file")
    parser.add_argument("--no-write", action="store_true", help="print only; write nothing to benchmarks/results")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.deadline is None:
        args.deadline = 5.0 if args.quick else 60.0
    known = {c.name for c in FETCH_CLIENTS} | {c.name for c in CRAWL_CLIENTS}
    if args.clients and not set(args.clients) <= known:
        parser.error(f"unknown client(s): {', '.join(sorted(set(args.clients) - known))}")
    if args.clients and BASELINE not in args.clients:
        print(f"note: {BASELINE} is not among --clients, so there are no ratios")

    if args.replot:
        return replot(args.replot)
    started = _dt.datetime.now().isoformat(timespec="seconds")
    info = machine()
    print(f"niofetcher side-by-side benchmark, {started}")
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['platform']}, Python {info['python']}")
    keys = list(SCENARIOS) if args.scenario == "ALL" else [args.scenario]
    records = []
    for key in keys:
        scenario = SCENARIOS[key]
        if args.quick:
            scenario = scenario.shrink(5)
        records.append(scenario.run(args))
    if not args.no_write:
        write_results(records, args, info, started)
    # Non-zero when niofetcher itself failed or had errors: the smoke check's verdict.
    bad = [r["key"] for r in records if r.get("status") == "ran"
           and BASELINE in r["summary"] and not r["summary"][BASELINE]["clean"]]
    if bad:
        print(f"niofetcher had errors or failed in scenario(s) {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

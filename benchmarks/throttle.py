"""Politeness that listens (issue 28, item 4): the Throttle against servers that push back.

    python benchmarks/throttle.py                          # 20 s a client, every server
    python benchmarks/throttle.py --quick                  # a smoke check: 3 s a client
    python benchmarks/throttle.py --rates 20 --servers bucket --clients niofetcher-throttle,scrapy
    python benchmarks/throttle.py --duration 60 --trace    # every client's per-second trace

Servers, each a ``ThreadingHTTPServer`` on 127.0.0.1 in a process of its own
(this script run with ``--serve``), started fresh for every client and stopped
by its pid; every figure below is counted by the server:

bucket R   a token bucket of R requests/s with a burst of max(2, R/10): a
           request that finds a token gets 200 at once, any other gets 429 with
           ``Retry-After: 1``. R = 5, 20 and 100 (``--rates``).
latency    no limit, but each request takes 10 ms + 20 ms x the requests in
           service when it arrives (itself included), so the more a client asks
           at once the slower every answer: 30 ms alone, 90 ms with four at once.
           Throughput tends to 50/s however many are sent; a client that sends
           fewer at once loses little of it and gets much faster answers.

Clients, each for ``--duration`` seconds from the server's first request, with
a queue of more URLs than it can fetch (distinct paths) and
``--per-host`` connections (requests in service) to the one host:

niofetcher-throttle  ``NIOFetcher(FetcherConfig(max_connections_per_host=N, throttle=Throttle()))``,
                     in this process; ``host_stats()`` read every 100 ms for the delay
niofetcher           the same without a throttle: the baseline that does not listen
scrapy               a Spider in a subprocess (its own reactor) with AutoThrottle:
                     ``AUTOTHROTTLE_TARGET_CONCURRENCY`` = the Throttle's (1.0),
                     ``AUTOTHROTTLE_START_DELAY`` 0.5 (its default of 5 s would waste
                     the first quarter of the run), ``AUTOTHROTTLE_MAX_DELAY`` 60
                     (the Throttle's ``max_delay``), ``DOWNLOAD_DELAY`` 0 (the floor:
                     a known rate would be cheating), ``CONCURRENT_REQUESTS_PER_DOMAIN``
                     = N; retries off (the fetcher does not retry a 429 either: the
                     crawler does, later), robots.txt off, cookies off. Its slot's delay
                     is sampled every 100 ms.

Reported for the token bucket, over the run after ``--warmup`` seconds (5; 1 with
``--quick``): answers 200 per second ÷ R, the share of requests answered 429, and
the same ratio over the whole run; for the latency server: 200s per second, the
mean latency the server gave, the mean number of requests it had in service.
Then the goal of issue 28 for each rate: niofetcher with the throttle at >= 0.8
of R with <= 5 % 429s after the warm-up, and ahead of Scrapy on both figures
(a ratio at least Scrapy's and a share of 429s at most Scrapy's).
``--trace`` prints per second, per client: requests, 200s, 429s and the
client's delay at the end of that second (niofetcher-throttle's trace is always
printed). Everything goes to ``benchmarks/results/throttle-<date>.json``
(``-quick`` added with ``--quick``; ``--json FILE`` elsewhere, ``--no-write`` nowhere).
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import itertools
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
SCRIPT = os.path.abspath(__file__)
CLIENTS = ("niofetcher-throttle", "niofetcher", "scrapy")
SERVERS = ("bucket", "latency")
#: The latency server: base + per request in service (itself included), seconds.
LATENCY_BASE = 0.010
LATENCY_PER_REQUEST = 0.020
#: How often the clients' delays are sampled, seconds.
SAMPLE_EVERY = 0.1
#: The goal of issue 28, item 4.
GOAL_RATIO = 0.8
GOAL_429_SHARE = 0.05
BODY = b"x" * 512
#: Requests the Scrapy client keeps queued beyond those in flight.
SCRAPY_WAITING = 200


def burst_of(rate: float) -> float:
    """The token bucket's depth: a small burst, never under 2 so that jitter of a few ms is not a 429."""
    return max(2.0, rate / 10.0)


# --------------------------------------------------------------------------- the server's side


class BenchServer(ThreadingHTTPServer):
    """A token bucket or a load-dependent latency; notes (arrival, status, latency, in service) per request."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, kind: str, rate: float) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.kind = kind
        self.rate = rate
        self.burst = burst_of(rate)
        self.tokens = self.burst
        self.refilled_at: float | None = None
        self.in_service = 0
        self.records: list[tuple[float, int, float, int]] = []
        self.lock = threading.Lock()

    def admit(self, now: float) -> tuple[int, float, int]:
        """Status, latency and requests in service (this one included) for a request arriving ``now``."""
        with self.lock:
            self.in_service += 1
            in_service = self.in_service
            if self.kind == "latency":
                return 200, LATENCY_BASE + LATENCY_PER_REQUEST * in_service, in_service
            if self.refilled_at is not None:
                self.tokens = min(self.burst, self.tokens + (now - self.refilled_at) * self.rate)
            self.refilled_at = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return 200, 0.0, in_service
            return 429, 0.0, in_service

    def done(self) -> None:
        with self.lock:
            self.in_service -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client closing its keep-alive connections at its end (a reset) is no news.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as every client here uses it
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        server = cast(BenchServer, self.server)
        arrived = time.monotonic()
        status, latency, in_service = server.admit(arrived)
        try:
            if latency:
                time.sleep(latency)
            head = f"HTTP/1.1 {status} {'OK' if status == 200 else 'Too Many Requests'}\r\n"
            head += f"Content-Length: {len(BODY)}\r\nContent-Type: text/plain\r\n"
            if status == 429:
                head += "Retry-After: 1\r\n"
            # One write: headers and body apart would meet Nagle and delayed ACKs (40 ms on loopback).
            self.wfile.write(head.encode("ascii") + b"\r\n" + BODY)
        finally:
            server.done()
            server.records.append((arrived, status, latency, in_service))  # list.append: atomic under the GIL

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(kind: str, rate: float) -> None:
    """The server's process: print the port, serve until a line (or EOF) on stdin, print the records."""
    server = BenchServer(kind, rate)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    sys.stdout.write(json.dumps({"port": server.server_address[1], "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    sys.stdin.readline()
    server.shutdown()
    records = list(server.records)
    times = os.times()
    sys.stdout.write(json.dumps({"records": records, "cpu": times.user + times.system}) + "\n")
    sys.stdout.flush()
    # Daemon threads may still block on keep-alive reads: leave without waiting for them.
    os._exit(0)


class ServerProcess:
    """A server (``serve()``) in a subprocess of this script: its base URL, then its records."""

    def __init__(self, kind: str, rate: float) -> None:
        self.proc = subprocess.Popen([sys.executable, SCRIPT, "--serve", kind, "--rate", str(rate)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.kill()
            raise RuntimeError("the server exited before it listened")
        self.base = f"http://127.0.0.1:{json.loads(line)['port']}/"

    def finish(self) -> dict[str, Any]:
        """Stop the server; its records (``{"records": [[arrival, status, latency, in service], ...], "cpu"}``)."""
        try:
            out, _ = self.proc.communicate("quit\n", timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("the server did not stop within 30 s") from None
        reply: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return reply

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # by this Popen's pid: only the process this script started
            self.proc.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


# --------------------------------------------------------------------------- the clients


def urls(base: str) -> Iterator[str]:
    """An endless queue of distinct paths: more than any client can fetch in the run."""
    return (f"{base}item/{n}" for n in itertools.count())


def run_niofetcher(base: str, duration: float, per_host: int, throttled: bool,
                   target_concurrency: float) -> dict[str, Any]:
    """``duration`` s of niofetcher (with or without a Throttle) against ``base``; client-side figures."""
    from niofetcher import FetcherConfig, NIOFetcher, Throttle

    throttle = Throttle(target_concurrency=target_concurrency) if throttled else None
    config = FetcherConfig(max_connections_per_host=per_host, throttle=throttle)
    queue = urls(base)
    statuses: collections.Counter[str] = collections.Counter()
    elapsed: list[float] = []
    delays: list[tuple[float, float, int]] = []
    fetcher = NIOFetcher(config)
    fetcher.start()
    try:
        fetcher.register_many(itertools.islice(queue, 5000))
        started = time.monotonic()
        next_sample = started
        while (now := time.monotonic()) < started + duration:
            if fetcher.stats().pending < 2000:
                fetcher.register_many(itertools.islice(queue, 5000))
            for result in fetcher.get_batch(1000, timeout=SAMPLE_EVERY / 2):
                statuses[str(result.status) if result.status is not None else result.error or "none"] += 1
                elapsed.append(result.elapsed)
            if now >= next_sample:
                for stats in fetcher.host_stats().values():
                    delays.append((now, stats.delay, stats.backoffs))
                next_sample = now + SAMPLE_EVERY
    finally:
        fetcher.shutdown(wait=False)
    return {"statuses": dict(statuses), "client_mean_latency": sum(elapsed) / len(elapsed) if elapsed else None,
            "delays": delays, "config": {"max_connections_per_host": per_host,
                                         "throttle": None if throttle is None else repr(throttle)}}


def scrapy_settings(args: argparse.Namespace) -> dict[str, Any]:
    """AutoThrottle tuned as the module's docstring says."""
    return {
        "AUTOTHROTTLE_ENABLED": True,
        "AUTOTHROTTLE_TARGET_CONCURRENCY": args.target_concurrency,
        "AUTOTHROTTLE_START_DELAY": args.scrapy_start_delay,
        "AUTOTHROTTLE_MAX_DELAY": args.scrapy_max_delay,
        "DOWNLOAD_DELAY": 0,
        "CONCURRENT_REQUESTS": max(16, args.per_host),
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.per_host,
        "RETRY_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "MEMUSAGE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
        "HTTPERROR_ALLOW_ALL": True,  # 429s reach the callback, to be counted on this side too
        # Scrapy's own timer ends the crawl; the window is cut from the server's records anyway.
        "CLOSESPIDER_TIMEOUT": args.duration + 2,
    }


def scrapy_client(args: argparse.Namespace) -> None:
    """The Scrapy client's process (``--scrapy-client BASE``): crawl, then print one JSON line."""
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from twisted.internet import task

    queue = urls(args.scrapy_client)
    statuses: collections.Counter[str] = collections.Counter()
    latencies: list[float] = []
    delays: list[tuple[float, float, int]] = []

    class Endless(scrapy.Spider):  # type: ignore[misc,unused-ignore]  # scrapy is Any without the bench extra
        name = "endless"

        async def start(self) -> AsyncIterator[Any]:
            sampler = task.LoopingCall(self.sample)
            sampler.start(SAMPLE_EVERY)
            # An endless start() never gives the reactor a turn; instead each answer asks for the next
            # URL, so a constant SCRAPY_WAITING stay queued behind the ones in flight.
            for _ in range(SCRAPY_WAITING):
                yield self.next_request()

        def next_request(self) -> Any:
            return scrapy.Request(next(queue), callback=self.parse, errback=self.failed, dont_filter=True)

        def sample(self) -> None:
            engine = self.crawler.engine
            if engine is None:
                return
            for slot in list(engine.downloader.slots.values()):
                delays.append((time.monotonic(), float(slot.delay), 0))

        def parse(self, response: Any) -> list[object]:
            statuses[str(response.status)] += 1
            latency = response.meta.get("download_latency")
            if latency is not None:
                latencies.append(float(latency))
            return [self.next_request()]

        def failed(self, failure: Any) -> list[object]:
            statuses[type(failure.value).__name__] += 1
            return [self.next_request()]

    settings = scrapy_settings(args)
    process = CrawlerProcess(settings)
    process.crawl(Endless)
    process.start()
    line = {"statuses": dict(statuses), "delays": delays,
            "client_mean_latency": sum(latencies) / len(latencies) if latencies else None,
            "config": settings, "version": scrapy.__version__}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def run_scrapy(base: str, args: argparse.Namespace) -> dict[str, Any]:
    """The Scrapy client in a subprocess, killed by its pid if it overstays."""
    cmd = [sys.executable, SCRIPT, "--scrapy-client", base, "--duration", str(args.duration),
           "--per-host", str(args.per_host), "--target-concurrency", str(args.target_concurrency),
           "--scrapy-start-delay", str(args.scrapy_start_delay), "--scrapy-max-delay", str(args.scrapy_max_delay)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=args.duration + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"failed": f"Scrapy did not end within {args.duration + 60:g} s"}
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"failed": f"exit {proc.returncode}: {err.strip()[-500:]}"}
    reply: dict[str, Any] = json.loads(lines[-1])
    return reply


# --------------------------------------------------------------------------- figures


def analyse(records: list[list[float]], client: dict[str, Any], kind: str, rate: float,
            duration: float, warmup: float) -> dict[str, Any]:
    """The run's figures from the server's records, over [0, duration) from its first request."""
    if not records:
        return {"requests": 0, "failed": client.get("failed", "the server saw no request")}
    t0 = min(r[0] for r in records)
    window = [r for r in records if r[0] - t0 < duration]
    after = [r for r in window if r[0] - t0 >= warmup]
    span_after = duration - warmup

    def ok(rows: list[list[float]]) -> int:
        return sum(1 for r in rows if r[1] == 200)

    def refused(rows: list[list[float]]) -> int:
        return sum(1 for r in rows if r[1] == 429)

    per_second: list[dict[str, Any]] = []
    samples = sorted(client.get("delays", []))
    for second in range(int(duration + 0.999)):
        rows = [r for r in window if second <= r[0] - t0 < second + 1]
        # The delay the client had at the end of that second: its last sample before then.
        end = t0 + second + 1
        last = [s for s in samples if s[0] <= end]
        per_second.append({"second": second, "requests": len(rows), "ok": ok(rows), "429": refused(rows),
                           "delay": last[-1][1] if last else None, "backoffs": last[-1][2] if last else None})
    figures: dict[str, Any] = {
        "requests": len(window), "ok": ok(window), "429": refused(window),
        "requests_per_s_after": len(after) / span_after, "ok_per_s_after": ok(after) / span_after,
        "share_429_after": refused(after) / len(after) if after else 0.0,
        "ok_per_s": ok(window) / duration,
        "mean_latency_ms": 1000 * sum(r[2] for r in window) / len(window) if window else None,
        "mean_in_service": sum(r[3] for r in window) / len(window) if window else None,
        "client_mean_latency_ms": None if client.get("client_mean_latency") is None
        else 1000 * client["client_mean_latency"],
        "final_delay": samples[-1][1] if samples else None,
        # Only a Throttle counts backoffs; Scrapy's samples carry a 0 there.
        "backoffs": samples[-1][2] if samples and (client.get("config") or {}).get("throttle") else None,
        "per_second": per_second,
    }
    if kind == "bucket":
        figures["ratio_after"] = figures["ok_per_s_after"] / rate
        figures["ratio"] = figures["ok_per_s"] / rate
    return figures


def run_one(kind: str, rate: float, client: str, args: argparse.Namespace) -> dict[str, Any]:
    """One client against a fresh server."""
    with ServerProcess(kind, rate) as server:
        if client == "scrapy":
            seen = run_scrapy(server.base, args)
        else:
            # A margin past the window: the window starts at the first request, a moment after start().
            seen = run_niofetcher(server.base, args.duration + 0.5, args.per_host, client == "niofetcher-throttle",
                                  args.target_concurrency)
        done = server.finish()
    figures = analyse(done["records"], seen, kind, rate, args.duration, args.warmup)
    return {"server": kind, "rate": rate if kind == "bucket" else None, "client": client,
            "client_statuses": seen.get("statuses"), "client_config": seen.get("config"),
            "failed": seen.get("failed"), "server_cpu": done.get("cpu"), **figures}


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def print_trace(run: dict[str, Any]) -> None:
    server = f"bucket {run['rate']:g}/s" if run["rate"] else "latency server"
    label = f"{run['client']} vs {server}"
    print(f"  trace, {label}: second: requests/200s/429s, delay at its end (s)")
    cells = []
    for row in run.get("per_second", []):
        delay = "—" if row["delay"] is None else f"{row['delay']:.3f}"
        cells.append(f"{row['second']:>3}: {row['requests']:>5}/{row['ok']:>4}/{row['429']:>5} d={delay}")
    for i in range(0, len(cells), 4):
        print("    " + "   ".join(cells[i:i + 4]))


def report(runs: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """Print the tables and the goal's verdicts; the verdict lines."""
    bucket = [r for r in runs if r["server"] == "bucket"]
    latency = [r for r in runs if r["server"] == "latency"]
    if bucket:
        print(f"\nToken bucket (burst max(2, R/10); 429 with Retry-After: 1 above the rate), {args.duration:g} s a "
              f"client, {args.per_host} per host; figures after the first {args.warmup:g} s unless said")
        print(f"| {'allowed':>7} | {'client':<19} | {'req/s':>7} | {'200/s':>6} | {'200/s ÷ allowed':>15} | "
              f"{'429 share':>9} | {'whole run ÷ allowed':>19} | {'backoffs':>8} | {'last delay s':>12} |")
        print(f"|{'-' * 8}:|{'-' * 21}|{'-' * 8}:|{'-' * 7}:|{'-' * 16}:|{'-' * 10}:|{'-' * 20}:|{'-' * 9}:|"
              f"{'-' * 13}:|")
        for r in bucket:
            if r.get("requests", 0) == 0:
                print(f"| {r['rate']:>5g}/s | {r['client']:<19} | failed: {r.get('failed')}")
                continue
            print(f"| {r['rate']:>5g}/s | {r['client']:<19} | {r['requests_per_s_after']:>7.1f} | "
                  f"{r['ok_per_s_after']:>6.1f} | {r['ratio_after']:>15.2f} | {100 * r['share_429_after']:>8.1f}% | "
                  f"{r['ratio']:>19.2f} | {fmt(r['backoffs'], 'd'):>8} | {fmt(r['final_delay'], '.3f'):>12} |")
    if latency:
        print(f"\nLatency server ({1000 * LATENCY_BASE:g} ms + {1000 * LATENCY_PER_REQUEST:g} ms per request in "
              f"service), {args.duration:g} s a client, {args.per_host} per host; whole run")
        print(f"| {'client':<19} | {'200/s':>6} | {'mean latency ms':>15} | {'client-side ms':>14} | "
              f"{'mean in service':>15} | {'last delay s':>12} |")
        print(f"|{'-' * 21}|{'-' * 7}:|{'-' * 16}:|{'-' * 15}:|{'-' * 16}:|{'-' * 13}:|")
        for r in latency:
            if r.get("requests", 0) == 0:
                print(f"| {r['client']:<19} | failed: {r.get('failed')}")
                continue
            print(f"| {r['client']:<19} | {r['ok_per_s']:>6.1f} | {fmt(r['mean_latency_ms'], '.1f'):>15} | "
                  f"{fmt(r['client_mean_latency_ms'], '.1f'):>14} | {fmt(r['mean_in_service'], '.2f'):>15} | "
                  f"{fmt(r['final_delay'], '.3f'):>12} |")
    verdicts = []
    for rate in args.rates:
        ours = next((r for r in bucket if r["rate"] == rate and r["client"] == "niofetcher-throttle"), None)
        theirs = next((r for r in bucket if r["rate"] == rate and r["client"] == "scrapy"), None)
        if ours is None or not ours.get("requests"):
            continue
        goal = ours["ratio_after"] >= GOAL_RATIO and ours["share_429_after"] <= GOAL_429_SHARE
        line = (f"goal at {rate:g}/s: niofetcher-throttle {ours['ratio_after']:.2f} of the rate, "
                f"{100 * ours['share_429_after']:.1f}% 429s: {'MET' if goal else 'MISSED'} "
                f"(>= {GOAL_RATIO} with <= {100 * GOAL_429_SHARE:g}%)")
        if theirs is not None and theirs.get("requests"):
            ahead = (ours["ratio_after"] >= theirs["ratio_after"]
                     and ours["share_429_after"] <= theirs["share_429_after"])
            line += (f"; Scrapy {theirs['ratio_after']:.2f}, {100 * theirs['share_429_after']:.1f}%: "
                     f"{'ahead' if ahead else 'NOT ahead'} of Scrapy on both")
        verdicts.append(line)
    ours_l = next((r for r in latency if r["client"] == "niofetcher-throttle" and r.get("requests")), None)
    theirs_l = next((r for r in latency if r["client"] == "scrapy" and r.get("requests")), None)
    if ours_l and theirs_l:
        verdicts.append(f"latency server: niofetcher-throttle {ours_l['ok_per_s']:.1f}/s at "
                        f"{ours_l['mean_latency_ms']:.1f} ms, Scrapy {theirs_l['ok_per_s']:.1f}/s at "
                        f"{theirs_l['mean_latency_ms']:.1f} ms")
    if verdicts:
        print()
        for line in verdicts:
            print(line)
    print()
    for r in runs:
        if r.get("requests") and (args.trace or r["client"] == "niofetcher-throttle"):
            print_trace(r)
    return verdicts


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "load": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=None, help="seconds a client (20; 3 with --quick)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="seconds left out of the 'after' figures (5; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a smoke check: 3 s a client")
    parser.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",") if x.strip()], default=[5, 20, 100],
                        help="the token bucket's rates, requests/s (default 5,20,100)")
    parser.add_argument("--servers", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                        default=list(SERVERS), help="comma-separated subset of: " + ", ".join(SERVERS))
    parser.add_argument("--clients", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                        default=list(CLIENTS), help="comma-separated subset of: " + ", ".join(CLIENTS))
    parser.add_argument("--per-host", type=int, default=4, help="connections / requests in service to the host")
    parser.add_argument("--target-concurrency", type=float, default=1.0,
                        help="Throttle(target_concurrency) and AUTOTHROTTLE_TARGET_CONCURRENCY (1.0)")
    parser.add_argument("--scrapy-start-delay", type=float, default=0.5)
    parser.add_argument("--scrapy-max-delay", type=float, default=60.0)
    parser.add_argument("--trace", action="store_true", help="print every client's per-second trace")
    parser.add_argument("--json", metavar="FILE", help="write the results here instead of benchmarks/results/")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--scrapy-client", metavar="BASE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.rate)
        return 0
    if args.duration is None:
        args.duration = 3.0 if args.quick else 20.0
    if args.warmup is None:
        args.warmup = 1.0 if args.quick else 5.0
    if args.scrapy_client:
        scrapy_client(args)
        return 0
    if not 0 <= args.warmup < args.duration:
        parser.error("--warmup must be at least 0 and under --duration")
    if not set(args.clients) <= set(CLIENTS) or not set(args.servers) <= set(SERVERS):
        parser.error("unknown client or server")
    if "scrapy" in args.clients:
        try:
            import scrapy  # noqa: F401
        except ImportError:
            print("scrapy is not installed: its runs are skipped")
            args.clients = [c for c in args.clients if c != "scrapy"]

    started = _dt.datetime.now()
    info = machine()
    print(f"throttle benchmark, {started.isoformat(timespec='seconds')}; {info['cpu']}, {info['cores']} cores, "
          f"Python {info['python']}")
    plan = [("bucket", rate) for rate in args.rates if "bucket" in args.servers]
    plan += [("latency", 0.0)] if "latency" in args.servers else []
    runs = []
    for kind, rate in plan:
        for client in args.clients:
            label = f"bucket {rate:g}/s" if kind == "bucket" else "latency"
            print(f"  {label:<14} {client} ...", flush=True)
            runs.append(run_one(kind, rate, client, args))
    verdicts = report(runs, args)
    if not args.no_write:
        path = args.json or os.path.join(
            RESULTS, f"throttle-{started.strftime('%Y%m%dT%H%M%S')}{'-quick' if args.quick else ''}.json")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        settings = {k: v for k, v in vars(args).items() if k not in ("serve", "rate", "scrapy_client")}
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"started": started.isoformat(timespec="seconds"), "machine": info, "args": settings,
                       "verdicts": verdicts, "runs": runs}, out, indent=1)
        print(f"\nwritten: {os.path.relpath(path)}")
    failed = [r for r in runs if r["client"].startswith("niofetcher") and not r.get("requests")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""A broad crawl: many hosts, links mostly between them, every connection meant to be busy.

    python benchmarks/broad.py                                  # 1,000 hosts, 20,000 pages (a quick run)
    python benchmarks/broad.py --hosts 10000 --pages 3000000 --max-pages 1000000   # the issue's broad crawl
    python benchmarks/broad.py --json broad.json                # the figures below, and the samples, in a file

A ``SyntheticWeb`` (Zipf-like host sizes, most links to other hosts, a delay
per response) runs in its own process; the crawler reaches its host names
through ``FetcherConfig(resolve=...)`` and crawls from host 0's ``/``, until
``--max-pages`` when given.  A crawl of a whole Zipf-sized web ends on its
biggest host alone (a tenth of the pages at 10,000 hosts, fetched two at a
time): politeness, not the crawler, sets the pace of that tail, so a crawl
meant to show the steady state stops at a budget of a third of the web.

Every ``--sample`` seconds it prints pages/s over the interval, connections
open (the fetcher's ``open_connections`` against ``max_connections``; an idle
keep-alive connection counts) and busy (its ``in_flight`` requests, each on a
connection, against the same), the frontier (URLs waiting, and URLs known:
done, failed, waiting and in progress), the CPU over the interval of this
process and of the parse processes (100% is one core) and the RSS of both
(the crawler's without the pages of the frontier file it reads through a
mapping: see ``private_mb``).

At the end: pages/s overall and in each half of the crawl against the ideal
(``max_connections / delay``), the means of the connection samples, the RSS
of this process at the first sample past 10% of the pages, at the last
(flat or growing) and at most, the parse processes' peak RSS, and, counted by the server,
the peak connections of any one host name. Then CPU seconds (user + system)
by stage, each against the wall time of the crawl: this process's threads by
name (the fetcher's loop, the coordinator, the pump, the delivery threads,
the resolver, the hand-off to the parse processes, this sampler, the rest as
"other", which includes threads that ended between two CPU samples), the
parse processes summed, and the web's process; then this process's total
against the wall time and the cores, and how busy the whole machine was (it
may be shared). A thread's or a process's CPU is read every ``--cpu-sample``
seconds while it lives, and its last figure kept.

No assertions: this measures, the tests judge.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import Any

import psutil

from niofetcher import CrawlConfig, Crawler, FetcherConfig
from niofetcher.crawl.config import CrawlSummary
from niofetcher.testing import SyntheticWeb

# Thread names (a prefix, or the whole name) → the stage they are counted in; first match wins.
STAGES = [
    ("niofetcher-loop", "fetcher loop"),
    ("crawl", "coordinator"),
    ("niofetcher-crawl-pump", "pump"),
    ("niofetcher-crawl-deliver-", "delivery"),
    ("niofetcher-resolver-", "resolver"),
    ("niofetcher-parse-", "parse hand-off"),  # the writers and the reader of the parse processes' pipes
    ("niofetcher-crawl-parse", "parse threads"),  # --parse-mode thread
    ("niofetcher-frontier-log", "frontier log"),  # the SQLite frontier's checkpoints
    ("MainThread", "sampler"),
]
OTHER = "other"


def stage_of(name: str) -> str:
    """The stage a thread of this name is counted in."""
    return next((stage for prefix, stage in STAGES if name.startswith(prefix)), OTHER)


def cpu_of(process: Any) -> float:
    """User plus system seconds of a ``psutil.Process`` (not of its children)."""
    times = process.cpu_times()
    return float(times.user + times.system)


def thread_cpu(me: Any) -> dict[int, float]:
    """User plus system seconds of each live thread of a ``psutil.Process``, by native id."""
    return {entry.id: entry.user_time + entry.system_time for entry in me.threads()}


class Threads:
    """CPU seconds of this process's threads by native id, from a baseline, the last figure kept after a thread ends."""

    def __init__(self, me: psutil.Process) -> None:
        self.me = me
        self.names: dict[int, str] = {}
        self.baseline = thread_cpu(me)
        self.last: dict[int, float] = {}

    def sample(self) -> None:
        """Read every live thread's CPU; name the ones ``threading`` knows."""
        self.names.update((t.native_id, t.name) for t in threading.enumerate() if t.native_id is not None)
        for tid, seconds in thread_cpu(self.me).items():
            self.last[tid] = seconds - self.baseline.get(tid, 0.0)

    def by_stage(self, total: float) -> dict[str, tuple[int, float]]:
        """(threads, CPU seconds) per stage; ``other`` takes what ``total`` has beyond the named threads."""
        stages: dict[str, tuple[int, float]] = defaultdict(lambda: (0, 0.0))
        for tid, seconds in self.last.items():
            stage = stage_of(self.names.get(tid, ""))
            count, sofar = stages[stage]
            stages[stage] = (count + 1, sofar + seconds)
        count, named = stages[OTHER]
        stages[OTHER] = (count, named + total - sum(seconds for _, seconds in stages.values()))
        return dict(stages)


class Processes:
    """CPU seconds and RSS of a set of processes that come and go: the last figure per pid, the peak RSS."""

    def __init__(self, baseline: Iterable[psutil.Process] = ()) -> None:
        self.baseline = {p.pid: cpu_of(p) for p in baseline}
        self.last: dict[int, float] = {}
        self.rss = 0  # of all of them at the last sample
        self.peak_rss = 0  # of any one
        self.peak_total_rss = 0  # of all of them at one sample

    def sample(self, processes: Iterable[psutil.Process]) -> None:
        """Read the CPU and the RSS of those of ``processes`` still alive."""
        self.rss = 0
        for process in processes:
            try:
                with process.oneshot():
                    seconds, rss = cpu_of(process), process.memory_info().rss
            except psutil.NoSuchProcess:  # it ended since it was listed
                continue
            self.last[process.pid] = seconds - self.baseline.get(process.pid, 0.0)
            self.rss += rss
            self.peak_rss = max(self.peak_rss, rss)
        self.peak_total_rss = max(self.peak_total_rss, self.rss)

    @property
    def cpu(self) -> float:
        """CPU seconds of them all."""
        return sum(self.last.values())


def serve(options: dict[str, Any], pipe: Connection) -> None:
    """The web's process: send (resolve, seed URL, its pid), serve until told, send the server's figures."""
    with SyntheticWeb(**options, max_seconds=None) as web:
        pipe.send((web.resolve, web.base_urls[0], os.getpid()))
        pipe.recv()
        peaks = web.peak_connections()
        pipe.send({"requests": sum(web.requested_urls().values()), "hosts_asked": len(peaks),
                   "peak_per_host": max(peaks.values(), default=0)})


def family(pid: int) -> list[psutil.Process]:
    """A process and its descendants."""
    process = psutil.Process(pid)
    return [process, *process.children(recursive=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1_000)
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--max-pages", type=int, help="the crawl's page budget (default: the whole web)")
    parser.add_argument("--ports", type=int, default=4)
    parser.add_argument("--zipf", type=float, default=1.0, help="exponent of the host sizes")
    parser.add_argument("--links", type=int, default=10, help="links per page")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="per response")
    parser.add_argument("--max-connections", type=int, default=256)
    parser.add_argument("--per-host", type=int, default=2, help="max_connections_per_host")
    parser.add_argument("--parse-mode", choices=["process", "thread"], default="process")
    parser.add_argument("--extractor", default="lxml")
    parser.add_argument("--sample", type=float, default=2.0, help="seconds between printed samples")
    parser.add_argument("--cpu-sample", type=float, default=0.5, help="seconds between readings of CPU and RSS")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="FILE", help="write the summary and the samples here")
    args = parser.parse_args()

    options = {"hosts": args.hosts, "pages": args.pages, "ports": args.ports, "zipf": args.zipf,
               "links_per_page": args.links, "delay": args.delay_ms / 1000, "seed": args.seed}
    parent, child = multiprocessing.Pipe()
    web = multiprocessing.get_context("spawn").Process(target=serve, args=(options, child), daemon=True)
    web.start()
    resolve, seed, web_pid = parent.recv()
    me = psutil.Process()
    # Children now are the web and multiprocessing's resource tracker; the parse processes come later.
    before = {p.pid for p in me.children(recursive=True)}
    with tempfile.TemporaryDirectory() as folder:
        fetcher = FetcherConfig(resolve=resolve, max_connections=args.max_connections,
                                max_connections_per_host=args.per_host)
        config = CrawlConfig(seeds=[seed], db_path=os.path.join(folder, "broad.sqlite"), allowed_domains=["web.test"],
                             parse_mode=args.parse_mode, extractor=args.extractor, fetcher=fetcher,
                             max_pages=args.max_pages)
        crawler = Crawler(config)
        result: list[CrawlSummary] = []
        thread = threading.Thread(target=lambda: result.append(crawler.run()), name="crawl")
        print(f"{args.hosts:,} hosts, {args.pages + args.hosts:,} URLs, {args.delay_ms:g} ms a response, "
              f"{args.max_connections} connections, {args.per_host} per host, {psutil.cpu_count()} cores")
        print(f"{'s':>6} {'pages':>9} {'pages/s':>8} {'open':>5} {'busy':>5} {'waiting':>9} {'known':>9} "
              f"{'CPU':>5} {'parse':>5} {'RSS MB':>6} {'parse':>5}")
        threads, parsers = Threads(me), Processes()
        server_cpu = Processes(family(web_pid))
        machine = psutil.cpu_times()
        mine = cpu_of(me)
        started = time.monotonic()
        thread.start()
        samples: list[dict[str, Any]] = []
        last = {"s": 0.0, "pages": 0, "cpu": 0.0, "parse_cpu": 0.0}
        while thread.is_alive():
            next_sample = last["s"] + args.sample
            while thread.is_alive() and time.monotonic() - started < next_sample:
                thread.join(min(args.cpu_sample, max(0.0, next_sample - (time.monotonic() - started))))
                threads.sample()
                parsers.sample(p for p in me.children(recursive=True) if p.pid not in before)
            server_cpu.sample(family(web_pid))
            progress = crawler.progress()
            now, done = time.monotonic() - started, progress.done + progress.errors
            cpu = cpu_of(me) - mine
            interval = now - last["s"]
            sample = {
                "s": now, "pages": done, "pages_per_s": (done - last["pages"]) / interval,
                "open": progress.open_connections / args.max_connections,
                "busy": progress.fetching / args.max_connections,
                "waiting": progress.waiting, "known": done + progress.waiting + progress.in_flight,
                "cpu": cpu, "parse_cpu": parsers.cpu,
                "cpu_share": (cpu - last["cpu"]) / interval, "parse_cpu_share": (parsers.cpu - last["parse_cpu"]) / interval,
                "rss_mb": private_mb(me), "parse_rss_mb": parsers.rss / 2**20,
            }
            samples.append(sample)
            last = sample
            print(f"{now:6.1f} {done:9,} {sample['pages_per_s']:8,.0f} {sample['open']:5.0%} {sample['busy']:5.0%} "
                  f"{progress.waiting:9,} {sample['known']:9,} {sample['cpu_share']:5.0%} "
                  f"{sample['parse_cpu_share']:5.0%} {sample['rss_mb']:6.0f} {sample['parse_rss_mb']:5.0f}")
        threads.sample()  # the crawl's threads have ended; what they did since the last reading is in "other"
        server_cpu.sample(family(web_pid))
        crawler_cpu = cpu_of(me) - mine
        machine_busy = busy_share(machine, psutil.cpu_times())
        parent.send("stop")
        server = parent.recv()
    web.join(10)
    summary = summarize(args, samples, result[0] if result else None, server)
    summary["machine_busy"] = machine_busy
    summary["cpu"] = cpu_table(threads.by_stage(crawler_cpu), parsers, server_cpu, crawler_cpu, summary["seconds"])
    summary["parse_peak_rss_mb"] = parsers.peak_rss / 2**20
    summary["parse_peak_total_rss_mb"] = parsers.peak_total_rss / 2**20
    print_summary(args, summary)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"args": vars(args), "summary": summary, "samples": samples}, out, indent=1)
            out.write("\n")


def private_mb(process: psutil.Process) -> float:
    """The process's resident memory less the pages it shares with the kernel's page cache: the
    frontier file that SQLite reads through a mapping shows in the RSS as far as it is read, and
    the kernel takes those pages back whenever it wants them, so they are not the crawler's."""
    memory = process.memory_info()
    return float(memory.rss - memory.shared) / 2**20


def busy_share(before: Any, after: Any) -> float:
    """The share of the machine's CPU time, all cores, that was not idle between two ``psutil.cpu_times()``."""
    spent = {field: getattr(after, field) - getattr(before, field) for field in after._fields}
    idle = spent["idle"] + spent.get("iowait", 0.0)
    return 1 - idle / sum(spent.values()) if sum(spent.values()) else 0.0


def summarize(args: argparse.Namespace, samples: list[dict[str, Any]], crawl: CrawlSummary | None,
              server: dict[str, Any]) -> dict[str, Any]:
    """The figures of the run from its samples: pages/s overall and by half, connections, RSS."""
    elapsed, total = samples[-1]["s"], samples[-1]["pages"]
    half = total / 2
    middle = next(s["s"] for s in samples if s["pages"] >= half)
    early = next(s for s in samples if s["pages"] >= total / 10)
    return {
        "pages": total, "seconds": elapsed, "pages_per_s": total / elapsed,
        "ideal_pages_per_s": args.max_connections / (args.delay_ms / 1000) if args.delay_ms else None,
        "first_half_pages_per_s": half / middle,
        "second_half_pages_per_s": (total - half) / (elapsed - middle) if elapsed > middle else None,
        "samples": len(samples),
        "open_mean": statistics.fmean(s["open"] for s in samples),
        "busy_mean": statistics.fmean(s["busy"] for s in samples),
        "rss_mb_at_10pct": early["rss_mb"], "rss_mb_at_10pct_s": early["s"], "rss_mb_last": samples[-1]["rss_mb"],
        "rss_mb_peak": max(s["rss_mb"] for s in samples),
        "server": server,
        "crawl_counts": crawl.counts if crawl is not None else None,
        "crawl_errors": crawl.errors if crawl is not None else None,
    }


def cpu_table(stages: dict[str, tuple[int, float]], parsers: Processes, server: Processes, crawler: float,
              wall: float) -> dict[str, Any]:
    """CPU seconds (and how many threads or processes) by stage, in the order of ``STAGES``, then the totals.

    Every stage has its row, zero or not (the delivery threads run only for an ``on_page`` or an
    output, and this crawl has neither), so that the rows of two runs line up.
    """
    rows: dict[str, dict[str, float]] = {}
    for stage in [stage for _, stage in STAGES] + [OTHER]:
        count, seconds = stages.get(stage, (0, 0.0))
        rows[stage] = {"count": count, "cpu_s": seconds}
    rows["parse processes"] = {"count": len(parsers.last), "cpu_s": parsers.cpu}
    rows["web server"] = {"count": len(server.last), "cpu_s": server.cpu}
    for row in rows.values():
        row["share_of_wall"] = row["cpu_s"] / wall
    return {"stages": rows, "crawler_process_cpu_s": crawler, "crawler_process_share_of_wall": crawler / wall,
            "cores": psutil.cpu_count()}


def print_summary(args: argparse.Namespace, s: dict[str, Any]) -> None:
    """The summary, as lines for a reader."""
    ideal = f"{s['ideal_pages_per_s']:,.0f}" if s["ideal_pages_per_s"] is not None else "unbounded"
    second = s["second_half_pages_per_s"]
    print(f"\n{s['pages']:,} pages in {s['seconds']:.1f} s: {s['pages_per_s']:,.0f} pages/s (ideal {ideal})")
    print(f"first half {s['first_half_pages_per_s']:,.0f} pages/s, second half "
          f"{f'{second:,.0f}' if second is not None else '-'} pages/s")
    print(f"connections of {args.max_connections}, mean of {s['samples']} samples: open {s['open_mean']:.0%}, "
          f"busy {s['busy_mean']:.0%}")
    print(f"RSS of the crawler {s['rss_mb_at_10pct']:.0f} MB at {s['rss_mb_at_10pct_s']:.0f} s (10% of the pages), "
          f"{s['rss_mb_last']:.0f} MB at the end (at most {s['rss_mb_peak']:.0f}); parse processes at most {s['parse_peak_rss_mb']:.0f} MB each, "
          f"{s['parse_peak_total_rss_mb']:.0f} MB together")
    server = s["server"]
    print(f"server: {server['requests']:,} requests, {server['hosts_asked']:,} host names, "
          f"at most {server['peak_per_host']} connections to one of them")
    if s["crawl_counts"] is not None:
        print(f"crawl: {s['crawl_counts']}, errors {s['crawl_errors']}")
    cpu = s["cpu"]
    print(f"\n{'CPU by stage':<18} {'n':>3} {'CPU s':>8} {'of wall':>8}")
    for stage, row in cpu["stages"].items():
        print(f"{stage:<18} {row['count']:>3} {row['cpu_s']:8.1f} {row['share_of_wall']:8.0%}")
    print(f"crawler process: {cpu['crawler_process_cpu_s']:.1f} CPU s in {s['seconds']:.1f} s, "
          f"{cpu['crawler_process_share_of_wall']:.0%} of one core (of {cpu['cores']}); "
          f"the machine was {s['machine_busy']:.0%} busy, all processes")


if __name__ == "__main__":
    main()

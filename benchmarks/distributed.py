"""N crawl workers on one PostgreSQL: how pages/s scales, and what each page costs the database.

    python benchmarks/distributed.py                        # 1, 2 and 4 workers, 200 hosts, 50 ms a response
    python benchmarks/distributed.py --quick                # a short run (40 hosts)
    python benchmarks/distributed.py --workers 1,2 --json distributed.json

One throwaway PostgreSQL (``niofetcher.testing.PostgresCluster``) serves every run; each run is a
new crawl (its own schema) of a new ``TestSite`` in a process of its own: ``--hosts`` ports, one
per host, ``--pages`` pages each, ``--delay-ms`` per response.  The workers are ``niofetcher crawl
--frontier ... --crawl NAME`` processes (``--parse-mode thread``: one process each), all given
every host's ``/`` as seeds, with ``--connections`` each and ``--per-host``: a worker's
connections are its limit (200 hosts x 2 per host is far more than 16), so N workers should
fetch N times as fast until something shared binds.

*Durable commits.*  The cluster runs with ``fsync``, ``synchronous_commit`` and
``full_page_writes`` on (``--no-fsync`` for the tests' settings): every commit waits for the
disk, as in production, so the figures are the honest ones.

What it reports, per run:

* **pages/s**: pages ``done`` in the database over the server's span (first request's arrival
  to the last one's response), and over the wall time (start of the workers to the last exit,
  which includes their start-up and the end of the crawl being noticed);
* **CPU**: each worker's user + system seconds (psutil, read every 0.1 s while it lives, the last
  figure kept), and the database's: the postmaster's own and its reaped children's
  (``children_user``/``children_system``: backends that ended) plus its live children's;
* **statements per page**: calls counted by ``pg_stat_statements`` (preloaded in the cluster
  with ``-c shared_preload_libraries``; top-level statements, BEGIN and COMMIT included), and
  transactions per page (``pg_stat_database.xact_commit``);
* **round trips per page**: the workers reach the database through a relay in this process that
  counts, per connection, each burst from the client that follows an answer from the server
  (statements pipelined together count once); ``--no-relay`` connects them directly;
* **the per-host limit**, counted by the site: the most requests any host had in service at
  once (each from its arrival to its response, ``delay`` later), against ``--per-host``,
  printed as a check; and the most connections any host had open at once.

Then an estimate of how many such workers one PostgreSQL serves before it binds: its CPU per
page, extrapolated to every core of this machine (as if it had them to itself and scaled
linearly), and its durable commits/s (a short burst of one-row transactions from several
connections: the commit path alone) over the transactions a page costs, the smaller of the two,
set against one worker's pages/s (the one-worker run's).  A page costs the database less the
more workers share it (part of its cost is by time: renewals, idle claims, background
processes), so the estimate is a range, from the runs' dearest page and their cheapest.

No assertions: this measures, the tests judge.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psutil
import psycopg

from niofetcher.extractor_names import EXTRACTORS
from niofetcher.testing import PostgresCluster, TestSite

ROBOTS = "/robots.txt"
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
STATS = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "top",
         "max_connections": "50"}


# --------------------------------------------------------------------------- the site's process


def serve_site(options: dict[str, Any], pipe: Connection) -> None:
    """The site's process: send (base URLs, pid), serve until told, send what the server counted."""
    with TestSite(**options, log_requests=True, max_seconds=None) as site:
        pipe.send((site.base_urls, os.getpid()))
        pipe.recv()
        pipe.send(site_figures(site))


def site_figures(site: TestSite) -> dict[str, Any]:
    """The server's counts: requests, pages asked twice, the span of the arrivals, and per host the
    most requests in service at once and the most connections open at once."""
    arrivals: list[float] = []
    peak_requests = peak_open = requests = repeated = 0
    for port in site.ports:
        counters = site.counters(port)
        times = [t for t, path in counters.log if path != ROBOTS]
        arrivals += times
        requests += len(times)
        repeated += sum(n - 1 for path, n in counters.paths.items() if path != ROBOTS)
        # A response goes out ``delay`` after its request arrived: in service over [t, t + delay).
        events = sorted([(t, 1) for t in times] + [(t + site.delay * 0.95, -1) for t in times])
        level = 0
        for _t, step in events:
            level += step
            peak_requests = max(peak_requests, level)
        peak_open = max(peak_open, counters.max_open)
    return {"requests": requests, "repeated": repeated, "first": min(arrivals, default=0.0),
            "last": max(arrivals, default=0.0) + site.delay, "peak_requests_per_host": peak_requests,
            "peak_connections_per_host": peak_open}


# --------------------------------------------------------------------------- the relay


@dataclass
class _Pair:
    """One relayed connection: which way its last bytes went."""

    last_up: bool = False


class CountingRelay:
    """A TCP relay from a loopback port to the database that counts round trips (see the docstring).

    One thread and blocking sends: a frontier's batches are far smaller than loopback's socket
    buffers, so a send does not wait on a peer that is itself waiting to send.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.round_trips = 0
        self.connections = 0
        self._selector = selectors.DefaultSelector()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="pg-relay", daemon=True)

    def start(self) -> CountingRelay:
        """Start relaying in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and close every socket."""
        self._stopping = True
        self._thread.join(5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def _run(self) -> None:
        self._selector.register(self.listener, selectors.EVENT_READ, None)
        while not self._stopping:
            for key, _events in self._selector.select(0.2):
                if key.data is None:
                    self._accept()
                    continue
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                if sock.fileno() < 0:
                    continue  # closed with its peer earlier in this batch, when both ends were ready
                peer, up, pair = key.data
                try:
                    data = sock.recv(1 << 16)
                    if data:
                        peer.sendall(data)
                except OSError:
                    data = b""
                if not data:
                    for end in (sock, peer):
                        self._selector.unregister(end)
                        end.close()
                    continue
                if up and not pair.last_up:
                    self.round_trips += 1
                pair.last_up = up

    def _accept(self) -> None:
        client, _address = self.listener.accept()
        server = socket.create_connection(("127.0.0.1", self.target_port))
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair()
        self._selector.register(client, selectors.EVENT_READ, (server, True, pair))
        self._selector.register(server, selectors.EVENT_READ, (client, False, pair))
        self.connections += 1


# --------------------------------------------------------------------------- CPU


def cpu_of(process: psutil.Process) -> float:
    """User plus system seconds of one process."""
    times = process.cpu_times()
    return float(times.user + times.system)


def database_cpu(postmaster: psutil.Process) -> float:
    """CPU seconds of the whole server so far: the postmaster, the backends it reaped, the live ones."""
    live = 0.0
    for child in postmaster.children():
        try:
            live += cpu_of(child)
        except psutil.NoSuchProcess:  # ended since it was listed: the postmaster's children times hold it
            continue
    times = postmaster.cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system) + live


# --------------------------------------------------------------------------- one run


@dataclass
class Run:
    """The figures of one run of N workers."""

    workers: int
    pages: int
    states: dict[str, int]
    seconds_server: float
    seconds_wall: float
    pages_per_s: float
    pages_per_s_wall: float
    worker_cpu_s: list[float]
    db_cpu_s: float
    statements: int
    transactions: int
    round_trips: int | None
    site: dict[str, Any]
    exit_codes: list[int]
    top_statements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def per_page(self) -> dict[str, float | None]:
        """Statements, transactions, round trips and database CPU (ms) per page done."""
        pages = max(self.pages, 1)
        return {"statements": self.statements / pages, "transactions": self.transactions / pages,
                "round_trips": None if self.round_trips is None else self.round_trips / pages,
                "db_cpu_ms": 1000 * self.db_cpu_s / pages, "worker_cpu_ms": 1000 * sum(self.worker_cpu_s) / pages}


def statement_counts(conn: psycopg.Connection[Any]) -> tuple[int, int, list[dict[str, Any]]]:
    """(statements, committed transactions, the busiest statements) since the last reset."""
    rows = conn.execute("SELECT calls, rows, total_exec_time, query FROM pg_stat_statements"
                        " WHERE query NOT ILIKE '%pg_stat%' ORDER BY calls DESC").fetchall()
    (commits,) = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                              ).fetchone() or (0,)
    top = [{"calls": calls, "rows": n, "ms": round(ms, 1), "query": " ".join(query.split())[:160]}
           for calls, n, ms, query in rows[:8]]
    return sum(int(row[0]) for row in rows), int(commits), top


def run_workers(args: argparse.Namespace, cluster: PostgresCluster, postmaster: psutil.Process, admin:
                psycopg.Connection[Any], count: int, index: int) -> Run:
    """Start a site and ``count`` workers on a new crawl; wait for them all; gather the figures."""
    options = {"hosts": args.hosts, "pages": args.pages, "delay": args.delay_ms / 1000, "page_size": args.page_size}
    parent, child = multiprocessing.Pipe()
    site = multiprocessing.get_context("spawn").Process(target=serve_site, args=(options, child), daemon=True)
    site.start()
    bases, _site_pid = parent.recv()
    relay = None if args.no_relay else CountingRelay(cluster.port).start()
    dsn = cluster.dsn if relay is None else f"postgresql://postgres@127.0.0.1:{relay.port}/postgres"
    crawl = f"bench_{index}_{count}w_{os.getpid()}"
    command = [sys.executable, "-m", "niofetcher", "crawl", *bases, "--frontier", dsn, "--crawl", crawl,
               "--allowed-domain", "127.0.0.1", "--progress", "none", "--parse-mode", "thread",
               "--extractor", args.extractor, "--connections", str(args.connections),
               "--per-host", str(args.per_host), "--lease", str(args.lease)]
    admin.execute("SELECT pg_stat_statements_reset()")
    _, commits_before, _ = statement_counts(admin)
    db_before = database_cpu(postmaster)
    started = time.monotonic()
    procs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(count)]
    cpu = [0.0] * count
    try:
        watched = [psutil.Process(proc.pid) for proc in procs]
        deadline = started + args.timeout
        while any(proc.poll() is None for proc in procs):
            if time.monotonic() > deadline:
                raise SystemExit(f"the workers did not end within {args.timeout:g} s")
            for n, process in enumerate(watched):
                try:
                    cpu[n] = cpu_of(process)
                except psutil.NoSuchProcess:  # ended: its last figure stays
                    continue
            time.sleep(0.1)
        wall = time.monotonic() - started
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    db_cpu = database_cpu(postmaster) - db_before
    statements, commits_after, top = statement_counts(admin)
    parent.send("stop")
    served = parent.recv()
    site.join(10)
    if relay is not None:
        relay.stop()
    errors = [proc.stderr.read().decode(errors="replace").strip() if proc.stderr else "" for proc in procs]
    for proc in procs:
        if proc.stderr:
            proc.stderr.close()
    for n, (proc, text) in enumerate(zip(procs, errors)):
        if proc.returncode != 0:
            print(f"worker {n} exited {proc.returncode}: {text.splitlines()[-1] if text else '(no output)'}")
    admin.execute(f"SET search_path TO {crawl}")
    states = {str(state): int(n) for state, n in admin.execute("SELECT state, COUNT(*) FROM urls GROUP BY state")}
    admin.execute("SET search_path TO public")
    pages = states.get("done", 0)
    span = served["last"] - served["first"]
    return Run(workers=count, pages=pages, states=states, seconds_server=span, seconds_wall=wall,
               pages_per_s=pages / span if span > 0 else 0.0, pages_per_s_wall=pages / wall, worker_cpu_s=cpu,
               db_cpu_s=db_cpu, statements=statements, transactions=commits_after - commits_before,
               round_trips=None if relay is None else relay.round_trips, site=served,
               exit_codes=[proc.returncode for proc in procs], top_statements=top)


# --------------------------------------------------------------------------- the database's capacity


def commit_burst(dsn: str, connections: int, seconds: float) -> float:
    """Durable commits per second of one-row inserts from ``connections`` clients at once."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_burst (n bigint, at timestamptz DEFAULT now())")
    counts = [0] * connections
    start = threading.Barrier(connections + 1)
    stop_at = [0.0]

    def client(n: int) -> None:
        with psycopg.connect(dsn) as conn:
            start.wait()
            while time.monotonic() < stop_at[0]:
                conn.execute("INSERT INTO bench_burst (n) VALUES (%s)", (n,))
                conn.commit()
                counts[n] += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(connections)]
    for thread in threads:
        thread.start()
    stop_at[0] = time.monotonic() + seconds
    start.wait()
    for thread in threads:
        thread.join()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE bench_burst")
    return sum(counts) / seconds


def estimate(runs: list[Run], cores: int, commits_per_s: float) -> dict[str, float]:
    """How many workers like the one-worker run's one PostgreSQL serves (see the docstring): a range,
    from the runs' dearest page (``high``) and their cheapest (``low``)."""
    one = min(runs, key=lambda run: run.workers)
    per_worker = one.pages_per_s / one.workers
    figures: dict[str, float] = {"per_worker_pages_per_s": per_worker, "cores": cores,
                                 "durable_commits_per_s": commits_per_s}
    for end, pick in (("high", max), ("low", min)):
        cpu_ms = pick(run.per_page["db_cpu_ms"] or 0.0 for run in runs)
        statements = pick(run.per_page["statements"] or 0.0 for run in runs)
        transactions = pick(run.per_page["transactions"] or 0.0 for run in runs)
        by_cpu = 1000 * cores / cpu_ms if cpu_ms else float("inf")
        by_commits = commits_per_s / transactions if transactions else float("inf")
        figures |= {f"db_cpu_ms_per_page_{end}": cpu_ms, f"statements_per_page_{end}": statements,
                    f"transactions_per_page_{end}": transactions,
                    f"db_pages_per_s_by_cpu_{end}": by_cpu, f"db_statements_per_s_by_cpu_{end}": by_cpu * statements,
                    f"db_pages_per_s_by_commits_{end}": by_commits,
                    f"workers_{end}": min(by_cpu, by_commits) / per_worker}
    return figures


# --------------------------------------------------------------------------- the report


def print_table(runs: list[Run], per_host: int) -> None:
    """One line per run, then the ratios and the per-host check."""
    print(f"\n{'workers':>7} {'pages':>7} {'pages/s':>8} {'(wall)':>7} {'worker CPU s':>18} {'DB CPU s':>8} "
          f"{'stmts/page':>10} {'xacts/page':>10} {'trips/page':>10} {'DB ms/page':>10} {'peak/host':>9}")
    for run in runs:
        p = run.per_page
        trips = "-" if p["round_trips"] is None else f"{p['round_trips']:.2f}"
        cpus = " ".join(f"{s:.1f}" for s in run.worker_cpu_s)
        print(f"{run.workers:>7} {run.pages:>7,} {run.pages_per_s:>8,.0f} {run.pages_per_s_wall:>7,.0f} "
              f"{cpus:>18} {run.db_cpu_s:>8.1f} {p['statements']:>10.2f} {p['transactions']:>10.2f} {trips:>10} "
              f"{p['db_cpu_ms']:>10.3f} {run.site['peak_requests_per_host']:>9}")
    one = next((run for run in runs if run.workers == 1), None)
    if one is not None and one.pages_per_s:
        for run in runs:
            if run.workers > 1:
                target = " (target >= 1.8)" if run.workers == 2 else ""
                print(f"{run.workers} workers / 1 worker: {run.pages_per_s / one.pages_per_s:.2f}{target}")
    peak = max(run.site["peak_requests_per_host"] for run in runs)
    verdict = "holds" if peak <= per_host else "BROKEN"
    print(f"per-host limit {per_host}: at most {peak} requests in service at once on one host, counted by the "
          f"site: {verdict}; at most {max(run.site['peak_connections_per_host'] for run in runs)} connections open "
          f"at once to one host")
    for run in runs:
        odd = {state: n for state, n in run.states.items() if state != "done"}
        if odd or run.site["repeated"] or any(run.exit_codes):
            print(f"{run.workers} workers: not done {odd}, pages fetched again {run.site['repeated']}, "
                  f"exit codes {run.exit_codes}")


def print_estimate(e: dict[str, float], burst_connections: int) -> None:
    """The estimate, with the figures it comes from."""
    print(f"\none worker: {e['per_worker_pages_per_s']:,.0f} pages/s; the database's capacity, from the runs' "
          f"dearest page and their cheapest:")
    for end in ("high", "low"):
        print(f"  {e[f'db_cpu_ms_per_page_{end}']:.3f} CPU ms a page: {e['cores']:g} cores serve "
              f"{e[f'db_pages_per_s_by_cpu_{end}']:,.0f} pages/s ({e[f'db_statements_per_s_by_cpu_{end}']:,.0f} "
              f"statements/s at {e[f'statements_per_page_{end}']:.2f} a page); "
              f"{e['durable_commits_per_s']:,.0f} durable commits/s ({burst_connections} clients, one-row inserts) "
              f"at {e[f'transactions_per_page_{end}']:.2f} a page serve {e[f'db_pages_per_s_by_commits_{end}']:,.0f}")
    print(f"one PostgreSQL serves about {e['workers_high']:.0f} to {e['workers_low']:.0f} such workers "
          f"before it binds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4", help="worker counts, one run each (default 1,2,4)")
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--pages", type=int, default=60, help="pages per host (plus its /)")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="per response")
    parser.add_argument("--page-size", type=int, default=2048)
    parser.add_argument("--connections", type=int, default=16, help="each worker's --connections")
    parser.add_argument("--per-host", type=int, default=2, help="each worker's --per-host")
    parser.add_argument("--lease", type=float, default=10.0, help="each worker's --lease")
    parser.add_argument("--extractor", default="lxml", choices=EXTRACTORS)
    parser.add_argument("--burst", type=float, default=3.0, help="seconds of the commit burst (0: none)")
    parser.add_argument("--burst-connections", type=int, default=4)
    parser.add_argument("--no-fsync", action="store_true", help="the tests' cluster settings: commits not durable")
    parser.add_argument("--no-relay", action="store_true", help="connect the workers to the database directly")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take")
    parser.add_argument("--quick", action="store_true", help="a short run: 40 hosts of 8 pages, 8 connections")
    parser.add_argument("--json", metavar="FILE", help="write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.hosts, args.pages, args.connections, args.burst = 40, 8, 8, min(args.burst, 1.0)
    counts = [int(n) for n in args.workers.split(",")]
    cores = psutil.cpu_count() or 1
    settings = {**STATS, **({} if args.no_fsync else DURABLE)}
    print(f"{args.hosts} hosts x {args.pages + 1} pages, {args.delay_ms:g} ms a response; each worker "
          f"{args.connections} connections, {args.per_host} per host (ideal {args.connections / args.delay_ms * 1000:,.0f}"
          f" pages/s a worker); PostgreSQL {'without fsync' if args.no_fsync else 'with durable commits'}; "
          f"{cores} cores, load {os.getloadavg()[0]:.1f}")
    with PostgresCluster(settings=settings) as cluster:
        assert cluster.directory is not None
        pid = int((cluster.directory / "data" / "postmaster.pid").read_text().split()[0])
        postmaster = psutil.Process(pid)
        with psycopg.connect(cluster.dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            runs = []
            for index, count in enumerate(counts):
                runs.append(run_workers(args, cluster, postmaster, admin, count, index))
                run = runs[-1]
                print(f"{count} workers: {run.pages:,} pages, {run.pages_per_s:,.0f} pages/s "
                      f"({run.seconds_server:.1f} s at the site, {run.seconds_wall:.1f} s wall)", flush=True)
        commits = commit_burst(cluster.dsn, args.burst_connections, args.burst) if args.burst > 0 else 0.0
    print_table(runs, args.per_host)
    figures = estimate(runs, cores, commits) if commits else None
    if figures is not None:
        print_estimate(figures, args.burst_connections)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "args": vars(args), "cores": cores,
            "runs": [{**asdict(run), "per_page": run.per_page} for run in runs], "estimate": figures,
        }, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

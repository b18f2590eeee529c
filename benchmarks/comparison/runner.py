"""A scenario's rounds: the site in its own process, then every client in a fresh process, round after round.

Clients alternate round by round (A B C A B C ...) so that a drift of the machine
hits all alike. A fetching client (A-C) gets a job file of ``URL<TAB>body length``
lines, checks every response and prints one JSON line. A crawler (D, E) runs under
``clients/run_tree.py``, which counts the CPU of the whole process tree (niofetcher's
parse processes included) and the wall time of the whole command; the site's
counters check that every page was fetched. After each run the site's counters
give the server-side peak of open connections per host.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _site import SiteProcess

from . import BASELINE, CLIENTS_DIR, CORPUS_DIR, extras, report
from .clients import CRAWL_CLIENTS, FETCH_CLIENTS, Client, CrawlClient, choose
from .measure import listen_drops, probe_sizes, run_client_process
from .scenarios import CrawlScenario, FetchScenario

Run = dict[str, Any]
RUN_TREE = os.path.join(CLIENTS_DIR, "run_tree.py")
#: E follows only the site's own pages: real pages carry relative links to paths the
#: site does not have (404s) and to files LinkExtractor skips by extension but niofetcher
#: does not; both crawlers get this same regex (niofetcher --include, Scrapy allow=).
SITE_PAGES_ONLY = r"^http://127\.0\.0\.1:\d+/(page/\d+)?$"
#: The crawl's own seconds in the summary table ``niofetcher crawl`` prints.
SECONDS_LINE = re.compile(r"^\s*seconds\s+([\d.]+)\s*$", re.MULTILINE)


def run_scenario(scenario: FetchScenario | CrawlScenario, options: argparse.Namespace) -> dict[str, Any]:
    """Run every round of one scenario; print the progress and the table; return the scenario's record."""
    print(f"\n{scenario.describe()}")
    if isinstance(scenario, CrawlScenario) and scenario.corpus and not os.path.isdir(CORPUS_DIR):
        reason = f"no corpus at {CORPUS_DIR} (a clone without ../shared)"
        print(f"  skipped: {reason}")
        return {"key": scenario.key, "title": scenario.title, "status": "skipped", "reason": reason}
    record: dict[str, Any] = {"key": scenario.key, "title": scenario.title, "status": "ran"}
    with tempfile.TemporaryDirectory(prefix="niofetcher-compare-") as tmp:
        run_one: Callable[[Any], Run]
        clients: list[Client] | list[CrawlClient]
        if isinstance(scenario, FetchScenario):
            clients, skipped = choose(FETCH_CLIENTS, options)
            record.update(config=scenario.config(), ideal=scenario.ideal, runs=[], skipped=skipped)
            site = SiteProcess(scenario.hosts, scenario.pages_per_host, scenario.delay_ms, scenario.page_size)
        else:
            clients, skipped = choose(CRAWL_CLIENTS, options)
            kind = "real-page crawl" if scenario.corpus else "crawl"
            record.update(kind="crawl", config=scenario.config(), site_pages=scenario.site_pages, runs=[],
                          skipped=skipped,
                          chart_title=f"{scenario.key}: {kind} ({scenario.site_pages:,} pages, {scenario.total} conns)")
            site = SiteProcess(scenario.hosts, scenario.pages_per_host, 0.0, scenario.page_size,
                               corpus=CORPUS_DIR if scenario.corpus else None)
        with site:
            record["site"] = {k: v for k, v in site.info.items() if k != "bases"}
            if isinstance(scenario, FetchScenario):
                job = _prepare_fetch(scenario, site, tmp, record)
                run_one = functools.partial(_run_fetch_client, scenario, job, site, options)
            else:
                run_one = functools.partial(_run_crawl_client, scenario, site, tmp, options)
            for round_no in range(1, options.rounds + 1):
                for client in clients:
                    run = run_one(client)
                    run["round"] = round_no
                    record["runs"].append(run)
                    print("  " + report.progress_line(scenario, run))
            if isinstance(scenario, FetchScenario) and options.profile and any(c.name == BASELINE for c in clients):
                record["profile"] = extras.profile(scenario, job, site, options)
    record["summary"] = report.summarise(scenario, record["runs"], [c.name for c in clients])
    record["table"] = report.table_lines(scenario, record)
    print()
    for line in record["table"]:
        print(line)
    return record


def _prepare_fetch(scenario: FetchScenario, site: SiteProcess, tmp: str, record: dict[str, Any]) -> str:
    """Warn of limits below the scenario's connections, probe the sizes, write the job file; its path."""
    if scenario.total > (site.info.get("nofile") or 0) - 64:
        print(f"  warning: the site's open-file limit ({site.info.get('nofile')}) is below "
              f"{scenario.total} connections")
    somaxconn = site.info.get("somaxconn")
    if somaxconn is not None and somaxconn < min(scenario.total, site.info["listen_backlog"]):
        print(f"  note: net.core.somaxconn={somaxconn} caps the site's listen backlog "
              f"({site.info['listen_backlog']}) below {scenario.total} connections")
    urls = scenario.urls(site.bases)
    sizes = probe_sizes(urls)
    job = os.path.join(tmp, "job.tsv")
    with open(job, "w", encoding="utf-8") as out:
        out.writelines(f"{url}\t{sizes[url]}\n" for url in urls)
    if scenario.show_ceiling:
        record["wrk"] = extras.wrk(scenario, site.bases[0])
    return job


def _server(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the site counted during one run."""
    return {
        "peak_per_host": max(p["max_open"] for p in after["ports"]),
        "peak_total": after["max_open_total"],
        "accepted": after["accepted"],
        "requests": after["requests"],
        "cpu": after["cpu"] - before["cpu"],
        "turnaround": after.get("turnaround"),  # counted since the reset before the run
    }


def _run_fetch_client(scenario: FetchScenario, job: str, site: SiteProcess, options: argparse.Namespace,
                      client: Client) -> Run:
    before = site.reset_when_idle()
    cmd = [sys.executable, os.path.join(CLIENTS_DIR, client.script), "--urls", job,
           "--total", str(scenario.total), "--per-host", str(scenario.per_host), *client.args]
    if options.deadline:
        cmd += ["--deadline", str(options.deadline)]
    run: Run = {"client": client.name}
    drops0 = listen_drops()
    done = run_client_process(cmd, options.run_timeout)
    if done.failed is not None:
        run["failed"] = done.failed
    elif done.proc is not None:
        lines = [line for line in done.proc.stdout.splitlines() if line.startswith("{")]
        if done.proc.returncode != 0 or not lines:
            run["failed"] = f"exit {done.proc.returncode}: " + done.output_tail
        else:
            run.update(json.loads(lines[-1]))
            run["client"] = client.name
    run["process_seconds"] = done.wall
    after = site.counters()
    drops1 = listen_drops()
    done.other_load(run, done.children_cpu + done.own_cpu + after["cpu"] - before["cpu"])
    run["server"] = {**_server(before, after),
                     "listen_drops": None if drops0 is None or drops1 is None else drops1 - drops0}
    if "failed" not in run:
        run["pages_per_s"] = run["ok"] / run["seconds"]
        run["cpu_ms_per_page"] = run["cpu"] * 1000.0 / max(1, run["done"])
        run["site_cpu_share"] = run["server"]["cpu"] / run["seconds"]
        if scenario.ideal:
            run["efficiency"] = run["pages_per_s"] / scenario.ideal
    run["note"] = client.note(scenario, run)
    return run


def _crawl_command(scenario: CrawlScenario, client: CrawlClient, seed: str, db: str) -> list[str]:
    if client.kind == "niofetcher":
        cmd = [sys.executable, "-m", "niofetcher", "crawl", seed, "--db", db, "--per-host", str(scenario.per_host),
               "--connections", str(scenario.total), "--progress", "none", *client.args]
        return cmd + (["--include", SITE_PAGES_ONLY] if scenario.corpus else [])
    cmd = [sys.executable, os.path.join(CLIENTS_DIR, "scrapy_client.py"), "--seed", seed,
           "--total", str(scenario.total), "--per-host", str(scenario.per_host), *client.args]
    return cmd + (["--allow", SITE_PAGES_ONLY] if scenario.corpus else [])


def _run_crawl_client(scenario: CrawlScenario, site: SiteProcess, tmp: str, options: argparse.Namespace,
                      client: CrawlClient) -> Run:
    before = site.reset_when_idle()
    db = os.path.join(tmp, f"crawl-{client.name}-{time.monotonic_ns()}.sqlite")
    report_path = os.path.join(tmp, "tree.json")
    if os.path.exists(report_path):
        os.remove(report_path)
    cmd = [sys.executable, RUN_TREE, "--report", report_path, "--",
           *_crawl_command(scenario, client, site.bases[0], db)]
    run: Run = {"client": client.name, "command": cmd[4:]}
    done = run_client_process(cmd, options.run_timeout)
    if done.failed is not None:
        run["failed"] = done.failed
    after = site.counters()
    paths = site.ask("paths")
    tree = None
    if os.path.exists(report_path):
        with open(report_path, encoding="utf-8") as f:
            tree = json.load(f)
    proc = done.proc
    if proc is not None and (proc.returncode != 0 or tree is None):
        run["failed"] = f"exit {proc.returncode}: " + done.output_tail
    if "failed" not in run and proc is not None and tree is not None:
        try:
            run.update(_niofetcher_crawl_outcome(proc.stdout, db) if client.kind == "niofetcher"
                       else _scrapy_outcome(proc.stdout))
        except (ValueError, KeyError, sqlite3.Error) as exc:
            run["failed"] = f"could not read the outcome: {exc!r}: " + done.output_tail
    run["server"] = {**_server(before, after), **paths}
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
    if run["ok"] < scenario.site_pages:
        run["error_samples"] = [*run.get("error_samples", []),
                                f"{run['ok']:,} pages ok, the site has {scenario.site_pages:,}"]
    run["pages_per_s"] = run["ok"] / run["seconds"]
    run["crawl_pages_per_s"] = run["ok"] / run["crawl_seconds"] if run.get("crawl_seconds") else None
    run["cpu_ms_per_page"] = run["cpu"] * 1000.0 / max(1, run["ok"])
    run["site_cpu_share"] = run["server"]["cpu"] / run["seconds"]
    done.other_load(run, run["cpu"] + done.own_cpu + run["server"]["cpu"])
    run["note"] = client.note
    return run


def _niofetcher_crawl_outcome(stdout: str, db: str) -> dict[str, Any]:
    """Pages, statuses and the crawl's own seconds, from the frontier database and the summary table."""
    match = SECONDS_LINE.search(stdout)
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


def _scrapy_outcome(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError("no JSON line from scrapy_client.py")
    out = json.loads(lines[-1])
    return {k: out[k] for k in ("pages", "ok", "errors", "crawl_seconds", "statuses", "error_samples",
                                "settings", "stats", "slots", "version")}

"""Summaries, tables (text and Markdown), the chart, and the files written to ``benchmarks/results/``.

Each table has one row per client — medians over the rounds of pages/s, client CPU
ms per page, peak RSS, efficiency against the ideal where one exists, the
server-timed turnaround (p50/p90/p99, where there is latency), the
server-counted peak connections per host, errors, and each client's pages/s as a
ratio to niofetcher's — then the targets of issue 5, MET or MISSED. A client with
errors is reported as such, and gets no ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

from . import BASELINE, RESULTS_DIR
from .scenarios import SCENARIOS, CrawlScenario, FetchScenario

Run = dict[str, Any]
Row = dict[str, Any]
Summary = dict[str, Row]
Verdicts = list[tuple[str, bool | None]]
Column = tuple[str, Callable[[Row], str]]  # a table column: its title, and its cell from a summary row
#: The server-timed turnaround percentiles shown for a scenario with latency (the site's ``counters``).
TURNAROUND_COLUMNS = ("p50", "p90", "p99")


# --------------------------------------------------------------------------- progress lines


def progress_line(scenario: FetchScenario | CrawlScenario, run: Run) -> str:
    """One line per client run, as the rounds go."""
    width = 15 if isinstance(scenario, FetchScenario) else 18
    head = f"round {run['round']} {run['client']:<{width}}"
    if "failed" in run:
        return f"{head} FAILED: {run['failed']}"
    errors = f", {run['errors']} ERRORS e.g. {run['error_samples'][:1]}" if run["errors"] else ""
    if isinstance(scenario, CrawlScenario):
        if run.get("repeated"):
            errors += f", {run['repeated']} page(s) fetched twice"
        if run.get("other_load_flag"):
            errors += f", OTHER LOAD on the machine ~{run['other_load']:.1f} cores"
        crawl_rate = f" ({run['crawl_pages_per_s']:,.0f} crawl only)" if run.get("crawl_pages_per_s") else ""
        return (f"{head} {run['ok']:,} pages in {run['seconds']:.2f} s: {run['pages_per_s']:7,.0f} pages/s"
                f"{crawl_rate}, {run['cpu_ms_per_page']:.3f} CPU ms/page, {run['peak_rss_mb']:.0f} MB, "
                f"server peak {run['server']['peak_per_host']}/host, site CPU {run['site_cpu_share']:.0%}{errors}")
    eff = f", efficiency {run['efficiency']:.3f}" if "efficiency" in run else ""
    turnaround = run["server"].get("turnaround") or {}
    if scenario.delay_ms and turnaround.get("p99") is not None:
        eff += f", turnaround p50 {turnaround['p50']:.3g} p99 {turnaround['p99']:.3g} ms"
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


# --------------------------------------------------------------------------- summary


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(scenario: FetchScenario | CrawlScenario, runs: list[Run], names: list[str]) -> Summary:
    """Per client: medians over its good rounds, worst server peaks and summed errors over all rounds."""
    summary: Summary = {}
    for name in names:
        mine = [r for r in runs if r["client"] == name]
        good = [r for r in mine if "failed" not in r]
        errors = sum(r["errors"] for r in good)
        row: Row = {
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
        if isinstance(scenario, FetchScenario):
            row.update({
                "efficiency": _median([r["efficiency"] for r in good if "efficiency" in r]),
                "turnaround": {name: _median([r["server"]["turnaround"][name] for r in good
                                              if (r["server"].get("turnaround") or {}).get(name) is not None])
                               for name in TURNAROUND_COLUMNS},
                "server_requests": [r["server"]["requests"] for r in good],
                "listen_drops": sum(r["server"].get("listen_drops") or 0 for r in mine),
                "incomplete": [f"{r['done']:,}/{r['pages']:,}" for r in good if r.get("incomplete")],
            })
        else:
            row.update({
                "error_samples": [s for r in good for s in r.get("error_samples", [])][:5],
                "pages": _median([r["ok"] for r in good]),
                "crawl_pages_per_s": _median([r["crawl_pages_per_s"] for r in good if r.get("crawl_pages_per_s")]),
                "efficiency": None,
                "repeated": max((r.get("repeated", 0) for r in good), default=0),
            })
        summary[name] = row
    # Each clean client's pages/s as a ratio to niofetcher's (None where either had errors).
    base = summary.get(BASELINE)
    for row in summary.values():
        if base is not None and base["clean"] and row["clean"] and base["pages_per_s"]:
            row["ratio"] = row["pages_per_s"] / base["pages_per_s"]
        else:
            row["ratio"] = None
    return summary


# --------------------------------------------------------------------------- tables


def _fmt(value: float | None, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def table_lines(scenario: FetchScenario | CrawlScenario, record: dict[str, Any], markdown: bool = False) -> list[str]:
    """The scenario's table, as text (padded columns, notes as footnotes) or Markdown, then its verdicts."""
    summary: Summary = record["summary"]
    rounds = max((r["rounds"] for r in summary.values()), default=0)
    columns: list[Column] = [("pages/s", lambda row: _fmt(row["pages_per_s"], ",.0f") + ("!" if row["errors"] else ""))]
    if isinstance(scenario, FetchScenario):
        columns += [
            ("CPU ms/page", lambda row: _fmt(row["cpu_ms_per_page"], ".3f")),
            ("peak RSS MB", lambda row: _fmt(row["peak_rss_mb"], ".0f")),
            ("efficiency", lambda row: _fmt(row["efficiency"], ".3f")),
        ]
        legend = (f"  medians of {rounds} round(s); server peaks are the worst round; 'x niofetcher' = client "
                  "pages/s / niofetcher pages/s; site CPU = test-site process CPU / client wall time")
        if scenario.delay_ms:
            columns.append(("turnaround ms p50/p90/p99", _turnaround_cell))
            legend += ("; turnaround = per keep-alive request, server-timed, from the previous response "
                       "written to the next request received on that connection (the client's own delay)")
        verdicts = _ceiling_lines(scenario, record)
    else:
        columns += [
            ("crawl-only pages/s", lambda row: _fmt(row["crawl_pages_per_s"], ",.0f")),
            ("CPU ms/page", lambda row: _fmt(row["cpu_ms_per_page"], ".3f")),
            ("peak RSS MB", lambda row: _fmt(row["peak_rss_mb"], ".0f")),
            ("pages", lambda row: _fmt(row["pages"], ",.0f")),
        ]
        legend = (f"  medians of {rounds} round(s); pages/s = pages / wall time of the whole command (start, "
                  "imports, crawl, exit); crawl-only = the crawler's own clock; CPU = user + sys of the command's "
                  "whole process tree (parse processes included) per page; peak RSS = its largest process; "
                  "'x niofetcher' = pages/s / niofetcher's")
        verdicts = []
    columns += [
        ("server peak conns/host",
         lambda row: "-" if row["peak_per_host"] is None else f"{row['peak_per_host']} (limit {scenario.per_host})"),
        ("conns opened", lambda row: _fmt(row["accepted"], ".0f")),
        ("errors",
         lambda row: str(row["errors"]) + (f" +{row['failed_rounds']} failed" if row["failed_rounds"] else "")),
        ("x niofetcher", lambda row: _fmt(row["ratio"], ".2f")),
        ("site CPU", lambda row: _fmt(row["site_cpu_share"], ".0%")),
    ]
    if scenario.targets is not None and BASELINE in summary:
        verdicts += scenario.targets(summary)
    return _table_text(scenario, summary, columns, legend, markdown, verdicts)


def _turnaround_cell(row: Row) -> str:
    """p50 / p90 / p99 in ms, 3 significant digits."""
    values = row.get("turnaround") or {}
    return " / ".join(_fmt(values.get(name), ".3g") for name in TURNAROUND_COLUMNS)


def _notes(scenario: FetchScenario | CrawlScenario, name: str, row: Row) -> list[str]:
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
        if name.startswith("scrapy") and name != "scrapy-niofetcher":  # Scrapy's own handler's sockets
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


def _table_text(scenario: FetchScenario | CrawlScenario, summary: Summary, columns: list[Column],
                legend: str, markdown: bool, verdicts: Verdicts) -> list[str]:
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


def _ceiling_lines(scenario: FetchScenario, record: dict[str, Any]) -> Verdicts:
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


# --------------------------------------------------------------------------- chart and files


def chart(records: list[dict[str, Any]], path: str, stamp: str, info: dict[str, Any]) -> str | None:
    """A PNG of every scenario that ran: pages/s per client (median, min-max), the ideal as a line."""
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


def _latest_name(args: dict[str, Any]) -> str:
    """``compare`` for a run of every scenario, ``compare-D`` for a run of D alone: one never overwrites the other."""
    key = str(args.get("scenario", "all")).upper()
    return "compare" if key == "ALL" else f"compare-{key}"


def write_results(records: list[dict[str, Any]], args: argparse.Namespace, info: dict[str, Any], started: str) -> None:
    """The raw runs as JSON (a dated file and the latest one), then the tables and the chart."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    suffix = "-quick" if args.quick else ""
    stamp = started.replace(":", "").replace("-", "")[:15]
    data = {"date": started, "machine": info, "command": sys.argv[1:], "args": vars(args), "scenarios": records}
    for name in (f"compare-{stamp}{suffix}.json", f"{_latest_name(vars(args))}{suffix}.json"):
        with open(os.path.join(RESULTS_DIR, name), "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1, default=str)
    print(f"\nraw runs: {os.path.join(RESULTS_DIR, f'compare-{stamp}{suffix}.json')}")
    write_reports(data)


def replot(path: str) -> int:
    """Rewrite the tables and the chart of a raw-runs JSON file (``--replot``)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    write_reports(data)
    return 0


def write_reports(data: dict[str, Any]) -> None:
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
            md += [*table_lines(scenario, record, markdown=True), ""]
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

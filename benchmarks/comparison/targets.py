"""The targets of issue 5 each scenario is judged by: (verdict text, MET / MISSED / None = not measured)."""

from __future__ import annotations

from typing import Any

from . import BASELINE

Summary = dict[str, dict[str, Any]]
Verdicts = list[tuple[str, bool | None]]


def _clean(summary: Summary, name: str) -> dict[str, Any] | None:
    row = summary.get(name)
    return row if row is not None and row["clean"] else None


def targets_a(summary: Summary) -> Verdicts:
    """A: niofetcher at least 1.3x aiohttp's pages/s, and at least aiohttp+uvloop's."""
    nio = _clean(summary, BASELINE)
    out: Verdicts = []
    for peer, need in (("aiohttp", 1.3), ("aiohttp+uvloop", 1.0)):
        row = _clean(summary, peer)
        if nio is None or row is None:
            out.append((f"target A vs {peer} >= {need}x: not measured cleanly", None))
            continue
        ratio = nio["pages_per_s"] / row["pages_per_s"]
        out.append((f"target A: niofetcher / {peer} = {ratio:.2f} (target >= {need})", ratio >= need))
    return out


def targets_b(summary: Summary) -> Verdicts:
    """B: efficiency >= 0.97 (or above the best peer's), and never more than 4 connections to a host."""
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


def targets_c(summary: Summary) -> Verdicts:
    """C: efficiency at least pycurl's, and a peak RSS below aiohttp's."""
    nio = _clean(summary, BASELINE)
    if nio is None:
        return [("target C: niofetcher did not run cleanly", False)]
    out: Verdicts = []
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


def _crawl_target(summary: Summary, mine: str, need: float, key: str) -> tuple[str, bool | None]:
    nio, scrapy = _clean(summary, mine), _clean(summary, "scrapy")
    if nio is None or scrapy is None:
        missing = " and ".join(n for n, r in ((mine, nio), ("scrapy", scrapy)) if r is None)
        return (f"target {key}: {mine} / scrapy >= {need}x: {missing} not measured cleanly", None if
                summary.get(mine) is None or summary.get("scrapy") is None else False)
    ratio = nio["pages_per_s"] / scrapy["pages_per_s"]
    return ((f"target {key}: {mine} / scrapy = {ratio:.2f} in pages/s ({nio['pages_per_s']:,.0f} vs "
             f"{scrapy['pages_per_s']:,.0f}; target >= {need})"), ratio >= need)


def targets_d(summary: Summary) -> Verdicts:
    """D: ``niofetcher crawl`` (bs4) at least 3x Scrapy's pages/s."""
    return [_crawl_target(summary, BASELINE, 3.0, "D")]


def targets_e(summary: Summary) -> Verdicts:
    """E: on real pages, the lxml extractor at least 2x Scrapy, the bs4 one at least level, and
    the selectolax one at least 1.5x the lxml one (issue 31)."""
    return [_crawl_target(summary, "niofetcher-lxml", 2.0, "E"), _crawl_target(summary, BASELINE, 1.0, "E"),
            _extractor_target(summary, "niofetcher-selectolax", "niofetcher-lxml", 1.5, "E")]


def _extractor_target(summary: Summary, mine: str, other: str, need: float, key: str) -> tuple[str, bool | None]:
    """One niofetcher extractor's pages/s against another's, in the same run."""
    fast, slow = _clean(summary, mine), _clean(summary, other)
    if fast is None or slow is None:
        missing = " and ".join(n for n, r in ((mine, fast), (other, slow)) if r is None)
        return (f"target {key}: {mine} / {other} >= {need}x: {missing} not measured cleanly", None if
                summary.get(mine) is None or summary.get(other) is None else False)
    ratio = fast["pages_per_s"] / slow["pages_per_s"]
    return ((f"target {key}: {mine} / {other} = {ratio:.2f} in pages/s ({fast['pages_per_s']:,.0f} vs "
             f"{slow['pages_per_s']:,.0f}; target >= {need})"), ratio >= need)

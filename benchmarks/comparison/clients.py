"""The clients compared: fetching scripts of ``benchmarks/clients/`` (A-C) and crawlers (D, E)."""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .scenarios import FetchScenario

Run = dict[str, Any]


def _no_note(scenario: FetchScenario, run: Run) -> str:
    return ""


@dataclass(frozen=True)
class Client:
    """One fetching client: a script under ``benchmarks/clients/`` and the modules it needs."""

    name: str
    script: str
    requires: tuple[str, ...]
    args: tuple[str, ...] = ()
    note: Callable[[FetchScenario, Run], str] = _no_note
    hidden = False  # every fetching client runs unless --clients names others


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


def _httpx_note(scenario: FetchScenario, run: Run) -> str:
    return "no per-host limit in httpx" + (" (total only)" if scenario.hosts > 1 else "")


def _requests_note(scenario: FetchScenario, run: Run) -> str:
    threads = run.get("threads")
    if threads is None:
        return ""
    capped = " (capped)" if threads < scenario.total else ""
    return f"{threads} threads{capped}, 1 Session each"


def _pycurl_note(scenario: FetchScenario, run: Run) -> str:
    return "C reference (libcurl)"


FETCH_CLIENTS: tuple[Client, ...] = (
    Client("niofetcher", "niofetcher_client.py", ("niofetcher", "h11")),
    Client("niofetcher-asyncio", "niofetcher_aio_client.py", ("niofetcher", "h11"), ("--loop", "asyncio"),
           note=lambda scenario, run: "asyncio caller: AsyncFetcher.fetch() from worker tasks"),
    Client("aiohttp", "aiohttp_client.py", ("aiohttp",), ("--loop", "asyncio")),
    Client("aiohttp+uvloop", "aiohttp_client.py", ("aiohttp", "uvloop"), ("--loop", "uvloop")),
    Client("httpx", "httpx_client.py", ("httpx",), note=_httpx_note),
    Client("requests", "requests_client.py", ("requests",), note=_requests_note),
    Client("pycurl", "pycurl_client.py", ("pycurl",), note=_pycurl_note),
)

#: Scrapy's settings for D and E, chosen by running the hidden variants below side by side
#: (see the README): CONCURRENT_ITEMS=10 and the asyncio reactor (Scrapy's default).
SCRAPY_TUNED = ("--concurrent-items", "10", "--reactor", "asyncio", "--slots", "per-host")

CRAWL_CLIENTS: tuple[CrawlClient, ...] = (
    CrawlClient("niofetcher", "niofetcher", ("niofetcher",), ("--extractor", "bs4"),
                note="niofetcher crawl, bs4 extractor (the default), 2 parse processes"),
    CrawlClient("niofetcher-lxml", "niofetcher", ("niofetcher",), ("--extractor", "lxml"),
                note="niofetcher crawl --extractor lxml, 2 parse processes"),
    CrawlClient("niofetcher-selectolax", "niofetcher", ("niofetcher", "selectolax"), ("--extractor", "selectolax"),
                note="niofetcher crawl --extractor selectolax (Lexbor), 2 parse processes"),
    CrawlClient("scrapy", "scrapy", ("scrapy",), SCRAPY_TUNED,
                note="CrawlSpider + LinkExtractor, CONCURRENT_ITEMS=10, asyncio reactor, a slot per host:port"),
    CrawlClient("scrapy-niofetcher", "scrapy", ("scrapy", "niofetcher"), (*SCRAPY_TUNED, "--download-handler", "niofetcher"),
                note="Scrapy + niofetcher handler: as scrapy, fetched by niofetcher.scrapy.NIOFetcherDownloadHandler"),
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

ALL_NAMES = tuple(c.name for c in FETCH_CLIENTS) + tuple(c.name for c in CRAWL_CLIENTS)

AnyClient = TypeVar("AnyClient", Client, CrawlClient)


def choose(clients: Sequence[AnyClient], options: argparse.Namespace) -> tuple[list[AnyClient], list[str]]:
    """The clients to run (named in --clients, or all but the hidden), and the names skipped as missing.

    A client whose modules cannot be imported is skipped with a line saying so.
    """
    chosen: list[AnyClient] = []
    for client in clients:
        if options.clients and client.name not in options.clients:
            continue
        if client.hidden and not options.clients:
            continue
        missing = [module for module in client.requires if importlib.util.find_spec(module) is None]
        if missing:
            print(f"  skipped {client.name}: cannot import {', '.join(missing)} (pip install -e '.[bench]')")
            continue
        chosen.append(client)
    skipped = [c.name for c in clients if c not in chosen and not c.hidden
               and (not options.clients or c.name in options.clients)]
    return chosen, skipped

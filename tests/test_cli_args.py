"""The command line's parser: built without loading any command, and its defaults the library's own."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys

import pytest

from niofetcher.cli.args import build_parser, config_from
from niofetcher.config import FetcherConfig
from niofetcher.crawl import CrawlConfig

# What only the crawl and demo commands use; the parser, --help and --version load none of it.
HEAVY = ("bs4", "lxml", "protego", "tqdm", "warcio", "sqlite3", "_sqlite3")
COMMANDS = ("niofetcher.crawl", "niofetcher.cli.fetch", "niofetcher.cli.crawl", "niofetcher.cli.demo",
            "niofetcher.cli.site", "niofetcher.cli.output", "niofetcher.cli.progress")


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["crawl", "--help"], ["demo", "--help"]])
def test_the_parser_loads_no_command(argv: list[str]) -> None:
    script = (
        "import sys, contextlib, io\n"
        "from niofetcher.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    main({argv!r})\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith({COMMANDS!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("argv", [["fetch", "http://a.test/"], ["crawl", "http://a.test/"], ["testsite"], ["demo"]])
def test_every_command_names_a_module_that_runs_it(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert callable(importlib.import_module(f"niofetcher.cli.{args.module}").run)


def test_the_crawl_defaults_are_the_configs_defaults() -> None:
    """The parser writes them out (reading them would load the crawler); here they are held to the configs'."""
    args = build_parser().parse_args(["crawl", "http://a.test/"])
    crawl = {f.name: f.default for f in dataclasses.fields(CrawlConfig)}
    fetcher = {f.name: f.default for f in dataclasses.fields(FetcherConfig)}
    assert (args.max_pages, args.max_depth, args.allowed_domain) == (
        crawl["max_pages"], crawl["max_depth"], crawl["allowed_domains"])
    assert (tuple(args.include), tuple(args.exclude)) == (crawl["include"], crawl["exclude"])
    assert (args.max_attempts, args.parse_workers, args.parse_mode, args.extractor, not args.no_robots) == (
        crawl["max_attempts"], crawl["parse_workers"], crawl["parse_mode"], crawl["extractor"], crawl["obey_robots"])
    assert (args.per_host, args.connections, args.delay) == (
        fetcher["max_connections_per_host"], fetcher["max_connections"], fetcher["host_delay"])
    assert (args.connect_timeout, args.read_timeout, args.request_timeout) == (
        fetcher["connect_timeout"], fetcher["read_timeout"], fetcher["request_timeout"])


def test_a_later_resolve_entry_for_the_same_host_wins_whatever_its_case() -> None:
    """As with curl: ``--resolve A.test:1:X --resolve a.test:1:Y`` sends a.test to Y (FetcherConfig itself refuses
    one name mapped twice, so the command line folds the case first)."""
    args = build_parser().parse_args(
        ["fetch", "http://a.test:1/", "--resolve", "A.test:1:127.0.0.1", "--resolve", "a.test:1:127.0.0.2"]
    )
    assert dict(config_from(args).resolve) == {"a.test:1": "127.0.0.2"}

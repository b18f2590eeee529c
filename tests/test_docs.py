"""The documentation holds: README.md and docs/*.md run, link and name what the code has.

- Every ```python block runs as it is, as a script of its own in a new
  process (in an empty working directory), with nothing started for it: a
  block starts the servers it fetches from (``TestSite``, ``ForwardProxy``),
  as a reader who copies it has none, and names no fixed local port.  A block
  that fails or prints nothing fails; a crawl example's ``on_page`` lines
  come out whole, although it runs in several threads at once.  The crawl
  examples carry no ``if __name__ == "__main__":`` guard, so they also show
  that the crawler's parse processes never re-run the user's script.  A
  block that cannot run here is marked by the line ``<!-- no-run: why -->``
  just above it.
- Every relative link points at a file (or folder) of the repository, and a
  ``#fragment`` at one of its headings; no link leaves the repository.
- The option tables of FetcherConfig and CrawlConfig list every field with
  the code's default; the result values' fields are all named.
- docs/cli.md shows each command's options as its parser has them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import niofetcher
from niofetcher import CrawlConfig, CrawledPage, CrawlSummary, FetcherConfig, FetcherStats, FetchResult, HostStats

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.MULTILINE | re.DOTALL)
_PYTHON = re.compile(
    r"^(?:<!--\s*no-run:\s*(?P<reason>\S.*?)\s*-->\n)?```python\n(?P<code>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL
)
_NO_RUN = re.compile(r"<!--\s*no-run")
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# A local address with a port written out: a server the reader would have to start first.
_FIXED_PORT = re.compile(r"(?:127\.0\.0\.1|localhost|\[::1\]|\.test):\d+")
# What an example's on_page prints for each page: depth, status, URL, links.
_PAGE_LINE = re.compile(r"\d+ \d+ http://\S+ \d+")
# Runs the script argv[1] as ``python script`` does, the threads switching every microsecond.
_SWITCH_OFTEN = "import runpy, sys; sys.setswitchinterval(1e-6); runpy.run_path(sys.argv[1], run_name='__main__')"


class Example(NamedTuple):
    """One ```python block of a page."""

    page: Path
    line: int
    code: str
    no_run: str | None  # why it is not run, or None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in _PYTHON.finditer(text):
            line = text.count("\n", 0, match.start("code"))  # the fence's line, counted from 1
            found.append(Example(page, line, match["code"], match["reason"]))
    return found


def test_the_pages_have_examples() -> None:
    by_page = {example.page for example in examples() if example.no_run is None}
    assert ROOT / "README.md" in by_page
    assert {ROOT / "docs" / "fetcher.md", ROOT / "docs" / "crawler.md"} <= by_page


def test_every_no_run_mark_belongs_to_a_block() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        marked = sum(1 for example in examples() if example.page == page and example.no_run is not None)
        assert len(_NO_RUN.findall(text)) == marked, f"{page.name}: a no-run mark not just above a ```python block"


@pytest.mark.parametrize("example", examples(), ids=lambda example: example.name)
def test_example_starts_what_it_fetches(example: Example) -> None:
    assert not _FIXED_PORT.findall(example.code), "a server the example does not start: start a TestSite"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("example", examples(), ids=lambda example: example.name)
def test_example_runs(example: Example, tmp_path: Path) -> None:
    if example.no_run is not None:
        pytest.skip(f"marked no-run: {example.no_run}")
    script = tmp_path / "example.py"
    script.write_text(example.code, encoding="utf-8")
    prints_pages = "def on_page(" in example.code
    # A crawl example's on_page runs in several threads: with the GIL handed over as often as it
    # can be, lines that two threads print at once are all but sure to run together.
    run = [sys.executable, "-c", _SWITCH_OFTEN, str(script)] if prints_pages else [sys.executable, str(script)]
    done = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, errors="replace", timeout=120,
                          check=False, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), f"the example printed nothing\n{done.stderr}"
    if prints_pages:  # its lines, and the summary's last
        torn = [line for line in done.stdout.splitlines()[:-1] if not _PAGE_LINE.fullmatch(line)]
        assert not torn, f"lines printed by on_page came out run together: {torn[:3]}"


# -- links ---------------------------------------------------------------------


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where a ``[x](y)`` is no link."""
    return re.sub(r"`[^`\n]*`", "", _FENCE.sub("", text))


def _slugs(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them (a repeated one gets -1, -2...)."""
    slugs: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        slug = re.sub(r"[^\w\- ]", "", re.sub(r"<[^>]+>", "", heading).strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in slugs:
            n += 1
            candidate = f"{slug}-{n}"
        slugs.add(candidate)
    return slugs


def _links(page: Path) -> list[str]:
    return _LINK.findall(_prose(page.read_text(encoding="utf-8")))


def test_the_link_checker_sees_the_links() -> None:
    assert "docs/guarantees.md" in _links(ROOT / "README.md")
    assert "guarantees.md#stops-what-each-one-leaves-behind" in _links(ROOT / "docs" / "cli.md")
    assert "stops-what-each-one-leaves-behind" in _slugs(ROOT / "docs" / "guarantees.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_links_point_at_files_of_the_repository(page: Path) -> None:
    problems = []
    for link in _links(page):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", link):
            if not link.startswith(("https://", "http://", "mailto:")):
                problems.append(f"{link}: not a web link")
            continue
        path, _, fragment = link.partition("#")
        if path.startswith("/"):
            problems.append(f"{link}: absolute path (not a link inside the repository on every host)")
            continue
        target = (page.parent / path).resolve() if path else page
        if not target.is_relative_to(ROOT):
            problems.append(f"{link}: outside the repository")
        elif not target.exists():
            problems.append(f"{link}: no such file")
        elif fragment and target.suffix == ".md" and fragment not in _slugs(target):
            problems.append(f"{link}: no heading #{fragment} in {target.relative_to(ROOT)}")
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_pages_do_not_send_readers_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "../shared" not in text and "DESIGN.md" not in text


# -- what the pages say the code has ---------------------------------------------------------


def _option_table(page: Path, heading: str) -> dict[str, str]:
    """``{option: its default cell}`` of the table under ``## heading``."""
    text = page.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return {m[1]: m[2] for m in re.finditer(r"^\|\s*`(\w+)`\s*\|\s*([^|]*?)\s*\|", section, re.MULTILINE)}


def _documented_default(cell: str) -> Any:
    code = re.search(r"`([^`]*)`", cell)
    if code is None:
        return cell  # "required"
    return eval(code[1].replace("<version>", niofetcher.__version__), {"__builtins__": {}, "FetcherConfig": FetcherConfig})


@pytest.mark.parametrize(("page", "config"), [
    ("fetcher.md", FetcherConfig()), ("crawler.md", CrawlConfig(seeds=["http://a.test/"])),
], ids=["FetcherConfig", "CrawlConfig"])
def test_option_tables_give_the_codes_defaults(page: str, config: Any) -> None:
    table = _option_table(ROOT / "docs" / page, type(config).__name__)
    fields = {f.name: f for f in dataclasses.fields(config)}
    assert set(table) == set(fields), "options missing from the table, or not options"
    for name, cell in table.items():
        f = fields[name]
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            assert cell == "required", name
        else:
            assert _documented_default(cell) == getattr(config, name), f"{name}: the table says {cell}"


@pytest.mark.parametrize(("page", "cls"), [
    ("fetcher.md", FetchResult), ("fetcher.md", FetcherStats), ("fetcher.md", HostStats),
    ("crawler.md", CrawledPage), ("crawler.md", CrawlSummary),
], ids=lambda value: getattr(value, "__name__", value))
def test_every_field_of_a_result_is_named(page: str, cls: type) -> None:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    names = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
    names |= {name for name, value in vars(cls).items() if isinstance(value, property) and not name.startswith("_")}
    assert not {name for name in names if f"`{name}`" not in text}


# -- the CLI reference -------------------------------------------------------------------------


COMMANDS = ("fetch", "crawl", "status", "testsite", "demo")
_CLI_PAGE = ROOT / "docs" / "cli.md"


def _help(*argv: str) -> str:
    from niofetcher.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main([*argv, "--help"])
    return out.getvalue()


def _cli_section(title: str) -> str:
    text = _CLI_PAGE.read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_cli_pages_usage_is_the_parsers() -> None:
    head = _CLI_PAGE.read_text(encoding="utf-8").split("\n## ", 1)[0]
    block = re.search(r"^```text\n(.*?)^```", head, re.MULTILINE | re.DOTALL)
    assert block is not None
    assert set(_OPTION.findall(block[1])) == set(_OPTION.findall(_help()))
    assert set(COMMANDS) <= set(re.findall(r"^    (\w+) ", block[1], re.MULTILINE))


@pytest.mark.parametrize("command", COMMANDS)
def test_the_cli_page_names_every_option(command: str) -> None:
    real = set(_OPTION.findall(_help(command)))
    section = _cli_section(f"niofetcher {command}")
    block = re.search(r"^```text\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert block is not None, f"no --help block under ## niofetcher {command}"
    assert set(_OPTION.findall(block[1])) == real, "the --help block is not the parser's: regenerate it"
    explained = _FENCE.sub("", section)
    if command in ("fetch", "crawl"):
        explained += _cli_section("Options of fetch and crawl")
    tabled = set(re.findall(r"^\|\s*`(--[a-z][a-z0-9-]*)", explained, re.MULTILINE))
    assert tabled <= real, "options in the tables that the command does not have"
    assert not real - {"--help"} - set(_OPTION.findall(explained)), "options the page does not explain"

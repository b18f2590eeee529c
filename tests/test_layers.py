"""The package's layers, read from its source with ``ast``: imports point one way.

The fetcher (the modules directly in ``niofetcher/``, and the URL rules'
package ``niofetcher/urls/``) knows nothing of the crawler, the command line
or the test site; the crawler knows nothing of the command line; the test
site is the standard library only. Above
``crawl/frontier/`` nothing imports or names a database driver (sqlite3,
psycopg) nor a backend's module: ``open_frontier()`` opens a frontier and
``FrontierError`` carries its failures (issue 26). A module that breaks
a rule fails here with the line that does it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from niofetcher.testing import TestSite

PACKAGE = Path(__file__).resolve().parent.parent / "niofetcher"
LAYERS = ("crawl", "cli", "testing")

# The test site's first name: a module that is nothing but an alias of
# niofetcher.testing, so that programs written against it keep working.
ALIASES = {"niofetcher.testsite"}
# The package itself is the public face: it names the crawler's classes for type
# checkers under ``if TYPE_CHECKING:`` and loads them on first use; any other
# import of crawl/ there would load the crawler for every program that fetches.
TYPE_NAMES_ONLY = {"niofetcher"}

# What each layer may not import (the package's own subpackages).
FORBIDDEN = {
    "fetcher": {"niofetcher.crawl", "niofetcher.cli", "niofetcher.testing"},
    "crawl": {"niofetcher.cli", "niofetcher.testing"},
    "testing": {"niofetcher.crawl", "niofetcher.cli"},
    "cli": set(),
}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(name: str) -> str:
    parts = name.split(".")
    if name == "niofetcher.__main__":  # ``python -m niofetcher`` is the command line
        return "cli"
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "fetcher"


def imports_of(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """Every module a file imports, as absolute names, with its line."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    tree = ast.parse(path.read_text(), str(path))
    if name in TYPE_NAMES_ONLY:
        tree.body = [node for node in tree.body if not _is_type_checking_block(node)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # ``from . import crawl`` names a subpackage in the alias.
            found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names)
    return found


def _is_type_checking_block(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def violations(root: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        if name in ALIASES:
            continue
        layer = layer_of(name)
        for line, target in imports_of(path, root):
            for banned in FORBIDDEN[layer]:
                if target == banned or target.startswith(banned + "."):
                    found.append(f"{path.relative_to(root.parent)}:{line}: {layer} imports {target}")
    return found


# The database drivers, which only the frontier's backends may import or name.
DRIVERS = {"sqlite3", "_sqlite3", "psycopg", "psycopg_binary", "psycopg_c", "psycopg_pool", "psycopg2"}
FRONTIER = "niofetcher.crawl.frontier"
# The frontier's backends (a package each, every module in it included) and their SQL; the rest
# (base, locations, hosts, recent, service) is what any backend shares.
BACKENDS = {f"{FRONTIER}.{name}" for name in ("sqlite", "schema", "postgres", "postgres_schema")}


def backend_leaks(root: Path = PACKAGE) -> list[str]:
    """Every import or name of a driver, and every import of a backend's module, outside the frontier."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        if name == FRONTIER or name.startswith(FRONTIER + "."):
            continue
        where = path.relative_to(root.parent)
        for line, target in imports_of(path, root):
            if target.split(".")[0] in DRIVERS:
                found.append(f"{where}:{line}: imports {target}")
            elif any(target == backend or target.startswith(backend + ".") for backend in BACKENDS):
                found.append(f"{where}:{line}: imports the backend module {target}")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            named = node.id if isinstance(node, ast.Name) else node.value if isinstance(node, ast.Constant) else None
            if isinstance(named, str) and (named.split(".")[0] in DRIVERS or named in BACKENDS):
                found.append(f"{where}:{node.lineno}: names {named}")  # type: ignore[attr-defined]
    return found


def test_no_driver_and_no_backend_above_the_frontier() -> None:
    assert backend_leaks() == []


def test_the_checker_sees_a_driver_or_a_backend_above_the_frontier(tmp_path: Path) -> None:
    """Negative control: what the frontier's backends may do, the rest of the package may not."""
    fake = tmp_path / "niofetcher"
    (fake / "crawl" / "frontier" / "sqlite").mkdir(parents=True)
    (fake / "cli").mkdir()
    (fake / "crawl" / "frontier" / "sqlite" / "frontier.py").write_text("import sqlite3\nERRORS = (sqlite3.Error,)\n")
    (fake / "crawl" / "pipeline.py").write_text("import os\nfrom .frontier import open_frontier\n"
                                                "ERRORS = (sqlite3.Error, OSError)\n")
    (fake / "cli" / "status.py").write_text("from ..crawl.frontier.postgres import crawl_status\n"
                                            "from ..crawl.frontier.base import CrawlStatus\n")
    (fake / "cli" / "crawl.py").write_text("import importlib\nimportlib.import_module('psycopg')\n"
                                           "from psycopg import errors\n")
    assert backend_leaks(fake) == [
        "niofetcher/cli/crawl.py:3: imports psycopg",
        "niofetcher/cli/crawl.py:3: imports psycopg.errors",
        "niofetcher/cli/crawl.py:2: names psycopg",
        "niofetcher/cli/status.py:1: imports the backend module niofetcher.crawl.frontier.postgres",
        "niofetcher/cli/status.py:1: imports the backend module niofetcher.crawl.frontier.postgres.crawl_status",
        "niofetcher/crawl/pipeline.py:3: names sqlite3",
    ]


# Inside the frontier, the modules that may import a backend: the package's face (``Frontier`` is the
# SQLite class, which users construct by that name) and locations.py, which opens any of them.
OPENERS = {FRONTIER, f"{FRONTIER}.locations"}
# Each backend with its own SQL: what it may import of the backends.
OWN = {"sqlite": ("sqlite", "schema"), "postgres": ("postgres", "postgres_schema")}


def backends_named_inside(root: Path = PACKAGE) -> list[str]:
    """Every import of a backend inside the frontier by a module that is not an opener nor that backend."""
    found = []
    for path in sorted((root / "crawl" / "frontier").rglob("*.py")):
        name = module_name(path, root)
        if name in OPENERS:
            continue
        part = name[len(FRONTIER) + 1:].split(".")[0]
        own = {f"{FRONTIER}.{mine}" for mine in OWN.get(part, (part,))}
        for line, target in imports_of(path, root):
            for backend in BACKENDS - own:
                if target == backend or target.startswith(backend + "."):
                    found.append(f"{path.relative_to(root.parent)}:{line}: imports {target}")
    return found


def test_inside_the_frontier_only_locations_opens_a_backend() -> None:
    """The shared modules (base, hosts, recent, service) know no backend, and no backend knows another."""
    assert backends_named_inside() == []


def test_the_checker_sees_a_backend_named_inside_the_frontier(tmp_path: Path) -> None:
    """Negative control: a shared module or another backend that imports a backend is reported."""
    frontier = tmp_path / "niofetcher" / "crawl" / "frontier"
    (frontier / "postgres").mkdir(parents=True)
    (frontier / "service.py").write_text("from .sqlite import Frontier\n")
    (frontier / "locations.py").write_text("from .postgres import PostgresFrontier\n")
    (frontier / "postgres" / "leases.py").write_text("from ..postgres_schema import TAKE\nfrom ..schema import COUNTS\n")
    assert backends_named_inside(tmp_path / "niofetcher") == [
        "niofetcher/crawl/frontier/postgres/leases.py:2: imports niofetcher.crawl.frontier.schema",
        "niofetcher/crawl/frontier/postgres/leases.py:2: imports niofetcher.crawl.frontier.schema.COUNTS",
        "niofetcher/crawl/frontier/service.py:1: imports niofetcher.crawl.frontier.sqlite",
        "niofetcher/crawl/frontier/service.py:1: imports niofetcher.crawl.frontier.sqlite.Frontier",
    ]


def test_imports_point_one_way() -> None:
    assert violations() == []


def test_the_test_site_is_standard_library_only() -> None:
    stdlib = sys.stdlib_module_names
    outside = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {target}"
        for path in sorted((PACKAGE / "testing").rglob("*.py"))
        for line, target in imports_of(path)
        if not target.startswith("niofetcher") and target.split(".")[0] not in stdlib
    ]
    assert outside == []


def test_the_checker_sees_a_wrong_import(tmp_path: Path) -> None:
    """Negative control: a fetcher module that imports the crawler is reported."""
    fake = tmp_path / "niofetcher"
    (fake / "crawl").mkdir(parents=True)
    (fake / "crawl" / "__init__.py").write_text("from ..engine import Engine\n")
    (fake / "engine.py").write_text("import os\nfrom .crawl import frontier\n")
    (fake / "pool.py").write_text("from . import cli\n")
    (fake / "urls").mkdir()  # a subpackage of the fetcher's (the URL rules) is the fetcher too
    (fake / "urls" / "links.py").write_text("from ..crawl.frontier import traps\n")
    (fake / "__init__.py").write_text("if TYPE_CHECKING:\n    from .crawl import Crawler\nfrom .crawl import frontier\n")
    found = violations(fake)
    assert found == [
        "niofetcher/__init__.py:3: fetcher imports niofetcher.crawl",
        "niofetcher/__init__.py:3: fetcher imports niofetcher.crawl.frontier",
        "niofetcher/engine.py:2: fetcher imports niofetcher.crawl",
        "niofetcher/engine.py:2: fetcher imports niofetcher.crawl.frontier",
        "niofetcher/pool.py:1: fetcher imports niofetcher.cli",
        "niofetcher/urls/links.py:1: fetcher imports niofetcher.crawl.frontier",
        "niofetcher/urls/links.py:1: fetcher imports niofetcher.crawl.frontier.traps",
    ]


def modules_loaded_by_fetch(*options: str) -> tuple[str, list[str]]:
    """Run ``niofetcher fetch`` on a page of a test site with ``options``, in a fresh interpreter: its exit
    status and the modules it loaded of the crawler, the crawl command and the libraries only a crawl needs."""
    heavy = ("bs4", "lxml", "protego", "tqdm", "warcio", "sqlite3", "_sqlite3")
    with TestSite(hosts=1, pages=2) as site:
        url = f"{site.base_urls[0]}page/1"
        script = (
            "import sys, contextlib, io\n"
            "from niofetcher.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    status = main(['fetch', {url!r}, *{list(options)!r}])\n"
            f"print(status, sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}"
            " or m.startswith(('niofetcher.crawl', 'niofetcher.cli.crawl'))))\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
        assert site.counters().requests == 1
    status, _, loaded = done.stdout.strip().partition(" ")
    return status, ast.literal_eval(loaded)


def test_the_fetch_command_does_not_load_the_crawler() -> None:
    """``niofetcher fetch`` pays only for the fetcher: no parser, robots.txt, progress bar, WARC library or SQLite."""
    assert modules_loaded_by_fetch() == ("0", [])


def test_fetch_warc_loads_the_warc_library_and_still_not_the_crawler(tmp_path: Path) -> None:
    """``fetch --warc`` writes its records with cli/warc.py, the one home of crawl's too, which needs warcio alone."""
    status, loaded = modules_loaded_by_fetch("--warc", str(tmp_path / "fetched.warc.gz"))
    assert status == "0"
    assert "warcio" in loaded and [name for name in loaded if not name.startswith("warcio")] == []


# Arrows between fetcher modules that the seam took away (issue 30): requests are plain header pairs,
# and only the HTTP/1.1 driver knows what h11 makes of them.
SEAM_ARROWS = {("niofetcher.request", "niofetcher.http11")}


def fetcher_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Each fetcher module (the package's face left out) and the fetcher modules it imports,
    those under ``if TYPE_CHECKING:`` included: a circle of names is a circle of knowledge."""
    paths = {module_name(path, root): path for path in sorted(root.glob("*.py"))}
    modules = {name for name in paths if name != root.name and layer_of(name) == "fetcher"}
    return {name: {target for _, target in imports_of(paths[name], root) if target in modules and target != name}
            for name in sorted(modules)}


def seam_breaches(root: Path = PACKAGE) -> list[str]:
    """Every import circle between fetcher modules (its members, sorted), and every arrow of SEAM_ARROWS."""
    graph = fetcher_graph(root)

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for target in graph[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    reached = {name: reach(name) for name in graph}
    circles = {tuple(sorted(other for other in graph if other in reached[name] and name in reached[other]))
               for name in graph if name in reached[name]}
    found = [f"circle: {' <-> '.join(circle)}" for circle in sorted(circles)]
    found.extend(f"{source} imports {target}" for source, target in sorted(SEAM_ARROWS) if target in graph.get(source, ()))
    return found


def test_fetcher_modules_import_in_no_circle_and_requests_know_no_http11() -> None:
    assert seam_breaches() == []


def test_the_checker_sees_a_circle_and_a_seam_arrow(tmp_path: Path) -> None:
    """Negative control: a circle made under TYPE_CHECKING counts, and request.py may not import http11."""
    fake = tmp_path / "niofetcher"
    fake.mkdir()
    (fake / "__init__.py").write_text("from .pool import HostTable\n")
    (fake / "connection.py").write_text("if TYPE_CHECKING:\n    from .pool import HostSlot\nfrom . import loop\n")
    (fake / "pool.py").write_text("from .connection import Connection\n")
    (fake / "loop.py").write_text("import selectors\n")
    (fake / "request.py").write_text("from .http11 import validated_headers\n")
    (fake / "http11.py").write_text("from .models import Exchange\n")
    (fake / "models.py").write_text("")
    assert seam_breaches(fake) == [
        "circle: niofetcher.connection <-> niofetcher.pool",
        "niofetcher.request imports niofetcher.http11",
    ]


# Small modules with one job: a module past this has grown a second one (issue 30, item 4).
MAX_MODULE_LINES = 650


def modules_over(limit: int, root: Path = PACKAGE) -> dict[str, int]:
    """Each module of ``root`` longer than ``limit`` lines, with its length."""
    lengths = {str(path.relative_to(root.parent)): len(path.read_text().splitlines()) for path in root.rglob("*.py")}
    return {name: lines for name, lines in lengths.items() if lines > limit}


def test_no_module_is_over_the_limit() -> None:
    assert modules_over(MAX_MODULE_LINES) == {}


def test_the_checker_sees_a_long_module(tmp_path: Path) -> None:
    package = tmp_path / "niofetcher"
    (package / "crawl").mkdir(parents=True)
    (package / "crawl" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (package / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert modules_over(MAX_MODULE_LINES, package) == {"niofetcher/crawl/long.py": MAX_MODULE_LINES + 1}

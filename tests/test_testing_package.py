"""The test site as a package: one name for programs, every name they take from it there.

``niofetcher.testing`` is split into modules (site, pages, messages, server,
tls) but is still used as one module, under two names: every name a program
of the repository imports from it must be there.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import niofetcher.testing
import niofetcher.testsite

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "niofetcher" / "testing"

# ``from niofetcher.testing import A, B`` (or testsite, or ``from ..testing`` inside the package).
IMPORT = re.compile(r"from (?:niofetcher\.|\.\.)(?:testing|testsite) import (?:\(([^)]*)\)|([^\n]*))")
# ``testsite.NAME`` read, or ``setattr(testsite, "NAME", ...)`` patched, on the module itself.
ATTRIBUTE = re.compile(r"\b(?:testsite|testing)\.([A-Za-z_]\w*)|setattr\((?:testsite|testing), \"(\w+)\"")


def names_used_outside_the_package() -> dict[str, list[str]]:
    """Every name that a file of the repository takes from the test site, with the files that take it."""
    found: dict[str, list[str]] = {}
    files = [*ROOT.glob("README.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("benchmarks/**/*.md")]
    files += [path for folder in ("tests", "benchmarks", "niofetcher") for path in (ROOT / folder).rglob("*.py")]
    for path in files:
        if PACKAGE in path.parents or path == Path(__file__).resolve():  # this file shows the patterns
            continue
        text = path.read_text()
        names = [
            item.split()[0]  # ``A as B`` takes A
            for group in IMPORT.findall(text)
            for item in "".join(group).split(",")
            if item.strip()
        ]
        if path.suffix == ".py":
            names += [a or b for a, b in ATTRIBUTE.findall(text)]
        for name in names:
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_testsite_is_the_testing_package() -> None:
    assert niofetcher.testsite is niofetcher.testing
    assert sys.modules["niofetcher.testsite"] is sys.modules["niofetcher.testing"]


def test_every_name_the_repository_takes_from_the_test_site_is_there() -> None:
    used = names_used_outside_the_package()
    # The scan itself works: names known to be imported by tests, benchmarks and the command line.
    assert {"TestSite", "PortCounters", "tls_context_from_files", "LISTEN_BACKLOG",
            "_SO_TIMESTAMPNS"} <= set(used)
    # A module of the package (``niofetcher.testing.webshaped``) is there as a file, an attribute of the
    # package only once something imported it.
    missing = {name: files for name, files in used.items()
               if not hasattr(niofetcher.testing, name) and not (PACKAGE / f"{name}.py").is_file()}
    assert missing == {}

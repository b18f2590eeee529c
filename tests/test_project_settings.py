"""The project's tool settings cover what they are meant to cover."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11 and newer")

ROOT = Path(__file__).resolve().parent.parent


def test_every_test_module_is_checked_by_mypy_with_the_relaxed_settings() -> None:
    """mypy names test modules as top-level modules and cannot match "test_*": pyproject lists them, all of them."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    relaxed = next(o["module"] for o in settings["overrides"] if o.get("disallow_untyped_defs") is False)
    assert sorted(relaxed) == sorted(path.stem for path in (ROOT / "tests").glob("*.py"))


def test_ci_runs_exactly_the_test_command_of_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.startswith("python3 -m pip install -e '.[test]'"))
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == command
    assert "ruff check" in command and "mypy" in command  # lint and types before the tests

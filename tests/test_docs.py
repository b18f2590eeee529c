"""The README's Python examples run as they are, against a local test site.

Each ```python block of README.md is written to a script of its own and run
as a new process, with ``http://127.0.0.1:8080`` pointed at a test site this
test starts; a block that fails or prints nothing fails the test.  The crawl
example carries no ``if __name__ == "__main__":`` guard, so it also shows that
the crawler's parse processes never re-run the user's script.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from niofetcher.testing import TestSite

README = Path(__file__).resolve().parent.parent / "README.md"
EXAMPLE_ORIGIN = "http://127.0.0.1:8080"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", README.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)


def test_readme_has_examples() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 2
    assert all(EXAMPLE_ORIGIN in block for block in blocks)


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_example_runs(index: int, tmp_path: Path) -> None:
    with TestSite(hosts=1, pages=20, max_seconds=60) as site:
        script = tmp_path / f"example_{index}.py"
        script.write_text(python_blocks()[index].replace(EXAMPLE_ORIGIN, site.base_urls[0].rstrip("/")))
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=90, check=False,
            env={"PYTHONPATH": str(README.parent), "PATH": "/usr/bin:/bin"},
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), done.stderr

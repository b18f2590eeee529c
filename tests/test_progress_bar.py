"""The progress bar of ``niofetcher crawl`` in a real terminal of 80 columns (tmux).

tqdm gives the bar what the rest of its line leaves: with every number as the bar's postfix, an
80-column terminal had a bar one character wide.  Here a crawl draws its bar in a tmux pane of
80 x 24, and the pane, as tmux shows it, is read back: the bar's line and the numbers' line below
it fit, and the bar is a bar.  Skipped where tmux is not installed (Debian: ``apt-get install tmux``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from niofetcher.testing import TestSite

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = 80
# The bar's line: " 34%|█████████      | 537/1.59k [00:03, 152 pages/s, 4 connections]"
_BAR_LINE = re.compile(r"^\s*\d+%\|(?P<bar>[^|]*)\|")

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def tmux(server: str, *args: str) -> str:
    """A tmux command on a server of this test's own (``-L``), never the user's."""
    return subprocess.run(["tmux", "-L", server, *args], capture_output=True, text=True, timeout=10,
                          check=True).stdout


def bar_of(pane: str) -> tuple[str, str] | None:
    """The bar's line and the line below it, once the pane shows them."""
    lines = pane.splitlines()
    for i, line in enumerate(lines[:-1]):
        if _BAR_LINE.match(line):
            return line, lines[i + 1]
    return None


@pytest.mark.timeout(60)
def test_the_bar_and_its_numbers_fit_80_columns_with_a_bar_of_a_third_of_them(tmp_path: Path) -> None:
    server = f"niofetcher-test-{os.getpid()}"
    with TestSite(hosts=1, pages=600, delay=0.02) as site:
        command = shlex.join(["env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "niofetcher", "crawl",
                              site.base_urls[0], "--db", str(tmp_path / "crawl.sqlite"), "--progress", "bar"])
        tmux(server, "new-session", "-d", "-x", str(COLUMNS), "-y", "24", f"{command}; sleep 60")
        try:
            deadline = time.monotonic() + 30
            shown = None
            while shown is None or shown[0].lstrip().startswith("0%"):  # a bar with something done
                assert time.monotonic() < deadline, tmux(server, "capture-pane", "-p")
                time.sleep(0.1)
                shown = bar_of(tmux(server, "capture-pane", "-p"))
        finally:
            subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, timeout=10, check=False)
    bar_line, numbers = shown
    assert len(bar_line) <= COLUMNS and len(numbers) <= COLUMNS, (bar_line, numbers)
    match = _BAR_LINE.match(bar_line)
    assert match is not None and len(match["bar"]) >= COLUMNS // 3, bar_line
    assert "█" in match["bar"] and re.search(r"\[.*, .* pages/s, \d+ connections\]$", bar_line), bar_line
    assert re.fullmatch(r"\d+ done, \d+ failed, \d+ waiting; \d+ fetching, \d+ queued or parsing", numbers), numbers

"""One crawl owns a frontier file at a time (issue 9, case 3; docs/crawler.md).

A second opener -- another process, or another Frontier in this one -- gets a one-line
FrontierLocked naming the file and the owner's pid, and changes nothing: above all it must not put
the owner's 'processing' rows back to 'waiting' (the crash recovery that opening does).  The lock
goes with the owning process, so a SIGKILL leaves none behind, and neither does a forked child of
the owner that outlives it.  The owner is a real second process wherever the issue is about one.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from niofetcher.crawl.frontier import Frontier, FrontierError, FrontierLocked

pytestmark = pytest.mark.timeout(60)

# Holds the frontier open with three URLs claimed (committed), says so, and waits to be killed.
# With "fork", it first forks a child that holds whatever it inherited until its stdin closes.
OWNER_SCRIPT = """
import os, sys, time
from niofetcher.crawl.frontier import Frontier
frontier = Frontier(sys.argv[1])
frontier.add(["http://a.test/%d" % i for i in range(5)])
frontier.claim(3)
frontier.flush()
child = 0
if sys.argv[2] == "fork":
    started_r, started_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(started_w, b"!")  # the after-fork hooks have run by now
        sys.stdin.read()
        os._exit(0)
    os.read(started_r, 1)  # else a SIGKILL could come before the child has run at all
print(os.getpid(), child, flush=True)
time.sleep(60)
"""


def states(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute("SELECT url, state FROM urls"))
    finally:
        conn.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "crawl.sqlite"


@pytest.fixture
def owners() -> Iterator[list[subprocess.Popen[str]]]:
    """The owner processes a test starts, killed at teardown if the test did not."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for owner in started:
        if owner.poll() is None:
            owner.kill()
        kill(owner)


def start_owner(owners: list[subprocess.Popen[str]], db: Path, mode: str = "plain") -> tuple[subprocess.Popen[str], int]:
    owner = subprocess.Popen([sys.executable, "-c", OWNER_SCRIPT, str(db), mode],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    owners.append(owner)
    assert owner.stdout is not None
    line = owner.stdout.readline()
    if not line:
        owner.kill()
        _, err = owner.communicate(timeout=10)
        pytest.fail(f"the owner process did not start: {err}")
    pid, child = (int(x) for x in line.split())
    assert pid == owner.pid
    return owner, child


def kill(owner: subprocess.Popen[str]) -> None:
    """SIGKILL, wait for it (not for EOF on its pipes, which a forked child may hold), and close its
    pipes: closing stdin ends a forked child too."""
    if owner.returncode is None:
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
    for pipe in (owner.stdin, owner.stdout, owner.stderr):
        if pipe is not None:
            pipe.close()


def test_a_second_process_is_refused_and_changes_nothing_until_the_owner_dies(
    db: Path, owners: list[subprocess.Popen[str]]
) -> None:
    owner, _ = start_owner(owners, db)
    before = states(db)
    assert sorted(before.values()) == ["processing"] * 3 + ["waiting"] * 2

    for _ in range(2):  # and again: a refused open leaves nothing behind that would change the answer
        with pytest.raises(FrontierLocked) as info:
            Frontier(db)
        message = str(info.value)
        assert message == f"{db} is in use by another crawl (pid {owner.pid})"
        assert isinstance(info.value, FrontierError) and isinstance(info.value, ValueError)
        assert states(db) == before  # the owner's claims are still 'processing'

    kill(owner)
    assert owner.returncode == -signal.SIGKILL
    assert (db.parent / (db.name + ".lock")).exists()  # left behind, with the dead pid in it: no matter
    with Frontier(db) as frontier:  # the kernel let the lock go with the process: this is a resume
        assert frontier.counts() == {"waiting": 5, "processing": 0, "done": 0, "error": 0}
        assert [item.url for item in frontier.claim(10)] == [f"http://a.test/{i}" for i in range(5)]


def test_a_forked_child_of_the_owner_does_not_keep_the_lock(db: Path, owners: list[subprocess.Popen[str]]) -> None:
    """A child forked by the crawl (a user's os.fork, multiprocessing's "fork") shares the lock's open
    file; it lets go of it at once, so the lock still dies with the crawl, not with the child."""
    owner, child = start_owner(owners, db, "fork")
    with pytest.raises(FrontierLocked, match=f"pid {owner.pid}"):
        Frontier(db)
    assert owner.stdin is not None
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=10)
    os.kill(child, 0)  # still alive (signal 0 only asks): it holds the owner's stdin open
    with Frontier(db) as frontier:
        assert frontier.counts()["waiting"] == 5


def test_a_second_frontier_in_the_same_process_is_refused(db: Path) -> None:
    first = Frontier(db)
    first.add([f"http://a.test/{i}" for i in range(4)])
    claimed = first.claim(2)
    first.flush()
    with pytest.raises(FrontierLocked) as info:
        Frontier(db)
    assert str(info.value) == f"{db} is in use by another crawl (pid {os.getpid()}, this process)"
    assert sorted(states(db).values()) == ["processing", "processing", "waiting", "waiting"]
    first.complete(claimed[0].url, 200)  # the owner goes on undisturbed
    first.close()
    with Frontier(db) as again:
        assert again.counts() == {"waiting": 3, "processing": 0, "done": 1, "error": 0}


def test_close_lets_go_and_the_file_can_be_reopened_at_once(db: Path) -> None:
    lock = db.parent / (db.name + ".lock")
    for n in range(3):
        with Frontier(db) as frontier:
            assert lock.read_text().split()[0] == str(os.getpid())
            frontier.add([f"http://a.test/{n}"])
        assert not lock.exists()  # close() removes it, as SQLite removes -wal and -shm
    with Frontier(db) as frontier:
        assert frontier.counts()["waiting"] == 3
    # A failed open lets go too.
    db.write_bytes(b"not a database" * 100)
    for _ in range(2):
        with pytest.raises(FrontierError, match="not a database"):
            Frontier(db)
        assert not lock.exists()


def test_in_memory_frontiers_take_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Frontier(":memory:") as first, Frontier(":memory:") as second:
        assert first.add(["http://a.test/"]) == second.add(["http://a.test/"]) == 1
    assert list(tmp_path.iterdir()) == []


def test_another_name_for_the_same_file_is_refused_too(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    link = tmp_path / "link.sqlite"
    link.symlink_to(db)
    monkeypatch.chdir(tmp_path)
    with Frontier(db):
        for other in (link, Path(db.name), Path(".") / ".." / tmp_path.name / db.name):
            with pytest.raises(FrontierLocked, match=f"^{re.escape(str(other))} is in use by another crawl"):
                Frontier(other)

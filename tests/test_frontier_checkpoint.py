"""complete_many()'s checkpoint: the outputs' committed lengths, stored in the frontier (issue 9, case 6).

The CLI keeps ``--out`` and ``--warc`` exactly-once by storing each file's length in the same
transaction as the outcomes of the pages written into it, and cutting the files back to it on a
resume.  That needs: the checkpoint and those outcomes are committed together or not at all --
whichever commit of the batched ones it falls into, and when the writer is SIGKILLed at any moment
-- and a reopened frontier gives the checkpoint back.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from niofetcher.crawl.frontier import Frontier

pytestmark = pytest.mark.timeout(60)


def on_disk(db: Path) -> tuple[int, dict[str, int]]:
    """(done URLs, checkpoint) as a second connection sees the file: what is committed."""
    conn = sqlite3.connect(db)
    try:
        ((done,),) = conn.execute("SELECT COUNT(*) FROM urls WHERE state = 'done'").fetchall()
        return done, dict(conn.execute("SELECT name, value FROM checkpoints"))
    finally:
        conn.close()


def test_a_checkpoint_is_stored_and_read_back_after_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "crawl.sqlite"
    with Frontier(db) as frontier:
        assert frontier.checkpoint() == {}
        frontier.add([f"http://a.test/{i}" for i in range(4)])
        first, second, *_ = frontier.claim(4)
        frontier.complete_many([(first.url, 200)], {"out": 120, "warc": 4096})
        assert frontier.checkpoint() == {"out": 120, "warc": 4096}
        frontier.complete_many([], {"out": 240})  # no outcomes: stored all the same; names not given stay
        assert frontier.checkpoint() == {"out": 240, "warc": 4096}
        frontier.complete_many([(second.url, 200)])  # no checkpoint: it stays as it was
    with Frontier(db) as frontier:
        assert frontier.checkpoint() == {"out": 240, "warc": 4096}
        assert frontier.counts()["done"] == 2


def test_a_bad_checkpoint_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    with Frontier(tmp_path / "crawl.sqlite") as frontier:
        frontier.add(["http://a.test/"])
        (item,) = frontier.claim(1)
        for bad, error in (({"out": -1}, ValueError), ({"out": True}, TypeError), ({"out": 1.5}, TypeError),
                           ({3: 4}, TypeError)):
            with pytest.raises(error):
                frontier.complete_many([(item.url, 200)], bad)  # type: ignore[arg-type]
        assert frontier.state(item.url) == "processing" and frontier.checkpoint() == {}


def test_a_checkpoint_is_committed_by_the_commit_that_commits_its_outcomes(tmp_path: Path) -> None:
    """Batched: neither is on disk until the batch commits, then both are -- whichever call commits."""
    db = tmp_path / "crawl.sqlite"
    with Frontier(db, commit_every=3, commit_interval=3600) as frontier:
        frontier.add([f"http://a.test/{i}" for i in range(6)])
        items = frontier.claim(6)
        frontier.complete_many([(items[0].url, 200)], {"out": 1})
        assert on_disk(db) == (0, {})
        frontier.complete_many([], {"out": 2})  # a lone checkpoint counts as one pending outcome
        assert on_disk(db) == (0, {})
        frontier.fail(items[1].url, "boom")  # the third: this commits all of them
        assert on_disk(db) == (1, {"out": 2})
        frontier.complete_many([(items[2].url, 200), (items[3].url, 200)], {"out": 3})
        assert on_disk(db) == (1, {"out": 2})
        frontier.flush()
        assert on_disk(db) == (3, {"out": 3})
        frontier.complete_many([(items[4].url, 200)], {"out": 4})
    assert on_disk(db) == (4, {"out": 4})  # close() commits too


# Records one URL at a time with the number done so far as its checkpoint, and says so; killed at
# some moment, maybe in the middle of a commit.
WRITER_SCRIPT = """
import sys
from niofetcher.crawl.frontier import Frontier
frontier = Frontier(sys.argv[1], commit_every=int(sys.argv[2]))
frontier.add(["http://a.test/%d" % i for i in range(100000)])
done = 0
while True:
    for item in frontier.claim(10):
        done += 1
        frontier.complete_many([(item.url, 200)], {"out": done, "warc": 2 * done})
    print(done, flush=True)
"""


@pytest.mark.parametrize("commit_every", [1, 7, 128])
def test_a_killed_writer_leaves_outcomes_and_checkpoint_together(tmp_path: Path, commit_every: int) -> None:
    db = tmp_path / "crawl.sqlite"
    writer = subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(db), str(commit_every)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None
        for _ in range(300):  # 3,000 outcomes recorded, then killed wherever it is
            assert writer.stdout.readline(), writer.stderr.read() if writer.stderr else ""
    finally:
        writer.kill()
        writer.communicate(timeout=10)
    assert writer.returncode == -signal.SIGKILL
    done, checkpoint = on_disk(db)
    assert done >= 3000 - commit_every
    assert checkpoint == {"out": done, "warc": 2 * done}
    with Frontier(db) as frontier:
        assert frontier.checkpoint() == checkpoint and frontier.counts()["done"] == done


# A crawler's batch: a failure (an error page with an output record) and a completion, the
# checkpoint last.  The process dies after the failure, before the completion and its checkpoint.
DIES_MID_BATCH = """
import os, sys
from niofetcher.crawl.frontier import Frontier
frontier = Frontier(sys.argv[1], commit_every=1)  # so fail() commits at once, unless batched
frontier.add(["http://h.test/a", "http://h.test/b"])
frontier.claim(2)
frontier.complete_many([], checkpoint={"out": 0})
frontier.flush()
batched = sys.argv[2] == "batch"
with frontier.batch() if batched else open(os.devnull):
    frontier.fail("http://h.test/a", "HTTP 404", status=404)
    os._exit(9)
"""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["batch", "no batch"])
def test_a_batch_is_durable_whole_or_not_at_all(tmp_path: Path, mode: str) -> None:
    """Without batch() the failure commits alone, before the checkpoint that covers its record (the
    negative control): the resume would cut that record away and never write it again."""
    db = tmp_path / "c.sqlite"
    done = subprocess.run([sys.executable, "-c", DIES_MID_BATCH, str(db), mode], timeout=20, check=False)
    assert done.returncode == 9
    with Frontier(str(db)) as frontier:
        state_of_a = frontier.state("http://h.test/a")
        assert frontier.checkpoint() == {"out": 0}
    assert state_of_a == ("waiting" if mode == "batch" else "error")

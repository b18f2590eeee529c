"""A warcinfo record for each run into a WARC file (issue 25, item 4; docs/cli.md, "Outputs").

Every process that writes to a WARC file -- a crawl, a resumed crawl, another
crawl appending to it, a ``fetch --warc`` -- writes its own warcinfo record
before its first records there, and those records name it in
WARC-Warcinfo-ID: the warcinfo says what wrote them (the user agent, whether
robots.txt was obeyed), which may differ from run to run.  (Before, a run
appending to a file wrote none and pointed at the first run's.)

With the crawl's checkpoint: a run writes its warcinfo in the same write as
its first batch, so a resume that cuts away a killed run's unrecorded batch
cuts that run's warcinfo with it, and a failed write (a full disk) takes it
too, so the next batch writes it again.  No record is lost or written twice,
and ``warcio check`` reads the whole file.

The runs are the real command line against TestSites on 127.0.0.1, and the
crawl's WARC writer (PageWriter) driven as the crawler drives it where a
kill must fall between two exact writes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from test_cli_crawl import end_of, start_crawl, urls_in_state, wait_for_requests
from test_warc import assert_warcio_checks_and_indexes, niofetcher, records, runs
from warcio.recordloader import ArcWarcRecord

from niofetcher import FetchResult, URLBean
from niofetcher.cli.output import PageWriter
from niofetcher.crawl import CrawledPage
from niofetcher.testing import TestSite

Runs = list[tuple[ArcWarcRecord, list[ArcWarcRecord]]]


def header(record: ArcWarcRecord, name: str) -> str | None:
    return record.rec_headers.get_header(name)  # type: ignore[no-any-return]


def warcinfo_fields(warc: Path) -> list[dict[str, str]]:
    """The fields of each warcinfo record of ``warc``, in the file's order."""
    return [dict(line.split(": ", 1) for line in payload.decode().splitlines() if line)
            for record, payload in records(warc) if record.rec_type == "warcinfo"]


def uris(rest: Sequence[ArcWarcRecord], kind: str = "response") -> list[str]:
    """The WARC-Target-URI of each record of ``kind``, in order."""
    return [record.rec_headers.get_header("WARC-Target-URI") for record in rest if record.rec_type == kind]


def ids(split: Runs) -> list[str | None]:
    return [header(info, "WARC-Record-ID") for info, _ in split]


# -- the command line ------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("into", ["file", "stdout"])
def test_each_fetch_run_writes_its_own_warcinfo_and_its_records_name_it(tmp_path: Path, into: str) -> None:
    """Two ``fetch --warc`` runs into one file, by name or as standard output appended to it by the
    shell (``--warc - >> FILE``): two warcinfos, each saying its run's user agent."""
    warc = tmp_path / "fetched.warc.gz"
    with TestSite(hosts=1, pages=3, max_seconds=50) as site:
        urls = [f"{site.base_urls[0]}page/{i}" for i in range(3)]
        for agent, batch in (("first/1", urls[:2]), ("second/2", urls[2:])):
            options = ["--user-agent", agent, "--warc", str(warc) if into == "file" else "-"]
            with open(warc, "ab") as appended:
                done = subprocess.run([sys.executable, "-m", "niofetcher", "fetch", *batch, *options],
                                      stdout=appended if into == "stdout" else subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, timeout=50, check=False)
            assert done.returncode == 0, done.stderr
    split = runs(warc)
    assert [sorted(uris(rest)) for _, rest in split] == [sorted(urls[:2]), urls[2:]]
    assert [fields["http-header-user-agent"] for fields in warcinfo_fields(warc)] == ["first/1", "second/2"]
    assert [fields["robots"] for fields in warcinfo_fields(warc)] == ["ignore", "ignore"]
    assert len(set(ids(split))) == 2
    assert_warcio_checks_and_indexes(warc, 2 + 2 * 3)


@pytest.mark.timeout(120)
def test_a_crawl_resumed_and_a_crawl_appended_each_write_their_own_warcinfo(tmp_path: Path) -> None:
    warc = tmp_path / "crawl.warc.gz"
    with TestSite(hosts=1, pages=8, max_seconds=90) as site:
        seed = site.base_urls[0]
        for db, agent, more in (("a", "first/1", ["--max-pages", "3"]), ("a", "resumed/2", ["--max-pages", "9"]),
                                ("b", "appended/3", ["--no-robots"])):
            done = niofetcher("crawl", seed, "--db", str(tmp_path / f"{db}.sqlite"), "--warc", str(warc),
                              "--progress", "none", "--user-agent", agent, *more)
            assert done.returncode == 0, done.stderr
        pages = set(site.page_urls())
    split = runs(warc)
    first, resumed, appended = (Counter(uris(rest)) for _, rest in split)
    robots = seed + "robots.txt"
    # The resumed crawl read robots.txt's answer back, fetching none; the appended one ignored it.
    assert (len(first), robots in first, robots in resumed, robots in appended) == (4, True, False, False)
    assert first + resumed == Counter([*pages, robots]) and appended == Counter(pages)
    assert [(fields["http-header-user-agent"], fields["robots"]) for fields in warcinfo_fields(warc)] == [
        ("first/1", "obey"), ("resumed/2", "obey"), ("appended/3", "ignore")]
    assert_warcio_checks_and_indexes(warc, 3 + 2 * (10 + 9))


@pytest.mark.timeout(90)
def test_a_crawl_killed_and_resumed_has_each_page_once_after_its_runs_warcinfo(tmp_path: Path) -> None:
    """SIGKILL mid-crawl, where batches were written whose outcomes the frontier never recorded: the
    resume cuts them away, then writes its warcinfo before the rest of the pages."""
    db, warc = tmp_path / "crawl.sqlite", tmp_path / "crawl.warc.gz"
    with TestSite(hosts=1, pages=300, delay=0.02, max_seconds=90) as site:
        child = start_crawl(site.base_urls[0], db, "--warc", str(warc), "--progress", "none")
        wait_for_requests(site, 60, child)
        os.killpg(child.pid, signal.SIGKILL)
        end_of(child)
        done_at_kill = urls_in_state(db, "done")
        assert done_at_kill and len(done_at_kill) < len(site.page_urls())  # killed mid-way
        rerun = niofetcher("crawl", site.base_urls[0], "--db", str(db), "--warc", str(warc), "--progress", "none")
        pages = set(site.page_urls())
    assert rerun.returncode == 0, rerun.stderr
    robots = site.base_urls[0] + "robots.txt"
    killed, resumed = runs(warc)
    # The killed run keeps the records of what it had recorded as done, and nothing else.
    assert set(uris(killed[1])) == done_at_kill | {robots} and len(uris(killed[1])) == len(done_at_kill) + 1
    assert Counter(uris(killed[1]) + uris(resumed[1])) == Counter([*pages, robots])
    assert Counter(uris(killed[1], "request") + uris(resumed[1], "request")) == Counter([*pages, robots])
    assert_warcio_checks_and_indexes(warc, 2 + 2 * (len(pages) + 1))


# -- the crawl's writer, killed between two exact writes ---------------------------------------------------


def page(url: str, body: bytes = b"<html>page</html>") -> CrawledPage:
    """A page as the fetcher delivers it without recorded exchanges: no socket, so no peer."""
    result = FetchResult(bean=URLBean(url), url=url, final_url=url, status=200, reason="OK",
                         headers=[("Content-Type", "text/html")], body=body, fetched_at=time.time())
    return CrawledPage(result, 0, None, None)


def crawl_run(
    warc: Path, agent: str, checkpoint: dict[str, int], batches: Sequence[Sequence[str]]
) -> list[dict[str, int]]:
    """One run of a crawl's WARC writer, as the crawler drives it: cut back to ``checkpoint`` (what the
    frontier recorded), an empty commit, then a commit of each batch of pages; the offsets each commit
    returned, which the frontier would record.  Ending here, before anything else is recorded, is a kill."""
    with PageWriter(None, str(warc), agent) as writer:
        writer.restore(checkpoint)
        offsets = [writer.commit([])]
        for batch in batches:
            for url in batch:
                writer.prepare(page(url))
            offsets.append(writer.commit(batch))
    return offsets


def test_a_run_whose_batches_the_resume_cuts_away_loses_its_warcinfo_with_them(tmp_path: Path) -> None:
    warc = tmp_path / "crawl.warc.gz"
    one, two, three = (f"http://a.test/{n}" for n in range(1, 4))
    # The first run records the offsets after /1 and is killed before it records those after /2.
    recorded = crawl_run(warc, "run/1", {}, [[one], [two]])[1]
    kept = warc.read_bytes()[:next(iter(recorded.values()))]
    # The second run writes /2 again and is killed before recording it.
    crawl_run(warc, "run/2", recorded, [[two]])
    assert [uris(rest) for _, rest in runs(warc)] == [[one], [two]]
    cut_away = ids(runs(warc))[1]
    # The third one cuts the second's warcinfo away with /2, and writes /2 and /3 after its own.
    crawl_run(warc, "run/3", recorded, [[two], [three]])
    split = runs(warc)
    assert warc.read_bytes().startswith(kept)
    assert [uris(rest) for _, rest in split] == [[one], [two, three]]
    assert cut_away not in ids(split)
    assert [fields["http-header-user-agent"] for fields in warcinfo_fields(warc)] == ["run/1", "run/3"]
    assert_warcio_checks_and_indexes(warc, 2 + 2 * 3)


def test_a_batch_that_fills_the_disk_takes_the_warcinfo_and_the_next_batch_writes_it_again(
    small_disk: Path,
) -> None:
    """The second run's first batch does not fit (a full disk), and is cut back with the warcinfo written
    before it in the same write; its next batch fits, and comes after that run's warcinfo."""
    warc = small_disk / "crawl.warc"  # not .gz: the big page must stay big
    checkpoint = crawl_run(warc, "run/1", {}, [["http://a.test/1"]])[-1]
    with PageWriter(None, str(warc), "run/2") as writer:
        writer.restore(checkpoint)
        writer.prepare(page("http://a.test/big", os.urandom(600 * 1024)))
        with pytest.raises(OSError, match="No space left"):
            writer.commit(["http://a.test/big"])
        assert warc.stat().st_size == next(iter(checkpoint.values()))
        writer.prepare(page("http://a.test/2"))
        writer.commit(["http://a.test/2"])
    split = runs(warc)
    assert [uris(rest) for _, rest in split] == [["http://a.test/1"], ["http://a.test/2"]]
    assert [fields["http-header-user-agent"] for fields in warcinfo_fields(warc)] == ["run/1", "run/2"]
    assert_warcio_checks_and_indexes(warc, 2 + 2 * 2)

"""The ``fetch`` command: fetch URLs, print one line per result, and with ``--out`` a JSON record per result
(the schema of ``crawl --out``: records.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import TYPE_CHECKING, TextIO

from ..fetcher import NIOFetcher
from ..models import FetchResult
from .args import config_from, urls_from
from .errors import UsageError
from .records import record
from .signals import StopSignals

if TYPE_CHECKING:
    from ..crawl.parse import PageLinks


def run(args: argparse.Namespace) -> int:
    """Fetch the URLs (``args.urls``, then ``--seeds-file``'s); exit status 0, or with ``--fail-on-error``
    1 when any result is not ``ok``: a 404 is a result, not a failure of the command."""
    urls = urls_from(args, args.urls)
    config = config_from(args)
    if args.links and args.out is None:
        raise UsageError("--links puts the links in the --out records: give --out FILE too")
    out = _open_output(args.out)
    failures = 0
    try:
        with StopSignals(_interrupt, "niofetcher: abandoned"), NIOFetcher(config) as fetcher:
            for url in urls:
                fetcher.register(url)
            for result in fetcher.results():
                failures += not result.ok
                if out is not None:  # first: a result printed is a result in the file
                    links = _page_links(result) if args.links else None
                    _write_line(out, args.out, json.dumps(record(result, links, args.links)))
                print(_result_line(result), flush=True)
    finally:
        if out is not None:
            # Every line was flushed as it was written; one that could not be is already being raised.
            with contextlib.suppress(OSError):
                out.close()
    return 1 if failures and args.fail_on_error else 0


def _interrupt() -> None:
    """SIGTERM (and SIGINT) in ``fetch``: unwind as Ctrl-C does, shutting the fetcher down."""
    raise KeyboardInterrupt


def _open_output(path: str | None) -> TextIO | None:
    if path is None:
        return None
    try:
        # Line-buffered: a line is in the file when the result is printed, and a write that
        # fails (a full disk) fails there, naming the file, not at close.  Appended to, as
        # crawl --out is: a file of results is never thrown away by the next run.
        return open(path, "a", encoding="utf-8", buffering=1)
    except OSError as exc:
        raise UsageError(f"cannot write --out {path}: {exc.strerror or exc}") from None


def _write_line(out: TextIO, path: str, line: str) -> None:
    try:
        out.write(line + "\n")
    except OSError as exc:  # flushing: the error of the file descriptor, which names no file
        raise OSError(exc.errno, exc.strerror, path) from None


def _result_line(result: FetchResult) -> str:
    outcome = f"{result.error.value}" if result.error else str(result.status)
    detail = f"  ({result.error_detail})" if result.error else ""
    return f"{outcome:>18} {len(result.body):>9} B {result.elapsed * 1000:8.1f} ms  {result.url}{detail}"


def _page_links(result: FetchResult) -> PageLinks | None:
    """``--links``: the links and title of a 2xx HTML result, the pages a crawl parses; None for any other.
    Parsed here, in the thread that takes the results, never on the fetcher's loop."""
    from ..crawl.parse import extract, is_html_type  # here: without --links, fetch loads no parser

    content_type = result.header("content-type")
    if not (result.ok and is_html_type(content_type)):
        return None
    return extract(result.body, result.final_url, content_type, links_only=True)

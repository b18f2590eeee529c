"""The ``fetch`` command: fetch URLs, print one line per result, and with ``--out`` a JSON record per result."""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import TextIO

from ..fetcher import NIOFetcher
from ..models import FetchResult
from .args import config_from, urls_from
from .errors import UsageError
from .signals import StopSignals


def run(args: argparse.Namespace) -> int:
    """Fetch the URLs (``args.urls``, then ``--seeds-file``'s); exit status 0, or with ``--fail-on-error``
    1 when any result is not ``ok``: a 404 is a result, not a failure of the command."""
    urls = urls_from(args, args.urls)
    config = config_from(args)
    out = _open_output(args.out)
    failures = 0
    try:
        with StopSignals(_interrupt, "niofetcher: abandoned"), NIOFetcher(config) as fetcher:
            for url in urls:
                fetcher.register(url)
            for result in fetcher.results():
                failures += not result.ok
                if out is not None:  # first: a result printed is a result in the file
                    _write_line(out, args.out, json.dumps(_result_record(result)))
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


def _result_record(result: FetchResult) -> dict[str, object]:
    return {
        "url": result.url,
        "final_url": result.final_url,
        "status": result.status,
        "content_type": result.header("content-type"),
        "bytes": len(result.body),
        "elapsed": round(result.elapsed, 6),
        "redirects": result.redirects,
        "error": result.error.value if result.error else None,
        "error_detail": result.error_detail or None,
    }

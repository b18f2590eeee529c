"""The ``fetch`` command: fetch URLs, print one line per result, and with ``--out`` a JSON record per result
(the schema of ``crawl --out``: records.py), with ``--warc`` its request and response records (as ``crawl
--warc`` writes them: warc.py)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..fetcher import NIOFetcher
from ..models import FetchResult, URLBean
from ..urls import split_credentials
from .args import config_from, urls_from
from .errors import UsageError
from .output import ResultWriter, check_distinct_files, open_error, writes_to_stdout
from .signals import StopSignals

if TYPE_CHECKING:
    from ..crawl.parse import PageLinks


def run(args: argparse.Namespace) -> int:
    """Fetch the URLs (``args.urls``, then ``--seeds-file``'s); exit status 0, or with ``--fail-on-error``
    1 when any result is not ``ok``: a 404 is a result, not a failure of the command."""
    urls = urls_from(args, args.urls)
    # A WARC holds each exchange as it went over the wire, which the fetcher keeps only when asked.
    config = config_from(args, record_exchanges=args.warc is not None)
    if args.links and args.out is None:
        raise UsageError("--links puts the links in the --out records: give --out FILE too")
    check_distinct_files(args.out, args.warc)
    # Records on standard output: the lines for a person go to standard error, out of the pipe.
    lines = sys.stderr if writes_to_stdout(args.out) or writes_to_stdout(args.warc) else sys.stdout
    try:
        files = ResultWriter(args.out, args.warc, config.user_agent, list_links=args.links)
    except OSError as exc:
        raise open_error(exc, args.out) from None
    failures = 0
    with files, StopSignals(_interrupt, "niofetcher: abandoned"), NIOFetcher(config) as fetcher:
        fetcher.register_many(_bean(url) for url in urls)
        for result in fetcher.results():
            failures += not result.ok
            # First: a result printed is a result in the files.
            files.write(result, _page_links(result) if args.links else None)
            print(_result_line(result), file=lines, flush=True)
    return 1 if failures and args.fail_on_error else 0


def _bean(url: str) -> URLBean:
    """``url`` to fetch, its ``user:pass@`` sent as Basic auth instead: the URL that is printed and
    recorded (a result's, a WARC record's) then carries no password."""
    bare, authorization = split_credentials(url)
    return URLBean(bare, headers={"Authorization": authorization} if authorization is not None else {})


def _interrupt() -> None:
    """SIGTERM (and SIGINT) in ``fetch``: unwind as Ctrl-C does, shutting the fetcher down."""
    raise KeyboardInterrupt


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

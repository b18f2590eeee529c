"""The ``niofetcher`` command: fetch, crawl, status, testsite, demo.

One module per job: ``args`` (the parser), one module per command (``fetch``,
``crawl``, ``status``, ``site`` for testsite, ``demo``), and what the commands share:
``output`` (the JSONL and WARC files, standard output included), ``records``
and ``warc`` (what goes into them), ``progress`` (a crawl run from the
terminal), ``display`` (what it shows while it runs), ``signals`` (Ctrl-C and SIGTERM). A command's module, and with it
what it depends on (the crawler, tqdm, warcio), is imported only when that
command runs.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
from collections.abc import Sequence

from .args import build_parser
from .errors import CommandFailed, UsageError


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in ``argv`` (default: ``sys.argv[1:]``) and return its exit status.

    0: done -- a fetch or crawl that ran to its end, whatever its URLs answered
    (a 404 or a robots.txt refusal is a result); 1: a command that could not go
    on (CommandFailed, an I/O error of a file it writes, the reader of its output
    gone), a crawl in which not one page could be fetched, or with
    ``--fail-on-error`` a fetch or crawl in which a URL failed; 2: bad input
    (UsageError, or the parser's one-line message); 130: interrupted.
    Failures are printed as one ``niofetcher: error: ...`` line on stderr.
    """
    args = build_parser().parse_command(argv)
    try:
        command = importlib.import_module(f".{args.module}", __name__)
        status = int(command.run(args))
        # Here, not at exit: a reader gone before the last lines (``crawl | head -1``, whose summary
        # is still buffered) is then reported as the one line below, not as "Exception ignored".
        sys.stdout.flush()
        return status
    except UsageError as exc:
        print(f"niofetcher: error: {exc}", file=sys.stderr)
        return 2
    except CommandFailed as exc:
        print(f"niofetcher: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError as exc:  # the reader of a pipe went away (``| head``): nothing more can go there
        _stdout_to_devnull()
        print(f"niofetcher: error: {exc.filename or 'standard output'} was closed by its reader (broken pipe)",
              file=sys.stderr)
        return 1
    except OSError as exc:  # an I/O error of a file the command writes: a full disk, a failing device
        where = f": {exc.filename}" if exc.filename is not None else ""
        print(f"niofetcher: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("niofetcher: interrupted", file=sys.stderr)
        return 130


def _stdout_to_devnull() -> None:
    """Point standard output at the null device: the interpreter flushes ``sys.stdout`` as it exits,
    and a flush into the closed pipe would print "Exception ignored ... BrokenPipeError" after the
    one line (the signal module's docs, "Note on SIGPIPE", recommend this).  Not when ``sys.stdout``
    has no descriptor (a caller's StringIO)."""
    with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):
        descriptor = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, descriptor)
        os.close(devnull)

"""The one way the benchmarks start the test site: in its own process, its counters readable over a pipe.

The site never shares a GIL with the client measured. Both sides live here:

* the parent's side: ``SiteProcess`` (compare.py: base URLs, counters, reset) and
  ``site_process()`` (throughput.py, crawl.py: the base URLs as a list, plus the Popen);
* the child's side, ``serve()``, run as ``python benchmarks/_site.py``::

    python benchmarks/_site.py --hosts 50 --pages 200 --delay 50 --page-size 4096
    python benchmarks/_site.py --hosts 4 --pages 2500 --corpus ../shared/corpus/pages

``serve()`` starts a ``niofetcher.testing.TestSite`` (ephemeral loopback ports; the
``niofetcher testsite`` command cannot tell anyone what it counted, and compare.py
needs the *server's* peak connections per host after each client run), prints one
JSON line ``{"bases": [...], "pid": ...}`` once every port listens, then answers
one JSON line per command read from stdin:

``counters``  ``{"ports": [{"port", "accepted", "open_now", "max_open", "requests"}, ...],
              "max_open_total", "open_now", "accepted", "requests", "cpu", "turnaround"}`` — ``cpu``
              is this process's user + system seconds so far (whether the site kept up);
              ``turnaround`` is ``{"count", "p50", "p90", "p99"}`` (ms, None without samples): per
              keep-alive request, from the previous response written to its arrival
              (``PortCounters.turnaround``), all ports together;
``paths``     ``{"site_paths", "paths_served", "paths_repeated", "paths_unknown"}``, to check a
              crawl: of the site's own paths (``/``, ``/robots.txt`` and every ``/page/i`` of
              every host, ``site_paths`` in all) how many were asked for at least once, how
              many requests asked again for a path already served, how many asked for a
              path the site does not have;
``reset``     zero the counters (``TestSite.reset_counters``), reply ``{"ok": true}``;
``quit``      (or end of input) print the final counters, stop the site and exit.

``--corpus DIR`` serves the ``*.html`` files of DIR (sorted by name) as the
page bodies, the site's links inserted before each ``</body>``
(``TestSite(bodies=...)``): scenario E's real pages. ``--tls-cert``/``--tls-key``
serve HTTPS (``--no-tickets``: no session resumption).

It raises its open-file limit to the hard limit first: scenario C holds 2,000
connections to it at once (the site's listen backlog is 4,096; the kernel caps
that at ``net.core.somaxconn``, which is reported in the ready line).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from niofetcher.testing import TestSite

HERE = os.path.dirname(os.path.abspath(__file__))
#: This file, run as the site's process.
SITE_SCRIPT = os.path.abspath(__file__)
#: The turnaround percentiles the ``counters`` command reports: name and fraction.
TURNAROUND_PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


# --------------------------------------------------------------------------- the parent's side


@dataclass(frozen=True)
class TLSFiles:
    """PEM files for an HTTPS test site: a CA for the client, a certificate and key for the site."""

    ca_file: str
    cert_file: str
    key_file: str


def make_tls_files(directory: str) -> TLSFiles:
    """A fresh trustme CA and a certificate for 127.0.0.1 (and localhost), written into ``directory``."""
    import trustme  # only the --tls benchmarks need it

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    files = TLSFiles(
        ca_file=os.path.join(directory, "ca.pem"),
        cert_file=os.path.join(directory, "cert.pem"),
        key_file=os.path.join(directory, "key.pem"),
    )
    ca.cert_pem.write_to_path(files.ca_file)
    with open(files.cert_file, "wb") as out:
        out.writelines(pem.bytes() for pem in leaf.cert_chain_pems)
    leaf.private_key_pem.write_to_path(files.key_file)
    return files


class SiteProcess:
    """The site in a subprocess (``serve()``): its base URLs, and its counters on request."""

    def __init__(self, hosts: int, pages: int, delay_ms: float, page_size: int, corpus: str | None = None,
                 tls: TLSFiles | None = None, tickets: bool = True) -> None:
        cmd = [sys.executable, SITE_SCRIPT, "--hosts", str(hosts), "--pages", str(pages),
               "--delay", str(delay_ms), "--page-size", str(page_size)]
        if corpus is not None:
            cmd += ["--corpus", corpus]
        if tls is not None:
            cmd += ["--tls-cert", tls.cert_file, "--tls-key", tls.key_file] + ([] if tickets else ["--no-tickets"])
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.close()
            raise RuntimeError("the test site exited before it was ready")
        self.info: dict[str, Any] = json.loads(line)
        self.bases: list[str] = self.info["bases"]

    def ask(self, command: str) -> dict[str, Any]:
        """Send one command (see the module's docstring) and return the site's JSON reply."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the test site process died")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def counters(self) -> dict[str, Any]:
        """The site's counters so far: per port and in all, and its process's CPU seconds."""
        return self.ask("counters")

    def reset_when_idle(self, wait: float = 15.0) -> dict[str, Any]:
        """Wait until the last client's connections are closed on the server's side, then zero the counters."""
        deadline = time.monotonic() + wait
        while self.counters()["open_now"] and time.monotonic() < deadline:
            time.sleep(0.05)
        self.ask("reset")
        return self.counters()

    def close(self) -> None:
        """Ask the site to quit; kill it if it does not within 10 s."""
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> SiteProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SiteURLs(list[str]):
    """The base URLs of a running site process (a list), plus ``process`` (its Popen)."""

    process: subprocess.Popen[str]


@contextmanager
def site_process(hosts: int = 1, pages: int = 1000, delay_ms: float = 0.0, page_size: int = 4096,
                 tls: TLSFiles | None = None, tickets: bool = True) -> Iterator[SiteURLs]:
    """Run the site in a subprocess; yields its base URLs.

    With ``tls`` the site serves HTTPS with that certificate; ``tickets=False``
    makes it send no session tickets, so every new connection is a full handshake.
    """
    with SiteProcess(hosts, pages, delay_ms, page_size, tls=tls, tickets=tickets) as site:
        urls = SiteURLs(site.bases)
        urls.process = site.proc
        yield urls


# --------------------------------------------------------------------------- the child's side


def _somaxconn() -> int | None:
    try:
        with open("/proc/sys/net/core/somaxconn", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _counters(site: TestSite) -> dict[str, Any]:
    ports = []
    for port in site.ports:
        c = site.counters(port)
        ports.append({"port": port, "accepted": c.accepted, "open_now": c.open_now,
                      "max_open": c.max_open, "requests": c.requests})
    total = site.counters()
    times = os.times()
    turnaround: dict[str, Any] = {"count": total.turnaround.count}
    for name, fraction in TURNAROUND_PERCENTILES:
        seconds = total.turnaround.percentile(fraction)
        turnaround[name] = None if seconds is None else seconds * 1000.0
    return {"ports": ports, "max_open_total": total.max_open, "open_now": total.open_now,
            "accepted": total.accepted, "requests": total.requests, "cpu": times.user + times.system,
            "turnaround": turnaround}


def _path_check(site: TestSite) -> dict[str, int]:
    """How the requests so far cover the site's own paths, port by port."""
    own = {"/", "/robots.txt", *(f"/page/{i}" for i in range(site.pages))}
    served = repeated = unknown = 0
    for port in site.ports:
        for path, count in site.counters(port).paths.items():
            if path in own:
                served += 1
                repeated += count - 1
            else:
                unknown += count
    return {"site_paths": len(own) * site.hosts, "paths_served": served, "paths_repeated": repeated,
            "paths_unknown": unknown}


def load_corpus(directory: str) -> list[bytes]:
    """The bytes of every ``*.html`` file of ``directory``, sorted by name."""
    names = sorted(name for name in os.listdir(directory) if name.endswith(".html"))
    if not names:
        raise SystemExit(f"_site.py: no .html files in {directory}")
    bodies = []
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            bodies.append(f.read())
    return bodies


def serve(argv: list[str] | None = None) -> None:
    """The site's process: start the site, print the ready line, answer commands until ``quit``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--pages", type=int, default=1000, help="pages per host")
    parser.add_argument("--delay", type=float, default=0.0, metavar="MS", help="latency per response")
    parser.add_argument("--page-size", type=int, default=4096)
    parser.add_argument("--corpus", metavar="DIR", help="serve the *.html files of DIR as page bodies")
    parser.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this PEM certificate (chain)")
    parser.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert")
    parser.add_argument("--no-tickets", action="store_true", help="with TLS: send no session tickets")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.join(HERE, "clients"))
    from _common import raise_nofile

    nofile = raise_nofile()

    from niofetcher.testing import LISTEN_BACKLOG, TestSite, tls_context_from_files

    tls = tls_context_from_files(args.tls_cert, args.tls_key, tickets=not args.no_tickets) if args.tls_cert else None
    site = TestSite(hosts=args.hosts, pages=args.pages, delay=args.delay / 1000.0, page_size=args.page_size,
                    max_seconds=None, bodies=load_corpus(args.corpus) if args.corpus else None, tls=tls)
    site.start()
    out = sys.stdout
    out.write(json.dumps({"bases": site.base_urls, "pid": os.getpid(), "nofile": nofile,
                          "listen_backlog": LISTEN_BACKLOG, "somaxconn": _somaxconn(),
                          "pages": args.pages, "corpus_pages": len(site.bodies or ())}) + "\n")
    out.flush()
    try:
        for line in sys.stdin:
            command = line.strip()
            reply: dict[str, Any]
            if command == "counters":
                reply = _counters(site)
            elif command == "paths":
                reply = dict(_path_check(site))
            elif command == "reset":
                site.reset_counters()
                reply = {"ok": True}
            elif command == "quit":
                break
            else:
                reply = {"error": f"unknown command {command!r}"}
            out.write(json.dumps(reply) + "\n")
            out.flush()
        out.write(json.dumps(_counters(site)) + "\n")
        out.flush()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        site.stop()


if __name__ == "__main__":
    serve()

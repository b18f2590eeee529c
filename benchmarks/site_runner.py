"""The test site in its own process, with its server-side counters readable over a pipe.

    python benchmarks/site_runner.py --hosts 50 --pages 200 --delay 50 --page-size 4096
    python benchmarks/site_runner.py --hosts 4 --pages 2500 --corpus ../shared/corpus/pages

``benchmarks/_site.py`` runs ``niofetcher testsite``, which cannot tell anyone
what it counted; the side-by-side benchmark needs the *server's* peak
connections per host after each client run. This runner starts a
``niofetcher.testing.TestSite`` itself (ephemeral loopback ports), prints one
JSON line ``{"bases": [...], "pid": ...}`` once every port listens, then answers
one JSON line per command read from stdin:

``counters``  ``{"ports": [{"port", "accepted", "open_now", "max_open", "requests"}, ...],
              "max_open_total", "open_now", "accepted", "requests", "cpu"}`` — ``cpu`` is this
              process's user + system seconds so far (whether the site kept up);
``paths``     ``{"site_paths", "paths_served", "paths_repeated", "paths_unknown"}``, to check a
              crawl: of the site's own paths (``/``, ``/robots.txt`` and every ``/page/i`` of
              every host, ``site_paths`` in all) how many were asked for at least once, how
              many requests asked again for a path already served, how many asked for a
              path the site does not have;
``reset``     zero the counters (``TestSite.reset_counters``), reply ``{"ok": true}``;
``quit``      (or end of input) print the final counters, stop the site and exit.

``--corpus DIR`` serves the ``*.html`` files of DIR (sorted by name) as the
page bodies, the site's links inserted before each ``</body>``
(``TestSite(bodies=...)``): scenario E's real pages.

It raises its open-file limit to the hard limit first: scenario C holds 2,000
connections to it at once (the site's listen backlog is 4,096; the kernel caps
that at ``net.core.somaxconn``, which is reported in the ready line).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients"))

from _common import raise_nofile


def _somaxconn() -> int | None:
    try:
        with open("/proc/sys/net/core/somaxconn", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def counters(site) -> dict:
    ports = []
    for port in site.ports:
        c = site.counters(port)
        ports.append({"port": port, "accepted": c.accepted, "open_now": c.open_now,
                      "max_open": c.max_open, "requests": c.requests})
    total = site.counters()
    times = os.times()
    return {"ports": ports, "max_open_total": total.max_open, "open_now": total.open_now,
            "accepted": total.accepted, "requests": total.requests, "cpu": times.user + times.system}


def _path_check(site) -> dict:
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
        raise SystemExit(f"site_runner: no .html files in {directory}")
    bodies = []
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            bodies.append(f.read())
    return bodies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--pages", type=int, default=1000, help="pages per host")
    parser.add_argument("--delay", type=float, default=0.0, metavar="MS", help="latency per response")
    parser.add_argument("--page-size", type=int, default=4096)
    parser.add_argument("--corpus", metavar="DIR", help="serve the *.html files of DIR as page bodies")
    args = parser.parse_args()
    nofile = raise_nofile()

    from niofetcher.testing import LISTEN_BACKLOG, TestSite

    site = TestSite(hosts=args.hosts, pages=args.pages, delay=args.delay / 1000.0, page_size=args.page_size,
                    max_seconds=None, bodies=load_corpus(args.corpus) if args.corpus else None)
    site.start()
    out = sys.stdout
    out.write(json.dumps({"bases": site.base_urls, "pid": os.getpid(), "nofile": nofile,
                          "listen_backlog": LISTEN_BACKLOG, "somaxconn": _somaxconn(),
                          "pages": args.pages, "corpus_pages": len(site.bodies or ())}) + "\n")
    out.flush()
    try:
        for line in sys.stdin:
            command = line.strip()
            if command == "counters":
                reply = counters(site)
            elif command == "paths":
                reply = _path_check(site)
            elif command == "reset":
                site.reset_counters()
                reply = {"ok": True}
            elif command == "quit":
                break
            else:
                reply = {"error": f"unknown command {command!r}"}
            out.write(json.dumps(reply) + "\n")
            out.flush()
        out.write(json.dumps(counters(site)) + "\n")
        out.flush()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    finally:
        site.stop()


if __name__ == "__main__":
    main()

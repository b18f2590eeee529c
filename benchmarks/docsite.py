"""A crawl of a generated documentation site: ``niofetcher crawl`` with 4 connections beside a sequential wget.

    python benchmarks/docsite.py                         # ~530 pages, 3 rounds, both extractors
    python benchmarks/docsite.py --pages 200 --rounds 1 --json figures.json
    python benchmarks/docsite.py --profile prof          # also: one crawl per extractor under py-spy
    python benchmarks/docsite.py --toc-depth 1           # a sidebar of the pages alone: ~670 links a page
    python benchmarks/docsite.py --rounds 0 --profile p  # the profiles alone

Issue 15's last target: a crawl of a documentation site of a few hundred pages
with 4 connections faster than a sequential wget of the same site on this
machine. The site is written to a temporary folder by :func:`write_site`,
shaped like a Sphinx build (read the function's docstring): every page carries
a toctree sidebar that links every page and its sections, so a page has
thousands of relative links, most of them with a fragment. It is served on
loopback by nginx (``--server nginx``; a throwaway configuration, one process,
its access log read after each run) or, where nginx is missing, by Python's
``http.server`` in a process of its own (``--server http.server``; ``auto``
takes nginx when there is one).

Each round runs, one after the other (alternated, so that a change in the
machine's load falls on every client alike)::

    wget -r -l inf -np -nd --delete-after -q SEED         # one connection
    python -m niofetcher crawl SEED --connections 4 --per-host 4 --extractor bs4 --follow-nofollow ...
    python -m niofetcher crawl SEED ... --extractor lxml

Both read robots.txt (the site's allows everything). ``--follow-nofollow``
because wget does not honour ``rel="nofollow"`` (the "Show Source" links), and
the two must crawl the same pages: that is checked from the server's side,
run by run, by the set of HTML paths it served (every page of the site, each
once). wget also fetches the stylesheets, scripts and images pages refer to
(niofetcher follows links, not page requisites); those are counted apart as
``other`` requests and left in wget's time.

Wall is the command's, from start to the exit of its main process (imports
included); CPU is user + system of its whole process tree (niofetcher's parse
processes included), both measured by ``clients/run_tree.py``. The commands are
killed (their process group) after ``--timeout`` seconds. No assertions: this
measures, the tests judge.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import posixpath
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from niofetcher.testing import death_signal, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUN_TREE = os.path.join(HERE, "clients", "run_tree.py")
CLIENTS = ("wget", "niofetcher-bs4", "niofetcher-lxml")
WORDS = ("configuring", "the", "frontier", "handling", "redirects", "timeouts", "connection", "pool", "options",
         "usage", "examples", "overview", "advanced", "limits", "errors", "robots", "parsing", "workers")
#: A 1x1 transparent PNG: the site's images are fetched (by wget) but never parsed.
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6300010000050001"
                    "0d0a2db40000000049454e44ae426082")
#: What every page of the site loads: (file, body).
STATIC = (
    ("_static/basic.css", "div.sphinxsidebar{float:left}ul.search li{background-image:url(file.png)}\n" * 40),
    ("_static/pygments.css", ".highlight .k{color:#007020;font-weight:bold}\n" * 60),
    ("_static/documentation_options.js", "var DOCUMENTATION_OPTIONS={URL_ROOT:'',VERSION:'1.0'};\n"),
    ("_static/doctools.js", "/* doctools */\n" + "function f(){return 1}\n" * 300),
    ("_static/sphinx_highlight.js", "/* highlight */\n" + "function g(){return 2}\n" * 100),
)


@dataclass
class Doc:
    """One page of the site: its path, title, section ids and (API pages) documented objects' ids."""

    path: str
    title: str
    sections: list[str]
    members: list[str] = field(default_factory=list)


@dataclass
class SiteInfo:
    """What :func:`write_site` wrote: the HTML paths (from ``/``), bytes, and links a page."""

    html_paths: set[str]
    html_bytes: int
    links_per_page: float
    fragment_share: float  # of all href attributes of the HTML pages


def plan(pages: int, rng: random.Random) -> list[Doc]:
    """``pages`` HTML pages: index, genindex, py-modindex, search, and guides, tutorials and API modules."""
    content = max(3, pages - 4)
    guides = tutorials = max(1, content // 8)
    modules = content - guides - tutorials

    def sections(count: int) -> list[str]:
        return [f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{k}" for k in range(count)]

    docs = [Doc(f"guide/guide{i}.html", f"Guide {i}", sections(rng.randrange(3, 9))) for i in range(guides)]
    docs += [Doc(f"tutorial/step{i}.html", f"Tutorial step {i}", sections(rng.randrange(3, 9)))
             for i in range(tutorials)]
    for i in range(modules):
        name = f"pkg{i // 20}.mod{i % 20}"
        members = [f"{name}.func{f}" for f in range(rng.randrange(2, 8))]
        for c in range(rng.randrange(1, 4)):
            members += [f"{name}.Class{c}"] + [f"{name}.Class{c}.meth{m}" for m in range(rng.randrange(3, 10))]
        docs.append(Doc(f"api/pkg{i // 20}/mod{i % 20}.html", name, sections(rng.randrange(3, 9)), members))
    return docs


def _sidebar(folder: str, docs: list[Doc], depth: int) -> str:
    """The global toctree as a page of ``folder`` links it: every page, and (``depth`` 2) each of its sections."""

    def rel(path: str) -> str:
        return posixpath.relpath(path, folder or ".")

    parts = ['<div class="sphinxsidebar" role="navigation"><div class="sphinxsidebarwrapper">',
             f'<a href="{rel("index.html")}"><img class="logo" src="{rel("_static/logo.png")}" alt="Logo"></a>',
             '<p class="caption">Contents</p><ul class="current">']
    for doc in docs:
        href = rel(doc.path)
        parts.append(f'<li class="toctree-l1"><a class="reference internal" href="{href}">{doc.title}</a><ul>')
        parts += [f'<li class="toctree-l2"><a class="reference internal" href="{href}#{s}">{s.replace("-", " ")}'
                  '</a></li>' for s in doc.sections[: len(doc.sections) * (depth - 1)]]
        parts.append("</ul></li>")
    parts.append(f'</ul><form class="search" action="{rel("search.html")}" method="get">'
                 '<input type="text" name="q"><input type="submit" value="Go"></form></div></div>')
    return "".join(parts)


def _head(doc: Doc, rel: Callable[[str], str], prev: Doc | None, nxt: Doc | None) -> str:
    parts = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1.0">',
             f"<title>{doc.title} &#8212; Example 1.0 documentation</title>"]
    parts += [f'<link rel="stylesheet" type="text/css" href="{rel(p)}">' for p, _ in STATIC if p.endswith(".css")]
    parts += [f'<script src="{rel(p)}"></script>' for p, _ in STATIC if p.endswith(".js")]
    parts += [f'<link rel="index" title="Index" href="{rel("genindex.html")}">',
              f'<link rel="search" title="Search" href="{rel("search.html")}">']
    if nxt is not None:
        parts.append(f'<link rel="next" title="{nxt.title}" href="{rel(nxt.path)}">')
    if prev is not None:
        parts.append(f'<link rel="prev" title="{prev.title}" href="{rel(prev.path)}">')
    parts.append("</head><body>")
    relbar = [f'<li class="right"><a href="{rel("genindex.html")}" title="General Index">index</a></li>',
              f'<li class="right"><a href="{rel("py-modindex.html")}" title="Python Module Index">modules</a> |</li>']
    if nxt is not None:
        relbar.append(f'<li class="right"><a href="{rel(nxt.path)}" title="{nxt.title}">next</a> |</li>')
    if prev is not None:
        relbar.append(f'<li class="right"><a href="{rel(prev.path)}" title="{prev.title}">previous</a> |</li>')
    relbar.append(f'<li class="nav-item"><a href="{rel("index.html")}">Example 1.0 documentation</a> &#187;</li>')
    parts.append('<div class="related" role="navigation"><ul>' + "".join(relbar) + "</ul></div>")
    return "".join(parts)


def _code(rng: random.Random) -> str:
    lines = [f'<span class="kn">from</span> <span class="nn">pkg{rng.randrange(9)}</span> <span class="kn">import'
             f'</span> <span class="n">Class{rng.randrange(3)}</span>' for _ in range(2)]
    lines += [f'<span class="n">x{k}</span> <span class="o">=</span> <span class="n">Class0</span><span class="p">('
              f'</span><span class="mi">{rng.randrange(100)}</span><span class="p">)</span>'
              for k in range(rng.randrange(4, 12))]
    return '<div class="highlight-python notranslate"><div class="highlight"><pre><span></span>' + "\n".join(lines) \
        + "</pre></div></div>"


def _body(doc: Doc, rel: Callable[[str], str], folder: str, docs: list[Doc], members: list[tuple[Doc, str]],
          rng: random.Random) -> str:
    """Sections of prose with cross references (most with a fragment), code, and (API pages) objects."""

    def xref() -> str:
        if rng.random() < 0.8:
            target, member = rng.choice(members)
            href = rel(target.path)
            if posixpath.dirname(target.path) == folder and rng.random() < 0.3:
                href = "./" + href  # what hand-written links in the sources come out as
            return (f'<a class="reference internal" href="{href}#{member}" title="{member}"><code class="xref py">'
                    f'<span class="pre">{member.rsplit(".", 1)[-1]}()</span></code></a>')
        target = rng.choice(docs)
        return f'<a class="reference internal" href="{rel(target.path)}"><span class="doc">{target.title}</span></a>'

    def prose() -> str:
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(20, 60)))
        return f"<p>{words} {', '.join(xref() for _ in range(rng.randrange(1, 6)))}.</p>"

    parts = ['<div class="document"><div class="documentwrapper"><div class="bodywrapper"><div class="body" role="main">']
    for i, section in enumerate(doc.sections):
        parts.append(f'<section id="{section}"><h{2 if i else 1}>{section.replace("-", " ")}<a class="headerlink" '
                     f'href="#{section}" title="Permalink to this heading">&#182;</a></h{2 if i else 1}>')
        parts += [prose() for _ in range(rng.randrange(2, 6))]
        parts.append(_code(rng))
        if doc.path.startswith("guide/") and rng.random() < 0.3:
            image = rel(f"_images/figure{rng.randrange(20)}.png")
            parts.append(f'<a class="reference internal image-reference" href="{image}"><img alt="figure" '
                         f'src="{image}"></a>')
        parts.append("</section>")
    for member in doc.members:
        parts.append(f'<dl class="py method"><dt class="sig sig-object py" id="{member}"><span class="sig-prename">'
                     f'{member.rsplit(".", 1)[0]}.</span><span class="sig-name descname">{member.rsplit(".", 1)[-1]}'
                     f'</span>(<em class="sig-param">value</em>)<a class="headerlink" href="#{member}" '
                     'title="Permalink to this definition">&#182;</a></dt><dd>' + prose() + "</dd></dl>")
    parts.append(f'<div class="footer"><a href="{rel("_sources/" + doc.path[:-5] + ".rst.txt")}" rel="nofollow">'
                 "Show Source</a></div></div></div></div></div>")
    return "".join(parts)


def write_site(folder: str, pages: int, toc_depth: int = 2, seed: int = 15) -> SiteInfo:
    """Write a Sphinx-like documentation site of ``pages`` HTML pages into ``folder``.

    Guides, tutorials and API modules (``api/pkgP/modM.html``, documented objects with
    ``id``s and permalinks); ``index.html`` (the toctree in its body), ``genindex.html``
    (a link to every object), ``py-modindex.html``, ``search.html``. Every page has the
    head of a Sphinx page (stylesheets, scripts, ``rel`` links), a relation bar, the
    global toctree as a sidebar (every page and, ``toc_depth=2``, its sections:
    ``../../guide/guide3.html#usage-7``; 1: the pages alone, as themes with titles-only toctrees),
    prose with cross references (``../pkg2/mod5.html#pkg2.mod5.Class1.meth3``, a few
    as ``./mod4.html#...``), highlighted code, a rel="nofollow" "Show Source" link to
    ``_sources/``; some guides link images. Plus ``robots.txt`` (allows all), the
    ``_static/`` files, images, the sources and ``searchindex.js``.
    """
    rng = random.Random(seed)
    docs = plan(pages, rng)
    members = [(doc, member) for doc in docs for member in doc.members] or [(docs[0], docs[0].sections[0])]
    specials = [Doc("index.html", "Welcome", []), Doc("genindex.html", "Index", []),
                Doc("py-modindex.html", "Python Module Index", []), Doc("search.html", "Search", [])]
    everything = [*specials, *docs]
    sidebars: dict[str, str] = {}
    written: dict[str, str] = {}
    for i, doc in enumerate(everything):
        folder_of = posixpath.dirname(doc.path)

        def rel(path: str, folder_of: str = folder_of) -> str:
            return posixpath.relpath(path, folder_of or ".")

        if folder_of not in sidebars:
            sidebars[folder_of] = _sidebar(folder_of, docs, toc_depth)
        if doc.path == "index.html":
            body = '<div class="body"><div class="toctree-wrapper compound"><ul>' + "".join(
                f'<li class="toctree-l1"><a class="reference internal" href="{d.path}">{d.title}</a></li>'
                for d in docs) + "</ul></div></div>"
        elif doc.path == "genindex.html":
            body = '<div class="body"><h1 id="index">Index</h1><table class="indextable genindextable">' + "".join(
                f'<tr><td><a href="{d.path}#{m}">{m.rsplit(".", 1)[-1]} ({m.rsplit(".", 1)[0]})</a></td></tr>'
                for d, m in members) + "</table></div>"
        elif doc.path == "py-modindex.html":
            body = '<div class="body"><table class="indextable modindextable">' + "".join(
                f'<tr><td><a href="{d.path}#module-{d.title}"><code class="xref">{d.title}</code></a></td></tr>'
                for d in docs if d.members) + "</table></div>"
        elif doc.path == "search.html":
            body = ('<div class="body"><h1 id="search-documentation">Search</h1><form action="" method="get">'
                    '<input type="text" name="q"></form><div id="search-results"></div></div>'
                    '<script src="searchindex.js" defer></script>')
        else:
            body = _body(doc, rel, folder_of, docs, members, rng)
        prev = everything[i - 1] if i > 0 else None
        nxt = everything[i + 1] if i + 1 < len(everything) else None
        written[doc.path] = (_head(doc, rel, prev, nxt) + sidebars[folder_of] + body
                             + '<div class="footer">&#169; Copyright 2026.</div></body></html>\n')
    files: dict[str, bytes] = {path: text.encode() for path, text in written.items()}
    files["robots.txt"] = b"User-agent: *\nDisallow:\n"
    files["searchindex.js"] = ("Search.setIndex(" + json.dumps({"docnames": [d.path for d in docs]}) + ")").encode()
    files.update((path, body.encode()) for path, body in STATIC)
    files["_static/logo.png"] = files["_static/file.png"] = PNG
    files.update((f"_images/figure{k}.png", PNG) for k in range(20))
    files.update((f"_sources/{d.path[:-5]}.rst.txt", f"{d.title}\n{'=' * len(d.title)}\n".encode()) for d in docs)
    for path, data in files.items():
        os.makedirs(os.path.join(folder, posixpath.dirname(path)), exist_ok=True)
        with open(os.path.join(folder, path), "wb") as out:
            out.write(data)
    hrefs = fragments = 0
    for text in written.values():
        found = re.findall(r'href="([^"]*)"', text)
        hrefs += len(found)
        fragments += sum("#" in h for h in found)
    return SiteInfo(html_paths={"/" + p for p in written}, html_bytes=sum(len(files[p]) for p in written),
                    links_per_page=hrefs / len(written), fragment_share=fragments / max(1, hrefs))


# --------------------------------------------------------------------------- the server


@dataclass
class Server:
    """A static server of the site on loopback, and where its log of requests is."""

    name: str
    seed: str
    process: subprocess.Popen[bytes]
    log: str
    line: re.Pattern[str]  # groups: status, path, and conn (the connection) where the log has it

    def served(self, offset: int) -> list[tuple[str | None, int, str]]:
        """(connection, status, path) of every request logged past byte ``offset`` of the log."""
        with open(self.log, encoding="utf-8", errors="replace") as f:
            f.seek(offset)
            found = (self.line.search(line) for line in f)
            return [(m.groupdict().get("conn"), int(m["status"]), m["path"].split("?")[0]) for m in found if m is not None]

    def log_size(self) -> int:
        """The log's size once it has stopped growing: the last responses of a run are logged."""
        size = -1
        while size != (size := os.path.getsize(self.log)):
            time.sleep(0.2)
        return size


def _nginx(site: str, tmp: str, port: int) -> tuple[str, list[str], str, re.Pattern[str]]:
    conf = os.path.join(tmp, "nginx.conf")
    log = os.path.join(tmp, "access.log")
    with open(conf, "w", encoding="utf-8") as f:
        # One process (no master, no workers): its pid is the server, and nginx serves 4
        # connections from one event loop. keepalive_requests: wget keeps its one connection.
        f.write(f"""daemon off; master_process off; pid {tmp}/nginx.pid; error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  types {{ text/html html; text/css css; application/javascript js; image/png png; text/plain txt; }}
  default_type application/octet-stream;
  log_format bench '$connection $status $request_uri';
  access_log {log} bench;
  sendfile on; tcp_nopush on; keepalive_requests 1000000; keepalive_timeout 120s;
  server {{ listen 127.0.0.1:{port}; root {site}; }}
}}
""")
    version = subprocess.run(["nginx", "-v"], capture_output=True, text=True, check=False).stderr.strip()
    line = re.compile(r"^(?P<conn>\d+) (?P<status>\d{3}) (?P<path>\S+)")
    return version.replace("nginx version: ", ""), ["nginx", "-p", tmp, "-e", f"{tmp}/error.log", "-c", conf], log, line


@contextlib.contextmanager
def serve(kind: str, site: str, tmp: str) -> Iterator[Server]:
    """nginx or http.server serving ``site`` on a loopback port, stopped (by pid) on the way out."""
    if kind == "auto":
        kind = "nginx" if shutil.which("nginx") else "http.server"
    port = free_port()
    if kind == "nginx":
        name, cmd, log, line = _nginx(site, tmp, port)
        stderr = subprocess.DEVNULL
    else:
        name = f"Python {sys.version.split()[0]} http.server"
        cmd = [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "--directory", site, str(port)]
        log = os.path.join(tmp, "access.log")
        line = re.compile(r'"GET (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')  # one connection a request
    with open(log, "ab") as logfile:
        # SIGTERM for the server should this process be killed before its finally: below runs.
        process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=logfile if kind == "http.server" else stderr,
                                   preexec_fn=death_signal(signal.SIGTERM))  # noqa: PLW1509
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind} did not start (exit {process.poll()}); see {tmp}")
            time.sleep(0.05)
        yield Server(name, f"http://127.0.0.1:{port}/index.html", process, log, line)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --------------------------------------------------------------------------- the clients


def command(client: str, seed: str, db: str) -> list[str]:
    """The command line of ``client`` (one of :data:`CLIENTS`) crawling from ``seed``."""
    if client == "wget":
        return ["wget", "-r", "-l", "inf", "-np", "-nd", "--delete-after", "-q", seed]
    return [sys.executable, "-m", "niofetcher", "crawl", seed, "--db", db, "--connections", "4", "--per-host", "4",
            "--extractor", client.split("-")[1], "--follow-nofollow", "--progress", "none"]


def run_tree(cmd: list[str], cwd: str, timeout: float, wrapper: list[str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` under clients/run_tree.py (or ``wrapper``): its tree's wall and CPU, or why it failed.

    In a session of its own, so that on a timeout its whole process group is killed.
    """
    report = os.path.join(cwd, "tree.json")
    full = wrapper + cmd if wrapper is not None else [sys.executable, RUN_TREE, "--report", report, "--", *cmd]
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    proc = subprocess.Popen(full, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return {"failed": f"killed after {timeout:g} s"}
    except BaseException:  # Ctrl-C or SIGTERM (see main): its own session, so no signal reached it
        _kill_group(proc)
        raise
    result: dict[str, Any] = {"returncode": proc.returncode, "wall": time.perf_counter() - started}
    if proc.returncode != 0:
        result["failed"] = f"exit {proc.returncode}: " + " | ".join((err or out).strip().splitlines()[-3:])
    if wrapper is None:
        with open(report, encoding="utf-8") as f:
            tree = json.load(f)
        os.remove(report)
        result.update(wall=tree["wall"], cpu=tree["cpu_user"] + tree["cpu_system"], reaped=tree["reaped"])
    return result


def judge(served: list[tuple[str | None, int, str]], site: SiteInfo) -> dict[str, Any]:
    """What the server saw of one run: requests, the site's pages served, others, repeats, connections opened.

    ``connections`` counts the connections the server accepted in the run (nginx's ``$connection``
    serial numbers; None from http.server, whose log does not say), not how many were open at once.
    """
    paths = collections.Counter(path for _conn, _status, path in served)
    pages = {path for path in paths if path in site.html_paths}
    connections = {conn for conn, _status, _path in served if conn is not None}
    return {"requests": len(served), "pages": len(pages), "other": len(set(paths) - pages),
            "repeated": sum(n - 1 for n in paths.values()), "not_200": sum(s != 200 for _c, s, _p in served),
            "connections": len(connections) if connections else None,
            "missing_pages": sorted(site.html_paths - pages)[:5]}


def run_rounds(server: Server, site: SiteInfo, tmp: str, rounds: int, timeout: float) -> list[dict[str, Any]]:
    """``rounds`` rounds of every client, alternated; each run judged by the server's log."""
    runs: list[dict[str, Any]] = []
    for round_no in range(1, rounds + 1):
        for client in CLIENTS:
            work = tempfile.mkdtemp(prefix=f"{client}-", dir=tmp)  # wget's downloads, the crawl's frontier
            offset = server.log_size()
            run = {"client": client, "round": round_no,
                   **run_tree(command(client, server.seed, os.path.join(work, "crawl.sqlite")), work, timeout)}
            run.update(judge(server.served(offset), site))
            shutil.rmtree(work, ignore_errors=True)
            runs.append(run)
            print(f"  round {round_no} {client:<16} " + (
                run["failed"] if "failed" in run and "cpu" not in run else
                f"{run['wall']:7.2f} s wall {run['cpu']:7.2f} s CPU {run['pages']:5d} pages "
                f"{run['requests']:5d} requests {run['connections'] or '-'} connections opened"
                + (f"  ({run['failed']})" if "failed" in run else "")), flush=True)
    return runs


def summarise(runs: list[dict[str, Any]], site: SiteInfo) -> dict[str, dict[str, Any]]:
    """Per client: median wall and CPU over the runs that finished, pages and whether every run got the site."""
    summary: dict[str, dict[str, Any]] = {}
    for client in CLIENTS:
        done = [r for r in runs if r["client"] == client and "cpu" in r]
        if not done:
            summary[client] = {"runs": 0}
            continue
        summary[client] = {
            "runs": len(done), "wall": statistics.median(r["wall"] for r in done),
            "cpu": statistics.median(r["cpu"] for r in done), "walls": [round(r["wall"], 3) for r in done],
            "pages": statistics.median(r["pages"] for r in done),
            "requests": statistics.median(r["requests"] for r in done),
            "connections": max((r["connections"] or 0) for r in done) or None,
            "complete": all(r["pages"] == len(site.html_paths) and not r["missing_pages"] for r in done),
            "repeated": max(r["repeated"] for r in done),
        }
    return summary


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill the command's process group and reap it; its output is left unread, since a parse
    process of a crawl (a session of its own) may hold the pipes open for a while."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


# --------------------------------------------------------------------------- the profile


def profile(server: Server, tmp: str, extractor: str, out: str, timeout: float) -> dict[str, Any]:
    """One crawl under ``py-spy record --subprocesses`` (raw stacks to ``out``), and :func:`read_profile` of it."""
    work = tempfile.mkdtemp(prefix="profile-", dir=tmp)
    spy = ["py-spy", "record", "--subprocesses", "--rate", "200", "--format", "raw", "-o", out, "--"]
    run = run_tree(command(f"niofetcher-{extractor}", server.seed, os.path.join(work, "crawl.sqlite")), work,
                   timeout, wrapper=spy)
    shutil.rmtree(work, ignore_errors=True)
    if not os.path.exists(out):  # said, not read as a profile of no samples
        return {"extractor": extractor, "wall": run.get("wall"), "samples": 0, "processes": [], "self": [],
                "total": [], "failed": run.get("failed") or f"py-spy wrote no {out}"}
    return {"extractor": extractor, "wall": run.get("wall"), "failed": run.get("failed"), **read_profile(out)}


def read_profile(path: str) -> dict[str, Any]:
    """The samples of each process of a py-spy raw profile (the crawl, its parse processes) and the
    functions with the most samples of their own (``self``) and on the stack (``total``)."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    processes: collections.Counter[str] = collections.Counter()
    with open(path, encoding="utf-8") as f:
        # 'process PID:"CMD";[process PID:"CMD";...]outermost (file:line);...;innermost (file:line) COUNT':
        # a child process's stack comes after its parents' process names.
        for line in f:
            sample = re.match(r'((?:process \d+:".*?";)+)(.*) (\d+)$', line)
            if sample is None:
                continue
            cmd, stack, count = re.findall(r'process \d+:"(.*?)";', sample[1])[-1], sample[2], int(sample[3])
            processes["parse process" if "_serve" in cmd else "crawl" if " crawl " in cmd else cmd[:60]] += count
            calls = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]  # a function, not its lines
            own[calls[-1]] += count
            for call in set(calls):
                total[call] += count
    return {"samples": sum(processes.values()), "processes": processes.most_common(), "self": own.most_common(15),
            "total": total.most_common(25)}


def print_profile(prof: dict[str, Any]) -> None:
    """The profile's processes and top functions, as shares of all samples."""
    samples = max(1, prof["samples"])
    print(f"\nprofile of niofetcher-{prof['extractor']} ({prof['samples']} samples at 200/s"
          f"{', ' + prof['failed'] if prof['failed'] else ''}):")
    for name, count in prof["processes"]:
        print(f"  {count / samples:6.1%}  process {name}")
    for key in ("self", "total"):
        print(f"  by {key} samples:")
        for name, count in prof[key]:
            print(f"  {count / samples:6.1%}  {name}")


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=530, help="HTML pages of the site (default 530)")
    ap.add_argument("--toc-depth", type=int, choices=(1, 2), default=2,
                    help="the sidebar lists every page and its sections (2, default), or the pages alone (1)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every client, alternated (default 3)")
    ap.add_argument("--server", choices=("auto", "nginx", "http.server"), default="auto",
                    help="what serves the site (default: nginx when there is one)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a command may take (default 300)")
    ap.add_argument("--json", metavar="FILE", help="write the site, the runs and the summary to FILE")
    ap.add_argument("--profile", metavar="PREFIX", help="then crawl once per extractor under py-spy: PREFIX-bs4.txt ...")
    args = ap.parse_args()
    # SIGTERM (a CI run cancelled, timeout(1)) as SystemExit, so that the server is stopped, the
    # running command's group killed and the temporary directory removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if shutil.which("wget") is None:
        print("wget is not installed", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="docsite-") as tmp:
        site_dir = os.path.join(tmp, "site")
        site = write_site(site_dir, args.pages, args.toc_depth)
        with serve(args.server, site_dir, tmp) as server:
            print(f"site: {len(site.html_paths)} HTML pages, {site.html_bytes / len(site.html_paths) / 1e3:.0f} KB "
                  f"and {site.links_per_page:,.0f} links a page ({site.fragment_share:.0%} with a fragment), "
                  f"served by {server.name} at {server.seed}", flush=True)
            runs = run_rounds(server, site, tmp, args.rounds, args.timeout)
            profiles = []
            if args.profile:
                for extractor in ("bs4", "lxml"):
                    path = os.path.abspath(f"{args.profile}-{extractor}.txt")  # py-spy runs in a work dir
                    profiles.append(profile(server, tmp, extractor, path, args.timeout))
    summary = summarise(runs, site)
    print(f"\n{'client':<16} {'wall s':>7} {'CPU s':>7} {'pages':>6} {'requests':>8} {'opened':>6}  walls")
    for client, row in summary.items():
        if not row["runs"]:
            print(f"{client:<16} no run finished")
            continue
        print(f"{client:<16} {row['wall']:7.2f} {row['cpu']:7.2f} {row['pages']:6.0f} {row['requests']:8.0f} "
              f"{row['connections'] or '-':>6}  {row['walls']}{'' if row['complete'] else '  INCOMPLETE'}")
    wget = summary["wget"].get("wall")
    for client in CLIENTS[1:]:
        if wget and summary[client].get("wall"):
            faster = wget / summary[client]["wall"]
            print(f"{client} vs wget: {faster:.2f} x wget's speed ({'faster' if faster > 1 else 'slower'})")
    for prof in profiles:
        print_profile(prof)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"server": server.name, "pages": len(site.html_paths), "html_bytes": site.html_bytes,
                       "links_per_page": site.links_per_page, "fragment_share": site.fragment_share,
                       "runs": runs, "summary": summary, "profiles": profiles}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

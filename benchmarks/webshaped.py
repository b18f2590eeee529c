"""A web-shaped crawl (issue 31, item 1): TLS, 1,000+ host names, real pages of web sizes, per core.

    python benchmarks/webshaped.py                  # the full run: 3 rounds, both shapes, every client (~15 min)
    python benchmarks/webshaped.py --quick          # a smoke run: 120 hosts, small budgets, 1 round (~15 s)
    python benchmarks/webshaped.py --clients niofetcher-lxml,scrapy --shapes web75 --max-seconds 30

The site (``niofetcher.testing.webshaped.WebShapedSite``, in a process of its
own: this script run with ``--serve``) is a ``SyntheticWeb`` over TLS:

* ``--hosts`` host names ``h{j}.web.test`` (1,200) on ``--ports`` loopback
  ports (4), reached through ``FetcherConfig.resolve`` (``crawl --resolve``,
  one entry per name) and, for Scrapy, a ``socket.getaddrinfo`` that answers
  127.0.0.1 for ``*.web.test`` and refuses every other name: nothing is ever
  looked up off the machine. Each host has a ``/robots.txt`` (one Disallow);
* a certificate for ``*.web.test`` from a throwaway trustme CA, which the
  clients trust through ``--ca-file`` (niofetcher) and ``SSL_CERT_FILE`` with
  ``DOWNLOAD_VERIFY_CERTIFICATES`` (Scrapy: certificates checked, as
  niofetcher checks them). TLS 1.3, session tickets on (``tickets``) or off
  (``no-tickets``: every connection a full handshake);
* ``--pages`` pages (30,000) over the hosts (Zipf 1.0 sizes, 10 links a page,
  80 % of them to other hosts), each a page of the real corpus
  (``/work/shared/corpus/pages``, 100 pages) with those links after its
  ``<body>``, padded with its own body or cut to a size drawn from the shape:

  - ``web75``: log-normal, median 30 kB, sigma 1.39, redrawn above 2 MB: mean 75 kB;
  - ``chan242``: the same sigma, median 123 kB: mean 242 kB (Andrew Chan's
    2025 crawl's average page);

  half of the pages gzip (level 1), the corpus pages' own links kept (to real
  sites, or made absolute under ``offsite.invalid``), so each page is parsed
  whole and most of its links refused by the domain rule. A page is cut
  before a ``<``, never inside a tag.

Clients, one after the other against the same site, each from host 0's ``/``
with a fresh frontier, stopped by ``--max-pages`` (5,000 pages, robots.txt not
counted) or ``--max-seconds`` (90), in ``--rounds`` rounds (3; the clients
interleaved in each) of which the median is shown:

niofetcher-EXTRACTOR  ``niofetcher crawl`` (the CLI's ``main()``, in a process of
                      its own: this script run with ``--crawl-child``), ``--extractor``
                      bs4, lxml or selectolax, ``--parse-workers 2``, ``--per-host 2``,
                      ``--connections 64``, ``--allowed-domain web.test``. The CLI has
                      no option for the connection service time, so the child passes
                      ``connection_service_time=--service-time`` (2 s) to the fetcher
                      through ``config_from``'s extra fields: a connection older than that
                      is closed after its response. With 64 sockets in all (idle ones
                      included) for 1,200 hosts, about every fetch opens a connection
                      (the server counts ~1.2 handshakes per page, robots.txt included):
                      the shape of a crawl of the web, where the next page is mostly on
                      another host. The share of those that are resumed is stated
                      (tickets on: ~75 %, the rest being each host's first; off: 0).
niofetcher-lxml+pooled  the same with sockets for two per host (``--connections``
                      2 x hosts) and the default service time (60 s): connections are
                      kept and reused, as Scrapy's pool keeps them (~0.5 handshakes per
                      page); the difference from niofetcher-lxml is what the handshakes
                      and connection set-up cost.
scrapy                Scrapy's CrawlSpider with one ``Rule(LinkExtractor(), follow=True)``,
                      tuned for a broad crawl: ``CONCURRENT_REQUESTS`` 64,
                      ``CONCURRENT_REQUESTS_PER_DOMAIN`` 2, no AutoThrottle, no delay,
                      cookies, telnet and memusage off, ``LOG_LEVEL`` WARNING, the
                      ``DownloaderAwarePriorityQueue``, robots.txt obeyed, retries
                      off, ``allowed_domains = ["web.test"]`` (``--scrapy-child``). Its
                      pool keeps an idle connection per host with no overall cap (~0.3
                      handshakes per page), and pyOpenSSL resumes no session.

Measured (every page count by the server, from its own log):

* pages: requests of pages (not ``/robots.txt``) the server answered, and
  pages/s from its first to its last request;
* CPU seconds per page of the client's processes, split: the crawl process's
  fetcher loop thread (``niofetcher-loop``; Scrapy: its main thread, where the
  reactor, the parsing and the scheduler all run), the parse processes (all the
  crawl process's children), the coordinator thread that runs the frontier
  (``niofetcher-crawl``, with ``niofetcher-frontier-log``), and the rest (the
  other threads, start-up, imports, the summary). Thread and child CPU is read
  every 0.2 s with psutil (a child's last reading is kept); the process's own
  total is ``os.times()`` at the end, less the sampling thread's own CPU;
* TLS handshake CPU, estimated: a client-side full and resumed handshake with
  this certificate are timed alone at start (``time.thread_time``, 200 each),
  and multiplied by the handshakes the server counted (full, resumed) for the
  client;
* peak RSS of the crawl process and of its largest child;
* **pages/s per CPU core used**: pages ÷ the client's CPU seconds (so 1 core
  busy for the whole run at 50 pages/s is 50). The server's CPU (its own
  process, which on this 2-core machine competes with the client) is reported
  apart and not counted.

Then the goals of issue 31: niofetcher at >= 3x Scrapy's pages/s per core
(each extractor), and >= 2 x 57 = 114 pages/s per core at the 242 kB shape.
Everything goes to ``benchmarks/results/webshaped-<date>.json`` (``-quick``
with ``--quick``; ``--json FILE`` elsewhere, ``--no-write`` nowhere).
Every server and client stops by itself (``--max-seconds``, the site's own
bound), and is killed by its pid if it does not.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import psutil

if TYPE_CHECKING:
    from niofetcher.testing.webshaped import SizeShape

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
SCRIPT = Path(__file__).resolve()
CORPUS = Path("/work/shared/corpus/pages")
DOMAIN = "web.test"
EXTRACTORS = ("bs4", "lxml", "selectolax")
CLIENTS = (*(f"niofetcher-{name}" for name in EXTRACTORS), "scrapy")
#: A niofetcher client with this suffix gets sockets enough for two per host and the default service
#: time (60 s): the "pooled" run, where connections are reused as Scrapy's are.
POOLED = "+pooled"
POOLED_SERVICE_TIME = 60.0
#: Shape name -> (mean, median or None, cap); the second shape keeps the first one's sigma.
SHAPES = {"web75": (75_000.0, 30_000.0), "chan242": (242_000.0, None)}
CAP = 2_000_000
#: Andrew Chan's 2025 crawl: pages/s per vCPU, and issue 31's goals.
CHAN_PER_VCPU = 57.0
GOAL_VS_CHAN = 2.0
GOAL_VS_SCRAPY = 3.0
SAMPLE_EVERY = 0.2
#: The name of the sampling thread, and the stage its own CPU is counted in (left out of the client's).
SAMPLER = "webshaped-sampler"
HANDSHAKE_SAMPLES = 200


# --------------------------------------------------------------------------- certificates


def make_certificates(folder: Path) -> tuple[Path, Path]:
    """(the CA's PEM, the server's key and chain PEM for ``*.web.test``), from a throwaway trustme CA."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert(f"*.{DOMAIN}")
    ca_file, server_file = folder / "ca.pem", folder / "server.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.private_key_and_cert_chain_pem.write_to_path(str(server_file))
    return ca_file, server_file


def handshake_costs(ca_file: Path, server_file: Path, samples: int = HANDSHAKE_SAMPLES) -> tuple[float, float]:
    """Client CPU seconds of one full and one resumed TLS handshake with this certificate (medians).

    The server side runs in a thread over a socketpair; only the client thread's CPU is read
    (``time.thread_time``), around ``do_handshake`` and the one-byte read after it that takes the
    session ticket in.
    """
    from niofetcher.testing import tls_context_from_files

    server_context = tls_context_from_files(str(server_file))
    client_context = ssl.create_default_context(cafile=str(ca_file))
    pairs = [socket.socketpair() for _ in range(2 * samples)]

    def serve() -> None:
        for _, theirs in pairs:
            try:
                with server_context.wrap_socket(theirs, server_side=True) as tls:
                    tls.sendall(b"x")
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass

    thread = threading.Thread(target=serve, name="webshaped-handshake-server", daemon=True)
    thread.start()
    full: list[float] = []
    resumed: list[float] = []
    session: ssl.SSLSession | None = None
    for n, (ours, _) in enumerate(pairs):
        reuse = session if n % 2 else None
        ours.settimeout(10.0)  # a server thread that failed must not hang the benchmark
        started = time.thread_time()
        tls = client_context.wrap_socket(ours, server_hostname=f"h1.{DOMAIN}", session=reuse)
        tls.recv(1)
        spent = time.thread_time() - started
        (resumed if tls.session_reused else full).append(spent)
        session = tls.session
        tls.sendall(b"y")
        tls.close()
    thread.join(30)
    full.sort()
    resumed.sort()
    return full[len(full) // 2], (resumed[len(resumed) // 2] if resumed else float("nan"))


# --------------------------------------------------------------------------- the site's process


def shape_of(name: str) -> SizeShape:
    """The ``SizeShape`` of a shape's name (module docstring)."""
    from niofetcher.testing.webshaped import SizeShape

    first = SizeShape.for_mean("web75", SHAPES["web75"][0], CAP, median=SHAPES["web75"][1])
    if name == "web75":
        return first
    mean, median = SHAPES[name]
    if median is not None:
        return SizeShape.for_mean(name, mean, CAP, median=median)
    return SizeShape.for_mean(name, mean, CAP, sigma=first.sigma)


def serve(spec: dict[str, Any]) -> None:
    """The site's process: start the site, print its addresses as one JSON line, then answer the
    commands read from stdin (``reset``, ``report``, ``quit``) with one JSON line each."""
    from niofetcher.testing import tls_context_from_files
    from niofetcher.testing.webshaped import CorpusPages, WebShapedSite

    shape = shape_of(spec["shape"])
    corpus = CorpusPages(spec["corpus"], shape.cap)
    context = tls_context_from_files(spec["server_file"], tickets=spec["tickets"])
    site = WebShapedSite(corpus, shape, context, hosts=spec["hosts"], pages=spec["pages"], ports=spec["ports"],
                         seed=spec["seed"], max_seconds=spec["max_seconds"], log_requests=True)
    me = psutil.Process()
    with site:
        print(json.dumps({"base": site.base_urls[0], "resolve": site.resolve, "describe": shape.describe()}),
              flush=True)
        cpu_at_reset = sum(me.cpu_times()[:2])
        for line in sys.stdin:
            command = line.strip()
            if command == "reset":
                site.reset_counters()
                cpu_at_reset = sum(me.cpu_times()[:2])
                print(json.dumps({"ok": True}), flush=True)
            elif command == "report":
                report = site_report(site)
                report["server_cpu"] = sum(me.cpu_times()[:2]) - cpu_at_reset
                print(json.dumps(report), flush=True)
            else:
                break


def site_report(site: Any) -> dict[str, Any]:
    """What the server counted since the last reset: pages, their sizes, handshakes, first and last request."""
    pages = robots = gzipped = other = 0
    odd: list[str] = []
    size_sum = 0
    sizes: list[int] = []
    first = last = None
    for j, name in enumerate(site.names):
        counters = site.host_counters(name)
        for path, count in counters.paths.items():
            if path == "/robots.txt":
                robots += count
                continue
            pages += count
            if path.startswith("/page/") and path[6:].isdigit() and int(path[6:]) < site.host_pages[j]:
                number = site.page_number(j, int(path[6:]))
                size = site.sizes[number]
                sizes.extend([size] * count)
                size_sum += size * count
                gzipped += count * site.gzipped(number)
            elif path != "/":
                other += count
                if len(odd) < 5:
                    odd.append(f"{name}{path}")
        for arrival, path in counters.log:
            if path != "/robots.txt":
                first = arrival if first is None else min(first, arrival)
                last = arrival if last is None else max(last, arrival)
    total = site.counters()
    sizes.sort()
    return {
        "pages": pages, "robots": robots, "not_pages": other, "not_pages_sample": odd, "gzip_share": gzipped / max(1, len(sizes)),
        "mean_size": size_sum / max(1, len(sizes)), "median_size": sizes[len(sizes) // 2] if sizes else 0,
        "max_size": sizes[-1] if sizes else 0,
        "tls_handshakes": total.tls_handshakes, "tls_resumed": total.tls_resumed, "tls_failed": total.tls_failed,
        "connections": total.accepted,
        "span": (last - first) if first is not None and last is not None else 0.0,
    }


class SiteProcess:
    """The site's process, driven through its stdin and stdout; killed by its pid if it will not stop."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--serve", json.dumps(spec)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT,
        )
        self.info = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the site's process ended (status {self.process.wait()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, command: str) -> dict[str, Any]:
        """Send a command, return its answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._read()

    def stop(self) -> None:
        """Ask it to quit; kill it by its pid after 10 s."""
        try:
            assert self.process.stdin is not None
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child: the project on the path."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


# --------------------------------------------------------------------------- CPU of a client, from inside it


class CPUSampler:
    """Reads this process's threads' CPU (by name) and its children's CPU and RSS every ``SAMPLE_EVERY`` s.

    A thread that ends reports its own CPU as it ends (``threading.Thread.run`` is wrapped while the
    sampler runs: ``time.thread_time()`` in the thread itself), so a short-lived thread, or the last
    moments of a long one, are not lost to ``other``. A child's last reading is kept, so a child that
    ended counts up to its last sample. ``stage`` maps a thread's name to the stage it is counted in.
    """

    def __init__(self, stage: Callable[[str], str]) -> None:
        self.stage = stage
        self.process = psutil.Process()
        self.threads: dict[int, tuple[str, float]] = {}  # native id -> (stage, CPU seconds)
        self.ended: dict[int, tuple[str, float]] = {}  # the same, told by each thread as it ended
        self.children: dict[int, tuple[float, float]] = {}  # pid -> (CPU seconds, peak RSS bytes)
        self._stop = threading.Event()
        self._thread_run = threading.Thread.run
        self._thread = threading.Thread(target=self._run, name=SAMPLER, daemon=True)
        self.started = time.perf_counter()

    def __enter__(self) -> CPUSampler:
        run, ended, stage = self._thread_run, self.ended, self.stage

        def run_and_tell(thread: threading.Thread) -> None:
            try:
                run(thread)
            finally:
                if thread.native_id is not None:
                    ended[thread.native_id] = (stage(thread.name), time.thread_time())

        threading.Thread.run = run_and_tell  # type: ignore[method-assign,assignment]
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        threading.Thread.run = self._thread_run  # type: ignore[method-assign]
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            self.sample()

    def sample(self) -> None:
        """One reading of every thread and child."""
        names = {thread.native_id: thread.name for thread in threading.enumerate() if thread.native_id}
        try:
            for thread in self.process.threads():
                name = names.get(thread.id)
                if name is not None:
                    self.threads[thread.id] = (self.stage(name), thread.user_time + thread.system_time)
        except psutil.Error:
            pass
        for child in self.process.children(recursive=True):
            try:
                with child.oneshot():
                    times = child.cpu_times()
                    rss = child.memory_info().rss
            except psutil.Error:
                continue
            _, peak = self.children.get(child.pid, (0.0, 0))
            self.children[child.pid] = (times.user + times.system, max(peak, rss))

    def report(self) -> dict[str, Any]:
        """CPU by stage (the rest of the process's own CPU as ``other``), children's, peak RSS, wall."""
        stages: dict[str, float] = {}
        for stage, seconds in {**self.threads, **self.ended}.values():
            stages[stage] = stages.get(stage, 0.0) + seconds
        times = os.times()
        own = times.user + times.system
        stages["other"] = own - sum(stages.values()) + stages.get("other", 0.0)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        sampled = sum(cpu for cpu, _ in self.children.values())
        return {
            "wall": time.perf_counter() - self.started, "own_cpu": own, "stages": stages,
            "children_cpu": max(sampled, usage.ru_utime + usage.ru_stime), "children": len(self.children),
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "child_rss_mb": max((rss for _, rss in self.children.values()), default=0) / 2**20,
        }


def niofetcher_stage(name: str) -> str:
    """The stage a thread of the crawl process is counted in."""
    if name == SAMPLER:
        return SAMPLER
    if name == "niofetcher-loop":
        return "loop"
    if name == "niofetcher-crawl" or name.startswith("niofetcher-frontier"):
        return "frontier"
    return "other"


def crawl_child(spec: dict[str, Any]) -> None:
    """``niofetcher crawl`` in this process, its CPU sampled; stopped by SIGTERM at ``max_seconds``."""
    import niofetcher.cli.crawl as crawl_command
    from niofetcher.cli import main
    from niofetcher.cli.args import config_from

    def with_service_time(args: argparse.Namespace, **extra: object) -> Any:
        return config_from(args, connection_service_time=spec["service_time"], **extra)

    # The CLI has no option for the service time (module docstring): the crawl command's own name for
    # config_from is pointed at one that adds it to the fields the command passes.
    vars(crawl_command)["config_from"] = with_service_time
    argv = ["crawl", "--db", spec["db"], "--max-pages", str(spec["max_pages"]), "--allowed-domain", DOMAIN,
            "--extractor", spec["extractor"], "--parse-workers", str(spec["parse_workers"]),
            "--per-host", str(spec["per_host"]), "--connections", str(spec["connections"]),
            "--ca-file", spec["ca_file"], "--progress", "none", "--stop-grace", "2"]
    for name_port, address in spec["resolve"].items():
        argv += ["--resolve", f"{name_port}:{address}"]
    argv.append(spec["seed"])
    timer = threading.Timer(spec["max_seconds"], os.kill, (os.getpid(), signal.SIGTERM))
    timer.daemon = True
    with CPUSampler(niofetcher_stage) as sampler:
        timer.start()
        status = main(argv)
        timer.cancel()
    report = sampler.report()
    report["status"] = status
    Path(spec["report"]).write_text(json.dumps(report))


def scrapy_child(spec: dict[str, Any]) -> None:
    """Scrapy's CrawlSpider in this process, its CPU sampled (module docstring)."""
    loopback_names_only()
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy.exceptions import CloseSpider
    from scrapy.linkextractors import LinkExtractor
    from scrapy.spiders import CrawlSpider, Rule

    pages = [0]

    class WebSpider(CrawlSpider):  # type: ignore[misc,unused-ignore]  # scrapy is Any without the bench extra
        name = "webshaped"
        allowed_domains = [DOMAIN]  # noqa: RUF012 - Scrapy reads it from the class
        start_urls = [spec["seed"]]  # noqa: RUF012
        rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

        def parse_start_url(self, response: Any, **kwargs: object) -> list[object]:
            return self.parse_page(response)

        def parse_page(self, response: Any) -> list[object]:
            pages[0] += 1
            if pages[0] >= spec["max_pages"]:  # the budget in pages, as niofetcher's (robots.txt not counted)
                raise CloseSpider("page budget")
            return []

    settings = {
        "CONCURRENT_REQUESTS": spec["connections"],
        "CONCURRENT_REQUESTS_PER_DOMAIN": spec["per_host"],
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "ROBOTSTXT_OBEY": True,
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "MEMUSAGE_ENABLED": False,
        "RETRY_ENABLED": False,
        "LOG_LEVEL": "WARNING",
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
        "DOWNLOAD_VERIFY_CERTIFICATES": True,
        "CLOSESPIDER_TIMEOUT": spec["max_seconds"],
        "USER_AGENT": f"Scrapy/{scrapy.__version__} (benchmark)",
    }
    with CPUSampler(lambda name: "loop" if name == "MainThread" else SAMPLER if name == SAMPLER else "other") as sampler:
        process = CrawlerProcess(settings)
        crawler = process.create_crawler(WebSpider)
        process.crawl(crawler)
        process.start()
    report = sampler.report()
    stats = crawler.stats.get_stats() if crawler.stats is not None else {}
    report["status"] = 0
    report["callback_pages"] = pages[0]
    report["scrapy_stats"] = {key: value for key, value in stats.items()
                              if isinstance(value, (int, float, str)) and key.startswith(
                                  ("downloader/exception", "downloader/response_status", "finish", "offsite",
                                   "robotstxt/request", "dupefilter"))}
    Path(spec["report"]).write_text(json.dumps(report))


def loopback_names_only() -> None:
    """Make ``*.web.test`` resolve to 127.0.0.1 and every other name fail, in this process: no lookup
    leaves the machine (Scrapy's resolver calls ``socket.gethostbyname`` in a thread)."""
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name.endswith(f".{DOMAIN}") or name in ("127.0.0.1", "localhost"):
            return real_getaddrinfo("127.0.0.1", port, *args, **kwargs)
        raise socket.gaierror(socket.EAI_NONAME, f"{name}: not a {DOMAIN} name (no lookups off the machine)")

    def gethostbyname(host: str) -> str:
        if host.endswith(f".{DOMAIN}") or host in ("127.0.0.1", "localhost"):
            return "127.0.0.1"
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: not a {DOMAIN} name (no lookups off the machine)")

    socket.getaddrinfo = getaddrinfo
    socket.gethostbyname = gethostbyname


# --------------------------------------------------------------------------- one client against the site


def run_client(client: str, site: SiteProcess, args: argparse.Namespace, folder: Path, ca_file: Path,
               costs: tuple[float, float]) -> dict[str, Any]:
    """Run one client against the site (fresh counters); its figures, the server's and the client's."""
    site.ask("reset")
    report_file = folder / f"{client}.json"
    report_file.unlink(missing_ok=True)
    spec = {"seed": site.info["base"], "resolve": site.info["resolve"], "max_pages": args.max_pages,
            "max_seconds": args.max_seconds, "connections": args.connections, "per_host": args.per_host,
            "report": str(report_file)}
    env = child_env()
    if client == "scrapy":
        mode = "--scrapy-child"
        env["SSL_CERT_FILE"] = str(ca_file)
    else:
        mode = "--crawl-child"
        db = folder / f"{client}.sqlite"
        for stale in folder.glob(f"{client}.sqlite*"):
            stale.unlink()
        pooled = client.endswith(POOLED)
        spec.update(extractor=client.removeprefix("niofetcher-").removesuffix(POOLED), db=str(db),
                    ca_file=str(ca_file), parse_workers=args.parse_workers,
                    service_time=POOLED_SERVICE_TIME if pooled else args.service_time)
        if pooled:
            spec["connections"] = max(args.connections, args.per_host * args.hosts)
    log = folder / f"{client}.log"
    load_before = os.getloadavg()[0]
    with log.open("w") as out:
        child = subprocess.Popen([sys.executable, str(SCRIPT), mode, json.dumps(spec)], stdout=out,
                                 stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
        try:
            child.wait(args.max_seconds + 90)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # its own session: the child and its parse processes
            child.wait()
    served = site.ask("report")
    result: dict[str, Any] = {"client": client, "returncode": child.returncode, "load_before": load_before,
                              "load_after": os.getloadavg()[0], "server": served}
    if report_file.exists():
        result.update(json.loads(report_file.read_text()))
    else:
        result["error"] = log.read_text()[-3000:]
    if child.returncode != 0 and "error" not in result:
        result["error"] = log.read_text()[-3000:]
    figures(result, costs)
    return result


def figures(result: dict[str, Any], costs: tuple[float, float]) -> None:
    """Add the derived figures to one client's result."""
    served = result["server"]
    pages = served["pages"]
    stages = result.get("stages", {})
    # The sampler's own CPU is the measurement's, not the client's.
    cpu = result.get("own_cpu", 0.0) - stages.get(SAMPLER, 0.0) + result.get("children_cpu", 0.0)
    full = served["tls_handshakes"] - served["tls_resumed"]
    tls_cpu = full * costs[0] + served["tls_resumed"] * (costs[1] if costs[1] == costs[1] else costs[0])
    result["figures"] = {
        "pages": pages,
        "hosts": served["robots"],
        "mean_kb": served["mean_size"] / 1000,
        "pages_per_s": (pages - 1) / served["span"] if served["span"] > 0 else 0.0,
        "cpu": cpu,
        "cpu_per_page": cpu / max(1, pages),
        "loop_per_page": stages.get("loop", 0.0) / max(1, pages),
        "parse_per_page": result.get("children_cpu", 0.0) / max(1, pages),
        "frontier_per_page": stages.get("frontier", 0.0) / max(1, pages),
        "other_per_page": stages.get("other", 0.0) / max(1, pages),
        "tls_per_page": tls_cpu / max(1, pages),
        "handshakes_per_page": served["tls_handshakes"] / max(1, pages),
        "resumed_share": served["tls_resumed"] / max(1, served["tls_handshakes"]),
        "per_core": pages / cpu if cpu > 0 else 0.0,
        "server_cpu_per_page": served["server_cpu"] / max(1, pages),
    }


# --------------------------------------------------------------------------- the report


def median_runs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each (shape, tickets, client), the round of the median pages/s per core (the lower one of
    an even count) among the rounds that fetched pages without an error, with ``per_core_range`` and
    ``rounds_ok`` over those rounds; in the order first run. A failed round is left out (and counted
    as such), not taken as zero."""
    groups: dict[tuple[str, bool, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["shape"], r["tickets"], r["client"]), []).append(r)
    chosen = []
    for runs in groups.values():
        ok = [r for r in runs if r["figures"]["pages"] > 0 and "error" not in r] or runs
        ordered = sorted(ok, key=lambda r: float(r["figures"]["per_core"]))
        median = dict(ordered[(len(ordered) - 1) // 2])
        median["per_core_range"] = (ordered[0]["figures"]["per_core"], ordered[-1]["figures"]["per_core"])
        median["rounds_ok"] = (len([r for r in runs if r["figures"]["pages"] > 0 and "error" not in r]), len(runs))
        chosen.append(median)
    return chosen


def table(results: list[dict[str, Any]], out: TextIO = sys.stdout) -> None:
    """The markdown table of the runs given (one row each)."""
    print("| shape | tickets | client | pages | hosts | mean kB | pages/s | CPU ms/page | loop | parse procs "
          "| frontier | rest | TLS est. | handshakes/page | resumed | peak RSS MB (crawl / child) | server ms/page "
          "| load | **pages/s per core** | range (rounds) |", file=out)
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
          file=out)
    for r in results:
        f = r["figures"]
        ms = {key: f"{f[key] * 1000:.1f}" for key in (
            "cpu_per_page", "loop_per_page", "parse_per_page", "frontier_per_page", "other_per_page",
            "tls_per_page", "server_cpu_per_page")}
        scrapy = r["client"] == "scrapy"
        low, high = r.get("per_core_range", (f["per_core"], f["per_core"]))
        good, run = r.get("rounds_ok", (1, 1))
        rounds = f"{good}" if good == run else f"{good} of {run}"
        print(f"| {r['shape']} | {'on' if r['tickets'] else 'off'} | {r['client']} | {f['pages']} "
              f"| {f['hosts']} | {f['mean_kb']:.0f} | {f['pages_per_s']:.1f} | {ms['cpu_per_page']} | {ms['loop_per_page']} "
              f"| {'(inline)' if scrapy else ms['parse_per_page']} | {'(inline)' if scrapy else ms['frontier_per_page']} "
              f"| {ms['other_per_page']} | {ms['tls_per_page']} | {f['handshakes_per_page']:.2f} "
              f"| {f['resumed_share']:.0%} | {r.get('rss_mb', 0):.0f} / {r.get('child_rss_mb', 0):.0f} "
              f"| {ms['server_cpu_per_page']} | {r['load_before']:.1f} | **{f['per_core']:.1f}** "
              f"| {low:.0f}-{high:.0f} ({rounds}) |", file=out)


def goals(results: list[dict[str, Any]], out: TextIO = sys.stdout) -> list[str]:
    """Issue 31's goals, one line each, printed and returned."""
    lines = []
    for shape in dict.fromkeys(r["shape"] for r in results):
        runs = [r for r in results if r["shape"] == shape and r["tickets"]]
        scrapy = next((r for r in runs if r["client"] == "scrapy"), None)
        for r in runs:
            if r["client"] == "scrapy":
                continue
            per_core = r["figures"]["per_core"]
            if scrapy is not None and scrapy["figures"]["per_core"] > 0:
                ratio = per_core / scrapy["figures"]["per_core"]
                verdict = "met" if ratio >= GOAL_VS_SCRAPY else "not met"
                lines.append(f"{shape}, {r['client']}: {ratio:.2f}x Scrapy per core "
                             f"(goal >= {GOAL_VS_SCRAPY:g}x): {verdict}")
            if shape == "chan242":
                ratio = per_core / CHAN_PER_VCPU
                verdict = "met" if ratio >= GOAL_VS_CHAN else "not met"
                lines.append(f"{shape}, {r['client']}: {per_core:.1f} pages/s per core = {ratio:.2f}x the "
                             f"{CHAN_PER_VCPU:g} of Chan's crawl (goal >= {GOAL_VS_CHAN:g}x, "
                             f"{GOAL_VS_CHAN * CHAN_PER_VCPU:g}): {verdict}")
    for line in lines:
        print(f"- {line}", file=out)
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 120 hosts, 1,500 pages, small budgets")
    parser.add_argument("--clients", default=",".join((*CLIENTS[:-1], f"niofetcher-lxml{POOLED}", CLIENTS[-1])),
                        help=f"comma-separated, of {', '.join(CLIENTS)}, and niofetcher-EXTRACTOR{POOLED} "
                             "(default: all, and lxml pooled)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--no-tickets-client", default="niofetcher-lxml",
                        help="the client also run against the site without session tickets, at the first shape "
                             "('none': no such run)")
    parser.add_argument("--hosts", type=int, default=None, help="host names (default 1,200; 120 with --quick)")
    parser.add_argument("--pages", type=int, default=None, help="pages of the web (default 30,000; 1,500 --quick)")
    parser.add_argument("--ports", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-pages", type=int, default=None, help="each client's page budget (5,000; 120 --quick)")
    parser.add_argument("--max-seconds", type=float, default=None, help="each client's time bound (90; 12 --quick)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every client, medians reported "
                        "(3; 1 with --quick)")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--per-host", type=int, default=2)
    parser.add_argument("--parse-workers", type=int, default=2)
    parser.add_argument("--service-time", type=float, default=2.0, help="niofetcher's connection_service_time, s")
    parser.add_argument("--json", default=None, help="write the figures here instead of benchmarks/results/")
    parser.add_argument("--no-write", action="store_true", help="write no JSON file")
    parser.add_argument("--serve", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--crawl-child", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--scrapy-child", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick
    args.hosts = args.hosts or (120 if quick else 1_200)
    args.pages = args.pages or (1_500 if quick else 30_000)
    args.max_pages = args.max_pages or (120 if quick else 5_000)
    args.max_seconds = args.max_seconds or (12.0 if quick else 90.0)
    args.rounds = args.rounds or (1 if quick else 3)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(json.loads(args.serve))
        return 0
    if args.crawl_child:
        crawl_child(json.loads(args.crawl_child))
        return 0
    if args.scrapy_child:
        scrapy_child(json.loads(args.scrapy_child))
        return 0
    clients = [c for c in args.clients.split(",") if c]
    shapes = [s for s in args.shapes.split(",") if s]
    known = (*CLIENTS, *(c + POOLED for c in CLIENTS if c != "scrapy"))
    unknown = [c for c in clients if c not in known] + [s for s in shapes if s not in SHAPES]
    if unknown:
        print(f"unknown clients or shapes: {unknown}", file=sys.stderr)
        return 2
    started = _dt.datetime.now(_dt.timezone.utc)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="webshaped-") as tmp:
        folder = Path(tmp)
        ca_file, server_file = make_certificates(folder)
        costs = handshake_costs(ca_file, server_file)
        print(f"client TLS handshake CPU (alone): full {costs[0] * 1000:.2f} ms, resumed {costs[1] * 1000:.2f} ms")
        plan = [(shape, True, clients) for shape in shapes]
        if args.no_tickets_client != "none" and shapes:
            plan.insert(1, (shapes[0], False, [args.no_tickets_client]))
        for shape, tickets, shape_clients in plan:
            spec = {"shape": shape, "corpus": str(CORPUS), "server_file": str(server_file), "tickets": tickets,
                    "hosts": args.hosts, "pages": args.pages, "ports": args.ports, "seed": args.seed,
                    "max_seconds": (args.max_seconds + 120) * len(shape_clients) * args.rounds + 120}
            site = SiteProcess(spec)
            try:
                print(f"site: {args.hosts} hosts on {args.ports} ports, {args.pages} pages, "
                      f"{site.info['describe']}; session tickets {'on' if tickets else 'off'}", flush=True)
                for round_ in range(1, args.rounds + 1):
                    for client in shape_clients:  # interleaved, so that a change of load falls on all alike
                        result = run_client(client, site, args, folder, ca_file, costs)
                        result.update(shape=shape, tickets=tickets, round=round_)
                        results.append(result)
                        f = result["figures"]
                        print(f"  round {round_}, {client}: {f['pages']} pages, {f['pages_per_s']:.1f} pages/s, "
                              f"{f['per_core']:.1f} pages/s per core, load {result['load_before']:.1f}"
                              f"{' ERROR: ' + result['error'][-500:] if 'error' in result else ''}", flush=True)
            finally:
                site.stop()
    medians = median_runs(results)
    print(f"\nmedians of {args.rounds} round{'s' if args.rounds > 1 else ''} (the round of the median pages/s "
          f"per core; the range is over the rounds); CPU columns in ms per page\n")
    table(medians)
    print()
    lines = goals(medians)
    record = {
        "started": started.isoformat(), "python": platform.python_version(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "argv": sys.argv[1:], "handshake_cpu": {"full": costs[0], "resumed": costs[1]},
        "shapes": {s: shape_of(s).describe() for s in shapes}, "rounds": args.rounds, "results": results,
        "medians": [(r["shape"], r["tickets"], r["client"], r["round"]) for r in medians], "goals": lines,
    }
    if not args.no_write:
        path = Path(args.json) if args.json else RESULTS / (
            f"webshaped-{started:%Y%m%dT%H%M%S}{'-quick' if args.quick else ''}.json")
        path.write_text(json.dumps(record, indent=1))
        print(f"\nfigures: {path}")
    failed = [r["client"] for r in medians if r["figures"]["pages"] == 0]  # a client that never fetched
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

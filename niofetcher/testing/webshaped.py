"""``WebShapedSite``: a ``SyntheticWeb`` over TLS whose pages are real pages, sized as the web's are.

Theory of operation
-------------------
Loopback benchmarks with 4 KiB pages on a few plain-HTTP ports say little
about a crawl of the web, where pages are tens to hundreds of kilobytes of
messy HTML, half of them compressed, on thousands of host names, each reached
over TLS. This site keeps ``SyntheticWeb``'s graph (host names on a few ports,
Zipf-sized hosts, links mostly across hosts, a ``/robots.txt`` per host) and
changes what a page is and how it travels:

* every port speaks TLS (``tls``: a server-side context, e.g.
  ``tls_context_from_files`` with a certificate for ``*.{domain}``), so the
  URLs are ``https://``;
* page ``/page/i`` of host j is a real page of a corpus (``CorpusPages``: the
  saved pages of ``/work/shared/corpus/pages``) with the site's links put
  right after its ``<body>`` tag, then padded with copies of that page's own
  body, or cut, to a drawn size (``SizeShape``: a log-normal truncated at a
  cap, its median and spread stated), and closed with ``</body></html>``;
* a stated share of the pages (``gzip_share``, one half by default) is sent
  ``Content-Encoding: gzip`` (level 1, as nginx's ``gzip_comp_level`` default),
  compressed when asked;
* the corpus pages' own links are kept, so the parsers do the work the web
  gives them, but they can never lead the crawl off the machine or into
  404s: a relative ``href`` (a form's ``action``, a ``src``) is made absolute
  under ``https://offsite.invalid/`` (a crawl restricted to ``{domain}`` drops
  it, as it drops the pages' links to real sites), and ``<base>`` and
  ``<meta name="robots">`` tags are removed; a page is cut before a ``<``,
  never inside a tag.

What is drawn is a pure function of ``seed`` and the page's number in the web,
so two clients crawling the same site get the same bytes for the same URL.
Nothing is kept per page: a page is a few references into one padded copy of
its corpus page (``memoryview`` slices; only the gzip pages are joined and
compressed), so the server's memory is the corpus padded to the cap, once.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import random
import re
import ssl
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from .messages import Resource
from .pages import links_html
from .web import SyntheticWeb

__all__ = ["CorpusPages", "SizeShape", "WebShapedSite"]

#: Where a relative link of a corpus page is made to point: never fetched (a crawl kept to the site's
#: domain drops it), and ``.invalid`` can never resolve (RFC 6761).
OFFSITE = b"https://offsite.invalid/"
#: The smallest page drawn (a page of links and a title is about this big).
MIN_PAGE = 1_000
#: The gzip level of the compressed pages: nginx's default ``gzip_comp_level``.
GZIP_LEVEL = 1
#: The content type of a page: no charset, so that the page's own ``<meta charset>`` decides.
PAGE_TYPE = "text/html"

_BASE_TAG = re.compile(rb"<base\b[^>]*>", re.IGNORECASE)
_META_ROBOTS = re.compile(rb"<meta\b[^>]*\bname\s*=\s*[\"']?robots\b[^>]*>", re.IGNORECASE)
# An href (or a form's action, a frame's src) whose value has no scheme and is not protocol-relative
# or a fragment: relative to the page.
_RELATIVE_HREF = re.compile(rb"""(\b(?:href|action|src)\s*=\s*["']?)(?![a-zA-Z][a-zA-Z0-9+.-]*:|//|#|["'\s>])""",
                            re.IGNORECASE)
_BODY_OPEN = re.compile(rb"<body\b[^>]*>", re.IGNORECASE)
_BODY_CLOSE = re.compile(rb"</body\s*>", re.IGNORECASE)
_TAIL = b"\n</body></html>\n"


def _phi(x: float) -> float:
    """The standard normal distribution function."""
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


@dataclasses.dataclass(frozen=True)
class SizeShape:
    """Page sizes: a log-normal of this ``median`` and ``sigma`` (of the log), redrawn above ``cap``,
    raised to ``MIN_PAGE`` below it. Bytes of the page as served before compression.

    ``for_mean`` finds the parameters for a stated mean; ``mean`` is the shape's exact mean (the
    truncation taken into account, the small raise below ``MIN_PAGE`` not).
    """

    name: str
    median: float
    sigma: float
    cap: int

    @property
    def mean(self) -> float:
        """The mean of the log-normal truncated at ``cap``."""
        return _truncated_mean(self.median, self.sigma, self.cap)

    @classmethod
    def for_mean(cls, name: str, mean: float, cap: int, *, median: float | None = None,
                 sigma: float | None = None) -> SizeShape:
        """The shape of this ``mean`` given either its ``median`` (the spread is solved for) or its
        ``sigma`` (the median is solved for)."""
        if (median is None) == (sigma is None):
            raise ValueError("give exactly one of median and sigma")
        if median is not None:
            low, high = 0.01, 4.0
            for _ in range(80):  # the truncated mean grows with sigma here (mean > median)
                middle = (low + high) / 2
                low, high = (middle, high) if _truncated_mean(median, middle, cap) < mean else (low, middle)
            return cls(name, median, (low + high) / 2, cap)
        assert sigma is not None
        low, high = float(MIN_PAGE), float(cap)
        for _ in range(80):
            middle = (low + high) / 2
            low, high = (middle, high) if _truncated_mean(middle, sigma, cap) < mean else (low, middle)
        return cls(name, (low + high) / 2, sigma, cap)

    def draw(self, rng: random.Random) -> int:
        """One page size."""
        mu = math.log(self.median)
        while True:
            size = rng.lognormvariate(mu, self.sigma)
            if size <= self.cap:
                return max(MIN_PAGE, int(size))

    def describe(self) -> str:
        """One line stating the shape."""
        return (f"{self.name}: log-normal, median {self.median / 1000:.1f} kB, sigma {self.sigma:.3f}, "
                f"redrawn above {self.cap / 1e6:.2f} MB, floor {MIN_PAGE / 1000:.0f} kB: mean {self.mean / 1000:.1f} kB")


def _truncated_mean(median: float, sigma: float, cap: float) -> float:
    mu = math.log(median)
    log_cap = math.log(cap)
    kept = _phi((log_cap - mu) / sigma)
    return math.exp(mu + sigma * sigma / 2) * _phi((log_cap - mu - sigma * sigma) / sigma) / kept


class CorpusPages:
    """The corpus's pages, cleaned (module docstring), each split at its ``<body>`` tag.

    Args:
        directory: a folder of ``*.html`` files.
        cap: the largest page that will be asked for: each page's padded copy is this long.
    """

    def __init__(self, directory: str | Path, cap: int) -> None:
        files = sorted(Path(directory).glob("*.html"))
        if not files:
            raise ValueError(f"no *.html pages in {str(directory)!r}")
        self.names = [path.name for path in files]
        self.heads: list[bytes] = []
        self._bodies: list[bytes] = []
        self._padded: list[tuple[bytes, memoryview] | None] = []
        self.cap = cap
        for path in files:
            head, body = self.split(self.clean(path.read_bytes()))
            self.heads.append(head)
            self._bodies.append(body)
            self._padded.append(None)

    def __len__(self) -> int:
        return len(self.names)

    @staticmethod
    def clean(page: bytes) -> bytes:
        """The page with its relative links sent off-site and its ``<base>`` and robots meta tags gone."""
        page = _BASE_TAG.sub(b"", page)
        page = _META_ROBOTS.sub(b"", page)
        return _RELATIVE_HREF.sub(lambda match: match[1] + OFFSITE, page)

    @staticmethod
    def split(page: bytes) -> tuple[bytes, bytes]:
        """``(up to and with the <body> tag, the body's content)``; no ``<body>``: ``(b"", page)``."""
        opening = _BODY_OPEN.search(page)
        start = opening.end() if opening else 0
        closing = _BODY_CLOSE.search(page, start)
        end = closing.start() if closing else len(page)
        body = page[start:end]
        return page[:start], body if body.strip() else page

    def padded(self, index: int, size: int) -> memoryview:
        """Page ``index``'s body, repeated, cut to at most ``size`` bytes before a ``<`` (so that no tag
        is cut: an attribute cut open would take in the closing tags as a link). The repeated body, at
        most ``cap`` bytes, is made on first use and kept."""
        padded = self._padded[index]
        if padded is None:
            body = self._bodies[index]
            whole = (body * (self.cap // len(body) + 1))[: self.cap]
            padded = self._padded[index] = (whole, memoryview(whole))
        whole, view = padded
        if size >= len(whole):
            return view
        cut = whole.rfind(b"<", 0, size + 1)
        return view[: max(cut, 0)]

    def page(self, index: int, size: int, title: str, links: bytes) -> list[bytes | memoryview]:
        """The chunks of a page of about ``size`` bytes: corpus page ``index``'s head (or a small one,
        when its own would not leave room), ``links``, its body padded or cut, the closing tags."""
        head = self.heads[index]
        if len(head) + len(links) + len(_TAIL) > size:
            head = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>'
                    "<body>\n").encode()
        filler = max(0, size - len(head) - len(links) - len(_TAIL))
        return [head, links, self.padded(index, filler), _TAIL]


class WebShapedSite(SyntheticWeb):
    """A ``SyntheticWeb`` served over TLS whose pages are corpus pages of drawn sizes (module docstring).

    Use it like ``SyntheticWeb``: crawl it with ``FetcherConfig(resolve=site.resolve,
    ca_file=...)`` from ``site.base_urls[0]``.

    Args:
        corpus: the pages (``CorpusPages``, its cap at least ``shape.cap``).
        shape: the page sizes.
        tls: the server side's ``ssl.SSLContext``; its certificate must name ``*.{domain}``.
        gzip_share: the share of pages sent gzip-compressed.
        hosts, pages, ports, seed, zipf, links_per_page, cross_host_share, robots_disallow,
        robots_crawl_delay, domain, host, port, max_seconds, log_requests: as for ``SyntheticWeb``.
    """

    def __init__(
        self,
        corpus: CorpusPages,
        shape: SizeShape,
        tls: ssl.SSLContext,
        *,
        gzip_share: float = 0.5,
        hosts: int = 1_000,
        pages: int = 10_000,
        ports: int = 4,
        seed: int = 0,
        zipf: float = 1.0,
        links_per_page: int = 10,
        cross_host_share: float = 0.8,
        robots_disallow: Sequence[str] = ("/private/",),
        robots_crawl_delay: float | None = None,
        domain: str = "web.test",
        host: str = "127.0.0.1",
        port: int = 0,
        max_seconds: float | None = 600.0,
        log_requests: bool = False,
    ) -> None:
        if not isinstance(tls, ssl.SSLContext):
            raise ValueError(f"tls must be an ssl.SSLContext, not {tls!r}")
        if not 0 <= gzip_share <= 1:
            raise ValueError(f"gzip_share must be within [0, 1], not {gzip_share!r}")
        if corpus.cap < shape.cap:
            raise ValueError(f"the corpus is padded to {corpus.cap} bytes, less than the shape's cap {shape.cap}")
        super().__init__(hosts=hosts, pages=pages, ports=ports, seed=seed, zipf=zipf,
                         links_per_page=links_per_page, cross_host_share=cross_host_share,
                         robots_disallow=robots_disallow, robots_crawl_delay=robots_crawl_delay, domain=domain,
                         host=host, port=port, max_seconds=max_seconds, log_requests=log_requests, tls=tls)
        self.corpus = corpus
        self.shape = shape
        self.gzip_share = gzip_share
        rng = random.Random(f"{seed}/sizes")
        self.sizes = [shape.draw(rng) for _ in range(pages)]

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running" if self._server else "new"
        return f"<WebShapedSite hosts={self.hosts} pages={self.pages} shape={self.shape.name} {state}>"

    # -- what a page is (pure functions of the seed and the page's number in the web)

    def page_number(self, j: int, i: int) -> int:
        """The number in the whole web of host ``j``'s page ``i``."""
        return self._first_page[j] + i

    def gzipped(self, number: int) -> bool:
        """Whether page ``number`` of the web is sent gzip-compressed."""
        return (zlib.crc32(f"{self.seed}/gzip/{number}".encode()) % 10_000) < self.gzip_share * 10_000

    def corpus_index(self, number: int) -> int:
        """Which corpus page page ``number`` of the web is made of."""
        return zlib.crc32(f"{self.seed}/corpus/{number}".encode()) % len(self.corpus)

    # -- what is served

    def _page_maker(self, j: int, bases: Sequence[str]) -> Callable[[int], Resource]:
        """SyntheticWeb's pages and links, each page a corpus page of its drawn size, gzip or not."""
        gzip_header = "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n"

        def page(i: int) -> Resource:
            number = self.page_number(j, i)
            chunks = self.corpus.page(self.corpus_index(number), self.sizes[number], f"Web-shaped host {j} page {i}",
                                      links_html(self._page_links(j, i, bases)).encode())
            if self.gzipped(number):
                packed = gzip.compress(b"".join(chunks), compresslevel=GZIP_LEVEL, mtime=0)
                return Resource("200 OK", PAGE_TYPE, [packed], headers=gzip_header)
            return Resource("200 OK", PAGE_TYPE, chunks)

        return page

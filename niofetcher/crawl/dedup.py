"""Page fingerprints, and a host's index of them: what ``CrawlConfig(dedup=...)`` compares.

A page is reduced to its visible text (no script, style, template or comment), the text to
words, and the words to two fingerprints:

- ``digest``, 16 bytes of BLAKE2b over the words joined by one space: ``dedup="exact"`` finds a
  page whose text equals one already done, whatever its markup, whitespace or letter case;
- ``simhash``, 64 bits (Charikar's simhash over the set of 3-word shingles, each hashed with
  xxHash64, as Manku, Jain and Das Sarma use it for Google's crawl): ``dedup="near"`` finds a
  page within NEAR_BITS bits of one already done -- a date, a counter or a session ID in the
  text moves a few bits, another page moves about half of them.

Words are Unicode's (``\\w+``), so any script counts; an ideograph or kana is a word by itself,
since Chinese and Japanese put no spaces between words.  Only the first TEXT_LIMIT characters of
text are read: the cost of a page is bounded (about 4 ms for a 10 MB page of text) whatever
its size, and two pages that agree that far are duplicates for any crawl's purpose.  A page
without words has no fingerprint and is never a duplicate: pages of only images or only script
are not the same page.

Measured on the 100 pages of the corpus (2-core VM, Python 3.11): visible text through lxml
1.8 ms a page (of which 1.4 ms is lxml's parse), words and shingles 0.6 ms, the simhash with
xxHash64 0.7 ms (BLAKE2b from hashlib for each shingle: 2.1 ms, hence xxhash); the digest
0.03 ms.

:class:`HostIndex` finds a near duplicate without comparing with every page of the host: by
the pigeonhole principle, two 64-bit fingerprints within 3 bits agree exactly on at least one
of four 16-bit blocks, so each fingerprint is filed under its four blocks and only the pages
that share a block are compared (Manku et al.'s table permutation, with four tables).
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import NamedTuple

import xxhash

#: Characters of text read from one page: past them, a page's text is cut (see above).
TEXT_LIMIT = 1_000_000
#: Bytes of a page's HTML parsed for its text, for the same reason (and libxml2 gives up on a
#: text node over 10 MB, where a cut one parses).
HTML_LIMIT = 2_000_000
#: Words a shingle has.
SHINGLE = 3
#: Bits two simhashes may differ by and still be of one page.
NEAR_BITS = 3
_BLOCKS = 4  # one more than NEAR_BITS: the pigeonhole above
_BLOCK_BITS = 64 // _BLOCKS

_NO_SPACE_SCRIPTS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # kana, CJK ideographs
_WORD = re.compile(rf"[{_NO_SPACE_SCRIPTS}]|[^\W{_NO_SPACE_SCRIPTS}]+")
_INVISIBLE = ("script", "style", "template", "noscript")
# _BIT[t] maps a byte to its bit t: a column of hash bytes translated by it counts that bit's ones in C.
_BIT = [bytes((value >> bit) & 1 for value in range(256)) for bit in range(8)]


class Fingerprint(NamedTuple):
    """A page's fingerprints (see the module docstring)."""

    digest: bytes
    simhash: int


def page_fingerprint(body: bytes, content_type: str | None) -> Fingerprint | None:
    """The fingerprints of a fetched HTML page (decoded as the extractors decode it), None when it
    has no words or is no HTML."""
    from .parse import utf8_of

    html = utf8_of(body, content_type)
    return None if html is None else fingerprint(visible_text(html))


def visible_text(html: bytes) -> str:
    """The text a reader of the page sees, from its HTML as UTF-8 (``parse.utf8_of``)."""
    import lxml.etree
    import lxml.html

    html = html[:HTML_LIMIT]
    if not html.strip():
        return ""
    try:
        root = lxml.html.document_fromstring(html, parser=_parser())
    except (lxml.etree.ParserError, ValueError):  # nothing lxml can make a document of
        return ""
    lxml.etree.strip_elements(root, *_INVISIBLE, lxml.etree.Comment, lxml.etree.ProcessingInstruction,
                              with_tail=False)
    # Pieces of text joined by a space: text_content() would run a heading into the paragraph after it.
    return " ".join(root.itertext())


_PARSER = None


def _parser() -> object:
    global _PARSER  # one parser a process, made when first needed
    if _PARSER is None:
        import lxml.html

        _PARSER = lxml.html.HTMLParser(encoding="utf-8")
    return _PARSER


def words(text: str) -> list[str]:
    """The words of ``text``, case folded, from its first TEXT_LIMIT characters."""
    return _WORD.findall(text[:TEXT_LIMIT].casefold())


def fingerprint(text: str) -> Fingerprint | None:
    """The fingerprints of a page's text; None when it has no words (never a duplicate)."""
    found = words(text)
    if not found:
        return None
    digest = hashlib.blake2b(" ".join(found).encode(), digest_size=16).digest()
    return Fingerprint(digest, simhash(found))


def simhash(found: list[str]) -> int:
    """Charikar's simhash of the set of SHINGLE-word shingles of ``found`` (one shingle of all of
    them when there are fewer): bit b is set when most shingles' hashes have it set."""
    shingles = {" ".join(gram) for gram in zip(*(found[i:] for i in range(SHINGLE)))} or {" ".join(found)}
    hashes = array("Q", (xxhash.xxh64_intdigest(shingle.encode()) for shingle in shingles))
    if sys.byteorder == "big":
        hashes.byteswap()
    hashed = hashes.tobytes()
    majority = len(shingles) / 2
    value = 0
    for byte in range(8):  # little-endian: byte k holds bits 8k to 8k+7
        column = hashed[byte::8]
        for bit in range(8):
            if column.translate(_BIT[bit]).count(1) > majority:
                value |= 1 << (8 * byte + bit)
    return value


def near(a: int, b: int) -> bool:
    """Whether two simhashes are of one page (within NEAR_BITS bits)."""
    return (a ^ b).bit_count() <= NEAR_BITS


class HostIndex:
    """The fingerprints of one host's pages that are done, and which URL each came from.

    ``near=False`` compares digests only (``dedup="exact"``); ``near=True`` also simhashes.
    Memory, measured with a million pages (tracemalloc): 114 bytes a page for ``exact``, 182 for
    ``near``, plus the URLs themselves (which the index keeps, for ``duplicate_of``).  Pages are numbered in the order
    they came; each block table files a page's number (4 bytes) under its 16-bit block.
    """

    def __init__(self, near: bool) -> None:
        self.near = near
        self._urls: list[str] = []
        self._digests: dict[int, int] = {}  # the digest's first 8 bytes -> page number
        self._simhashes = array("Q")
        self._blocks: list[dict[int, array[int]]] = [{} for _ in range(_BLOCKS)] if near else []

    def __len__(self) -> int:
        return len(self._urls)

    def find(self, page: Fingerprint) -> str | None:
        """The URL of a page already in the index that ``page`` duplicates, or None."""
        same = self._digests.get(_digest_key(page.digest))
        if same is not None:
            return self._urls[same]
        simhashes, urls = self._simhashes, self._urls
        for block, table in enumerate(self._blocks):
            for number in table.get(_block(page.simhash, block), ()):
                if urls[number] and near(page.simhash, simhashes[number]):
                    return urls[number]
        return None

    def withdraw(self, page: Fingerprint, url: str) -> None:
        """Take back the page ``add`` filed last for ``url``: it did not end done after all (an
        ``on_page`` refused it), and a later page of its text is the original, not its duplicate."""
        numbers = [number for number in range(len(self._urls) - 1, -1, -1) if self._urls[number] == url][:1]
        for number in numbers:
            self._urls[number] = ""  # its simhash stays filed, under no URL: find() passes it by
            key = _digest_key(page.digest)
            if self._digests.get(key) == number:
                del self._digests[key]

    def add(self, page: Fingerprint, url: str) -> None:
        """File a page that is done (not a duplicate: a duplicate's original is filed already)."""
        number = len(self._urls)
        self._urls.append(url)
        self._digests.setdefault(_digest_key(page.digest), number)
        if self.near:
            self._simhashes.append(page.simhash)
            for block, table in enumerate(self._blocks):
                key = _block(page.simhash, block)
                numbers = table.get(key)
                if numbers is None:
                    table[key] = array("I", (number,))
                else:
                    numbers.append(number)


def _digest_key(digest: bytes) -> int:
    # 64 bits of a 128-bit digest: two texts of one host share them by chance about once in 10^19.
    return int.from_bytes(digest[:8], "little")


def _block(value: int, block: int) -> int:
    return (value >> (block * _BLOCK_BITS)) & ((1 << _BLOCK_BITS) - 1)


#: Host indexes kept in memory with no page of the host in progress; the least recently used of
#: the rest are dropped first, and read back from the frontier when the host is claimed again.
IDLE_HOSTS_KEPT = 1024


class Duplicates:
    """A crawl's host indexes: which done page of its host a newly parsed page duplicates.

    The coordinator, the only caller of the frontier, gives a host's index its stored pages when
    it claims URLs of a host not in memory (:meth:`needs` then :meth:`load`), before any of them can
    be parsed; parse callbacks, on any thread, then ask :meth:`check` about each page, which files
    it when it duplicates nothing -- under one lock, so that of two copies parsed at once the
    second is the duplicate.  Per host, as a site's soft 404s and printer versions are its own.

    Args:
        near: compare simhashes too (``dedup="near"``), not only digests.
        in_progress: whether the crawl has a page of a host in progress: an index is dropped only
            when not (see IDLE_HOSTS_KEPT).
    """

    def __init__(self, near: bool, in_progress: Callable[[str], bool]) -> None:
        self._near = near
        self._in_progress = in_progress
        self._lock = threading.Lock()
        self._hosts: OrderedDict[str, HostIndex] = OrderedDict()  # least recently used first

    def needs(self, host: str) -> bool:
        """Whether ``host``'s index must be read from the frontier (it is not in memory)."""
        with self._lock:
            if host in self._hosts:
                self._hosts.move_to_end(host)
                return False
            return True

    def load(self, host: str, pages: Iterable[tuple[str, Fingerprint]]) -> None:
        """Install ``host``'s index from its done pages as the frontier keeps them, (url, fingerprint)."""
        index = HostIndex(self._near)
        for url, page in pages:
            if index.find(page) is None:
                index.add(page, url)
        with self._lock:
            self._hosts[host] = index
            self._hosts.move_to_end(host)
            idle = len(self._hosts) - IDLE_HOSTS_KEPT
            if idle > 0:
                for old in [old for old in self._hosts if not self._in_progress(old)][:idle]:
                    del self._hosts[old]

    def check(self, host: str, url: str, page: Fingerprint) -> str | None:
        """The URL of another done page that ``page`` (of ``url``) duplicates, or None, and then it is
        filed.  A host without an index (not claimed through the coordinator: a redirect's target is
        its own URL's host) gets an empty one."""
        with self._lock:
            index = self._hosts.get(host)
            if index is None:
                index = self._hosts[host] = HostIndex(self._near)
            original = index.find(page)
            if original is None:
                index.add(page, url)
                return None
            # A revisit whose bytes changed and whose text did not matches its own earlier visit:
            # unchanged, not a duplicate (its links, new ones included, are followed).
            return None if original == url else original

    def withdraw(self, host: str, url: str, page: Fingerprint) -> None:
        """``url``'s page, filed by :meth:`check` as an original, did not end done (an ``on_page``
        refused it): the next page of its text is the original."""
        with self._lock:
            index = self._hosts.get(host)
            if index is not None:
                index.withdraw(page, url)

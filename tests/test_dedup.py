"""crawl/dedup.py: page fingerprints on the real corpus and on text in any script, and a host's
index of them, held to a brute-force comparison.

The corpus has groups of pages whose text is one text in other markup (readability's test pages:
rtl-1/3/4, the metadata pages): those must be found, and no pair of pages that merely share a
template (readability's pages share 80-95% of their 3-word shingles with each other) may be taken
for one page.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_parse import NO_CORPUS, PAGES

from niofetcher.crawl import dedup
from niofetcher.crawl.dedup import NEAR_BITS, Fingerprint, HostIndex, fingerprint, visible_text, words

VOCABULARY = {  # words of each script, drawn from at random into texts of any length (Japanese: characters)
    "latin": "the harbour ships came in quiet old northern busy western small town river market bridge "
             "church school road house field winter summer morning evening people work trade",
    "cyrillic": "москва столица россии крупнейший город страны река мост улица дом школа зима лето утро вечер "
                "люди работа торговля рынок",
    "japanese": " ".join("東京都は日本の首都であり人口が最も多い都市である川橋町家学校冬夏朝夜"),
    "arabic": "القاهرة هي عاصمة جمهورية مصر العربية وأكبر مدنها النهر الجسر الشارع البيت المدرسة الشتاء "
              "الصيف الصباح المساء الناس العمل السوق",
}


def text_of(script: str, seed: int, length: int = 600) -> str:
    rng = random.Random(seed)
    glue = "" if script == "japanese" else " "
    vocabulary = VOCABULARY[script].split()
    return glue.join(rng.choice(vocabulary) for _ in range(length))



def shingles(found: list[str]) -> set[tuple[str, ...]]:
    return set(zip(*(found[i:] for i in range(dedup.SHINGLE))))


@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
def test_on_the_corpus_pages_of_one_text_are_found_and_pages_of_one_template_are_not() -> None:
    texts = {path.stem: words(visible_text(path.read_bytes())) for path in PAGES}
    prints = {name: fingerprint(" ".join(found)) for name, found in texts.items()}
    grams = {name: shingles(found) for name, found in texts.items()}
    near_pairs = []
    for (a, fa), (b, fb) in itertools.combinations(prints.items(), 2):
        if fa is None or fb is None:
            continue
        overlap = len(grams[a] & grams[b]) / len(grams[a] | grams[b])
        if fa.digest == fb.digest:
            assert texts[a] == texts[b]
        if dedup.near(fa.simhash, fb.simhash):
            near_pairs.append((a, b))
            assert overlap >= 0.9, (a, b, overlap)  # no false duplicate among real pages
        if texts[a] == texts[b]:
            assert fa == fb  # one text, whatever its markup: one fingerprint
    # The groups of one text in the corpus (readability's rtl-1/3/4 among them) are found.
    assert {("rtl-1", "rtl-3"), ("rtl-1", "rtl-4"), ("rtl-3", "rtl-4")} <= set(near_pairs)


def test_visible_text_leaves_out_script_style_template_and_comments() -> None:
    html = (b"<html><head><title>T</title><style>p{color:red}</style><script>var x = 'hidden';</script></head>"
            b"<body><!-- a comment --><p>Seen <b>here</b></p><template>not shown</template>"
            b"<noscript>no js</noscript>tail</body></html>")
    found = words(visible_text(html))
    assert found == ["t", "seen", "here", "tail"]


def test_a_changed_word_or_date_is_near_not_exact_and_another_text_is_far() -> None:
    article = text_of("latin", 1)
    page = fingerprint(article)
    dated = fingerprint(article.replace("winter", "2026", 1))
    other = fingerprint(text_of("latin", 2))
    assert page is not None and dated is not None and other is not None
    assert page.digest != dated.digest and dedup.near(page.simhash, dated.simhash)
    assert not dedup.near(page.simhash, other.simhash)
    # Case and whitespace are not the text: the same words are the same digest.
    assert fingerprint(article.upper().replace(" ", "\n  ")) == page


@pytest.mark.parametrize("script", ["cyrillic", "japanese", "arabic"])
def test_words_of_any_script_make_a_fingerprint_that_a_small_edit_keeps_near(script: str) -> None:
    text = text_of(script, 3)
    assert len(words(text)) >= 600  # ideographs are words of their own: Japanese is not one long word
    a, b, other = fingerprint(text), fingerprint(text[:200] + "X" + text[201:]), fingerprint(text_of(script, 4))
    assert a is not None and b is not None and other is not None
    assert a.digest != b.digest and dedup.near(a.simhash, b.simhash)
    assert not dedup.near(a.simhash, other.simhash)


@pytest.mark.parametrize("html", [b"", b"   ", b"<html><body><img src=a.png></body></html>",
                                  b"<script>only()</script>", b"\x00\xff\xfe garbage \x00", b"<<<>>>"])
def test_a_page_without_words_has_no_fingerprint(html: bytes) -> None:
    text = visible_text(html)
    if words(text):  # the garbage one has a word in it, and a fingerprint then
        assert fingerprint(text) is not None
    else:
        assert fingerprint(text) is None


def test_a_huge_page_is_read_up_to_the_limits() -> None:
    rng = random.Random(7)
    text = " ".join(f"w{rng.randrange(10**6)}" for _ in range(1_500_000))  # about 11 MB
    html = b"<html><body><p>" + text.encode() + b"</p></body></html>"
    seen = visible_text(html)
    assert 0 < len(seen) <= dedup.HTML_LIMIT
    assert len(" ".join(words(seen))) <= dedup.TEXT_LIMIT
    cut = fingerprint(seen)
    assert cut is not None and cut == fingerprint(text[:dedup.TEXT_LIMIT])


def flip(value: int, bits: list[int]) -> int:
    for bit in bits:
        value ^= 1 << bit
    return value


def test_the_index_finds_a_page_within_three_bits_wherever_they_fall_and_not_four() -> None:
    base = 0x0123_4567_89AB_CDEF
    index = HostIndex(near=True)
    index.add(Fingerprint(b"a" * 16, base), "http://h/a")
    # Three bits in three different 16-bit blocks: only the fourth block agrees.
    assert index.find(Fingerprint(b"b" * 16, flip(base, [1, 17, 33]))) == "http://h/a"
    assert index.find(Fingerprint(b"c" * 16, flip(base, [1, 17, 33, 49]))) is None  # every block differs
    assert index.find(Fingerprint(b"d" * 16, flip(base, [0, 1, 2, 3]))) is None  # four bits in one block
    exact = HostIndex(near=False)
    exact.add(Fingerprint(b"a" * 16, base), "http://h/a")
    assert exact.find(Fingerprint(b"b" * 16, base)) is None  # exact compares digests only
    assert exact.find(Fingerprint(b"a" * 16, ~base & (2**64 - 1))) == "http://h/a"
    assert len(exact) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40), st.integers(0, 2**64 - 1),
       st.lists(st.integers(0, 63), max_size=5))
def test_the_index_answers_as_comparing_with_every_page(stored: list[int], probe: int, bits: list[int]) -> None:
    index = HostIndex(near=True)
    for n, value in enumerate(stored):
        index.add(Fingerprint(n.to_bytes(16, "big"), value), f"http://h/{n}")
    probe = flip(stored[probe % len(stored)], bits) if bits else probe
    found = index.find(Fingerprint(b"\xff" * 16, probe))
    matches = {f"http://h/{n}" for n, value in enumerate(stored) if (value ^ probe).bit_count() <= NEAR_BITS}
    assert (found in matches) if matches else found is None

"""links_bs4's strained builder: Beautiful Soup is shown only the elements the harvest reads.

Two rules, each proven on the real corpus, on hard cases and on random tag soup, in both modes:
what the builder drops changes nothing (the harvest equals the one from Beautiful Soup's whole,
unstrained tree), and it does drop (outside the subtrees read whole, bs4 builds only the tags of
the mode's keep list, and no string at all).
"""

from __future__ import annotations

import random

import pytest
from bs4 import BeautifulSoup  # type: ignore[attr-defined,unused-ignore]
from bs4.element import Tag
from test_parse import NO_CORPUS, PAGES

from niofetcher.crawl.parse import Form, extract, links_bs4, utf8_of
from niofetcher.crawl.parse.harvest import Harvest
from niofetcher.crawl.parse.links_bs4 import _FULL, _LINKS_ONLY, _StrainedBuilder, harvest_bs4


class _AllNames(frozenset[str]):
    """Holds every tag name: as the "whole" set, the root is read whole, so nothing is dropped."""

    def __contains__(self, name: object) -> bool:
        return True


EVERYTHING = (frozenset[str](), _AllNames())

HARD_CASES = [
    # nested and misnested links, links in tables, forms and other links
    b"<a href=1><span><a href=2>x</a></span><img src=i><area href=ar><iframe src=f></iframe></a>",
    b"<b><a href=1>x</b>y</a><p><a href=2><div><a href=3>z</div></p>",
    (b"<table><tr><td>c<a href=t>l</a><table><tr><td>inner</td></tr></table> after</td><th>h</th></tr>"
    b"<td>stray</td></table><td>no table</td><tr><td>no table either</td></tr>"),
    b"<a href=x><table><tr><td> in <br>a link </td></tr></table></a>",
    b"<table><td>loose<td>cells<tr><td>row</table><table><caption>c</caption><tbody><tr><th>x</th></tbody></table>",
    # forms: fields in and out of forms, nested forms, selects, textareas, buttons
    (b"<input name=out><form action=/f method=post><input name=a><select name=s><option>o1"
    b"<option value=v selected>o2</select><textarea name=t>\n text </textarea><button name=b>B</button>"
    b"<form action=/g><input type=checkbox name=c></form></form><textarea name=late>t</textarea>"),
    b"<table><form action=/in-table><tr><td><input name=x></td></tr></form></table>",
    b"<form><table><tr><td><select name=s><optgroup><option>\xc3\xa9t\xc3\xa9</optgroup></select></td></tr></table>",
    # the page about itself, wherever it stands
    (b"<body><base href=/b/><meta name=ROBOTS content='noindex, none'><link rel='x Canonical' href=c>"
    b"<a href=k rel='NoFollow me'>k</a><base href=/ignored/></body>"),
    # titles: blank, in SVG inside a link, with markup, comments and scripts around
    b"<title> </title><a href=s><svg><title>svg title</title></svg></a><title>second</title>",
    b"<html><head><!-- c --><title>a <!-- no --> b &amp; c</title><script>var a='<a href=no>';</script>",
    # text machinery: comments, CDATA, processing instructions, templates, pre, whitespace, doctype
    (b"<!DOCTYPE html><?php echo 1 ?><table><tr><td><!-- c -->x<![CDATA[y]]><?pi z?><template>t</template>"
    b"<script>s</script><style>s</style>z</td><td><pre>  \n </pre>  \n\t </td></tr></table>"),
    b"<pre><table><tr><td>   </td><td> a \n b </td></tr></table></pre><a href=p><pre><table><tr><td>  </td>",
    b"<template><a href=tpl>t</a><table><tr><td>in template</td></tr></table></template>",
    # frames, stray end tags, unclosed everything, truncation
    b"<frameset><frame src=f1><frame src=f2></frameset><noframes><a href=nf>x</a></noframes>",
    b"</a></td></tr></table></form><a href=1></div></p><table><tr><td>x</span></b>",
    b"<div><div><a href=deep><table><tr><td>cut",
    # attribute names bs4 reads as "{namespace}name"
    b"<a {x}href=/ns href=/plain>x</a><form {y}action=/ns><input {z}name=n></form>",
]

NAMES = ["a", "area", "img", "frame", "iframe", "base", "meta", "link", "title", "form", "input", "select",
         "option", "textarea", "button", "table", "tr", "td", "th", "tbody", "div", "p", "span", "b", "br",
         "script", "style", "template", "pre", "svg", "ul", "li", "head", "body", "html"]
ATTRS = [b"", b" href=/x", b" href='#f' rel=nofollow", b" src=s", b" name=robots content=noindex",
         b" rel=canonical href=c", b" name=n value=v", b" selected", b" action=/a method=post", b" type=radio"]


def _soup_text(rng: random.Random) -> bytes:
    """Random tag soup: start tags, end tags and text in any order, unclosed and misnested."""
    parts = []
    for _ in range(rng.randrange(5, 60)):
        name = rng.choice(NAMES).encode()
        roll = rng.random()
        if roll < 0.5:
            parts.append(b"<" + name + rng.choice(ATTRS) + b">")
        elif roll < 0.75:
            parts.append(b"</" + name + b">")
        elif roll < 0.9:
            parts.append(rng.choice([b"text", b"  ", b"\n", b"a b", b"&amp;", b"<!-- c -->"]))
        else:
            parts.append(rng.choice([b"<?pi x?>", b"<![CDATA[d]]>", b"<!DOCTYPE html>"]))
    return b"".join(parts)


RANDOM_CASES = [_soup_text(random.Random(seed)) for seed in range(400)]


def _harvest(data: bytes, links_only: bool) -> dict[str, object]:
    harvest = Harvest()
    harvest_bs4(data, harvest, links_only)
    return {name: getattr(harvest, name) for name in Harvest.__slots__}


def _assert_drops_nothing_read(pages: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    for links_only in (False, True):
        strained = [_harvest(page, links_only) for page in pages]
        with monkeypatch.context() as patch:
            patch.setattr(links_bs4, "_FULL", EVERYTHING)
            patch.setattr(links_bs4, "_LINKS_ONLY", EVERYTHING)
            whole = [_harvest(page, links_only) for page in pages]
        for index, (got, want) in enumerate(zip(strained, whole, strict=True)):
            if links_only:  # the whole tree holds images, forms and tables, which links_only leaves out
                want.update(images=[], forms=[], tables=[])
            assert got == want, (links_only, index, pages[index][:300])


def test_hard_cases_harvest_as_from_the_whole_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_drops_nothing_read(HARD_CASES, monkeypatch)


def test_random_tag_soup_harvests_as_from_the_whole_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_drops_nothing_read(RANDOM_CASES, monkeypatch)


@pytest.mark.timeout(120)
@pytest.mark.skipif(not PAGES, reason=NO_CORPUS)
def test_corpus_harvests_as_from_the_whole_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = [utf8_of(path.read_bytes(), "text/html") for path in PAGES]
    _assert_drops_nothing_read([page for page in pages if page is not None], monkeypatch)


def _outside_whole(soup: BeautifulSoup, whole: frozenset[str]) -> list[str]:
    """The names of the tags, and "#text" for each string, that stand outside every whole subtree."""
    found: list[str] = []
    stack = list(reversed(soup.contents))
    while stack:
        node = stack.pop()
        if not isinstance(node, Tag):
            found.append("#text")
        elif node.name not in whole:
            found.append(node.name)
            stack.extend(reversed(node.contents))
    return found


_LINKS = frozenset(("a", "area", "frame", "iframe", "base", "meta", "link"))
# (mode, the tags kept wherever they stand, the tags kept with everything inside), spelled out
# here rather than read from links_bs4, so that widening the module's lists fails too.
MODES = [
    (_FULL, _LINKS | {"img"}, frozenset(("form", "table", "title"))),
    (_LINKS_ONLY, _LINKS, frozenset(("title",))),
]


@pytest.mark.parametrize(("mode", "keep", "whole"), MODES, ids=["full", "links_only"])
def test_only_kept_tags_reach_beautiful_soup(
    mode: tuple[frozenset[str], frozenset[str]], keep: frozenset[str], whole: frozenset[str]
) -> None:
    seen: set[str] = set()
    for page in [*HARD_CASES, *RANDOM_CASES]:
        soup = BeautifulSoup(page, builder=_StrainedBuilder(mode), from_encoding="utf-8")
        names = _outside_whole(soup, whole)
        assert set(names) <= keep | whole, page
        seen.update(names)
    assert seen == keep  # and the cases do hold every kept tag outside whole subtrees


def test_links_only_keeps_no_image_form_or_table() -> None:
    soup = BeautifulSoup(
        b"<img src=i><form><input></form><table><tr><td>x</td></tr></table><a href=a>y</a>",
        builder=_StrainedBuilder(_LINKS_ONLY),
        from_encoding="utf-8",
    )
    assert [tag.name for tag in soup.find_all(True)] == ["a"]


def test_a_braced_attribute_name_is_an_attribute_of_that_name() -> None:
    # bs4's own start() read "{y}action" as a namespaced "action" (an XML parser's notation); the lxml
    # extractor, and libxml2's HTML parser, see an attribute named "{y}action".
    page = b"<a {x}href=/ns href=/plain>x</a><form {y}action=/ns><input {z}name=n></form>"
    by_bs4, by_lxml = (extract(page, "http://h.test/", extractor=name) for name in ("bs4", "lxml"))
    assert by_bs4 == by_lxml
    assert by_bs4.links == ["http://h.test/plain"]
    assert by_bs4.forms == [Form("http://h.test/", "GET", (("", "text", ""),))]

"""The trap site (``niofetcher.testing.TrapSite``, ``niofetcher testsite --traps``), asked over loopback
with a plain HTTP client: each trap behaves as its docstring says, and every request is counted by
what it asked for, server-side.

- every real page answers 200 and counts as ``real``; the home page links each trap's door;
- the calendar links next month from any month, past year 9999;
- the shop mints a new session ID per response, as ``;jsessionid=`` and ``?sid=``, and a real
  page asked for under one counts as ``sessions``;
- ``/docs/`` and the soft 404 link relative ``a/``-style paths; any path under ``/docs/`` and any
  unknown path answers 200 with the same bytes;
- ``?page=N`` answers page 1's list with a link to ``N+1``;
- ``/archive/N/`` links ``N+1/`` relative;
- a site without a trap serves none of it (404, counted ``missing``); bad options are ValueErrors;
- ``niofetcher testsite --traps`` serves it and prints its URL.
"""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
from urllib.parse import urljoin, urlsplit

import pytest

from niofetcher.testing import TRAPS, TrapSite


def get(site: TrapSite, target: str) -> tuple[int, str]:
    """(status, body) of ``GET target`` from the site, over a connection of its own."""
    connection = http.client.HTTPConnection("127.0.0.1", site.ports[0], timeout=10)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8")
    finally:
        connection.close()


def hrefs(body: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', body)


@pytest.mark.timeout(30)
def test_every_real_page_answers_and_counts_as_real_and_home_links_each_door() -> None:
    with TrapSite(pages=6) as site:
        for url in site.real_urls():
            status, _ = get(site, urlsplit(url).path)
            assert status == 200, url
        assert site.fetches() == {"real": len(site.real_urls())}
        assert site.real_fetched() == set(site.real_urls()) and site.trap_fetches() == 0
        links = hrefs(get(site, "/")[1])
        for door in ("/calendar/", "/shop/", "/docs/", "/moved/old-page", "/list", "/archive/"):
            assert door in links


@pytest.mark.timeout(30)
def test_the_calendar_goes_on_past_year_9999() -> None:
    with TrapSite(traps=["calendar"]) as site:
        assert hrefs(get(site, "/calendar/")[1]) == ["/calendar/2025/01"]
        status, body = get(site, "/calendar/9999/12")
        assert status == 200 and hrefs(body)[:2] == ["/calendar/10000/01", "/calendar/9999/11"]
        assert site.fetches() == {"real": 1, "calendar": 1}


@pytest.mark.timeout(30)
def test_the_shop_mints_a_session_id_per_response() -> None:
    with TrapSite(traps=["sessions"]) as site:
        first, second = hrefs(get(site, "/shop/")[1]), hrefs(get(site, "/shop/")[1])
        assert first != second
        assert any(";jsessionid=" in href for href in first) and any("?sid=" in href for href in first)
        status, _ = get(site, first[0])  # an item under a session ID: the real page, counted as a trap fetch
        assert status == 200
        status, _ = get(site, "/page/0?utm_source=trapsite")
        assert status == 200
        assert site.fetches() == {"real": 2, "sessions": 2}
        assert "/page/0?utm_source=trapsite&utm_medium=home" in hrefs(get(site, "/")[1])


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("trap", "door", "deep"), [
    ("paths", "/docs/", "/docs/a/b/a/b/a/b/"),
    ("soft404", "/moved/old-page", "/moved/blog/news/blog/news/"),
])
def test_relative_links_grow_a_path_that_answers_200_with_the_same_page(trap: str, door: str, deep: str) -> None:
    with TrapSite(traps=[trap]) as site:
        status, body = get(site, door)
        assert status == 200
        relative = [href for href in hrefs(body) if not href.startswith("/")]
        assert relative and all(href.endswith("/") for href in relative)
        grown = urljoin(urljoin(f"http://h{door}", relative[0]), relative[0])
        assert urlsplit(grown).path.count(relative[0].strip("/")) == 2
        assert get(site, deep) == (200, body if trap == "soft404" else get(site, deep)[1])
        assert site.fetches().get(trap, 0) >= 2


@pytest.mark.timeout(30)
def test_pagination_repeats_page_one_under_every_page_number() -> None:
    with TrapSite(traps=["pagination"]) as site:
        _, first = get(site, "/list")
        _, later = get(site, "/list?page=41")
        assert "/list?page=2" in hrefs(first) and "/list?page=42" in hrefs(later)
        assert hrefs(first)[:-1] == hrefs(later)[:-1]  # the same list
        assert site.fetches() == {"real": 1, "pagination": 1}


@pytest.mark.timeout(30)
def test_the_archive_grows_a_path_that_never_repeats_a_segment() -> None:
    with TrapSite(traps=["archive"]) as site:
        assert hrefs(get(site, "/archive/")[1]) == ["1/"]
        assert hrefs(get(site, "/archive/1/2/3/")[1]) == ["4/"]
        assert site.fetches() == {"real": 1, "archive": 1}


@pytest.mark.timeout(30)
def test_a_site_without_a_trap_serves_none_of_it() -> None:
    with TrapSite(traps=[]) as site:
        assert get(site, "/calendar/2025/01")[0] == 404
        assert get(site, "/nowhere")[0] == 404
        assert [href for href in hrefs(get(site, "/")[1]) if not href.startswith("/page/")] == []
        assert site.fetches() == {"missing": 2, "real": 1}
        site.reset_counters()
        assert site.fetches() == {} and site.real_fetched() == set()


def test_bad_options_are_value_errors() -> None:
    with pytest.raises(ValueError, match="traps must be among"):
        TrapSite(traps=["quicksand"])
    with pytest.raises(ValueError, match="pages"):
        TrapSite(pages=0)
    assert TrapSite(traps="calendar").traps == ("calendar",)
    assert TrapSite().traps == TRAPS


@pytest.mark.timeout(60)
def test_the_testsite_command_serves_the_trap_site() -> None:
    command = [sys.executable, "-m", "niofetcher", "testsite", "--traps", "--port", "0", "--pages", "3"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        try:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line.startswith("serving http://127.0.0.1:"), line
            port = urlsplit(line.split()[1]).port
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                connection.request("GET", "/calendar/3000/05")
                assert connection.getresponse().status == 200
            finally:
                connection.close()
        finally:
            proc.terminate()
            proc.wait(10)
    refused = subprocess.run([sys.executable, "-m", "niofetcher", "testsite", "--traps", "--hosts", "2"],
                             capture_output=True, text=True, timeout=30, check=False)
    assert refused.returncode != 0 and "--traps serves one plain-HTTP host" in refused.stderr
    assert "Traceback" not in refused.stderr

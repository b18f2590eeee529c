"""``--allowed-domain`` and ``CrawlConfig(allowed_domains=...)``: the forms a user types (issue 24).

- ``example.com``, ``.example.com`` and ``*.example.com`` name that domain with its subdomains; a
  URL or a ``host:port`` (``127.0.0.1:8080``, ``[::1]:8080``) names its host.  CrawlConfig keeps
  each as the bare host it names (``urls.domain_host``), read again unchanged.
- Anything else is a one-line ValueError; on the command line one line on stderr, exit 2, no
  ``--db`` made and nothing fetched -- never a crawl of the seed alone.
- End to end: a crawl given its seed's ``host:port``, its URL or ``*.`` its name follows the
  seed's links (every page of the site fetched), where before the entry matched no host.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_cli_crawl import assert_one_clean_line, niofetcher, page_requests

from niofetcher.crawl import CrawlConfig
from niofetcher.crawl.policy import LinkScope
from niofetcher.testing import TestSite
from niofetcher.urls import domain_host

ACCEPTED = {
    "example.com": "example.com",
    "Example.COM.": "example.com",
    ".example.com": "example.com",
    "*.example.com": "example.com",
    " example.com ": "example.com",
    "example.com:443": "example.com",
    "*.example.com:8443": "example.com",
    "bücher.example": "xn--bcher-kva.example",
    "127.0.0.1": "127.0.0.1",
    "127.0.0.1:8080": "127.0.0.1",
    "[::1]": "::1",
    "[::1]:8080": "::1",
    "::1": "::1",
    "[2001:DB8::1]:80": "2001:db8::1",
    # IPv6 in its one written form (RFC 5952), the form a seed's host has: a long one narrows nothing.
    "[0:0:0:0:0:0:0:1]:18083": "::1",
    "http://[0:0:0:0:0:0:0:1]:8/": "::1",
    "2001:0db8:0000::0001": "2001:db8::1",
    "http://127.0.0.1:8080/x": "127.0.0.1",
    "HTTPS://user:pw@Example.com/a?b#c": "example.com",
    "http://[::1]:8080/": "::1",
    "localhost:8080": "localhost",
}

REFUSED = [
    "", " ", "exa mple.com", "example.com/x", "127.0.0.1:8080/x", "*", "*.", "**.example.com", "a.*.com",
    "example.*", "*.127.0.0.1", "*.[::1]", "a..com", "example.com:", "example.com:http", "127.0.0.1:99999",
    "http:example.com", "1:2:3:4:5:6:7:8:8080", "::1:99999", "[::1", "[::1]8080", "[example.com]:80",
    "fe80::1%eth0", "ftp://example.com/", "http://", "http://*.example.com/", "a|b.com", "exa\tmple.com",
]


@pytest.mark.parametrize("entry, host", ACCEPTED.items())
def test_an_entry_names_its_host_and_reads_the_same_again(entry: str, host: str) -> None:
    assert domain_host(entry) == host
    assert domain_host(host) == host  # a normalised config read again (dataclasses.replace) is the same


@pytest.mark.parametrize("entry", REFUSED)
def test_anything_else_is_a_one_line_value_error(entry: str) -> None:
    with pytest.raises(ValueError, match="allowed domain") as refused:
        CrawlConfig(seeds=["http://a.test/"], allowed_domains=[entry])
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("domains", ["example.com", [], (), [3], [None]])
def test_allowed_domains_must_be_a_sequence_of_strs_and_not_empty(domains: object) -> None:
    """A str would be read letter by letter, and no entry at all would follow no link."""
    with pytest.raises(ValueError) as refused:
        CrawlConfig(seeds=["http://a.test/"], allowed_domains=domains)  # type: ignore[arg-type]
    assert "\n" not in str(refused.value)


def test_crawl_config_keeps_the_hosts_and_the_scope_matches_them_on_any_port() -> None:
    config = CrawlConfig(seeds=["http://a.test/"], allowed_domains=["127.0.0.1:8080", "*.Example.com", "[::1]:81"])
    assert config.allowed_domains == ("127.0.0.1", "example.com", "::1")
    assert dataclasses.replace(config, max_pages=3).allowed_domains == config.allowed_domains
    scope = LinkScope(tuple(config.allowed_domains))
    assert all(scope.in_scope(url) for url in (
        "http://127.0.0.1:9/x", "http://127.0.0.1/", "https://www.example.com:8443/", "http://[::1]:8080/"))
    assert not any(scope.in_scope(url) for url in ("http://127.0.0.2:8080/", "http://notexample.com/"))


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["host:port", "url", "wildcard"])
def test_a_crawl_given_its_seed_in_any_form_follows_the_links(tmp_path: Path, form: str) -> None:
    with TestSite(hosts=1, pages=5, max_seconds=50) as site:
        port = site.ports[0]
        seed, options = site.base_urls[0], ["--allowed-domain"]
        if form == "host:port":
            options.append(f"127.0.0.1:{port}")
        elif form == "url":
            options.append(f"http://127.0.0.1:{port}/page/1")
        else:  # a name (*. takes none of an address): the site under a name, through --resolve
            seed = f"http://site.test:{port}/"
            options += ["*.site.test", "--resolve", f"site.test:{port}:127.0.0.1"]
        done = niofetcher("crawl", seed, "--db", str(tmp_path / "c.sqlite"), "--progress", "none", *options)
        assert done.returncode == 0, done.stderr
        assert set(page_requests(site).values()) == {1}
        assert len(page_requests(site)) == len(site.page_urls())  # the seed and every page it links to


@pytest.mark.timeout(30)
@pytest.mark.parametrize("entry", ["127.0.0.1:99999", "*", "example.com/x", "a.*.com", "", "1:2:3:4:5:6:7:8:8080"])
def test_a_bad_allowed_domain_is_one_line_exit_2_and_nothing_made(tmp_path: Path, entry: str) -> None:
    with TestSite(hosts=1, pages=5, max_seconds=20) as site:
        db = tmp_path / "c.sqlite"
        done = niofetcher("crawl", site.base_urls[0], "--db", str(db), "--progress", "none", "--allowed-domain", entry)
        assert site.counters().requests == 0
    assert done.returncode == 2, done.stdout + done.stderr
    assert_one_clean_line(done.stderr)
    assert done.stderr.startswith("niofetcher: error: allowed domain ")
    assert list(tmp_path.iterdir()) == []

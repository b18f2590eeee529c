"""The crawler hands the fetcher its claims in batches: one ``register_many()`` per claim, and
the pump takes results with ``get_batch()``.  Only robots.txt fetches go one by one.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from conftest import LeakBaseline

from niofetcher import FetchResult, NIOFetcher, URLBean
from niofetcher.crawl import CrawlConfig, Crawler
from niofetcher.testing import TestSite

pytestmark = pytest.mark.timeout(120)


def test_a_crawl_registers_its_pages_in_batches_and_takes_results_in_batches(
    no_leaks: LeakBaseline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_by_one: list[str] = []
    batches: list[int] = []
    taken: list[int] = []
    register, register_many, get_batch = NIOFetcher.register, NIOFetcher.register_many, NIOFetcher.get_batch

    def counting_register(self: NIOFetcher, url_or_bean: str | URLBean, priority: int = 0) -> bool:
        one_by_one.append(url_or_bean.url if isinstance(url_or_bean, URLBean) else url_or_bean)
        return register(self, url_or_bean, priority)

    def counting_register_many(self: NIOFetcher, urls_or_beans: Iterable[str | URLBean]) -> int:
        beans = list(urls_or_beans)
        batches.append(len(beans))
        return register_many(self, beans)

    def counting_get_batch(self: NIOFetcher, max_items: int, timeout: float | None = None) -> list[FetchResult]:
        results = get_batch(self, max_items, timeout)
        taken.append(len(results))
        return results

    monkeypatch.setattr(NIOFetcher, "register", counting_register)
    monkeypatch.setattr(NIOFetcher, "register_many", counting_register_many)
    monkeypatch.setattr(NIOFetcher, "get_batch", counting_get_batch)
    with TestSite(hosts=2, pages=60, page_size=512) as site:
        config = CrawlConfig(seeds=site.base_urls, db_path=str(tmp_path / "crawl.sqlite"), parse_workers=1)
        summary = Crawler(config).run()
        pages = len(site.page_urls())
    assert summary.counts["done"] == pages
    assert {url.rsplit("/", 1)[1] for url in one_by_one} == {"robots.txt"}, "only robots.txt goes one by one"
    assert sum(batches) == pages, "every page was registered in a batch, once"
    assert max(batches) > 1, "a claim of several URLs is one call"
    assert sum(taken) == pages + len(one_by_one), "every result came through get_batch()"
    assert max(taken) > 1

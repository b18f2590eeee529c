"""The frontier a crawl opens: which backend, with which options.

The crawler knows a frontier only through ``FrontierBackend``; this is where a
crawl's config becomes the options of :func:`open_frontier` (the trap rules, a
shared frontier's lease and host window, one worker per address).
"""

from __future__ import annotations

from .config import CrawlConfig
from .frontier import FrontierBackend, open_frontier
from .frontier.traps import TrapRules
from .inflight import windows

__all__ = ["groups_by_address", "open_crawl_frontier"]


def open_crawl_frontier(config: CrawlConfig) -> FrontierBackend:
    """The frontier of a crawl: shared by workers at ``config.frontier``, else the file at
    ``config.db_path`` (:func:`open_frontier` says which backend).  A worker of a shared crawl holds
    no more hosts than its window keeps busy, so that workers share the hosts.  The trap rules are
    the frontier's to apply (crawl/frontier/traps.py): every URL is admitted there, once."""
    traps = TrapRules(max_pages_per_host=config.max_pages_per_host, max_url_length=config.max_url_length,
                      max_path_repeats=config.max_path_repeats, strip_query_params=tuple(config.strip_query_params))
    options: dict[str, object] = {"traps": traps} if traps else {}
    if config.frontier is not None:
        fetcher = config.fetcher
        window, per_host = windows(fetcher.max_connections, fetcher.max_connections_per_host, fetcher.host_delay)
        max_hosts = max(1, window // per_host)
        if groups_by_address(config):
            options["group_by_address"] = True
        return open_frontier(config.frontier, crawl=str(config.crawl_name), lease_seconds=config.lease_seconds,
                             max_hosts=max_hosts, **options)
    return open_frontier(config.db_path, **options)


def groups_by_address(config: CrawlConfig) -> bool:
    """Whether the hosts of one address are to be one worker's at a time: a shared frontier, and
    per-IP limits, which hold per worker otherwise.  Not through a proxy, whose address every
    answer would come from."""
    fetcher = config.fetcher
    return config.frontier is not None and fetcher.proxy is None and (
        fetcher.max_connections_per_ip is not None or fetcher.ip_delay > 0)


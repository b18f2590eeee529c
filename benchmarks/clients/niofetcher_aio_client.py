"""niofetcher from asyncio: an AsyncFetcher with the scenario's limits, and worker tasks that
``await fetcher.fetch(url)`` URL after URL from one queue -- the way an asyncio crawler calls it.

Twice as many workers as connections: a connection whose response ends has the next URL of a
worker already queued in the fetcher, not one that waits for the result to cross into the event
loop and a new fetch() to come back.  --loop uvloop runs the same code on uvloop.
"""

from __future__ import annotations

import collections

import _common


async def fetch_all(jobs: list[tuple[str, int]], total: int, per_host: int, tally: _common.Tally,
                    meter: _common.Meter, name: str) -> int:
    from niofetcher import FetcherConfig
    from niofetcher.aio import AsyncFetcher

    meter.start()
    _common.arm_watchdog(name, len(jobs), tally, meter)
    queue = collections.deque(jobs)
    config = FetcherConfig(max_connections=total, max_connections_per_host=per_host)
    async with AsyncFetcher(config) as fetcher:

        async def worker() -> None:
            while queue and not meter.expired():
                url, size = queue.popleft()
                result = await fetcher.fetch(url)
                if result.error is not None:
                    tally.fail(url, f"{result.error}: {result.error_detail}")
                else:
                    tally.check(url, result.status, len(result.body), size)

        await _common.run_workers(worker, min(2 * total, len(jobs)), meter)
        if meter.expired():
            await fetcher.shutdown(wait=False)
        return fetcher.stats().connections_opened


def main() -> None:
    args = _common.parse_loop_args(__doc__)
    _common.raise_nofile()
    jobs = _common.load_job(args.urls)
    from niofetcher import __version__

    tally = _common.Tally()
    meter = _common.Meter(args.deadline)
    name = "niofetcher-asyncio+uvloop" if args.loop == "uvloop" else "niofetcher-asyncio"
    opened = _common.run_on_loop(args.loop, fetch_all(jobs, args.total, args.per_host, tally, meter, name))
    _common.report(name, len(jobs), tally, meter, version=__version__, connections_opened=opened)


if __name__ == "__main__":
    main()

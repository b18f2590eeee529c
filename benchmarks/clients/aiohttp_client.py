"""aiohttp, as its docs recommend: one ClientSession for everything, its TCPConnector
limited to the scenario's total and per-host connections, and a fixed set of worker
tasks (as many as the total connections) pulling URLs from one queue.

--loop uvloop runs the same code on uvloop (``uvloop.run``) instead of the default asyncio loop.
"""

from __future__ import annotations

import collections
import importlib.metadata

import _common


async def fetch_all(jobs: list[tuple[str, int]], total: int, per_host: int, tally: _common.Tally,
                    meter: _common.Meter, name: str) -> None:
    import aiohttp

    meter.start()
    _common.arm_watchdog(name, len(jobs), tally, meter)
    queue = collections.deque(jobs)
    connector = aiohttp.TCPConnector(limit=total, limit_per_host=per_host)
    timeout = aiohttp.ClientTimeout(total=_common.TIMEOUT)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            while queue and not meter.expired():
                url, size = queue.popleft()
                try:
                    async with session.get(url) as response:
                        body = await response.read()
                        tally.check(url, response.status, len(body), size)
                except Exception as exc:  # noqa: BLE001 - an error result, and the next URL
                    tally.fail(url, repr(exc))

        await _common.run_workers(worker, min(total, len(jobs)), meter)


def main() -> None:
    args = _common.parse_loop_args(__doc__)
    _common.raise_nofile()
    jobs = _common.load_job(args.urls)
    import aiohttp

    tally = _common.Tally()
    meter = _common.Meter(args.deadline)
    name = "aiohttp+uvloop" if args.loop == "uvloop" else "aiohttp"
    _common.run_on_loop(args.loop, fetch_all(jobs, args.total, args.per_host, tally, meter, name))
    versions = {"version": aiohttp.__version__}
    if args.loop == "uvloop":
        versions["uvloop"] = importlib.metadata.version("uvloop")
    _common.report(name, len(jobs), tally, meter, **versions)


if __name__ == "__main__":
    main()

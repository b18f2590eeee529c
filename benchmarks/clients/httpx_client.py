"""httpx, as its docs recommend: one AsyncClient with ``Limits(max_connections=total,
max_keepalive_connections=total)`` and a fixed set of worker tasks (as many as the total
connections) pulling URLs from one queue.

httpx has no per-host connection limit: in a many-host scenario only the total holds.
"""

from __future__ import annotations

import asyncio
import collections

import _common


async def fetch_all(jobs: list[tuple[str, int]], total: int, tally: _common.Tally, meter: _common.Meter) -> None:
    import httpx

    meter.start()
    _common.arm_watchdog("httpx", len(jobs), tally, meter)
    queue = collections.deque(jobs)
    limits = httpx.Limits(max_connections=total, max_keepalive_connections=total)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(_common.TIMEOUT)) as client:

        async def worker() -> None:
            while queue and not meter.expired():
                url, size = queue.popleft()
                try:
                    response = await client.get(url)
                    tally.check(url, response.status_code, len(response.content), size)
                except Exception as exc:  # noqa: BLE001 - an error result, and the next URL
                    tally.fail(url, repr(exc))

        await _common.run_workers(worker, min(total, len(jobs)), meter)


def main() -> None:
    args = _common.parse_args(__doc__)
    _common.raise_nofile()
    jobs = _common.load_job(args.urls)
    import httpx

    tally = _common.Tally()
    meter = _common.Meter(args.deadline)
    asyncio.run(fetch_all(jobs, args.total, tally, meter))
    _common.report("httpx", len(jobs), tally, meter, version=httpx.__version__)


if __name__ == "__main__":
    main()

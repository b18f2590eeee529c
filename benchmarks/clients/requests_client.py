"""requests with a thread pool, as its docs recommend for concurrency: one Session per
thread (a Session is not meant to be shared between threads), its HTTPAdapter's
``pool_connections`` / ``pool_maxsize`` set, a fixed ThreadPoolExecutor of workers
pulling URLs from a queue.

requests has no connection limit across Sessions, so the limits are kept by how
the threads are laid out: each host gets its own queue and ``per_host`` threads
(each thread's Session holds one connection to that host), so the server never
sees more than ``per_host`` connections per host. Threads are capped at
``MAX_THREADS`` (a Python process does not run 2,000 useful threads): in the
2,000-connection scenario requests runs with fewer connections than the others.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import _common

#: The most threads (= connections) a requests run uses.
MAX_THREADS = 200


def main() -> None:
    args = _common.parse_args(__doc__)
    _common.raise_nofile()
    jobs = _common.load_job(args.urls)
    import requests
    from requests.adapters import HTTPAdapter

    queues: dict[str, collections.deque[tuple[str, int]]] = {}
    for url, size in jobs:
        queues.setdefault(urlsplit(url).netloc, collections.deque()).append((url, size))
    hosts = list(queues)
    per_host = max(1, min(args.per_host, args.total // len(hosts), MAX_THREADS // len(hosts)))
    lock = threading.Lock()  # the tally is shared by the threads
    tally = _common.Tally()

    def worker(host: str) -> None:
        queue = queues[host]
        with requests.Session() as session:
            adapter = HTTPAdapter(pool_connections=1, pool_maxsize=1)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            while not meter.expired():
                try:
                    url, size = queue.popleft()
                except IndexError:
                    return
                try:
                    response = session.get(url, timeout=_common.TIMEOUT)
                    status, length = response.status_code, len(response.content)
                except Exception as exc:  # noqa: BLE001 - an error result, and the next URL
                    with lock:
                        tally.fail(url, repr(exc))
                    continue
                with lock:
                    tally.check(url, status, length, size)

    meter = _common.Meter(args.deadline)
    meter.start()
    _common.arm_watchdog("requests", len(jobs), tally, meter, threads=per_host * len(hosts))
    threads = per_host * len(hosts)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [pool.submit(worker, host) for host in hosts for _ in range(per_host)]
        for future in futures:
            future.result()
        meter.stop()
    _common.report("requests", len(jobs), tally, meter, threads=threads,
                   version=requests.__version__)  # type: ignore[attr-defined,unused-ignore]  # typeshed omits it


if __name__ == "__main__":
    main()

"""niofetcher: one NIOFetcher with the scenario's limits; register every URL, drain ``results()``.

--profile FILE runs the loop thread under cProfile and writes its stats to FILE
(the main thread only waits on results; the loop thread is where the time goes).
"""

from __future__ import annotations

import _common


def main() -> None:
    args = _common.parse_args(__doc__, extra=lambda p: p.add_argument("--profile", metavar="FILE"))
    _common.raise_nofile()
    jobs = _common.load_job(args.urls)
    expected = dict(jobs)

    from niofetcher import FetcherConfig, NIOFetcher, __version__

    tally = _common.Tally()
    meter = _common.Meter(args.deadline)
    meter.start()
    _common.arm_watchdog("niofetcher", len(jobs), tally, meter)
    config = FetcherConfig(max_connections=args.total, max_connections_per_host=args.per_host)
    fetcher = NIOFetcher(config)
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        engine = fetcher._engine  # the loop thread's target, looked up by start()
        engine_run = engine.run
        engine.run = lambda: profiler.runcall(engine_run)  # type: ignore[method-assign]
    with fetcher:
        register = fetcher.register
        for url, _size in jobs:
            if not register(url):
                tally.fail(url, "register() returned False")
        check = tally.check
        for result in fetcher.results():
            url = result.url
            if result.error is not None:
                tally.fail(url, f"{result.error}: {result.error_detail}")
            else:
                check(url, result.status, len(result.body), expected[url])
            if meter.expired():
                break
        meter.stop()
        stats = fetcher.stats()
        if meter.expired():
            fetcher.shutdown(wait=False)
    if profiler is not None:
        profiler.dump_stats(args.profile)
    _common.report("niofetcher", len(jobs), tally, meter, version=__version__,
                   connections_opened=stats.connections_opened)


if __name__ == "__main__":
    main()

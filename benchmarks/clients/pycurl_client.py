"""pycurl's CurlMulti, the C reference: libcurl does the HTTP work, Python only drives it.

As the libcurl docs recommend for many connections, this uses the event-driven
``curl_multi_socket_action`` API (``M_SOCKETFUNCTION`` + ``M_TIMERFUNCTION``) over
an epoll selector — ``CurlMulti.select()`` is built on ``select(2)``, which cannot
watch descriptors past 1024 (scenario C has 2,000 sockets). The multi handle's
``M_MAXCONNECTS`` (connection cache), ``M_MAX_HOST_CONNECTIONS`` and
``M_MAX_TOTAL_CONNECTIONS`` are the scenario's limits, and a fixed set of easy
handles (as many as the total connections) is reused, one URL after another.
Bodies are written into a BytesIO per transfer, as in pycurl's own examples.
"""

from __future__ import annotations

import collections
import io
import selectors
from time import monotonic

import _common


def main() -> None:
    args = _common.parse_args(__doc__)
    _common.raise_nofile()
    jobs = _common.load_job(args.urls)
    import pycurl

    tally = _common.Tally()
    meter = _common.Meter(args.deadline)
    meter.start()
    _common.arm_watchdog("pycurl", len(jobs), tally, meter)
    selector = selectors.DefaultSelector()
    deadline: list[float | None] = [None]  # when libcurl wants socket_action(SOCKET_TIMEOUT)
    poll_events = {
        pycurl.POLL_IN: selectors.EVENT_READ,
        pycurl.POLL_OUT: selectors.EVENT_WRITE,
        pycurl.POLL_INOUT: selectors.EVENT_READ | selectors.EVENT_WRITE,
    }

    def on_socket(what: int, fd: int, multi: object, socketp: object) -> None:
        if what == pycurl.POLL_REMOVE:
            try:
                selector.unregister(fd)
            except (KeyError, ValueError):
                pass
            return
        events = poll_events[what]
        try:
            selector.modify(fd, events)
        except KeyError:
            selector.register(fd, events)

    def on_timer(ms: int) -> None:
        deadline[0] = None if ms < 0 else monotonic() + ms / 1000.0

    multi = pycurl.CurlMulti()
    multi.setopt(pycurl.M_SOCKETFUNCTION, on_socket)
    multi.setopt(pycurl.M_TIMERFUNCTION, on_timer)
    multi.setopt(pycurl.M_MAXCONNECTS, args.total)
    multi.setopt(pycurl.M_MAX_HOST_CONNECTIONS, args.per_host)
    multi.setopt(pycurl.M_MAX_TOTAL_CONNECTIONS, args.total)

    queue = collections.deque(jobs)
    free = []
    for _ in range(min(args.total, len(jobs))):
        easy = pycurl.Curl()
        easy.setopt(pycurl.NOSIGNAL, 1)
        easy.setopt(pycurl.TIMEOUT, int(_common.TIMEOUT))
        easy.setopt(pycurl.CONNECTTIMEOUT, 10)
        free.append(easy)
    state = {}  # easy handle -> (url, expected size, body buffer)

    def start(easy: pycurl.Curl) -> None:
        url, size = queue.popleft()
        body = io.BytesIO()
        easy.setopt(pycurl.URL, url)
        easy.setopt(pycurl.WRITEDATA, body)
        state[easy] = (url, size, body)
        multi.add_handle(easy)

    def collect() -> int:
        done = 0
        while True:
            queued, finished, failed = multi.info_read()
            for easy in finished:
                url, size, body = state.pop(easy)
                tally.check(url, easy.getinfo(pycurl.RESPONSE_CODE), len(body.getvalue()), size)
                multi.remove_handle(easy)
                free.append(easy)
            for easy, errno, message in failed:
                url, size, body = state.pop(easy)
                tally.fail(url, f"curl error {errno}: {message}")
                multi.remove_handle(easy)
                free.append(easy)
            done += len(finished) + len(failed)
            if not queued:
                return done

    remaining = len(jobs)
    READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
    CSELECT_IN, CSELECT_OUT = pycurl.CSELECT_IN, pycurl.CSELECT_OUT
    socket_action = multi.socket_action
    while remaining and not meter.expired():
        while queue and free:
            start(free.pop())
        due = deadline[0]
        for key, mask in selector.select(None if due is None else max(0.0, due - monotonic())):
            socket_action(key.fd, (CSELECT_IN if mask & READ else 0) | (CSELECT_OUT if mask & WRITE else 0))
        due = deadline[0]
        if due is not None and monotonic() >= due:
            deadline[0] = None
            socket_action(pycurl.SOCKET_TIMEOUT, 0)
        remaining -= collect()
    meter.stop()
    for easy in free:
        easy.close()
    multi.close()
    _common.report("pycurl", len(jobs), tally, meter, version=pycurl.version)


if __name__ == "__main__":
    main()

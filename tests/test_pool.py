"""The scheduler alone: pure bookkeeping, driven without sockets."""

from __future__ import annotations

import itertools
from typing import Any

from niofetcher.models import URLBean
from niofetcher.pool import HostTable
from niofetcher.request import RequestDefaults, Task
from niofetcher.urls import parse_target

_seq = itertools.count()


class FakeConn:
    """Stands in for a Connection: the table only looks at ``slot``."""

    def __init__(self, slot):
        self.slot = slot


def task(url: str, priority: int = 0, at: float = 0.0) -> Task:
    bean = URLBean(url, priority=priority)
    return Task(bean, parse_target(url), next(_seq), at, RequestDefaults({}))


def table(total: int = 10, per_host: int = 1, delay: float = 0.0):
    timers = []
    clock = [0.0]
    t = HostTable(total, per_host, delay, 0.0, lambda when, cb, arg: timers.append((when, cb, arg)), lambda: clock[0])
    return t, timers, clock


def start_all(t: HostTable, now: float = 0.0):
    started: list[tuple[Any, Any]] = []
    while True:
        a = t.next_assignment(now)
        if a is None:
            return started
        if a.evict is not None:
            t.connection_closed(a.evict, True, now)
        conn: Any
        if a.conn is None:
            conn = FakeConn(a.slot)
            t.connection_opened(a.slot)
        else:
            conn = a.conn
        started.append((a.task, conn))
        t.refresh(a.slot, now)


def test__priority_then_fifo_across_hosts() -> None:
    t, _, _ = table(total=1, per_host=1)
    urls = [("http://a.test/1", 0), ("http://b.test/1", 5), ("http://a.test/2", 5),
            ("http://c.test/1", 0), ("http://b.test/2", 9)]
    for url, prio in urls:
        t.enqueue(task(url, prio), 0.0)
    order = []
    while True:
        started = start_all(t)
        if not started:
            break
        (tk, conn), = started
        order.append(tk.url)
        t.exchange_ended(conn.slot, True, 0.0)
        t.connection_idle(conn, 0.0)
    # With one connection in all, the idle one is evicted for other hosts: strict global order.
    assert order == ["http://b.test/2", "http://b.test/1", "http://a.test/2", "http://a.test/1", "http://c.test/1"]


def test__saturated_host_does_not_block_others() -> None:
    t, _, _ = table(total=10, per_host=1)
    for i in range(5):
        t.enqueue(task(f"http://slow.test/{i}", priority=10), 0.0)
    t.enqueue(task("http://fast.test/x", priority=0), 0.0)
    started = start_all(t)
    hosts = sorted(tk.target.origin.host for tk, _ in started)
    assert hosts == ["fast.test", "slow.test"]  # slow is at its limit of 1; fast is not blocked behind it
    assert t.pending == 4


def test__global_limit_waits_then_evicts_oldest_idle() -> None:
    t, _, _ = table(total=2, per_host=2)
    for i in range(2):
        t.enqueue(task(f"http://a.test/{i}"), 0.0)
    (_, ca), (_, _) = start_all(t)
    t.enqueue(task("http://b.test/0"), 0.0)
    assert t.next_assignment(0.0) is None  # both connections busy: wait
    t.exchange_ended(ca.slot, True, 0.0)
    t.connection_idle(ca, 0.0)
    a = t.next_assignment(0.0)
    assert a is not None and a.task.target.origin.host == "b.test" and a.evict is ca


def test__host_delay_spaces_request_starts() -> None:
    t, timers, clock = table(total=10, per_host=5, delay=2.0)
    for i in range(3):
        t.enqueue(task(f"http://a.test/{i}"), 0.0)
    assert len(start_all(t, 0.0)) == 1
    assert timers and timers[-1][0] == 2.0
    clock[0] = 2.0
    _, cb, arg = timers.pop()
    cb(arg)
    assert len(start_all(t, 2.0)) == 1


def test__repr_summarises_counts() -> None:
    t, _, _ = table()
    t.enqueue(task("http://a.test/"), 0.0)
    assert repr(t) == "<HostTable [hosts: 1, 0 recent | pending: 1 | connections: 0 open, 0 idle]>"

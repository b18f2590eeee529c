"""A fast, generated web site on loopback, shared by the tests, the demo and the benchmarks.

Theory of operation
-------------------
A ``TestSite`` listens on K loopback ports ("hosts"). Each host serves N generated
pages whose links make every page of every host reachable from host 0's ``/``:
``/`` links to the first pages, page ``i`` links to ``i+1`` (the chain that makes
everything reachable) and a few others, and, with more than one host, each page
links to the same page of the next host in the ring.

The package is the standard library only, one job per module, each module's
docstring holding its part of the theory:

============  ===================================================================
``site``      ``TestSite``: its options, lifecycle, addresses and counters
``pages``     what each host serves: generated pages, ``/robots.txt``, redirects
``messages``  HTTP/1.1 without a socket: request heads parsed, responses prebuilt
``server``    the selectors loop (why it does so little per request, exact
              delays, closing politely) and ``PortCounters``
``tls``       the same loop over TLS, and ``tls_context_from_files``
``web``       ``SyntheticWeb``: many host names on a few ports, for broad crawls
``traps``     ``TrapSite``: real pages and a crawler trap behind each door, with
              server-side counts of real and trap fetches
``changing``  ``ChangingSite``: pages that change at known rates on an
              accelerated clock, answering conditional GETs (freshness)
``postgres``  ``PostgresCluster``: a throwaway PostgreSQL server (the PostgreSQL
              frontier's tests and benchmarks)
``proxy``     ``ForwardProxy``: an HTTP forward proxy (CONNECT too), or its faults
============  ===================================================================

Everything a program imports is imported from here (``niofetcher.testing``, or
its first name ``niofetcher.testsite``, the same module object). The settings
are read as globals of the module that uses them: a test that changes one
patches that module (``niofetcher.testing.server.RECV_SIZE``).
"""

from __future__ import annotations

from .changing import ChangingSite, LoggedRequest
from .counters import PortCounters
from .postgres import PostgresCluster, PostgresUnavailable, death_signal, find_bindir, free_port
from .proxy import ForwardProxy, ProxyCounters
from .server import _SO_TIMESTAMPNS as _SO_TIMESTAMPNS
from .server import LISTEN_BACKLOG as LISTEN_BACKLOG
from .server import peer_closed
from .site import TestSite
from .tls import tls_context_from_files
from .traps import TRAPS, TrapSite
from .web import SyntheticWeb

__all__ = [
    "TRAPS", "ChangingSite", "ForwardProxy", "LoggedRequest", "PortCounters", "PostgresCluster", "PostgresUnavailable", "ProxyCounters", "SyntheticWeb",
    "TestSite", "TrapSite", "death_signal", "find_bindir", "free_port", "peer_closed", "tls_context_from_files",
]

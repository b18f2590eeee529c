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
============  ===================================================================

Everything a program imports is imported from here (``niofetcher.testing``, or
its first name ``niofetcher.testsite``, the same module object). A setting
changed here (a test's ``monkeypatch.setattr(testsite, "RECV_SIZE", 100)``)
is changed in the module that reads it, as when the site was one module.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from . import messages, pages, server, site, tls
from .server import _SO_TIMESTAMPNS as _SO_TIMESTAMPNS
from .server import LINGER_SECONDS as LINGER_SECONDS
from .server import LISTEN_BACKLOG as LISTEN_BACKLOG
from .server import MAX_HEAD_SIZE as MAX_HEAD_SIZE
from .server import OUTPUT_HIGH_WATER as OUTPUT_HIGH_WATER
from .server import RECV_SIZE as RECV_SIZE
from .server import PortCounters
from .site import TestSite
from .tls import tls_context_from_files

__all__ = ["PortCounters", "TestSite", "tls_context_from_files"]

_MODULES = (messages, pages, server, site, tls)
_UNSET = object()


class _Package(types.ModuleType):
    """This package, whose names are bound again in every module that uses them.

    The modules read their settings as their own globals (the loop's hot path
    does: a module attribute would cost a lookup more per request), so setting
    a name here must set it in each module that holds the same object under
    that name, or a patch would silently not take effect.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        current = self.__dict__.get(name, _UNSET)
        if current is not _UNSET:
            for module in _MODULES:
                if module.__dict__.get(name, _UNSET) is current:
                    setattr(module, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

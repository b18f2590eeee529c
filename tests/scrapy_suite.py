"""Scrapy's own tests of its HTTP/1.1 download handler, run against NIOFetcherDownloadHandler.

Two roles, one module; niofetcher's own test run imports it only for
``suite_id`` and ``matches``:

- a pytest plugin (``-p scrapy_suite``) for a run of Scrapy's
  ``tests/test_downloader_handler_twisted_http11.py`` in the unpacked sdist of
  the installed Scrapy release. With ``--niofetcher-handler`` it puts
  NIOFetcherDownloadHandler where the tests name Scrapy's HTTP11DownloadHandler
  (without it the run is Scrapy's own handler, the yardstick), and
  ``--not-run PATTERN`` deselects the tests a pattern matches. Either way
  Scrapy's mock servers listen on 127.0.0.1 only, and the plugin checks it;
- the entry point those mock servers start through
  (``python -m scrapy_suite MODULE ARGS...``), which binds their listening
  sockets to loopback before running MODULE as ``__main__``: Scrapy's
  ``reactor.listenTCP(0, ...)`` would listen on every interface.

test_scrapy_rulebook.py downloads the sdist, runs the suite both ways and
compares them, with the differences docs/scrapy.md lists.
"""

from __future__ import annotations

import importlib
import ipaddress
import re
import runpy
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest

LOOPBACK = "127.0.0.1"
SCRAPY_TEST_MODULE = "tests.test_downloader_handler_twisted_http11"
NIOFETCHER_HANDLER = "niofetcher.scrapy.NIOFetcherDownloadHandler"
_SWAP_OPTION = "--niofetcher-handler"
_NOT_RUN_OPTION = "--not-run"


def suite_id(class_name: str | None, name: str) -> str:
    """A test's name as docs/scrapy.md writes it: ``Class::test_name[params]``, or ``test_name`` alone."""
    return f"{class_name}::{name}" if class_name else name


def matches(pattern: str, test: str) -> bool:
    """Whether ``pattern`` names ``test``: the whole id, ``*`` standing for any run of characters
    (and nothing else special: the brackets of a parametrized id are themselves)."""
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), test) is not None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        _SWAP_OPTION, action="store_true", help="run Scrapy's handler tests against NIOFetcherDownloadHandler"
    )
    parser.addoption(_NOT_RUN_OPTION, action="append", default=[], help="deselect the tests this pattern names")


def pytest_configure(config: pytest.Config) -> None:
    # Scrapy's conftest marks the tests that need the Internet with pytest-rerunfailures' mark;
    # the run deselects them, and this keeps the unknown mark from failing the collection.
    config.addinivalue_line("markers", "flaky: pytest-rerunfailures' mark, used by Scrapy's conftest")
    # Scrapy's, from the sdist (its conftest has imported it by now): no types for mypy to read.
    http_base: Any = importlib.import_module("tests.mockserver.http_base")
    http_base.Popen = _through_loopback_entry(http_base.Popen)
    http_base.BaseMockServer.__enter__ = _checking_loopback(http_base.BaseMockServer.__enter__)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    patterns: list[str] = config.getoption(_NOT_RUN_OPTION)
    not_run = [item for item in items if any(matches(p, _item_id(item)) for p in patterns)]
    if not_run:
        config.hook.pytest_deselected(items=not_run)
        items[:] = [item for item in items if item not in not_run]
    if config.getoption(_SWAP_OPTION):
        _swap_handler(sys.modules[SCRAPY_TEST_MODULE])


def _item_id(item: pytest.Item) -> str:
    cls = getattr(item, "cls", None)
    return suite_id(cls.__name__ if cls is not None else None, item.name)


def _swap_handler(module: Any) -> None:
    """Put NIOFetcherDownloadHandler where Scrapy's test module names HTTP11DownloadHandler."""
    from niofetcher.scrapy import NIOFetcherDownloadHandler

    # Every test of the module reaches Scrapy's handler through this one global: the mixin's
    # download_handler_cls, the tunnelling tests' _get_dh, test_not_configured_without_reactor.
    module.HTTP11DownloadHandler = NIOFetcherDownloadHandler
    # And the tests that run a whole crawl name it in DOWNLOAD_HANDLERS.
    module.HTTP11DownloadHandlerMixin.settings_dict = property(
        lambda self: {"DOWNLOAD_HANDLERS": {"http": NIOFETCHER_HANDLER, "https": NIOFETCHER_HANDLER}}
    )


def _through_loopback_entry(popen: Callable[..., Any]) -> Callable[..., Any]:
    """Popen, starting ``python -u -m MODULE ARGS`` as ``python -u -m scrapy_suite MODULE ARGS``."""

    def start(args: Sequence[str], *rest: Any, **kwargs: Any) -> Any:
        executable, *options = args
        module_at = options.index("-m") + 1
        options[module_at:module_at] = [__name__]
        return popen([executable, *options], *rest, **kwargs)

    return start


def _checking_loopback(enter: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """BaseMockServer.__enter__, then a look at the server process's listening sockets."""

    def enter_and_check(server: Any) -> Any:
        entered = enter(server)
        assert_listens_on_loopback_only(server.proc.pid)
        return entered

    return enter_and_check


def assert_listens_on_loopback_only(pid: int) -> None:
    """Every socket process ``pid`` listens on is bound to a loopback address (and there is one)."""
    import psutil

    listening = [c.laddr for c in psutil.Process(pid).net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert listening, f"mock server {pid} listens on nothing"
    elsewhere = [addr for addr in listening if not ipaddress.ip_address(addr.ip).is_loopback]
    assert not elsewhere, f"mock server {pid} listens beyond loopback: {elsewhere}"


def serve_on_loopback(module: str, args: list[str]) -> None:
    """Run Scrapy's mock server ``module`` as ``__main__`` with ``args``, its listening sockets on loopback."""
    from twisted.internet import tcp

    bind = tcp.Port.__init__

    def bind_to_loopback(
        self: Any, port: int, factory: Any, backlog: int = 50, interface: str = "", reactor: Any = None
    ) -> None:
        bind(self, port, factory, backlog, interface or LOOPBACK, reactor)

    tcp.Port.__init__ = bind_to_loopback  # type: ignore[method-assign]
    sys.argv = [module, *args]  # the server's argparse reads them
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    serve_on_loopback(sys.argv[1], sys.argv[2:])

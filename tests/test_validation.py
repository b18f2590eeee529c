"""register() and FetcherConfig reject bad input with ValueError, before anything is queued."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from niofetcher import FetcherConfig, NIOFetcher, URLBean
from niofetcher.testing import TestSite


@pytest.mark.parametrize("url", ["ftp://x", "not a url", "http://", "/relative", "", "https:///path",
                                 "http://exa mple.com/", "http://[::1/", "mailto:a@b.c", "http://host:99999/"])
def test_register_rejects_bad_urls(url: str) -> None:
    fetcher = NIOFetcher()
    try:
        with pytest.raises(ValueError):
            fetcher.register(url)
        assert fetcher.stats().registered == 0
    finally:
        fetcher.shutdown()


def test_register_rejects_bad_method_and_type() -> None:
    fetcher = NIOFetcher()
    try:
        with pytest.raises(ValueError):
            fetcher.register(URLBean("http://127.0.0.1/", method="GE T"))
        with pytest.raises(ValueError):
            fetcher.register(123)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            fetcher.register(URLBean("http://127.0.0.1/", priority="high"))  # type: ignore[arg-type]
    finally:
        fetcher.shutdown()


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_connections", 0), ("max_connections", -1), ("max_connections", True), ("max_connections", 2.5),
        ("max_connections_per_host", 0), ("connection_service_time", 0), ("connection_service_time", -1.0),
        ("max_requests_per_connection", 0), ("idle_timeout", 0), ("connect_timeout", -1),
        ("read_timeout", float("nan")), ("request_timeout", 0), ("low_speed_limit", -5),
        ("host_delay", -0.1), ("host_delay_jitter", 1.5), ("max_body_size", 0), ("max_header_size", -1),
        ("max_redirects", -1), ("dns_cache_ttl", -1), ("resolver", "getaddrinfo"), ("user_agent", ""),
        ("headers", {"X": 1}), ("resolve", {"a.test": "not-an-ip"}), ("resolve", {"xn--\u00fc.test": "127.0.0.1"}),
        ("resolve", {"b\u00fccher.test:80": "127.0.0.1", "xn--bcher-kva.test:80": "127.0.0.2"}), ("allowed_ports", [0]),
        ("allowed_ports", []), ("deny_networks", ["galaxy"]), ("deny_networks", "private"),
        ("max_pending", 0), ("max_completed", -3),
        ("user_agent", "a\rb"), ("user_agent", "a\nX-Injected: 1"), ("user_agent", "a\0"),
        ("headers", {"X-Token": "a\r\nX-Injected: 1"}), ("headers", {"X-Token": "a\0"}), ("headers", {"X\n": "v"}),
    ],
)
def test_config_rejects_nonsense(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        FetcherConfig(**{field: value})


def test_config_accepts_none_where_documented_and_expands_networks() -> None:
    config = FetcherConfig(connection_service_time=None, request_timeout=None, max_requests_per_connection=None,
                           deny_networks=["private", "10.1.0.0/16"], allowed_ports=[80, 443])
    nets = {str(n) for n in config.denied_networks()}
    assert "192.168.0.0/16" in nets and "10.1.0.0/16" in nets
    assert config.allowed_ports == frozenset({80, 443})


def test_config_resolve_keys_become_a_labels() -> None:
    """The resolver looks up the host parse_target gives (A-labels, lower case): keys in either form reach it."""
    config = FetcherConfig(resolve={"B\u00fccher.test:80": "127.0.0.1", "xn--caf-dma.test": "::1", "A.Test:8080": "10.0.0.1",
                                    "xn--bcher-kva.test:80": "127.0.0.1"})
    assert config.resolve == {"xn--bcher-kva.test:80": "127.0.0.1", "xn--caf-dma.test": "::1", "a.test:8080": "10.0.0.1"}
    assert FetcherConfig(resolve={"caf\u00e9.test": "::1"}).resolve == {"xn--caf-dma.test": "::1"}


def test_start_twice_raises() -> None:
    fetcher = NIOFetcher()
    fetcher.start()
    try:
        with pytest.raises(RuntimeError):
            fetcher.start()
    finally:
        fetcher.shutdown()
    assert fetcher.register("http://127.0.0.1/") is False


@pytest.mark.timeout(20)
def test_a_timeout_is_checked_up_front_and_inf_waits_without_limit() -> None:
    """NaN made every wait spin at full CPU for ever and inf raised OverflowError, in
    ``shutdown(wait=True)`` after it had closed the intake and with the loop thread left running."""
    with TestSite(hosts=1, delay=0.3) as site:
        fetcher = NIOFetcher()
        fetcher.start()
        try:
            assert fetcher.register(site.base_urls[0] + "page/1")
            for bad in (math.nan, -1.0, "1", True):
                with pytest.raises(ValueError):
                    fetcher.get(timeout=bad)  # type: ignore[arg-type]
                with pytest.raises(ValueError):
                    fetcher.get_batch(5, timeout=bad)  # type: ignore[arg-type]
                with pytest.raises(ValueError):
                    fetcher.join(timeout=bad)  # type: ignore[arg-type]
                with pytest.raises(ValueError):
                    fetcher.shutdown(timeout=bad)  # type: ignore[arg-type]
            assert fetcher.register(site.base_urls[0] + "page/2"), "a refused shutdown() closed nothing"
            first = fetcher.get(timeout=math.inf)
            assert first is not None and first.ok
            assert fetcher.join(timeout=1e300)
            assert fetcher.register(site.base_urls[0] + "page/3")
            fetcher.shutdown(wait=True, timeout=math.inf)
            assert not [t for t in threading.enumerate() if t.name == "niofetcher-loop"]
        finally:
            fetcher.shutdown(wait=False)
        assert [r.ok for r in fetcher.get_batch(5, timeout=0)] == [True, True]

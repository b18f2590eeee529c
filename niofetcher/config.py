"""FetcherConfig: the one frozen value object a user builds to tune the fetcher."""

from __future__ import annotations

import ipaddress
import math
import os
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._version import __version__
from .throttle import Throttle
from .urls import NoProxy, Proxy, normal_host, parse_proxy

Sockaddr = tuple[Any, ...]  # (host, port) or (host, port, flowinfo, scope_id), as socket.connect() takes it
Address = tuple[int, Sockaddr]  # (family, sockaddr)
# A resolver that knows how long its answer holds returns a ResolvedAddresses (resolver.py): a list with a ttl.
Resolver = Callable[[str, int], Sequence[Address]]

MiB = 1024 * 1024

# Named groups accepted by deny_networks, besides CIDR strings.
NETWORK_GROUPS = {
    "loopback": ("127.0.0.0/8", "::1/128"),
    "private": ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"),
    "link-local": ("169.254.0.0/16", "fe80::/10"),
}

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: The names tls_min_version and tls_max_version take (Scrapy's and OpenSSL's words), oldest first.
TLS_VERSIONS = {
    "TLSv1.0": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


@dataclass(frozen=True)
class FetcherConfig:
    """How the fetcher behaves; times are in seconds.  Invalid values raise ValueError."""

    max_connections: int = 256
    max_connections_per_host: int = 2
    connection_service_time: float | None = 60.0
    max_requests_per_connection: int | None = None
    idle_timeout: float = 15.0
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    request_timeout: float | None = 120.0
    low_speed_limit: int = 0
    low_speed_time: float = 30.0
    host_delay: float = 0.0
    host_delay_jitter: float = 0.0
    max_body_size: int = 10 * MiB
    max_header_size: int = 64 * 1024
    follow_redirects: bool = True
    max_redirects: int = 10
    decode_content: bool = True
    record_exchanges: bool = False
    user_agent: str = f"niofetcher/{__version__}"
    headers: Mapping[str, str] = field(default_factory=dict)
    resolve: Mapping[str, str] = field(default_factory=dict)
    dns_cache_ttl: float = 300.0
    resolver: Resolver | None = None
    verify_tls: bool = True
    ca_file: str | None = None
    tls_min_version: str | None = None
    tls_max_version: str | None = None
    tls_ciphers: str | None = None
    allowed_ports: Iterable[int] | None = None
    deny_networks: Sequence[str] = ()
    max_pending: int | None = None
    max_completed: int | None = None
    proxy: str | None = field(default=None, repr=False)  # its password must stay out of logs
    no_proxy: Sequence[str] = ()
    max_connections_per_proxy: int | None = None
    max_connections_per_ip: int | None = None
    ip_delay: float = 0.0
    throttle: Throttle | None = None
    cookies: bool = False  # one RFC 6265 jar for the fetcher (niofetcher/cookies.py), NIOFetcher.cookie_jar

    def __post_init__(self) -> None:
        _positive_int(self, "max_connections")
        _positive_int(self, "max_connections_per_host")
        _positive_int(self, "max_requests_per_connection", optional=True)
        _positive_int(self, "max_redirects", allow_zero=True)
        _positive_int(self, "max_body_size")
        _positive_int(self, "max_header_size")
        _positive_int(self, "low_speed_limit", allow_zero=True)
        _positive_int(self, "max_pending", optional=True)
        _positive_int(self, "max_completed", optional=True)
        for name in ("connect_timeout", "read_timeout", "idle_timeout", "low_speed_time"):
            _positive_time(self, name)
        for name in ("connection_service_time", "request_timeout"):
            _positive_time(self, name, optional=True)
        _positive_time(self, "host_delay", allow_zero=True)
        _positive_int(self, "max_connections_per_ip", optional=True)
        _positive_time(self, "ip_delay", allow_zero=True)
        _positive_time(self, "dns_cache_ttl", allow_zero=True)
        if not 0.0 <= self.host_delay_jitter <= 1.0:
            raise ValueError(f"host_delay_jitter must be within [0, 1], not {self.host_delay_jitter!r}")
        if not isinstance(self.cookies, bool):
            raise ValueError(f"cookies must be True or False, not {self.cookies!r}")
        if self.throttle is not None and not isinstance(self.throttle, Throttle):
            raise ValueError(f"throttle must be a Throttle or None, not {self.throttle!r}")
        if self.resolver is not None and not callable(self.resolver):
            raise ValueError(f"resolver must be callable, not {self.resolver!r}")
        if not isinstance(self.user_agent, str) or not self.user_agent:
            raise ValueError("user_agent must be a non-empty str")
        if _breaks_header_line(self.user_agent):
            raise ValueError(f"user_agent must not contain CR, LF or NUL: {self.user_agent!r}")
        for mapping_name in ("headers", "resolve"):
            mapping = getattr(self, mapping_name)
            if not isinstance(mapping, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
            ):
                raise ValueError(f"{mapping_name} must map str to str, not {mapping!r}")
            object.__setattr__(self, mapping_name, dict(mapping))
        for name, value in self.headers.items():
            # Sent on every request: h11 would refuse each one, and every URL would fail as protocol_error.
            if _breaks_header_line(name) or _breaks_header_line(value):
                raise ValueError(f"headers must not contain CR, LF or NUL: {name!r}")
        resolve: dict[str, str] = {}
        for key, address in self.resolve.items():
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(f"resolve maps to IP addresses only, not {address!r}") from None
            name = _resolve_key(key)
            if resolve.setdefault(name, address) != address:
                raise ValueError(f"resolve maps {name!r} twice, to {resolve[name]!r} and {address!r}")
        object.__setattr__(self, "resolve", resolve)
        if self.ca_file is not None and not os.path.isfile(self.ca_file):
            raise ValueError(f"ca_file must name a readable PEM file, not {self.ca_file!r}")
        self._check_tls()
        if self.allowed_ports is not None:
            ports = frozenset(self.allowed_ports)
            if not ports or not all(isinstance(p, int) and 0 < p < 65536 for p in ports):
                raise ValueError(f"allowed_ports must be TCP port numbers, not {self.allowed_ports!r}")
            object.__setattr__(self, "allowed_ports", ports)
        if isinstance(self.deny_networks, str):
            raise ValueError("deny_networks is a sequence of names or CIDR strings, not one str")
        object.__setattr__(self, "deny_networks", tuple(self.deny_networks))
        self.denied_networks()  # validates
        _positive_int(self, "max_connections_per_proxy", optional=True)
        if self.proxy is not None:
            try:
                parse_proxy(self.proxy)
            except ValueError as exc:
                raise ValueError(f"proxy: {exc}") from None
        if isinstance(self.no_proxy, str):
            raise ValueError("no_proxy is a sequence of host names or addresses, not one str")
        object.__setattr__(self, "no_proxy", tuple(self.no_proxy))
        try:
            NoProxy(self.no_proxy)
        except ValueError as exc:
            raise ValueError(f"no_proxy: {exc}") from None

    def _check_tls(self) -> None:
        for name in ("tls_min_version", "tls_max_version"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or value not in TLS_VERSIONS):
                raise ValueError(f"{name} must be one of {', '.join(TLS_VERSIONS)} or None, not {value!r}")
        lowest, highest = self.tls_min_version, self.tls_max_version
        if lowest is not None and highest is not None and TLS_VERSIONS[lowest] > TLS_VERSIONS[highest]:
            raise ValueError(f"tls_min_version {lowest} is above tls_max_version {highest}")
        ciphers = self.tls_ciphers
        if ciphers is not None:
            # OpenSSL is the one judge of a cipher string: a context of our own asks it now, so that
            # a typo fails here and not in every https fetch.
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).set_ciphers(ciphers)
            except (ssl.SSLError, TypeError):
                raise ValueError(
                    f"tls_ciphers must be an OpenSSL cipher list that names a cipher, not {ciphers!r}"
                ) from None

    def denied_networks(self) -> tuple[IPNetwork, ...]:
        """deny_networks expanded into network objects."""
        networks: list[IPNetwork] = []
        for entry in self.deny_networks:
            for cidr in NETWORK_GROUPS.get(entry, (entry,)):
                try:
                    networks.append(ipaddress.ip_network(cidr, strict=False))
                except ValueError:
                    raise ValueError(
                        f"deny_networks entries are {sorted(NETWORK_GROUPS)} or CIDR strings, not {entry!r}"
                    ) from None
        return tuple(networks)


    def proxy_route(self) -> tuple[Proxy | None, NoProxy]:
        """``proxy`` parsed, and the ``no_proxy`` hosts that go direct (both validated at construction)."""
        return (parse_proxy(self.proxy) if self.proxy is not None else None), NoProxy(self.no_proxy)


def _resolve_key(key: str) -> str:
    """A ``resolve`` key ("host:port" or "host") as the resolver looks it up: the host as parse_target gives it.

    So "bücher.test:80" and "xn--bcher-kva.test:80" are one key, and so are
    "A.test" and "a.test".
    """
    host, colon, port = key.rpartition(":")
    if not (colon and port.isdigit()):
        host, colon, port = key, "", ""
    try:
        return f"{normal_host(host)}{colon}{port}"
    except ValueError as exc:
        raise ValueError(f"resolve key {key!r}: {exc}") from None


def _positive_int(config: FetcherConfig, name: str, *, optional: bool = False, allow_zero: bool = False) -> None:
    value = getattr(config, name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0 and not allow_zero):
        kind = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"{name} must be {kind} int{' or None' if optional else ''}, not {value!r}")


def _positive_time(config: FetcherConfig, name: str, *, optional: bool = False, allow_zero: bool = False) -> None:
    value = getattr(config, name)
    if value is None and optional:
        return
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and (value > 0 or (allow_zero and value == 0))
    )
    if not ok:
        kind = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"{name} must be {kind} number of seconds{' or None' if optional else ''}, not {value!r}")


def _breaks_header_line(text: str) -> bool:
    """CR, LF or NUL: characters no HTTP/1.1 header line may carry."""
    return "\r" in text or "\n" in text or "\0" in text

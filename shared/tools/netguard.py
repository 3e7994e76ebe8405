"""The SSRF guard of ``http_fetch``: which addresses a fetch may connect to.

The check runs where the connection is made (:class:`GuardedBackend`, an httpcore network
backend): the host is resolved, every address it resolves to is checked, and the socket is
opened to the checked address itself, so a DNS answer cannot change between check and
connect, and every redirect hop is checked the same way because it opens its own
connection. Refused: anything that is not globally routable (loopback, RFC 1918 private,
link-local with the cloud metadata address 169.254.169.254, CGNAT 100.64/10, unspecified
0.0.0.0 and ::, documentation and reserved ranges, IPv6 unique-local) and multicast.
IPv4-mapped IPv6 (``::ffff:127.0.0.1``) is judged by its IPv4 address; decimal (``2130706433``),
octal (``0177.0.0.1``), hex and short (``127.1``) spellings resolve to the address they mean
and are judged by it.

``REACTQ_HTTP_FETCH_ALLOW`` lets a deployment reach internal hosts: comma-separated host
names (any port), ``host:port`` pairs, and CIDRs (``10.1.0.0/16``) checked against the
resolved address.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpcore2
import httpx2

from reactq.shared.errors import ToolError

__all__ = ["Allowlist", "FetchRefused", "GuardedBackend", "address_refusal", "checked_address_sync",
           "guarded_transport", "pick_address"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_METADATA = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"),
             ipaddress.ip_address("100.100.100.200")}
_CGNAT = ipaddress.ip_network("100.64.0.0/10")


class FetchRefused(ToolError):
    """The SSRF guard refused a URL; no connection was made."""


def address_refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` may not be fetched, or ``None`` when it is a public unicast address."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip in _METADATA:
        return "a cloud metadata address"
    checks = (("a loopback", ip.is_loopback), ("a link-local", ip.is_link_local),
              ("a multicast", ip.is_multicast), ("an unspecified", ip.is_unspecified),
              ("a CGNAT", isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT),
              ("a private", ip.is_private), ("a reserved", ip.is_reserved))
    for name, hit in checks:
        if hit:
            return f"{name} address"
    if not ip.is_global:
        return "not a public address"
    return None


@dataclass(frozen=True)
class Allowlist:
    hosts: frozenset[str] = frozenset()
    host_ports: frozenset[tuple[str, int]] = frozenset()
    networks: tuple[IPNetwork, ...] = field(default_factory=tuple)

    @classmethod
    def parse(cls, spec: str | Iterable[str], setting: str = "REACTQ_HTTP_FETCH_ALLOW") -> Allowlist:
        """``"intranet, 127.0.0.1:8080, 10.0.0.0/8"``; a bad entry is a ValueError naming it."""
        items = spec.split(",") if isinstance(spec, str) else list(spec)
        hosts: set[str] = set()
        pairs: set[tuple[str, int]] = set()
        nets: list[IPNetwork] = []
        for raw in (i.strip() for i in items):
            if not raw:
                continue
            if "/" in raw:
                try:
                    nets.append(ipaddress.ip_network(raw, strict=False))
                except ValueError:
                    raise ValueError(f"{setting}: '{raw}' is not a CIDR") from None
                continue
            host, port = _split_host_port(raw, setting)
            if port is None:
                hosts.add(host)
            else:
                pairs.add((host, port))
        return cls(frozenset(hosts), frozenset(pairs), tuple(nets))

    def allows_host(self, host: str, port: int) -> bool:
        host = host.strip("[]").lower().rstrip(".")
        return host in self.hosts or (host, port) in self.host_ports

    def allows_ip(self, ip: IPAddress) -> bool:
        return any(ip in n for n in self.networks if n.version == ip.version)


def _split_host_port(raw: str, setting: str) -> tuple[str, int | None]:
    if raw.startswith("["):  # [::1]:8080
        host, _, rest = raw[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif raw.count(":") == 1:
        host, port = raw.split(":")
    else:
        host, port = raw, ""
    if port and not port.isdigit():
        raise ValueError(f"{setting}: bad port in '{raw}'")
    return host.lower().rstrip("."), int(port) if port else None


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Resolves, checks every address, then connects to the checked one. ``setting`` names
    the allowlist's variable in the refusal (webhooks have their own)."""

    def __init__(self, allow: Allowlist, inner: httpcore2.AsyncNetworkBackend | None = None,
                 setting: str = "REACTQ_HTTP_FETCH_ALLOW") -> None:
        self.allow = allow
        self.inner = inner or httpcore2.AnyIOBackend()
        self.setting = setting

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        ip = await self.checked_address(host, port)
        return await self.inner.connect_tcp(str(ip), port, timeout=timeout,
                                            local_address=local_address,
                                            socket_options=socket_options)

    async def checked_address(self, host: str, port: int) -> IPAddress:
        """The address to connect to; raises :class:`FetchRefused` if any is refused."""
        return pick_address(host, port, await _resolve(host, port), self.allow, self.setting)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def guarded_transport(allow: Allowlist, setting: str = "REACTQ_HTTP_FETCH_ALLOW") -> httpx2.AsyncHTTPTransport:
    """An httpx2 transport whose every connection goes through :class:`GuardedBackend`
    (environment proxies ignored: a proxy would connect on the caller's behalf, unchecked)."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    # httpx2's transport has no network_backend argument; the pool it builds does.
    transport._pool = httpcore2.AsyncConnectionPool(  # noqa: SLF001
        ssl_context=_ssl_context(), network_backend=GuardedBackend(allow, setting=setting))
    return transport


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """Built once per process: loading the CA bundle costs a few hundred milliseconds."""
    return httpx2.create_ssl_context()


def pick_address(host: str, port: int, infos: list[Any], allow: Allowlist, setting: str) -> IPAddress:
    """Of ``getaddrinfo``'s answers for ``host``, the address to connect to; raises
    :class:`FetchRefused` when there is none or any of them is refused."""
    addresses = list(dict.fromkeys(ipaddress.ip_address(i[4][0].split("%")[0]) for i in infos))
    if not addresses:
        raise FetchRefused(f"refused: cannot resolve host '{host}'")
    if allow.allows_host(host, port):
        return addresses[0]
    for ip in addresses:
        why = address_refusal(ip)
        if why is not None and not allow.allows_ip(ip):
            raise FetchRefused(
                f"refused: '{host}' resolves to {ip}, {why} (allow it with "
                f"{setting} if this deployment needs it)")
    return addresses[0]


def checked_address_sync(host: str, port: int, allow: Allowlist, setting: str) -> IPAddress:
    """``GuardedBackend.checked_address`` for synchronous callers (a check at the door)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError, OSError) as exc:
        raise FetchRefused(f"refused: cannot resolve host '{host}': {exc}") from None
    return pick_address(host, port, list(infos), allow, setting)


async def _resolve(host: str, port: int) -> list[Any]:
    try:
        return list(await anyio.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM))
    except (socket.gaierror, UnicodeError, ValueError, OSError) as exc:
        raise FetchRefused(f"refused: cannot resolve host '{host}': {exc}") from None

"""Which push endpoints the broker will send to: a browser-supplied URL must never become a
request into the broker's own network.

An endpoint is https, has no credentials in it, and every address its host resolves to is
a global one (not private, loopback, link-local, multicast or reserved). An IPv6 address
that carries an IPv4 one (IPv4-mapped and -compatible, NAT64, 6to4, Teredo) is judged by
the IPv4 address it reaches. Only `POCOLOBBY_PUSH_ENDPOINT_ALLOW` (comma-separated
`host:port`) admits a named one otherwise, for tests and private push services; https is
required even then.

The check answers the addresses it approved, and the push connects to one of those
(board/notifications/webpush_transport.py), so a name that resolves differently a moment
later is never asked again.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

MAX_ENDPOINT_CHARS = 1000

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv6 prefixes whose last 32 bits are an IPv4 address the packet goes on to: the
# well-known NAT64 prefix (RFC 6052), its local-use one (RFC 8215) and IPv4-compatible
# addresses (RFC 4291, deprecated but still routed by some stacks).
LAST_32_BITS_IPV4 = (
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
    ipaddress.IPv6Network("::/96"),
)


class EndpointRefused(Exception):
    """The endpoint breaks a rule; the message names which."""


@dataclass(frozen=True)
class Endpoint:
    """An endpoint the check approved, with the addresses it approved it at."""

    url: str
    host: str
    port: int
    addresses: tuple[str, ...]


def allowed_endpoints() -> frozenset[str]:
    allowed: frozenset[str] = settings.POCOLOBBY_PUSH_ENDPOINT_ALLOW
    return allowed


def _reached(ip: IP) -> list[IP]:
    """The addresses a packet to `ip` reaches: `ip`, or the IPv4 ones it carries."""
    if isinstance(ip, ipaddress.IPv4Address):
        return [ip]
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return list(ip.teredo)  # the relay and the client behind it
    if any(ip in network for network in LAST_32_BITS_IPV4):
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    return [ip]


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return all(each.is_global and not each.is_multicast for each in _reached(ip))


def _resolve(host: str, port: int) -> tuple[str, ...]:
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise EndpointRefused(f"the push endpoint's host {host!r} does not resolve") from None
    return tuple(dict.fromkeys(str(info[4][0]) for info in found))


def check_endpoint(url: str) -> Endpoint:
    """The endpoint and its approved addresses, if the broker may send to it now (its host
    is resolved again each time)."""
    if len(url) > MAX_ENDPOINT_CHARS:
        raise EndpointRefused(f"the push endpoint is longer than {MAX_ENDPOINT_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port or 443
    except ValueError:
        raise EndpointRefused("the push endpoint is not a URL") from None
    if parts.scheme != "https":
        raise EndpointRefused("the push endpoint must be an https URL")
    host = (parts.hostname or "").lower()
    if not host or parts.username is not None or parts.password is not None:
        raise EndpointRefused("the push endpoint must name a host and carry no credentials")
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    addresses = _resolve(host, port)
    if shown in allowed_endpoints() or f"{host}:{port}" in allowed_endpoints():
        return Endpoint(url, host, port, addresses)
    if not addresses or not all(_is_public(a) for a in addresses):
        raise EndpointRefused(
            f"the push endpoint's host {host!r} is a private, loopback or link-local address; "
            "POCOLOBBY_PUSH_ENDPOINT_ALLOW admits named ones"
        )
    return Endpoint(url, host, port, addresses)

"""Which push endpoints the broker will send to: a browser-supplied URL must never become a
request into the broker's own network.

An endpoint is https, has no credentials in it, and every address its host resolves to is
a global one (not private, loopback, link-local, multicast or reserved). Only
`POCOLOBBY_PUSH_ENDPOINT_ALLOW` (comma-separated `host:port`) admits a named one otherwise,
for tests and private push services; https is required even then.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

MAX_ENDPOINT_CHARS = 1000


class EndpointRefused(Exception):
    """The endpoint breaks a rule; the message names which."""


def allowed_endpoints() -> frozenset[str]:
    allowed: frozenset[str] = settings.POCOLOBBY_PUSH_ENDPOINT_ALLOW
    return allowed


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def check_endpoint(url: str) -> str:
    """`url` if the broker may send to it now (its host is resolved again each time)."""
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
    if shown in allowed_endpoints() or f"{host}:{port}" in allowed_endpoints():
        return url
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise EndpointRefused(f"the push endpoint's host {host!r} does not resolve") from None
    addresses = {str(info[4][0]) for info in found}
    if not addresses or not all(_is_public(a) for a in addresses):
        raise EndpointRefused(
            f"the push endpoint's host {host!r} is a private, loopback or link-local address; "
            "POCOLOBBY_PUSH_ENDPOINT_ALLOW admits named ones"
        )
    return url

"""Which client a request comes from, for per-client limits (sign-in codes, enrolment codes):
an IPv6 client by its /64.

One household or server holds a whole /64, so counting single IPv6 addresses would let it
walk through the limits address by address. X-Forwarded-For is read only when settings say
how many trusted proxies stand in front (POCOLOBBY_TRUSTED_PROXY_HOPS), or, on a one-host
broker with a public origin, only from the addresses in POCOLOBBY_TRUSTED_PROXIES.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest

from lobbies.access.hosts import public_origin

# What a proxy says about the request it passes on; only a trusted proxy's count.
FORWARDED_HEADERS = ("X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded")


def peer_address(request: HttpRequest) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address the connection came from (an IPv4-mapped IPv6 address as its IPv4)."""
    try:
        ip = ipaddress.ip_address(request.META.get("REMOTE_ADDR", "") or "")
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def from_trusted_proxy(request: HttpRequest) -> bool:
    """Whether a one-host broker's configured proxy (POCOLOBBY_TRUSTED_PROXIES) made this
    connection; always False without a public origin (lobbies/access/hosts.py)."""
    if not public_origin():
        return False
    peer = peer_address(request)
    return peer is not None and any(
        peer in network for network in settings.POCOLOBBY_TRUSTED_PROXIES
    )


def forwarded_headers(request: HttpRequest) -> list[str]:
    return [name for name in FORWARDED_HEADERS if name in request.headers]


def trusted_hops() -> int:
    return int(getattr(settings, "POCOLOBBY_TRUSTED_PROXY_HOPS", 0) or 0)


def client_address(request: HttpRequest) -> str:
    if public_origin():
        # One trusted proxy in front; its X-Forwarded-For's last entry is who it served.
        nearest = request.headers.get("X-Forwarded-For", "").split(",")[-1].strip()
        if nearest and from_trusted_proxy(request):
            return nearest
        return request.META.get("REMOTE_ADDR", "") or ""
    hops = trusted_hops()
    if hops > 0:
        forwarded = [
            part.strip()
            for part in request.headers.get("X-Forwarded-For", "").split(",")
            if part.strip()
        ]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return request.META.get("REMOTE_ADDR", "") or ""


def client_bucket(address: str) -> str:
    """The unit a per-client limit counts: the IPv4 address, or the IPv6 /64."""
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)

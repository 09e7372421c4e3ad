"""Which client a request comes from, for per-client limits (sign-in codes, enrolment codes):
an IPv6 client by its /64.

One household or server holds a whole /64, so counting single IPv6 addresses would let it
walk through the limits address by address. X-Forwarded-For is read only when settings say
how many trusted proxies stand in front (POCOLOBBY_TRUSTED_PROXY_HOPS).
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def trusted_hops() -> int:
    return int(getattr(settings, "POCOLOBBY_TRUSTED_PROXY_HOPS", 0) or 0)


def client_address(request: HttpRequest) -> str:
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

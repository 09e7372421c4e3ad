"""Which client a request comes from, for per-client limits: an IPv6 client by its /64.

One household or server holds a whole /64, so counting single IPv6 addresses would let it
walk through the limits address by address. X-Forwarded-For is read only when settings say
how many trusted proxies stand in front (POCOLOBBY_TRUSTED_PROXY_HOPS).
"""

from __future__ import annotations

import ipaddress
import logging

from django.conf import settings
from django.http import HttpRequest

log = logging.getLogger("pocolobby.sign_in")
_said_forwarded = False


def _hops() -> int:
    return int(getattr(settings, "POCOLOBBY_TRUSTED_PROXY_HOPS", 0) or 0)


def note_forwarded_for(request: HttpRequest) -> None:
    """Say once in the log that X-Forwarded-For arrives while no proxy is trusted.

    Behind a proxy with POCOLOBBY_TRUSTED_PROXY_HOPS at 0 every client looks like the proxy,
    so all of them share one network's sign-in limits.
    """
    global _said_forwarded
    if _said_forwarded or _hops() > 0 or "X-Forwarded-For" not in request.headers:
        return
    _said_forwarded = True
    log.warning(
        "requests carry X-Forwarded-For but POCOLOBBY_TRUSTED_PROXY_HOPS is 0: the header is "
        "ignored and every client counts as the proxy's address; behind a proxy, set it to "
        "the number of proxies in front"
    )


def client_address(request: HttpRequest) -> str:
    hops = _hops()
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

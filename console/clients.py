"""The sign-in's view of its clients: lobbies/access/clients.py tells which client a request comes
from; this says once when X-Forwarded-For arrives and no proxy is trusted."""

from __future__ import annotations

import logging

from django.http import HttpRequest

from lobbies.access.clients import client_address, client_bucket, trusted_hops

log = logging.getLogger("pocolobby.sign_in")
_said_forwarded = False

__all__ = ["client_address", "client_bucket", "note_forwarded_for"]


def note_forwarded_for(request: HttpRequest) -> None:
    """Say once in the log that X-Forwarded-For arrives while no proxy is trusted.

    Behind a proxy with POCOLOBBY_TRUSTED_PROXY_HOPS at 0 every client looks like the proxy,
    so all of them share one network's sign-in limits.
    """
    global _said_forwarded
    if _said_forwarded or trusted_hops() > 0 or "X-Forwarded-For" not in request.headers:
        return
    _said_forwarded = True
    log.warning(
        "requests carry X-Forwarded-For but POCOLOBBY_TRUSTED_PROXY_HOPS is 0: the header is "
        "ignored and every client counts as the proxy's address; behind a proxy, set it to "
        "the number of proxies in front"
    )

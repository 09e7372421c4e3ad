"""Which place a request reaches, decided from `Host` (and, locally, the first path segment).

Hosted (`POCOLOBBY_DOMAIN` set): the account area at the domain itself, the API only on API
hosts (`api.<domain>` unless `POCOLOBBY_API_HOSTS` says otherwise), and each lobby at
`<lobby>.<domain>`, serving its dashboard at `/` and its settings at `/settings`.

Local (no domain): the account area at `/`, the API at `/v1`, each lobby under `/<lobby>/`.
Pages answer only when `Host` is the broker's own loopback address and port, so a hostile
name pointed at 127.0.0.1 (DNS rebinding) reaches nothing; `/v1` is checked by its token.
With `POCOLOBBY_PUBLIC_ORIGIN` (one person's broker behind a tunnel or proxy) they answer at
that origin's host too, only through the proxy (pocolobby/middleware.py says how that is told).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from django.conf import settings

from lobbies.names import RESERVED_LOBBY_NAMES, is_name

Place = Literal["api", "account", "lobby"]


@dataclass(frozen=True)
class Site:
    place: Place
    lobby: str = ""
    # Path prefix of this lobby's pages: "" on its own host, "/<lobby>" on a local broker.
    base: str = ""


class HostRefused(Exception):
    """The Host (or, locally, the path) names no place this broker serves."""


def hosted() -> bool:
    return bool(settings.POCOLOBBY_DOMAIN)


def public_origin() -> str:
    """The https origin of a one-host broker's pages through its proxy, or "" (none)."""
    return "" if hosted() else str(getattr(settings, "POCOLOBBY_PUBLIC_ORIGIN", "") or "")


def public_host() -> str:
    """The `Host` the proxy passes for the public origin (`name` or `name:port`), or ""."""
    origin = public_origin()
    return origin.split("://", 1)[1] if origin else ""


def loopback_hosts() -> frozenset[str]:
    port = settings.POCOLOBBY_PORT
    return frozenset({f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"})


def site_for(host: str, path: str) -> Site:
    """The place a request for `path` at `host` reaches, or HostRefused saying why."""
    host = host.lower()
    if not hosted():
        if path == "/v1" or path.startswith("/v1/"):
            return Site("api")
        if host not in loopback_hosts() and not (public_host() and host == public_host()):
            also = f" and {public_origin()}" if public_origin() else ""
            raise HostRefused(
                f"pages on this broker answer only at "
                f"http://127.0.0.1:{settings.POCOLOBBY_PORT}{also}"
            )
        segment = path.lstrip("/").split("/", 1)[0]
        if not segment or segment in RESERVED_LOBBY_NAMES or not is_name(segment):
            return Site("account")
        return Site("lobby", lobby=segment, base=f"/{segment}")
    domain = settings.POCOLOBBY_DOMAIN
    if host == domain:
        return Site("account")
    if host in settings.POCOLOBBY_API_HOSTS:
        return Site("api")
    if host.endswith("." + domain):
        label = host[: -len(domain) - 1]
        if is_name(label) and label not in RESERVED_LOBBY_NAMES:
            return Site("lobby", lobby=label)
    raise HostRefused(f"{host!r} is not a host of this broker")


def lobby_origin(lobby: str) -> str:
    """Where a lobby's pages live, for links from the account area."""
    if hosted():
        return f"{settings.POCOLOBBY_PUBLIC_SCHEME}://{lobby}.{settings.POCOLOBBY_DOMAIN}"
    return f"http://127.0.0.1:{settings.POCOLOBBY_PORT}/{lobby}"


def account_origin() -> str:
    if hosted():
        return f"{settings.POCOLOBBY_PUBLIC_SCHEME}://{settings.POCOLOBBY_DOMAIN}"
    return f"http://127.0.0.1:{settings.POCOLOBBY_PORT}"


def page_origin(host: str) -> str:
    """The exact origin a page at `host` has; settings POSTs must come from it."""
    host = host.lower()
    if public_host() and host == public_host():
        return public_origin()
    scheme = settings.POCOLOBBY_PUBLIC_SCHEME if hosted() else "http"
    return f"{scheme}://{host}"

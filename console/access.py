"""Who is asking, decided on every request by joins over accounts, owners and viewers.

Hosted: the account area's session names an account; a lobby host's session (from a
hand-off) names an account for that one lobby, which is its owner, a listed viewer, or
nobody any more. Local: the operator's in-memory session opens every lobby.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from django.http import HttpRequest
from django.utils import timezone

from console import local
from console.models import Account, DashboardViewer, LobbyOwner, SessionPlace, WebSession
from console.web import digest, host_cookie
from lobbies.hosts import hosted
from lobbies.models import Lobby

OPERATOR_COOKIE = "pocolobby-operator"
ACCOUNT_COOKIE = "pocolobby-account"
LOBBY_COOKIE = "pocolobby-lobby"
VERIFIER_COOKIE = "pocolobby-verifier"

Role = Literal["owner", "viewer", "operator", "public"]


@dataclass(frozen=True)
class Visitor:
    role: Role | None
    account: Account | None = None

    @property
    def may_view(self) -> bool:
        return self.role is not None

    @property
    def may_change_settings(self) -> bool:
        return self.role in ("owner", "operator")

    @property
    def signed_in(self) -> bool:
        return self.role in ("owner", "viewer", "operator")

    @property
    def email(self) -> str:
        return self.account.email if self.account else ""


def operator_signed_in(request: HttpRequest) -> bool:
    return not hosted() and local.operator_session_valid(host_cookie(request, OPERATOR_COOKIE))


def session_account(
    request: HttpRequest, place: SessionPlace, lobby: Lobby | None
) -> Account | None:
    """The enabled account whose live session on this host the cookie carries."""
    name = ACCOUNT_COOKIE if place == SessionPlace.ACCOUNT else LOBBY_COOKIE
    token = host_cookie(request, name)
    if not token or not hosted():
        return None
    session = (
        WebSession.objects.select_related("account")
        .filter(
            token_hash=digest(token),
            place=place,
            lobby=lobby,
            expires_at__gt=timezone.now(),
            account__enabled=True,
        )
        .first()
    )
    return session.account if session else None


def account_of(request: HttpRequest) -> Account | None:
    return session_account(request, SessionPlace.ACCOUNT, None)


def account_role(account: Account, lobby: Lobby) -> Role | None:
    if LobbyOwner.objects.filter(lobby=lobby, account=account).exists():
        return "owner"
    if DashboardViewer.objects.filter(lobby=lobby, email=account.email).exists():
        return "viewer"
    return None


def visitor_of(
    request: HttpRequest, lobby: Lobby, public: Callable[[Lobby], bool] | None = None
) -> Visitor:
    """What this request may do on this lobby's pages, from the rows as they are now.

    Whether a page is open to anyone is not the console's fact: the board passes `public`
    (its dashboard's visibility) for its pages; the console's own pages are never public.
    """
    if operator_signed_in(request):
        return Visitor("operator")
    account = session_account(request, SessionPlace.LOBBY, lobby)
    if account is not None:
        role = account_role(account, lobby)
        if role is not None:
            return Visitor(role, account)
    if public is not None and public(lobby):
        return Visitor("public")
    return Visitor(None)

"""Who is asking, decided on every request by joins over accounts, owners and viewers.

Hosted: the account area's session names an account; a lobby host's session (from a
hand-off) names an account for that one lobby, which is its owner, a listed viewer, or
nobody any more. Local: the operator's in-memory session opens every lobby. The Django
admin takes its identity from the same sessions (OperatorAdmin).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from console import local
from console.actions.sign_in import end_session
from console.models import Account, DashboardViewer, LobbyOwner, SessionPlace, WebSession
from console.web import clear_host_cookie, digest, host_cookie
from lobbies.access.hosts import hosted
from lobbies.admin import CREDENTIAL_ISSUER
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


LOCAL_OPERATOR_USERNAME = "local-operator"


def staff_identity(username: str) -> Any:
    """A staff identity that exists only for this request: no user row, no password."""
    user = get_user_model()(username=username, is_active=True, is_staff=True, is_superuser=True)
    user.set_unusable_password()
    return user


def local_operator_user() -> Any:
    """The ticket came from `pocolobby settings`, which holds the admin token, so this
    identity may mint agent tokens in the admin; an email-code operator may not."""
    user = staff_identity(LOCAL_OPERATOR_USERNAME)
    setattr(user, CREDENTIAL_ISSUER, True)
    return user


def admin_password_allowed() -> bool:
    """Whether the admin's password form and a Django user's session count: always on a local
    broker (beside the ticket), on a hosted one only in recovery (docs/OPERATIONS.md)."""
    return not hosted() or bool(settings.POCOLOBBY_ADMIN_PASSWORD_RECOVERY)


def operator_account(request: HttpRequest) -> Account | None:
    """Hosted: the account-area session's account when the operator marked it as one."""
    account = account_of(request)
    return account if account is not None and account.operator else None


def admin_identity(request: HttpRequest) -> Any | None:
    """Who an /admin/ request is, from our own sessions, read again on every request: the
    local operator's ticket session, or a hosted account-area session of an account marked
    operator (unmarking or disabling it applies to its next request). Anonymous when a hosted
    broker is not in password recovery, so no Django password session is honoured; None
    leaves Django's user as it is."""
    if operator_signed_in(request):
        return local_operator_user()
    if not hosted():
        return None
    account = operator_account(request)
    if account is not None:
        return staff_identity(account.email)
    return None if admin_password_allowed() else AnonymousUser()


class OperatorAdmin:
    """The Django admin's identity comes from the console's own sign-ins: on a local broker
    the session `pocolobby settings` opened (same 12-hour life, no `createsuperuser`), on a
    hosted one the email-code session of an account marked operator (docs/DECISIONS.md, "The
    hosted operator").

    Async-capable: one sync-only middleware would put every page request of the process
    through Django's single sync thread (pocolobby/middleware.py says why that matters).
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        if not request.path.startswith("/admin/"):
            return self.get_response(request)
        identity = admin_identity(request)
        if identity is not None:
            request.user = identity
        response = self.get_response(request)
        self._after(request, response)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/admin/"):
            response: HttpResponse = await self.get_response(request)
            return response
        identity = await sync_to_async(admin_identity)(request)
        if identity is not None:
            request.user = identity
        response = await self.get_response(request)
        await sync_to_async(self._after)(request, response)
        return response

    @staticmethod
    def _after(request: HttpRequest, response: HttpResponse) -> None:
        if not (request.path == "/admin/logout/" and request.method == "POST"):
            return
        # One sign-in, one sign-out: the admin's "log out" ends the session that let it in.
        if operator_signed_in(request):
            local.end_operator_session(host_cookie(request, OPERATOR_COOKIE))
            clear_host_cookie(response, OPERATOR_COOKIE)
        elif hosted() and operator_account(request) is not None:
            end_session(host_cookie(request, ACCOUNT_COOKIE), SessionPlace.ACCOUNT)
            clear_host_cookie(response, ACCOUNT_COOKIE)

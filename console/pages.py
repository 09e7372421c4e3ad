"""Decorators that every page view goes through: find the lobby, decide the visitor, refuse
plainly. Views stay parse -> call -> render."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt

from console import local
from console.access import (
    ACCOUNT_COOKIE,
    LOBBY_COOKIE,
    OPERATOR_COOKIE,
    Visitor,
    account_of,
    operator_signed_in,
    visitor_of,
)
from console.actions.lobby_settings import Actor
from console.actions.sign_in import end_session
from console.models import Account, SessionPlace
from console.web import PageRefusal, clear_host_cookie, host_cookie, refusal_response, site_of
from lobbies.access.hosts import hosted
from lobbies.errors import BrokerError, ErrorCode
from lobbies.models import ActorKind, Lobby


@dataclass(frozen=True)
class LobbyPage:
    """What a lobby page knows: the lobby, who asks, and where its pages live."""

    lobby: Lobby
    visitor: Visitor
    base: str  # "" on the lobby's host, "/<lobby>" on a local broker

    def context(self, **extra: Any) -> dict[str, Any]:
        return {"lobby": self.lobby, "visitor": self.visitor, "base": self.base, **extra}


LobbyView = Callable[..., HttpResponse]


def actor_of(visitor: Visitor) -> Actor:
    if visitor.role == "operator" or visitor.account is None:
        return Actor.operator()
    return Actor(ActorKind.ACCOUNT, visitor.account.pk, visitor.account.email)


def _refused(request: HttpRequest, refusal: PageRefusal | BrokerError) -> HttpResponse:
    """A page's refusal, or an action's (the same sentence the API would give)."""
    if isinstance(refusal, BrokerError):
        refusal = PageRefusal(refusal.status, refusal.message, refusal.code)
    return refusal_response(request, refusal)


def lobby_page(
    *, settings: bool = False, public: Callable[[Lobby], bool] | None = None
) -> Callable[[LobbyView], Callable[..., HttpResponse]]:
    """A page of one lobby: the dashboard's (any visitor who may view, and anyone when
    `public` says so) or its settings' (the owner or the local operator only, checked again
    on every request)."""

    def wrap(view: LobbyView) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def page(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            site = site_of(request)
            try:
                lobby = Lobby.objects.filter(name=site.lobby).first()
                if lobby is None:
                    raise PageRefusal(404, f"there is no lobby named {site.lobby!r} here")
                visitor = visitor_of(request, lobby, public)
                allowed = visitor.may_change_settings if settings else visitor.may_view
                if not allowed:
                    return _not_allowed(request, site.base, visitor, settings)
                return view(request, LobbyPage(lobby, visitor, site.base), *args, **kwargs)
            except (PageRefusal, BrokerError) as refusal:
                return _refused(request, refusal)

        return csrf_exempt(page)

    return wrap


def _not_allowed(request: HttpRequest, base: str, visitor: Visitor, settings: bool) -> HttpResponse:
    if request.method == "GET" and not visitor.signed_in and not request.headers.get("HX-Request"):
        return render(
            request,
            "console/lobby_sign_in.html",
            {"base": base, "hosted": hosted(), "settings": settings},
            status=403,
        )
    message = (
        "only this lobby's owner can change its settings"
        if settings
        else "this dashboard is private; sign in as its owner or a listed viewer"
    )
    return refusal_response(request, PageRefusal(403, message, ErrorCode.FORBIDDEN))


AccountView = Callable[..., HttpResponse]


def account_page(*, signed_in: bool = True) -> Callable[[AccountView], Callable[..., HttpResponse]]:
    """A page of the account area; `signed_in` pages send others to sign in.

    The view receives the signed-in account (hosted) or None with the operator signed in
    (local)."""

    def wrap(view: AccountView) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def page(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                account: Account | None = account_of(request) if hosted() else None
                if signed_in and account is None and not operator_signed_in(request):
                    if request.method == "GET":
                        return HttpResponseRedirect("/sign-in")
                    raise PageRefusal(401, "sign in first", ErrorCode.SIGNED_OUT)
                return view(request, account, *args, **kwargs)
            except (PageRefusal, BrokerError) as refusal:
                return _refused(request, refusal)

        return csrf_exempt(page)

    return wrap


def end_visit(request: HttpRequest, response: HttpResponse, place: SessionPlace) -> None:
    """Sign this host's browser out: its account or lobby session (hosted) or the local
    operator's, and clear that cookie."""
    if hosted():
        cookie = ACCOUNT_COOKIE if place == SessionPlace.ACCOUNT else LOBBY_COOKIE
        end_session(host_cookie(request, cookie), place)
    else:
        cookie = OPERATOR_COOKIE
        local.end_operator_session(host_cookie(request, cookie))
    clear_host_cookie(response, cookie)

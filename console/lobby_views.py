"""A lobby host's console pages: sign-in start, hand-off, sign-out and the activity page
(the lobby's settings pages are board.settings)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
)
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt

from console import selectors
from console.access import LOBBY_COOKIE, VERIFIER_COOKIE
from console.actions import handoff
from console.forms import EmptyForm
from console.models import SessionPlace
from console.pages import LobbyPage, end_visit, lobby_page
from console.web import (
    PageRefusal,
    clear_host_cookie,
    host_cookie,
    json_ok,
    new_secret,
    parse_json_post,
    refusal_response,
    set_host_cookie,
    site_of,
)
from lobbies.access.hosts import account_origin, hosted
from lobbies.errors import ErrorCode

VERIFIER_SECONDS = 15 * 60


@csrf_exempt
def sign_in(request: HttpRequest) -> HttpResponse:
    """Begin sign-in on this lobby's host: keep a verifier here, send only its hash along."""
    site = site_of(request)
    if not hosted():
        return render(
            request,
            "console/lobby_sign_in.html",
            {"base": site.base, "hosted": False, "settings": False},
        )
    target = "settings" if request.GET.get("next") == "settings" else "dashboard"
    verifier, verifier_hash = new_secret()
    query = urlencode({"verifier_hash": verifier_hash, "next": target})
    response = HttpResponseRedirect(f"{account_origin()}/open/{site.lobby}?{query}")
    set_host_cookie(response, VERIFIER_COOKIE, verifier, VERIFIER_SECONDS)
    return response


@csrf_exempt
def take_handoff(request: HttpRequest) -> HttpResponse:
    site = site_of(request)
    try:
        if not hosted():
            raise PageRefusal(404, "hand-offs are for a hosted broker", ErrorCode.NOT_HOSTED)
        session = handoff.consume_handoff(
            site.lobby,
            request.GET.get("token", "")[:200],
            host_cookie(request, VERIFIER_COOKIE),
            host_cookie(request, LOBBY_COOKIE),
        )
    except PageRefusal as refusal:
        return refusal_response(request, refusal)
    response = HttpResponseRedirect(
        f"{site.base}/settings" if session.to_settings else f"{site.base}/"
    )
    set_host_cookie(
        response, LOBBY_COOKIE, session.token, int(handoff.LOBBY_SESSION_LIFETIME.total_seconds())
    )
    clear_host_cookie(response, VERIFIER_COOKIE)
    return response


@csrf_exempt
def sign_out(request: HttpRequest) -> HttpResponse:
    site = site_of(request)
    try:
        parse_json_post(request, EmptyForm)
    except PageRefusal as refusal:
        return refusal_response(request, refusal)
    response = json_ok(redirect=f"{site.base}/")
    end_visit(request, response, SessionPlace.LOBBY)
    return response


@lobby_page(settings=True)
def activity_page(request: HttpRequest, page: LobbyPage) -> HttpResponse:
    listing, lines = selectors.activity(page.lobby, request.GET.get("page"))
    return render(request, "console/activity.html", page.context(listing=listing, lines=lines))


def activity_moved(request: HttpRequest) -> HttpResponse:
    """The activity page's old address (under settings) answers with where it is now."""
    query = request.META.get("QUERY_STRING", "")
    target = f"{site_of(request).base}/activity" + (f"?{query}" if query else "")
    return HttpResponsePermanentRedirect(target)

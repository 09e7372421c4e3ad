"""A lobby host's console pages: sign-in start, hand-off, sign-out, rooms, viewers, activity
and deletion (the settings page itself and its dashboard settings are board.settings_views)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt

from console import selectors
from console.access import LOBBY_COOKIE, VERIFIER_COOKIE, Visitor
from console.actions import handoff, owner_controls
from console.actions import lobby_settings as actions
from console.actions.lobby_settings import Actor
from console.forms import (
    AgentForm,
    CancelMessageForm,
    CreateRoomForm,
    DeleteLobbyForm,
    DeliveryForm,
    EmptyForm,
    PermissionsForm,
    RestForm,
    RoomForm,
    RoomMembersForm,
    ViewerForm,
    WatchingForm,
)
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
from lobbies.models import ActorKind

VERIFIER_SECONDS = 15 * 60


def actor_of(visitor: Visitor) -> Actor:
    if visitor.role == "operator" or visitor.account is None:
        return Actor.operator()
    return Actor(ActorKind.ACCOUNT, visitor.account.pk, visitor.account.email)


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


@lobby_page(settings=True)
def create_room(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, CreateRoomForm)
    actions.create_room(actor_of(page.visitor), page.lobby.pk, form.room, form.members)
    return json_ok(message=f"created room {form.room}")


@lobby_page(settings=True)
def room_members(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, RoomMembersForm)
    actions.set_room_members(actor_of(page.visitor), page.lobby.pk, form.room, form.members)
    return json_ok(message=f"saved the members of {form.room}")


@lobby_page(settings=True)
def archive_room(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, RoomForm)
    actions.archive_room(actor_of(page.visitor), page.lobby.pk, form.room)
    return json_ok(message=f"archived room {form.room}")


@lobby_page(settings=True)
def restore_room(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, RoomForm)
    actions.restore_room(actor_of(page.visitor), page.lobby.pk, form.room)
    return json_ok(message=f"restored room {form.room}")


@lobby_page(settings=True)
def add_viewer(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, ViewerForm)
    actions.add_viewer(actor_of(page.visitor), page.lobby.pk, form.email)
    return json_ok(message="viewer added")


@lobby_page(settings=True)
def remove_viewer(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, ViewerForm)
    actions.remove_viewer(actor_of(page.visitor), page.lobby.pk, form.email)
    return json_ok(message="viewer removed")


@lobby_page(settings=True)
def delete(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, DeleteLobbyForm)
    name = actions.delete_lobby(actor_of(page.visitor), page.lobby.pk, form.confirm)
    return json_ok(message=f"deleted lobby {name}", redirect=f"{account_origin()}/")


# ---------------------------------------------------------------- owner controls (issue 16)


@lobby_page(settings=True)
def agent_rest(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, RestForm)
    owner_controls.set_resting(actor_of(page.visitor), page.lobby.pk, form.agent, form.rest)
    state = "resting: nothing is pushed to it" if form.rest else "awake again"
    return json_ok(message=f"{form.agent} is {state}")


@lobby_page(settings=True)
def agent_retry(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, AgentForm)
    owner_controls.retry_notifications(actor_of(page.visitor), page.lobby.pk, form.agent)
    return json_ok(message=f"notifications to {form.agent} are retried now")


@lobby_page(settings=True)
def agent_cancel_scheduled(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, AgentForm)
    counts = owner_controls.cancel_agent_scheduled(
        actor_of(page.visitor), page.lobby.pk, form.agent
    )
    return json_ok(
        message=f"cancelled {counts['messages']} scheduled message(s) and "
        f"{counts['schedules']} schedule(s) of {form.agent}",
        **counts,
    )


@lobby_page(settings=True)
def agent_permissions(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, PermissionsForm)
    agent = owner_controls.set_permissions(
        actor_of(page.visitor),
        page.lobby.pk,
        form.agent,
        broadcast=form.broadcast,
        manage_rooms=form.manage_rooms,
    )
    granted = [p for p in ("broadcast", "manage_rooms") if getattr(agent, p)]
    return json_ok(message=f"saved the permissions of {form.agent}: {', '.join(granted) or 'none'}")


@lobby_page(settings=True)
def delivery(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, DeliveryForm)
    owner_controls.set_delivery_paused(actor_of(page.visitor), page.lobby.pk, form.paused)
    if form.paused:
        return json_ok(message="delivery is paused: sends queue, nothing is pushed")
    return json_ok(message="delivery resumed: what queued is pushed now")


@lobby_page(settings=True)
def watching(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, WatchingForm)
    owner_controls.set_agents_may_watch(actor_of(page.visitor), page.lobby.pk, form.allowed)
    if form.allowed:
        return json_ok(message="every agent may now watch the others (watch_agents)")
    return json_ok(message="only agents with manage_rooms may watch the others")


@lobby_page(settings=True)
def cancel_scheduled(request: HttpRequest, page: LobbyPage) -> JsonResponse:
    form = parse_json_post(request, CancelMessageForm)
    owner_controls.cancel_scheduled_message(actor_of(page.visitor), page.lobby.pk, form.message_id)
    return json_ok(message=f"cancelled scheduled message {form.message_id}")

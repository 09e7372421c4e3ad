"""A lobby's own settings: rooms, viewers, deletion and the owner's controls over agents and
delivery (the settings page itself and the dashboard's settings are board.settings.views).
Each route is for the owner or the local operator only."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from board.settings.forms import (
    AgentForm,
    CancelMessageForm,
    CreateRoomForm,
    DeleteLobbyForm,
    DeliveryForm,
    PermissionsForm,
    RestForm,
    RoomForm,
    RoomMembersForm,
    ViewerForm,
    WatchingForm,
)
from console.actions import lobby_settings as actions
from console.actions import owner_controls
from console.pages import LobbyPage, actor_of, lobby_page
from console.web import json_ok, parse_json_post
from lobbies.access.hosts import account_origin


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

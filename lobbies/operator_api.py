"""The operator's API under /v1/admin, authenticated by the admin token; `pocolobby` calls it."""

from __future__ import annotations

import functools
import hashlib
import hmac
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse

from lobbies import attachment_selectors, selectors
from lobbies.actions import continuity, operator, owner, restore, rooms
from lobbies.catalog import parse_arguments
from lobbies.errors import BrokerError
from lobbies.http import api_view, bearer_token, json_body
from lobbies.schemas import Operation, bounded_text
from lobbies.secret_files import admin_token


@functools.cache
def _admin_token_digest() -> bytes:
    return hashlib.sha256(admin_token(settings.DATA_DIR).encode()).digest()


def require_operator(request: HttpRequest) -> None:
    """Refuse anything but the broker's admin token (compared in constant time)."""
    presented = hashlib.sha256(bearer_token(request).encode("utf-8", "surrogatepass")).digest()
    if not hmac.compare_digest(presented, _admin_token_digest()):
        raise BrokerError(401, "invalid_token", "this is not the broker's admin token")


class CreateLobby(Operation):
    name: str


class AddAgent(Operation):
    agent_id: str
    description: Annotated[str, bounded_text(200)] = ""
    role: Annotated[str, bounded_text(32_768)] = ""
    manage_rooms: bool = False
    broadcast: bool = False


@api_view(("GET", "POST"))
def lobbies(request: HttpRequest) -> JsonResponse:
    require_operator(request)
    if request.method == "POST":
        args = parse_arguments(CreateLobby, json_body(request))
        lobby = operator.create_lobby(args.name)
        return JsonResponse(selectors.lobby_entry(lobby), status=201)
    return JsonResponse(
        {"lobbies": [selectors.lobby_entry(lobby) for lobby in selectors.all_lobbies()]}
    )


@api_view(("DELETE",))
def lobby(request: HttpRequest, lobby: str) -> JsonResponse:
    require_operator(request)
    operator.delete_lobby(lobby)
    return JsonResponse({"deleted": lobby})


@api_view(("GET",))
def lobby_attachments(request: HttpRequest, lobby: str) -> JsonResponse:
    """Attachment metadata and usage; no route gives the owner or operator any content."""
    require_operator(request)
    return JsonResponse(attachment_selectors.lobby_attachments(operator.lobby_named(lobby)))


@api_view(("GET", "POST"))
def agents(request: HttpRequest, lobby: str) -> JsonResponse:
    require_operator(request)
    if request.method == "POST":
        args = parse_arguments(AddAgent, json_body(request))
        agent, token = operator.add_agent(
            lobby,
            args.agent_id,
            description=args.description,
            role=args.role,
            manage_rooms=args.manage_rooms,
            broadcast=args.broadcast,
        )
        return JsonResponse(_credential_answer(lobby, agent.agent_id, token), status=201)
    return JsonResponse({"agents": selectors.operator_agents(operator.lobby_named(lobby))})


def _credential_answer(lobby: str, agent_id: str, token: str) -> dict[str, Any]:
    return {"lobby": lobby, "agent": agent_id, "token": token}


@api_view(("DELETE",))
def agent(request: HttpRequest, lobby: str, agent_id: str) -> JsonResponse:
    require_operator(request)
    operator.remove_agent(lobby, agent_id)
    return JsonResponse({"removed": agent_id})


class SetRole(Operation):
    role: Annotated[str, bounded_text(32_768)]


class SetPermissions(Operation):
    broadcast: bool | None = None
    manage_rooms: bool | None = None


@api_view(("POST",))
def agent_role(request: HttpRequest, lobby: str, agent_id: str) -> JsonResponse:
    require_operator(request)
    args = parse_arguments(SetRole, json_body(request))
    agent = continuity.set_role(lobby, agent_id, args.role)
    return JsonResponse({"agent": agent.agent_id, "role_characters": len(agent.role)})


class SetDelivery(Operation):
    paused: bool


class CancelScheduled(Operation):
    message_id: int


@api_view(("POST",))
def lobby_delivery(request: HttpRequest, lobby: str) -> JsonResponse:
    """Pause or resume every push in the lobby (maintenance)."""
    require_operator(request)
    args = parse_arguments(SetDelivery, json_body(request))
    return JsonResponse(
        {"lobby": lobby, "delivery_paused": owner.set_delivery_paused(lobby, args.paused)}
    )


@api_view(("POST",))
def lobby_cancel_scheduled(request: HttpRequest, lobby: str) -> JsonResponse:
    """The owner's cancel of any scheduled message in the lobby."""
    require_operator(request)
    args = parse_arguments(CancelScheduled, json_body(request))
    return JsonResponse(owner.cancel_lobby_scheduled(lobby, args.message_id))


@api_view(("POST",))
def agent_action(request: HttpRequest, lobby: str, agent_id: str, action: str) -> JsonResponse:
    require_operator(request)
    if action == "rotate":
        return JsonResponse(
            _credential_answer(lobby, agent_id, operator.rotate_credential(lobby, agent_id))
        )
    if action == "disable":
        return JsonResponse({"disabled": agent_id, "held": operator.disable_agent(lobby, agent_id)})
    if action == "enable":
        operator.enable_agent(lobby, agent_id)
        return JsonResponse({"enabled": agent_id})
    if action == "cancel-scheduled":
        return JsonResponse({"agent": agent_id, **owner.cancel_agent_scheduled(lobby, agent_id)})
    if action == "reset-runtime":
        return JsonResponse(
            {"reset": agent_id, "retired_runtime_id": operator.reset_runtime(lobby, agent_id)}
        )
    if action in ("rest", "resume"):
        resting = action == "rest"
        operator.agent_named(lobby, agent_id)  # an unknown agent is 404, as for every action
        rooms.rest_agents(operator.operator_changer(lobby), [agent_id], resting, None)
        return JsonResponse({"agent": agent_id, "resting": resting})
    if action == "retry-notifications":
        operator.retry_notifications(lobby, agent_id)
        return JsonResponse({"retried": agent_id})
    if action == "permissions":
        args = parse_arguments(SetPermissions, json_body(request))
        agent = operator.set_permissions(
            lobby, agent_id, broadcast=args.broadcast, manage_rooms=args.manage_rooms
        )
        return JsonResponse(
            {"agent": agent_id, "broadcast": agent.broadcast, "manage_rooms": agent.manage_rooms}
        )
    raise BrokerError(404, "unknown_action", f"no agent action {action!r}")


@api_view(("GET",))
def status(request: HttpRequest) -> JsonResponse:
    require_operator(request)
    name = request.GET.get("lobby") or None
    if name:
        operator.lobby_named(name)
    return JsonResponse({**selectors.status(name), "broker": restore.state_entry()})


@api_view(("POST",))
def restore_finish(request: HttpRequest) -> JsonResponse:
    """`pocolobby restore --finish`: reopen a restored store to agents."""
    require_operator(request)
    return JsonResponse(restore.finish_restore())

"""The operator's API under /v1/admin, authenticated by the admin token; `pocolobby` calls it."""

from __future__ import annotations

import functools
import hashlib
import hmac
from typing import Any

from django.http import HttpRequest, JsonResponse

from lobbies import selectors
from lobbies.actions import continuity, operator
from lobbies.catalog import parse_arguments
from lobbies.errors import BrokerError
from lobbies.http import api_view, bearer_token, json_body
from lobbies.schemas import Operation, bounded_text
from pocolobby import config


@functools.cache
def _admin_token_digest() -> bytes:
    return hashlib.sha256(config.admin_token().encode()).digest()


def _require_operator(request: HttpRequest) -> None:
    presented = hashlib.sha256(bearer_token(request).encode("utf-8", "surrogatepass")).digest()
    if not hmac.compare_digest(presented, _admin_token_digest()):
        raise BrokerError(401, "invalid_token", "this is not the broker's admin token")


class CreateLobby(Operation):
    name: str


class AddAgent(Operation):
    agent_id: str
    description: bounded_text(200) = ""
    role: bounded_text(32_768) = ""
    manage_rooms: bool = False
    broadcast: bool = False


@api_view(("GET", "POST"))
def lobbies(request: HttpRequest) -> JsonResponse:
    _require_operator(request)
    if request.method == "POST":
        args = parse_arguments(CreateLobby, json_body(request))
        lobby = operator.create_lobby(args.name)
        return JsonResponse(selectors.lobby_entry(lobby), status=201)
    return JsonResponse(
        {"lobbies": [selectors.lobby_entry(lobby) for lobby in selectors.all_lobbies()]}
    )


@api_view(("DELETE",))
def lobby(request: HttpRequest, lobby: str) -> JsonResponse:
    _require_operator(request)
    operator.delete_lobby(lobby)
    return JsonResponse({"deleted": lobby})


@api_view(("GET", "POST"))
def agents(request: HttpRequest, lobby: str) -> JsonResponse:
    _require_operator(request)
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
    _require_operator(request)
    operator.remove_agent(lobby, agent_id)
    return JsonResponse({"removed": agent_id})


class SetRole(Operation):
    role: bounded_text(32_768)


@api_view(("POST",))
def agent_role(request: HttpRequest, lobby: str, agent_id: str) -> JsonResponse:
    _require_operator(request)
    args = parse_arguments(SetRole, json_body(request))
    agent = continuity.set_role(lobby, agent_id, args.role)
    return JsonResponse({"agent": agent.agent_id, "role_characters": len(agent.role)})


class SetPermissions(Operation):
    manage_rooms: bool | None = None
    broadcast: bool | None = None


@api_view(("POST",))
def agent_permissions(request: HttpRequest, lobby: str, agent_id: str) -> JsonResponse:
    _require_operator(request)
    args = parse_arguments(SetPermissions, json_body(request))
    agent = operator.set_permissions(
        lobby, agent_id, manage_rooms=args.manage_rooms, broadcast=args.broadcast
    )
    return JsonResponse(
        {
            "agent": agent.agent_id,
            "permissions": {"manage_rooms": agent.manage_rooms, "broadcast": agent.broadcast},
        }
    )


@api_view(("POST",))
def agent_action(request: HttpRequest, lobby: str, agent_id: str, action: str) -> JsonResponse:
    _require_operator(request)
    if action == "rotate":
        return JsonResponse(
            _credential_answer(lobby, agent_id, operator.rotate_credential(lobby, agent_id))
        )
    if action == "disable":
        return JsonResponse({"disabled": agent_id, "held": operator.disable_agent(lobby, agent_id)})
    if action == "enable":
        operator.enable_agent(lobby, agent_id)
        return JsonResponse({"enabled": agent_id})
    if action == "reset-runtime":
        return JsonResponse(
            {"reset": agent_id, "retired_runtime_id": operator.reset_runtime(lobby, agent_id)}
        )
    raise BrokerError(404, "unknown_action", f"no agent action {action!r}")


@api_view(("GET",))
def status(request: HttpRequest) -> JsonResponse:
    _require_operator(request)
    name = request.GET.get("lobby") or None
    if name:
        operator.lobby_named(name)
    return JsonResponse(selectors.status(name))


# ---------------------------------------------------------------- console (accounts, tickets)


class SaveAccount(Operation):
    email: bounded_text(254)
    enabled: bool | None = None
    may_create_lobbies: bool | None = None


class SetOwner(Operation):
    email: bounded_text(254)


class Repository(Operation):
    repository: bounded_text(140)


def _account_entry(account: Any) -> dict[str, Any]:
    return {
        "email": account.email,
        "enabled": account.enabled,
        "may_create_lobbies": account.may_create_lobbies,
    }


@api_view(("POST",))
def accounts(request: HttpRequest) -> JsonResponse:
    """Create an account or change it; disabling ends its sessions and hand-offs."""
    from console.actions import accounts as account_actions

    _require_operator(request)
    args = parse_arguments(SaveAccount, json_body(request))
    account, created = account_actions.save_account(
        args.email, enabled=args.enabled, may_create_lobbies=args.may_create_lobbies
    )
    return JsonResponse(
        {**_account_entry(account), "created": created}, status=201 if created else 200
    )


@api_view(("PUT",))
def lobby_owner(request: HttpRequest, lobby: str) -> JsonResponse:
    from console.actions import accounts as account_actions

    _require_operator(request)
    args = parse_arguments(SetOwner, json_body(request))
    account = account_actions.set_owner(lobby, args.email)
    return JsonResponse({"lobby": lobby, "owner": account.email})


@api_view(("POST", "DELETE"))
def repositories(request: HttpRequest, lobby: str) -> JsonResponse:
    from console.actions import accounts as account_actions

    _require_operator(request)
    args = parse_arguments(Repository, json_body(request))
    if request.method == "POST":
        created = account_actions.approve_repository(lobby, args.repository)
        return JsonResponse(
            {"lobby": lobby, "approved": args.repository.strip()}, status=201 if created else 200
        )
    account_actions.withdraw_repository(lobby, args.repository)
    return JsonResponse({"lobby": lobby, "withdrawn": args.repository.strip()})


@api_view(("POST",))
def settings_ticket(request: HttpRequest) -> JsonResponse:
    """A one-minute, single-use ticket for `pocolobby settings` (local broker only)."""
    from console import local
    from pocolobby.hosts import hosted

    _require_operator(request)
    if hosted():
        raise BrokerError(
            404, "not_local", "a hosted broker's owners sign in with email; tickets are local"
        )
    return JsonResponse({"ticket": local.issue_ticket(), "expires_in": local.TICKET_SECONDS})

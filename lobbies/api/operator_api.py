"""The operator's API under /v1/admin, authenticated by the admin token; `pocolobby` calls it."""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from django.conf import settings
from django.http import HttpRequest
from pydantic import Field, StringConstraints, model_validator

from lobbies import agent_selectors, attachment_selectors
from lobbies.access.secret_files import admin_token
from lobbies.actions import (
    continuity,
    enrollment,
    operator,
    owner,
    owner_messages,
    restore,
    restore_commands,
    rooms,
    team,
)
from lobbies.api import answers, operator_answers
from lobbies.api.answers import at
from lobbies.api.catalog import parse_arguments
from lobbies.api.http import Documented, JsonAnswer, api_view, bearer_token, json_body
from lobbies.api.schemas import MessageId, Operation, TeamManifest, bounded_text
from lobbies.errors import BrokerError, ErrorCode


@functools.cache
def _admin_token_digest() -> bytes:
    return hashlib.sha256(admin_token(settings.DATA_DIR).encode()).digest()


def require_operator(request: HttpRequest) -> None:
    """Refuse anything but the broker's admin token (compared in constant time)."""
    presented = hashlib.sha256(bearer_token(request).encode("utf-8", "surrogatepass")).digest()
    if not hmac.compare_digest(presented, _admin_token_digest()):
        raise BrokerError(401, ErrorCode.INVALID_TOKEN, "this is not the broker's admin token")


class CreateLobby(Operation):
    name: str


class AddAgent(Operation):
    agent_id: str
    description: Annotated[str, bounded_text(200)] = ""
    role: Annotated[str, bounded_text(32_768)] = ""
    manage_rooms: bool = False
    broadcast: bool = False


def admin(
    method: str,
    answer: answers.AnswerShape,
    body: type[Operation] | None = None,
    *,
    statuses: tuple[int, ...] = (200,),
    errors: tuple[int, ...] = (404, 409),
    **kwargs: Any,
) -> Documented:
    """An operation of the operator's routes as the document shows it: the admin token."""
    return Documented(
        method, answer, body=body, statuses=statuses, errors=errors, auth="admin", **kwargs
    )


@api_view(
    ("GET", "POST"),
    admin("GET", operator_answers.LobbyList, errors=(), summary="List the lobbies"),
    admin(
        "POST",
        operator_answers.LobbyEntry,
        CreateLobby,
        statuses=(201,),
        errors=(409,),
        summary="Create a lobby",
    ),
)
def lobbies(request: HttpRequest) -> JsonAnswer:
    require_operator(request)
    if request.method == "POST":
        args = parse_arguments(CreateLobby, json_body(request))
        lobby = operator.create_lobby(args.name)
        return JsonAnswer(agent_selectors.lobby_entry(lobby), status=201)
    return JsonAnswer(
        {"lobbies": [agent_selectors.lobby_entry(lobby) for lobby in agent_selectors.all_lobbies()]}
    )


@api_view(("DELETE",), admin("DELETE", operator_answers.Deleted))
def lobby(request: HttpRequest, lobby: str) -> JsonAnswer:
    """Delete a lobby for good: its agents, tokens and messages; the name is retired."""
    require_operator(request)
    operator.delete_lobby(lobby)
    return JsonAnswer({"deleted": lobby})


@api_view(
    ("GET",),
    admin(
        "GET", operator_answers.LobbyAttachments, summary="A lobby's attachment metadata and usage"
    ),
)
def lobby_attachments(request: HttpRequest, lobby: str) -> JsonAnswer:
    """Attachment metadata and usage; no route gives the owner or operator any content."""
    require_operator(request)
    return JsonAnswer(attachment_selectors.lobby_attachments(operator.lobby_named(lobby)))


@api_view(
    ("GET", "POST"),
    admin(
        "GET",
        operator_answers.OperatorAgentList,
        summary="List a lobby's agents, disabled ones too",
    ),
    admin(
        "POST",
        operator_answers.Credential,
        AddAgent,
        statuses=(201,),
        summary="Add an agent; its token is shown once",
    ),
)
def agents(request: HttpRequest, lobby: str) -> JsonAnswer:
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
        return JsonAnswer(_credential_answer(lobby, agent.agent_id, token), status=201)
    return JsonAnswer({"agents": agent_selectors.operator_agents(operator.lobby_named(lobby))})


def _credential_answer(lobby: str, agent_id: str, token: str) -> operator_answers.Credential:
    return {"lobby": lobby, "agent": agent_id, "token": token}


@api_view(("DELETE",), admin("DELETE", operator_answers.Removed))
def agent(request: HttpRequest, lobby: str, agent_id: str) -> JsonAnswer:
    """Remove an agent, its tokens and its inbox; messages it sent stay."""
    require_operator(request)
    operator.remove_agent(lobby, agent_id)
    return JsonAnswer({"removed": agent_id})


class SetRole(Operation):
    role: Annotated[str, bounded_text(32_768)]


class SetPermissions(Operation):
    broadcast: bool | None = None
    manage_rooms: bool | None = None


@api_view(("POST",), admin("POST", operator_answers.RoleAnswer, SetRole))
def agent_role(request: HttpRequest, lobby: str, agent_id: str) -> JsonAnswer:
    """Set the agent's role, the owner's text its sessions load with get_context."""
    require_operator(request)
    args = parse_arguments(SetRole, json_body(request))
    agent = continuity.set_role(lobby, agent_id, args.role)
    return JsonAnswer({"agent": agent.agent_id, "role_characters": len(agent.role)})


class SetDelivery(Operation):
    paused: bool


class CancelScheduled(Operation):
    message_id: int


@api_view(("POST",), admin("POST", operator_answers.DeliveryAnswer, SetDelivery))
def lobby_delivery(request: HttpRequest, lobby: str) -> JsonAnswer:
    """Pause or resume every push in the lobby (maintenance)."""
    require_operator(request)
    args = parse_arguments(SetDelivery, json_body(request))
    return JsonAnswer(
        {"lobby": lobby, "delivery_paused": owner.set_delivery_paused(lobby, args.paused)}
    )


@api_view(("POST",), admin("POST", answers.CancelAnswer, CancelScheduled))
def lobby_cancel_scheduled(request: HttpRequest, lobby: str) -> JsonAnswer:
    """The owner's cancel of any scheduled message in the lobby."""
    require_operator(request)
    args = parse_arguments(CancelScheduled, json_body(request))
    return JsonAnswer(owner.cancel_lobby_scheduled(lobby, args.message_id))


class OwnerMessage(Operation):
    """The owner's message from the operator: `reply_to` answers that question to the owner
    (it goes to its asker), or `to` writes to an agent about anything else."""

    reply_to: MessageId | None = None
    to: Annotated[str, StringConstraints(min_length=1, max_length=40)] | None = None
    content: Annotated[str, StringConstraints(min_length=1)]
    important: bool = False
    client_request_id: Annotated[str, Field(pattern=r"^[\x21-\x7e]{1,128}$")]

    @model_validator(mode="after")
    def _one_addressee(self) -> OwnerMessage:
        if (self.reply_to is None) == (self.to is None):
            raise ValueError("give reply_to (the question it answers) or to (an agent), not both")
        return self


@api_view(
    ("POST",),
    admin(
        "POST",
        operator_answers.OwnerMessageSent,
        OwnerMessage,
        errors=(404, 409, 413, 429, 507),
        summary="Answer an agent's question to the owner, or write to an agent, as the "
        "lobby's owner (pocolobby lobby reply / tell)",
    ),
)
def lobby_owner_message(request: HttpRequest, lobby: str) -> JsonAnswer:
    """The owner's message, sent as the dashboard's reply box sends it (audited, idempotent
    by `client_request_id`); a `reply_to` that is no question to the owner in this lobby is
    refused and nothing is stored."""
    require_operator(request)
    args = parse_arguments(OwnerMessage, json_body(request))
    named = operator.lobby_named(lobby)
    if args.reply_to is not None:
        answered = owner_messages.answer_question(
            named,
            args.reply_to,
            content=args.content,
            important=args.important,
            client_request_id=args.client_request_id,
            actor_kind=operator.OPERATOR,
        )
        to, outcome, before = answered.asker, answered.outcome, answered.answered_before
    else:
        to, before = args.to or "", None
        outcome = owner_messages.send_owner_message(
            named,
            to=to,
            content=args.content,
            important=args.important,
            client_request_id=args.client_request_id,
            actor_kind=operator.OPERATOR,
        )
    answer: operator_answers.OwnerMessageSent = {
        "lobby": named.name,
        "to": to,
        "message_id": outcome.message.pk,
        "reply_to": args.reply_to,
        "answered_before": before,
        "duplicate": outcome.duplicate,
    }
    return JsonAnswer(answer)


# What an action answers: the TypedDict its `AgentAction.answer` names.
AgentRoute = Callable[[HttpRequest, str, str], Mapping[str, object]]


@dataclass(frozen=True)
class AgentAction:
    """One `POST …/agents/<agent_id>/<action>`: what it runs, takes and answers."""

    run: AgentRoute
    answer: answers.AnswerShape
    summary: str
    body: type[Operation] | None = None


def _rotate(request: HttpRequest, lobby: str, agent_id: str) -> operator_answers.Credential:
    return _credential_answer(lobby, agent_id, operator.rotate_credential(lobby, agent_id))


class Enroll(Operation):
    expires_minutes: int = Field(
        enrollment.DEFAULT_MINUTES,
        description=f"Minutes until the code expires, 1-{enrollment.MAX_MINUTES} (7 days)",
    )


def _enroll(request: HttpRequest, lobby: str, agent_id: str) -> operator_answers.EnrollmentCode:
    args = parse_arguments(Enroll, json_body(request))
    issued = enrollment.enroll_agent(lobby, agent_id, args.expires_minutes)
    return {
        "lobby": lobby,
        "agent": agent_id,
        "code": issued.code,
        "expires_at": at(issued.expires_at),
    }


def _disable(request: HttpRequest, lobby: str, agent_id: str) -> operator_answers.Disabled:
    return {"disabled": agent_id, "held": operator.disable_agent(lobby, agent_id)}


def _enable(request: HttpRequest, lobby: str, agent_id: str) -> operator_answers.Enabled:
    operator.enable_agent(lobby, agent_id)
    return {"enabled": agent_id}


def _cancel_scheduled(
    request: HttpRequest, lobby: str, agent_id: str
) -> operator_answers.CancelledForAgent:
    counts = owner.cancel_agent_scheduled(lobby, agent_id)
    return {"agent": agent_id, "messages": counts["messages"], "schedules": counts["schedules"]}


def _reset_runtime(
    request: HttpRequest, lobby: str, agent_id: str
) -> operator_answers.RuntimeReset:
    return {"reset": agent_id, "retired_runtime_id": operator.reset_runtime(lobby, agent_id)}


def _hand_over(request: HttpRequest, lobby: str, agent_id: str) -> operator_answers.HandedOver:
    handed = operator.hand_over(lobby, agent_id)
    return {
        "agent": agent_id,
        "runtime_id": handed.runtime_id,
        "retired_runtime_id": handed.retired_runtime_id,
    }


def _resting(resting: bool) -> AgentRoute:
    def run(request: HttpRequest, lobby: str, agent_id: str) -> operator_answers.Resting:
        operator.agent_named(lobby, agent_id)  # an unknown agent is 404, as for every action
        rooms.rest_agents(operator.operator_changer(lobby), [agent_id], resting, None)
        return {"agent": agent_id, "resting": resting}

    return run


def _retry_notifications(
    request: HttpRequest, lobby: str, agent_id: str
) -> operator_answers.Retried:
    operator.retry_notifications(lobby, agent_id)
    return {"retried": agent_id}


def _permissions(
    request: HttpRequest, lobby: str, agent_id: str
) -> operator_answers.PermissionsAnswer:
    args = parse_arguments(SetPermissions, json_body(request))
    agent = operator.set_permissions(
        lobby, agent_id, broadcast=args.broadcast, manage_rooms=args.manage_rooms
    )
    return {"agent": agent_id, "broadcast": agent.broadcast, "manage_rooms": agent.manage_rooms}


AGENT_ACTIONS: dict[str, AgentAction] = {
    "rotate": AgentAction(
        _rotate,
        operator_answers.Credential,
        "Revoke the agent's tokens and issue a new one, shown once",
    ),
    "disable": AgentAction(
        _disable,
        operator_answers.Disabled,
        "Disable the agent: its tokens are refused and its unseen copies held",
    ),
    "enable": AgentAction(_enable, operator_answers.Enabled, "Enable a disabled agent again"),
    "cancel-scheduled": AgentAction(
        _cancel_scheduled,
        operator_answers.CancelledForAgent,
        "Cancel every schedule and waiting scheduled message the agent sent",
    ),
    "enroll": AgentAction(
        _enroll,
        operator_answers.EnrollmentCode,
        "Issue a one-time code `pocolobby join` redeems for the agent's token (an earlier "
        "unredeemed code stops working; the agent's tokens are revoked at redemption)",
        Enroll,
    ),
    "reset-runtime": AgentAction(
        _reset_runtime,
        operator_answers.RuntimeReset,
        "Retire the conversation that holds the agent, so another may bind it",
    ),
    "hand-over": AgentAction(
        _hand_over,
        operator_answers.HandedOver,
        "Give the agent to the new conversation waiting for it; the holder is retired",
    ),
    "rest": AgentAction(
        _resting(True),
        operator_answers.Resting,
        "Rest the agent: nothing is pushed to it, messages still queue",
    ),
    "resume": AgentAction(
        _resting(False), operator_answers.Resting, "Resume a resting agent and push what waited"
    ),
    "retry-notifications": AgentAction(
        _retry_notifications,
        operator_answers.Retried,
        "Clear notification_attention_required and retry the pushes",
    ),
    "permissions": AgentAction(
        _permissions,
        operator_answers.PermissionsAnswer,
        "Grant or withdraw broadcast and manage_rooms",
        SetPermissions,
    ),
}


@api_view(
    ("POST",),
    *(
        admin("POST", action.answer, action.body, bind=(("action", name),), summary=action.summary)
        for name, action in AGENT_ACTIONS.items()
    ),
)
def agent_action(request: HttpRequest, lobby: str, agent_id: str, action: str) -> JsonAnswer:
    require_operator(request)
    chosen = AGENT_ACTIONS.get(action)
    if chosen is None:
        raise BrokerError(404, ErrorCode.UNKNOWN_ACTION, f"no agent action {action!r}")
    return JsonAnswer(chosen.run(request, lobby, agent_id))


class ApplyTeam(Operation):
    manifest: TeamManifest
    prune: bool = False
    dry_run: bool = False
    expires_minutes: Annotated[int, Field(ge=1, le=enrollment.MAX_MINUTES)] = (
        enrollment.DEFAULT_MINUTES
    )


@api_view(
    ("POST",),
    admin(
        "POST",
        operator_answers.TeamApplied,
        ApplyTeam,
        summary="Make a lobby's agents and rooms match a team manifest (pocolobby team apply)",
    ),
)
def team_apply(request: HttpRequest) -> JsonAnswer:
    """Create the lobby if needed, add or change its agents and rooms, and with `prune` remove
    agents and archive rooms the manifest leaves out; `dry_run` only says what would change.
    All or nothing: one refused change leaves the store as it was."""
    require_operator(request)
    args = parse_arguments(ApplyTeam, json_body(request), within="manifest")
    return JsonAnswer(
        team.apply_team(
            args.manifest,
            prune=args.prune,
            dry_run=args.dry_run,
            expires_minutes=args.expires_minutes,
        )
    )


class StatusQuery(Operation):
    """`?lobby=NAME` narrows the status to one lobby."""

    lobby: Annotated[str, bounded_text(200)] | None = None


@api_view(("GET",), admin("GET", operator_answers.BrokerStatus, query=StatusQuery, errors=(404,)))
def status(request: HttpRequest) -> JsonAnswer:
    """The broker's lobbies and agents with their counts and runtime bindings."""
    require_operator(request)
    name = parse_arguments(StatusQuery, request.GET.dict(), from_strings=True).lobby or None
    if name:
        operator.lobby_named(name)
    return JsonAnswer({**agent_selectors.status(name), "broker": restore.state_entry()})


@api_view(("POST",), admin("POST", operator_answers.RestoreFinished, errors=(409,)))
def restore_finish(request: HttpRequest) -> JsonAnswer:
    """`pocolobby restore --finish`: reopen a restored store to agents."""
    require_operator(request)
    return JsonAnswer(restore_commands.finish_restore())

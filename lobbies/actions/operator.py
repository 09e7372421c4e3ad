"""The operator's operations (admin token): lobbies, agents and credentials, each audited."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from lobbies.access.tokens import new_token
from lobbies.actions import attachments
from lobbies.actions.audit import record_audit
from lobbies.actions.rooms import Changer
from lobbies.errors import ErrorCode, conflict, not_found
from lobbies.models import (
    ActorKind,
    Agent,
    AuditAction,
    Credential,
    DeletedLobby,
    Delivery,
    HeldReason,
    Lobby,
    RetiredRuntime,
    hold_copies,
)
from lobbies.names import OWNER_SENDER, check_agent_name, check_lobby_name
from lobbies.push.events import announce_catalog_on_commit, close_sockets_on_commit
from lobbies.push.presence import conversation_key, waiting_runtime

OPERATOR = ActorKind.OPERATOR


def lobby_named(name: str) -> Lobby:
    lobby = Lobby.objects.filter(name=name).first()
    if lobby is None:
        raise not_found(ErrorCode.UNKNOWN_LOBBY, f"no lobby named {name!r}")
    return lobby


def agent_named(lobby_name: str, agent_id: str) -> Agent:
    agent = (
        Agent.objects.select_related("lobby")
        .filter(lobby__name=lobby_name, agent_id=agent_id)
        .first()
    )
    if agent is None or agent_id == OWNER_SENDER:
        lobby_named(lobby_name)
        raise not_found(ErrorCode.UNKNOWN_AGENT, f"no agent {agent_id!r} in lobby {lobby_name!r}")
    return agent


def check_new_lobby_name(name: str) -> str:
    """The name rules, the reserved names and the retired names; forms check before creating."""
    check_lobby_name(name)
    if DeletedLobby.objects.filter(name=name).exists():
        raise conflict(
            ErrorCode.LOBBY_NAME_RETIRED, f"lobby name {name!r} belonged to a deleted lobby"
        )
    if Lobby.objects.filter(name=name).exists():
        raise conflict(ErrorCode.LOBBY_EXISTS, f"lobby {name!r} already exists")
    return name


def operator_changer(lobby_name: str, account: str = "") -> Changer:
    """The operator as the actor of a lobby-wide change (resting agents)."""
    lobby = lobby_named(lobby_name)
    return Changer(lobby.pk, lobby.name, OPERATOR, account)


def create_lobby(name: str, *, actor_kind: ActorKind = OPERATOR, account: str = "") -> Lobby:
    """Create a lobby; an account creating its own (console) is audited as that account."""
    check_new_lobby_name(name)
    try:
        with transaction.atomic():
            lobby = Lobby.objects.create(name=name, created_at=timezone.now())
            record_audit(
                actor_kind, AuditAction.LOBBY_CREATED, lobby_name=name, target=name, account=account
            )
    except IntegrityError:
        raise conflict(ErrorCode.LOBBY_EXISTS, f"lobby {name!r} already exists") from None
    return lobby


def delete_lobby(name: str, *, actor_kind: ActorKind = OPERATOR, account: str = "") -> None:
    """Hard delete in one transaction; the name is kept so no new lobby inherits it."""
    with transaction.atomic():
        lobby = lobby_named(name)
        counts = {"agents": lobby.agents.count(), "messages": lobby.messages.count()}
        hashes = attachments.hashes_of_lobby(lobby.pk)
        lobby.delete()
        attachments.forget_lobby_contents(hashes)
        DeletedLobby.objects.create(name=name, deleted_at=timezone.now())
        record_audit(
            actor_kind,
            AuditAction.LOBBY_DELETED,
            lobby_name=name,
            target=name,
            account=account,
            detail=counts,
        )


def _locked(agent: Agent) -> Agent:
    """The agent re-read under a row lock, so a check and its change see the same state."""
    return Agent.objects.select_for_update(of=("self",)).select_related("lobby").get(pk=agent.pk)


def issue_credential(agent: Agent) -> str:
    token, digest = new_token()
    Credential.objects.create(agent=agent, token_hash=digest, created_at=timezone.now())
    return token


def add_agent(
    lobby_name: str,
    agent_id: str,
    *,
    description: str = "",
    role: str = "",
    manage_rooms: bool = False,
    broadcast: bool = False,
) -> tuple[Agent, str]:
    """Admit an agent and issue its first token, which is returned once and never stored."""
    check_agent_name(agent_id)
    with transaction.atomic():
        lobby = lobby_named(lobby_name)
        if Agent.objects.filter(lobby=lobby, agent_id=agent_id).exists():
            raise conflict(
                ErrorCode.AGENT_EXISTS, f"agent {agent_id!r} already exists in {lobby_name!r}"
            )
        agent = Agent.objects.create(
            lobby=lobby,
            agent_id=agent_id,
            description=description,
            role=role,
            manage_rooms=manage_rooms,
            broadcast=broadcast,
            created_at=timezone.now(),
        )
        token = issue_credential(agent)
        record_audit(
            OPERATOR,
            AuditAction.AGENT_ADDED,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            detail={"manage_rooms": manage_rooms, "broadcast": broadcast},
        )
    return agent, token


def replace_credential(agent: Agent, why: str) -> tuple[str, int]:
    """Revoke every token of the agent, issue a new one and release the binding (its streams
    close saying `why`); the new token and how many were revoked. In the caller's transaction."""
    revoked = Credential.objects.filter(agent=agent, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    token = issue_credential(agent)
    Agent.objects.filter(pk=agent.pk).update(runtime_id=None, runtime_bound_at=None)
    close_sockets_on_commit(agent.pk, ErrorCode.TOKEN_REVOKED, why)
    return token, revoked


def rotate_credential(lobby_name: str, agent_id: str, *, account: str = "") -> str:
    """Revoke every token of the agent and issue a new one; the binding is released."""
    with transaction.atomic():
        agent = agent_named(lobby_name, agent_id)
        token, revoked = replace_credential(agent, "the owner rotated this agent's token")
        record_audit(
            OPERATOR,
            AuditAction.CREDENTIAL_ROTATED,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            account=account,
            detail={"revoked": revoked},
        )
    return token


def retire_runtime(agent: Agent) -> str | None:
    """Retire the bound runtime for good and clear what it claimed (owner requests)."""
    retired = agent.runtime_id
    if retired:
        RetiredRuntime.objects.get_or_create(
            agent=agent, runtime_id=retired, defaults={"retired_at": timezone.now()}
        )
    Agent.objects.filter(pk=agent.pk).update(
        runtime_id=None,
        runtime_bound_at=None,
        runtime_generation=agent.runtime_generation + 1,
        owner_request_count=0,
        owner_request_line="",
        owner_requests_updated_at=None,
    )
    return retired


def reset_runtime(lobby_name: str, agent_id: str, *, account: str = "") -> str | None:
    with transaction.atomic():
        agent = agent_named(lobby_name, agent_id)
        retired = retire_runtime(agent)
        close_sockets_on_commit(
            agent.pk, ErrorCode.RUNTIME_RETIRED, "the owner reset this agent's runtime"
        )
        record_audit(
            OPERATOR,
            AuditAction.RUNTIME_RESET,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            account=account,
            detail={"runtime_id": retired},
        )
    return retired


@dataclass(frozen=True)
class HandOver:
    """The owner's hand over: which conversation now holds the agent, which one lost it."""

    agent_id: str
    runtime_id: str
    retired_runtime_id: str | None


def hand_over(
    lobby_name: str,
    agent_id: str,
    *,
    actor_kind: ActorKind = OPERATOR,
    account: str = "",
    shown: str | None = None,
) -> HandOver:
    """Give the agent to the new conversation waiting for it, without restarting it.

    The holder is fenced exactly as by `reset_runtime`: its runtime is retired for good, the
    generation moves on and its sockets are closed. The waiting runtime is bound (without a
    bound time: its next claim, a few seconds later, binds it and bootstraps it). `shown`
    (the dashboard's, `conversation_key`) names the waiting conversation the owner saw: the
    latest to ask is the one waiting, so another may have taken its place since.
    """
    with transaction.atomic():
        agent = _locked(agent_named(lobby_name, agent_id))
        waiting = waiting_runtime(agent, timezone.now())
        if waiting is None:
            raise conflict(
                ErrorCode.NOTHING_WAITING,
                f"no new conversation is waiting to take over {agent_id}: start it (its bridge "
                f"asks for the agent every few seconds, and `pocolobby status {lobby_name}` "
                "shows it waiting), then hand over",
            )
        if shown is not None and conversation_key(waiting) != shown:
            raise conflict(
                ErrorCode.WAITING_CHANGED,
                f"another conversation is waiting to take over {agent_id} than the one this page "
                "showed (a newer one asked since); nothing changed: look at the new one, then "
                "hand over if it is the one you mean",
            )
        retired = retire_runtime(agent)
        Agent.objects.filter(pk=agent.pk).update(
            runtime_id=waiting,
            runtime_first_ready_at=None,
            runtime_released_at=None,
            waiting_runtime_id=None,
            waiting_since=None,
            waiting_seen_at=None,
        )
        close_sockets_on_commit(
            agent.pk,
            ErrorCode.RUNTIME_RETIRED,
            f"the owner handed {agent_id} over to a new conversation",
        )
        record_audit(
            actor_kind,
            AuditAction.RUNTIME_HANDED_OVER,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            account=account,
            detail={"runtime_id": waiting, "retired_runtime_id": retired},
        )
    return HandOver(agent_id, waiting, retired)


def disable_agent(lobby_name: str, agent_id: str, *, account: str = "") -> int:
    """Stop all delivery to the agent; its undelivered copies stay visible as held.

    Copies still waiting for their delivery time are held too: the scheduled hold is the only
    one `deliver_due` lifts, so a disabled agent is never handed them later.
    """
    with transaction.atomic():
        agent = _locked(agent_named(lobby_name, agent_id))
        if not agent.enabled:
            raise conflict(ErrorCode.ALREADY_DISABLED, f"agent {agent_id!r} is already disabled")
        held = hold_copies(Delivery.objects.filter(recipient=agent), HeldReason.RECIPIENT_DISABLED)
        Agent.objects.filter(pk=agent.pk).update(enabled=False)
        retire_runtime(agent)
        close_sockets_on_commit(agent.pk, ErrorCode.AGENT_DISABLED, "the owner disabled this agent")
        record_audit(
            OPERATOR,
            AuditAction.AGENT_DISABLED,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            account=account,
            detail={"held": held},
        )
    return held


def enable_agent(lobby_name: str, agent_id: str, *, account: str = "") -> None:
    with transaction.atomic():
        agent = _locked(agent_named(lobby_name, agent_id))
        if agent.enabled:
            raise conflict(ErrorCode.ALREADY_ENABLED, f"agent {agent_id!r} is already enabled")
        Agent.objects.filter(pk=agent.pk).update(enabled=True)
        record_audit(
            OPERATOR,
            AuditAction.AGENT_ENABLED,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            account=account,
        )


def remove_agent(lobby_name: str, agent_id: str, *, account: str = "") -> None:
    """Delete the identity, its tokens and inbox; messages it sent stay under its name."""
    with transaction.atomic():
        agent = agent_named(lobby_name, agent_id)
        close_sockets_on_commit(agent.pk, ErrorCode.AGENT_REMOVED, "the owner removed this agent")
        agent.delete()
        record_audit(
            OPERATOR,
            AuditAction.AGENT_REMOVED,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            account=account,
        )


def set_permissions(
    lobby_name: str,
    agent_id: str,
    *,
    broadcast: bool | None = None,
    manage_rooms: bool | None = None,
    actor_kind: ActorKind = OPERATOR,
    account: str = "",
) -> Agent:
    """Grant or withdraw `broadcast` and `manage_rooms`; None leaves a permission as it is.

    The agent's bridges are told its tools changed (a catalog frame) and reload them."""
    with transaction.atomic():
        agent = _locked(agent_named(lobby_name, agent_id))
        wanted = {
            "broadcast": agent.broadcast if broadcast is None else broadcast,
            "manage_rooms": agent.manage_rooms if manage_rooms is None else manage_rooms,
        }
        if wanted == {"broadcast": agent.broadcast, "manage_rooms": agent.manage_rooms}:
            raise conflict(ErrorCode.PERMISSIONS_UNCHANGED, f"agent {agent_id!r} already has them")
        Agent.objects.filter(pk=agent.pk).update(**wanted)
        announce_catalog_on_commit(agent.pk)  # its bridges reload the tools without reconnecting
        record_audit(
            actor_kind,
            AuditAction.PERMISSIONS_CHANGED,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            account=account,
            detail=wanted,
        )
    agent.broadcast, agent.manage_rooms = wanted["broadcast"], wanted["manage_rooms"]
    return agent


def set_description(lobby_name: str, agent_id: str, description: str) -> Agent:
    """The one line peers see beside the agent (list_agents); the agent cannot change it."""
    with transaction.atomic():
        agent = _locked(agent_named(lobby_name, agent_id))
        Agent.objects.filter(pk=agent.pk).update(description=description)
        record_audit(
            OPERATOR,
            AuditAction.DESCRIPTION_SET,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            detail={"characters": len(description)},
        )
    agent.description = description
    return agent


def retry_notifications(
    lobby_name: str, agent_id: str, *, actor_kind: ActorKind = OPERATOR, account: str = ""
) -> None:
    """The owner's explicit retry: a fresh notification budget, due at the next tick.

    Clears `notification_attention_required`; what is pending stays pending.
    """
    with transaction.atomic():
        agent = _locked(agent_named(lobby_name, agent_id))
        if not agent.enabled:
            raise conflict(
                ErrorCode.ALREADY_DISABLED, f"agent {agent_id!r} is disabled; enable it first"
            )
        Agent.objects.filter(pk=agent.pk).update(
            notify_attempts=0,
            notify_next_at=timezone.now(),
            notification_attention_required=False,
            bootstrap_attempts=0,
        )
        record_audit(
            actor_kind,
            AuditAction.NOTIFICATIONS_RETRIED,
            lobby_name=lobby_name,
            agent_id=agent_id,
            target=agent_id,
            account=account,
            detail={"attention_was_required": agent.notification_attention_required},
        )

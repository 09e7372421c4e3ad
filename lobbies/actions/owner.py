"""Owner controls (seed section 7): what the operator does to agents without a coordinator.

Each is one audited transaction and sets the same state the agent-side tool would: resting is
`rest_agents`'s, cancelling is `cancel_scheduled`'s. A lobby's delivery pause stops pushes
(sends are still accepted and queue); resuming wakes every agent of the lobby.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from lobbies.actions.audit import record_audit
from lobbies.actions.operator import agent_named, lobby_named
from lobbies.actions.schedules import cancel_scheduled
from lobbies.errors import ErrorCode, not_found
from lobbies.models import (
    ActorKind,
    Agent,
    AgentActivity,
    AuditAction,
    Lobby,
    Message,
    Schedule,
    ScheduleStatus,
)
from lobbies.push.events import announce_catalog_on_commit, wake_recipients_on_commit

OPERATOR = ActorKind.OPERATOR


def _audit(
    actor_kind: ActorKind,
    account: str,
    action: AuditAction,
    lobby: str,
    agent_id: str = "",
    detail: dict[str, Any] | None = None,
) -> None:
    record_audit(
        actor_kind,
        action,
        lobby_name=lobby,
        agent_id=agent_id,
        target=agent_id or lobby,
        account=account,
        detail=detail,
    )


def cancel_agent_scheduled(
    lobby_name: str, agent_id: str, *, actor_kind: ActorKind = OPERATOR, account: str = ""
) -> dict[str, int]:
    """Cancel every scheduled message and active daily schedule the agent set."""
    with transaction.atomic():
        agent = agent_named(lobby_name, agent_id)
        messages = list(
            Message.objects.filter(sender=agent, scheduled_pending=True).values_list(
                "pk", flat=True
            )
        )
        schedules = list(
            Schedule.objects.filter(sender=agent, status=ScheduleStatus.ACTIVE).values_list(
                "pk", flat=True
            )
        )
        for message_id in messages:
            cancel_scheduled(agent, message_id=message_id, schedule_id=None)
        for schedule_id in schedules:
            cancel_scheduled(agent, message_id=None, schedule_id=schedule_id)
        counts = {"messages": len(messages), "schedules": len(schedules)}
        _audit(actor_kind, account, AuditAction.SCHEDULED_CANCELLED, lobby_name, agent_id, counts)
    return counts


def cancel_lobby_scheduled(
    lobby_name: str, message_id: int, *, actor_kind: ActorKind = OPERATOR, account: str = ""
) -> dict[str, Any]:
    """The owner's cancel of any agent's scheduled message in the lobby."""
    with transaction.atomic():
        lobby = lobby_named(lobby_name)
        message = (
            Message.objects.select_related("sender").filter(pk=message_id, lobby=lobby).first()
        )
        if message is None or message.sender is None:
            raise not_found(
                ErrorCode.UNKNOWN_MESSAGE, f"no message {message_id} in lobby {lobby_name!r}"
            )
        answer = cancel_scheduled(message.sender, message_id=message_id, schedule_id=None)
        _audit(
            actor_kind,
            account,
            AuditAction.SCHEDULED_CANCELLED,
            lobby_name,
            message.sender.agent_id,
            {"message_id": message_id},
        )
    return answer


def set_delivery_paused(
    lobby_name: str, paused: bool, *, actor_kind: ActorKind = OPERATOR, account: str = ""
) -> bool:
    """Maintenance: pause or resume every push in the lobby; resuming wakes its agents."""
    with transaction.atomic():
        lobby = lobby_named(lobby_name)
        Lobby.objects.filter(pk=lobby.pk).update(delivery_paused=paused)
        if not paused:
            pks = Agent.objects.filter(lobby=lobby).values_list("pk", flat=True)
            wake_recipients_on_commit([(pk, "info") for pk in pks])
        action = AuditAction.DELIVERY_PAUSED if paused else AuditAction.DELIVERY_RESUMED
        _audit(actor_kind, account, action, lobby_name)
    return paused


def set_agents_may_watch(
    lobby_name: str, allowed: bool, *, actor_kind: ActorKind = OPERATOR, account: str = ""
) -> bool:
    """The owner's setting: every agent may call watch_agents (not only manage_rooms). Each
    agent's bridges reload the tools; withdrawn, those without manage_rooms stop watching."""
    with transaction.atomic():
        lobby = lobby_named(lobby_name)
        Lobby.objects.filter(pk=lobby.pk).update(agents_may_watch=allowed)
        if not allowed:
            AgentActivity.objects.filter(
                agent__lobby=lobby, agent__manage_rooms=False, watching__isnull=False
            ).update(watching=None)
        for pk in Agent.objects.filter(lobby=lobby).values_list("pk", flat=True):
            announce_catalog_on_commit(pk)
        action = AuditAction.WATCHING_ALLOWED if allowed else AuditAction.WATCHING_WITHDRAWN
        _audit(actor_kind, account, action, lobby_name)
    return allowed

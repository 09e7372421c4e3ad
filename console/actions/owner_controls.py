"""The owner controls on a lobby's settings page (issue 16): the same action functions the
CLI, the admin API and Django admin call, run as the owner's account.

Each re-checks inside one transaction that the actor still owns the lobby, then calls the
lobbies action, which writes the change and its audit row with the account as the actor.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from console.actions.lobby_settings import Actor, owned
from lobbies.actions import operator, owner, rooms
from lobbies.models import Agent


def _agent(actor: Actor, lobby_id: int, agent_id: str) -> Agent:
    """The lobby's agent (never the reserved `owner` row), once the actor's ownership holds."""
    lobby = owned(actor, lobby_id)
    return operator.agent_named(lobby.name, agent_id)


def set_resting(actor: Actor, lobby_id: int, agent_id: str, rest: bool) -> None:
    """Rest or resume one agent: the state `rest_agents` sets, audited as `agents_rested`."""
    with transaction.atomic():
        agent = _agent(actor, lobby_id, agent_id)
        changer = rooms.Changer(agent.lobby_id, agent.lobby.name, actor.kind, actor.email)
        rooms.rest_agents(changer, [agent_id], rest, None)


def retry_notifications(actor: Actor, lobby_id: int, agent_id: str) -> None:
    with transaction.atomic():
        agent = _agent(actor, lobby_id, agent_id)
        operator.retry_notifications(
            agent.lobby.name, agent_id, actor_kind=actor.kind, account=actor.email
        )


def cancel_agent_scheduled(actor: Actor, lobby_id: int, agent_id: str) -> dict[str, int]:
    with transaction.atomic():
        agent = _agent(actor, lobby_id, agent_id)
        return owner.cancel_agent_scheduled(
            agent.lobby.name, agent_id, actor_kind=actor.kind, account=actor.email
        )


def set_permissions(
    actor: Actor, lobby_id: int, agent_id: str, *, broadcast: bool, manage_rooms: bool
) -> Agent:
    with transaction.atomic():
        agent = _agent(actor, lobby_id, agent_id)
        return operator.set_permissions(
            agent.lobby.name,
            agent_id,
            broadcast=broadcast,
            manage_rooms=manage_rooms,
            actor_kind=actor.kind,
            account=actor.email,
        )


def set_delivery_paused(actor: Actor, lobby_id: int, paused: bool) -> bool:
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        return owner.set_delivery_paused(
            lobby.name, paused, actor_kind=actor.kind, account=actor.email
        )


def set_agents_may_watch(actor: Actor, lobby_id: int, allowed: bool) -> bool:
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        return owner.set_agents_may_watch(
            lobby.name, allowed, actor_kind=actor.kind, account=actor.email
        )


def cancel_scheduled_message(actor: Actor, lobby_id: int, message_id: int) -> dict[str, Any]:
    with transaction.atomic():
        lobby = owned(actor, lobby_id)
        return owner.cancel_lobby_scheduled(
            lobby.name, message_id, actor_kind=actor.kind, account=actor.email
        )

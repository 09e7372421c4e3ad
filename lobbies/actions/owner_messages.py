"""The lobby's human owner answering an agent: the agents' own send, with sender `owner`.

The owner is a reserved per-lobby agent row named `owner` that is never enabled, never holds
a token, is never a recipient and never listed, so a reply gets the same validation, bounds,
idempotency and transaction as every agent's send (docs/DECISIONS.md "The owner as a sender").
"""

from __future__ import annotations

from django.db import transaction

from lobbies.actions.audit import record_audit
from lobbies.actions.messages import (
    SendOutcome,
    address_direct,
    broadcast,
    owner_agent,
    send,
)
from lobbies.catalog import parse_arguments
from lobbies.models import ActorKind, Agent, AuditAction, Lobby
from lobbies.names import OWNER_SENDER
from lobbies.schemas import Broadcast, SendMessage


def owner_sender(lobby: Lobby) -> Agent:
    """The lobby's `owner` row, made on the first reply; call inside a transaction."""
    return owner_agent(lobby)


def send_owner_message(
    lobby: Lobby,
    *,
    to: str,
    content: str,
    important: bool,
    client_request_id: str,
    actor_kind: ActorKind,
    account: str = "",
) -> SendOutcome:
    """Send the owner's message to one agent and audit it, in one transaction.

    The caller has checked, inside its own transaction, that the actor still owns the lobby.
    A retry with the same form key returns the stored message and audits nothing again.
    """
    args = parse_arguments(
        SendMessage,
        {
            "to": to,
            "content": content,
            "priority": "important" if important else "info",
            "client_request_id": client_request_id,
        },
    )
    with transaction.atomic():
        sender = owner_sender(lobby)
        outcome = send(sender, args, lambda: address_direct(sender, args.to))
        _audit(outcome, lobby, actor_kind, account, target=to, priority=args.priority)
    return outcome


def send_owner_broadcast(
    lobby: Lobby,
    *,
    content: str,
    important: bool,
    client_request_id: str,
    actor_kind: ActorKind,
    account: str = "",
) -> SendOutcome:
    """The owner's message to every enabled agent: the agents' `broadcast` action (its
    bounds, fan-out cap and idempotency), audited once; the caller has checked ownership."""
    args = parse_arguments(
        Broadcast,
        {
            "content": content,
            "priority": "important" if important else "info",
            "client_request_id": client_request_id,
        },
    )
    with transaction.atomic():
        outcome = broadcast(owner_sender(lobby), args)
        _audit(
            outcome,
            lobby,
            actor_kind,
            account,
            target="*",
            priority=args.priority,
            broadcast=True,
            recipients=len(outcome.deliveries),
        )
    return outcome


def _audit(
    outcome: SendOutcome,
    lobby: Lobby,
    actor_kind: ActorKind,
    account: str,
    *,
    target: str,
    **detail: object,
) -> None:
    """One audit row per owner message; a retry that returned the stored one audits nothing."""
    if outcome.duplicate:
        return
    record_audit(
        actor_kind,
        AuditAction.OWNER_MESSAGE_SENT,
        lobby_name=lobby.name,
        agent_id=OWNER_SENDER,
        target=target,
        account=account,
        detail={"message_id": outcome.message.pk, **detail},
    )

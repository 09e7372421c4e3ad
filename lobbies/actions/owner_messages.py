"""The lobby's human owner answering an agent: the agents' own send, with sender `owner`.

The owner is a reserved per-lobby agent row named `owner` that is never enabled, never holds
a token and is never listed, so a reply gets the same validation, bounds, idempotency and
transaction as every agent's send (docs/DECISIONS.md "The owner as a sender"). Agents' messages
to `owner` wait on that row until the owner answers their sender: the answer acknowledges them
(their senders get the read receipts they asked for), so they never fill the row's queue.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from lobbies import question_selectors
from lobbies.actions.audit import record_audit
from lobbies.actions.messages import (
    SendOutcome,
    address_direct,
    broadcast,
    owner_agent,
    send,
)
from lobbies.actions.receipts import acknowledge_in_transaction
from lobbies.api.catalog import parse_arguments
from lobbies.api.schemas import Broadcast, SendMessage
from lobbies.errors import ErrorCode, conflict, not_found
from lobbies.models import (
    ActorKind,
    Agent,
    AuditAction,
    Delivery,
    DeliveryState,
    Lobby,
    Message,
    Scope,
)
from lobbies.names import OWNER_SENDER


def owner_sender(lobby: Lobby) -> Agent:
    """The lobby's `owner` row, made on the first reply; call inside a transaction."""
    return owner_agent(lobby)


def _answered(owner: Agent, sender_name: str | None) -> None:
    """The owner wrote to `sender_name` (None: to every agent): what that agent (every agent)
    wrote to the owner is answered, so acknowledged. Inside the reply's transaction."""
    owner = Agent.objects.select_for_update().get(pk=owner.pk)
    waiting = Delivery.objects.filter(recipient=owner, state=DeliveryState.PENDING)
    if sender_name is not None:
        waiting = waiting.filter(message__sender__agent_id=sender_name)
    ids = list(waiting.values_list("message_id", flat=True))
    if ids:
        acknowledge_in_transaction(owner, ids)


def send_owner_message(
    lobby: Lobby,
    *,
    to: str,
    content: str,
    important: bool,
    client_request_id: str,
    actor_kind: ActorKind,
    account: str = "",
    reply_to: int | None = None,
) -> SendOutcome:
    """Send the owner's message to one agent and audit it, in one transaction.

    The caller has checked, inside its own transaction, that the actor still owns the lobby.
    A retry with the same form key returns the stored message and audits nothing again.
    `reply_to` names the agent's question it answers (lobbies/question_selectors.py).
    """
    fields: dict[str, object] = {
        "to": to,
        "content": content,
        "priority": "important" if important else "info",
        "client_request_id": client_request_id,
    }
    if reply_to is not None:
        fields["reply_to"] = reply_to
    args = parse_arguments(SendMessage, fields)
    with transaction.atomic():
        sender = owner_sender(lobby)
        outcome = send(sender, args, lambda: address_direct(sender, args.to))
        _answered(sender, args.to)
        _audit(outcome, lobby, actor_kind, account, target=to, priority=args.priority)
    return outcome


@dataclass(frozen=True)
class QuestionAnswered:
    asker: str
    outcome: SendOutcome
    answered_before: int | None  # the owner's earlier answer to the question, if any


def answer_question(
    lobby: Lobby,
    question_id: int,
    *,
    content: str,
    important: bool,
    client_request_id: str,
    actor_kind: ActorKind,
    account: str = "",
) -> QuestionAnswered:
    """The owner's answer to an agent's question to the owner (lobbies/question_selectors.py):
    sent to its asker with `reply_to` naming it, in one transaction with the check that it is
    such a question in this lobby. `pocolobby lobby reply`; the caller has checked ownership."""
    with transaction.atomic():
        question = Message.objects.filter(pk=question_id).select_related("lobby").first()
        if question is None:
            raise not_found(
                ErrorCode.UNKNOWN_MESSAGE,
                f"no message {question_id}: it was never stored, or it expired",
            )
        if question.lobby_id != lobby.pk:
            raise not_found(
                ErrorCode.UNKNOWN_MESSAGE,
                f"message {question_id} is in lobby {question.lobby.name!r}, not {lobby.name!r}",
            )
        states = question_selectors.question_states([question_id])
        if question_id not in states:
            raise conflict(
                ErrorCode.NOT_A_QUESTION,
                f"message {question_id} is not a question to the owner: {_why_not(question)}",
            )
        outcome = send_owner_message(
            lobby,
            to=question.sender_name,
            content=content,
            important=important,
            client_request_id=client_request_id,
            actor_kind=actor_kind,
            account=account,
            reply_to=question_id,
        )
    before = states[question_id]
    return QuestionAnswered(
        question.sender_name, outcome, None if before == outcome.message.pk else before
    )


def _why_not(message: Message) -> str:
    """Why a message of the lobby is no question to the owner, for the refusal."""
    to_owner = (
        message.scope == Scope.DIRECT
        and Delivery.objects.filter(message=message, recipient__agent_id=OWNER_SENDER).exists()
    )
    if not to_owner:
        return "it was not sent to the owner"
    if message.cancelled_at is not None:
        return "it was cancelled"
    if message.sender_id is None:
        return "its sender was removed from the lobby"
    return f"it expects no reply (kind {message.kind or 'none'}, reply_expected false)"


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
        sender = owner_sender(lobby)
        outcome = broadcast(sender, args)
        _answered(sender, None)
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

"""Acknowledgment: an agent marks the messages it handled seen, each with a receipt event,
and owes the senders who asked a pushed read receipt."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lobbies.actions.runtime import RuntimeCaller, check_fence
from lobbies.errors import ErrorCode, conflict
from lobbies.models import (
    Agent,
    Delivery,
    DeliveryState,
    HeldReason,
    Message,
    ReceiptEvent,
    SeenReceipt,
)
from lobbies.push.events import wake_dispatcher_on_commit


def _owe_seen_receipts(agent: Agent, message_ids: list[int], now: datetime) -> None:
    """Senders who asked (notify_when_seen) are owed a pushed receipt; notes to self are not."""
    asked = (
        Message.objects.filter(pk__in=message_ids, notify_when_seen=True)
        .exclude(sender=agent)
        .exclude(sender__isnull=True)
    )
    owed = [
        SeenReceipt(sender_id=sender_id, message_id=mid, seen_by=agent.agent_id, seen_at=now)
        for mid, sender_id in asked.values_list("pk", "sender_id")
    ]
    if owed:
        SeenReceipt.objects.bulk_create(owed)
        wake_dispatcher_on_commit()


def _record_progress(agent: Agent, now: datetime) -> None:
    """An acknowledgment shows the agent takes turns: its notification budget starts over."""
    unresolved = Delivery.objects.filter(
        recipient=agent, state=DeliveryState.PENDING, pushed_generation__isnull=False
    ).exists()
    agent.last_progress_at = now
    agent.notify_attempts = 0
    agent.notification_attention_required = False
    agent.notify_next_at = (
        now + timedelta(seconds=settings.BOUNDS.notify_retry_seconds[0]) if unresolved else None
    )
    agent.save(
        update_fields=[
            "receipt_sequence",
            "last_progress_at",
            "notify_attempts",
            "notification_attention_required",
            "notify_next_at",
        ]
    )


@dataclass(frozen=True)
class AcknowledgeOutcome:
    acknowledged: list[int]
    unknown_message_ids: list[int]
    held_message_ids: list[int]
    receipt_sequence: int


def acknowledge_messages(
    agent: Agent, message_ids: list[int], runtime: RuntimeCaller | None = None
) -> AcknowledgeOutcome:
    """Mark exactly the named deliveries seen, each with a receipt event; all or nothing."""
    with transaction.atomic():
        locked = Agent.objects.select_for_update().get(pk=agent.pk)
        check_fence(locked, runtime)
        return acknowledge_in_transaction(locked, message_ids)


def acknowledge_in_transaction(agent: Agent, message_ids: list[int]) -> AcknowledgeOutcome:
    """The acknowledgment itself, for a caller that holds the agent's row lock."""
    ids = list(dict.fromkeys(message_ids))
    deliveries = {
        d.message_id: d
        for d in Delivery.objects.filter(recipient=agent, message_id__in=ids).select_for_update()
    }
    missing = [i for i in ids if i not in deliveries]
    # Ids of other lobbies read as unknown: their existence is not this agent's to learn.
    stored = set(
        Message.objects.filter(pk__in=missing, lobby_id=agent.lobby_id).values_list("pk", flat=True)
    )
    if stored:
        first = min(stored)
        raise conflict(
            ErrorCode.NOT_A_RECIPIENT,
            f"message {first} was not delivered to you; acknowledge only your own inbox",
            message_ids=sorted(stored),
        )
    not_yet = [i for i, d in deliveries.items() if d.held_reason == HeldReason.SCHEDULED]
    if not_yet:
        raise conflict(
            ErrorCode.NOT_YET_DELIVERED,
            f"message {not_yet[0]} is scheduled and not delivered yet; nothing was recorded",
            message_ids=not_yet,
        )
    to_mark = [i for i in ids if i in deliveries and deliveries[i].state == DeliveryState.PENDING]
    now = timezone.now()
    if to_mark:
        Delivery.objects.filter(recipient=agent, message_id__in=to_mark).update(
            state=DeliveryState.SEEN, agent_seen_at=now
        )
        first_sequence = agent.receipt_sequence + 1
        ReceiptEvent.objects.bulk_create(
            ReceiptEvent(agent=agent, sequence=first_sequence + n, message_id=mid, created_at=now)
            for n, mid in enumerate(to_mark)
        )
        agent.receipt_sequence += len(to_mark)
        _owe_seen_receipts(agent, to_mark, now)
    _record_progress(agent, now)
    held = [i for i in ids if i in deliveries and deliveries[i].state == DeliveryState.HELD]
    return AcknowledgeOutcome(
        acknowledged=[i for i in ids if i in deliveries and i not in held],
        unknown_message_ids=missing,
        held_message_ids=held,
        receipt_sequence=agent.receipt_sequence,
    )

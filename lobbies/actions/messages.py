"""Sending and acknowledging messages: accepted means committed, refused means nothing stored."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from lobbies import store
from lobbies.actions.runtime import RuntimeCaller, check_fence
from lobbies.errors import BrokerError, conflict, not_found
from lobbies.events import wake_dispatcher_on_commit, wake_recipients_on_commit
from lobbies.models import (
    Agent,
    Delivery,
    DeliveryState,
    HeldReason,
    Kind,
    Message,
    ReceiptEvent,
    Scope,
    SeenReceipt,
)
from lobbies.schemas import SendMessage

NO_REPLY_KINDS = frozenset({Kind.NOTICE, Kind.REPORT})


@dataclass(frozen=True)
class SendOutcome:
    message: Message
    deliveries: list[Delivery]
    duplicate: bool


def request_hash(args: SendMessage) -> str:
    """A digest of the whole validated request, to tell an identical retry from a changed one."""
    canonical = json.dumps(args.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _original_for_retry(sender: Agent, args: SendMessage, digest: str) -> SendOutcome | None:
    original = store.select(
        Message,
        "t.sender_id = %s AND t.client_request_id = %s",
        [sender.pk, args.client_request_id],
    )
    if original is None:
        return None
    if original.request_hash != digest:
        raise conflict(
            "idempotency_conflict",
            f"client_request_id {args.client_request_id!r} was already used for a different "
            f"request (message {original.pk}); use a new id for a new message",
            message_id=original.pk,
        )
    deliveries = list(
        original.deliveries.select_related("recipient").order_by("recipient__agent_id")
    )
    return SendOutcome(original, deliveries, duplicate=True)


def _recipient(sender: Agent, name: str) -> Agent:
    recipient = store.select(Agent, "t.lobby_id = %s AND t.agent_id = %s", [sender.lobby_id, name])
    if recipient is None:
        raise not_found("unknown_recipient", f"no agent {name!r} in lobby {sender.lobby.name!r}")
    if not recipient.enabled:
        raise conflict("recipient_disabled", f"agent {name!r} is disabled and receives nothing")
    return recipient


def _check_reply_to(sender: Agent, message_id: int | None) -> None:
    """A reply may name an expired message, but never a stored one the sender cannot see."""
    if message_id is None:
        return
    target = (
        Message.objects.filter(pk=message_id, lobby_id=sender.lobby_id).only("sender_id").first()
    )
    if target is None:
        return  # expired, or of another lobby: indistinguishable, and harmless to name
    visible = (
        target.sender_id == sender.pk
        or Delivery.objects.filter(message_id=message_id, recipient=sender).exists()
    )
    if not visible:
        raise not_found("unknown_message", f"reply_to names message {message_id}, not yours to see")


def _check_send_rate(sender: Agent, now: timezone.datetime) -> None:
    limit = settings.BOUNDS.sends_per_minute
    window_start = now - timedelta(minutes=1)
    (count,) = store.scalar_row(
        "SELECT COUNT(*) FROM lobbies_message WHERE sender_id = %s AND created_at > %s",
        [sender.pk, store.as_db_time(window_start)],
    )
    if count >= limit:
        oldest = (
            Message.objects.filter(sender=sender, created_at__gt=window_start)
            .order_by("created_at")
            .values_list("created_at", flat=True)
            .first()
        ) or now
        retry_after = max(1, math.ceil((oldest - window_start).total_seconds()))
        raise BrokerError(
            429,
            "rate_limited",
            f"you sent {count} messages in the last minute; the limit is {limit} "
            f"(POCOLOBBY_SENDS_PER_MINUTE)",
            retry_after=retry_after,
        )


# Held deliveries that will never reach the recipient do not take its room.
_QUEUED = (
    "recipient_id = %s AND (state = 'pending' OR (state = 'held' AND held_reason = 'scheduled'))"
)


def _check_capacity(recipient: Agent, content_bytes: int) -> None:
    bounds = settings.BOUNDS
    count, size = store.scalar_row(
        f"SELECT COUNT(*), COALESCE(SUM(content_bytes), 0) FROM lobbies_delivery WHERE {_QUEUED}",  # noqa: S608
        [recipient.pk],
    )
    if count + 1 > bounds.queued_messages_per_recipient:
        raise BrokerError(
            507,
            "recipient_capacity",
            f"{recipient.agent_id} already has {count} unacknowledged messages; the limit is "
            f"{bounds.queued_messages_per_recipient} (POCOLOBBY_QUEUED_MESSAGES)",
        )
    if size + content_bytes > bounds.queued_bytes_per_recipient:
        raise BrokerError(
            507,
            "recipient_capacity",
            f"{recipient.agent_id} already has {size} bytes unacknowledged; this message would "
            f"pass the limit of {bounds.queued_bytes_per_recipient} bytes (POCOLOBBY_QUEUED_BYTES)",
        )


def _next_sequence(lobby_id: int) -> int:
    """Bump the lobby's message sequence; on PostgreSQL this also serializes sends per lobby."""
    return int(
        store.scalar_row(
            "UPDATE lobbies_lobby SET message_sequence = message_sequence + 1 "
            "WHERE id = %s RETURNING message_sequence",
            [lobby_id],
        )[0]
    )


def send_message(
    sender: Agent, args: SendMessage, runtime: RuntimeCaller | None = None
) -> SendOutcome:
    """Store a direct message and its recipient row in one transaction; answer after commit."""
    digest = request_hash(args)
    original = _original_for_retry(sender, args, digest)
    if original is not None:
        return original
    recipient = _recipient(sender, args.to)
    _check_reply_to(sender, args.reply_to)
    content_bytes = len(args.content.encode("utf-8"))
    try:
        with transaction.atomic():
            sequence = _next_sequence(sender.lobby_id)
            if runtime is not None:
                check_fence(Agent.objects.select_for_update().get(pk=sender.pk), runtime)
            now = timezone.now()
            _check_send_rate(sender, now)
            _check_capacity(recipient, content_bytes)
            message = store.insert(
                Message,
                {
                    "lobby_id": sender.lobby_id,
                    "sequence": sequence,
                    "sender_id": sender.pk,
                    "sender_name": sender.agent_id,
                    "scope": Scope.DIRECT,
                    "kind": args.kind,
                    "reply_expected": _reply_expected(args),
                    "priority": args.priority,
                    "content": args.content,
                    "content_bytes": content_bytes,
                    "fields": args.fields.model_dump(exclude_none=True) if args.fields else {},
                    "reply_to": args.reply_to,
                    "correlation_id": args.correlation_id or "",
                    "client_request_id": args.client_request_id,
                    "notify_when_seen": args.notify_when_seen,
                    "request_hash": digest,
                    "created_at": now,
                },
            )
            delivery = store.insert(
                Delivery,
                {
                    "message_id": message.pk,
                    "recipient_id": recipient.pk,
                    "state": DeliveryState.PENDING,
                    "content_bytes": content_bytes,
                    "delivered_at": now,
                },
            )
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE lobbies_agent SET last_progress_at = %s WHERE id = %s",
                    [store.as_db_time(now), sender.pk],
                )
            if recipient.pk != sender.pk:
                wake_recipients_on_commit([(recipient.pk, args.priority)])
    except IntegrityError:
        # A concurrent identical request won the (sender, client_request_id) race.
        original = _original_for_retry(sender, args, digest)
        if original is None:
            raise
        return original
    delivery.recipient = recipient
    return SendOutcome(message, [delivery], duplicate=False)


def _owe_seen_receipts(agent: Agent, message_ids: list[int], now: timezone.datetime) -> None:
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


def _record_progress(agent: Agent, now: timezone.datetime) -> None:
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


def _reply_expected(args: SendMessage) -> bool:
    if args.kind is None:
        return False
    if args.reply_expected is not None:
        return args.reply_expected
    return args.kind not in NO_REPLY_KINDS


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
            "not_a_recipient",
            f"message {first} was not delivered to you; acknowledge only your own inbox",
            message_ids=sorted(stored),
        )
    not_yet = [i for i, d in deliveries.items() if d.held_reason == HeldReason.SCHEDULED]
    if not_yet:
        raise conflict(
            "not_yet_delivered",
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

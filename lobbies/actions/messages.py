"""Sending and acknowledging messages: accepted means committed, refused means nothing stored."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from lobbies import capacity, hooks
from lobbies.access.permissions import require_permission
from lobbies.actions import attachments
from lobbies.actions.idempotency import check_same_request, request_hash
from lobbies.actions.runtime import RuntimeCaller, fence
from lobbies.api.schemas import Broadcast, SendMessage, SendOptions, SendRoomMessage
from lobbies.errors import BrokerError, ErrorCode, bad_request, conflict, forbidden, not_found
from lobbies.fastlane import queries, store
from lobbies.models import (
    Agent,
    Delivery,
    DeliveryState,
    HeldReason,
    Kind,
    Lobby,
    Message,
    Room,
    RoomMember,
    Schedule,
    Scope,
    hold_copies,
    is_silent_self_note,
)
from lobbies.names import OWNER_SENDER
from lobbies.push.events import wake_recipients_on_commit

NO_REPLY_KINDS = frozenset({Kind.NOTICE, Kind.REPORT})
MAX_SCHEDULE_AHEAD = timedelta(days=30)
MAX_WAITING_SCHEDULED = 100


@dataclass(frozen=True)
class SendOutcome:
    message: Message
    deliveries: list[Delivery]
    duplicate: bool


def _original_for_retry(sender: Agent, args: SendOptions, digest: str) -> SendOutcome | None:
    original = queries.sent_with_request_id(sender.pk, args.client_request_id)
    if original is None:
        return None
    check_same_request(
        args.client_request_id,
        original.request_hash,
        digest,
        kind="message",
        original_pk=original.pk,
    )
    deliveries = list(
        original.deliveries.select_related("recipient").order_by("recipient__agent_id")
    )
    return SendOutcome(original, deliveries, duplicate=True)


@dataclass(frozen=True)
class Addressing:
    """Who a send reaches, resolved at acceptance: a snapshot, never re-read later."""

    scope: Scope
    recipients: list[Agent]
    room: Room | None = None
    addressed_to: tuple[str, ...] = ()


def owner_agent(lobby: Lobby) -> Agent:
    """The lobby's `owner` row, made on first use (the owner's first reply, or an agent's
    first message to the owner). It is never enabled, never holds a token, never joins a
    room and is never listed; it holds `broadcast`, so the owner's broadcast passes the
    agents' own check (docs/DECISIONS.md "The owner as a sender")."""
    agent, _ = Agent.objects.get_or_create(
        lobby=lobby,
        agent_id=OWNER_SENDER,
        defaults={
            "enabled": False,
            "broadcast": True,
            "description": "The lobby's human owner, answering from the dashboard",
            "created_at": timezone.now(),
        },
    )
    if not agent.broadcast:  # a row made before the owner could broadcast
        Agent.objects.filter(pk=agent.pk).update(broadcast=True)
        agent.broadcast = True
    agent.lobby = lobby
    return agent


def address_direct(sender: Agent, name: str) -> Addressing:
    if name == OWNER_SENDER:
        if sender.agent_id == OWNER_SENDER:
            raise bad_request("the owner does not write to itself", code=ErrorCode.RESERVED_NAME)
        # The lobby's human owner: stored for the Messages page, a push if it expects a
        # reply (lobbies/hooks.py); its copy stays pending, since no session reads it.
        return Addressing(Scope.DIRECT, [owner_agent(sender.lobby)])
    recipient = queries.agent_named(sender.lobby_id, name)
    if recipient is None:
        raise not_found(
            ErrorCode.UNKNOWN_RECIPIENT, f"no agent {name!r} in lobby {sender.lobby.name!r}"
        )
    if not recipient.enabled:
        raise conflict(
            ErrorCode.RECIPIENT_DISABLED, f"agent {name!r} is disabled and receives nothing"
        )
    return Addressing(Scope.DIRECT, [recipient])


def address_room(sender: Agent, room_id: str, addressed_to: list[str] | None) -> Addressing:
    """The room's enabled members at acceptance (offline ones too), without the sender.

    Named addressees must each be another enabled member, or the whole send is refused: a
    message never reaches only part of its list.
    """
    room = Room.objects.filter(lobby_id=sender.lobby_id, room_id=room_id).first()
    if room is None:
        raise not_found(
            ErrorCode.UNKNOWN_ROOM, f"no room {room_id!r} in lobby {sender.lobby.name!r}"
        )
    members = list(
        Agent.objects.filter(room_memberships__room=room, enabled=True)
        .exclude(pk=sender.pk)
        .order_by("agent_id")
    )
    if not RoomMember.objects.filter(room=room, agent=sender).exists():
        raise forbidden(ErrorCode.NOT_A_MEMBER, f"you are not a member of room {room_id!r}")
    if addressed_to is None:
        return Addressing(Scope.ROOM, members, room)
    by_name = {m.agent_id: m for m in members}
    names = list(dict.fromkeys(addressed_to))
    strangers = [n for n in names if n not in by_name]
    if strangers:
        raise bad_request(
            f"addressed_to names {', '.join(repr(n) for n in strangers)}, not another enabled "
            f"member of room {room_id!r}; nothing was sent",
            code=ErrorCode.NOT_A_MEMBER,
        )
    return Addressing(Scope.ROOM, [by_name[n] for n in names], room, tuple(names))


def address_broadcast(sender: Agent) -> Addressing:
    require_permission(sender, "broadcast", "broadcast")
    agents = list(
        Agent.objects.filter(lobby_id=sender.lobby_id, enabled=True)
        .exclude(pk=sender.pk)
        .order_by("agent_id")
    )
    return Addressing(Scope.BROADCAST, agents)


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
        raise not_found(
            ErrorCode.UNKNOWN_MESSAGE, f"reply_to names message {message_id}, not yours to see"
        )


def _refuse_over_rate(sender: Agent, count: int, now: datetime) -> None:
    """`count` messages in the minute before `now`: at the limit, refuse with a retry time."""
    limit = settings.BOUNDS.sends_per_minute
    window_start = now - timedelta(minutes=1)
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
            ErrorCode.RATE_LIMITED,
            f"you sent {count} messages in the last minute; the limit is {limit} "
            f"(POCOLOBBY_SENDS_PER_MINUTE)",
            retry_after=retry_after,
        )


def _check_capacity(recipient: Agent, content_bytes: int, queue: queries.Queue | None) -> None:
    """Refuse a send the recipient's queue has no room for; `queue` if already counted."""
    bounds = settings.BOUNDS
    if queue is None:
        queue = queries.recipient_queue(recipient.pk)
    count, size = queue.messages, queue.bytes
    if count + 1 > bounds.queued_messages_per_recipient:
        raise BrokerError(
            507,
            ErrorCode.RECIPIENT_CAPACITY,
            f"{recipient.agent_id} already has {count} unacknowledged messages; the limit is "
            f"{bounds.queued_messages_per_recipient} (POCOLOBBY_QUEUED_MESSAGES)",
        )
    if size + content_bytes > bounds.queued_bytes_per_recipient:
        raise BrokerError(
            507,
            ErrorCode.RECIPIENT_CAPACITY,
            f"{recipient.agent_id} already has {size} bytes unacknowledged; this message would "
            f"pass the limit of {bounds.queued_bytes_per_recipient} bytes (POCOLOBBY_QUEUED_BYTES)",
        )


def _check_deliver_at(sender: Agent, deliver_at: datetime | None, now: datetime) -> None:
    if deliver_at is None:
        return
    if deliver_at <= now:
        raise bad_request(
            "deliver_at is in the past; leave it out to send now", code=ErrorCode.INVALID_DELIVER_AT
        )
    if deliver_at > now + MAX_SCHEDULE_AHEAD:
        raise bad_request(
            "deliver_at is more than 30 days ahead; use a daily schedule for lasting reminders",
            code=ErrorCode.INVALID_DELIVER_AT,
        )
    waiting = Message.objects.filter(sender=sender, scheduled_pending=True).count()
    if waiting >= MAX_WAITING_SCHEDULED:
        raise conflict(
            ErrorCode.TOO_MANY_SCHEDULED,
            f"you already have {waiting} scheduled messages waiting; the limit is "
            f"{MAX_WAITING_SCHEDULED} (cancel some with cancel_scheduled)",
        )


def _check_supersedes(sender: Agent, message_id: int | None) -> None:
    if message_id is None:
        return
    target = Message.objects.filter(pk=message_id, lobby_id=sender.lobby_id).first()
    if target is not None and target.sender_id != sender.pk:
        raise forbidden(
            ErrorCode.NOT_YOUR_MESSAGE, f"message {message_id} is not yours to supersede"
        )


def _hold_superseded(sender: Agent, message_id: int) -> None:
    """Unseen copies of the replaced message are held; whoever saw it gets the new one."""
    hold_copies(
        Delivery.objects.filter(message_id=message_id, message__sender=sender),
        HeldReason.SUPERSEDED,
    )


def send(
    sender: Agent,
    args: SendOptions,
    resolve: Callable[[], Addressing],
    runtime: RuntimeCaller | None = None,
    *,
    schedule: Schedule | None = None,
    slot: datetime | None = None,
    late: bool = False,
) -> SendOutcome:
    """Accept one message for its recipients in one transaction; `stored` only after commit.

    Every send tool and every schedule occurrence comes through here, so idempotency,
    authorization, bounds and the durable fanout exist once. An identical retry of an
    accepted send gets the original whatever changed since (limits, the recipient, the
    runtime): the (sender, client_request_id) constraint refuses the second copy, and the
    original is looked up only then or when the send is refused, so a new send pays for
    no lookup.
    """
    digest = request_hash(args)
    if args.attachments:
        # A retry of a stored send is answered first: it needs no upload, and whatever
        # changed since (an expired pending upload, a bound) cannot refuse it.
        original = _original_for_retry(sender, args, digest)
        if original is not None:
            return original
    try:
        return _accept(sender, args, digest, resolve, runtime, schedule, slot, late)
    except (BrokerError, IntegrityError):
        original = _original_for_retry(sender, args, digest)
        if original is None:
            raise
        return original


def _accept(
    sender: Agent,
    args: SendOptions,
    digest: str,
    resolve: Callable[[], Addressing],
    runtime: RuntimeCaller | None,
    schedule: Schedule | None,
    slot: datetime | None,
    late: bool,
) -> SendOutcome:
    """The send's rules checked, then its rows stored and its recipients woken."""
    addressing = resolve()
    _check_may_send(sender, args, addressing)
    content_bytes = len(args.content.encode("utf-8"))
    with transaction.atomic():
        now = timezone.now()
        sequence = _check_room_to_send(
            sender, args, addressing, content_bytes, now, runtime=runtime, rated=schedule is None
        )
        message, deliveries = _do_store_message(
            sender, args, digest, addressing, sequence, content_bytes, now, schedule, slot, late
        )
        _do_after_storing(sender, args, addressing, message, now, schedule)
    for delivery, recipient in zip(deliveries, addressing.recipients, strict=True):
        delivery.recipient = recipient
    return SendOutcome(message, deliveries, duplicate=False)


def _check_may_send(sender: Agent, args: SendOptions, addressing: Addressing) -> None:
    """What needs no write lock: the fan-out and disk bounds, and the messages it names."""
    capacity.check_send(addressing.scope, len(addressing.recipients))
    _check_reply_to(sender, args.reply_to)
    _check_supersedes(sender, args.supersedes)


def _check_room_to_send(
    sender: Agent,
    args: SendOptions,
    addressing: Addressing,
    content_bytes: int,
    now: datetime,
    *,
    runtime: RuntimeCaller | None,
    rated: bool,
) -> int:
    """Inside the write transaction: take the lobby's next sequence and refuse the send the
    lobby, the sender's runtime, its rate or a recipient's queue has no room for. A
    schedule's occurrence is not `rated`. Returns the message's sequence."""
    recipients = addressing.recipients
    single = recipients[0].pk if len(recipients) == 1 else None
    opened = queries.open_send(
        sender.lobby_id,
        sender.pk,
        rate_since=now - timedelta(minutes=1) if rated else None,
        queue_of=single,
    )
    capacity.check_lobby_room(opened.stored)
    fence(sender, runtime)
    _check_deliver_at(sender, args.deliver_at, now)
    if opened.sent_last_minute is not None:
        _refuse_over_rate(sender, opened.sent_last_minute, now)
    for recipient in recipients:
        _check_capacity(recipient, content_bytes, opened.queue)
    return opened.sequence


def _do_store_message(
    sender: Agent,
    args: SendOptions,
    digest: str,
    addressing: Addressing,
    sequence: int,
    content_bytes: int,
    now: datetime,
    schedule: Schedule | None,
    slot: datetime | None,
    late: bool,
) -> tuple[Message, list[Delivery]]:
    """The message and one copy per recipient: held until due if it is timed."""
    scheduled = args.deliver_at is not None
    message = store.insert(
        Message,
        {
            "lobby_id": sender.lobby_id,
            "sequence": sequence,
            "sender_id": sender.pk,
            "sender_name": sender.agent_id,
            "scope": addressing.scope,
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
            "room_id": addressing.room.pk if addressing.room else None,
            "room_name": addressing.room.room_id if addressing.room else "",
            "addressed_to": list(addressing.addressed_to),
            "supersedes": args.supersedes,
            # A daily occurrence carries its slot as its due time, like any timed message.
            "deliver_at": slot if slot is not None else args.deliver_at,
            "scheduled_pending": scheduled,
            "delivered_at": None if scheduled else now,
            "late": late,
            "schedule_id": schedule.pk if schedule else None,
            "slot": slot,
            "created_at": now,
        },
    )
    deliveries = [
        store.insert(
            Delivery,
            {
                "message_id": message.pk,
                "recipient_id": recipient.pk,
                "state": DeliveryState.HELD if scheduled else DeliveryState.PENDING,
                "held_reason": HeldReason.SCHEDULED if scheduled else None,
                "content_bytes": content_bytes,
                "delivered_at": None if scheduled else now,
            },
        )
        for recipient in addressing.recipients
    ]
    return message, deliveries


def _do_after_storing(
    sender: Agent,
    args: SendOptions,
    addressing: Addressing,
    message: Message,
    now: datetime,
    schedule: Schedule | None,
) -> None:
    """Its files, the copies it supersedes, the sender's progress, the owner's hook and the
    recipients' wake (on commit)."""
    if args.attachments:
        # After authorization, rates and limits: a send refused for them stores nothing,
        # and this refusal (409 attachment_upload_required) rolls the message back.
        attachments.attach_to_message(sender, message.pk, args.attachments, now)
    elif schedule is not None:
        attachments.attach_schedule_files(schedule.pk, message.pk)
    if args.supersedes:
        _hold_superseded(sender, args.supersedes)
    if schedule is None:
        queries.record_progress(sender.pk, now)
    if any(r.agent_id == OWNER_SENDER for r in addressing.recipients):
        hooks.message_to_owner(message)
    if args.deliver_at is None:
        schedule_pk = schedule.pk if schedule is not None else None
        wake_recipients_on_commit(
            [
                (r.pk, args.priority)
                for r in addressing.recipients
                if r.agent_id != OWNER_SENDER
                and not is_silent_self_note(
                    sender.pk, r.pk, deliver_at=None, schedule_pk=schedule_pk
                )
            ]
        )


def send_message(
    sender: Agent, args: SendMessage, runtime: RuntimeCaller | None = None
) -> SendOutcome:
    if args.to == OWNER_SENDER and args.deliver_at is not None:
        raise bad_request(
            "a message to 'owner' goes now: the owner is told when it arrives, so leave "
            "deliver_at out; nothing was sent",
            code=ErrorCode.INVALID_DELIVER_AT,
        )
    return send(sender, args, lambda: address_direct(sender, args.to), runtime)


def send_room_message(
    sender: Agent, args: SendRoomMessage, runtime: RuntimeCaller | None = None
) -> SendOutcome:
    return send(
        sender, args, lambda: address_room(sender, args.room_id, args.addressed_to), runtime
    )


def broadcast(sender: Agent, args: Broadcast, runtime: RuntimeCaller | None = None) -> SendOutcome:
    return send(sender, args, lambda: address_broadcast(sender), runtime)


def _reply_expected(args: SendOptions) -> bool:
    if args.kind is None:
        return False
    if args.reply_expected is not None:
        return args.reply_expected
    return args.kind not in NO_REPLY_KINDS

"""Scheduled delivery and daily schedules: held by the broker, so session restarts lose nothing."""

from __future__ import annotations

import logging
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from lobbies import slots
from lobbies.access.permissions import require_permission
from lobbies.actions import attachments
from lobbies.actions.idempotency import check_same_request, request_hash
from lobbies.actions.messages import (
    MAX_SCHEDULE_AHEAD,
    address_broadcast,
    address_direct,
    address_room,
    send,
)
from lobbies.actions.runtime import RuntimeCaller, fence
from lobbies.api.schemas import (
    Broadcast,
    ScheduleMessage,
    SendMessage,
    SendRoomMessage,
    UpdateScheduled,
)
from lobbies.errors import BrokerError, ErrorCode, bad_request, conflict, not_found
from lobbies.models import (
    Agent,
    Delivery,
    DeliveryState,
    HeldReason,
    Message,
    OccurrenceOutcome,
    Schedule,
    ScheduleOccurrence,
    ScheduleStatus,
    Scope,
)
from lobbies.names import OWNER_SENDER
from lobbies.push.events import wake_recipients_on_commit

log = logging.getLogger("pocolobby.schedules")

MAX_SCHEDULES = 20


def _late(now: datetime, due: datetime) -> bool:
    """Delivered well after its time, a message says so: the broker was down then."""
    return now - due > timedelta(seconds=settings.BOUNDS.late_after_seconds)


TEMPLATE_FIELDS = (
    "content",
    "kind",
    "reply_expected",
    "priority",
    "fields",
    "notify_when_seen",
)


def _rule(
    schedule: Schedule | ScheduleMessage,
) -> tuple[ZoneInfo, list[time], frozenset[int] | None]:
    try:
        return (
            slots.load_zone(schedule.time_zone),
            slots.parse_times(schedule.times),
            slots.parse_weekdays(schedule.weekdays),
        )
    except slots.SlotError as error:
        raise bad_request(str(error), code=ErrorCode.INVALID_SCHEDULE) from None


def _check_target(sender: Agent, args: ScheduleMessage) -> None:
    """Refuse at creation what send_message would refuse: an unknown or disabled agent, an
    unknown room, a room the sender is not in; a schedule that could never deliver is not
    stored. (Each occurrence is still addressed again when it fires.)"""
    if args.to == OWNER_SENDER:
        # The owner is a person: a daily message would be an alert every day whether or not
        # anything waits. What waits on them is set_owner_requests (or one message when due).
        raise bad_request(
            "a daily schedule cannot go to the owner: say what waits on them with "
            "set_owner_requests, or send one message when it is due",
            code=ErrorCode.INVALID_ARGUMENTS,
        )
    if args.to is not None:
        address_direct(sender, args.to)
    elif args.room_id is not None:
        address_room(sender, args.room_id, args.addressed_to)
    else:
        address_broadcast(sender)


def schedule_message(
    sender: Agent, args: ScheduleMessage, runtime: RuntimeCaller | None = None
) -> tuple[Schedule, bool]:
    """Store a daily template; answers the original on an identical retry."""
    digest = request_hash(args)
    existing = Schedule.objects.filter(sender=sender, client_request_id=args.client_request_id)
    original = existing.first()
    if original is not None:
        check_same_request(
            args.client_request_id,
            original.request_hash,
            digest,
            kind="schedule",
            original_pk=original.pk,
        )
        return original, True
    zone, times, weekdays = _rule(args)
    if args.broadcast:
        require_permission(sender, "broadcast", "broadcast")
    _check_target(sender, args)
    now = timezone.now()
    template = args.model_dump(mode="json", include=set(TEMPLATE_FIELDS))
    if args.addressed_to:
        template["addressed_to"] = args.addressed_to
    scope = Scope.ROOM if args.room_id else Scope.BROADCAST if args.broadcast else Scope.DIRECT
    try:
        with transaction.atomic():
            fence(sender, runtime)
            active = Schedule.objects.select_for_update().filter(
                sender=sender, status=ScheduleStatus.ACTIVE
            )
            if active.count() >= MAX_SCHEDULES:
                raise conflict(
                    ErrorCode.TOO_MANY_SCHEDULES,
                    f"you already have {MAX_SCHEDULES} active schedules; cancel one first",
                )
            schedule = Schedule.objects.create(
                lobby_id=sender.lobby_id,
                sender=sender,
                client_request_id=args.client_request_id,
                request_hash=digest,
                scope=scope,
                target=args.to or args.room_id or "",
                template=template,
                time_zone=args.time_zone,
                times=[t.strftime("%H:%M") for t in times],
                weekdays=sorted(weekdays) if weekdays else None,
                status=ScheduleStatus.ACTIVE,
                created_at=now,
                next_slot=slots.next_slot(zone, times, weekdays, now),
            )
            if args.attachments:
                attachments.attach_to_schedule(sender, schedule.pk, args.attachments, now)
    except IntegrityError:
        return Schedule.objects.get(sender=sender, client_request_id=args.client_request_id), True
    return schedule, False


def cancel_scheduled(
    sender: Agent,
    *,
    message_id: int | None,
    schedule_id: int | None,
    runtime: RuntimeCaller | None = None,
) -> dict[str, Any]:
    """Cancel a schedule, or a scheduled message before its time. Repeating it finds it again."""
    now = timezone.now()
    with transaction.atomic():
        fence(sender, runtime)
        if schedule_id is not None:
            schedule = (
                Schedule.objects.select_for_update().filter(pk=schedule_id, sender=sender).first()
            )
            if schedule is None:
                raise not_found(ErrorCode.UNKNOWN_SCHEDULE, f"no schedule {schedule_id} of yours")
            if schedule.status == ScheduleStatus.ACTIVE:
                schedule.status, schedule.cancelled_at, schedule.next_slot = (
                    ScheduleStatus.CANCELLED,
                    now,
                    None,
                )
                schedule.save(update_fields=["status", "cancelled_at", "next_slot"])
            return {"schedule_id": schedule.pk, "status": schedule.status}
        message = (
            Message.objects.select_for_update().filter(pk=message_id, sender=sender).first()
            if message_id is not None
            else None
        )
        if message is None:
            raise not_found(ErrorCode.UNKNOWN_MESSAGE, f"no message {message_id} of yours")
        if message.cancelled_at is None:
            if not message.scheduled_pending:
                raise conflict(
                    ErrorCode.ALREADY_DELIVERED,
                    f"message {message_id} was delivered; a delivered message cannot be recalled",
                )
            Delivery.objects.filter(message=message, held_reason=HeldReason.SCHEDULED).update(
                held_reason=HeldReason.CANCELLED
            )
            message.cancelled_at, message.scheduled_pending = now, False
            message.save(update_fields=["cancelled_at", "scheduled_pending"])
        return {"message_id": message.pk, "status": "cancelled"}


def update_scheduled(
    sender: Agent, args: UpdateScheduled, runtime: RuntimeCaller | None = None
) -> Message:
    now = timezone.now()
    with transaction.atomic():
        fence(sender, runtime)
        message = (
            Message.objects.select_for_update().filter(pk=args.message_id, sender=sender).first()
        )
        if message is None:
            raise not_found(ErrorCode.UNKNOWN_MESSAGE, f"no message {args.message_id} of yours")
        if not message.scheduled_pending:
            raise conflict(
                ErrorCode.NOT_SCHEDULED,
                f"message {args.message_id} is not waiting for its time (delivered or cancelled)",
            )
        if args.deliver_at is not None:
            if not now < args.deliver_at <= now + MAX_SCHEDULE_AHEAD:
                raise bad_request(
                    "deliver_at must be in the future and at most 30 days ahead",
                    code=ErrorCode.INVALID_DELIVER_AT,
                )
            message.deliver_at = args.deliver_at
        if args.content is not None:
            message.content = args.content
            message.content_bytes = len(args.content.encode("utf-8"))
            Delivery.objects.filter(message=message).update(content_bytes=message.content_bytes)
        message.save(update_fields=["deliver_at", "content", "content_bytes"])
    return message


def deliver_due(now: datetime, limit: int = 200) -> int:
    """Clear the hold of every scheduled message whose time came; the push path does the rest."""
    due = list(
        Message.objects.filter(scheduled_pending=True, deliver_at__lte=now)
        .order_by("deliver_at")
        .values_list("pk", flat=True)[:limit]
    )
    for message_id in due:
        with transaction.atomic():
            message = (
                Message.objects.select_for_update()
                .filter(pk=message_id, scheduled_pending=True)
                .first()
            )
            if message is None or message.deliver_at is None:
                continue
            late = _late(now, message.deliver_at)
            recipients = list(
                Delivery.objects.filter(
                    message=message, held_reason=HeldReason.SCHEDULED
                ).values_list("recipient_id", flat=True)
            )
            Delivery.objects.filter(message=message, held_reason=HeldReason.SCHEDULED).update(
                state=DeliveryState.PENDING, held_reason=None, delivered_at=now
            )
            message.scheduled_pending, message.delivered_at, message.late = False, now, late
            message.save(update_fields=["scheduled_pending", "delivered_at", "late"])
            wake_recipients_on_commit([(pk, message.priority) for pk in recipients])
    return len(due)


def _occurrence_request(schedule: Schedule, slot: datetime) -> Any:
    template = dict(schedule.template)
    addressed_to = template.pop("addressed_to", None)
    common = {**template, "client_request_id": f"schedule:{schedule.pk}:{slot:%Y%m%dT%H%M%SZ}"}
    sender = schedule.sender
    if schedule.scope == Scope.ROOM:
        args = SendRoomMessage(room_id=schedule.target, addressed_to=addressed_to, **common)
        return args, lambda: address_room(sender, schedule.target, addressed_to)
    if schedule.scope == Scope.BROADCAST:
        return Broadcast(**common), lambda: address_broadcast(sender)
    return SendMessage(to=schedule.target, **common), lambda: address_direct(
        sender, schedule.target
    )


def fire_schedule(schedule_id: int, now: datetime) -> ScheduleOccurrence | None:
    """Send the latest slot that fell due (late if the broker missed it), then plan the next.

    An occurrence is authorized and addressed now, since membership and permissions may
    have changed; one that fails is skipped with its reason, and the schedule continues.
    """
    schedule = (
        Schedule.objects.select_related("sender", "sender__lobby")
        .filter(pk=schedule_id, status=ScheduleStatus.ACTIVE)
        .first()
    )
    if schedule is None or schedule.next_slot is None or schedule.next_slot > now:
        return None
    zone, times, weekdays = _rule(schedule)
    slot = slots.latest_missed(zone, times, weekdays, schedule.last_slot, schedule.created_at, now)
    next_slot = slots.next_slot(zone, times, weekdays, now)
    claimed = Schedule.objects.filter(
        pk=schedule.pk, status=ScheduleStatus.ACTIVE, next_slot=schedule.next_slot
    ).update(last_slot=slot or schedule.last_slot, next_slot=next_slot)
    if not claimed or slot is None:
        return None
    late = _late(now, slot)
    outcome, message_id, reason = OccurrenceOutcome.SENT, None, ""
    try:
        if not schedule.sender.enabled:
            raise BrokerError(403, ErrorCode.AGENT_DISABLED, "the schedule's sender is disabled")
        args, resolve = _occurrence_request(schedule, slot)
        sent = send(schedule.sender, args, resolve, schedule=schedule, slot=slot, late=late)
        message_id = sent.message.pk
    except BrokerError as error:
        outcome, reason = OccurrenceOutcome.SKIPPED, f"{error.code}: {error.message}"[:300]
    except IntegrityError:
        return None  # this slot already has its occurrence
    try:
        return ScheduleOccurrence.objects.create(
            schedule=schedule,
            slot=slot,
            outcome=outcome,
            message_id=message_id,
            reason=reason,
            late=late,
            created_at=now,
        )
    except IntegrityError:
        return None


def run_schedules(now: datetime, limit: int = 100) -> int:
    due = list(
        Schedule.objects.filter(status=ScheduleStatus.ACTIVE, next_slot__lte=now)
        .order_by("next_slot")
        .values_list("pk", flat=True)[:limit]
    )
    for schedule_id in due:
        try:
            fire_schedule(schedule_id, now)
        except Exception:
            log.exception("schedule %s failed to fire", schedule_id)
    return len(due)

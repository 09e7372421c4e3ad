"""Messages and what becomes of them: schedules, deliveries, receipts, checkpoints, notices."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from lobbies.models.agents import Agent, Lobby
from lobbies.models.choices import (
    DELIVERABLE,
    DeliveryState,
    HeldReason,
    Kind,
    NoticeKind,
    OccurrenceOutcome,
    Priority,
    ScheduleStatus,
    Scope,
    closed_set,
)
from lobbies.models.rooms import Room


class Schedule(models.Model):
    """A daily template: each occurrence becomes a real message, authorized when it fires."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="schedules")
    sender = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="schedules")
    client_request_id = models.CharField(max_length=128)
    request_hash = models.CharField(max_length=64)
    scope = models.CharField(max_length=16, choices=Scope.choices)
    # An agent id (direct) or a room id (room); empty for a broadcast.
    target = models.CharField(max_length=40, blank=True, default="")
    template = models.JSONField()
    time_zone = models.CharField(max_length=64)
    times = models.JSONField()
    weekdays = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=ScheduleStatus.choices)
    created_at = models.DateTimeField()
    cancelled_at = models.DateTimeField(null=True, blank=True)
    last_slot = models.DateTimeField(null=True, blank=True)
    next_slot = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=closed_set("scope", Scope), name="schedule_scope"),
            models.CheckConstraint(
                condition=closed_set("status", ScheduleStatus), name="schedule_status"
            ),
            models.UniqueConstraint(
                fields=["sender", "client_request_id"], name="schedule_request_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"schedule {self.pk} of {self.sender_id}"


class Message(models.Model):
    """An immutable accepted message. The sender comes from the credential, never the body."""

    # Foreign keys without an index of their own where a composite index or constraint
    # starts with the column (migration 0018): each index is a page written per send.
    lobby = models.ForeignKey(
        Lobby, on_delete=models.CASCADE, related_name="messages", db_index=False
    )  # message_sequence_unique, message_lobby_time
    sequence = models.BigIntegerField()
    sender = models.ForeignKey(
        Agent,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="sent_messages",
        db_index=False,
    )  # message_request_unique, message_sender_time
    # The sender's address at acceptance, kept when the agent is later removed.
    sender_name = models.CharField(max_length=40)
    scope = models.CharField(max_length=16, choices=Scope.choices)
    kind = models.CharField(max_length=16, choices=Kind.choices, null=True, blank=True)
    reply_expected = models.BooleanField(default=False)
    priority = models.CharField(max_length=16, choices=Priority.choices)
    content = models.TextField()
    content_bytes = models.PositiveIntegerField()
    fields = models.JSONField(default=dict, blank=True)
    reply_to = models.BigIntegerField(null=True, blank=True)
    correlation_id = models.CharField(max_length=128, blank=True, default="")
    client_request_id = models.CharField(max_length=128)
    notify_when_seen = models.BooleanField(default=False)
    # The room at acceptance, kept as history when the room is later deleted.
    room = models.ForeignKey(
        Room, on_delete=models.SET_NULL, null=True, blank=True, related_name="messages"
    )
    room_name = models.CharField(max_length=40, blank=True, default="")
    addressed_to = models.JSONField(default=list, blank=True)
    supersedes = models.BigIntegerField(null=True, blank=True)
    deliver_at = models.DateTimeField(null=True, blank=True)
    # True while its deliveries wait for deliver_at; the dispatcher's index finds due ones.
    scheduled_pending = models.BooleanField(default=False)
    # When it reached its recipients (acceptance, or a scheduled message's delivery).
    delivered_at = models.DateTimeField(null=True, blank=True, db_index=True)
    late = models.BooleanField(default=False)
    cancelled_at = models.DateTimeField(null=True, blank=True)  # message_cancelled
    schedule = models.ForeignKey(
        Schedule,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="occurrences",
        db_index=False,
    )  # message_schedule_slot_unique
    slot = models.DateTimeField(null=True, blank=True)
    # SHA-256 of the canonical request, to tell an identical retry from a changed one.
    request_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["lobby", "sequence"], name="message_sequence_unique"),
            models.UniqueConstraint(
                fields=["sender", "client_request_id"], name="message_request_unique"
            ),
            models.CheckConstraint(condition=closed_set("scope", Scope), name="message_scope"),
            models.CheckConstraint(
                condition=closed_set("kind", Kind, nullable=True), name="message_kind"
            ),
            models.CheckConstraint(
                condition=closed_set("priority", Priority), name="message_priority"
            ),
            models.UniqueConstraint(
                fields=["schedule", "slot"],
                condition=Q(schedule__isnull=False),
                name="message_schedule_slot_unique",
            ),
        ]
        indexes = [
            # Retention's sweep of cancelled messages; the rest (nearly all) are not indexed.
            models.Index(
                fields=["cancelled_at"],
                condition=Q(cancelled_at__isnull=False),
                name="message_cancelled",
            ),
            models.Index(fields=["sender", "created_at"], name="message_sender_time"),
            # The sender too, so the dashboard's strip counts sends from the index alone.
            models.Index(fields=["lobby", "created_at", "sender"], name="message_lobby_time"),
            models.Index(
                fields=["deliver_at"],
                condition=Q(scheduled_pending=True),
                name="message_scheduled_due",
            ),
            # The messages page's "important" filter: few rows, so no cost to ordinary sends.
            models.Index(
                fields=["lobby", "sequence"],
                condition=Q(priority="important"),
                name="message_important",
            ),
            # The messages page's agent, room and kind filters read newest first from these
            # and stop after a page; room and kind ones index only the rows that have them.
            models.Index(fields=["sender", "sequence"], name="message_sender_sequence"),
            models.Index(
                fields=["lobby", "room_name", "sequence"],
                condition=Q(scope="room"),
                name="message_room",
            ),
            models.Index(
                fields=["lobby", "kind", "sequence"],
                condition=Q(kind__isnull=False),
                name="message_kind",
            ),
            # The owner's replies by the question they name (lobbies/question_selectors.py):
            # only the owner's messages, so no agent's send writes to it.
            models.Index(
                fields=["reply_to"],
                condition=Q(sender_name="owner"),
                name="message_owner_reply",
            ),
        ]

    def __str__(self) -> str:
        return f"message {self.pk} from {self.sender_name}"


class Delivery(models.Model):
    """One recipient's inbox row for one message: the durable delivery queue."""

    # Indexed only as the first columns of delivery_unique and delivery_inbox (0018).
    message = models.ForeignKey(
        Message, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    recipient = models.ForeignKey(
        Agent, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    state = models.CharField(max_length=16, choices=DeliveryState.choices)
    held_reason = models.CharField(max_length=24, choices=HeldReason.choices, null=True, blank=True)
    # Copied from the message so queued-bytes checks need no join.
    content_bytes = models.PositiveIntegerField()
    delivered_at = models.DateTimeField(null=True, blank=True)
    # The runtime generation that was last sent this delivery, and when.
    pushed_generation = models.BigIntegerField(null=True, blank=True)
    pushed_at = models.DateTimeField(null=True, blank=True)
    adapter_received_at = models.DateTimeField(null=True, blank=True)
    notification_attempted_at = models.DateTimeField(null=True, blank=True)
    # The generation whose adapter confirmed the host write.
    notified_generation = models.BigIntegerField(null=True, blank=True)
    agent_seen_at = models.DateTimeField(null=True, blank=True)
    # A removed room member's copy: its history shows no body.
    redacted = models.BooleanField(default=False)

    class Meta:
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["message", "recipient"], name="delivery_unique"),
            models.CheckConstraint(
                condition=closed_set("state", DeliveryState), name="delivery_state"
            ),
            models.CheckConstraint(
                condition=closed_set("held_reason", HeldReason, nullable=True),
                name="delivery_held_reason",
            ),
            models.CheckConstraint(
                condition=(Q(state="held") & Q(held_reason__isnull=False))
                | (~Q(state="held") & Q(held_reason__isnull=True)),
                name="delivery_held_has_reason",
            ),
            models.CheckConstraint(
                condition=~Q(state="seen") | Q(agent_seen_at__isnull=False),
                name="delivery_seen_has_time",
            ),
        ]
        indexes = [
            models.Index(fields=["recipient", "state", "message"], name="delivery_inbox"),
            # last_message_at: the newest direct message each agent received.
            models.Index(fields=["recipient", "delivered_at"], name="delivery_recipient_time"),
            # The messages page's agent filter: what it received, newest message first.
            models.Index(fields=["recipient", "message"], name="delivery_recipient_message"),
            # The send path's capacity count reads only this: queued copies, with their size,
            # so a recipient's acknowledged history does not slow every send to it.
            models.Index(
                fields=["recipient", "state", "held_reason", "content_bytes"],
                name="delivery_queued",
                condition=DELIVERABLE,
            ),
        ]

    def __str__(self) -> str:
        return f"delivery of {self.message_id} to {self.recipient_id}"


def hold_copies(copies: models.QuerySet[Delivery], reason: HeldReason) -> int:
    """Hold those of `copies` that could still reach their recipient (`DELIVERABLE`): the one
    way a copy is withdrawn (superseded, room left or deleted, recipient disabled). A hold
    other than the scheduled one is final; seen copies keep their receipt. Returns how many."""
    return copies.filter(DELIVERABLE).update(state=DeliveryState.HELD, held_reason=reason)


class ReceiptEvent(models.Model):
    """An explicit `seen` receipt, numbered per agent so checkpoints can say what they cover."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="receipt_events")
    sequence = models.BigIntegerField()
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="receipt_events")
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "sequence"], name="receipt_sequence_unique")
        ]

    def __str__(self) -> str:
        return f"receipt {self.sequence} of {self.agent_id}"


class Checkpoint(models.Model):
    """An agent's own continuity record: bounded, versioned, written only by its current runtime."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="checkpoint")
    revision = models.PositiveIntegerField()
    body = models.JSONField()
    # The receipt-event sequence this checkpoint accounts for; later receipts are uncertain work.
    covers_receipts_through = models.BigIntegerField()
    saved_at = models.DateTimeField()
    saved_by_runtime = models.CharField(max_length=36)
    saved_by_generation = models.BigIntegerField()

    def __str__(self) -> str:
        return f"checkpoint {self.revision} of {self.agent_id}"


class ScheduleOccurrence(models.Model):
    """What a schedule did at one slot; the unique (schedule, slot) guards against a repeat."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="history")
    slot = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=OccurrenceOutcome.choices)
    message_id = models.BigIntegerField(null=True, blank=True)
    reason = models.CharField(max_length=300, blank=True, default="")
    late = models.BooleanField(default=False)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["schedule", "slot"], name="occurrence_unique"),
            models.CheckConstraint(
                condition=closed_set("outcome", OccurrenceOutcome), name="occurrence_outcome"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.outcome} at {self.slot}"


class Notice(models.Model):
    """One notification written to an agent's bridge: the persisted attempt and its facts."""

    id = models.UUIDField(primary_key=True)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="notices")
    runtime_id = models.CharField(max_length=36)
    generation = models.BigIntegerField()
    kind = models.CharField(max_length=16, choices=NoticeKind.choices)
    message_ids = models.JSONField(default=list)
    created_at = models.DateTimeField()
    received_at = models.DateTimeField(null=True, blank=True)
    host_written_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=closed_set("kind", NoticeKind), name="notice_kind")
        ]
        indexes = [models.Index(fields=["agent", "created_at"], name="notice_agent_time")]

    def __str__(self) -> str:
        return f"{self.kind} notice to {self.agent_id}"


class SeenReceipt(models.Model):
    """A `seen` fact owed to a sender who asked (notify_when_seen): pushed once, never a message."""

    sender = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="owed_receipts")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="seen_receipts")
    seen_by = models.CharField(max_length=40)
    seen_at = models.DateTimeField()
    pushed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["sender", "pushed_at"], name="seen_receipt_due")]

    def __str__(self) -> str:
        return f"{self.seen_by} saw {self.message_id}"

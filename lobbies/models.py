"""The broker's store. Every closed value set is a choice list and a database CHECK."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from lobbies import wire


def closed_set(field: str, choices: type[models.TextChoices], *, nullable: bool = False) -> Q:
    condition = Q(**{f"{field}__in": choices.values})
    return condition | Q(**{f"{field}__isnull": True}) if nullable else condition


class Lobby(models.Model):
    """A private lobby: the admission and data-isolation boundary."""

    name = models.CharField(max_length=40, unique=True)
    created_at = models.DateTimeField()
    # Highest message sequence handed out in this lobby; bumped in the send transaction.
    message_sequence = models.BigIntegerField(default=0)
    # Maintenance: the owner paused all pushes in this lobby; sends are still accepted.
    delivery_paused = models.BooleanField(default=False)

    class Meta:
        verbose_name_plural = "lobbies"

    def __str__(self) -> str:
        return self.name


class DeletedLobby(models.Model):
    """A deleted lobby's name, kept forever so no new lobby inherits its address."""

    name = models.CharField(max_length=40, unique=True)
    deleted_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name


class Agent(models.Model):
    """A durable address in one lobby, such as `backend`."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="agents")
    agent_id = models.CharField(max_length=40)
    description = models.CharField(max_length=200, blank=True, default="")
    role = models.TextField(blank=True, default="")
    enabled = models.BooleanField(default=True)
    manage_rooms = models.BooleanField(default=False)
    broadcast = models.BooleanField(default=False)
    status_line = models.CharField(max_length=200, blank=True, default="")
    status_updated_at = models.DateTimeField(null=True, blank=True)
    owner_request_count = models.PositiveSmallIntegerField(default=0)
    owner_request_line = models.CharField(max_length=300, blank=True, default="")
    owner_requests_updated_at = models.DateTimeField(null=True, blank=True)
    # Highest receipt-event sequence of this agent; bumped in the acknowledging transaction.
    receipt_sequence = models.BigIntegerField(default=0)
    runtime_id = models.CharField(max_length=36, null=True, blank=True)
    runtime_generation = models.BigIntegerField(default=0)
    runtime_bound_at = models.DateTimeField(null=True, blank=True)
    # When the bound conversation first completed `ready` (kept across its restarts): a
    # binding never ready and not connected yields to another conversation (takeover).
    runtime_first_ready_at = models.DateTimeField(null=True, blank=True)
    # The bound conversation ended cleanly: its bridge, told by its host to end, sent
    # `release` on its open stream. The next new conversation is admitted (takeover).
    runtime_released_at = models.DateTimeField(null=True, blank=True)
    # A new conversation refused with runtime_conflict, waiting for the owner's hand over:
    # which, since when, and its latest claim (its bridge keeps asking; a stale one is gone).
    waiting_runtime_id = models.CharField(max_length=36, null=True, blank=True)
    waiting_since = models.DateTimeField(null=True, blank=True)
    waiting_seen_at = models.DateTimeField(null=True, blank=True)
    # The lobby's highest sequence when this generation bound: older pending messages are
    # backlog, announced once as one coalesced notice.
    backlog_sequence = models.BigIntegerField(default=0)
    # ...and when: a scheduled message of an older sequence that falls due after the binding
    # reached its recipient later, so it is pushed with its body, not summarised as backlog.
    backlog_bound_at = models.DateTimeField(null=True, blank=True)
    bootstrap_nonce = models.CharField(max_length=64, blank=True, default="")
    bootstrap_sent_at = models.DateTimeField(null=True, blank=True)
    bootstrap_attempts = models.PositiveSmallIntegerField(default=0)
    ready_at = models.DateTimeField(null=True, blank=True)
    # The checkpoint revision this runtime's session said, with `ready`, it loaded.
    loaded_checkpoint_revision = models.PositiveIntegerField(null=True, blank=True)
    # Latest sign that the agent takes turns: ready, an acknowledgment, a checkpoint, a send.
    last_progress_at = models.DateTimeField(null=True, blank=True)
    notify_attempts = models.PositiveSmallIntegerField(default=0)
    notify_next_at = models.DateTimeField(null=True, blank=True, db_index=True)
    notification_attention_required = models.BooleanField(default=False)
    last_receipts_push_at = models.DateTimeField(null=True, blank=True)
    # Resting: nothing is pushed while true; `rest_change_at` flips it to `rest_change_to`.
    resting = models.BooleanField(default=False)
    rest_change_at = models.DateTimeField(null=True, blank=True, db_index=True)
    rest_change_to = models.BooleanField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["lobby", "agent_id"], name="agent_unique_per_lobby"),
            models.CheckConstraint(
                condition=Q(owner_request_count__lte=99), name="agent_owner_request_count_bound"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}@{self.lobby_id}"


class RetiredRuntime(models.Model):
    """A runtime the owner retired; it may never reclaim the agent's binding."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="retired_runtimes")
    runtime_id = models.CharField(max_length=36)
    retired_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "runtime_id"], name="retired_runtime_unique")
        ]

    def __str__(self) -> str:
        return f"retired runtime of {self.agent_id}"


class Credential(models.Model):
    """An agent's lobby token, stored only as its SHA-256."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="credentials")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"credential {self.pk} of {self.agent}"


class Room(models.Model):
    """A shared conversation inside a lobby; membership decides who receives its messages."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="rooms")
    room_id = models.CharField(max_length=40)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["lobby", "room_id"], name="room_unique_per_lobby")
        ]

    def __str__(self) -> str:
        return self.room_id


class RoomMember(models.Model):
    room = models.ForeignKey(Room, on_delete=models.CASCADE, related_name="members")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="room_memberships")
    joined_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["room", "agent"], name="room_member_unique")]

    def __str__(self) -> str:
        return f"{self.agent_id} in {self.room_id}"


class ArchivedRoom(models.Model):
    """A retired room: its name stays reserved so no new room inherits its history."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="archived_rooms")
    room_id = models.CharField(max_length=40)
    archived_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["lobby", "room_id"], name="archived_room_unique")
        ]

    def __str__(self) -> str:
        return f"archived {self.room_id}"


class ScheduleStatus(models.TextChoices):
    ACTIVE = "active"
    CANCELLED = "cancelled"


class Scope(models.TextChoices):
    DIRECT = "direct"
    ROOM = "room"
    BROADCAST = "broadcast"


class Kind(models.TextChoices):
    REQUEST = "request"
    NOTICE = "notice"
    ASSIGNMENT = "assignment"
    REPORT = "report"
    QUESTION = "question"


class Priority(models.TextChoices):
    INFO = "info"
    IMPORTANT = "important"


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
        ]

    def __str__(self) -> str:
        return f"message {self.pk} from {self.sender_name}"


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    SEEN = "seen"
    HELD = "held"


class HeldReason(models.TextChoices):
    RECIPIENT_DISABLED = "recipient_disabled"
    SCHEDULED = "scheduled"
    REMOVED = "removed"
    ROOM_DELETED = "room_deleted"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"


# Copies not yet seen that may still reach their recipient: pending, or waiting for their
# delivery time. Every other hold is final. (The send path's capacity count says the same in
# SQL: lobbies/queries.py `QUEUED`.)
DELIVERABLE = Q(state=DeliveryState.PENDING) | Q(
    state=DeliveryState.HELD, held_reason=HeldReason.SCHEDULED
)


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


class OccurrenceOutcome(models.TextChoices):
    SENT = "sent"
    SKIPPED = "skipped"


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


class NoticeKind(models.TextChoices):
    MESSAGES = "messages"
    HINT = "hint"
    BACKLOG = "backlog"
    BOOTSTRAP = "bootstrap"
    RECEIPTS = "receipts"


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


class BrokerProcess(models.Model):
    """A running `pocolobby serve` process; its heartbeat vouches for its connections."""

    id = models.UUIDField(primary_key=True)
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"process {self.id}"


class Transport(models.TextChoices):
    """How a bridge puts pushes in front of its agent (`pocolobby bridge --deliver`)."""

    CHANNEL = wire.TRANSPORT_CHANNEL  # Claude Code Channels: notifications/claude/channel
    TMUX = wire.TRANSPORT_TMUX  # one line typed into the agent's tmux pane


class Connection(models.Model):
    """A bridge's open WebSocket, held by one broker process, with its delivery facts."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="connections")
    process = models.ForeignKey(BrokerProcess, on_delete=models.CASCADE, related_name="connections")
    generation = models.BigIntegerField()
    connected_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField()
    # Reported by the bridge's `delivery` frame; a bridge that never reports is a Channel one.
    transport = models.CharField(max_length=16, choices=Transport.choices, default="channel")
    # Set while a tmux bridge holds notices (the pane is busy, gone, or locked): since when, why.
    held_since = models.DateTimeField(null=True, blank=True)
    held_reason = models.CharField(max_length=wire.HELD_REASON_CHARS, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=closed_set("transport", Transport), name="connection_transport"
            ),
        ]

    def __str__(self) -> str:
        return f"connection of {self.agent_id} (generation {self.generation})"


class ActorKind(models.TextChoices):
    OPERATOR = "operator"
    AGENT = "agent"
    ACCOUNT = "account"


class AuditAction(models.TextChoices):
    LOBBY_CREATED = "lobby_created"
    LOBBY_DELETED = "lobby_deleted"
    AGENT_ADDED = "agent_added"
    AGENT_REMOVED = "agent_removed"
    AGENT_DISABLED = "agent_disabled"
    AGENT_ENABLED = "agent_enabled"
    CREDENTIAL_ROTATED = "credential_rotated"
    RUNTIME_RESET = "runtime_reset"
    RUNTIME_CLAIMED = "runtime_claimed"
    RUNTIME_RESUMED = "runtime_resumed"
    RUNTIME_TAKEN_OVER = "runtime_taken_over"
    RUNTIME_RELEASED = "runtime_released"
    RUNTIME_HANDED_OVER = "runtime_handed_over"
    RUNTIME_WAITING = "runtime_waiting"
    ROLE_SET = "role_set"
    ROOM_CREATED = "room_created"
    ROOM_MEMBERS_CHANGED = "room_members_changed"
    ROOM_DELETED = "room_deleted"
    ROOM_ARCHIVED = "room_archived"
    ROOM_RESTORED = "room_restored"
    AGENTS_RESTED = "agents_rested"
    ACCOUNT_CREATED = "account_created"
    ACCOUNT_DISABLED = "account_disabled"
    ACCOUNT_ENABLED = "account_enabled"
    OWNER_SET = "owner_set"
    VIEWER_ADDED = "viewer_added"
    VIEWER_REMOVED = "viewer_removed"
    VISIBILITY_CHANGED = "visibility_changed"
    SUMMARY_SETTINGS_CHANGED = "summary_settings_changed"
    AGENT_APPEARANCE_CHANGED = "agent_appearance_changed"
    NOTES_SOURCE_CHANGED = "notes_source_changed"
    REPOSITORY_APPROVED = "repository_approved"
    REPOSITORY_WITHDRAWN = "repository_withdrawn"
    RESTORE_STARTED = "restore_started"
    RESTORE_FINISHED = "restore_finished"
    PERMISSIONS_CHANGED = "permissions_changed"
    NOTIFICATIONS_RETRIED = "notifications_retried"
    SCHEDULED_CANCELLED = "scheduled_cancelled"
    DELIVERY_PAUSED = "delivery_paused"
    DELIVERY_RESUMED = "delivery_resumed"
    OWNER_MESSAGE_SENT = "owner_message_sent"


class AuditEvent(models.Model):
    """A structured audit record. No foreign keys, so it outlives what it names."""

    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    account = models.CharField(max_length=254, blank=True, default="")
    agent_id = models.CharField(max_length=40, blank=True, default="")
    lobby_name = models.CharField(max_length=40, blank=True, default="")
    action = models.CharField(max_length=40, choices=AuditAction.choices)
    target = models.CharField(max_length=200, blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=closed_set("actor_kind", ActorKind), name="audit_actor_kind"
            ),
            models.CheckConstraint(
                condition=closed_set("action", AuditAction), name="audit_action"
            ),
        ]
        indexes = [models.Index(fields=["lobby_name", "created_at"], name="audit_lobby_time")]

    def __str__(self) -> str:
        return f"{self.action} {self.target}"


class BrokerState(models.Model):
    """The store's one row of broker-wide state: which history this is, and restore mode.

    A restore issues a new incarnation, so a bridge that reconnects can tell it meets a
    different history; while `restore_mode` holds, agents are refused and timers are paused.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    incarnation = models.UUIDField()
    restore_mode = models.BooleanField(default=False)
    restored_from = models.CharField(max_length=300, blank=True, default="")
    backup_taken_at = models.DateTimeField(null=True, blank=True)
    restored_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="broker_state_one_row")]

    def __str__(self) -> str:
        return f"incarnation {self.incarnation}"


class UncertainWork(models.Model):
    """A copy pending when a restore finished: the agent may already have acted on it."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="uncertain_work")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    restored_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "message"], name="uncertain_work_unique")
        ]

    def __str__(self) -> str:
        return f"uncertain {self.message_id} for {self.agent_id}"


class AttachmentContent(models.Model):
    """One stored file per SHA-256, shared by every attachment with those bytes.

    The bytes live in `<attachments dir>/<sha256>` (lobbies/blobs.py); the row says they are
    complete and verified. It goes when no live attachment and no pending upload names it.
    """

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.PositiveBigIntegerField()
    media_type = models.CharField(max_length=100)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"content {self.sha256[:12]}"


class Attachment(models.Model):
    """One uploader's file under one name, referenced by messages and schedules."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="attachments")
    # Kept (null) when the agent is removed: its recipients keep the file for the message's day.
    uploader = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="attachments"
    )
    sha256 = models.CharField(max_length=64)
    name = models.CharField(max_length=255)
    media_type = models.CharField(max_length=100)
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField()
    # When nothing live referenced it any more: its uploader gets 410, everyone else 404.
    expired_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["uploader", "sha256", "name", "media_type"],
                condition=Q(expired_at__isnull=True),
                name="attachment_live_unique",
            )
        ]
        indexes = [models.Index(fields=["sha256"], name="attachment_sha256")]

    def __str__(self) -> str:
        return f"attachment {self.pk} {self.name}"


class MessageAttachment(models.Model):
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attachment_links")
    attachment = models.ForeignKey(
        Attachment, on_delete=models.CASCADE, related_name="message_links"
    )
    position = models.PositiveSmallIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["message", "position"], name="message_attachment_unique"
            )
        ]

    def __str__(self) -> str:
        return f"attachment {self.attachment_id} of message {self.message_id}"


class ScheduleAttachment(models.Model):
    schedule = models.ForeignKey(
        Schedule, on_delete=models.CASCADE, related_name="attachment_links"
    )
    attachment = models.ForeignKey(
        Attachment, on_delete=models.CASCADE, related_name="schedule_links"
    )
    position = models.PositiveSmallIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "position"], name="schedule_attachment_unique"
            )
        ]

    def __str__(self) -> str:
        return f"attachment {self.attachment_id} of schedule {self.schedule_id}"


class PendingUpload(models.Model):
    """Bytes an uploader proved it has, not yet named by a stored send: kept a grace period."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="pending_uploads")
    uploader = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="pending_uploads")
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["uploader", "sha256"], name="pending_upload_unique")
        ]
        indexes = [models.Index(fields=["sha256"], name="pending_upload_sha256")]

    def __str__(self) -> str:
        return f"pending {self.sha256[:12]} of {self.uploader_id}"

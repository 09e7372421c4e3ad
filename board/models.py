"""What the dashboard keeps: its settings, the last notes snapshot per source, every summary
attempt, and the agents' turn activity and token counts.

It is a projection, never a task database: live facts (owner requests, messages, presence)
are read from the lobby's own tables at render time.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q

from console.models import Account
from lobbies.models import Agent, ArchivedRoom, Lobby, Room, closed_set


class Visibility(models.TextChoices):
    PRIVATE = "private"
    PUBLIC = "public"


class SummaryModel(models.TextChoices):
    HAIKU = "claude-haiku-5-5", "Claude Haiku 5.5"
    SONNET = "claude-sonnet-5-5", "Claude Sonnet 5.5"


class Effort(models.TextChoices):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class BoardConfig(models.Model):
    """The lobby's dashboard settings row."""

    lobby = models.OneToOneField(Lobby, on_delete=models.CASCADE, related_name="board_config")
    visibility = models.CharField(
        max_length=8, choices=Visibility.choices, default=Visibility.PRIVATE
    )
    summary_model = models.CharField(
        max_length=40, choices=SummaryModel.choices, default=SummaryModel.HAIKU
    )
    summary_effort = models.CharField(max_length=8, choices=Effort.choices, default=Effort.LOW)
    # A public dashboard shows who sent what to whom; the words only when the owner says so.
    public_message_contents = models.BooleanField(default=False)
    # Listed viewers may turn on this lobby's pushes on their own devices.
    viewers_get_notifications = models.BooleanField(default=False)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=closed_set("visibility", Visibility), name="board_visibility"
            ),
            models.CheckConstraint(
                condition=closed_set("summary_model", SummaryModel), name="board_summary_model"
            ),
            models.CheckConstraint(
                condition=closed_set("summary_effort", Effort), name="board_summary_effort"
            ),
        ]

    def __str__(self) -> str:
        return f"dashboard of {self.lobby}"


class AgentAppearance(models.Model):
    """How the owner wants an agent shown; hidden agents get no row and no summary."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="appearance")
    emoji = models.CharField(max_length=16, blank=True, default="")
    display_name = models.CharField(max_length=40, blank=True, default="")
    hidden = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"appearance of {self.agent}"


def shown_name(look: AgentAppearance | None, agent_id: str) -> str:
    """The owner's display name for an agent, or its address when there is none."""
    return (look.display_name if look is not None else "") or agent_id


def _follow_the_room(collector: Any, field: Any, sub_objs: Any, using: str) -> None:
    """A room's notes source follows it into the archive and back; deletion takes it along.

    Archiving writes the ArchivedRoom before deleting the room, and restoring creates the
    room before deleting the ArchivedRoom, so the successor of the same name exists here.
    """
    keep: dict[tuple[str, int], list[Any]] = {}
    gone: list[NotesSource] = []
    for source in sub_objs:
        successor = _successor(field.name, source)
        if successor is None:
            gone.append(source)
        else:
            keep.setdefault(successor, []).append(source)
    for (name, pk), sources in keep.items():
        collector.add_field_update(field.model._meta.get_field(name), pk, sources)
        collector.add_field_update(field, None, sources)
    if gone:
        models.CASCADE(collector, field, gone, using)  # type: ignore[arg-type]  # stubs want a QuerySet; Django's collector takes any list of rows


def _successor(leaving: str, source: NotesSource) -> tuple[str, int] | None:
    """The same-named room on the other side (archived or live), if it exists now."""
    here: type[models.Model]
    there: type[models.Model]
    pk: int | None
    if leaving == "room":
        here, there, name, pk = Room, ArchivedRoom, "archived_room", source.room_id
    else:
        here, there, name, pk = ArchivedRoom, Room, "room", source.archived_room_id
    if pk is None:
        return None
    place = here.objects.filter(pk=pk).values("lobby_id", "room_id").first()
    found = there.objects.filter(**place).values_list("pk", flat=True).first() if place else None
    return (name, found) if found else None


class NotesSource(models.Model):
    """One room's notes: an approved repository, a ref and the paths to read at one commit.

    Archiving keeps it with the archived room (not read while archived), restoring brings it
    back; only deleting the room removes it.
    """

    room = models.OneToOneField(
        Room, null=True, blank=True, on_delete=_follow_the_room, related_name="notes_source"
    )
    archived_room = models.OneToOneField(
        ArchivedRoom,
        null=True,
        blank=True,
        on_delete=_follow_the_room,
        related_name="notes_source",
    )
    repository = models.CharField(max_length=140)
    ref = models.CharField(max_length=200, default="main")
    paths = models.JSONField(default=list)
    # Bumped on every settings change: a fetch stores its snapshot only if it is unchanged.
    settings_version = models.PositiveIntegerField(default=1)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(room__isnull=False) | Q(archived_room__isnull=False),
                name="notes_source_has_a_room",
            )
        ]

    def __str__(self) -> str:
        return f"notes of {self.room or self.archived_room}: {self.repository}"

    @property
    def live_room(self) -> Room:
        """The room it serves, for reads that selected sources by their live room."""
        if self.room is None:
            raise ValueError(f"notes source {self.pk} is archived; it serves no room")
        return self.room


class NotesSnapshot(models.Model):
    """The notes at one commit; its ETag advances only with the snapshot it describes."""

    source = models.OneToOneField(NotesSource, on_delete=models.CASCADE, related_name="snapshot")
    commit = models.CharField(max_length=40)
    etag = models.CharField(max_length=200, blank=True, default="")
    # [{"path", "sha", "content", "truncated"}] in the source's path order.
    files = models.JSONField(default=list)
    truncated = models.BooleanField(default=False)
    fetched_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"snapshot {self.commit[:7]} of {self.source_id}"


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # network, timeout, API error
    INVALID = "invalid"  # an answer that did not validate
    # Claimed in the store before the model is called, its cost the estimate, until settled
    # with the real outcome (board/summaries/attempts.py).
    RESERVED = "reserved"


class SummaryAttempt(models.Model):
    """Every summarizer attempt, paid or not, with its usage and cost; failures included."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="summary_attempts")
    model = models.CharField(max_length=40, choices=SummaryModel.choices)
    effort = models.CharField(max_length=8, choices=Effort.choices)
    input_hash = models.CharField(max_length=64)
    # What the input was made of, so that any broker can tell an input that only lost
    # messages since this attempt was answered (board/summaries/attempts.py, `unchanged`):
    # the hash of the request without its messages, and the messages' sequence numbers.
    base_hash = models.CharField(max_length=64, blank=True, default="")
    message_ids = models.JSONField(default=list, blank=True)
    outcome = models.CharField(max_length=10, choices=AttemptOutcome.choices)
    error = models.CharField(max_length=300, blank=True, default="")
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=10, decimal_places=6, default=0)
    # {"agents": {agent_id: {"now": str, "next": str | None}}, "sources": [...]} when succeeded.
    summary = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=closed_set("outcome", AttemptOutcome), name="summary_outcome"
            ),
            models.CheckConstraint(
                condition=closed_set("model", SummaryModel), name="summary_attempt_model"
            ),
            models.CheckConstraint(
                condition=closed_set("effort", Effort), name="summary_attempt_effort"
            ),
            models.CheckConstraint(condition=Q(cost_usd__gte=0), name="summary_cost_nonnegative"),
        ]
        indexes = [models.Index(fields=["lobby", "started_at"], name="summary_lobby_time")]

    def __str__(self) -> str:
        return f"{self.outcome} summary of {self.lobby_id}"


class DashboardOpening(models.Model):
    """When a lobby's dashboard was last opened, on any broker, and when a broker last took
    its background work: every broker's dashboard loop reads the same row (board/refresh.py).
    """

    lobby = models.OneToOneField(
        Lobby, on_delete=models.CASCADE, primary_key=True, related_name="dashboard_opening"
    )
    opened_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"dashboard of {self.lobby_id} opened at {self.opened_at}"


class WorkStretch(models.Model):
    """A turn the agent's hooks reported: from UserPromptSubmit to Stop."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="work_stretches")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["agent", "started_at"], name="stretch_agent_time")]
        constraints = [
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("started_at")),
                name="stretch_ends_after_start",
            )
        ]

    def __str__(self) -> str:
        return f"work of {self.agent_id} from {self.started_at}"


class TokenSession(models.Model):
    """One session's token counts for one UTC day, as the agent's Stop hook last read them.

    Each report carries the whole transcript's totals per day, so it replaces the row: sending
    the same transcript again never counts twice. The Tokens page sums sessions at read time.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="token_sessions")
    session_id = models.CharField(max_length=100)
    day = models.DateField()
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_creation_tokens = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "session_id", "day"], name="token_session_day_unique"
            ),
            models.CheckConstraint(
                condition=Q(input_tokens__gte=0)
                & Q(output_tokens__gte=0)
                & Q(cache_read_tokens__gte=0)
                & Q(cache_creation_tokens__gte=0),
                name="token_session_nonnegative",
            ),
        ]
        indexes = [models.Index(fields=["agent", "day"], name="token_session_agent_day")]

    def __str__(self) -> str:
        return f"tokens of {self.agent_id} in {self.session_id} on {self.day}"


# --- The owner in the loop: Web Push to their devices and mail when something still waits ---


class AlertReason(models.TextChoices):
    OWNER_REQUEST = "owner_request"  # an agent set or changed its owner requests
    MESSAGE = "message"  # a message to `owner` expects a reply
    HANDOVER = "handover"  # a new conversation waits to take over an agent
    ATTENTION = "attention"  # an agent reached notification_attention_required


class OwnerAlert(models.Model):
    """One thing that started waiting on the owner: the queue the serve loop sends from.

    Written by the watch pass (or a hook) in a transaction; pushed and mailed only by the
    loop, after commit. `settled_at` is set when the wait is answered or replaced.
    """

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="owner_alerts")
    agent_id = models.CharField(max_length=40)
    reason = models.CharField(max_length=16, choices=AlertReason.choices)
    line = models.CharField(max_length=300, blank=True, default="")
    message_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    pushed_at = models.DateTimeField(null=True, blank=True)  # handled: sent, coalesced or quiet
    mailed_at = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=closed_set("reason", AlertReason), name="alert_reason")
        ]
        indexes = [
            models.Index(
                fields=["created_at"], name="alert_unpushed", condition=Q(pushed_at__isnull=True)
            ),
            models.Index(
                fields=["created_at"], name="alert_open", condition=Q(settled_at__isnull=True)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.reason} of {self.agent_id} in {self.lobby_id}"


class AgentWatch(models.Model):
    """What the watch pass last saw of an agent, so a change (not a repeat) makes an alert."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="owner_watch")
    request_count = models.PositiveSmallIntegerField(default=0)
    request_line = models.CharField(max_length=300, blank=True, default="")
    attention = models.BooleanField(default=False)
    # The runtime of a new conversation waiting for the owner's hand over ("" when none).
    handover_runtime = models.CharField(max_length=36, blank=True, default="")
    last_push_at = models.DateTimeField(null=True, blank=True)  # coalescing: one a minute

    def __str__(self) -> str:
        return f"watch of {self.agent_id}"


class PushSubscription(models.Model):
    """One browser on one device that asked for this lobby's pushes.

    `account` is null for the local operator (a local broker has no accounts).
    """

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="push_subscriptions")
    account = models.ForeignKey(
        Account,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="push_subscriptions",
    )
    endpoint = models.URLField(max_length=1000)
    p256dh = models.CharField(max_length=200)
    auth = models.CharField(max_length=100)
    created_at = models.DateTimeField()
    last_pushed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["lobby", "endpoint"], name="push_endpoint_per_lobby")
        ]

    def __str__(self) -> str:
        return f"push subscription {self.pk} in {self.lobby_id}"


class AlertPreferences(models.Model):
    """One person's quiet hours (in their own time zone) and mail opt-in.

    `account` null is the local operator (who has no address, so gets no mail).
    """

    account = models.OneToOneField(
        Account,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="alert_preferences",
    )
    time_zone = models.CharField(max_length=64, default="UTC")
    quiet_from = models.TimeField(null=True, blank=True)
    quiet_until = models.TimeField(null=True, blank=True)
    mail_when_waiting = models.BooleanField(default=False)
    mail_after_minutes = models.PositiveSmallIntegerField(default=15)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(mail_after_minutes__gte=1) & Q(mail_after_minutes__lte=1440),
                name="alert_mail_after_range",
            )
        ]

    def __str__(self) -> str:
        return f"alert preferences of {self.account_id or 'the local operator'}"


class VapidKey(models.Model):
    """The broker's VAPID key on PostgreSQL (SQLite keeps it in a 0600 file instead)."""

    private_pem = models.TextField()
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return "VAPID key"

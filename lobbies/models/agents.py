"""Lobbies and their agents: addresses, runtimes and credentials."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class Lobby(models.Model):
    """A private lobby: the admission and data-isolation boundary."""

    name = models.CharField(max_length=40, unique=True)
    created_at = models.DateTimeField()
    # Highest message sequence handed out in this lobby; bumped in the send transaction.
    message_sequence = models.BigIntegerField(default=0)
    # Maintenance: the owner paused all pushes in this lobby; sends are still accepted.
    delivery_paused = models.BooleanField(default=False)
    # The owner's setting: any agent may call watch_agents, not only those with manage_rooms.
    agents_may_watch = models.BooleanField(default=False)

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


class Enrollment(models.Model):
    """A one-time code that issues an agent's token when `pocolobby join` redeems it, stored
    only as its SHA-256: the token travels to the agent's machine without a file carried by
    hand."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="enrollments")
    code_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    redeemed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"enrollment {self.pk} of {self.agent}"


class EnrollmentRefusal(models.Model):
    """A code `join` presented that was not a live one, counted per client network so that
    codes cannot be guessed at speed (lobbies/actions/enrollment.py)."""

    client = models.CharField(max_length=64)
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["client", "at"], name="enrollment_refusal_client")]

    def __str__(self) -> str:
        return f"enrolment refusal {self.pk} for {self.client}"


class Credential(models.Model):
    """An agent's lobby token, stored only as its SHA-256."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="credentials")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"credential {self.pk} of {self.agent}"


class UsageReading(models.Model):
    """The latest plan-usage reading an agent's status line sent (lobbies/usage.py): one row
    per agent, replaced by each reading, so every broker shows the same."""

    agent = models.OneToOneField(
        Agent, on_delete=models.CASCADE, primary_key=True, related_name="usage_reading"
    )
    five_hour_used = models.FloatField()
    five_hour_resets_at = models.DateTimeField()
    seven_day_used = models.FloatField()
    seven_day_resets_at = models.DateTimeField()
    account_email = models.CharField(max_length=254, null=True, blank=True)
    received_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(five_hour_used__gte=0, five_hour_used__lte=100)
                & Q(seven_day_used__gte=0, seven_day_used__lte=100),
                name="usage_percentages",
            )
        ]

    def __str__(self) -> str:
        return f"usage reading of {self.agent_id}"

"""The broker's own records: processes, bridge connections, the audit trail, its state."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from lobbies.models.agents import Agent
from lobbies.models.choices import ActorKind, AuditAction, Transport, closed_set
from lobbies.models.messages import Message
from lobbies.wire import frames


class BrokerProcess(models.Model):
    """A running `pocolobby serve` process; its heartbeat vouches for its connections."""

    id = models.UUIDField(primary_key=True)
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"process {self.id}"


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
    held_reason = models.CharField(max_length=frames.HELD_REASON_CHARS, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=closed_set("transport", Transport), name="connection_transport"
            ),
        ]

    def __str__(self) -> str:
        return f"connection of {self.agent_id} (generation {self.generation})"


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

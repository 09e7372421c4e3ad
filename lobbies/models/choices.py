"""Closed value sets: each a choice list and, through `closed_set`, a database CHECK."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from lobbies.wire import frames


def closed_set(field: str, choices: type[models.TextChoices], *, nullable: bool = False) -> Q:
    condition = Q(**{f"{field}__in": choices.values})
    return condition | Q(**{f"{field}__isnull": True}) if nullable else condition


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
# SQL: lobbies/fastlane/queries.py `QUEUED`.)
DELIVERABLE = Q(state=DeliveryState.PENDING) | Q(
    state=DeliveryState.HELD, held_reason=HeldReason.SCHEDULED
)


# A note to yourself wakes nobody; a reminder to yourself (deliver_at, or a schedule's
# occurrence) does. A copy whose recipient is its sender and that went now is never pushed,
# retried or hinted. Written once per form: this one for the ORM (a Delivery condition),
# `is_silent_self_note` for Python, `lobbies.fastlane.queries.silent_self_note` for SQL;
# tests/lobbies/test_queries.py proves the three agree.
SILENT_SELF_NOTE = Q(
    message__sender=F("recipient"),
    message__deliver_at__isnull=True,
    message__schedule__isnull=True,
)


def is_silent_self_note(
    sender_pk: int, recipient_pk: int, *, deliver_at: object, schedule_pk: int | None
) -> bool:
    """`SILENT_SELF_NOTE` for a copy not yet stored (a send waking its recipients)."""
    return sender_pk == recipient_pk and deliver_at is None and schedule_pk is None


class OccurrenceOutcome(models.TextChoices):
    SENT = "sent"
    SKIPPED = "skipped"


class NoticeKind(models.TextChoices):
    MESSAGES = "messages"
    HINT = "hint"
    BACKLOG = "backlog"
    BOOTSTRAP = "bootstrap"
    RECEIPTS = "receipts"
    ACTIVITY = "activity"  # watched agents' activity changes (watch_agents)


class Transport(models.TextChoices):
    """How a bridge puts pushes in front of its agent (`pocolobby bridge --deliver`)."""

    CHANNEL = frames.TRANSPORT_CHANNEL  # Claude Code Channels: notifications/claude/channel
    TMUX = frames.TRANSPORT_TMUX  # one line typed into the agent's tmux pane


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
    ENROLLMENT_ISSUED = "enrollment_issued"
    ENROLLMENT_REDEEMED = "enrollment_redeemed"
    RUNTIME_RESET = "runtime_reset"
    RUNTIME_CLAIMED = "runtime_claimed"
    RUNTIME_RESUMED = "runtime_resumed"
    RUNTIME_TAKEN_OVER = "runtime_taken_over"
    RUNTIME_RELEASED = "runtime_released"
    RUNTIME_HANDED_OVER = "runtime_handed_over"
    RUNTIME_WAITING = "runtime_waiting"
    ROLE_SET = "role_set"
    DESCRIPTION_SET = "description_set"
    ROOM_CREATED = "room_created"
    ROOM_MEMBERS_CHANGED = "room_members_changed"
    ROOM_DELETED = "room_deleted"
    ROOM_ARCHIVED = "room_archived"
    ROOM_RESTORED = "room_restored"
    AGENTS_RESTED = "agents_rested"
    ACCOUNT_CREATED = "account_created"
    ACCOUNT_DISABLED = "account_disabled"
    ACCOUNT_ENABLED = "account_enabled"
    ACCOUNT_OPERATOR_SET = "account_operator_set"
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
    WATCHING_ALLOWED = "watching_allowed"
    WATCHING_WITHDRAWN = "watching_withdrawn"
    OWNER_MESSAGE_SENT = "owner_message_sent"


class Host(models.TextChoices):
    """What runs an agent, as far as the broker can tell (list_agents' `host`)."""

    CLAUDE_CODE = "claude-code"
    CODEX = "codex"
    GEMINI = "gemini"
    SHELL = "shell"
    MSG = "msg"  # only `pocolobby msg` calls, no bridge reported a host

"""The broker's store. Every closed value set is a choice list and a database CHECK.

One module per part of the store, re-exported here: `lobbies.models.X` is every model
and closed value set, whichever module defines it.
"""

from __future__ import annotations

from lobbies.models.activity import ActivityChange, AgentActivity
from lobbies.models.agents import (
    Agent,
    Credential,
    DeletedLobby,
    Enrollment,
    EnrollmentRefusal,
    Lobby,
    RetiredRuntime,
    UsageReading,
)
from lobbies.models.attachments import (
    Attachment,
    AttachmentContent,
    MessageAttachment,
    PendingUpload,
    ScheduleAttachment,
)
from lobbies.models.choices import (
    DELIVERABLE,
    SILENT_SELF_NOTE,
    ActorKind,
    AuditAction,
    DeliveryState,
    HeldReason,
    Host,
    Kind,
    NoticeKind,
    OccurrenceOutcome,
    Priority,
    ScheduleStatus,
    Scope,
    Transport,
    closed_set,
    is_silent_self_note,
)
from lobbies.models.messages import (
    Checkpoint,
    Delivery,
    Message,
    Notice,
    ReceiptEvent,
    Schedule,
    ScheduleOccurrence,
    SeenReceipt,
    hold_copies,
)
from lobbies.models.operations import (
    AuditEvent,
    BrokerProcess,
    BrokerState,
    Connection,
    UncertainWork,
)
from lobbies.models.rooms import ArchivedRoom, Room, RoomMember

__all__ = [
    "DELIVERABLE",
    "SILENT_SELF_NOTE",
    "ActivityChange",
    "ActorKind",
    "Agent",
    "AgentActivity",
    "ArchivedRoom",
    "Attachment",
    "AttachmentContent",
    "AuditAction",
    "AuditEvent",
    "BrokerProcess",
    "BrokerState",
    "Checkpoint",
    "Connection",
    "Credential",
    "DeletedLobby",
    "Delivery",
    "DeliveryState",
    "Enrollment",
    "EnrollmentRefusal",
    "HeldReason",
    "Host",
    "Kind",
    "Lobby",
    "Message",
    "MessageAttachment",
    "Notice",
    "NoticeKind",
    "OccurrenceOutcome",
    "PendingUpload",
    "Priority",
    "ReceiptEvent",
    "RetiredRuntime",
    "Room",
    "RoomMember",
    "Schedule",
    "ScheduleAttachment",
    "ScheduleOccurrence",
    "ScheduleStatus",
    "Scope",
    "SeenReceipt",
    "Transport",
    "UncertainWork",
    "UsageReading",
    "closed_set",
    "hold_copies",
    "is_silent_self_note",
]

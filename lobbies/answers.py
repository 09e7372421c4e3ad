"""What /v1 answers, as pydantic models: they describe the wire for the OpenAPI document.

The views build their answers as dicts (selectors, actions); these models are not on that
path, so the wire stays what it was. They are the published contract's success schemas:
`lobbies.openapi` turns them into the document, and the contract test (schemathesis against a
live broker, tests/lobbies/test_openapi_contract.py) fails when an answer leaves its model.

A field without a default is always present (null where the type allows it); a field with a
default is present only where it applies.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lobbies.models import DeliveryState, HeldReason, Kind, Priority, Scope
from lobbies.schemas import MessageFields

Time = datetime


class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# ------------------------------------------------------------------ messages


class DeliveryFacts(Answer):
    """A copy's delivery facts."""

    delivery_state: DeliveryState
    held_reason: HeldReason | None
    delivered_at: Time | None
    adapter_received_at: Time | None
    notification_attempted_at: Time | None
    agent_seen_at: Time | None


class RecipientFacts(DeliveryFacts):
    """One recipient's delivery facts, on a message the reader sent."""

    agent_id: str


class AttachmentDescriptor(Answer):
    """What a message says of a file it carries: never its content."""

    id: int
    name: str
    media_type: str
    size: int


class AttachmentMeta(AttachmentDescriptor):
    sha256: str


class UploadAnswer(Answer):
    """The uploader proved possession of these bytes (201 stored now, 200 already proven)."""

    sha256: str
    size: int


class SendAnswer(Answer):
    """A send's answer: sent once the message and its delivery rows are committed."""

    status: Literal["stored"]
    message_id: int
    sequence: int
    created_at: Time
    duplicate: bool
    recipients: list[RecipientFacts]
    attachments: list[AttachmentDescriptor] | None = None


class MessageEntry(Answer):
    """A message as the reader may see it: recipient facts only on the reader's own sends."""

    message_id: int
    sequence: int
    sender: str = Field(alias="from")
    scope: Scope
    kind: Kind | None
    reply_expected: bool
    priority: Priority
    content: str | None
    fields: MessageFields
    reply_to: int | None
    correlation_id: str | None
    created_at: Time
    from_owner: bool = False
    to: str | None = None
    room_id: str | None = None
    addressed_to: list[str] | None = None
    supersedes: int | None = None
    deliver_at: Time | None = None
    late: bool | None = None
    schedule_id: int | None = None
    slot: Time | None = None
    client_request_id: str | None = None
    recipients: list[RecipientFacts] | None = None
    delivery: DeliveryFacts | None = None
    redacted: bool = False
    attachments: list[AttachmentDescriptor] | None = None


class MessagesPage(Answer):
    """A page of the inbox (oldest first) or the history (newest first)."""

    view: Literal["inbox", "history"]
    messages: list[MessageEntry]
    next_cursor: str | None


class AcknowledgeAnswer(Answer):
    acknowledged: list[int]
    unknown_message_ids: list[int]
    held_message_ids: list[int]
    receipt_sequence: int


# ------------------------------------------------------------------ agents


class Permissions(Answer):
    manage_rooms: bool
    broadcast: bool


class StatusLine(Answer):
    line: str
    updated_at: Time | None


class OwnerRequests(Answer):
    count: int
    line: str
    updated_at: Time | None


class UsageWindow(Answer):
    used_percentage: float
    left_percentage: float
    resets_at: Time


class UsageEntry(Answer):
    """The agent's latest plan usage reading, as pages show it."""

    five_hour: UsageWindow | None
    seven_day: UsageWindow | None
    pace_points: float | None
    off_pace: bool
    reading_age_seconds: int


class NoticesHeld(Answer):
    """A tmux bridge holds its notices: since when, and why (the pane is busy, say)."""

    since: Time
    reason: str


class AgentEntry(Answer):
    """An enabled agent of the lobby with its status, owner requests and presence."""

    agent_id: str
    description: str
    permissions: Permissions
    status: StatusLine | None
    owner_requests: OwnerRequests | None
    last_message_at: Time | None
    last_activity_at: Time | None
    idle_seconds: int | None
    connected: bool
    last_heartbeat_at: Time | None
    last_receipt_at: Time | None
    unseen_notified_count: int
    oldest_unseen_notified_at: Time | None
    notification_attention_required: bool
    transport: Literal["channel", "tmux", "none"]
    notices_held: NoticesHeld | None
    usage: UsageEntry | None = None


class AgentList(Answer):
    lobby: str
    agents: list[AgentEntry]


class StatusAnswer(Answer):
    status: str | None
    updated_at: Time | None


class OwnerRequestsAnswer(Answer):
    count: int
    line: str
    updated_at: Time | None


class ReadyAnswer(Answer):
    ready: Literal[True]
    runtime_id: str | None
    generation: int
    ready_at: Time | None


# ------------------------------------------------------------------ rooms


class RoomEntry(Answer):
    room_id: str
    members: list[str]
    created_at: Time


class ListedRoom(RoomEntry):
    member: bool


class RoomList(Answer):
    rooms: list[ListedRoom]


class DeleteRoomAnswer(Answer):
    deleted: str
    held: int
    schedules_cancelled: int
    members: int


class RestAnswer(Answer):
    agent_ids: list[str]
    rest: bool
    at: Time | None


# ------------------------------------------------------------------ schedules


class ScheduleEntry(Answer):
    schedule_id: int
    scope: Scope
    target: str | None
    time_zone: str
    times: list[str]
    weekdays: list[int] | None
    status: str
    next_slot: Time | None
    last_slot: Time | None
    content_preview: str


class ScheduleAnswer(ScheduleEntry):
    duplicate: bool


class WaitingMessage(Answer):
    message_id: int
    deliver_at: Time | None
    scope: Scope
    room_id: str | None
    content_preview: str


class ScheduledList(Answer):
    schedules: list[ScheduleEntry]
    messages: list[WaitingMessage]


class CancelAnswer(Answer):
    """One of `message_id` or `schedule_id`, whichever was cancelled."""

    message_id: int | None = None
    schedule_id: int | None = None
    status: str


class UpdateScheduledAnswer(Answer):
    message_id: int
    deliver_at: Time | None
    content_bytes: int


# ------------------------------------------------------------------ continuity


class CheckpointEntry(Answer):
    revision: int
    checkpoint: dict[str, Any]
    covers_receipts_through: int
    saved_at: Time
    age_seconds: int
    saved_by_generation: int | None


class SaveCheckpointAnswer(Answer):
    """The acknowledgment fields are present when the save acknowledged messages."""

    revision: int
    saved_at: Time
    covers_receipts_through: int
    acknowledged: list[int] | None = None
    unknown_message_ids: list[int] | None = None
    receipt_sequence: int | None = None


class ReadCheckpointAnswer(Answer):
    checkpoint: CheckpointEntry | None


class RuntimeEntry(Answer):
    runtime_id: str | None
    generation: int
    bound_at: Time | None
    ready: bool
    loaded_checkpoint_revision: int | None
    hello_request_id: str | None


class MessageHeader(Answer):
    message_id: int
    sender: str = Field(alias="from")
    kind: Kind | None
    priority: Priority
    created_at: Time
    content_bytes: int


class InboxSummary(Answer):
    pending: int
    important: int
    oldest_pending_at: Time | None
    first: list[MessageHeader]


class Receipt(Answer):
    """When the reader acknowledged it, and that receipt's number."""

    receipt_sequence: int
    seen_at: Time


class UncertainMessage(MessageEntry, Receipt):
    pass


class UncertainHeader(MessageHeader, Receipt):
    pass


class UncertainReceipts(Answer):
    total: int
    covered_through: int
    messages: list[UncertainMessage]
    headers: list[UncertainHeader]
    next_cursor: str | None


class GuideEntry(Answer):
    name: str
    purpose: str
    arguments: dict[str, str]


class ToolGuide(Answer):
    revision: str
    tools: list[GuideEntry]


class BrokerIdentity(Answer):
    host: str
    process_id: str
    version: str
    event_version: int
    incarnation: str


class Restored(Answer):
    incarnation: str
    backup_taken_at: Time | None
    restored_at: Time | None
    uncertain_message_ids: list[int]
    note: str


class ContextAnswer(Answer):
    """What a replacement session needs to carry on."""

    agent_id: str
    lobby_id: str
    role: str
    runtime: RuntimeEntry
    checkpoint: CheckpointEntry | None
    receipt_sequence: int
    inbox: InboxSummary
    uncertain: UncertainReceipts
    guidance: list[str]
    tool_guide: ToolGuide
    broker: BrokerIdentity
    restored: Restored | None


# ------------------------------------------------------------------ the catalog


class ToolDefinition(Answer):
    name: str
    description: str
    input_schema: dict[str, Any] = Field(description="The operation's JSON Schema")


class Catalog(Answer):
    """The operations this agent may call; `revision` hashes exactly these definitions."""

    revision: str
    tools: list[ToolDefinition]


# ------------------------------------------------------------------ health


class Health(Answer):
    ok: Literal[True]
    service: Literal["pocolobby"]
    restore_mode: bool
    incarnation: str | None
    restored_at: Time | None = None


class HealthError(Answer):
    code: Literal["store_unavailable"]
    message: str


class Unhealthy(Answer):
    ok: Literal[False]
    service: Literal["pocolobby"]
    error: HealthError


# ------------------------------------------------------------------ the agents' reports


class UsageStored(Answer):
    stored: Literal[True]
    usage: UsageEntry | None


class Stretch(Answer):
    started_at: Time | None
    ended_at: Time | None


class TurnAnswer(Answer):
    event: Literal["start", "end"]
    stretch: Stretch | None


class TokensStored(Answer):
    stored: int

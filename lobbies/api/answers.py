"""What /v1 answers, as TypedDicts: the one source of the answers' shapes.

The selectors, actions and tools return these dicts (a TypedDict costs nothing at run time,
so the wire stays what it was), and `lobbies.api.openapi` generates the published contract's
success schemas from the same classes through pydantic. The contract test (schemathesis
against a live broker, tests/lobbies/test_openapi_contract.py) fails when an answer leaves
its shape.

A key without `NotRequired` is always present (null where the type allows it); a
`NotRequired` one is present only where it applies, and its `Field(default=...)` is what the
document says a reader may assume when it is absent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal, NotRequired, cast

from pydantic import ConfigDict, Field, GetCoreSchemaHandler, WithJsonSchema, with_config
from pydantic_core import CoreSchema
from typing_extensions import TypedDict  # pydantic reads only its TypedDict on Python 3.11

from lobbies.api.schemas import MessageFields
from lobbies.models import DeliveryState, HeldReason, Kind, Priority, Scope
from lobbies.wire.facts import iso
from lobbies.wire.jsontext import JSONValue


@dataclass(frozen=True)
class SchemaAs:
    """Document a key as `shape` (an enum, a request model) while its typed value stays what
    the store hands over: a str for a choice, a dict for validated fields."""

    shape: object

    def __get_pydantic_core_schema__(
        self, source: object, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return handler(self.shape)


# ISO 8601 UTC with a Z (`lobbies.wire.iso`): a str in the dict, a date-time in the document.
Time = Annotated[str, WithJsonSchema({"format": "date-time", "type": "string"})]


# `iso` of a moment that is never null (a NOT NULL column): the same function, typed to give
# a `Time` rather than `Time | None`, at no cost per call.
at = cast("Callable[[datetime], Time]", iso)


TransportName = Literal["channel", "tmux", "none"]
ActivityName = Literal["working", "idle", "resting", "away", "not_responding"]
HostName = Literal["claude-code", "codex", "gemini", "shell", "msg"]
ScopeName = Annotated[str, SchemaAs(Scope)]
KindName = Annotated[str, SchemaAs(Kind)]
PriorityName = Annotated[str, SchemaAs(Priority)]
DeliveryStateName = Annotated[str, SchemaAs(DeliveryState)]
HeldReasonName = Annotated[str, SchemaAs(HeldReason)]
# A JSON object (`JSONObject`), spelled out: pydantic resolves `JSONValue` in this module.
Fields = Annotated[dict[str, JSONValue], SchemaAs(MessageFields)]
FreeObject = Annotated[dict[str, JSONValue], SchemaAs(dict[str, object])]

# What the document says an absent key means.
NULL_DEFAULT = Field(default=None)
_FALSE = Field(default=False)

ANSWER_CONFIG = ConfigDict(extra="forbid")

# An answer's TypedDict as a value: the class the document is made from.
AnswerShape = type[Mapping[str, object]]


# ------------------------------------------------------------------ messages


@with_config(ANSWER_CONFIG)
class DeliveryFacts(TypedDict):
    """A copy's delivery facts."""

    delivery_state: DeliveryStateName
    held_reason: Annotated[
        HeldReasonName | None, Field(description="Why it is held; null exactly when not held")
    ]
    delivered_at: Annotated[
        Time | None,
        Field(
            description="When the copy became pending: created_at for a message sent now, the "
            "delivery time for a scheduled one, null while it is held as scheduled"
        ),
    ]
    adapter_received_at: Annotated[
        Time | None,
        Field(
            description="When the recipient's bridge confirmed it received the push (a receipt "
            "frame); null with no bridge connected"
        ),
    ]
    notification_attempted_at: Annotated[
        Time | None,
        Field(
            description="When the broker last pushed the message to the recipient's bridge; "
            "null with no bridge connected"
        ),
    ]
    agent_seen_at: Annotated[Time | None, Field(description="When the recipient acknowledged it")]


@with_config(ANSWER_CONFIG)
class RecipientFacts(DeliveryFacts):
    """One recipient's delivery facts, on a message the reader sent."""

    agent_id: str


@with_config(ANSWER_CONFIG)
class AttachmentDescriptor(TypedDict):
    """What a message says of a file it carries: never its content."""

    id: int
    name: str
    media_type: str
    size: int


@with_config(ANSWER_CONFIG)
class AttachmentMeta(AttachmentDescriptor):
    sha256: str


@with_config(ANSWER_CONFIG)
class UploadAnswer(TypedDict):
    """The uploader proved possession of these bytes (201 stored now, 200 already proven)."""

    sha256: str
    size: int


@with_config(ANSWER_CONFIG)
class SendAnswer(TypedDict):
    """A send's answer: sent once the message and its delivery rows are committed."""

    status: Literal["stored"]
    message_id: int
    sequence: int
    created_at: Time
    duplicate: Annotated[
        bool,
        Field(description="true when a retry found the original: this is its answer, as of now"),
    ]
    recipients: Annotated[
        list[RecipientFacts],
        Field(description="One entry per recipient, with its delivery facts as they are now"),
    ]
    attachments: NotRequired[Annotated[list[AttachmentDescriptor] | None, NULL_DEFAULT]]


# "from" is a keyword: the keys up to it are declared the functional way, in wire order.
_MessageStart = TypedDict("_MessageStart", {"message_id": int, "sequence": int, "from": str})


@with_config(ANSWER_CONFIG)
class MessageEntry(_MessageStart):
    """A message as the reader may see it: recipient facts only on the reader's own sends."""

    scope: ScopeName
    kind: KindName | None
    reply_expected: bool
    priority: PriorityName
    content: str | None
    fields: Fields
    reply_to: int | None
    correlation_id: str | None
    created_at: Time
    from_owner: NotRequired[Annotated[bool, _FALSE]]
    to: NotRequired[Annotated[str | None, NULL_DEFAULT]]
    room_id: NotRequired[Annotated[str | None, NULL_DEFAULT]]
    addressed_to: NotRequired[Annotated[list[str] | None, NULL_DEFAULT]]
    supersedes: NotRequired[Annotated[int | None, NULL_DEFAULT]]
    deliver_at: NotRequired[Annotated[Time | None, NULL_DEFAULT]]
    late: NotRequired[Annotated[bool | None, NULL_DEFAULT]]
    schedule_id: NotRequired[Annotated[int | None, NULL_DEFAULT]]
    slot: NotRequired[Annotated[Time | None, NULL_DEFAULT]]
    client_request_id: NotRequired[Annotated[str | None, NULL_DEFAULT]]
    recipients: NotRequired[Annotated[list[RecipientFacts] | None, NULL_DEFAULT]]
    delivery: NotRequired[Annotated[DeliveryFacts | None, NULL_DEFAULT]]
    redacted: NotRequired[Annotated[bool, _FALSE]]
    attachments: NotRequired[Annotated[list[AttachmentDescriptor] | None, NULL_DEFAULT]]


_PushedStart = TypedDict("_PushedStart", {"message_id": int, "from": str})


class PushedMessage(_PushedStart):
    """A message as a push shows it, in a messages notice's JSON payload
    (lobbies.push.presentation.message_payload builds it; bridges read it, so its keys and
    their order are the wire, pinned by tests/lobbies/test_push_shape.py). The same message
    as `MessageEntry` says: each key here means what it means there, with the same value
    (tests/lobbies/test_push_shape.py), but a push omits what does not apply rather than
    sending null, and a push cut to headers has `content_bytes` in place of the body."""

    scope: ScopeName
    kind: KindName | None
    reply_expected: bool
    priority: PriorityName
    created_at: Time
    from_owner: NotRequired[bool]
    reply_to: NotRequired[int]
    room_id: NotRequired[str]
    addressed_to: NotRequired[list[str]]
    supersedes: NotRequired[int]
    deliver_at: NotRequired[Time]
    late: NotRequired[bool]
    schedule_id: NotRequired[int]
    slot: NotRequired[Time | None]
    correlation_id: NotRequired[str]
    attachments: NotRequired[list[AttachmentDescriptor]]
    content: NotRequired[str]
    fields: NotRequired[Fields]
    content_bytes: NotRequired[int]


@with_config(ANSWER_CONFIG)
class MessagesPage(TypedDict):
    """A page of the inbox (oldest first) or the history (newest first)."""

    view: Literal["inbox", "history"]
    messages: list[MessageEntry]
    next_cursor: str | None


@with_config(ANSWER_CONFIG)
class AcknowledgeAnswer(TypedDict):
    acknowledged: Annotated[
        list[int],
        Field(
            description="Your deliveries among the ids that are not held, newly seen or seen "
            "before: a repeated call returns the same ids and records nothing new"
        ),
    ]
    unknown_message_ids: Annotated[
        list[int],
        Field(
            description="Ids of no stored message (never existed, or deleted): nothing is "
            "recorded for them, and they are no error"
        ),
    ]
    held_message_ids: Annotated[
        list[int],
        Field(
            description="Your deliveries that are held (recipient_disabled ones stay held after "
            "re-enabling): not acknowledged, never in the inbox"
        ),
    ]
    receipt_sequence: Annotated[
        int,
        Field(description="Your highest receipt-event number after the call, 0 when none"),
    ]


# ------------------------------------------------------------------ agents


@with_config(ANSWER_CONFIG)
class Permissions(TypedDict):
    manage_rooms: bool
    broadcast: bool


@with_config(ANSWER_CONFIG)
class StatusLine(TypedDict):
    line: str
    updated_at: Time | None


@with_config(ANSWER_CONFIG)
class OwnerRequests(TypedDict):
    count: int
    line: str
    updated_at: Time | None


@with_config(ANSWER_CONFIG)
class UsageWindow(TypedDict):
    used_percentage: float
    left_percentage: float
    resets_at: Time


@with_config(ANSWER_CONFIG)
class UsageEntry(TypedDict):
    """The agent's latest plan usage reading, as pages show it."""

    five_hour: UsageWindow | None
    seven_day: UsageWindow | None
    pace_points: float | None
    off_pace: bool
    reading_age_seconds: int


@with_config(ANSWER_CONFIG)
class NoticesHeld(TypedDict):
    """A tmux bridge holds its notices: since when, and why (the pane is busy, say)."""

    since: Time
    reason: str


@with_config(ANSWER_CONFIG)
class AgentEntry(TypedDict):
    """An enabled agent of the lobby with its status, owner requests and presence."""

    agent_id: str
    description: str
    permissions: Permissions
    status: StatusLine | None
    owner_requests: OwnerRequests | None
    last_message_at: Time | None
    last_activity_at: Time | None
    idle_seconds: int | None
    # What it is doing now, by lobbies.activity's precedence, since when, and on what host.
    activity: ActivityName
    activity_since: Time | None
    host: HostName | None
    through_msg: bool  # present only by `pocolobby msg` calls (no bridge connected)
    connected: bool
    last_heartbeat_at: Time | None
    last_receipt_at: Time | None
    unseen_notified_count: int
    oldest_unseen_notified_at: Time | None
    notification_attention_required: bool
    transport: TransportName
    notices_held: NoticesHeld | None
    usage: NotRequired[Annotated[UsageEntry | None, NULL_DEFAULT]]


@with_config(ANSWER_CONFIG)
class AgentList(TypedDict):
    lobby: str
    agents: list[AgentEntry]


@with_config(ANSWER_CONFIG)
class Standing(TypedDict):
    """The calling agent's own standing, read without claiming or touching its runtime."""

    lobby: str
    agent_id: str
    delivery_paused: bool
    resting: bool
    connected: bool


@with_config(ANSWER_CONFIG)
class StatusAnswer(TypedDict):
    status: str | None
    updated_at: Time | None


@with_config(ANSWER_CONFIG)
class OwnerRequestsAnswer(TypedDict):
    count: int
    line: str
    updated_at: Time | None


@with_config(ANSWER_CONFIG)
class ReadyAnswer(TypedDict):
    ready: Literal[True]
    runtime_id: str | None
    generation: int
    ready_at: Time | None


# ------------------------------------------------------------------ rooms


@with_config(ANSWER_CONFIG)
class RoomEntry(TypedDict):
    room_id: str
    members: list[str]
    created_at: Time


@with_config(ANSWER_CONFIG)
class ListedRoom(RoomEntry):
    member: bool


@with_config(ANSWER_CONFIG)
class RoomList(TypedDict):
    rooms: list[ListedRoom]


@with_config(ANSWER_CONFIG)
class DeleteRoomAnswer(TypedDict):
    deleted: str
    held: int
    schedules_cancelled: int
    members: int


@with_config(ANSWER_CONFIG)
class WatchAnswer(TypedDict):
    """What you watch now: every agent, the ones named, or nothing (watching null)."""

    every_agent: bool
    watching: list[str] | None


@with_config(ANSWER_CONFIG)
class RestAnswer(TypedDict):
    agent_ids: list[str]
    rest: bool
    at: Time | None


# ------------------------------------------------------------------ schedules


@with_config(ANSWER_CONFIG)
class ScheduleEntry(TypedDict):
    schedule_id: int
    scope: ScopeName
    target: str | None
    time_zone: str
    times: list[str]
    weekdays: list[int] | None
    status: str
    next_slot: Time | None
    last_slot: Time | None
    content_preview: str


@with_config(ANSWER_CONFIG)
class ScheduleAnswer(ScheduleEntry):
    duplicate: bool


@with_config(ANSWER_CONFIG)
class WaitingMessage(TypedDict):
    message_id: int
    deliver_at: Time | None
    scope: ScopeName
    room_id: str | None
    content_preview: str


@with_config(ANSWER_CONFIG)
class ScheduledList(TypedDict):
    schedules: list[ScheduleEntry]
    messages: list[WaitingMessage]


@with_config(ANSWER_CONFIG)
class CancelAnswer(TypedDict):
    """One of `message_id` or `schedule_id`, whichever was cancelled."""

    message_id: NotRequired[Annotated[int | None, NULL_DEFAULT]]
    schedule_id: NotRequired[Annotated[int | None, NULL_DEFAULT]]
    status: str


@with_config(ANSWER_CONFIG)
class UpdateScheduledAnswer(TypedDict):
    message_id: int
    deliver_at: Time | None
    content_bytes: int


# ------------------------------------------------------------------ continuity


@with_config(ANSWER_CONFIG)
class CheckpointEntry(TypedDict):
    revision: int
    checkpoint: FreeObject
    covers_receipts_through: int
    saved_at: Time
    age_seconds: int
    saved_by_generation: int | None


@with_config(ANSWER_CONFIG)
class SaveCheckpointAnswer(TypedDict):
    """The acknowledgment fields are present when the save acknowledged messages."""

    revision: int
    saved_at: Time
    covers_receipts_through: int
    acknowledged: NotRequired[Annotated[list[int] | None, NULL_DEFAULT]]
    unknown_message_ids: NotRequired[Annotated[list[int] | None, NULL_DEFAULT]]
    receipt_sequence: NotRequired[Annotated[int | None, NULL_DEFAULT]]


@with_config(ANSWER_CONFIG)
class ReadCheckpointAnswer(TypedDict):
    checkpoint: CheckpointEntry | None


@with_config(ANSWER_CONFIG)
class RuntimeEntry(TypedDict):
    runtime_id: str | None
    generation: int
    bound_at: Time | None
    ready: bool
    loaded_checkpoint_revision: int | None
    hello_request_id: str | None


_HeaderStart = TypedDict("_HeaderStart", {"message_id": int, "from": str})


@with_config(ANSWER_CONFIG)
class MessageHeader(_HeaderStart):
    kind: KindName | None
    priority: PriorityName
    created_at: Time
    content_bytes: int


@with_config(ANSWER_CONFIG)
class InboxSummary(TypedDict):
    pending: int
    important: int
    oldest_pending_at: Time | None
    first: list[MessageHeader]


@with_config(ANSWER_CONFIG)
class Receipt(TypedDict):
    """When the reader acknowledged it, and that receipt's number."""

    receipt_sequence: int
    seen_at: Time


@with_config(ANSWER_CONFIG)
class UncertainMessage(Receipt, MessageEntry):
    pass


@with_config(ANSWER_CONFIG)
class UncertainHeader(Receipt, MessageHeader):
    pass


@with_config(ANSWER_CONFIG)
class UncertainReceipts(TypedDict):
    total: int
    covered_through: int
    messages: list[UncertainMessage]
    headers: list[UncertainHeader]
    next_cursor: str | None


@with_config(ANSWER_CONFIG)
class GuideEntry(TypedDict):
    name: str
    purpose: str
    arguments: dict[str, str]


@with_config(ANSWER_CONFIG)
class ToolGuide(TypedDict):
    revision: str
    tools: list[GuideEntry]


@with_config(ANSWER_CONFIG)
class BrokerIdentity(TypedDict):
    host: str
    process_id: str
    version: str
    event_version: int
    incarnation: str


@with_config(ANSWER_CONFIG)
class Restored(TypedDict):
    incarnation: str
    backup_taken_at: Time | None
    restored_at: Time | None
    uncertain_message_ids: list[int]
    note: str


@with_config(ANSWER_CONFIG)
class ContextAnswer(TypedDict):
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

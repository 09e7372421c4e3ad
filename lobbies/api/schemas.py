"""Wire schemas: one strict pydantic model per operation validates input and gives its schema."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from annotated_types import GroupedMetadata
from django.conf import settings
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    model_validator,
)

from lobbies.access.permissions import Grant
from lobbies.models import Kind
from lobbies.names import NAME_PATTERN
from lobbies.wire.jsontext import MAX_JSON_DEPTH
from lobbies.wire.media import MAX_ATTACHMENTS, is_document, is_image, media_type_of


def _text(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from exc
    return value


# Characters a line must not hold besides C0 controls and DEL: C1 controls, the Unicode line
# and paragraph separators, and the bidi embeddings/overrides/isolates, with which an agent
# could break or reorder a line the owner reads.
_NOT_IN_A_LINE = frozenset(
    [*range(0x80, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)


def check_line(value: str) -> str:
    """The one rule for "line" arguments (status, owner requests, ids, fields, query, nonce)."""
    _text(value)
    for ch in value:
        code = ord(ch)
        if code < 0x20 or code == 0x7F:
            raise ValueError("must be one line without control characters")
        if code in _NOT_IN_A_LINE:
            raise ValueError(
                f"must not contain U+{code:04X} (C1 controls, line separators and bidi "
                "controls are refused in a line)"
            )
    return value


def _content(value: str) -> str:
    _text(value)
    limit = settings.BOUNDS.content_bytes
    size = len(value.encode("utf-8"))
    if size > limit:
        raise ValueError(f"is {size} bytes; the limit is {limit} bytes of UTF-8")
    return value


@dataclass(frozen=True)
class _Checked(GroupedMetadata):
    """Bounds on a string, checked first, then one validator: `Annotated[str, bounded_text(9)]`.

    A metadata object rather than an Annotated type made by a call, so an annotation stays a
    type the type checker reads.
    """

    max_length: int
    min_length: int
    check: Callable[[str], str]

    def __iter__(self) -> Iterator[object]:
        yield StringConstraints(min_length=self.min_length, max_length=self.max_length)
        yield AfterValidator(self.check)


def bounded_text(max_length: int, min_length: int = 0) -> _Checked:
    """A bounded string without NUL or lone surrogates; bounds are checked first."""
    return _Checked(max_length, min_length, _text)


def one_line(max_length: int, min_length: int = 0) -> _Checked:
    """A bounded single line without control characters; bounds are checked first."""
    return _Checked(max_length, min_length, check_line)


AgentName = Annotated[str, Field(pattern=NAME_PATTERN, description="An agent_id in your lobby")]
MessageId = Annotated[int, Field(ge=1, le=2**62)]


class Operation(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class MessageFields(Operation):
    """Facts a coordinator acts on, kept out of free text."""

    commit: Annotated[str, one_line(64, 4)] | None = Field(
        None, description="A commit SHA or ref the message is about"
    )
    files: Annotated[list[Annotated[str, one_line(512, 1)]], Field(max_length=50)] | None = Field(
        None, description="Repository-relative paths, at most 50"
    )
    evidence: Annotated[str, one_line(1024, 1)] | None = Field(
        None, description="A logical location each machine resolves, e.g. dropbox:team/run-42"
    )
    options: Annotated[list[Annotated[str, one_line(300, 1)]], Field(max_length=10)] | None = Field(
        None, description="Choices offered to the recipient, at most 10"
    )
    recommendation: Annotated[str, bounded_text(2000, 1)] | None = Field(
        None, description="The option the sender recommends, and why"
    )


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("must carry a time zone, e.g. 2026-12-01T09:00:00Z")
    in_utc(value)
    return value


def in_utc(value: datetime) -> datetime:
    """`value` in UTC, or a ValueError: 0001-01-01T00:00+14:00 has no UTC time in the calendar,
    and comparing or storing it would raise OverflowError (a 500) instead of a refusal."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is outside the calendar once converted to UTC") from None


def json_depth(value: object) -> int:
    """How deeply `value` (any value at all) nests lists and objects, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def check_depth(value: object, what: str = "the body") -> None:
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"{what} nests JSON deeper than {MAX_JSON_DEPTH} levels")


AwareTime = Annotated[datetime, Strict(False), AfterValidator(_aware)]
RoomName = Annotated[str, Field(pattern=NAME_PATTERN, description="A room id of your lobby")]


def attachment_limit(media_type: str) -> tuple[int, str]:
    """The per-file limit for a media type and the variable that sets it."""
    bounds = settings.BOUNDS
    if is_image(media_type):
        return bounds.attachment_image_bytes, "POCOLOBBY_ATTACHMENT_IMAGE_BYTES"
    return bounds.attachment_document_bytes, "POCOLOBBY_ATTACHMENT_DOCUMENT_BYTES"


def check_media_type(value: str) -> str:
    media_type = media_type_of(value)
    if not (is_image(media_type) or is_document(media_type)):
        raise ValueError(
            f"{value[:100]!r} is not an attachment type: PNG, JPEG, GIF or WebP images, or "
            "UTF-8 text documents (text/*, application/json, ...)"
        )
    return media_type


def _file_name(value: str) -> str:
    check_line(value)
    if "/" in value or "\\" in value or value in {".", ".."}:
        raise ValueError("must be a file name without a directory")
    return value


class AttachmentDescription(Operation):
    """A file the bridge read, stored by its SHA-256 (PUT /v1/attachments/<sha256>)."""

    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] = Field(
        description="The SHA-256 of the bytes, 64 lowercase hex digits"
    )
    name: Annotated[
        str, StringConstraints(min_length=1, max_length=255), AfterValidator(_file_name)
    ]
    media_type: Annotated[str, StringConstraints(max_length=100), AfterValidator(check_media_type)]
    size: Annotated[int, Field(ge=1, le=2**40)]

    @model_validator(mode="after")
    def _within_limit(self) -> AttachmentDescription:
        limit, variable = attachment_limit(self.media_type)
        if self.size > limit:
            raise ValueError(
                f"{self.name!r} is {self.size} bytes; the limit for {self.media_type} is "
                f"{limit} bytes ({variable})"
            )
        return self


Attachments = Annotated[list[AttachmentDescription], Field(max_length=MAX_ATTACHMENTS)]
ATTACHMENTS_DESCRIPTION = (
    f"Up to {MAX_ATTACHMENTS} files, as absolute local paths; the bridge reads and uploads them"
)
# What the HTTP routes take in place of the paths the catalog shows the model (catalog.py).
ATTACHMENT_DESCRIPTIONS = (
    f"Up to {MAX_ATTACHMENTS} files' descriptions, each uploaded first "
    "(PUT /v1/attachments/<sha256>); the catalog shows the model absolute local paths instead"
)


class SendOptions(Operation):
    """What every send tool takes besides its addressing."""

    content: Annotated[str, StringConstraints(min_length=1), AfterValidator(_content)] = Field(
        description="The message text, at most 64 KiB of UTF-8 (POCOLOBBY_CONTENT_BYTES)"
    )
    client_request_id: Annotated[str, Field(pattern=r"^[\x21-\x7e]{1,128}$")] = Field(
        description=(
            "A stable id for this send: repeat it unchanged when retrying an uncertain send, "
            "so the broker returns the original instead of storing a second message"
        )
    )
    kind: Annotated[Kind, Strict(False)] | None = Field(
        None, description="What you expect: request, notice, assignment, report or question"
    )
    reply_expected: bool | None = Field(
        None,
        description="Only with a kind; defaults to false for notice and report, true for the "
        "other kinds",
    )
    priority: Literal["info", "important"] = "info"
    reply_to: MessageId | None = Field(None, description="The message this one answers")
    correlation_id: Annotated[str, one_line(128, 1)] | None = None
    fields: MessageFields | None = None
    notify_when_seen: bool = Field(
        False, description="Push you a compact receipt when the recipient acknowledges it"
    )
    deliver_at: AwareTime | None = Field(
        None,
        description="Hold the message until this time (ISO 8601 with zone), at most 30 days "
        "ahead; it is stored now and delivered then",
    )
    supersedes: MessageId | None = Field(
        None,
        description="One of your earlier messages this replaces: its copies not yet seen are "
        "held, and those who saw it get this one as an ordinary message",
    )
    attachments: Attachments | None = Field(None, description=ATTACHMENT_DESCRIPTIONS)

    @model_validator(mode="after")
    def _reply_expectation_needs_kind(self) -> SendOptions:
        if self.reply_expected is not None and self.kind is None:
            raise ValueError("reply_expected needs a kind: choose one so the recipient knows")
        return self


class SendMessage(SendOptions):
    """Send one message to one agent of your lobby, or to yourself."""

    to: AgentName


class SendRoomMessage(SendOptions):
    """Send a message to a room's members, or only to up to 20 of them named in addressed_to."""

    room_id: RoomName
    addressed_to: Annotated[list[AgentName], Field(min_length=1, max_length=20)] | None = Field(
        None,
        description="Up to 20 members who get deliveries; the rest of the room is not woken. "
        "Every name must be another enabled member, or nothing is sent",
    )


class Broadcast(SendOptions):
    """Send a message to every enabled agent of the lobby; needs the broadcast permission."""


class ScheduleMessage(Operation):
    """Send a message every day at local times in an IANA zone, until cancelled.

    Give exactly one of `to`, `room_id` or `broadcast: true`. Each occurrence is a real
    message, authorized and addressed when it fires, with its slot as `deliver_at`.
    """

    client_request_id: Annotated[str, Field(pattern=r"^[\x21-\x7e]{1,128}$")] = Field(
        description="A stable id: a retry returns the schedule instead of creating another"
    )
    to: AgentName | None = None
    room_id: RoomName | None = None
    broadcast: bool = False
    addressed_to: Annotated[list[AgentName], Field(min_length=1, max_length=20)] | None = None
    content: Annotated[str, StringConstraints(min_length=1), AfterValidator(_content)]
    kind: Annotated[Kind, Strict(False)] | None = None
    reply_expected: bool | None = None
    priority: Literal["info", "important"] = "info"
    fields: MessageFields | None = None
    notify_when_seen: bool = False
    time_zone: Annotated[str, one_line(64, 1)] = Field(
        description="An IANA zone such as Europe/Berlin"
    )
    times: Annotated[
        list[Annotated[str, Field(max_length=5)]], Field(min_length=1, max_length=24)
    ] = Field(description='1-24 local times of day, "HH:MM"')
    weekdays: Annotated[list[int], Field(min_length=1, max_length=7)] | None = Field(
        None, description="ISO weekdays 1=Monday..7=Sunday; every day when left out"
    )
    attachments: Attachments | None = Field(None, description=ATTACHMENT_DESCRIPTIONS)

    @model_validator(mode="after")
    def _one_target(self) -> ScheduleMessage:
        chosen = [self.to is not None, self.room_id is not None, self.broadcast]
        if sum(chosen) != 1:
            raise ValueError("give exactly one of to, room_id or broadcast: true")
        if self.addressed_to is not None and self.room_id is None:
            raise ValueError("addressed_to names members of a room: give room_id with it")
        if self.reply_expected is not None and self.kind is None:
            raise ValueError("reply_expected needs a kind: choose one so the recipient knows")
        return self


class ListScheduled(Operation):
    """Your active daily schedules and your scheduled messages still waiting for their time."""


class CancelScheduled(Operation):
    """Cancel one of your schedules or one of your scheduled messages not yet delivered."""

    message_id: MessageId | None = None
    schedule_id: MessageId | None = None

    @model_validator(mode="after")
    def _one_target(self) -> CancelScheduled:
        if (self.message_id is None) == (self.schedule_id is None):
            raise ValueError("give exactly one of message_id or schedule_id")
        return self


class UpdateScheduled(Operation):
    """Move or reword one of your scheduled messages before it is delivered."""

    message_id: MessageId
    deliver_at: AwareTime | None = None
    content: Annotated[str, StringConstraints(min_length=1), AfterValidator(_content)] | None = None

    @model_validator(mode="after")
    def _something(self) -> UpdateScheduled:
        if self.deliver_at is None and self.content is None:
            raise ValueError("give deliver_at, content or both")
        return self


RoomMembers = Annotated[list[AgentName], Field(max_length=200)]


class ListRooms(Operation):
    """The rooms of your lobby you can see, with their members."""


class CreateRoom(Operation):
    """Create a room of already admitted agents of your lobby."""

    room_id: RoomName
    members: RoomMembers = Field(default_factory=list)


class SetRoomMembers(Operation):
    """Replace a room's whole member list (read list_rooms first)."""

    room_id: RoomName
    members: RoomMembers


class AddRoomMembers(Operation):
    """Add members to a room, keeping the others."""

    room_id: RoomName
    members: Annotated[list[AgentName], Field(min_length=1, max_length=200)]


class RemoveRoomMembers(Operation):
    """Remove members from a room, keeping the others; their unseen copies are held."""

    room_id: RoomName
    members: Annotated[list[AgentName], Field(min_length=1, max_length=200)]


class DeleteRoom(Operation):
    """Delete a room, keeping its history; unseen copies are held and its schedules end.

    A retry cannot tell "already deleted" from "never existed", and the id may be reused:
    check list_rooms before retrying.
    """

    room_id: RoomName


class RestAgents(Operation):
    """Rest agents so nothing is pushed to them (messages still queue), or resume them."""

    agent_ids: Annotated[list[AgentName], Field(min_length=1, max_length=200)]
    rest: bool = Field(description="true rests them, false resumes them")
    at: AwareTime | None = Field(None, description="When to do it; now when left out")


class WatchAgents(Operation):
    """Be told when agents you coordinate start working, finish, go away or stop responding.

    Pushed as `activity` events (names and states, never a message body), at most one every
    30 seconds, never about your own changes; list_agents has the same facts.
    """

    agent_ids: Annotated[list[AgentName], Field(min_length=1, max_length=200)] | None = Field(
        None, description="Whom to watch (or stop watching); every agent of the lobby when left out"
    )
    on: bool = Field(True, description="true starts watching them, false stops")


class GetMessages(Operation):
    """Read your pending inbox (oldest first) or your history (newest first), in pages."""

    view: Literal["inbox", "history"] = "inbox"
    query: Annotated[str, one_line(200, 1)] | None = Field(
        None, description="History only: messages whose text contains this, case-insensitively"
    )
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,200}$")] | None = Field(
        None, description="next_cursor from the previous page"
    )

    @model_validator(mode="after")
    def _query_only_in_history(self) -> GetMessages:
        if self.query is not None and self.view != "history":
            raise ValueError("query searches history: pass view 'history' with it")
        return self


class AcknowledgeMessages(Operation):
    """Mark explicit message ids seen. Idempotent; never acknowledges by sequence."""

    message_ids: Annotated[list[MessageId], Field(min_length=1, max_length=500)]


class Ready(Operation):
    """Confirm bootstrap: echo the nonce of the bootstrap notice after loading get_context.

    The broker records the checkpoint revision you loaded; then save a checkpoint covering
    your receipts so far.
    """

    nonce: Annotated[str, one_line(64, 1)] = Field(
        description="The nonce of your runtime's latest bootstrap notice"
    )
    checkpoint_revision: Annotated[int, Field(ge=0)] | None = Field(
        None,
        description=(
            "The checkpoint revision get_context showed you (0 for none); if a newer one was "
            "saved since, ready fails as stale_checkpoint and you reload the context"
        ),
    )


def _checkpoint(value: dict[str, Any]) -> dict[str, Any]:
    check_depth(value, "the checkpoint")
    encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if "\\u0000" in encoded or "\x00" in encoded:
        raise ValueError("must not contain NUL characters")
    try:
        size = len(encoded.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from exc
    limit = settings.BOUNDS.checkpoint_bytes
    if size > limit:
        raise ValueError(
            f"is {size} bytes as JSON; the limit is {limit} (POCOLOBBY_CHECKPOINT_BYTES)"
        )
    return value


class GetContext(Operation):
    """Load what a session needs to carry on: role, checkpoint, inbox, uncertain receipts."""

    cursor: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,200}$")] | None = Field(
        None, description="next_cursor of the uncertain receipts, for their next page"
    )


class SaveCheckpoint(Operation):
    """Save your checkpoint: objective, decisions, next actions, open message ids, references."""

    expected_revision: Annotated[int, Field(ge=0)] = Field(
        description="The revision you are replacing (0 when you have none); a mismatch is 409"
    )
    checkpoint: Annotated[dict[str, Any], AfterValidator(_checkpoint)] = Field(
        description="A JSON object, at most 32 KiB; store references other machines can resolve"
    )
    covers_receipts_through: Annotated[int, Field(ge=0)] = Field(
        description="The receipt_sequence this checkpoint accounts for (from get_context or an "
        "acknowledgment), at most your current one; receipts after it stay listed as uncertain "
        "work"
    )
    acknowledge_message_ids: Annotated[list[MessageId], Field(max_length=500)] = Field(
        default_factory=list,
        description="Messages to acknowledge in the same transaction as the checkpoint",
    )


class ReadCheckpoint(Operation):
    """Read your latest checkpoint and its age."""


class ListAgents(Operation):
    """List the enabled agents of your lobby with their status and owner requests.

    Each has activity (working, idle, resting, away or not_responding) and activity_since,
    host when known (claude-code, codex, gemini, shell or msg), last_message_at (its own
    schedules' occurrences aside), last_activity_at (the latest of sent, received and
    acknowledged) and idle_seconds since then.
    """


class SetStatus(Operation):
    """Set the one line peers read beside you in list_agents; empty clears it."""

    status: Annotated[str, one_line(200)] = Field(
        description="Stored trimmed; empty or blank clears it"
    )


class SetOwnerRequests(Operation):
    """Say what you wait on from the owner: a count and one line naming each. 0 clears it."""

    count: Annotated[int, Field(ge=0, le=99)] = Field(
        description="How many things you wait on; 0 clears the requests"
    )
    line: Annotated[str, one_line(300)] = Field(
        "", description="Names them, non-blank when count is above 0, empty when 0; stored trimmed"
    )

    @model_validator(mode="after")
    def _line_names_requests(self) -> SetOwnerRequests:
        if self.count > 0 and not self.line.strip():
            raise ValueError("line must name what you wait on when count is above 0")
        if self.count == 0 and self.line:
            raise ValueError("line must be empty when count is 0 (that clears your requests)")
        return self


# The operator's team manifest (`pocolobby team apply`): the TOML file as the CLI sends it, with
# each role_file read into `role`. Names are checked by the action, which says which key.


class TeamAgent(Operation):
    """`[agents.NAME]`: what peers see, the role its sessions load, what it may do."""

    description: Annotated[str, bounded_text(200)] = ""
    role: Annotated[str, bounded_text(32_768)] = ""
    permissions: Annotated[list[Grant], Field(max_length=10)] = Field(default_factory=list)


class TeamRoom(Operation):
    """`[rooms.NAME]`: its whole member list."""

    members: Annotated[list[str], Field(max_length=200)]


class TeamManifest(Operation):
    """A lobby's agents and rooms as they should be."""

    lobby: str
    agents: Annotated[dict[str, TeamAgent], Field(max_length=200)] = Field(default_factory=dict)
    rooms: Annotated[dict[str, TeamRoom], Field(max_length=200)] = Field(default_factory=dict)

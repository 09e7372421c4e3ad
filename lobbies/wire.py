"""What the broker and the bridge must agree on, in one Django-free leaf.

The bridge (pocolobby/bridge) imports this module and nothing else of `lobbies`; it imports
no other module (import-linter checks both). The event version, the header names, the frames
(their type names, each one's shape, and the bridge's parser of each), the one time format,
the cursors, and the delivery and addressing facts a message carries on the wire; and how
text another party wrote is shown in a terminal, which the bridge and the CLI share.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from itertools import accumulate
from typing import Any, Final, Literal, NotRequired, Protocol, TypeAlias, TypedDict, TypeGuard

# The push protocol's version: a bridge stating another is refused with bridge_outdated.
EVENT_VERSION = 5

# Headers a bridge sends on the stream's upgrade and on its HTTP requests.
EVENT_VERSION_HEADER = "X-PocoLobby-Event-Version"
RUNTIME_HEADER = "X-PocoLobby-Runtime"
GENERATION_HEADER = "X-PocoLobby-Generation"

# Frames the broker sends on the stream.
FRAME_WELCOME: Final = "welcome"
FRAME_NOTICE: Final = "notice"
FRAME_ERROR: Final = "error"
FRAME_HEARTBEAT: Final = "heartbeat"
# The agent's tools changed: names the new catalog revision; the bridge reloads the catalog.
FRAME_CATALOG: Final = "catalog"
# The largest frame a bridge takes as a push; a larger one is neither written nor confirmed.
MAX_PUSH_FRAME_BYTES = 72 * 1024
# POCOLOBBY_PUSH_BYTES, the content's bound as framed, may be at most this: the rest of the
# frame (ids, meta attributes, its own fields) needs the difference.
MAX_PUSH_CONTENT_BYTES = 64 * 1024
# Frames a bridge sends (besides heartbeat): what became of a notice.
FRAME_RECEIVED: Final = "received"
FRAME_HOST_WRITTEN: Final = "host_written"
# How this bridge delivers (`transport`), whether it holds notices (`held`, `held_reason`), and
# `attention` when a held notice was given up: sent after the welcome and on every change. A
# bridge that never sends it is a Channel bridge.
FRAME_DELIVERY: Final = "delivery"
# The conversation ended cleanly: the bridge's host told it to end (stdin closed, SIGINT or
# SIGTERM) and it says so before closing, so the next new conversation takes the agent.
FRAME_RELEASE: Final = "release"
BRIDGE_FRAMES = (
    FRAME_HEARTBEAT,
    FRAME_RECEIVED,
    FRAME_HOST_WRITTEN,
    FRAME_DELIVERY,
    FRAME_RELEASE,
)
TRANSPORT_CHANNEL: Final = "channel"
TRANSPORT_TMUX: Final = "tmux"
HELD_REASON_CHARS = 200


# ------------------------------------------------------------ the frames, typed once
# Each frame's shape, as the broker builds it (lobbies/push.py, lobbies/consumers.py) and the
# bridge reads it (pocolobby/bridge/link.py). TypedDicts: the frames stay plain dicts, so
# typing them costs nothing on the push path; the bridge checks what it reads with one
# parsing function per frame type (`parse_welcome`, `parse_notice`, ...).

# JSON as Python holds it once parsed, for code that reads free JSON (frames, a checkpoint, a
# request body, a host's status line) and narrows it with isinstance rather than trusting it.
JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None
JSONObject: TypeAlias = dict[str, JSONValue]


class WelcomeFrame(TypedDict):
    """The broker admitted this socket: the agent, its lobby and the runtime's generation."""

    type: Literal["welcome"]
    event_version: int
    agent_id: str
    lobby_id: str
    runtime_id: str | None
    generation: int
    bootstrap: bool  # a new process: a bootstrap notice follows


class NoticeFrame(TypedDict):
    """What the agent is told: a headline and a JSON payload in `content` (lobbies.presentation)."""

    type: Literal["notice"]
    event_version: int
    notice_id: str
    notice_kind: str  # lobbies.models.NoticeKind
    generation: int
    as_of: str | None
    message_ids: list[int]
    count: int
    truncated: bool
    content: str
    meta: dict[str, str]
    extensions: JSONObject


class ErrorFrame(TypedDict):
    """A frame refused (`code`, `message`); with `status`, the socket is refused and closes."""

    type: Literal["error"]
    status: NotRequired[int]
    code: str
    message: str


class HeartbeatFrame(TypedDict):
    type: Literal["heartbeat"]


class CatalogFrame(TypedDict):
    type: Literal["catalog"]
    revision: str


class ReceivedFrame(TypedDict):
    type: Literal["received"]
    notice_id: str


class HostWrittenFrame(TypedDict):
    type: Literal["host_written"]
    notice_id: str


class DeliveryFrame(TypedDict):
    type: Literal["delivery"]
    transport: Literal["channel", "tmux"]
    held: bool
    held_reason: NotRequired[str]
    attention: NotRequired[bool]


class ReleaseFrame(TypedDict):
    type: Literal["release"]


BrokerFrame: TypeAlias = WelcomeFrame | NoticeFrame | ErrorFrame | HeartbeatFrame | CatalogFrame
BridgeFrame: TypeAlias = (
    HeartbeatFrame | ReceivedFrame | HostWrittenFrame | DeliveryFrame | ReleaseFrame
)


class FrameRefused(ValueError):
    """A frame that is not the shape its type names; the message says which member is wrong."""


def _is_integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(frame: Mapping[str, object], key: str) -> str:
    value = frame.get(key)
    if not isinstance(value, str):
        raise FrameRefused(f"{key}: text expected")
    return value


def _text_or_none(frame: Mapping[str, object], key: str) -> str | None:
    value = frame.get(key)
    if value is not None and not isinstance(value, str):
        raise FrameRefused(f"{key}: text or null expected")
    return value


def _integer(frame: Mapping[str, object], key: str) -> int:
    value = frame.get(key)
    if not _is_integer(value):
        raise FrameRefused(f"{key}: an integer expected")
    return value


def _flag(frame: Mapping[str, object], key: str) -> bool:
    value = frame.get(key)
    if not isinstance(value, bool):
        raise FrameRefused(f"{key}: true or false expected")
    return value


def _integers(frame: Mapping[str, object], key: str) -> list[int]:
    value = frame.get(key)
    if not isinstance(value, list) or not all(_is_integer(i) for i in value):
        raise FrameRefused(f"{key}: a list of integers expected")
    return value


def _texts(frame: Mapping[str, object], key: str) -> dict[str, str]:
    value = frame.get(key)
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise FrameRefused(f"{key}: an object of texts expected")
    return value


def _object(frame: Mapping[str, object], key: str) -> JSONObject:
    value = frame.get(key)
    if not isinstance(value, dict):
        raise FrameRefused(f"{key}: an object expected")
    return value


def parse_welcome(frame: Mapping[str, object]) -> WelcomeFrame:
    return {
        "type": FRAME_WELCOME,
        "event_version": _integer(frame, "event_version"),
        "agent_id": _text(frame, "agent_id"),
        "lobby_id": _text(frame, "lobby_id"),
        "runtime_id": _text_or_none(frame, "runtime_id"),
        "generation": _integer(frame, "generation"),
        "bootstrap": _flag(frame, "bootstrap"),
    }


def parse_notice(frame: Mapping[str, object]) -> NoticeFrame:
    return {
        "type": FRAME_NOTICE,
        "event_version": _integer(frame, "event_version"),
        "notice_id": _text(frame, "notice_id"),
        "notice_kind": _text(frame, "notice_kind"),
        "generation": _integer(frame, "generation"),
        "as_of": _text_or_none(frame, "as_of"),
        "message_ids": _integers(frame, "message_ids"),
        "count": _integer(frame, "count"),
        "truncated": _flag(frame, "truncated"),
        "content": _text(frame, "content"),
        "meta": _texts(frame, "meta"),
        "extensions": _object(frame, "extensions"),
    }


def parse_error(frame: Mapping[str, object]) -> ErrorFrame:
    parsed: ErrorFrame = {
        "type": FRAME_ERROR,
        "code": _text(frame, "code"),
        "message": _text(frame, "message"),
    }
    if "status" in frame:
        parsed["status"] = _integer(frame, "status")
    return parsed


def parse_heartbeat(frame: Mapping[str, object]) -> HeartbeatFrame:
    return {"type": FRAME_HEARTBEAT}


def parse_catalog(frame: Mapping[str, object]) -> CatalogFrame:
    return {"type": FRAME_CATALOG, "revision": _text(frame, "revision")}


# How deeply JSON may nest lists and objects where nothing says otherwise: deeper text is
# refused before it is parsed, since everything that walks JSON recursively (the parsers,
# json.dumps, pydantic, the database's JSON functions) fails somewhere near 200 to 1,000
# levels, with a RecursionError or an error that names something else.
MAX_JSON_DEPTH = 64
# The bound for text whose parts are held to MAX_JSON_DEPTH after parsing (a /v1 body's
# arguments, a frame carrying them), so a refusal can name the part; well below the standard
# parser's recursion limit.
PARSE_DEPTH = 512


class JsonTooDeep(ValueError):
    """JSON text nesting deeper than the bound its reader set."""


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# Opening brackets become +1, closing ones -1 (as signed bytes).
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def json_nesting(text: bytes) -> int:
    """How deeply `text` nests arrays and objects, counted without parsing or recursion (the
    brackets outside strings; text that is not JSON gets a number all the same)."""
    if b'"' in text:
        text = _STRING.sub(b"", text)
    steps = text.translate(None, _NOT_BRACKETS).translate(_STEPS)
    return max(accumulate(memoryview(steps).cast("b")), default=0)


def load_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH, what: str = "the text") -> Any:
    """JSON text parsed, or a ValueError: JsonTooDeep past `max_depth` levels of nesting.

    The one parse of JSON from outside (pages, frames, the bridge's host): bracket counts
    are compared first, so most text costs two counts on top of the parse.
    """
    if _openers(text) > max_depth:
        check_json_nesting(text, max_depth, what)
    try:
        return json.loads(text)
    except RecursionError:  # only when the caller's bound is above the parser's
        raise JsonTooDeep(f"{what} nests JSON too deeply to be read") from None


# NUL (U+0000) is refused wherever text arrives: PostgreSQL's text cannot hold it (a 500
# there), and SQLite would store it; one rule for both stores (docs/API.md, `invalid_text`).
NUL = "\x00"


def may_hold_nul(text: str | bytes) -> bool:
    """Whether JSON text may decode to a NUL: a `\\u0000` escape, or a NUL byte (only inside
    UTF-16 or UTF-32 text, which the parser accepts). Most text is cleared by this search."""
    if isinstance(text, str):
        return "\\u0000" in text or NUL in text
    return b"\\u0000" in text or b"\x00" in text


def nul_at(value: object, where: str = "") -> str | None:
    """Where decoded JSON holds a NUL, in a string or an object's key at any depth, as a path
    (`content`, `fields.note`, `attachments[0].name`, `fields` for a key of it; `` for the
    value itself); None if nowhere."""
    if isinstance(value, str):
        return where if NUL in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if NUL in key:
                return where
            found = nul_at(item, f"{where}.{key[:40]}" if where else key[:40])
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = nul_at(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def _openers(text: str | bytes) -> int:
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def check_json_nesting(text: str | bytes, max_depth: int, what: str = "the text") -> None:
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if json_nesting(raw) > max_depth:
        raise JsonTooDeep(f"{what} nests JSON deeper than {max_depth} levels")


_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}:,]')


def scalar_members(line: bytes) -> JSONObject:
    """The members of a JSON object's top level whose values are not arrays or objects,
    read without parsing the rest (which may nest too deeply to parse)."""
    found: JSONObject = {}
    depth = 0
    key: str | None = None
    value_start: int | None = None

    def record(end: int) -> None:
        if key is None or value_start is None:
            return
        with contextlib.suppress(ValueError):
            found[key] = json.loads(line[value_start:end])

    for match in _TOKEN.finditer(line):
        token = match.group()
        if token in (b"{", b"["):
            if depth == 0 and token == b"[":
                break  # a batch or an array: no members
            if depth == 1:
                value_start = None  # an array or object value: not recorded
            depth += 1
        elif token in (b"}", b"]"):
            if depth == 1:
                record(match.start())
                break
            depth -= 1
        elif depth != 1:
            continue
        elif token == b":":
            value_start = match.end()
        elif token == b",":
            record(match.start())
            key = value_start = None
        elif value_start is None and key is None:
            with contextlib.suppress(ValueError):
                key = json.loads(token)
    return found


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 UTC with a Z, the one time format on the wire."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class CursorError(ValueError):
    """A cursor this broker did not issue, or one issued for another view."""


def encode_cursor(view: str, sequence: int) -> str:
    raw = f"{view}:{sequence}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(view: str, cursor: str) -> int:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        prefix, _, number = base64.urlsafe_b64decode(padded).decode().partition(":")
        sequence = int(number)
    except (ValueError, UnicodeDecodeError):
        raise CursorError("cursor is not one this broker issued") from None
    if prefix != view or sequence < 0:
        raise CursorError(f"cursor belongs to another view than {view!r}")
    return sequence


class DeliveryRow(Protocol):
    """A recipient's copy, as the store holds it (lobbies.models.Delivery)."""

    @property
    def state(self) -> str: ...
    @property
    def held_reason(self) -> str | None: ...
    @property
    def delivered_at(self) -> datetime | None: ...
    @property
    def adapter_received_at(self) -> datetime | None: ...
    @property
    def notification_attempted_at(self) -> datetime | None: ...
    @property
    def agent_seen_at(self) -> datetime | None: ...


def delivery_facts(delivery: DeliveryRow) -> dict[str, str | None]:
    return {
        "delivery_state": delivery.state,
        "held_reason": delivery.held_reason,
        "delivered_at": iso(delivery.delivered_at),
        "adapter_received_at": iso(delivery.adapter_received_at),
        "notification_attempted_at": iso(delivery.notification_attempted_at),
        "agent_seen_at": iso(delivery.agent_seen_at),
    }


class AddressedMessage(Protocol):
    """A message with its room name annotated (lobbies.models.Message)."""

    @property
    def room_name(self) -> str | None: ...
    @property
    def addressed_to(self) -> list[str]: ...
    @property
    def supersedes(self) -> int | None: ...
    @property
    def deliver_at(self) -> datetime | None: ...
    @property
    def late(self) -> bool: ...
    @property
    def schedule_id(self) -> int | None: ...
    @property
    def slot(self) -> datetime | None: ...


def addressing_facts(message: AddressedMessage) -> dict[str, Any]:
    """Room, addressees, replacement and timing: present only where they apply."""
    facts: dict[str, Any] = {}
    if message.room_name:
        facts["room_id"] = message.room_name
    if message.addressed_to:
        facts["addressed_to"] = message.addressed_to
    if message.supersedes:
        facts["supersedes"] = message.supersedes
    if message.deliver_at:
        facts["deliver_at"] = iso(message.deliver_at)
    if message.deliver_at or message.schedule_id:
        facts["late"] = message.late
    if message.schedule_id:
        facts["schedule_id"] = message.schedule_id
        facts["slot"] = iso(message.slot)
    return facts


# Attachments (issue 14; /work contract: descriptions by SHA-256, name, media type, size).
MAX_ATTACHMENTS = 10
ATTACHMENT_ROUTE = "/v1/attachments/"
ATTACHMENT_NAME_HEADER = "X-PocoLobby-Attachment-Name"
ATTACHMENT_SHA256_HEADER = "X-PocoLobby-Attachment-Sha256"
IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# Documents are UTF-8 text: any text/* type, and these application types.
DOCUMENT_APPLICATION_TYPES = frozenset(
    {
        "application/json",
        "application/javascript",
        "application/typescript",
        "application/x-typescript",
        "application/x-sh",
        "application/x-shellscript",
        "application/x-python",
        "application/x-swift",
    }
)


def media_type_of(header: str) -> str:
    """A Content-Type without parameters, lowercased: `text/x; a=b` -> `text/x`."""
    return header.split(";", 1)[0].strip().lower()


def is_image(media_type: str) -> bool:
    return media_type in IMAGE_MEDIA_TYPES


def is_document(media_type: str) -> bool:
    top, _, sub = media_type.partition("/")
    if top == "text":
        return bool(sub) and all(c.isalnum() or c in "+-._" for c in sub)
    return media_type in DOCUMENT_APPLICATION_TYPES


# Text another party wrote, shown in a terminal (issue 28). A peer's message, an agent's
# status, a broker's error echoing input: printed raw, an escape sequence in it would act
# (set the title, make the terminal answer a query into the shell's input, write the
# clipboard), and a bidi override would reorder what follows it. So every C0 and C1 control,
# DEL, bidi control, line or paragraph separator and lone surrogate is shown as its escape
# (`\x1b`, `\u202e`); only `\n` and `\t` stay, and only in multi-line text.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_SHOWN_ESCAPED = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{BIDI_CONTROLS}\u2028\u2029\\ud800-\\udfff]")
_SHOWN_ESCAPED_MULTILINE = re.compile(
    f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{BIDI_CONTROLS}\u2028\u2029\\ud800-\\udfff]"
)
# The characters json.dumps(ensure_ascii=False) leaves raw (it escapes those below 0x20).
_JSON_RAW_UNSAFE = re.compile(f"[\\x7f-\\x9f{BIDI_CONTROLS}\u2028\u2029\\ud800-\\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def for_terminal(text: object, *, multiline: bool = False) -> str:
    """`text` safe to print: controls shown as escapes, never interpreted. A one-line field
    (a name, a status, an error) shows `\\n` and `\\t` too; multi-line content keeps its
    line breaks and tabs (a `\\r\\n` is one break)."""
    value = text if isinstance(text, str) else str(text)
    if multiline:
        return _SHOWN_ESCAPED_MULTILINE.sub(_visible, value.replace("\r\n", "\n"))
    return _SHOWN_ESCAPED.sub(_visible, value)


def json_for_terminal(value: Any, indent: int | None = 2) -> str:
    """JSON that decodes to exactly `value` and is safe to print: non-ASCII text stays
    readable, and what json.dumps leaves raw among the controls above becomes `\\uXXXX`."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return _JSON_RAW_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)

"""The stream's protocol: its version, header names, frame names, each frame's shape and the
bridge's parser of each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, NotRequired, TypeAlias, TypedDict, TypeGuard

from lobbies.wire.jsontext import JSONObject

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
# Each frame's shape, as the broker builds it (lobbies/push/frames.py, lobbies/push/consumers.py)
# and the
# bridge reads it (pocolobby/bridge/link.py). TypedDicts: the frames stay plain dicts, so
# typing them costs nothing on the push path; the bridge checks what it reads with one
# parsing function per frame type (`parse_welcome`, `parse_notice`, ...).


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
    """What the agent is told: a headline and a JSON payload in `content`
    (lobbies.push.presentation)."""

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

"""The process-wide memory budget of attachment uploads (POCOLOBBY_UPLOAD_MEMORY_BYTES),
shared fairly.

An upload's body is buffered whole before it is verified and checked, so uploads arriving
at once could hold any amount of memory. Each reserves its declared Content-Length, once its
token is known and before a byte of its body is read; one that does not fit is refused at
once with the retryable 503 uploads_busy, and nothing of it is read or stored. One agent may
hold at most an eighth of the budget and one lobby a quarter (never less than the largest
file allowed), and a lobby already holding some may not take the last of it, the floor (the
largest file, or a quarter when smaller), which is kept for lobbies holding none: so agents or
lobbies holding uploads open, stalled or slow, leave room for the others, and no two lobbies
together can starve a third. A stalled body is cut off by the server
(POCOLOBBY_BODY_STALL_SECONDS).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings

from lobbies.access.credentials import stated
from lobbies.access.tokens import agent_for_token
from lobbies.api.schemas import attachment_limit
from lobbies.errors import BrokerError, ErrorCode
from lobbies.wire.media import media_type_of

RETRY_AFTER_SECONDS = 1
# The parts of the budget one agent and one lobby may hold: two lobbies at their share
# leave half of it to the others.
AGENT_PARTS = 8
LOBBY_PARTS = 4


@dataclass(frozen=True)
class Uploader:
    """Whose upload holds memory: the agent and its lobby (primary keys)."""

    agent: int
    lobby: int


def uploader(headers: Mapping[str, str]) -> Uploader:
    """The agent an upload's token names (lower-case header names), or its 401/403 refusal."""
    agent = agent_for_token(stated(headers).token)
    return Uploader(agent.pk, agent.lobby_id)


@dataclass(frozen=True)
class Shares:
    """What one agent and one lobby may hold of the budget, and the floor: the part a lobby
    already holding some may not take, kept so a lobby holding none can start an upload."""

    agent: int
    lobby: int
    floor: int


def shares(limit: int) -> Shares:
    """The shares of a budget of `limit` bytes: an eighth per agent and a quarter per lobby,
    never less than the largest file allowed (or the whole budget, when smaller); the floor is
    the largest file, or a quarter of the budget when that is smaller."""
    bounds = settings.BOUNDS
    largest = min(limit, max(bounds.attachment_image_bytes, bounds.attachment_document_bytes))
    agent = max(limit // AGENT_PARTS, largest)
    return Shares(agent, max(limit // LOBBY_PARTS, agent), min(largest, limit // LOBBY_PARTS))


class UploadBudget:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reserved = 0
        self.by_agent: dict[int, int] = {}
        self.by_lobby: dict[int, int] = {}

    def reserve(self, size: int, who: Uploader) -> None:
        limit = settings.BOUNDS.upload_memory_bytes
        share = shares(limit)
        with self._lock:
            agent_held = self.by_agent.get(who.agent, 0)
            lobby_held = self.by_lobby.get(who.lobby, 0)
            if self.reserved + size > limit:
                raise _busy(
                    f"uploads in progress hold {self.reserved} of {limit} bytes "
                    f"(POCOLOBBY_UPLOAD_MEMORY_BYTES); this one needs {size}: retry shortly"
                )
            if agent_held + size > share.agent:
                raise _busy(
                    f"this agent's uploads in progress hold {agent_held} bytes of its share of "
                    f"{share.agent} (an eighth of POCOLOBBY_UPLOAD_MEMORY_BYTES); this one "
                    f"needs {size}: retry when one of them is done"
                )
            if lobby_held + size > share.lobby:
                raise _busy(
                    f"this lobby's uploads in progress hold {lobby_held} bytes of its share of "
                    f"{share.lobby} (a quarter of POCOLOBBY_UPLOAD_MEMORY_BYTES); this one needs "
                    f"{size}: retry shortly"
                )
            if lobby_held and limit - self.reserved - size < share.floor:
                raise _busy(
                    f"uploads in progress hold {self.reserved} of {limit} bytes "
                    f"(POCOLOBBY_UPLOAD_MEMORY_BYTES) and the last {share.floor} are kept for "
                    f"lobbies holding none; this lobby holds {lobby_held}, this one needs "
                    f"{size}: retry shortly"
                )
            self.reserved += size
            self.by_agent[who.agent] = agent_held + size
            self.by_lobby[who.lobby] = lobby_held + size

    def release(self, size: int, who: Uploader) -> None:
        with self._lock:
            self.reserved -= size
            for held, key in ((self.by_agent, who.agent), (self.by_lobby, who.lobby)):
                left = held.get(key, 0) - size
                if left > 0:
                    held[key] = left
                else:
                    held.pop(key, None)


def _busy(message: str) -> BrokerError:
    return BrokerError(503, ErrorCode.UPLOADS_BUSY, message, retry_after=RETRY_AFTER_SECONDS)


budget = UploadBudget()


def declared_length(headers: dict[str, str]) -> int:
    """The upload's Content-Length, refused before its body is read when missing or too large."""
    raw = headers.get("content-length")
    if raw is None or not raw.strip().isdigit():
        raise BrokerError(
            411,
            ErrorCode.LENGTH_REQUIRED,
            "an upload needs a Content-Length header with its byte count",
        )
    size = int(raw)
    media_type = media_type_of(headers.get("content-type", ""))
    limit, variable = attachment_limit(media_type)
    bounds = settings.BOUNDS
    ceiling = max(limit, bounds.attachment_image_bytes, bounds.attachment_document_bytes)
    if size > (limit if media_type else ceiling):
        raise BrokerError(
            413,
            ErrorCode.ATTACHMENT_TOO_LARGE,
            f"the file is {size} bytes; the limit for {media_type or 'this type'} is {limit} "
            f"({variable}); nothing was read",
        )
    return size

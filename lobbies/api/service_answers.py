"""What /v1 answers outside the agents' messages and rooms: the tool catalog, the broker's
health, and what the agents' reports (usage, turns, tokens) store. Shapes as in
lobbies/api/answers.py, whose conventions these follow."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field, with_config
from typing_extensions import TypedDict  # pydantic reads only its TypedDict on Python 3.11

from lobbies.api.answers import ANSWER_CONFIG, NULL_DEFAULT, FreeObject, Time, UsageEntry
from lobbies.wire.jsontext import JSONValue  # noqa: F401  # FreeObject's alias resolves it here
from lobbies.wire.media import AttachmentLimits

# ------------------------------------------------------------------ the catalog


@with_config(ANSWER_CONFIG)
class ToolDefinition(TypedDict):
    name: str
    description: str
    input_schema: Annotated[FreeObject, Field(description="The operation's JSON Schema")]


@with_config(ANSWER_CONFIG)
class Catalog(TypedDict):
    """The operations this agent may call; `revision` hashes exactly these definitions."""

    revision: str
    tools: list[ToolDefinition]


@with_config(ANSWER_CONFIG)
class ToolList(Catalog):
    """`GET /v1/tools`: the catalog, and this broker's per-file attachment limits in bytes
    (its settings), which a bridge obeys before it reads or uploads a file."""

    attachment_limits: AttachmentLimits


# ------------------------------------------------------------------ health


@with_config(ANSWER_CONFIG)
class Health(TypedDict):
    ok: Literal[True]
    service: Literal["pocolobby"]
    restore_mode: bool
    incarnation: str | None
    restored_at: NotRequired[Annotated[Time | None, NULL_DEFAULT]]


@with_config(ANSWER_CONFIG)
class HealthError(TypedDict):
    code: Literal["store_unavailable"]
    message: str


@with_config(ANSWER_CONFIG)
class Unhealthy(TypedDict):
    ok: Literal[False]
    service: Literal["pocolobby"]
    error: HealthError


# ------------------------------------------------------------------ the agents' reports


@with_config(ANSWER_CONFIG)
class UsageStored(TypedDict):
    stored: Literal[True]
    usage: UsageEntry | None


@with_config(ANSWER_CONFIG)
class Stretch(TypedDict):
    started_at: Time | None
    ended_at: Time | None


@with_config(ANSWER_CONFIG)
class TurnAnswer(TypedDict):
    event: Literal["start", "end"]
    stretch: Stretch | None


@with_config(ANSWER_CONFIG)
class TokensStored(TypedDict):
    stored: int

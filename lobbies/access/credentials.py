"""What a bridge or an agent states about itself on a request or the stream's upgrade.

One reading for both doors (lobbies/api/views.py and lobbies/push/consumers.py): the bearer token,
the
runtime it claims and the generation it holds. Each door then applies its own rule on which
of the runtime headers must be present.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lobbies.errors import BrokerError, ErrorCode
from lobbies.wire.frames import GENERATION_HEADER, RUNTIME_HEADER


@dataclass(frozen=True)
class Stated:
    token: str
    runtime_id: str | None
    # The generation header as sent, and as an integer when one was sent.
    generation_text: str | None
    generation: int | None


GENERATION_DIGITS = 18  # below 2**63, what the column holds


def parse_generation(raw: str) -> int:
    """The X-PocoLobby-Generation header of a bridge, over HTTP and on the stream alike.

    Only ASCII digits: `str.isdigit` and `int` also take "²" or Arabic-Indic digits, and
    5,000 digits pass `isdigit` but not `int`.
    """
    if not (0 < len(raw) <= GENERATION_DIGITS and raw.isascii() and raw.isdigit()):
        raise BrokerError(
            400,
            ErrorCode.INVALID_GENERATION,
            f"X-PocoLobby-Generation must be 1-{GENERATION_DIGITS} ASCII digits",
        )
    return int(raw)


def bearer_token(authorization: str) -> str:
    """The token of `Authorization: Bearer <token>`: none is missing_token, else invalid_token."""
    if not authorization:
        raise BrokerError(401, ErrorCode.MISSING_TOKEN, "send Authorization: Bearer <token>")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise BrokerError(401, ErrorCode.INVALID_TOKEN, "Authorization must be 'Bearer <token>'")
    return token.strip()


def stated(headers: Mapping[str, str]) -> Stated:
    """Read the headers (a case-insensitive mapping, or one with lower-case names)."""
    token = bearer_token(headers.get("authorization", ""))
    raw = headers.get(GENERATION_HEADER.lower())
    generation = parse_generation(raw) if raw else None
    return Stated(token, headers.get(RUNTIME_HEADER.lower()), raw, generation)

"""Rules for the names people and agents type: lobby names and agent addresses."""

from __future__ import annotations

import re

from lobbies.errors import ErrorCode, bad_request

NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$"
_NAME = re.compile(NAME_PATTERN)

# Lobby names become URL segments and host labels; these are taken by routes.
RESERVED_LOBBY_NAMES = frozenset(
    {
        "settings",
        "sign-in",
        "signin",
        "sign-out",
        "open",
        "api",
        "v1",
        "admin",
        "static",
        "handoff",
        "www",
        "account",
        "lobbies",
        "ticket",
        "activity",
        "mail",
    }
)


# The lobby's human owner as a sender: a reserved per-lobby row no agent can take or hold a
# token for (lobbies/actions/owner_messages.py; docs/DECISIONS.md "The owner as a sender").
OWNER_SENDER = "owner"


def is_name(value: str) -> bool:
    return bool(_NAME.match(value))


def check_name(value: str, what: str) -> str:
    """Return the name if it is 1-40 lowercase letters, digits or inner hyphens."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise bad_request(
            f"{what} {value!r} is not valid: use 1-40 lowercase letters, digits and inner hyphens",
            code=ErrorCode.INVALID_NAME,
        )
    return value


def check_lobby_name(value: str) -> str:
    check_name(value, "lobby name")
    if value in RESERVED_LOBBY_NAMES:
        raise bad_request(f"lobby name {value!r} is reserved", code=ErrorCode.RESERVED_NAME)
    return value


def check_agent_name(value: str) -> str:
    """An agent's address: a name, and never `owner`, which speaks for the lobby's human."""
    check_name(value, "agent name")
    if value == OWNER_SENDER:
        raise bad_request(
            f"agent name {value!r} is reserved for the lobby's human owner",
            code=ErrorCode.RESERVED_NAME,
        )
    return value

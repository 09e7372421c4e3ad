"""Agent tokens: high-entropy, shown once, stored only as SHA-256, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from lobbies.actions.restore import check_open
from lobbies.errors import BrokerError, ErrorCode
from lobbies.fastlane import queries
from lobbies.models import Agent

TOKEN_PREFIX = "plt_"  # noqa: S105 (a prefix, not a secret)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token() -> tuple[str, str]:
    """Return a fresh token and the hash to store; the token itself is never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, hash_token(token)


def agent_for_token(token: str) -> Agent:
    """The enabled agent a bearer token authenticates, or a 401/403 naming why not."""
    digest = hash_token(token)
    found = queries.bearer(digest)
    if found is None or not hmac.compare_digest(found.token_hash, digest):
        raise BrokerError(
            401, ErrorCode.INVALID_TOKEN, "the bearer token is not a PocoLobby agent token"
        )
    if found.revoked:
        raise BrokerError(
            401, ErrorCode.TOKEN_REVOKED, "this token was revoked; ask the owner for a new one"
        )
    agent = found.agent
    if not agent.enabled:
        raise BrokerError(403, ErrorCode.AGENT_DISABLED, "this agent is disabled by the owner")
    check_open()
    return agent

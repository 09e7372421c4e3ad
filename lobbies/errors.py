"""The broker's refusals: an HTTP status, a stable code and a message naming what was wrong."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class BrokerError(Exception):
    """A refusal a client can act on. Raised before anything is stored."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra
        self.headers: dict[str, str] = {}

    def as_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.extra}}


def bad_request(message: str, code: str = "invalid_arguments", **extra: Any) -> BrokerError:
    return BrokerError(400, code, message, **extra)


def not_found(code: str, message: str) -> BrokerError:
    return BrokerError(404, code, message)


def conflict(code: str, message: str, **extra: Any) -> BrokerError:
    return BrokerError(409, code, message, **extra)


def forbidden(code: str, message: str) -> BrokerError:
    return BrokerError(403, code, message)


def request_too_large(limit: int) -> BrokerError:
    return BrokerError(413, "request_too_large", f"the body is over {limit} bytes")


def nul_refused(where: str) -> BrokerError:
    """Text holding NUL (U+0000): PostgreSQL's text cannot store it, so no store takes it."""
    return bad_request(
        f"{where} holds a NUL character (U+0000), which text may not contain; nothing was done",
        code="invalid_text",
    )


def store_unavailable() -> BrokerError:
    """The database failed under a request (its connection lost, or it refused one): the
    request is retryable, and a retry with the same client_request_id is stored once."""
    return BrokerError(
        503,
        "store_unavailable",
        "the store did not answer (its connection was lost); retry the request",
    )


def method_not_allowed(methods: Iterable[str], path: str) -> BrokerError:
    """405 with the `Allow` header RFC 9110 requires, naming the methods the path serves."""
    allowed = list(methods)
    error = BrokerError(405, "method_not_allowed", f"use {' or '.join(allowed)} on {path}")
    error.headers["Allow"] = ", ".join(allowed)
    return error


# Every code a /v1 refusal carries, by HTTP status: the table of docs/API.md ("Errors"), which
# a test keeps equal to this. The OpenAPI document lists them as each status's `code` values,
# so a response with a code missing here fails the published contract's fuzzing.
ERROR_CODES: dict[int, tuple[str, ...]] = {
    400: (
        "invalid_arguments",
        "invalid_json",
        "invalid_cursor",
        "invalid_name",
        "reserved_name",
        "invalid_runtime",
        "invalid_generation",
        "invalid_time",
        "bad_request",
        "invalid_deliver_at",
        "invalid_schedule",
        "duplicate_day",
        "invalid_email",
        "invalid_field",
        "invalid_repository",
        "invalid_path",
        "invalid_ref",
        "confirm_mismatch",
        "not_a_member",
        "unknown_agent",
        "attachment_description_mismatch",
        "attachment_hash_mismatch",
        "attachment_type_mismatch",
        "attachment_length_mismatch",
        "invalid_digest",
        "invalid_text",
    ),
    401: ("missing_token", "invalid_token", "token_revoked"),
    403: (
        "origin_refused",
        "agent_disabled",
        "permission_required",
        "not_a_member",
        "not_your_message",
        "not_owner",
        "not_allowed",
        "lobby_limit",
        "repository_not_approved",
    ),
    404: (
        "not_found",
        "unknown_code",
        "unknown_tool",
        "unknown_recipient",
        "unknown_message",
        "unknown_lobby",
        "unknown_agent",
        "unknown_action",
        "unknown_room",
        "unknown_schedule",
        "unknown_viewer",
        "unknown_repository",
        "no_source",
        "not_local",
    ),
    405: ("method_not_allowed",),
    409: (
        "idempotency_conflict",
        "recipient_disabled",
        "not_a_recipient",
        "not_yet_delivered",
        "lobby_exists",
        "lobby_name_retired",
        "agent_exists",
        "already_disabled",
        "already_enabled",
        "permissions_unchanged",
        "generation_superseded",
        "stale_nonce",
        "already_delivered",
        "not_scheduled",
        "too_many_scheduled",
        "too_many_schedules",
        "room_exists",
        "room_archived",
        "too_many_rooms",
        "viewer_exists",
        "checkpoint_conflict",
        "stale_checkpoint",
        "runtime_conflict",
        "nothing_waiting",
        "waiting_changed",
        "runtime_retired",
        "runtime_required",
        "not_in_restore_mode",
        "attachment_upload_required",
        "code_used",
        "not_a_question",
    ),
    410: ("attachment_expired", "code_expired"),
    411: ("length_required",),
    413: ("request_too_large", "fanout_too_large", "attachment_too_large"),
    415: ("unsupported_media_type",),
    426: ("bridge_outdated",),
    429: ("rate_limited",),
    500: ("internal_error",),
    503: ("restore_mode", "store_unavailable", "uploads_busy"),
    507: ("storage_capacity", "lobby_capacity", "recipient_capacity"),
}

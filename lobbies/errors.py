"""The broker's refusals: an HTTP status, a stable code and a message naming what was wrong."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lobbies.wire.errors import ErrorCode

__all__ = [
    "ERROR_CODES",
    "BrokerError",
    "ErrorCode",
    "bad_request",
    "conflict",
    "forbidden",
    "method_not_allowed",
    "not_found",
    "nul_refused",
    "request_too_large",
    "store_unavailable",
]


class BrokerError(Exception):
    """A refusal a client can act on. Raised before anything is stored."""

    def __init__(self, status: int, code: ErrorCode, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra
        self.headers: dict[str, str] = {}

    def as_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.extra}}


def bad_request(
    message: str, code: ErrorCode = ErrorCode.INVALID_ARGUMENTS, **extra: Any
) -> BrokerError:
    return BrokerError(400, code, message, **extra)


def not_found(code: ErrorCode, message: str) -> BrokerError:
    return BrokerError(404, code, message)


def conflict(code: ErrorCode, message: str, **extra: Any) -> BrokerError:
    return BrokerError(409, code, message, **extra)


def forbidden(code: ErrorCode, message: str) -> BrokerError:
    return BrokerError(403, code, message)


def request_too_large(limit: int) -> BrokerError:
    return BrokerError(413, ErrorCode.REQUEST_TOO_LARGE, f"the body is over {limit} bytes")


def nul_refused(where: str) -> BrokerError:
    """Text holding NUL (U+0000): PostgreSQL's text cannot store it, so no store takes it."""
    return bad_request(
        f"{where} holds a NUL character (U+0000), which text may not contain; nothing was done",
        code=ErrorCode.INVALID_TEXT,
    )


def store_unavailable() -> BrokerError:
    """The database failed under a request (its connection lost, or it refused one): the
    request is retryable, and a retry with the same client_request_id is stored once."""
    return BrokerError(
        503,
        ErrorCode.STORE_UNAVAILABLE,
        "the store did not answer (its connection was lost); retry the request",
    )


def method_not_allowed(methods: Iterable[str], path: str) -> BrokerError:
    """405 with the `Allow` header RFC 9110 requires, naming the methods the path serves."""
    allowed = list(methods)
    error = BrokerError(405, ErrorCode.METHOD_NOT_ALLOWED, f"use {' or '.join(allowed)} on {path}")
    error.headers["Allow"] = ", ".join(allowed)
    return error


# Every code a /v1 refusal carries, by HTTP status: the table of docs/API.md ("Errors"), which
# a test keeps equal to this. The OpenAPI document lists them as each status's `code` values,
# so a response with a code missing here fails the published contract's fuzzing.
ERROR_CODES: dict[int, tuple[ErrorCode, ...]] = {
    400: (
        ErrorCode.INVALID_ARGUMENTS,
        ErrorCode.INVALID_JSON,
        ErrorCode.INVALID_CURSOR,
        ErrorCode.INVALID_NAME,
        ErrorCode.RESERVED_NAME,
        ErrorCode.INVALID_RUNTIME,
        ErrorCode.INVALID_GENERATION,
        ErrorCode.INVALID_TIME,
        ErrorCode.BAD_REQUEST,
        ErrorCode.INVALID_DELIVER_AT,
        ErrorCode.INVALID_SCHEDULE,
        ErrorCode.DUPLICATE_DAY,
        ErrorCode.INVALID_EMAIL,
        ErrorCode.INVALID_FIELD,
        ErrorCode.INVALID_REPOSITORY,
        ErrorCode.INVALID_PATH,
        ErrorCode.INVALID_REF,
        ErrorCode.CONFIRM_MISMATCH,
        ErrorCode.NOT_A_MEMBER,
        ErrorCode.UNKNOWN_AGENT,
        ErrorCode.ATTACHMENT_DESCRIPTION_MISMATCH,
        ErrorCode.ATTACHMENT_HASH_MISMATCH,
        ErrorCode.ATTACHMENT_TYPE_MISMATCH,
        ErrorCode.ATTACHMENT_LENGTH_MISMATCH,
        ErrorCode.INVALID_DIGEST,
        ErrorCode.INVALID_TEXT,
    ),
    401: (ErrorCode.MISSING_TOKEN, ErrorCode.INVALID_TOKEN, ErrorCode.TOKEN_REVOKED),
    403: (
        ErrorCode.ORIGIN_REFUSED,
        ErrorCode.AGENT_DISABLED,
        ErrorCode.PERMISSION_REQUIRED,
        ErrorCode.NOT_A_MEMBER,
        ErrorCode.NOT_YOUR_MESSAGE,
        ErrorCode.NOT_OWNER,
        ErrorCode.NOT_ALLOWED,
        ErrorCode.LOBBY_LIMIT,
        ErrorCode.REPOSITORY_NOT_APPROVED,
    ),
    404: (
        ErrorCode.NOT_FOUND,
        ErrorCode.UNKNOWN_CODE,
        ErrorCode.UNKNOWN_TOOL,
        ErrorCode.UNKNOWN_RECIPIENT,
        ErrorCode.UNKNOWN_MESSAGE,
        ErrorCode.UNKNOWN_LOBBY,
        ErrorCode.UNKNOWN_AGENT,
        ErrorCode.UNKNOWN_ACTION,
        ErrorCode.UNKNOWN_ROOM,
        ErrorCode.UNKNOWN_SCHEDULE,
        ErrorCode.UNKNOWN_VIEWER,
        ErrorCode.UNKNOWN_REPOSITORY,
        ErrorCode.NO_SOURCE,
        ErrorCode.NOT_LOCAL,
    ),
    405: (ErrorCode.METHOD_NOT_ALLOWED,),
    409: (
        ErrorCode.IDEMPOTENCY_CONFLICT,
        ErrorCode.RECIPIENT_DISABLED,
        ErrorCode.NOT_A_RECIPIENT,
        ErrorCode.NOT_YET_DELIVERED,
        ErrorCode.LOBBY_EXISTS,
        ErrorCode.LOBBY_NAME_RETIRED,
        ErrorCode.AGENT_EXISTS,
        ErrorCode.ALREADY_DISABLED,
        ErrorCode.ALREADY_ENABLED,
        ErrorCode.PERMISSIONS_UNCHANGED,
        ErrorCode.GENERATION_SUPERSEDED,
        ErrorCode.STALE_NONCE,
        ErrorCode.ALREADY_DELIVERED,
        ErrorCode.NOT_SCHEDULED,
        ErrorCode.TOO_MANY_SCHEDULED,
        ErrorCode.TOO_MANY_SCHEDULES,
        ErrorCode.ROOM_EXISTS,
        ErrorCode.ROOM_ARCHIVED,
        ErrorCode.TOO_MANY_ROOMS,
        ErrorCode.VIEWER_EXISTS,
        ErrorCode.CHECKPOINT_CONFLICT,
        ErrorCode.STALE_CHECKPOINT,
        ErrorCode.RUNTIME_CONFLICT,
        ErrorCode.NOTHING_WAITING,
        ErrorCode.WAITING_CHANGED,
        ErrorCode.RUNTIME_RETIRED,
        ErrorCode.RUNTIME_REQUIRED,
        ErrorCode.NOT_IN_RESTORE_MODE,
        ErrorCode.ATTACHMENT_UPLOAD_REQUIRED,
        ErrorCode.CODE_USED,
        ErrorCode.NOT_A_QUESTION,
    ),
    410: (ErrorCode.ATTACHMENT_EXPIRED, ErrorCode.CODE_EXPIRED),
    411: (ErrorCode.LENGTH_REQUIRED,),
    413: (ErrorCode.REQUEST_TOO_LARGE, ErrorCode.FANOUT_TOO_LARGE, ErrorCode.ATTACHMENT_TOO_LARGE),
    415: (ErrorCode.UNSUPPORTED_MEDIA_TYPE,),
    426: (ErrorCode.BRIDGE_OUTDATED,),
    429: (ErrorCode.RATE_LIMITED,),
    500: (ErrorCode.INTERNAL_ERROR,),
    503: (ErrorCode.RESTORE_MODE, ErrorCode.STORE_UNAVAILABLE, ErrorCode.UPLOADS_BUSY),
    507: (ErrorCode.STORAGE_CAPACITY, ErrorCode.LOBBY_CAPACITY, ErrorCode.RECIPIENT_CAPACITY),
}

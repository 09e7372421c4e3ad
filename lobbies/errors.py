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


def method_not_allowed(methods: Iterable[str], path: str) -> BrokerError:
    return BrokerError(405, "method_not_allowed", f"use {' or '.join(methods)} on {path}")

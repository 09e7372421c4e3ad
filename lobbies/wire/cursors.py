"""Page cursors: opaque to clients, bound to the view that issued them."""

from __future__ import annotations

import base64


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

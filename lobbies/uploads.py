"""The process-wide memory budget of attachment uploads (POCOLOBBY_UPLOAD_MEMORY_BYTES).

An upload's body is buffered whole before it is verified and checked, so uploads arriving
at once could hold any amount of memory. Each reserves its declared Content-Length before
a byte of its body is read; one that does not fit is refused at once with the retryable
503 uploads_busy, and nothing of it is read or stored.
"""

from __future__ import annotations

import threading

from django.conf import settings

from lobbies.errors import BrokerError
from lobbies.schemas import attachment_limit
from lobbies.wire import media_type_of

RETRY_AFTER_SECONDS = 1


class UploadBudget:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reserved = 0

    def reserve(self, size: int) -> None:
        limit = settings.BOUNDS.upload_memory_bytes
        with self._lock:
            if self.reserved + size > limit:
                raise BrokerError(
                    503,
                    "uploads_busy",
                    f"uploads in progress hold {self.reserved} of {limit} bytes "
                    f"(POCOLOBBY_UPLOAD_MEMORY_BYTES); this one needs {size}: retry shortly",
                    retry_after=RETRY_AFTER_SECONDS,
                )
            self.reserved += size

    def release(self, size: int) -> None:
        with self._lock:
            self.reserved -= size


budget = UploadBudget()


def declared_length(headers: dict[str, str]) -> int:
    """The upload's Content-Length, refused before its body is read when missing or too large."""
    raw = headers.get("content-length")
    if raw is None or not raw.strip().isdigit():
        raise BrokerError(
            411, "length_required", "an upload needs a Content-Length header with its byte count"
        )
    size = int(raw)
    media_type = media_type_of(headers.get("content-type", ""))
    limit, variable = attachment_limit(media_type)
    bounds = settings.BOUNDS
    ceiling = max(limit, bounds.attachment_image_bytes, bounds.attachment_document_bytes)
    if size > (limit if media_type else ceiling):
        raise BrokerError(
            413,
            "attachment_too_large",
            f"the file is {size} bytes; the limit for {media_type or 'this type'} is {limit} "
            f"({variable}); nothing was read",
        )
    return size

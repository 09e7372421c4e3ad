"""Attachments on the wire: routes, headers, counts and the media types an agent may send."""

from __future__ import annotations

# Attachments (issue 14; /work contract: descriptions by SHA-256, name, media type, size).
MAX_ATTACHMENTS = 10
ATTACHMENT_ROUTE = "/v1/attachments/"
ATTACHMENT_NAME_HEADER = "X-PocoLobby-Attachment-Name"
ATTACHMENT_SHA256_HEADER = "X-PocoLobby-Attachment-Sha256"
IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# Documents are UTF-8 text: any text/* type, and these application types.
DOCUMENT_APPLICATION_TYPES = frozenset(
    {
        "application/json",
        "application/javascript",
        "application/typescript",
        "application/x-typescript",
        "application/x-sh",
        "application/x-shellscript",
        "application/x-python",
        "application/x-swift",
    }
)


def media_type_of(header: str) -> str:
    """A Content-Type without parameters, lowercased: `text/x; a=b` -> `text/x`."""
    return header.split(";", 1)[0].strip().lower()


def is_image(media_type: str) -> bool:
    return media_type in IMAGE_MEDIA_TYPES


def is_document(media_type: str) -> bool:
    top, _, sub = media_type.partition("/")
    if top == "text":
        return bool(sub) and all(c.isalnum() or c in "+-._" for c in sub)
    return media_type in DOCUMENT_APPLICATION_TYPES

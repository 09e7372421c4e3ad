"""Attachments on the wire: routes, headers, counts, the media types an agent may send, what
an image is by its bytes, and how large a file may be."""

from __future__ import annotations

from typing import TypeGuard

from typing_extensions import TypedDict  # the broker's answers embed it; pydantic reads only this

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


# The attachment rules broker and bridge share (issue 44, "one source per rule"): what an
# image is by its bytes, and how large a file may be. The broker's limits are settings
# (POCOLOBBY_ATTACHMENT_IMAGE_BYTES, POCOLOBBY_ATTACHMENT_DOCUMENT_BYTES); it sends them to the
# bridge in its catalog (`attachment_limits`), and a bridge obeys them. The defaults below are
# the broker's defaults and what a bridge assumes of a broker that does not send them.
DEFAULT_IMAGE_BYTES = 10 * 1024 * 1024
DEFAULT_DOCUMENT_BYTES = 5 * 1024 * 1024
# Images recognized by their signature, whatever the file is called; WebP is a RIFF container.
IMAGE_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


class AttachmentLimits(TypedDict):
    """The largest file a broker keeps, in bytes, for an image and for a document."""

    image_bytes: int
    document_bytes: int


DEFAULT_ATTACHMENT_LIMITS: AttachmentLimits = {
    "image_bytes": DEFAULT_IMAGE_BYTES,
    "document_bytes": DEFAULT_DOCUMENT_BYTES,
}


def sniff_image(data: bytes) -> str | None:
    """The image type by its bytes: PNG, JPEG, GIF or WebP; None for anything else."""
    for signature, media_type in IMAGE_SIGNATURES:
        if data.startswith(signature):
            return media_type
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def attachment_limit(media_type: str, limits: AttachmentLimits) -> int:
    """The per-file limit for a media type under `limits`."""
    return limits["image_bytes"] if is_image(media_type) else limits["document_bytes"]


def parse_attachment_limits(value: object) -> AttachmentLimits | None:
    """A broker's `attachment_limits` as sent; None when it is missing or not two positive
    integers (an older broker, or another version's shape: the defaults apply)."""
    if not isinstance(value, dict):
        return None
    image, document = value.get("image_bytes"), value.get("document_bytes")
    if not (_positive(image) and _positive(document)):
        return None
    return {"image_bytes": image, "document_bytes": document}


def _positive(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0

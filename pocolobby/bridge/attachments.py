"""Attachments in the bridge: a send with local files, and `get_attachment` for received ones.

A send names absolute local paths in `attachments`; the bridge checks and reads each one under
the local file rules (files.py), sends descriptions (SHA-256, name, type, size), uploads
exactly the content the broker says it is missing, and repeats the identical request once.
`get_attachment` downloads one attachment this agent may see and returns an image as an MCP
image block (an oversized PNG or JPEG reduced with Pillow to fit a tool result), a document
as text in parts or as its Markdown heading outline, and saves a copy where `save_to` says.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeGuard

import mcp_types as types

from lobbies.wire.errors import ErrorCode
from lobbies.wire.jsontext import JSONObject, JSONValue
from lobbies.wire.media import DEFAULT_ATTACHMENT_LIMITS, MAX_ATTACHMENTS, AttachmentLimits
from pocolobby.bridge.broker import BrokerClient, Download, Outcome
from pocolobby.bridge.files import (
    IMAGE_TYPES,
    FileRefused,
    LocalFile,
    Places,
    read_attachment,
)
from pocolobby.bridge.results import as_text, failure, retry_advice
from pocolobby.bridge.saving import SavePlan, plan_save, save_file

# What one image block may carry. A larger PNG or JPEG is scaled down to fit; a larger GIF or
# WebP is described, and can be saved for a file-reading tool that scales images itself.
IMAGE_RESULT_BYTES = 1024 * 1024
# The longest edge a reduced image is first scaled to (what the model's vision uses anyway).
IMAGE_RESULT_EDGE = 1568
# Pillow refuses to decode more pixels than this (a decompression bomb, not a screenshot).
MAX_IMAGE_PIXELS = 64_000_000
DEFAULT_MAX_CHARS = 20_000
MAX_MAX_CHARS = 100_000
# uploads_busy: how often and how long an upload waits for the broker's memory budget.
UPLOAD_ATTEMPTS = 3
UPLOAD_WAIT_CAP = 10.0

UPLOAD_REQUIRED = ErrorCode.ATTACHMENT_UPLOAD_REQUIRED
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")


class BadArguments(ValueError):
    """A tool argument is wrong; the message names it."""


# ------------------------------------------------------------------ sending


def parse_paths(raw: JSONValue) -> list[str]:
    paths = [p for p in raw if isinstance(p, str)] if isinstance(raw, list) else []
    if not isinstance(raw, list) or len(paths) != len(raw):
        raise BadArguments(
            "attachments: must be a list of absolute local file paths (strings), like "
            '["/home/you/Pictures/shot.png"]'
        )
    if len(raw) > MAX_ATTACHMENTS:
        raise BadArguments(
            f"attachments: at most {MAX_ATTACHMENTS} files per send; this call lists {len(raw)}"
        )
    return paths


def read_all(
    paths: Sequence[str], places: Places, limits: AttachmentLimits = DEFAULT_ATTACHMENT_LIMITS
) -> list[LocalFile]:
    """Every path through every rule before anything is sent; the first refusal raises."""
    return [read_attachment(path, places, limits) for path in paths]


def refused_text(name: str, refusal: FileRefused) -> str:
    return (
        f"Not sent: {name} was refused because the attachment {refusal.path} breaks the local "
        f"file rule '{refusal.rule}': {refusal.reason}. Nothing was sent or uploaded. Attach "
        "only your own screenshots and documents from your home directory or the temporary "
        "folder (docs/AGENTS.md lists the rules)."
    )


Call = Callable[[str, JSONObject], Awaitable[Outcome]]


async def send_with_files(
    broker: BrokerClient,
    call: Call,
    name: str,
    arguments: JSONObject,
    local: list[LocalFile],
) -> Outcome | types.CallToolResult:
    """Send descriptions; upload exactly what the broker misses; repeat the request once."""
    described: JSONObject = {**arguments, "attachments": [f.description() for f in local]}
    outcome = await call(name, described)
    if outcome.code != UPLOAD_REQUIRED:
        return outcome
    by_hash = {f.sha256: f for f in local}
    missing = outcome.error.get("missing")
    named = [m for m in missing if isinstance(m, str)] if isinstance(missing, list) else []
    if (
        not isinstance(missing, list)
        or len(named) != len(missing)
        or not by_hash.keys() >= set(named)
    ):
        return failure(
            f"Not sent: the broker asked for attachment content this {name} did not describe "
            f"({as_text(missing)}), so the bridge uploaded nothing and nothing was stored."
        )
    for sha256 in dict.fromkeys(named):
        upload = await _upload(broker, by_hash[sha256])
        if not upload.ok:
            return _upload_failed(name, arguments, by_hash[sha256], upload)
    return await call(name, described)


async def _upload(broker: BrokerClient, local: LocalFile) -> Outcome:
    outcome = Outcome()
    for _ in range(UPLOAD_ATTEMPTS):
        outcome = await broker.upload(local.sha256, local.media_type, local.data)
        if outcome.code != ErrorCode.UPLOADS_BUSY:
            return outcome
        wait = outcome.error.get("retry_after", 1)
        await asyncio.sleep(
            min(float(wait) if isinstance(wait, int | float) else 1.0, UPLOAD_WAIT_CAP)
        )
    return outcome


def _upload_failed(
    name: str, arguments: JSONObject, local: LocalFile, outcome: Outcome
) -> types.CallToolResult:
    if outcome.transport is not None:
        why = f"the connection failed ({outcome.message})"
    else:
        why = f"the broker refused it ({outcome.status} {outcome.code}: {outcome.message})"
    return failure(
        f"Not sent: uploading the attachment {local.name} ({local.size} bytes) failed: {why}. "
        f"The {name} was not stored; content already uploaded is removed after a grace "
        f"period. {retry_advice(arguments)}",
        {"error": outcome.error} if outcome.error else None,
    )


# ------------------------------------------------------------------ get_attachment


@dataclass(frozen=True)
class Request:
    attachment_id: int
    max_chars: int
    offset: int
    outline: bool
    save_to: str | None
    save_only: bool


_ARGUMENTS = ("attachment_id", "max_chars", "offset", "outline", "save_to", "save_only")


def parse_request(arguments: JSONObject) -> Request:
    extra = [k for k in arguments if k not in _ARGUMENTS]
    if extra:
        raise BadArguments(
            f"unknown argument {extra[0]!r}: get_attachment takes {', '.join(_ARGUMENTS)}"
        )
    attachment_id = arguments.get("attachment_id")
    if not _is_int(attachment_id) or attachment_id < 1:
        raise BadArguments(
            "attachment_id: required, the positive integer id a message's attachments list"
        )
    max_chars = arguments.get("max_chars", DEFAULT_MAX_CHARS)
    if not _is_int(max_chars) or not 1 <= max_chars <= MAX_MAX_CHARS:
        raise BadArguments(f"max_chars: an integer from 1 to {MAX_MAX_CHARS}")
    offset = arguments.get("offset", 0)
    if not _is_int(offset) or offset < 0:
        raise BadArguments("offset: a character offset, 0 or more (next_offset of a part)")
    outline = arguments.get("outline", False)
    if not isinstance(outline, bool):
        raise BadArguments("outline: true or false")
    save_only = arguments.get("save_only", False)
    if not isinstance(save_only, bool):
        raise BadArguments("save_only: true or false")
    save_to = arguments.get("save_to")
    if save_to is not None and (not isinstance(save_to, str) or not save_to.strip()):
        raise BadArguments("save_to: an absolute folder path")
    if save_only and save_to is None:
        raise BadArguments("save_only: needs save_to, the folder to save the copy in")
    return Request(attachment_id, max_chars, offset, outline, save_to, save_only)


def _is_int(value: JSONValue) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


async def get_attachment(
    broker: BrokerClient, request: Request, places: Places, limits: AttachmentLimits
) -> Outcome | types.CallToolResult:
    """Download, verify, save if asked, and present one attachment; no larger than the
    broker's larger per-file limit (it keeps none larger)."""
    if request.save_to is not None:
        try:  # the folder first, so a refused one downloads nothing
            await asyncio.to_thread(
                plan_save, request.save_to, "attachment.png", places, name_is_known=False
            )
        except FileRefused as refused:
            return failure(_save_refused(refused))
    largest = max(limits["image_bytes"], limits["document_bytes"])
    got = await broker.download(request.attachment_id, largest)
    if isinstance(got, Outcome):
        return got
    digest = hashlib.sha256(got.data).hexdigest()
    if not got.data or (got.sha256 and got.sha256 != digest):
        return failure(
            f"The download of attachment {request.attachment_id} did not match its SHA-256, "
            "so nothing was shown or saved. Retry get_attachment."
        )
    media_type = got.media_type.split(";", 1)[0].strip().lower()
    name = _safe_name(got.name, request.attachment_id)
    facts: JSONObject = {
        "attachment_id": request.attachment_id,
        "name": name,
        "media_type": media_type,
        "size": len(got.data),
        "sha256": digest,
    }
    if request.save_to is not None:
        try:
            facts["saved_to"] = await asyncio.to_thread(_save, request.save_to, name, got, places)
        except FileRefused as refused:
            return failure(_save_refused(refused), facts)
    if request.save_only:
        return _result(facts)
    if media_type in IMAGE_TYPES:
        return _image(facts, got.data, media_type)
    return _document(facts, got.data, request)


def _save(directory: str, name: str, got: Download, places: Places) -> str:
    plan: SavePlan = plan_save(directory, name, places)
    return save_file(plan, got.data, places)


def _save_refused(refused: FileRefused) -> str:
    return (
        f"Not saved: save_to {refused.path} breaks the local file rule '{refused.rule}': "
        f"{refused.reason}. Nothing was written."
    )


def _safe_name(name: str, attachment_id: int) -> str:
    base = name.replace("\\", "/").rsplit("/", 1)[-1].replace("\x00", "").strip()
    return base if base not in ("", ".", "..") else f"attachment-{attachment_id}"


def _result(
    facts: JSONObject, *extra: types.TextContent | types.ImageContent
) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=as_text(facts)), *extra]
    )


def _image(facts: JSONObject, data: bytes, media_type: str) -> types.CallToolResult:
    fitted = fit_image(data, media_type)
    if fitted is None:
        facts["shown"] = False
        facts["note"] = (
            f"This image is too large for a tool result ({len(data)} bytes; up to "
            f"{IMAGE_RESULT_BYTES} are shown) and could not be reduced. Save it with save_to "
            "and open the file with a file-reading tool, which scales images itself."
        )
        return _result(facts)
    shown, size = fitted
    facts["shown"] = True
    if shown is not data:
        facts["reduced"] = {"bytes": len(shown), "width": size[0], "height": size[1]}
    block = types.ImageContent(
        type="image", data=base64.b64encode(shown).decode("ascii"), mime_type=media_type
    )
    return _result(facts, block)


def fit_image(data: bytes, media_type: str) -> tuple[bytes, tuple[int, int]] | None:
    """The image as it fits one tool result: unchanged when small enough, a PNG or JPEG
    scaled down with Pillow otherwise; None when it cannot be made to fit."""
    if len(data) <= IMAGE_RESULT_BYTES:
        return data, (0, 0)
    if media_type not in ("image/png", "image/jpeg"):
        return None
    # local: Pillow loads only when an image must be reduced, not at every bridge start
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    png = media_type == "image/png"
    try:
        with Image.open(io.BytesIO(data)) as opened:
            if not png:  # JPEG decodes straight at a smaller scale when it can
                opened.draft("RGB", (IMAGE_RESULT_EDGE, IMAGE_RESULT_EDGE))
            opened.load()
            # Keep a mode both resizing and the format take (converting costs as much again).
            keep = ("RGB", "RGBA", "L", "LA") if png else ("RGB", "L")
            image = (
                opened.copy() if opened.mode in keep else opened.convert("RGBA" if png else "RGB")
            )
    except Exception:  # not decodable, or a decompression bomb: described, not shown
        return None
    width, height = image.size
    scale = min(1.0, IMAGE_RESULT_EDGE / max(width, height))
    for _ in range(12):
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        resized = image.resize(size, Image.Resampling.LANCZOS)
        out = io.BytesIO()
        if png:
            resized.save(out, "PNG")
        else:
            resized.save(out, "JPEG", quality=85, optimize=True)
        if out.tell() <= IMAGE_RESULT_BYTES:
            return out.getvalue(), size
        scale *= 0.7
    return None


def _document(facts: JSONObject, data: bytes, request: Request) -> types.CallToolResult:
    text = data.decode("utf-8", errors="replace")
    if request.outline:
        headings = outline(text)
        facts["outline"] = True
        facts["headings"] = len(headings)
        body = "\n".join(f"line {line}: {'#' * level} {title}" for line, level, title in headings)
        if not headings:
            body = "(no Markdown headings; read it in parts with max_chars and offset)"
        return _result(facts, types.TextContent(type="text", text=body))
    start = min(request.offset, len(text))
    part = text[start : start + request.max_chars]
    end = start + len(part)
    facts.update(
        {
            "total_chars": len(text),
            "offset": start,
            "returned_chars": len(part),
            "next_offset": end if end < len(text) else None,
        }
    )
    if end < len(text):
        facts["continue"] = (
            f"More follows: call get_attachment with attachment_id {request.attachment_id} "
            f"and offset {end} for the next part."
        )
    return _result(facts, types.TextContent(type="text", text=part))


def outline(text: str) -> list[tuple[int, int, str]]:
    """Markdown ATX headings outside fenced code: (line number, level, title)."""
    found: list[tuple[int, int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = FENCE.match(line)
        if opened:
            marker = opened.group(1)
            if fence is None:
                fence = marker[0] * 3
            elif marker.startswith(fence):
                fence = None
            continue
        if fence is not None:
            continue
        heading = HEADING.match(line)
        if heading:
            found.append((number, len(heading.group(1)), heading.group(2)))
    return found


# ------------------------------------------------------------------ pushes


def attachments_note(payload: JSONObject) -> str | None:
    """One sentence naming each attachment of a push's messages (never their content)."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return None
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        listed = message.get("attachments")
        if not isinstance(listed, list) or not listed:
            continue
        named = []
        for item in listed:
            if not isinstance(item, dict) or not _is_int(item.get("id")):
                continue
            named.append(
                f"attachment_id {item['id']} {as_text(str(item.get('name', '')))} "
                f"({item.get('media_type', '?')}, {_size(item.get('size'))})"
            )
        if named:
            parts.append(f"message {message.get('message_id')}: " + "; ".join(named))
    if not parts:
        return None
    return (
        "Attachments (not downloaded): "
        + " | ".join(parts)
        + ". Open one with get_attachment and its attachment_id: images come back as images, "
        "documents as text."
    )


def _size(value: JSONValue) -> str:
    if not _is_int(value):
        return "size unknown"
    size = float(value)
    for unit in ("bytes", "KiB", "MiB"):
        if size < 1024 or unit == "MiB":
            return f"{int(size)} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} bytes"

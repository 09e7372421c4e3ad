"""Reads of attachments: descriptors for messages, download access, the owner's listing."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.db.models import Count

from lobbies.api.answers import AttachmentDescriptor, at
from lobbies.api.operator_answers import LobbyAttachments
from lobbies.errors import BrokerError, ErrorCode, not_found
from lobbies.fastlane import queries
from lobbies.models import (
    Agent,
    Attachment,
    Delivery,
    DeliveryState,
    Lobby,
    PendingUpload,
)
from lobbies.wire.facts import iso


def lobby_usage_bytes(lobby_pk: int) -> int:
    """Distinct content the lobby's live attachments and pending uploads hold."""
    return queries.lobby_attachment_bytes(lobby_pk)


def descriptor(attachment: Attachment | queries.Attached) -> AttachmentDescriptor:
    """What a message, a push or history says of a file: never its content."""
    a = attachment
    return {"id": a.pk, "name": a.name, "media_type": a.media_type, "size": a.size}


# Each message's descriptors, as pushes (lobbies/push/presentation.py) and answers show them.
Described = dict[int, list[AttachmentDescriptor]]


def descriptors_for(message_ids: Iterable[int]) -> Described:
    """Each message's attachment descriptors, in the order sent, in one query.

    Hand-written (lobbies/fastlane/queries.py): every push and every page asks, and most messages
    have
    no files, so compiling the ORM's join cost more than the answer (profiled).
    """
    ids = list(message_ids)
    if not ids:
        return {}
    found: Described = {}
    for file in queries.attached_to(ids):
        found.setdefault(file.message_id, []).append(descriptor(file))
    return found


def attachment_for(viewer: Agent, attachment_id: int) -> Attachment:
    """The attachment if `viewer` may read it, else the refusal the spec names.

    The uploader may; so may a recipient of a referencing message in the same lobby while
    that delivery is visible: not held (before a scheduled delivery, after a removal, a
    supersession or a cancellation) and not redacted. Expired: 410 to its uploader, 404 to
    everyone else, as for an attachment that never existed.
    """
    gone = not_found(ErrorCode.NOT_FOUND, f"no attachment {attachment_id} you may read")
    attachment = Attachment.objects.filter(pk=attachment_id, lobby_id=viewer.lobby_id).first()
    if attachment is None:
        raise gone
    if attachment.uploader_id == viewer.pk:
        if attachment.expired_at is not None:
            raise BrokerError(
                410,
                ErrorCode.ATTACHMENT_EXPIRED,
                f"attachment {attachment_id} expired at {iso(attachment.expired_at)}: no stored "
                "message names it any more; send the file again",
            )
        return attachment
    if attachment.expired_at is not None:
        raise gone
    visible = Delivery.objects.filter(
        recipient=viewer,
        message__lobby_id=viewer.lobby_id,
        message__attachment_links__attachment=attachment,
        state__in=[DeliveryState.PENDING, DeliveryState.SEEN],
        redacted=False,
    ).exists()
    if not visible:
        raise gone
    return attachment


def lobby_attachments(lobby: Lobby, limit: int = 500) -> LobbyAttachments:
    """The owner's listing, newest `limit`: metadata and usage, never content."""
    rows = (
        Attachment.objects.filter(lobby=lobby)
        .select_related("uploader")
        .annotate(messages=Count("message_links", distinct=True))
        .annotate(schedules=Count("schedule_links", distinct=True))
        .order_by("-created_at", "-id")
    )
    pending = PendingUpload.objects.filter(lobby=lobby)
    return {
        "lobby": lobby.name,
        "usage": {
            "content_bytes": lobby_usage_bytes(lobby.pk),
            "quota_bytes": settings.BOUNDS.attachments_lobby_bytes,
            "attachments": rows.filter(expired_at__isnull=True).count(),
            "expired": rows.filter(expired_at__isnull=False).count(),
            "pending_uploads": pending.count(),
        },
        "attachments": [
            {
                **descriptor(a),
                "sha256": a.sha256,
                "uploader": a.uploader.agent_id if a.uploader else None,
                "created_at": at(a.created_at),
                "expired_at": iso(a.expired_at),
                "messages": a.messages,
                "schedules": a.schedules,
            }
            for a in rows[:limit]
        ],
    }

"""Attachments: uploads proving possession, claims by sends and schedules, and collection.

The bridge describes each file by SHA-256; the broker stores the bytes once
(lobbies/storage/blobs.py)
and records who proved possession (a pending upload) until a stored send names them (an
attachment, linked to its message or schedule). A send that is refused stores nothing, and
its uploads stay pending until the grace period (POCOLOBBY_UPLOAD_GRACE_SECONDS) removes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from lobbies.api.schemas import AttachmentDescription, attachment_limit, check_media_type
from lobbies.attachment_selectors import lobby_usage_bytes
from lobbies.errors import BrokerError, ErrorCode, bad_request, conflict
from lobbies.models import (
    Agent,
    Attachment,
    AttachmentContent,
    MessageAttachment,
    PendingUpload,
    ScheduleAttachment,
    ScheduleStatus,
)
from lobbies.storage import blobs
from lobbies.wire.media import is_image, sniff_image

# Content is kept a day after its last message (the messages' day: actions/retention.py).
KEPT_FOR = timedelta(days=1)
# An expired attachment's record answers its uploader 410 for this long, then goes.
EXPIRED_RECORD_KEPT = timedelta(days=7)


@dataclass(frozen=True)
class UploadOutcome:
    sha256: str
    size: int
    created: bool  # False: this uploader had already proven possession


def _check_bytes(media_type: str, data: bytes) -> None:
    """The bytes are what the type says: an image by its magic bytes, a document UTF-8 text."""
    if is_image(media_type):
        ok = sniff_image(data) == media_type
    else:
        try:
            data.decode("utf-8")
            ok = True
        except UnicodeDecodeError:
            ok = False
    if not ok:
        raise bad_request(
            f"the bytes are not {media_type}: images must carry their format's signature and "
            "documents must be UTF-8 text; nothing was kept",
            code=ErrorCode.ATTACHMENT_TYPE_MISMATCH,
        )


def _held_by_lobby(lobby_pk: int, sha256: str) -> bool:
    return (
        Attachment.objects.filter(
            lobby_id=lobby_pk, sha256=sha256, expired_at__isnull=True
        ).exists()
        or PendingUpload.objects.filter(lobby_id=lobby_pk, sha256=sha256).exists()
    )


def _check_room(uploader: Agent, sha256: str, size: int) -> None:
    """The lobby's quota of distinct content and the volume's free reserve; 507 naming each."""
    bounds = settings.BOUNDS
    if not _held_by_lobby(uploader.lobby_id, sha256):
        used = lobby_usage_bytes(uploader.lobby_id)
        if used + size > bounds.attachments_lobby_bytes:
            raise BrokerError(
                507,
                ErrorCode.STORAGE_CAPACITY,
                f"this lobby holds {used} bytes of attachments; {size} more would pass its quota "
                f"of {bounds.attachments_lobby_bytes} (POCOLOBBY_ATTACHMENTS_LOBBY_BYTES); "
                "nothing was stored",
                setting="POCOLOBBY_ATTACHMENTS_LOBBY_BYTES",
            )
    if not blobs.exists(sha256, size):
        free = blobs.free_bytes()
        if free - size < bounds.attachments_reserve_bytes:
            raise BrokerError(
                507,
                ErrorCode.STORAGE_CAPACITY,
                f"the attachments volume has {free} bytes free; storing {size} would leave less "
                f"than the reserve of {bounds.attachments_reserve_bytes} "
                "(POCOLOBBY_ATTACHMENTS_RESERVE_BYTES); nothing was stored",
                setting="POCOLOBBY_ATTACHMENTS_RESERVE_BYTES",
            )


def upload(uploader: Agent, sha256: str, content_type: str, data: bytes) -> UploadOutcome:
    """Prove possession of `data`: verified, checked against every bound, then stored once."""
    if not blobs.SHA256_PATTERN.match(sha256):
        raise bad_request(
            "the path must end in the SHA-256 of the bytes, 64 lowercase hex digits",
            code=ErrorCode.INVALID_DIGEST,
        )
    try:
        media_type = check_media_type(content_type or "")
    except ValueError as error:
        raise BrokerError(415, ErrorCode.UNSUPPORTED_MEDIA_TYPE, f"Content-Type {error}") from None
    limit, variable = attachment_limit(media_type)
    if len(data) > limit:
        raise BrokerError(
            413,
            ErrorCode.ATTACHMENT_TOO_LARGE,
            f"the file is {len(data)} bytes; the limit for {media_type} is {limit} ({variable})",
        )
    if not data:
        raise bad_request("an attachment must not be empty", code=ErrorCode.INVALID_ARGUMENTS)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise bad_request(
            f"the bytes do not hash to {sha256}; nothing was kept",
            code=ErrorCode.ATTACHMENT_HASH_MISMATCH,
        )
    _check_bytes(media_type, data)
    size = len(data)
    with blobs.write_lock():
        now = timezone.now()
        proven = PendingUpload.objects.filter(uploader=uploader, sha256=sha256)
        if (
            proven.exists()
            or Attachment.objects.filter(
                uploader=uploader, sha256=sha256, expired_at__isnull=True
            ).exists()
        ):
            blobs.write(sha256, data)  # a no-op unless the file went missing
            proven.update(created_at=now)  # the grace period counts from the latest upload
            return UploadOutcome(sha256, size, created=False)
        _check_room(uploader, sha256, size)
        blobs.write(sha256, data)
        with transaction.atomic():
            AttachmentContent.objects.get_or_create(
                sha256=sha256, defaults={"size": size, "media_type": media_type, "created_at": now}
            )
            PendingUpload.objects.get_or_create(
                uploader=uploader,
                sha256=sha256,
                defaults={"lobby_id": uploader.lobby_id, "size": size, "created_at": now},
            )
    return UploadOutcome(sha256, size, created=True)


# ------------------------------------------------------------------ claims by a stored send


def _claim(sender: Agent, described: Sequence[AttachmentDescription], now: datetime) -> list[int]:
    """The attachment ids for `described`, in order; 409 naming every hash not proven.

    Runs inside the send's transaction, after its authorization, rates and limits: a refused
    send never gets here, and this refusal rolls the whole send back.
    """
    hashes = list(dict.fromkeys(d.sha256 for d in described))
    pending = set(
        PendingUpload.objects.filter(uploader=sender, sha256__in=hashes).values_list(
            "sha256", flat=True
        )
    )
    live = {
        a.sha256: a
        for a in Attachment.objects.filter(
            uploader=sender, sha256__in=hashes, expired_at__isnull=True
        )
    }
    contents = {c.sha256: c for c in AttachmentContent.objects.filter(sha256__in=hashes)}
    missing = [
        h
        for h in hashes
        if (h not in pending and h not in live)
        or h not in contents
        or not blobs.exists(h, contents[h].size)
    ]
    if missing:
        raise conflict(
            ErrorCode.ATTACHMENT_UPLOAD_REQUIRED,
            f"upload {len(missing)} attachment(s) with PUT /v1/attachments/<sha256>, then repeat "
            "this request unchanged; nothing was stored",
            missing=missing,
        )
    for d in described:
        content = contents[d.sha256]
        if d.size != content.size or (
            (is_image(d.media_type) or is_image(content.media_type))
            and d.media_type != content.media_type
        ):
            raise bad_request(
                f"{d.name!r} is described as {d.media_type}, {d.size} bytes, but its bytes are "
                f"{content.media_type}, {content.size} bytes; nothing was stored",
                code=ErrorCode.ATTACHMENT_DESCRIPTION_MISMATCH,
            )
    ids = []
    for d in described:
        # Locked: the sweep expires a record only under this lock (see `sweep`).
        record = (
            Attachment.objects.select_for_update()
            .filter(
                uploader=sender,
                sha256=d.sha256,
                name=d.name,
                media_type=d.media_type,
                expired_at__isnull=True,
            )
            .first()
        )
        if record is None:
            record = Attachment.objects.create(
                lobby_id=sender.lobby_id,
                uploader=sender,
                sha256=d.sha256,
                name=d.name,
                media_type=d.media_type,
                size=d.size,
                created_at=now,
            )
        ids.append(record.pk)
    PendingUpload.objects.filter(uploader=sender, sha256__in=hashes).delete()
    return ids


def attach_to_message(
    sender: Agent, message_pk: int, described: Sequence[AttachmentDescription], now: datetime
) -> None:
    ids = _claim(sender, described, now)
    MessageAttachment.objects.bulk_create(
        MessageAttachment(message_id=message_pk, attachment_id=pk, position=i)
        for i, pk in enumerate(ids)
    )


def attach_to_schedule(
    sender: Agent, schedule_pk: int, described: Sequence[AttachmentDescription], now: datetime
) -> None:
    ids = _claim(sender, described, now)
    ScheduleAttachment.objects.bulk_create(
        ScheduleAttachment(schedule_id=schedule_pk, attachment_id=pk, position=i)
        for i, pk in enumerate(ids)
    )


def attach_schedule_files(schedule_pk: int, message_pk: int) -> None:
    """An occurrence carries its schedule's files (kept live while the schedule is active)."""
    links = ScheduleAttachment.objects.filter(schedule_id=schedule_pk).order_by("position")
    MessageAttachment.objects.bulk_create(
        MessageAttachment(message_id=message_pk, attachment_id=link.attachment_id, position=i)
        for i, link in enumerate(links)
    )


# ------------------------------------------------------------------ collection


def _live_reference(now: datetime) -> tuple[Q, Q]:
    """Links that keep an attachment live: a message within its day or still waiting for its
    time (a cancelled one holds nothing), and an active schedule."""
    cutoff = now - KEPT_FOR
    message = Q(message__scheduled_pending=True) | Q(
        message__delivered_at__gt=cutoff, message__cancelled_at__isnull=True
    )
    schedule = Q(schedule__status=ScheduleStatus.ACTIVE)
    return message, schedule


def _expiring(now: datetime) -> Q:
    message, schedule = _live_reference(now)
    return (
        Q(expired_at__isnull=True)
        & ~Q(pk__in=MessageAttachment.objects.filter(message).values("attachment_id"))
        & ~Q(pk__in=ScheduleAttachment.objects.filter(schedule).values("attachment_id"))
    )


def _unreferenced_contents(hashes: Iterable[str] | None = None) -> list[str]:
    contents = AttachmentContent.objects.exclude(
        sha256__in=Attachment.objects.filter(expired_at__isnull=True).values("sha256")
    ).exclude(sha256__in=PendingUpload.objects.values("sha256"))
    if hashes is not None:
        contents = contents.filter(sha256__in=list(hashes))
    return list(contents.values_list("sha256", flat=True)[:500])


def delete_unreferenced_contents(hashes: Iterable[str] | None = None) -> int:
    """Delete content no live attachment and no pending upload names, rows then files.

    Under the blobs write lock, so no upload of the same bytes commits in between.
    """
    removed = 0
    with blobs.write_lock():
        while found := _unreferenced_contents(hashes):
            with transaction.atomic():
                gone = list(
                    AttachmentContent.objects.filter(sha256__in=found)
                    .exclude(
                        sha256__in=Attachment.objects.filter(expired_at__isnull=True).values(
                            "sha256"
                        )
                    )
                    .exclude(sha256__in=PendingUpload.objects.values("sha256"))
                    .values_list("sha256", flat=True)
                )
                AttachmentContent.objects.filter(sha256__in=gone).delete()
            for sha256 in gone:
                blobs.remove(sha256)
            removed += len(gone)
            if len(gone) < len(found):
                break
    return removed


def remove_files_without_rows(hashes: Iterable[str]) -> None:
    """After a commit: remove each file whose content row is gone (checked under the lock)."""
    with blobs.write_lock():
        for sha256 in hashes:
            if not AttachmentContent.objects.filter(sha256=sha256).exists():
                blobs.remove(sha256)


def _stray_files(now: datetime) -> list[str]:
    """Files with no row (a broker killed between writing and committing) and temporaries,
    older than the grace period."""
    folder = blobs.directory()
    if not folder.is_dir():
        return []
    grace = settings.BOUNDS.upload_grace_seconds
    horizon = time.time() - grace
    names = []
    with os.scandir(folder) as entries:
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                if entry.name == blobs.LOCK_NAME:
                    continue
                if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < horizon:
                    names.append(entry.name)
    if not names:
        return []
    hashes = [n for n in names if blobs.SHA256_PATTERN.match(n)]
    known: set[str] = set()
    for start in range(0, len(hashes), 500):  # bounded IN lists, whatever the directory holds
        chunk = hashes[start : start + 500]
        known |= set(
            AttachmentContent.objects.filter(sha256__in=chunk).values_list("sha256", flat=True)
        )
    return [n for n in names if n not in known]


def _remove_stray_files(now: datetime) -> int:
    removed = 0
    with blobs.write_lock():
        for name in _stray_files(now):
            if (
                blobs.SHA256_PATTERN.match(name)
                and AttachmentContent.objects.filter(sha256=name).exists()
            ):
                continue
            with contextlib.suppress(FileNotFoundError):
                (blobs.directory() / name).unlink()
                removed += 1
    return removed


def sweep(now: datetime) -> dict[str, int]:
    """Expire, forget and delete what the spec says; reads first, so idle means no write.

    1. An attachment no live message or active schedule names expires (after the message
       sweep, so files of messages that just went expire in the same pass).
    2. An expired record goes 7 days after expiry, once no message or schedule names it.
    3. Pending uploads older than the grace period go.
    4. Content no live attachment and no pending upload names goes, row then file; files
       left without a row by a crash go after the grace period too.
    """
    counts = {"attachments_expired": 0, "attachment_records": 0, "pending_uploads": 0}
    candidates = list(Attachment.objects.filter(_expiring(now)).values_list("pk", flat=True))
    if candidates:
        with transaction.atomic():
            # Locked first, then checked again by a statement of its own: on PostgreSQL that
            # statement sees a link a send committed while we waited for its row lock.
            locked = list(
                Attachment.objects.select_for_update()
                .filter(pk__in=candidates, expired_at__isnull=True)
                .values_list("pk", flat=True)
            )
            counts["attachments_expired"] = Attachment.objects.filter(
                _expiring(now), pk__in=locked
            ).update(expired_at=now)
    old = Attachment.objects.filter(
        expired_at__lte=now - EXPIRED_RECORD_KEPT,
        message_links__isnull=True,
        schedule_links__isnull=True,
    )
    if old.exists():
        counts["attachment_records"] = Attachment.objects.filter(
            pk__in=list(old.values_list("pk", flat=True))
        ).delete()[0]
    grace = timedelta(seconds=settings.BOUNDS.upload_grace_seconds)
    stale = PendingUpload.objects.filter(created_at__lte=now - grace)
    if stale.exists():
        counts["pending_uploads"] = stale.delete()[0]
    counts["attachment_contents"] = (
        delete_unreferenced_contents() if _unreferenced_contents() else 0
    )
    counts["attachment_stray_files"] = _remove_stray_files(now) if _stray_files(now) else 0
    return counts


def hashes_of_lobby(lobby_pk: int) -> set[str]:
    """What a lobby's hard delete may leave unreferenced (read before the delete)."""
    return set(Attachment.objects.filter(lobby_id=lobby_pk).values_list("sha256", flat=True)) | set(
        PendingUpload.objects.filter(lobby_id=lobby_pk).values_list("sha256", flat=True)
    )


def forget_lobby_contents(hashes: set[str]) -> None:
    """In the lobby's delete transaction: drop content rows nothing anywhere names any more;
    their files go after the commit (content is shared across lobbies by SHA-256)."""
    if not hashes:
        return
    gone = [
        sha256
        for sha256 in hashes
        if not Attachment.objects.filter(sha256=sha256, expired_at__isnull=True).exists()
        and not PendingUpload.objects.filter(sha256=sha256).exists()
    ]
    AttachmentContent.objects.filter(sha256__in=gone).delete()
    transaction.on_commit(lambda: remove_files_without_rows(gone))

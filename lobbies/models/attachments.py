"""Attachments: content by SHA-256, its descriptions, what messages carry, uploads."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from lobbies.models.agents import Agent, Lobby
from lobbies.models.messages import Message, Schedule


class AttachmentContent(models.Model):
    """One stored file per SHA-256, shared by every attachment with those bytes.

    The bytes live in `<attachments dir>/<sha256>` (lobbies/storage/blobs.py); the row says they are
    complete and verified. It goes when no live attachment and no pending upload names it.
    """

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.PositiveBigIntegerField()
    media_type = models.CharField(max_length=100)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"content {self.sha256[:12]}"


class Attachment(models.Model):
    """One uploader's file under one name, referenced by messages and schedules."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="attachments")
    # Kept (null) when the agent is removed: its recipients keep the file for the message's day.
    uploader = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="attachments"
    )
    sha256 = models.CharField(max_length=64)
    name = models.CharField(max_length=255)
    media_type = models.CharField(max_length=100)
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField()
    # When nothing live referenced it any more: its uploader gets 410, everyone else 404.
    expired_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["uploader", "sha256", "name", "media_type"],
                condition=Q(expired_at__isnull=True),
                name="attachment_live_unique",
            )
        ]
        indexes = [models.Index(fields=["sha256"], name="attachment_sha256")]

    def __str__(self) -> str:
        return f"attachment {self.pk} {self.name}"


class MessageAttachment(models.Model):
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attachment_links")
    attachment = models.ForeignKey(
        Attachment, on_delete=models.CASCADE, related_name="message_links"
    )
    position = models.PositiveSmallIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["message", "position"], name="message_attachment_unique"
            )
        ]

    def __str__(self) -> str:
        return f"attachment {self.attachment_id} of message {self.message_id}"


class ScheduleAttachment(models.Model):
    schedule = models.ForeignKey(
        Schedule, on_delete=models.CASCADE, related_name="attachment_links"
    )
    attachment = models.ForeignKey(
        Attachment, on_delete=models.CASCADE, related_name="schedule_links"
    )
    position = models.PositiveSmallIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "position"], name="schedule_attachment_unique"
            )
        ]

    def __str__(self) -> str:
        return f"attachment {self.attachment_id} of schedule {self.schedule_id}"


class PendingUpload(models.Model):
    """Bytes an uploader proved it has, not yet named by a stored send: kept a grace period."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="pending_uploads")
    uploader = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="pending_uploads")
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["uploader", "sha256"], name="pending_upload_unique")
        ]
        indexes = [models.Index(fields=["sha256"], name="pending_upload_sha256")]

    def __str__(self) -> str:
        return f"pending {self.sha256[:12]} of {self.uploader_id}"

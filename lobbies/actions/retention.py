"""Messages are kept a day: what must last belongs in checkpoints and the team's notes."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from lobbies.actions import attachments
from lobbies.models import AuditEvent, Message, Notice, Schedule, ScheduleStatus

KEPT_FOR = timedelta(days=1)
BATCH = 500
# Each lobby's newest audit events, and as many without a lobby: years at a few a day, but
# an agent resuming its runtime in a loop writes one per request.
AUDIT_KEPT_PER_LOBBY = 10_000


def _expired_ids(cutoff: datetime) -> list[int]:
    # Two index range reads rather than one OR, so each uses its own index.
    reached = Message.objects.filter(delivered_at__lte=cutoff).values_list("pk", flat=True)[:BATCH]
    ids = list(reached)
    if len(ids) < BATCH:
        cancelled = Message.objects.filter(cancelled_at__lte=cutoff).values_list("pk", flat=True)
        ids += list(cancelled[: BATCH - len(ids)])
    return ids


def sweep(now: datetime) -> dict[str, int]:
    """Delete what is past its day; reads first, so an idle broker writes nothing.

    A message goes 24 hours after it reached its recipients (a scheduled one after its
    delivery), acknowledged or not, with its deliveries and receipts in one transaction; a
    scheduled message still waiting stays; a cancelled one goes a day after its cancellation.
    """
    cutoff = now - KEPT_FOR
    counts = {"messages": 0, "schedules": 0, "notices": 0}
    while ids := _expired_ids(cutoff):
        with transaction.atomic():
            Message.objects.filter(pk__in=ids).delete()
        counts["messages"] += len(ids)
    old_schedules = Schedule.objects.filter(
        status=ScheduleStatus.CANCELLED, cancelled_at__lte=cutoff
    )
    if old_schedules.exists():
        counts["schedules"] = old_schedules.delete()[0]
    old_notices = Notice.objects.filter(created_at__lte=cutoff)
    if old_notices.exists():
        counts["notices"] = old_notices.delete()[0]
    counts["audit_events"] = trim_audit_events()
    # After the messages: files those messages referenced can expire in this same pass.
    counts.update(attachments.sweep(now))
    return counts


def trim_audit_events() -> int:
    """Delete audit events beyond each lobby's newest AUDIT_KEPT_PER_LOBBY (index reads)."""
    deleted = 0
    names = AuditEvent.objects.order_by().values_list("lobby_name", flat=True).distinct()
    for name in list(names):
        newest = AuditEvent.objects.filter(lobby_name=name).order_by("-created_at", "-id")
        boundary = newest.values_list("created_at", "id")[AUDIT_KEPT_PER_LOBBY:][:1]
        for at, pk in boundary:
            older = Q(created_at__lt=at) | Q(created_at=at, id__lte=pk)
            deleted += AuditEvent.objects.filter(older, lobby_name=name).delete()[0]
    return deleted

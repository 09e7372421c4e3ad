"""Messages are kept a day: what must last belongs in checkpoints and the team's notes."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from lobbies.models import Message, Notice, Schedule, ScheduleStatus

KEPT_FOR = timedelta(days=1)
BATCH = 500


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
    return counts

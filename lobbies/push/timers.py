"""The dispatcher's timers: one pass (`tick`) of every step, run by one process at a time.

Each step reads first, so an idle broker writes nothing; group messages a step wants sent
are collected in a TickResult and published by the caller after the step's commits. The
loop that runs `tick` and the leadership that picks its process live in pocolobby/loops.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lobbies.actions.restore import access_closed
from lobbies.actions.retention import sweep
from lobbies.actions.schedules import deliver_due, run_schedules
from lobbies.models import SILENT_SELF_NOTE, Agent, Delivery, DeliveryState, SeenReceipt
from lobbies.push.activity_timer import run_activity
from lobbies.push.events import agent_group
from lobbies.push.presence import forget_dead_processes, live_connections
from lobbies.wire.facts import iso

log = logging.getLogger("pocolobby.dispatch")

RECEIPT_LIFETIME = timedelta(days=1)


@dataclass
class TickResult:
    """Group messages to publish after the tick's transactions committed."""

    publish: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def to_agent(self, agent_pk: int, message: dict[str, Any]) -> None:
        self.publish.append((agent_group(agent_pk), message))


def _connected_generations(agent_pks: list[int]) -> dict[int, int]:
    return dict(
        live_connections().filter(agent_id__in=agent_pks).values_list("agent_id", "generation")
    )


def run_retries(now: datetime, result: TickResult) -> None:
    """Unresolved notifications: retry with backoff, silently behind a confirmed host write.

    1. Read the agents whose retry is due (not resting, enabled); none: done, nothing written.
    2. For each, in its own transaction, lock the row and read its unresolved deliveries.
    3. Nothing unresolved: the budget resets. Budget spent: the owner's attention is required.
    4. No socket of the current generation: try again later without spending the budget.
    5. Otherwise spend one attempt, and hint at what the host write did not confirm.
    """
    due = list(
        # A resting agent's budget waits: nothing is pushed to it, and nothing is written.
        Agent.objects.filter(notify_next_at__lte=now, enabled=True, resting=False).values_list(
            "pk", flat=True
        )[:200]
    )
    if not due:
        return
    connected = _connected_generations(due)
    schedule = settings.BOUNDS.notify_retry_seconds
    for agent_pk in due:
        with transaction.atomic():
            agent = Agent.objects.select_for_update().filter(pk=agent_pk).first()
            if agent is None or agent.notify_next_at is None or agent.notify_next_at > now:
                continue
            unresolved = list(
                Delivery.objects.filter(
                    recipient=agent,
                    state=DeliveryState.PENDING,
                    pushed_generation=agent.runtime_generation,
                )
                .exclude(SILENT_SELF_NOTE)
                .values_list("message_id", "notified_generation")
            )
            if agent.resting:
                continue  # rested since the read above
            if not unresolved:
                agent.notify_attempts, agent.notify_next_at = 0, None
            elif agent.notify_attempts >= len(schedule):
                agent.notification_attention_required, agent.notify_next_at = True, None
            elif connected.get(agent_pk) != agent.runtime_generation:
                # Nobody to tell: a reconnect pushes again; the budget is not spent meanwhile.
                agent.notify_next_at = now + timedelta(seconds=schedule[0])
            else:
                agent.notify_attempts += 1
                delay = schedule[min(agent.notify_attempts, len(schedule) - 1)]
                agent.notify_next_at = now + timedelta(seconds=delay)
                # A reminder names only what the current process did not confirm writing.
                unconfirmed = [m for m, g in unresolved if g != agent.runtime_generation]
                if unconfirmed:
                    result.to_agent(
                        agent_pk,
                        {
                            "type": "agent.hint",
                            "generation": agent.runtime_generation,
                            "message_ids": unconfirmed,
                        },
                    )
            agent.save(
                update_fields=[
                    "notify_attempts",
                    "notify_next_at",
                    "notification_attention_required",
                ]
            )


def run_bootstrap_retries(now: datetime, result: TickResult) -> None:
    """A bootstrap not answered with `ready` goes again at the schedule's longest delay.

    1. Read the agents whose bootstrap went out longer ago than the longest delay, unready.
    2. Skip those with no socket of that generation (a reconnect bootstraps anyway).
    3. As many bootstraps as the schedule has delays: the owner's attention, no more tries.
    4. Otherwise claim the retry with a conditional update, then ask the socket to send it.
    """
    schedule = settings.BOUNDS.notify_retry_seconds
    due_before = now - timedelta(seconds=max(schedule))
    waiting = Agent.objects.filter(
        ready_at__isnull=True,
        runtime_id__isnull=False,
        bootstrap_sent_at__lte=due_before,
        enabled=True,
    )
    candidates = list(waiting.values_list("pk", "runtime_generation", "bootstrap_attempts")[:200])
    if not candidates:
        return
    connected = _connected_generations([pk for pk, _, _ in candidates])
    for agent_pk, generation, attempts in candidates:
        if connected.get(agent_pk) != generation:
            continue
        if attempts >= len(schedule):
            waiting.filter(pk=agent_pk).update(
                notification_attention_required=True, bootstrap_sent_at=None
            )
            continue
        # Claim this retry with a conditional update, so no other tick sends it twice.
        if waiting.filter(pk=agent_pk, runtime_generation=generation).update(bootstrap_sent_at=now):
            result.to_agent(agent_pk, {"type": "agent.bootstrap", "generation": generation})


def run_receipts(now: datetime, result: TickResult) -> None:
    """Owed read receipts: each waits a little, one event per 30 s per sender, 20 at most.

    1. Forget receipts older than a day.
    2. Read the senders owed receipts that waited long enough; none: done.
    3. For each connected sender not pushed to within the spacing, lock it, mark up to 20
       receipts pushed and publish them as one event after commit.
    """
    bounds = settings.BOUNDS
    if SeenReceipt.objects.filter(seen_at__lt=now - RECEIPT_LIFETIME).exists():
        SeenReceipt.objects.filter(seen_at__lt=now - RECEIPT_LIFETIME).delete()
    ready_before = now - timedelta(seconds=bounds.receipt_wait_seconds)
    senders = list(
        SeenReceipt.objects.filter(pushed_at__isnull=True, seen_at__lte=ready_before)
        .values_list("sender_id", flat=True)
        .distinct()[:200]
    )
    if not senders:
        return
    spacing = now - timedelta(seconds=bounds.receipt_spacing_seconds)
    connected = _connected_generations(senders)
    for sender_pk in senders:
        if sender_pk not in connected:
            continue
        with transaction.atomic():
            sender = Agent.objects.select_for_update().get(pk=sender_pk)
            if sender.last_receipts_push_at and sender.last_receipts_push_at > spacing:
                continue
            owed = list(
                SeenReceipt.objects.filter(
                    sender=sender, pushed_at__isnull=True, seen_at__lte=ready_before
                ).order_by("seen_at")[: bounds.receipts_per_event]
            )
            if not owed:
                continue
            SeenReceipt.objects.filter(pk__in=[r.pk for r in owed]).update(pushed_at=now)
            sender.last_receipts_push_at = now
            sender.save(update_fields=["last_receipts_push_at"])
            result.to_agent(
                sender_pk,
                {
                    "type": "agent.receipts",
                    "receipts": [
                        {
                            "message_id": r.message_id,
                            "seen_by": r.seen_by,
                            "seen_at": iso(r.seen_at),
                        }
                        for r in owed
                    ],
                },
            )


def run_rest_changes(now: datetime, result: TickResult) -> None:
    """Rests and resumptions a coordinator set for a time.

    1. Read the agents whose rest change is due.
    2. Apply each with a conditional update (a change made meanwhile wins).
    3. A resumed agent is woken, so what waited is pushed.
    """
    due = list(
        Agent.objects.filter(rest_change_at__lte=now).values_list("pk", "rest_change_to")[:200]
    )
    for agent_pk, rest in due:
        changed = Agent.objects.filter(pk=agent_pk, rest_change_at__lte=now).update(
            resting=bool(rest), rest_change_at=None, rest_change_to=None
        )
        if changed and not rest:
            result.to_agent(agent_pk, {"type": "agent.wake", "priority": "info"})


SWEEP_EVERY = timedelta(minutes=1)
_last_sweep: dict[str, datetime] = {}

# A sweep of rows past their lifetime; answers what it removed, by kind.
Sweep = Callable[[datetime], dict[str, int]]


def run_retention(now: datetime, sweeps: Sequence[Sweep] = ()) -> None:
    """The day-long retention sweep: at start, then every minute.

    1. Less than a minute since the last sweep (and the clock did not go back): done.
    2. Sweep the lobby store, then each sweep the project composes in (pocolobby/loops.py
       adds the console's expired sessions and codes), and log what went.
    """
    last = _last_sweep.get("at")
    if last is not None and now - last < SWEEP_EVERY and now >= last:
        return
    _last_sweep["at"] = now
    swept = dict(sweep(now))
    for extra in sweeps:
        swept.update(extra(now))
    if any(swept.values()):
        log.info("retention sweep removed %s", swept)


def tick(now: datetime | None = None, sweeps: Sequence[Sweep] = ()) -> TickResult:
    """One pass of every timer. Reads first: an idle broker opens no write transaction.

    0. In restore mode nothing runs (the operator's `restore --finish` reopens the store).
    1. Deliver scheduled messages now due, then fire daily schedules.
    2. Apply due rests and resumptions.
    3. Retry unresolved notifications, then unanswered bootstraps.
    4. Push owed read receipts, then watched agents' activity changes.
    5. Forget dead broker processes.
    6. Sweep what outlived its retention (with the project's `sweeps`).
    """
    now = now or timezone.now()
    result = TickResult()
    if access_closed():
        return result  # restore mode: nothing moves until the operator finishes it
    deliver_due(now)
    run_schedules(now)
    run_rest_changes(now, result)
    run_retries(now, result)
    run_bootstrap_retries(now, result)
    run_receipts(now, result)
    for watcher_pk, pushed in run_activity(now):
        result.to_agent(watcher_pk, pushed)
    forget_dead_processes(now)
    run_retention(now, sweeps)
    return result

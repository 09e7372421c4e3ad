"""Push: what each bridge is sent, the persisted attempts, and the dispatcher's timers.

The inbox rows are the queue. A socket's consumer calls the `*_frame` functions to turn
pending deliveries into one notice, recording the attempt in the same transaction. The
dispatcher (one process at a time) runs retries, bootstrap retries, read receipts and the
cleanup of dead processes; each of its steps reads first, so an idle broker writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from lobbies import presentation, store
from lobbies.events import DISPATCH_GROUP, agent_group
from lobbies.models import (
    Agent,
    BrokerProcess,
    Connection,
    Delivery,
    DeliveryState,
    Message,
    Notice,
    NoticeKind,
    Priority,
    SeenReceipt,
)
from lobbies.selectors import iso

log = logging.getLogger("pocolobby.dispatch")

# This process's identity in the presence registry.
PROCESS_ID = uuid.uuid4()
PROCESS_STALE_AFTER = timedelta(seconds=60)
RECEIPT_LIFETIME = timedelta(days=1)

Frame = dict[str, Any]


def _notice(
    agent: Agent,
    kind: NoticeKind,
    message_ids: list[int],
    shown: presentation.Presentation,
    *,
    now: datetime,
    count: int | None = None,
) -> Frame:
    notice = store.insert(
        Notice,
        {
            "id": uuid.uuid4(),
            "agent_id": agent.pk,
            "runtime_id": agent.runtime_id or "",
            "generation": agent.runtime_generation,
            "kind": kind,
            "message_ids": message_ids,
            "created_at": now,
        },
    )
    return {
        "type": "notice",
        "event_version": presentation.EVENT_VERSION,
        "notice_id": str(notice.id),
        "notice_kind": kind,
        "generation": agent.runtime_generation,
        "as_of": iso(now),
        "message_ids": message_ids,
        "count": len(message_ids) if count is None else count,
        "truncated": shown.truncated,
        "content": shown.content,
        "meta": shown.meta,
        "extensions": shown.extensions,
    }


def _current(agent_pk: int, generation: int, *, resting_too: bool = False) -> Agent | None:
    """The agent row, if `generation` still holds its runtime (and it is not resting).

    Read inside the caller's write transaction (BEGIN IMMEDIATE on SQLite; on PostgreSQL
    the FOR UPDATE locks the row), so the runtime cannot change before the push is recorded.
    """
    agent = store.select(
        Agent,
        "t.id = %s",
        [agent_pk],
        join="JOIN lobbies_lobby l ON l.id = t.lobby_id",
        annotations={"lobby_name": "l.name"},
        for_update=True,
    )
    if agent is None or not agent.enabled or agent.runtime_generation != generation:
        return None
    if agent.resting and not resting_too:
        return None
    return agent


# A note to yourself wakes nobody; a reminder to yourself (scheduled) does.
_SILENT_SELF_NOTE = Q(message__deliver_at__isnull=True, message__schedule__isnull=True)


def _schedule_retry(agent: Agent, now: datetime) -> None:
    if agent.notify_next_at is None:
        agent.notify_next_at = now + timedelta(seconds=settings.BOUNDS.notify_retry_seconds[0])
        store.execute(
            "UPDATE lobbies_agent SET notify_next_at = %s WHERE id = %s",
            [store.as_db_time(agent.notify_next_at), agent.pk],
        )


def bootstrap_frame(agent_pk: int, generation: int) -> Frame | None:
    """A new runtime's bootstrap: the nonce, and everything that waited as one backlog notice."""
    with transaction.atomic():
        agent = _current(agent_pk, generation, resting_too=True)
        if agent is None or agent.ready_at is not None:
            return None
        now = timezone.now()
        # Backlog: accepted before the binding and delivered by then (a scheduled message
        # that fell due since is pushed with its body).
        bound_at = agent.backlog_bound_at or agent.runtime_bound_at or now
        backlog = store.select_all(
            Delivery,
            _PUSHABLE_SQL + " AND m.sequence <= %s AND t.delivered_at <= %s",
            [agent_pk, generation, agent_pk, agent.backlog_sequence, store.as_db_time(bound_at)],
            join=_MESSAGE_JOIN,
            tail="ORDER BY m.sequence",
        )
        ids = [d.message_id for d in backlog]
        Delivery.objects.filter(pk__in=[d.pk for d in backlog]).update(
            pushed_generation=generation, pushed_at=now
        )
        shown = presentation.bootstrap_notice(
            agent.agent_id,
            agent.lobby_name,
            nonce=agent.bootstrap_nonce,
            generation=generation,
            backlog_ids=ids,
            as_of=now,
            receipt_sequence=agent.receipt_sequence,
        )
        agent.bootstrap_sent_at = now
        agent.bootstrap_attempts += 1
        agent.save(update_fields=["bootstrap_sent_at", "bootstrap_attempts"])
        if ids:
            _schedule_retry(agent, now)
        return _notice(agent, NoticeKind.BOOTSTRAP, ids, shown, now=now)


# Pending copies this generation has not been sent, by hand (the stream's hottest read):
# a note to yourself wakes nobody, a reminder to yourself (scheduled) does.
_PUSHABLE_SQL = (
    "t.recipient_id = %s AND t.state = 'pending' "
    "AND (t.pushed_generation IS NULL OR t.pushed_generation <> %s) "
    "AND NOT (m.sender_id = %s AND m.deliver_at IS NULL AND m.schedule_id IS NULL)"
)
_MESSAGE_JOIN = "JOIN lobbies_message m ON m.id = t.message_id"


def push_frame(agent_pk: int, generation: int) -> Frame | None:
    """New pending messages with their bodies, important first; None when nothing is due.

    Reads first: the common "nothing more" answer opens no write transaction. Its statements
    are hand-written (lobbies/store.py) because this runs once per message per recipient.
    """
    params = [agent_pk, generation, agent_pk]
    waiting = store.select_all(
        Delivery, _PUSHABLE_SQL, params, join=_MESSAGE_JOIN, tail="ORDER BY m.sequence LIMIT 1"
    )
    if not waiting:
        return None
    with transaction.atomic():
        agent = _current(agent_pk, generation)
        if agent is None:
            return None
        ids = [
            d.message_id
            for d in store.select_all(
                Delivery,
                _PUSHABLE_SQL,
                params,
                join=_MESSAGE_JOIN,
                tail="ORDER BY m.sequence LIMIT 200",
            )
        ]
        if not ids:
            return None
        marks = ", ".join(["%s"] * len(ids))
        messages = store.select_all(Message, f"t.id IN ({marks})", ids)
        now = timezone.now()
        mark_pushed = (
            "UPDATE lobbies_delivery SET pushed_generation = %s, pushed_at = %s "  # noqa: S608
            f"WHERE recipient_id = %s AND message_id IN ({marks})"
        )
        store.execute(mark_pushed, [generation, store.as_db_time(now), agent_pk, *ids])
        messages.sort(key=lambda m: (m.priority != Priority.IMPORTANT, m.sequence))
        shown = presentation.messages_notice(
            agent.agent_id, agent.lobby_name, messages, cap_bytes=settings.BOUNDS.push_bytes
        )
        _schedule_retry(agent, now)
        return _notice(agent, NoticeKind.MESSAGES, [m.pk for m in messages], shown, now=now)


def hint_frame(agent_pk: int, generation: int, message_ids: list[int]) -> Frame | None:
    """A coalesced reminder of unacknowledged messages, counted as of now, naming them."""
    with transaction.atomic():
        agent = _current(agent_pk, generation)
        if agent is None:
            return None
        still = list(
            Delivery.objects.filter(
                recipient=agent, state=DeliveryState.PENDING, message_id__in=message_ids
            )
            .order_by("message__sequence")
            .values_list("message_id", flat=True)
        )
        if not still:
            return None
        now = timezone.now()
        shown = presentation.hint_notice(agent.agent_id, agent.lobby_name, still, now)
        return _notice(agent, NoticeKind.HINT, still, shown, now=now)


def receipts_frame(agent_pk: int, receipts: list[dict[str, Any]]) -> Frame | None:
    with transaction.atomic():
        agent = Agent.objects.select_related("lobby").filter(pk=agent_pk, enabled=True).first()
        if agent is None or agent.runtime_id is None:
            return None
        shown = presentation.receipts_notice(agent.agent_id, agent.lobby.name, receipts)
        ids = [r["message_id"] for r in receipts]
        return _notice(agent, NoticeKind.RECEIPTS, ids, shown, now=timezone.now())


def reconnected(agent_pk: int, generation: int) -> None:
    """A reconnect of the same process: what it may not have written to the host goes again."""
    Delivery.objects.filter(
        recipient_id=agent_pk, state=DeliveryState.PENDING, pushed_generation=generation
    ).filter(Q(notified_generation__isnull=True) | ~Q(notified_generation=generation)).update(
        pushed_generation=None
    )


def notice_known(agent_pk: int, generation: int, notice_id: str) -> bool:
    try:
        key = uuid.UUID(notice_id)
    except (ValueError, TypeError, AttributeError):
        return False
    return Notice.objects.filter(id=key, agent_id=agent_pk, generation=generation).exists()


TransportFact = tuple[int, int, str, str]  # agent, generation, notice id, "received"|"host_written"


def record_transport_facts(facts: list[TransportFact]) -> None:
    """What bridges reported about their notices, many at once: one transaction, one fsync."""
    now = timezone.now()
    with transaction.atomic():
        for agent_pk, generation, notice_id, fact in facts:
            notice = Notice.objects.filter(
                id=uuid.UUID(notice_id), agent_id=agent_pk, generation=generation
            ).first()
            if notice is None:
                continue
            deliveries = Delivery.objects.filter(
                recipient_id=agent_pk, message_id__in=notice.message_ids
            )
            if fact == "received":
                if notice.received_at is None:
                    Notice.objects.filter(id=notice.id).update(received_at=now)
                deliveries.update(adapter_received_at=now)
            else:
                if notice.host_written_at is None:
                    Notice.objects.filter(id=notice.id).update(host_written_at=now)
                if notice.kind != NoticeKind.RECEIPTS:
                    deliveries.update(notification_attempted_at=now, notified_generation=generation)


# ---------------------------------------------------------------- presence


def ensure_process() -> None:
    now = timezone.now()
    BrokerProcess.objects.update_or_create(
        id=PROCESS_ID,
        defaults={"last_seen_at": now},
        create_defaults={"started_at": now, "last_seen_at": now},
    )


def open_connection(agent_pk: int, generation: int) -> int:
    ensure_process()
    now = timezone.now()
    return Connection.objects.create(
        agent_id=agent_pk,
        process_id=PROCESS_ID,
        generation=generation,
        connected_at=now,
        last_heartbeat_at=now,
    ).pk


def close_connection(connection_pk: int) -> None:
    Connection.objects.filter(pk=connection_pk).delete()


def heartbeat(connection_pks: list[int]) -> None:
    """This process is alive; these connections were heard from since the last beat."""
    now = timezone.now()
    with transaction.atomic():
        if not BrokerProcess.objects.filter(id=PROCESS_ID).update(last_seen_at=now):
            ensure_process()
        if connection_pks:
            Connection.objects.filter(pk__in=connection_pks).update(last_heartbeat_at=now)


def live_connections() -> Any:
    return Connection.objects.filter(
        process__last_seen_at__gte=timezone.now() - PROCESS_STALE_AFTER
    )


# ---------------------------------------------------------------- the dispatcher's timers


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
    """Unresolved notifications: retry with backoff, silently behind a confirmed host write."""
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
                .exclude(Q(message__sender=agent) & _SILENT_SELF_NOTE)
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

    Never after `ready`; after as many bootstraps as the schedule has delays, the agent
    needs the owner's attention instead.
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
    """Owed read receipts: each waits a little, one event per 30 s per sender, 20 at most."""
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
    """Rests and resumptions a coordinator set for a time."""
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


def run_retention(now: datetime) -> None:
    """The day-long retention sweep: at start, then every minute."""
    last = _last_sweep.get("at")
    if last is not None and now - last < SWEEP_EVERY and now >= last:
        return
    _last_sweep["at"] = now
    from console.actions.expiry import sweep_expired
    from lobbies.actions.retention import sweep

    swept = {**sweep(now), **sweep_expired(now)}
    if any(swept.values()):
        log.info("retention sweep removed %s", swept)


def run_process_cleanup(now: datetime) -> None:
    stale = BrokerProcess.objects.filter(last_seen_at__lt=now - PROCESS_STALE_AFTER)
    if stale.exclude(id=PROCESS_ID).exists():
        stale.exclude(id=PROCESS_ID).delete()


def tick(now: datetime | None = None) -> TickResult:
    """One pass of every timer. Reads first: an idle broker opens no write transaction."""
    from lobbies.actions.schedules import deliver_due, run_schedules

    now = now or timezone.now()
    result = TickResult()
    deliver_due(now)
    run_schedules(now)
    run_rest_changes(now, result)
    run_retries(now, result)
    run_bootstrap_retries(now, result)
    run_receipts(now, result)
    run_process_cleanup(now)
    run_retention(now)
    return result


# ---------------------------------------------------------------- the loops `serve` runs

TICK_SECONDS = 0.25
MIN_TICK_SPACING = 0.05
GROUP_REFRESH_SECONDS = 600
BEAT_SECONDS = 15
# Any 64-bit number of our own: PostgreSQL advisory lock naming "the dispatcher".
LEADER_LOCK_KEY = 0x506F4C62_00000001


class Leadership:
    """Timers run in one process at a time: the holder of a PostgreSQL advisory lock.

    The lock lives on a dedicated connection, so it is released when the process dies and
    another process takes over at its next attempt. A follower keeps its connection and asks
    for the lock again on it, rather than reconnecting every attempt. SQLite serves one
    process: always leader.
    """

    def __init__(self) -> None:
        self.connection: Any = None
        self.leading = False

    def _connect(self) -> Any:
        import psycopg

        db = settings.DATABASES["default"]
        return psycopg.connect(
            host=db.get("HOST") or None,
            port=db.get("PORT") or None,
            dbname=db["NAME"],
            user=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            autocommit=True,
        )

    def hold(self) -> bool:
        from django.db import connection as default

        if default.vendor != "postgresql":
            return True
        try:
            if self.connection is None:
                self.connection = self._connect()
            if self.leading:
                self.connection.execute("SELECT 1")  # the lock lives as long as this session
                return True
            row = self.connection.execute(
                "SELECT pg_try_advisory_lock(%s)", [LEADER_LOCK_KEY]
            ).fetchone()
            self.leading = bool(row[0])
            if self.leading:
                log.info("this process runs the dispatcher's timers")
            return self.leading
        except Exception:
            log.warning("lost the dispatcher lock's connection", exc_info=True)
            self.release()
            return False

    def release(self) -> None:
        self.leading = False
        if self.connection is not None:
            try:
                self.connection.close()
            except Exception:
                log.debug("closing the lock connection failed", exc_info=True)
            self.connection = None


def _tick_and_close() -> TickResult:
    from django.db import close_old_connections

    close_old_connections()
    return tick()


async def _listen_for_wakes(layer: Any, channel: str, woken: asyncio.Event) -> None:
    """Turn commit wakes from any process into an in-process event.

    The receive is never cancelled (channel layers handle a cancelled receive poorly), and
    an error here only costs latency: the tick runs anyway.
    """
    joined_at = 0.0
    loop = asyncio.get_running_loop()
    while True:
        try:
            if loop.time() - joined_at > GROUP_REFRESH_SECONDS:
                await layer.group_add(DISPATCH_GROUP, channel)
                joined_at = loop.time()
            await layer.receive(channel)
            woken.set()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("the dispatcher's wake channel failed; ticking on", exc_info=True)
            await asyncio.sleep(1)


async def run_dispatcher() -> None:
    """Tick every 250 ms, or sooner when a commit wakes us through the channel layer.

    Ticks run on their own thread, not the one Django's sync views share, and at most one
    per 50 ms however many commits wake it: a burst of sends costs one pass, not one each.
    The loop outlives any error: while it holds the timers' lock no other process runs them.
    """
    from channels.db import database_sync_to_async
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = await layer.new_channel()
    woken = asyncio.Event()
    listener = asyncio.ensure_future(_listen_for_wakes(layer, channel, woken))
    leadership = Leadership()
    hold = database_sync_to_async(leadership.hold, thread_sensitive=False)
    run = database_sync_to_async(_tick_and_close, thread_sensitive=False)
    loop = asyncio.get_running_loop()
    try:
        while True:
            started = loop.time()
            woken.clear()
            try:
                if await hold():
                    result = await run()
                    for group, message in result.publish:
                        await layer.group_send(group, message)
                else:
                    await asyncio.sleep(2)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dispatcher tick failed; retrying")
                await asyncio.sleep(1)
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(woken.wait(), timeout=TICK_SECONDS)
            await asyncio.sleep(max(0.0, started + MIN_TICK_SPACING - loop.time()))
    finally:
        listener.cancel()
        leadership.release()


async def run_presence() -> None:
    """Vouch for this process's sockets every 15 s, with the ones heard from since."""
    from channels.db import database_sync_to_async

    from lobbies.consumers import LOCAL

    while True:
        await asyncio.sleep(BEAT_SECONDS)
        heard = []
        for consumer in list(LOCAL):
            if consumer.heard_since_beat and consumer.connection_pk is not None:
                heard.append(consumer.connection_pk)
                consumer.heard_since_beat = False
        if not LOCAL:
            continue
        try:
            await database_sync_to_async(heartbeat)(heard)
        except Exception:
            log.exception("presence heartbeat failed")


def register_process() -> None:
    """At start, before serving: this process joins the registry. A SQLite file is served by
    one process only, so any other registered process is a dead predecessor."""

    ensure_process()
    if connection.vendor == "sqlite":
        BrokerProcess.objects.exclude(id=PROCESS_ID).delete()


def start_loops() -> list[asyncio.Task[None]]:
    """Called by `pocolobby serve` on the server's event loop once its sockets listen."""
    from lobbies.events import SERVER_LOOP

    SERVER_LOOP["loop"] = asyncio.get_running_loop()
    return [asyncio.ensure_future(run_dispatcher()), asyncio.ensure_future(run_presence())]


__all__ = ["DISPATCH_GROUP", "start_loops", "tick"]

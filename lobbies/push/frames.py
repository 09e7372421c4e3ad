"""Push: what each bridge is sent, and the transport facts it reports back.

The inbox rows are the queue. A socket's consumer calls the `*_frame` functions to turn
pending deliveries into one notice, recording the attempt in the same transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lobbies.actions import restore
from lobbies.attachment_selectors import descriptors_for
from lobbies.fastlane import queries, store
from lobbies.fastlane.queries import Recipient
from lobbies.models import Agent, Delivery, DeliveryState, Notice, NoticeKind, Priority
from lobbies.push import presentation
from lobbies.wire.facts import iso
from lobbies.wire.frames import EVENT_VERSION, FRAME_NOTICE, NoticeFrame

NOTICE_WINDOW = timedelta(minutes=1)
# The most messages one notice carries; the rest go in the next one.
MESSAGES_PER_PUSH = 200


@dataclass(frozen=True)
class Deferred:
    """The agent had POCOLOBBY_NOTICES_PER_MINUTE message notices in the last minute: what
    waits stays pending (nothing is dropped) and goes as one notice when `seconds` pass."""

    seconds: float


# One socket's answer in a batch of pushes: a notice, a deferral, its failure, or nothing due.
PushAnswer = NoticeFrame | Deferred | Exception | None


def _notice(
    agent: Agent | Recipient,
    kind: NoticeKind,
    message_ids: list[int],
    shown: presentation.Presentation,
    *,
    now: datetime,
    count: int | None = None,
) -> NoticeFrame:
    row = _notice_row(agent, kind, message_ids, now)
    store.insert(Notice, row)
    return _notice_frame(row, shown, count)


def _notice_row(
    agent: Agent | Recipient, kind: NoticeKind, message_ids: list[int], now: datetime
) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "agent_id": agent.pk,
        "runtime_id": agent.runtime_id or "",
        "generation": agent.runtime_generation,
        "kind": kind,
        "message_ids": message_ids,
        "created_at": now,
    }


def _notice_frame(
    row: dict[str, Any], shown: presentation.Presentation, count: int | None = None
) -> NoticeFrame:
    message_ids: list[int] = row["message_ids"]
    return {
        "type": FRAME_NOTICE,
        "event_version": EVENT_VERSION,
        "notice_id": str(row["id"]),
        "notice_kind": row["kind"],
        "generation": row["generation"],
        "as_of": iso(row["created_at"]),
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
    the row is locked), so the runtime cannot change before the push is recorded.
    """
    agent = queries.locked_agent(agent_pk)
    if agent is None or not agent.enabled or agent.runtime_generation != generation:
        return None
    if (agent.resting or agent.lobby.delivery_paused) and not resting_too:
        return None  # resting, or the owner paused the lobby's delivery (maintenance)
    return agent


def _schedule_retry(agent: Agent | Recipient, now: datetime) -> None:
    if agent.notify_next_at is None:
        agent.notify_next_at = now + timedelta(seconds=settings.BOUNDS.notify_retry_seconds[0])
        queries.schedule_first_retry([agent.pk], agent.notify_next_at)


def bootstrap_frame(agent_pk: int, generation: int) -> NoticeFrame | None:
    """A new runtime's bootstrap: the nonce, and everything that waited as one backlog notice."""
    with transaction.atomic():
        agent = _current(agent_pk, generation, resting_too=True)
        if agent is None or agent.ready_at is not None:
            return None
        now = timezone.now()
        # Backlog: accepted before the binding and delivered by then (a scheduled message
        # that fell due since is pushed with its body).
        bound_at = agent.backlog_bound_at or agent.runtime_bound_at or now
        backlog = queries.backlog(agent_pk, generation, agent.backlog_sequence, bound_at)
        ids = [d.message_id for d in backlog]
        Delivery.objects.filter(pk__in=[d.pk for d in backlog]).update(
            pushed_generation=generation, pushed_at=now
        )
        shown = presentation.bootstrap_notice(
            agent.agent_id,
            agent.lobby.name,
            nonce=agent.bootstrap_nonce,
            generation=generation,
            backlog_ids=ids,
            as_of=now,
            uncertain_ids=restore.uncertain_message_ids(agent_pk),
            receipt_sequence=agent.receipt_sequence,
        )
        agent.bootstrap_sent_at = now
        agent.bootstrap_attempts += 1
        agent.save(update_fields=["bootstrap_sent_at", "bootstrap_attempts"])
        if ids:
            _schedule_retry(agent, now)
        return _notice(agent, NoticeKind.BOOTSTRAP, ids, shown, now=now)


def _deferred(agent_pk: int, now: datetime) -> Deferred | None:
    """Whether the per-minute notice cap is reached, and when its oldest notice leaves the
    window: the newest `cap` message notices of the last minute (index notice_agent_time)."""
    cap = settings.BOUNDS.notices_per_minute
    recent = queries.newest_message_notices(agent_pk, now - NOTICE_WINDOW, cap)
    if len(recent) < cap:
        return None
    oldest = recent[-1]
    return Deferred(max(0.0, (oldest + NOTICE_WINDOW - now).total_seconds()))


def _waiting(agent_pk: int, generation: int) -> bool:
    return bool(queries.pushable_copies([(agent_pk, generation)], [0], limit=1))


def push_frame(agent_pk: int, generation: int) -> NoticeFrame | Deferred | None:
    """New pending messages with their bodies, important first; None when nothing is due,
    Deferred when the agent's notices of the last minute reached the cap.

    Reads first: the common "nothing more" answer opens no write transaction. Its statements
    are hand-written (lobbies/fastlane/queries.py) because this runs once per message per recipient.
    """
    if not _waiting(agent_pk, generation):
        return None
    answers: list[PushAnswer] = [None]
    with transaction.atomic():
        _record_pushes([(agent_pk, generation)], [0], answers)
    answer = answers[0]
    assert not isinstance(answer, Exception)  # _record_pushes raises; it never answers one
    return answer


def push_frames(asks: list[tuple[int, int]]) -> list[PushAnswer]:
    """`push_frame` for the sockets that ask together (a broadcast wakes them all at once),
    recorded in one write transaction: one commit, one fsync, instead of one per recipient.

    Set-based: the batch's pushable copies, recipients, notice counts and messages are read
    with one statement each, the copies marked and the notices written with a few, and the
    text of a notice composed once for every recipient of the same messages; one socket's
    push after another cost ~10 statements each and held the process's one SQLite thread
    through a broadcast (docs/PERFORMANCE.md, "Broadcast fan-out"). Should the batch fail, it is
    rolled back
    and each push runs again in its own savepoint, so a failure stays that socket's. For the
    embedded store, where every write of the process goes through one thread and one
    connection; on PostgreSQL each socket's push commits on its own pool thread
    (consumers.BridgeConsumer).
    """
    answers: list[PushAnswer] = [None] * len(asks)
    due = sorted(queries.pushable_copies(asks, list(range(len(asks))), limit=1))
    if not due:
        return answers
    with transaction.atomic():
        try:
            with transaction.atomic():
                _record_pushes(asks, due, answers)
            return answers
        except Exception:
            answers = [None] * len(asks)
        for n in due:
            try:
                with transaction.atomic():
                    _record_pushes(asks, [n], answers)
            except Exception as error:
                answers[n] = error
    return answers


def _record_pushes(asks: list[tuple[int, int]], due: list[int], answers: list[PushAnswer]) -> None:
    """The pushes of `push_frames`, set-based, inside its write transaction."""
    now = timezone.now()
    recipients, pushing = _pushable_asks(asks, due, answers, now)
    copies = queries.pushable_copies(asks, pushing, limit=MESSAGES_PER_PUSH)
    if not copies:
        return
    wanted = sorted({message for found in copies.values() for _, message in found})
    messages = {m.pk: m for m in queries.messages_by_id(wanted)}
    attached = descriptors_for(wanted)
    _mark_pushed(asks, copies, now)
    composed: dict[tuple[int, ...], tuple[str, bool]] = {}
    notices: list[dict[str, Any]] = []
    retry: list[int] = []
    for n, found in copies.items():
        recipient = recipients[asks[n][0]]
        shown = sorted(
            (messages[message] for _, message in found),
            key=lambda m: (m.priority != Priority.IMPORTANT, m.sequence),
        )
        ids = tuple(m.pk for m in shown)
        if ids not in composed:
            composed[ids] = presentation.messages_content(
                shown, cap_bytes=settings.BOUNDS.push_bytes, attachments=attached
            )
        content, truncated = composed[ids]
        meta = presentation.messages_meta(recipient.agent_id, recipient.lobby_name, shown)
        row = _notice_row(recipient, NoticeKind.MESSAGES, list(ids), now)
        notices.append(row)
        answers[n] = _notice_frame(row, presentation.Presentation(content, meta, truncated))
        if recipient.notify_next_at is None:
            retry.append(recipient.pk)
    if retry:
        first_retry = now + timedelta(seconds=settings.BOUNDS.notify_retry_seconds[0])
        queries.schedule_first_retry(retry, first_retry)
    store.insert_many(Notice, notices)


def _pushable_asks(
    asks: list[tuple[int, int]],
    due: list[int],
    answers: list[PushAnswer],
    now: datetime,
) -> tuple[dict[int, Recipient], list[int]]:
    """The asks that may be pushed now (each one's agent current, enabled, not resting, its
    lobby delivering, under its notice cap: read for all at once), with their recipients;
    an ask over its notice cap is answered here."""
    agents = sorted({asks[n][0] for n in due})
    recipients = queries.push_recipients(agents)
    counts = queries.message_notices_since(agents, now - NOTICE_WINDOW)
    cap = settings.BOUNDS.notices_per_minute
    pushing: list[int] = []
    asked: set[tuple[int, int]] = set()
    for n in due:
        agent_pk, generation = asks[n]
        recipient = recipients.get(agent_pk)
        if recipient is None or recipient.runtime_generation != generation:
            continue
        if (agent_pk, generation) in asked:
            continue  # a second socket of the same runtime: the first one is pushed
        asked.add((agent_pk, generation))
        if counts.get(agent_pk, 0) >= cap:
            answers[n] = _deferred(agent_pk, now)
            if answers[n] is not None:
                continue
        pushing.append(n)
    return recipients, pushing


def _mark_pushed(
    asks: list[tuple[int, int]], copies: dict[int, list[tuple[int, int]]], now: datetime
) -> None:
    """The copies as pushed to their runtimes: one statement per generation (and chunk)."""
    by_generation: dict[int, list[int]] = {}
    for n, found in copies.items():
        by_generation.setdefault(asks[n][1], []).extend(delivery for delivery, _ in found)
    for generation, deliveries in by_generation.items():
        queries.mark_pushed(generation, deliveries, now)


def hint_frame(agent_pk: int, generation: int, message_ids: list[int]) -> NoticeFrame | None:
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
        shown = presentation.hint_notice(agent.agent_id, agent.lobby.name, still, now)
        return _notice(agent, NoticeKind.HINT, still, shown, now=now)


def receipts_frame(agent_pk: int, receipts: list[dict[str, Any]]) -> NoticeFrame | None:
    with transaction.atomic():
        agent = Agent.objects.select_related("lobby").filter(pk=agent_pk, enabled=True).first()
        if agent is None or agent.runtime_id is None:
            return None
        shown = presentation.receipts_notice(agent.agent_id, agent.lobby.name, receipts)
        ids = [r["message_id"] for r in receipts]
        return _notice(agent, NoticeKind.RECEIPTS, ids, shown, now=timezone.now())


def activity_frame(agent_pk: int, changes: list[dict[str, Any]]) -> NoticeFrame | None:
    """Watched agents' new activity (watch_agents): names and states, never a message."""
    with transaction.atomic():
        agent = Agent.objects.select_related("lobby").filter(pk=agent_pk, enabled=True).first()
        if agent is None or agent.runtime_id is None:
            return None
        shown = presentation.activity_notice(agent.agent_id, agent.lobby.name, changes)
        return _notice(agent, NoticeKind.ACTIVITY, [], shown, now=timezone.now())


def reconnected(agent_pk: int, generation: int) -> None:
    """A reconnect of the same process: what it may not have written to the host goes again."""
    queries.push_unwritten_again(agent_pk, generation)


def reconnected_many(many: list[tuple[int, int]]) -> list[Exception | None]:
    """`reconnected` for the sockets of a reconnect storm, in one transaction (one fsync)."""
    with transaction.atomic():
        for agent_pk, generation in many:
            reconnected(agent_pk, generation)
    return [None] * len(many)


def notice_known(agent_pk: int, generation: int, notice_id: str) -> bool:
    try:
        key = uuid.UUID(notice_id)
    except (ValueError, TypeError, AttributeError):
        return False
    return Notice.objects.filter(id=key, agent_id=agent_pk, generation=generation).exists()


TransportFact = tuple[int, int, str, str]  # agent, generation, notice id, "received"|"host_written"


def record_transport_facts(facts: list[TransportFact]) -> None:
    """What bridges reported about their notices, many at once: one transaction, one fsync.

    Set-based: the batch's notices are read in one query and marked in one statement per
    fact kind; each notice's deliveries take one statement for both its facts. A broadcast
    to 100 brings 200 facts together, which as a lookup and two updates each (the ORM
    compiling every one) held the process's database thread longer than the pushes took.
    """
    now = timezone.now()
    with transaction.atomic():
        # The agents' rows first, in one order (the lock cycle this avoids: the function).
        queries.hold_agents_for_transport_facts({fact[0] for fact in facts})
        stated: dict[uuid.UUID, set[str]] = {}
        for _, _, notice_id, fact in facts:
            stated.setdefault(uuid.UUID(notice_id), set()).add(fact)
        owners = {
            (uuid.UUID(notice_id), agent_pk, generation)
            for agent_pk, generation, notice_id, _ in facts
        }
        notices = [
            notice
            for notice in Notice.objects.filter(id__in=list(stated)).only(
                "id",
                "agent_id",
                "generation",
                "kind",
                "message_ids",
                "received_at",
                "host_written_at",
            )
            if (notice.id, notice.agent_id, notice.generation) in owners
        ]
        first_received = [
            n.id for n in notices if "received" in stated[n.id] and n.received_at is None
        ]
        first_written = [
            n.id for n in notices if "host_written" in stated[n.id] and n.host_written_at is None
        ]
        if first_received:
            Notice.objects.filter(id__in=first_received).update(received_at=now)
        if first_written:
            Notice.objects.filter(id__in=first_written).update(host_written_at=now)
        for notice in notices:
            if not notice.message_ids:
                continue
            told = stated[notice.id]
            written = "host_written" in told and notice.kind != NoticeKind.RECEIPTS
            queries.record_copy_transport(
                notice.agent_id,
                notice.message_ids,
                now,
                received="received" in told,
                written=notice.generation if written else None,
            )

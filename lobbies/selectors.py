"""Reads: inbox and history pages, discovery, the operator's status. No writes here."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Literal, NamedTuple, cast

from django.db import connection
from django.db.models import Count, Exists, Min, OuterRef, Q, QuerySet

from lobbies.api.answers import (
    AttachmentDescriptor,
    BrokerIdentity,
    CheckpointEntry,
    DeliveryFacts,
    InboxSummary,
    MessageEntry,
    MessageHeader,
    MessagesPage,
    RecipientFacts,
    RoomEntry,
    RoomList,
    ScheduledList,
    ScheduleEntry,
    SendAnswer,
    UncertainHeader,
    UncertainMessage,
    UncertainReceipts,
    at,
)
from lobbies.attachment_selectors import descriptors_for
from lobbies.errors import ErrorCode, bad_request
from lobbies.fastlane import queries, store
from lobbies.fastlane.queries import Copy
from lobbies.models import (
    Agent,
    BrokerState,
    Checkpoint,
    Delivery,
    DeliveryState,
    HeldReason,
    Message,
    ReceiptEvent,
    Room,
    RoomMember,
    Schedule,
    Scope,
)
from lobbies.names import OWNER_SENDER
from lobbies.push.presence import PROCESS_ID
from lobbies.wire import cursors
from lobbies.wire.cursors import encode_cursor
from lobbies.wire.facts import addressing_facts, delivery_facts, iso
from lobbies.wire.frames import EVENT_VERSION
from lobbies.wire.jsontext import JSONObject


def decode_cursor(view: str, cursor: str) -> int:
    try:
        return cursors.decode_cursor(view, cursor)
    except cursors.CursorError as error:
        raise bad_request(str(error), code=ErrorCode.INVALID_CURSOR) from None


class Shown(NamedTuple):
    """The columns of a message a page shows, read without a model instance (see `_shown`)."""

    pk: int
    sequence: int
    sender_id: int | None
    sender_name: str
    scope: str
    kind: str | None
    reply_expected: bool
    priority: str
    content: str
    fields: JSONObject
    reply_to: int | None
    correlation_id: str
    client_request_id: str
    room_name: str
    addressed_to: list[str]
    supersedes: int | None
    deliver_at: datetime | None
    late: bool
    schedule_id: int | None
    slot: datetime | None
    created_at: datetime


_SHOWN = ("id", *Shown._fields[1:])


def _shown(messages: QuerySet[Message]) -> list[Shown]:
    """The queryset's rows as `Shown`, its SQL run directly and converted here.

    Building 200 model instances and running the ORM's per-value converters took most of a
    page's time (docs/PERFORMANCE.md, "Reads");
    the filters stay the ORM's, so the rows are the same ones.
    """
    sql, params = messages.values_list(*_SHOWN).query.sql_with_params()
    found = []
    time = store.time_reader()
    for (
        pk,
        sequence,
        sender_id,
        sender_name,
        scope,
        kind,
        reply_expected,
        priority,
        content,
        fields,
        reply_to,
        correlation_id,
        client_request_id,
        room_name,
        addressed_to,
        supersedes,
        deliver_at,
        late,
        schedule_id,
        slot,
        created_at,
    ) in store.rows(sql, list(params)):
        found.append(
            Shown(
                pk=pk,
                sequence=sequence,
                sender_id=sender_id,
                sender_name=sender_name,
                scope=scope,
                kind=kind,
                reply_expected=bool(reply_expected),
                priority=priority,
                content=content,
                fields=store.as_json(fields),
                reply_to=reply_to,
                correlation_id=correlation_id,
                client_request_id=client_request_id,
                room_name=room_name,
                addressed_to=store.as_json(addressed_to),
                supersedes=supersedes,
                deliver_at=time(deliver_at),
                late=bool(late),
                schedule_id=schedule_id,
                slot=time(slot),
                created_at=cast(datetime, time(created_at)),  # NOT NULL
            )
        )
    return found


def message_for(
    viewer: Agent,
    message: Message | Shown,
    deliveries: list[Copy],
    attachments: list[AttachmentDescriptor] | None = None,
) -> MessageEntry:
    """A message as `viewer` may see it: recipient facts only on the viewer's own sends."""
    body: MessageEntry = {
        "message_id": message.pk,
        "sequence": message.sequence,
        "from": message.sender_name,
        "scope": message.scope,
        "kind": message.kind,
        "reply_expected": message.reply_expected,
        "priority": message.priority,
        "content": message.content,
        "fields": message.fields,
        "reply_to": message.reply_to,
        "correlation_id": message.correlation_id or None,
        "created_at": at(message.created_at),
    }
    if message.sender_name == OWNER_SENDER:
        body["from_owner"] = True
    if attachments:
        body["attachments"] = attachments
    # wire.py builds the frames' facts untyped; they are exactly these keys of the answers'.
    body.update(cast(MessageEntry, addressing_facts(message)))
    if message.scope == Scope.DIRECT and deliveries:
        body["to"] = deliveries[0].agent_id
    elif message.scope != Scope.DIRECT:
        body["to"] = "*"
    me = viewer.pk
    if message.sender_id == me:
        body["client_request_id"] = message.client_request_id
        body["recipients"] = cast(
            "list[RecipientFacts]",
            [{"agent_id": d.agent_id, **delivery_facts(d)} for d in deliveries],
        )
    mine = next((d for d in deliveries if d.recipient_id == me), None)
    if mine is not None:
        body["delivery"] = cast(DeliveryFacts, delivery_facts(mine))
        if mine.redacted and message.sender_id != me:
            body["content"], body["fields"], body["redacted"] = None, {}, True
            body.pop("attachments", None)
    return body


def _attached(message_ids: Iterable[int]) -> dict[int, list[AttachmentDescriptor]]:
    return descriptors_for(message_ids)


def send_result(
    message: Message, deliveries: list[Delivery], *, duplicate: bool, with_attachments: bool
) -> SendAnswer:
    result: SendAnswer = {
        "status": "stored",
        "message_id": message.pk,
        "sequence": message.sequence,
        "created_at": at(message.created_at),
        "duplicate": duplicate,
        "recipients": cast(
            "list[RecipientFacts]",
            [{"agent_id": d.recipient.agent_id, **delivery_facts(d)} for d in deliveries],
        ),
    }
    attached = _attached([message.pk]).get(message.pk) if with_attachments else None
    if attached:
        result["attachments"] = attached
    return result


def room_entry(room: Room) -> RoomEntry:
    members = sorted(RoomMember.objects.filter(room=room).values_list("agent__agent_id", flat=True))
    return {"room_id": room.room_id, "members": members, "created_at": at(room.created_at)}


def list_rooms(viewer: Agent) -> RoomList:
    """Every room of the lobby with its members: membership is no secret inside a lobby."""
    rooms = Room.objects.filter(lobby_id=viewer.lobby_id).order_by("room_id")
    members: dict[int, list[str]] = {}
    for room_pk, name in (
        RoomMember.objects.filter(room__lobby_id=viewer.lobby_id)
        .order_by("agent__agent_id")
        .values_list("room_id", "agent__agent_id")
    ):
        members.setdefault(room_pk, []).append(name)
    return {
        "rooms": [
            {
                "room_id": r.room_id,
                "members": members.get(r.pk, []),
                "created_at": at(r.created_at),
                "member": viewer.agent_id in members.get(r.pk, []),
            }
            for r in rooms
        ]
    }


def schedule_entry(schedule: Schedule) -> ScheduleEntry:
    return {
        "schedule_id": schedule.pk,
        "scope": schedule.scope,
        "target": schedule.target or None,
        "time_zone": schedule.time_zone,
        "times": schedule.times,
        "weekdays": schedule.weekdays,
        "status": schedule.status,
        "next_slot": iso(schedule.next_slot),
        "last_slot": iso(schedule.last_slot),
        "content_preview": schedule.template.get("content", "")[:80],
    }


def list_scheduled(sender: Agent) -> ScheduledList:
    """Compact: what will fire and when, not whole bodies."""
    schedules = Schedule.objects.filter(sender=sender, status="active").order_by("next_slot")
    waiting = Message.objects.filter(sender=sender, scheduled_pending=True).order_by("deliver_at")
    return {
        "schedules": [schedule_entry(s) for s in schedules],
        "messages": [
            {
                "message_id": m.pk,
                "deliver_at": iso(m.deliver_at),
                "scope": m.scope,
                "room_id": m.room_name or None,
                "content_preview": m.content[:80],
            }
            for m in waiting
        ],
    }


# A recipient never sees a copy still waiting for its time, or cancelled before it.
NEVER_ARRIVED = (HeldReason.SCHEDULED, HeldReason.CANCELLED)


def inbox_page(agent: Agent, limit: int, cursor: str | None) -> MessagesPage:
    """Pending deliveries, oldest first. Held ones (scheduled, disabled) are never listed."""
    after = decode_cursor("inbox", cursor) if cursor else 0
    messages = Message.objects.filter(
        deliveries__recipient=agent,
        deliveries__state=DeliveryState.PENDING,
        sequence__gt=after,
    ).order_by("sequence")[: limit + 1]
    return _page(agent, _shown(messages), limit, "inbox")


def history_page(agent: Agent, query: str | None, limit: int, cursor: str | None) -> MessagesPage:
    """Messages the agent sent or received, newest first, optionally searched."""
    received = Delivery.objects.filter(message=OuterRef("pk"), recipient=agent).exclude(
        held_reason__in=NEVER_ARRIVED
    )
    mine = Q(sender=agent) | Exists(received)
    messages = Message.objects.filter(mine, lobby_id=agent.lobby_id)
    if cursor:
        messages = messages.filter(sequence__lt=decode_cursor("history", cursor))
    if query and connection.vendor == "sqlite" and len(query) >= TRIGRAM:
        return _page(agent, _searched(messages, query, limit), limit, "history")
    if query:
        messages = messages.filter(content__icontains=query)
    page = messages.order_by("-sequence")[: limit + 1]
    return _page(agent, _shown(page), limit, "history")


# Shorter queries cannot use a trigram index; they are matched row by row.
TRIGRAM = 3
# The first window of index matches a search reads; the next ones are sized from its hits.
SEARCH_WINDOW = 1000


def _searched(messages: QuerySet[Message], query: str, limit: int) -> list[Shown]:
    """A page of `messages` whose content contains `query`, ignoring case, newest first.

    SQLite: the FTS5 trigram table (migration 0013), queried as a phrase (quotes doubled),
    folds case for all of Unicode. Its matches are read newest first (rowid descending) in
    windows, and each window's messages filtered and cut at the page: a query most
    of the day's messages match stops after a page's worth instead of collecting every
    match first (benchmarks/search.py, docs/PERFORMANCE.md, "Reads"). Exact
    because a lobby's message ids and sequences grow together (both are taken in the send's
    transaction, under the lobby's sequence bump).
    PostgreSQL (and queries under 3 characters): `icontains`, which on PostgreSQL compares
    UPPER(content) and is served by the migration's GIN trigram index; on SQLite, `LIKE`
    folds ASCII only.
    """
    phrase = '"' + query.replace('"', '""') + '"'
    rows: list[Shown] = []
    below: int | None = None
    window = SEARCH_WINDOW
    while len(rows) <= limit:
        ids = queries.search_matches(phrase, below, window)
        wanted = limit + 1 - len(rows)
        found: list[Shown] = []
        if ids:
            among = queries.json_ids(ids)
            found = _shown(messages.filter(pk__in=among).order_by("-sequence")[:wanted])
            rows += found
        if len(ids) < window:
            break
        # Next window: what the hit rate so far says the rest of the page needs, with room.
        wanted -= len(found)
        grow = window * 4
        if found:
            grow = min(grow, max(SEARCH_WINDOW // 10, 2 * wanted * len(ids) // len(found)))
        below, window = ids[-1], grow
    return rows


def _page(
    agent: Agent, rows: list[Shown], limit: int, view: Literal["inbox", "history"]
) -> MessagesPage:
    more = len(rows) > limit
    rows = rows[:limit]
    copies = _copies(agent, rows)
    attached = _attached(m.pk for m in rows)
    return {
        "view": view,
        "messages": [message_for(agent, m, copies.get(m.pk, []), attached.get(m.pk)) for m in rows],
        "next_cursor": encode_cursor(view, rows[-1].sequence) if more else None,
    }


def _copies(viewer: Agent, messages: list[Shown]) -> dict[int, list[Copy]]:
    """The copies a page shows, in one statement, by message, ordered by recipient.

    A page shows every copy of the viewer's own sends, the one copy of a direct message (its
    `to`), and otherwise only the viewer's own: a broadcast's copies to everyone else are
    never read.
    """
    me = viewer.pk
    every = [m.pk for m in messages if m.sender_id == me or m.scope == Scope.DIRECT]
    own = [m.pk for m in messages if not (m.sender_id == me or m.scope == Scope.DIRECT)]
    found: dict[int, list[Copy]] = {}
    for copy in queries.copies_of(every, me, own):
        found.setdefault(copy.message_id, []).append(copy)
    return found


# ---------------------------------------------------------------- continuity


def checkpoint_entry(checkpoint: Checkpoint | None, now: datetime) -> CheckpointEntry | None:
    if checkpoint is None:
        return None
    return {
        "revision": checkpoint.revision,
        "checkpoint": checkpoint.body,
        "covers_receipts_through": checkpoint.covers_receipts_through,
        "saved_at": at(checkpoint.saved_at),
        "age_seconds": int((now - checkpoint.saved_at).total_seconds()),
        "saved_by_generation": checkpoint.saved_by_generation,
    }


def _header(message: Message) -> MessageHeader:
    return {
        "message_id": message.pk,
        "from": message.sender_name,
        "kind": message.kind,
        "priority": message.priority,
        "created_at": at(message.created_at),
        "content_bytes": message.content_bytes,
    }


UNCERTAIN_WITH_BODIES = 5
UNCERTAIN_HEADERS = 20


def uncertain_receipts(agent: Agent, covered: int, cursor: str | None) -> UncertainReceipts:
    """Acknowledged messages the checkpoint does not cover: work that may be half done."""
    after = max(covered, decode_cursor("uncertain", cursor) if cursor else 0)
    events = ReceiptEvent.objects.filter(agent=agent, sequence__gt=after).order_by("sequence")
    total = ReceiptEvent.objects.filter(agent=agent, sequence__gt=covered).count()
    page = list(events.select_related("message")[: UNCERTAIN_WITH_BODIES + UNCERTAIN_HEADERS + 1])
    more = len(page) > UNCERTAIN_WITH_BODIES + UNCERTAIN_HEADERS
    page = page[: UNCERTAIN_WITH_BODIES + UNCERTAIN_HEADERS]
    with_bodies: list[UncertainMessage] = [
        {
            **message_for(agent, e.message, []),
            "receipt_sequence": e.sequence,
            "seen_at": at(e.created_at),
        }
        for e in page[:UNCERTAIN_WITH_BODIES]
    ]
    headers: list[UncertainHeader] = [
        {**_header(e.message), "receipt_sequence": e.sequence, "seen_at": at(e.created_at)}
        for e in page[UNCERTAIN_WITH_BODIES:]
    ]
    return {
        "total": total,
        "covered_through": covered,
        "messages": with_bodies,
        "headers": headers,
        "next_cursor": encode_cursor("uncertain", page[-1].sequence) if more else None,
    }


def inbox_summary(agent: Agent) -> InboxSummary:
    pending = Delivery.objects.filter(recipient=agent, state=DeliveryState.PENDING)
    counts = pending.aggregate(
        n=Count("id"),
        important=Count("id", filter=Q(message__priority="important")),
        oldest=Min("delivered_at"),
    )
    first = list(pending.select_related("message").order_by("message__sequence")[:20])
    return {
        "pending": counts["n"],
        "important": counts["important"],
        "oldest_pending_at": iso(counts["oldest"]),
        "first": [_header(d.message) for d in first],
    }


def broker_identity() -> BrokerIdentity:
    """Which broker answered: useful when several processes serve one lobby."""
    try:
        release = version("pocolobby")
    except PackageNotFoundError:
        release = "unknown"
    return {
        "host": socket.gethostname(),
        "process_id": str(PROCESS_ID),
        "version": release,
        "event_version": EVENT_VERSION,
        # A restore issues a new one: a different history than the bridge may remember.
        "incarnation": str(
            BrokerState.objects.filter(pk=1).values_list("incarnation", flat=True).first() or ""
        ),
    }

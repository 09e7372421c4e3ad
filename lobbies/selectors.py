"""Reads: inbox and history pages, discovery, the operator's status. No writes here."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from django.db import connection
from django.db.models import Count, Exists, F, Max, Min, OuterRef, Q, QuerySet, Subquery

from lobbies import queries, store, wire
from lobbies.attachment_selectors import descriptors_for
from lobbies.errors import bad_request
from lobbies.models import (
    Agent,
    BrokerState,
    Checkpoint,
    Delivery,
    DeliveryState,
    HeldReason,
    Lobby,
    Message,
    Priority,
    ReceiptEvent,
    Room,
    RoomMember,
    Schedule,
    Scope,
    Transport,
)
from lobbies.names import OWNER_SENDER
from lobbies.presence import PROCESS_ID, live_connections, waiting_runtime
from lobbies.queries import Copy
from lobbies.usage import readings_for, usage_entry
from lobbies.wire import EVENT_VERSION, addressing_facts, delivery_facts, encode_cursor, iso

if TYPE_CHECKING:

    class AnnotatedAgent(Agent):
        """An agent row with the live facts and counts the reads below annotate."""

        connected: bool
        heartbeat_at: datetime | None
        last_receipt_at: datetime | None
        unseen_notified: int | None
        oldest_unseen_notified: datetime | None
        transport: str | None
        held_since: datetime | None
        held_reason: str | None
        last_sent_at: datetime | None
        last_received_at: datetime | None
        online: bool  # board.selectors.shown_agents
        pending: int
        important: int  # pending and important (operator_agents)
        held: int

else:
    AnnotatedAgent = Agent


def decode_cursor(view: str, cursor: str) -> int:
    try:
        return wire.decode_cursor(view, cursor)
    except wire.CursorError as error:
        raise bad_request(str(error), code="invalid_cursor") from None


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
    fields: Any
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
    page's time (docs/PERFORMANCE.md, "Inbox and history pages (`benchmarks/read_page.py`)");
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
    attachments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A message as `viewer` may see it: recipient facts only on the viewer's own sends."""
    body: dict[str, Any] = {
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
        "created_at": iso(message.created_at),
    }
    if message.sender_name == OWNER_SENDER:
        body["from_owner"] = True
    if attachments:
        body["attachments"] = attachments
    body.update(addressing_facts(message))
    if message.scope == Scope.DIRECT and deliveries:
        body["to"] = deliveries[0].agent_id
    elif message.scope != Scope.DIRECT:
        body["to"] = "*"
    me = viewer.pk
    if message.sender_id == me:
        body["client_request_id"] = message.client_request_id
        body["recipients"] = [{"agent_id": d.agent_id, **delivery_facts(d)} for d in deliveries]
    mine = next((d for d in deliveries if d.recipient_id == me), None)
    if mine is not None:
        body["delivery"] = delivery_facts(mine)
        if mine.redacted and message.sender_id != me:
            body["content"], body["fields"], body["redacted"] = None, {}, True
            body.pop("attachments", None)
    return body


def send_result(
    message: Message, deliveries: list[Delivery], *, duplicate: bool, with_attachments: bool
) -> dict[str, Any]:
    result = {
        "status": "stored",
        "message_id": message.pk,
        "sequence": message.sequence,
        "created_at": iso(message.created_at),
        "duplicate": duplicate,
        "recipients": [{"agent_id": d.recipient.agent_id, **delivery_facts(d)} for d in deliveries],
    }
    attached = descriptors_for([message.pk]).get(message.pk) if with_attachments else None
    if attached:
        result["attachments"] = attached
    return result


def room_entry(room: Room) -> dict[str, Any]:
    members = sorted(RoomMember.objects.filter(room=room).values_list("agent__agent_id", flat=True))
    return {"room_id": room.room_id, "members": members, "created_at": iso(room.created_at)}


def list_rooms(viewer: Agent) -> dict[str, Any]:
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
                "created_at": iso(r.created_at),
                "member": viewer.agent_id in members.get(r.pk, []),
            }
            for r in rooms
        ]
    }


def schedule_entry(schedule: Schedule) -> dict[str, Any]:
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


def list_scheduled(sender: Agent) -> dict[str, Any]:
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


def inbox_page(agent: Agent, limit: int, cursor: str | None) -> dict[str, Any]:
    """Pending deliveries, oldest first. Held ones (scheduled, disabled) are never listed."""
    after = decode_cursor("inbox", cursor) if cursor else 0
    messages = Message.objects.filter(
        deliveries__recipient=agent,
        deliveries__state=DeliveryState.PENDING,
        sequence__gt=after,
    ).order_by("sequence")[: limit + 1]
    return _page(agent, _shown(messages), limit, "inbox")


def history_page(agent: Agent, query: str | None, limit: int, cursor: str | None) -> dict[str, Any]:
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
    match first (benchmarks/search.py, docs/PERFORMANCE.md). Exact
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


def _page(agent: Agent, rows: list[Shown], limit: int, view: str) -> dict[str, Any]:
    more = len(rows) > limit
    rows = rows[:limit]
    copies = _copies(agent, rows)
    attached = descriptors_for(m.pk for m in rows)
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


def _with_presence(agents: QuerySet[Agent]) -> QuerySet[AnnotatedAgent]:
    """Live facts per agent: connection, heartbeat, last receipt, unseen notified messages."""
    live = live_connections().filter(agent=OuterRef("pk")).order_by()
    newest = live.order_by("-generation", "-connected_at")
    unseen = (
        Delivery.objects.filter(
            recipient=OuterRef("pk"),
            state=DeliveryState.PENDING,
            notification_attempted_at__isnull=False,
        )
        .filter(
            Q(recipient__last_progress_at__isnull=True)
            | Q(notification_attempted_at__gt=F("recipient__last_progress_at"))
        )
        .order_by()
        .values("recipient")
    )
    receipts = ReceiptEvent.objects.filter(agent=OuterRef("pk")).order_by().values("agent")
    # The annotations below are the attributes AnnotatedAgent declares.
    annotated = agents.annotate(
        connected=Exists(live),
        heartbeat_at=Subquery(
            live.values("agent").annotate(t=Max("last_heartbeat_at")).values("t")
        ),
        last_receipt_at=Subquery(receipts.annotate(t=Max("created_at")).values("t")),
        unseen_notified=Subquery(unseen.annotate(n=Count("id")).values("n")),
        oldest_unseen_notified=Subquery(
            unseen.annotate(t=Min("notification_attempted_at")).values("t")
        ),
        # The newest live connection's delivery facts (a newer process fences older ones).
        transport=Subquery(newest.values("transport")[:1]),
        held_since=Subquery(newest.values("held_since")[:1]),
        held_reason=Subquery(newest.values("held_reason")[:1]),
    )
    return cast("QuerySet[AnnotatedAgent]", annotated)


def with_last_message_at(agents: QuerySet[Agent]) -> QuerySet[AnnotatedAgent]:
    """When each agent last sent a message or received a direct one: derived, never stored."""
    # Newest first through (sender, created_at) and (recipient, delivered_at): each a few
    # index steps per agent, where an aggregate read every delivery the agent ever had.
    # Its own daily schedules' occurrences aside: a reminder does not make an idle agent active.
    last_sent = (
        Message.objects.filter(sender=OuterRef("pk"), schedule__isnull=True)
        .order_by("-created_at")
        .values("created_at")
    )
    last_received = (
        Delivery.objects.filter(
            recipient=OuterRef("pk"), message__scope=Scope.DIRECT, delivered_at__isnull=False
        )
        .order_by("-delivered_at")
        .values("delivered_at")
    )
    return _with_presence(
        agents.annotate(
            last_sent_at=Subquery(last_sent[:1]),
            last_received_at=Subquery(last_received[:1]),
        )
    )


def last_message_at(agent: AnnotatedAgent) -> datetime | None:
    times = [t for t in (agent.last_sent_at, agent.last_received_at) if t is not None]
    return max(times) if times else None


def last_activity_at(agent: AnnotatedAgent) -> datetime | None:
    """The latest of sent, received and acknowledged (seed 000's activity); None if none."""
    times = [t for t in (last_message_at(agent), agent.last_receipt_at) if t is not None]
    return max(times) if times else None


def idle_seconds(activity: datetime | None, now: datetime) -> int | None:
    return None if activity is None else max(0, int((now - activity).total_seconds()))


def agent_entry(agent: AnnotatedAgent, now: datetime | None = None) -> dict[str, Any]:
    activity = last_activity_at(agent)
    return {
        "agent_id": agent.agent_id,
        "description": agent.description,
        "permissions": {"manage_rooms": agent.manage_rooms, "broadcast": agent.broadcast},
        "status": {"line": agent.status_line, "updated_at": iso(agent.status_updated_at)}
        if agent.status_line
        else None,
        "owner_requests": {
            "count": agent.owner_request_count,
            "line": agent.owner_request_line,
            "updated_at": iso(agent.owner_requests_updated_at),
        }
        if agent.owner_request_count
        else None,
        "last_message_at": iso(last_message_at(agent)),
        "last_activity_at": iso(activity),
        "idle_seconds": idle_seconds(activity, now or datetime.now(UTC)),
        "connected": agent.connected,
        "last_heartbeat_at": iso(agent.heartbeat_at),
        "last_receipt_at": iso(agent.last_receipt_at),
        "unseen_notified_count": agent.unseen_notified or 0,
        "oldest_unseen_notified_at": iso(agent.oldest_unseen_notified),
        "notification_attention_required": agent.notification_attention_required,
        **delivery_entry(agent),
    }


def delivery_entry(agent: AnnotatedAgent) -> dict[str, Any]:
    """How pushes reach the agent: its bridge's transport (channel, tmux) or none when no
    bridge is connected; for tmux, since when and why notices are held (None: not held)."""
    transport = (agent.transport or Transport.CHANNEL) if agent.connected else "none"
    held = None
    if transport != "none" and agent.held_since is not None:
        held = {"since": iso(agent.held_since), "reason": agent.held_reason or ""}
    return {"transport": transport, "notices_held": held}


def list_agents(viewer: Agent) -> dict[str, Any]:
    agents = list(
        with_last_message_at(
            Agent.objects.filter(lobby_id=viewer.lobby_id, enabled=True).order_by("agent_id")
        )
    )
    readings, now = readings_for({a.pk for a in agents}), datetime.now(UTC)
    return {
        "lobby": viewer.lobby.name,
        "agents": [
            {**agent_entry(a, now), "usage": usage_entry(readings.get(a.pk), now)} for a in agents
        ],
    }


def operator_agents(lobby: Lobby) -> list[dict[str, Any]]:
    """The owner's listing: disabled agents too, with inbox counts and the runtime binding."""
    agents = with_last_message_at(
        Agent.objects.filter(lobby=lobby)
        .exclude(agent_id=OWNER_SENDER)
        .annotate(
            pending=Count("deliveries", filter=Q(deliveries__state=DeliveryState.PENDING)),
            important=Count(
                "deliveries",
                filter=Q(
                    deliveries__state=DeliveryState.PENDING,
                    deliveries__message__priority=Priority.IMPORTANT,
                ),
            ),
            held=Count("deliveries", filter=Q(deliveries__state=DeliveryState.HELD)),
        )
        .order_by("agent_id")
    )
    now = datetime.now(UTC)
    return [
        {
            **agent_entry(a, now),
            "enabled": a.enabled,
            "pending": a.pending,
            "important": a.important,
            "held": a.held,
            "runtime_id": a.runtime_id,
            "runtime_generation": a.runtime_generation,
            "runtime_bound_at": iso(a.runtime_bound_at),
            "runtime_released_at": iso(a.runtime_released_at),
            "waiting": waiting_entry(a, now),
            "loaded_checkpoint_revision": a.loaded_checkpoint_revision,
            "active_credentials": a.credentials.filter(revoked_at__isnull=True).count(),
        }
        for a in agents
    ]


def waiting_entry(agent: Agent, now: datetime) -> dict[str, Any] | None:
    """The new conversation waiting to take over the agent, while it still asks."""
    runtime_id = waiting_runtime(agent, now)
    if runtime_id is None:
        return None
    return {
        "runtime_id": runtime_id,
        "since": iso(agent.waiting_since),
        "last_asked_at": iso(agent.waiting_seen_at),
    }


def lobby_entry(lobby: Lobby) -> dict[str, Any]:
    return {"name": lobby.name, "created_at": iso(lobby.created_at)}


def all_lobbies() -> QuerySet[Lobby]:
    return Lobby.objects.order_by("name")


def status(lobby_name: str | None = None) -> dict[str, Any]:
    lobbies = all_lobbies()
    if lobby_name:
        lobbies = lobbies.filter(name=lobby_name)
    return {
        "lobbies": [{**lobby_entry(lobby), "agents": operator_agents(lobby)} for lobby in lobbies]
    }


# ---------------------------------------------------------------- continuity


def checkpoint_entry(checkpoint: Checkpoint | None, now: datetime) -> dict[str, Any] | None:
    if checkpoint is None:
        return None
    return {
        "revision": checkpoint.revision,
        "checkpoint": checkpoint.body,
        "covers_receipts_through": checkpoint.covers_receipts_through,
        "saved_at": iso(checkpoint.saved_at),
        "age_seconds": int((now - checkpoint.saved_at).total_seconds()),
        "saved_by_generation": checkpoint.saved_by_generation,
    }


def _header(message: Message) -> dict[str, Any]:
    return {
        "message_id": message.pk,
        "from": message.sender_name,
        "kind": message.kind,
        "priority": message.priority,
        "created_at": iso(message.created_at),
        "content_bytes": message.content_bytes,
    }


UNCERTAIN_WITH_BODIES = 5
UNCERTAIN_HEADERS = 20


def uncertain_receipts(agent: Agent, covered: int, cursor: str | None) -> dict[str, Any]:
    """Acknowledged messages the checkpoint does not cover: work that may be half done."""
    after = max(covered, decode_cursor("uncertain", cursor) if cursor else 0)
    events = ReceiptEvent.objects.filter(agent=agent, sequence__gt=after).order_by("sequence")
    total = ReceiptEvent.objects.filter(agent=agent, sequence__gt=covered).count()
    page = list(events.select_related("message")[: UNCERTAIN_WITH_BODIES + UNCERTAIN_HEADERS + 1])
    more = len(page) > UNCERTAIN_WITH_BODIES + UNCERTAIN_HEADERS
    page = page[: UNCERTAIN_WITH_BODIES + UNCERTAIN_HEADERS]
    with_bodies = [
        {
            **message_for(agent, e.message, []),
            "receipt_sequence": e.sequence,
            "seen_at": iso(e.created_at),
        }
        for e in page[:UNCERTAIN_WITH_BODIES]
    ]
    headers = [
        {**_header(e.message), "receipt_sequence": e.sequence, "seen_at": iso(e.created_at)}
        for e in page[UNCERTAIN_WITH_BODIES:]
    ]
    return {
        "total": total,
        "covered_through": covered,
        "messages": with_bodies,
        "headers": headers,
        "next_cursor": encode_cursor("uncertain", page[-1].sequence) if more else None,
    }


def inbox_summary(agent: Agent) -> dict[str, Any]:
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


def broker_identity() -> dict[str, Any]:
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

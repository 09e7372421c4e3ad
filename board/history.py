"""The messages page's reads: the last day's traffic of a lobby, newest first, filtered, paged.

Every query is bounded by the day's first sequence, found through the (lobby, created_at)
index, so a narrow filter scans the day, never the lobby's whole retained history; a page
is the next 50 by sequence below a cursor, and its deliveries come in one query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.db.models import Q
from django.http import QueryDict

from board.models import BoardConfig
from lobbies import question_selectors
from lobbies.errors import ErrorCode, bad_request
from lobbies.models import (
    Agent,
    Connection,
    Delivery,
    DeliveryState,
    Kind,
    Lobby,
    Message,
    Priority,
    Room,
    Scope,
    Transport,
)
from lobbies.names import OWNER_SENDER, is_name

PAGE_SIZE = 25  # a phone's few screens; rendering, not the query, is a page's cost
WINDOW = timedelta(days=1)
MAX_SEARCH = 200
SEARCH_SPAN = 20_000
# Longer contents are folded: the first part shows, the rest opens on demand.
FOLD_CHARS = 280


@dataclass(frozen=True)
class Filters:
    agent: str = ""
    room: str = ""
    kind: str = ""
    priority: str = ""
    text: str = ""
    before: int | None = None

    def query(self, **changes: object) -> str:
        """This filter set as a query string, with `changes` applied; empty values left out."""
        values = {
            "agent": self.agent,
            "room": self.room,
            "kind": self.kind,
            "priority": self.priority,
            "q": self.text,
            "before": self.before,
            **changes,
        }
        return urlencode({k: v for k, v in values.items() if v not in ("", None)})

    @property
    def active(self) -> bool:
        return bool(self.agent or self.room or self.kind or self.priority or self.text)


def parse_filters(query: QueryDict) -> Filters:
    """The page's GET filters; a value that cannot be one is refused by name."""
    agent, room = query.get("agent", "").strip(), query.get("room", "").strip()
    kind, priority = query.get("kind", "").strip(), query.get("priority", "").strip()
    text, before = query.get("q", "").strip(), query.get("before", "").strip()
    for what, value in (("agent", agent), ("room", room)):
        if value and not is_name(value):
            raise bad_request(f"{what} {value[:40]!r} is not a name", code=ErrorCode.INVALID_FIELD)
    if kind and kind not in Kind.values:
        raise bad_request(f"kind is one of {', '.join(Kind.values)}", code=ErrorCode.INVALID_FIELD)
    if priority and priority not in Priority.values:
        raise bad_request("priority is info or important", code=ErrorCode.INVALID_FIELD)
    if len(text) > MAX_SEARCH:
        raise bad_request(
            f"search is at most {MAX_SEARCH} characters", code=ErrorCode.INVALID_FIELD
        )
    if before and not (before.isdigit() and len(before) < 19):
        raise bad_request("before is a message sequence number", code=ErrorCode.INVALID_FIELD)
    return Filters(agent, room, kind, priority, text, int(before) if before else None)


def _iso(moment: datetime | None) -> str:
    return moment.isoformat() if moment else ""


def _clock(moment: datetime | None) -> str:
    """What shows before the page's script puts it in the reader's zone."""
    return moment.strftime("%H:%M UTC") if moment else ""


@dataclass(frozen=True)
class RecipientLine:
    agent_id: str
    state: str
    held_reason: str | None
    seen_at: datetime | None
    # How far a pending copy got: "stored", "sent to the bridge", "at the bridge",
    # "pushed into the session" or "typed into the pane"; "acknowledged" once seen.
    label: str = ""

    @property
    def seen_iso(self) -> str:
        return _iso(self.seen_at)

    @property
    def seen_clock(self) -> str:
        return _clock(self.seen_at)


def _transports(agent_pks: set[int]) -> dict[int, str]:
    """Each recipient's latest bridge transport (channel or tmux), for how a notice lands."""
    found: dict[int, str] = {}
    for agent_pk, transport in (
        Connection.objects.filter(agent_id__in=agent_pks)
        .order_by("agent_id", "-connected_at")
        .values_list("agent_id", "transport")
    ):
        found.setdefault(agent_pk, transport)
    return found


def _delivery_label(
    state: str,
    pushed_at: datetime | None,
    received_at: datetime | None,
    written_generation: int | None,
    transport: str | None,
) -> str:
    """What happened to one copy, in the owner's words, from the delivery's own facts."""
    if state == DeliveryState.SEEN:
        return "acknowledged"
    if state == DeliveryState.HELD:
        return "held"
    if written_generation is not None:
        return "typed into the pane" if transport == Transport.TMUX else "pushed into the session"
    if received_at is not None:
        return "at the bridge"
    if pushed_at is not None:
        return "sent to the bridge"
    return "stored"


@dataclass(frozen=True)
class MessageLine:
    message_id: int
    sequence: int
    sender: str
    from_owner: bool
    scope: str
    room: str
    addressed_to: list[str]
    kind: str | None
    priority: str
    content: str | None  # None: not shown to this visitor
    content_bytes: int
    created_at: datetime
    recipients: list[RecipientLine] = field(default_factory=list)
    # A question to the owner (lobbies/question_selectors.py), and the owner's answer's id.
    to_owner_question: bool = False
    answered_by: int | None = None

    @property
    def iso(self) -> str:
        return _iso(self.created_at)

    @property
    def clock(self) -> str:
        return _clock(self.created_at)

    @property
    def folded(self) -> bool:
        return self.content is not None and len(self.content) > FOLD_CHARS

    @property
    def opening(self) -> str:
        return (self.content or "")[:FOLD_CHARS]


@dataclass(frozen=True)
class MessagePage:
    lines: list[MessageLine]
    filters: Filters
    older: int | None  # the cursor of the next page, if there is one
    agents: list[str]
    rooms: list[str]
    contents_shown: bool
    since: datetime
    searched_from: int | None = None  # a text search stopped here; Older searches on

    @property
    def newest_query(self) -> str:
        return self.filters.query(before=None)

    @property
    def older_query(self) -> str:
        return self.filters.query(before=self.older)


def _day_start_sequence(lobby: Lobby, since: datetime) -> int | None:
    """The first sequence of the window, through the (lobby, created_at) index."""
    return (
        Message.objects.filter(lobby=lobby, created_at__gte=since)
        .order_by("created_at")
        .values_list("sequence", flat=True)
        .first()
    )


def _condition(lobby: Lobby, filters: Filters, first: int, since: datetime, via: str = "") -> Q:
    """Every filter but the agent's, as one condition over the day's messages; `via` reads
    them from another model (`message__` from the copies)."""

    def on(**terms: object) -> Q:
        return Q(**{f"{via}{field}": value for field, value in terms.items()})

    condition = on(lobby=lobby, sequence__gte=first, created_at__gte=since)
    if filters.before is not None:
        condition &= on(sequence__lt=filters.before)
    if filters.room:
        condition &= on(scope=Scope.ROOM, room_name=filters.room)
    if filters.kind:
        condition &= on(kind=filters.kind)
    if filters.priority:
        condition &= on(priority=filters.priority)
    if filters.text:
        condition &= on(content__icontains=filters.text)
    return condition


_FIELDS = (
    "pk",
    "sequence",
    "sender_name",
    "scope",
    "room_name",
    "addressed_to",
    "kind",
    "priority",
    "content",
    "content_bytes",
    "created_at",
)


def _newest(lobby: Lobby, filters: Filters, first: int, since: datetime) -> list[Message]:
    """The page's messages and one more (to know there is a next page), newest first.

    An agent's traffic is what it sent or received: the newest of each, read through the
    (sender, sequence) and (recipient, message) indexes separately and merged, which is the
    newest of both. Its copies are read newest message first by message id: a lobby's ids
    and sequences rise together (both are taken while the send holds the lobby's row).
    """
    messages = Message.objects.filter(_condition(lobby, filters, first, since)).only(*_FIELDS)
    if not filters.agent:
        return list(messages.order_by("-sequence")[: PAGE_SIZE + 1])
    agent = Agent.objects.filter(lobby=lobby, agent_id=filters.agent).values("pk").first()
    if agent is None:
        return []
    sent = messages.filter(sender_id=agent["pk"]).order_by("-sequence")[: PAGE_SIZE + 1]
    received_ids = list(
        Delivery.objects.filter(recipient_id=agent["pk"], message_id__gte=_first_id(lobby, first))
        .filter(_condition(lobby, filters, first, since, via="message__"))
        .order_by("-message_id")
        .values_list("message_id", flat=True)[: PAGE_SIZE + 1]
    )
    received = Message.objects.filter(pk__in=received_ids).only(*_FIELDS)
    merged = {m.pk: m for m in [*sent, *received]}
    return sorted(merged.values(), key=lambda m: -m.sequence)[: PAGE_SIZE + 1]


def _first_id(lobby: Lobby, first: int) -> int:
    """The id of the window's first message: the copies' scan stops there."""
    found = Message.objects.filter(lobby=lobby, sequence=first).values_list("pk", flat=True).first()
    return found or 0


def _agent_names(lobby: Lobby) -> list[str]:
    agents = Agent.objects.filter(lobby=lobby).exclude(agent_id=OWNER_SENDER)
    return list(agents.order_by("agent_id").values_list("agent_id", flat=True))


def message_page(
    lobby: Lobby, filters: Filters, now: datetime, *, show_contents: bool
) -> MessagePage:
    since = now - WINDOW
    first = _day_start_sequence(lobby, since)
    searched_from = None
    if first is not None and filters.text:
        # Words are matched row by row: one request reads at most SEARCH_SPAN messages, and
        # "Older" carries the search on from where it stopped.
        top = filters.before if filters.before is not None else lobby.message_sequence + 1
        if top - SEARCH_SPAN > first:
            first = searched_from = top - SEARCH_SPAN
    rows = _newest(lobby, filters, first, since) if first is not None else []
    older = rows[PAGE_SIZE - 1].sequence if len(rows) > PAGE_SIZE else None
    if older is None and searched_from is not None:
        older = searched_from
    else:
        searched_from = None
    rows = rows[:PAGE_SIZE]
    recipients: dict[int, list[RecipientLine]] = {m.pk: [] for m in rows}
    copies = list(
        Delivery.objects.filter(message_id__in=list(recipients))
        .order_by("recipient__agent_id")
        .values_list(
            "message_id",
            "recipient_id",
            "recipient__agent_id",
            "state",
            "held_reason",
            "agent_seen_at",
            "pushed_at",
            "adapter_received_at",
            "notified_generation",
        )
    )
    transports = _transports({copy[1] for copy in copies})
    for message_id, pk, agent_id, state, reason, seen_at, pushed, received, written in copies:
        label = _delivery_label(state, pushed, received, written, transports.get(pk))
        recipients[message_id].append(RecipientLine(agent_id, state, reason, seen_at, label))
    questions = question_selectors.question_states(list(recipients))
    lines = [
        MessageLine(
            message_id=m.pk,
            sequence=m.sequence,
            sender=m.sender_name,
            from_owner=m.sender_name == OWNER_SENDER,
            scope=m.scope,
            room=m.room_name,
            addressed_to=list(m.addressed_to or []),
            kind=m.kind,
            priority=m.priority,
            content=m.content if show_contents else None,
            content_bytes=m.content_bytes,
            created_at=m.created_at,
            recipients=recipients[m.pk],
            to_owner_question=m.pk in questions,
            answered_by=questions.get(m.pk),
        )
        for m in rows
    ]
    return MessagePage(
        lines=lines,
        filters=filters,
        older=older,
        agents=[OWNER_SENDER, *_agent_names(lobby)],
        rooms=list(
            Room.objects.filter(lobby=lobby).order_by("room_id").values_list("room_id", flat=True)
        ),
        contents_shown=show_contents,
        since=since,
        searched_from=searched_from,
    )


def contents_shown_to(lobby: Lobby, signed_in: bool) -> bool:
    """Owners, viewers and the operator read the words; the public only if the owner said so."""
    if signed_in:
        return True
    return BoardConfig.objects.filter(lobby=lobby, public_message_contents=True).exists()

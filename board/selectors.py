"""Reads for the dashboard: live facts from the lobby's tables at render time, and the chips.

Chips come from live facts alone, never from a summary, by lobbies.activity's precedence, the
one `list_agents` answers with too (resting, away, not responding, working, away after 30
minutes without a sign, idle); this module only names them for the page.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

from django.db.models import (
    Count,
    Exists,
    F,
    OuterRef,
    Q,
    Sum,
)

from board.models import (
    AgentAppearance,
    BoardConfig,
    Effort,
    NotesSource,
    SummaryModel,
    TokenSession,
    Visibility,
    WorkStretch,
    shown_name,
)
from board.strip import CELL, CELLS, Cell, message_counts, strip_cells, strip_window
from console import selectors as console_selectors
from lobbies import question_selectors, usage
from lobbies.activity import Activity, ActivityFacts, activity_of, working_after
from lobbies.agent_selectors import (
    AnnotatedAgent,
    activity_facts,
    idle_seconds,
    last_activity_at,
    with_last_message_at,
)
from lobbies.models import Agent, Delivery, DeliveryState, Lobby, Priority
from lobbies.push.presence import (
    WAITING_FRESH,
    conversation_key,
    live_connections,
    waiting_runtime,
)
from lobbies.question_selectors import OwnerQuestion

if TYPE_CHECKING:  # for the annotation only: board.refresh is imported at call (below)
    from board.refresh import Picture

TOKEN_DAYS = 14


class Chip(Enum):
    """(css class, words on the page)."""

    RESTING = ("resting", "Resting")
    NOT_RESPONDING = ("not-responding", "Not responding")
    WORKING = ("working", "Working")
    AWAY = ("away", "Away")
    IDLE = ("idle", "Idle")

    @property
    def css(self) -> str:
        return self.value[0]

    @property
    def label(self) -> str:
        return self.value[1]


CHIPS = {
    Activity.RESTING: Chip.RESTING,
    Activity.AWAY: Chip.AWAY,
    Activity.NOT_RESPONDING: Chip.NOT_RESPONDING,
    Activity.WORKING: Chip.WORKING,
    Activity.IDLE: Chip.IDLE,
}


def chip_for(facts: ActivityFacts, now: datetime) -> Chip:
    """The state chip: lobbies.activity's state, named for the page."""
    return CHIPS[activity_of(facts, now, working_after()).activity]


# ---------------------------------------------------------------- agents


@dataclass(frozen=True)
class AgentRow:
    agent_id: str
    name: str
    emoji: str
    chip: Chip
    status_line: str
    now_text: str
    next_text: str | None
    cells: list[Cell]
    active_minutes: int
    # The latest of sent, received and acknowledged, and the seconds since (None: none yet).
    last_activity_at: datetime | None = None
    idle_seconds: int | None = None
    pending: int = 0
    important: int = 0
    online: bool = False
    through_msg: bool = False  # no bridge, but present through `pocolobby msg` calls
    last_seen: datetime | None = None

    @property
    def idle(self) -> timedelta | None:
        return None if self.idle_seconds is None else timedelta(seconds=self.idle_seconds)

    # How messages reach it (channel, tmux, or none while no bridge is online) and, for a
    # tmux bridge, since when and why it holds notices (the pane is busy, gone or locked).
    transport: str = "none"
    held_since: datetime | None = None
    held_reason: str = ""


def inbox_counts(agent_pks: list[int]) -> dict[int, tuple[int, int]]:
    """Pending deliveries per agent, and how many of them are important: one grouped read."""
    rows = (
        Delivery.objects.filter(recipient_id__in=agent_pks, state=DeliveryState.PENDING)
        .values("recipient_id")
        .annotate(
            n=Count("id"), important=Count("id", filter=Q(message__priority=Priority.IMPORTANT))
        )
        .order_by()
    )
    return {r["recipient_id"]: (r["n"], r["important"]) for r in rows}


def _last_seen(agent: AnnotatedAgent) -> datetime | None:
    """The latest sign of the agent: a heartbeat, a turn it took, a message it sent."""
    times = [t for t in (agent.heartbeat_at, agent.last_progress_at, agent.last_sent_at) if t]
    return max(times) if times else None


@dataclass(frozen=True)
class WaitingItem:
    agent_id: str
    name: str
    emoji: str
    count: int
    line: str
    since: datetime | None
    # When the owner last wrote to the agent, if after it set this line: the line stays
    # the agent's to clear, and the page says "you replied N min ago" under it.
    replied_at: datetime | None = None


@dataclass(frozen=True)
class QuestionItem:
    """A question an agent sent the owner (lobbies/question_selectors.py), as the page shows it."""

    question: OwnerQuestion
    name: str
    emoji: str

    @property
    def agent_id(self) -> str:
        return self.question.agent_id


ANSWERED_SHOWN_FOR = timedelta(hours=24)


def _question_items(lobby: Lobby, questions: list[OwnerQuestion]) -> list[QuestionItem]:
    names = {q.agent_id for q in questions}
    looks = {
        a.agent.agent_id: a
        for a in AgentAppearance.objects.filter(
            agent__lobby=lobby, agent__agent_id__in=names
        ).select_related("agent")
    }
    return [
        QuestionItem(
            q,
            shown_name(looks.get(q.agent_id), q.agent_id),
            looks[q.agent_id].emoji if q.agent_id in looks else "",
        )
        for q in questions
    ]


# Waiting for you lists this many questions (longest waiting first) and counts the rest.
QUESTIONS_SHOWN = 20


def question_items(lobby: Lobby) -> tuple[list[QuestionItem], int]:
    """The agents' unanswered questions to the owner, longest waiting first, and how many
    more wait beyond those shown."""
    shown = question_selectors.waiting_questions(lobby.pk, limit=QUESTIONS_SHOWN)
    more = 0
    if len(shown) == QUESTIONS_SHOWN:
        more = question_selectors.waiting_counts([lobby.pk]).get(lobby.pk, 0) - len(shown)
    return _question_items(lobby, shown), more


def answered_items(lobby: Lobby, now: datetime) -> list[QuestionItem]:
    """Questions the owner answered in the last day, most recently answered first."""
    since = now - ANSWERED_SHOWN_FOR
    return _question_items(lobby, question_selectors.answered_questions(lobby.pk, since))


def _appearances(agents: Sequence[Agent]) -> dict[int, AgentAppearance]:
    return {a.agent_id: a for a in AgentAppearance.objects.filter(agent__in=agents)}


def waiting_items(lobby: Lobby) -> list[WaitingItem]:
    """Every enabled agent's own owner requests, hidden ones included, longest waiting first."""
    agents = list(
        Agent.objects.filter(lobby=lobby, enabled=True, owner_request_count__gt=0).order_by(
            "owner_requests_updated_at", "agent_id"
        )
    )
    looks = _appearances(agents)
    asked = [a.owner_requests_updated_at for a in agents if a.owner_requests_updated_at]
    wrote = question_selectors.last_owner_messages(lobby.pk, min(asked)) if asked else {}
    return [
        WaitingItem(
            a.agent_id,
            shown_name(looks.get(a.pk), a.agent_id),
            looks[a.pk].emoji if a.pk in looks else "",
            a.owner_request_count,
            a.owner_request_line,
            a.owner_requests_updated_at,
            _replied_after(wrote.get(a.agent_id), a.owner_requests_updated_at),
        )
        for a in agents
    ]


def _replied_after(replied: datetime | None, asked: datetime | None) -> datetime | None:
    if replied is None or (asked is not None and replied < asked):
        return None
    return replied


@dataclass(frozen=True)
class HandOverWait:
    """A new conversation waiting to take over an agent another conversation holds."""

    agent_id: str
    name: str
    emoji: str
    since: datetime | None
    holder_since: datetime | None
    holder_connected: bool
    conversation: str  # which conversation waits: a Hand over names it (`conversation_key`)


def hand_over_waits(lobby: Lobby, now: datetime) -> list[HandOverWait]:
    """Agents a refused new conversation waits for, hidden ones included, longest first."""
    candidates = Agent.objects.filter(
        lobby=lobby, enabled=True, waiting_seen_at__gte=now - WAITING_FRESH
    )
    waits = [(a, waiting_runtime(a, now)) for a in candidates.order_by("waiting_since")]
    runtimes = {a.pk: runtime for a, runtime in waits if runtime}
    agents = [a for a, _ in waits if a.pk in runtimes]
    if not agents:
        return []
    looks = _appearances(agents)
    connected = set(
        live_connections()
        .filter(agent__in=agents, generation=F("agent__runtime_generation"))
        .values_list("agent_id", flat=True)
    )
    return [
        HandOverWait(
            a.agent_id,
            shown_name(looks.get(a.pk), a.agent_id),
            looks[a.pk].emoji if a.pk in looks else "",
            a.waiting_since,
            a.runtime_bound_at,
            a.pk in connected,
            conversation_key(runtimes[a.pk]),
        )
        for a in agents
    ]


def shown_agents(lobby: Lobby) -> list[AnnotatedAgent]:
    """Enabled agents the owner has not hidden, with the live facts the chips need."""
    online = live_connections().filter(
        agent=OuterRef("pk"), generation=OuterRef("runtime_generation")
    )
    return list(
        with_last_message_at(
            Agent.objects.filter(lobby=lobby, enabled=True)
            .exclude(appearance__hidden=True)
            .annotate(online=Exists(online))
            .order_by("agent_id")
        )
    )


@dataclass
class _Work:
    quarters: list[float] = field(default_factory=lambda: [0.0] * CELLS)  # seconds per cell
    active_today: timedelta = field(default_factory=timedelta)


def _work(agent_pks: list[int], now: datetime) -> dict[int, _Work]:
    """Seconds of work per quarter hour of the strip, and today's (UTC) active time, both from
    the same stretches of work (a turn still open runs to now)."""
    start, _ = strip_window(now)
    midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    since = min(start, midnight)
    work: dict[int, _Work] = defaultdict(_Work)
    stretches = WorkStretch.objects.filter(agent_id__in=agent_pks, started_at__lt=now).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=since)
    )
    for agent_pk, started, ended in stretches.values_list("agent_id", "started_at", "ended_at"):
        facts = work[agent_pk]
        until = min(ended or now, now)
        today = until - max(started, midnight)
        if today > timedelta(0):
            facts.active_today += today
        first = max(started, start)
        while first < until:
            cell = int((first - start) / CELL)
            cell_end = min(start + (cell + 1) * CELL, until)
            if 0 <= cell < CELLS:
                facts.quarters[cell] += (cell_end - first).total_seconds()
            first = cell_end
    return work


def agent_rows(lobby: Lobby, now: datetime, picture: Picture | None = None) -> list[AgentRow]:
    """Rows of the shown agents; now and next come from the picture when the page has one, or
    (the 10-second refresh) from the last good summary alone."""
    # local: board.refresh reads the rows this module selects; imported at call, no circle
    from board.refresh import agent_summaries, last_good_summary

    agents = shown_agents(lobby)
    pks = [a.pk for a in agents]
    looks = _appearances(agents)
    counts = message_counts(lobby, pks, now)
    start, _ = strip_window(now)
    work = _work(pks, now)
    inboxes = inbox_counts(pks)
    summaries = picture.agents if picture is not None else agent_summaries(last_good_summary(lobby))
    rows = []
    for agent in agents:
        done = work.get(agent.pk, _Work())
        facts = activity_facts(agent, connected=bool(agent.online))
        summary = summaries.get(agent.agent_id)
        look = looks.get(agent.pk)
        # The row's "last active" counts its turns and msg calls too, not only its messages.
        activity = max(
            (
                t
                for t in (last_activity_at(agent), facts.turn_ended_at, facts.msg_seen_at)
                if t is not None
            ),
            default=facts.turn_started_at,
        )
        if facts.turn_open:
            activity = now
        rows.append(
            AgentRow(
                agent_id=agent.agent_id,
                name=shown_name(look, agent.agent_id),
                emoji=look.emoji if look else "",
                chip=chip_for(facts, now),
                status_line=agent.status_line,
                now_text=summary.now if summary else "",
                next_text=summary.next if summary and summary.next else None,
                cells=strip_cells(counts.get(agent.pk, [0] * CELLS), start, done.quarters),
                active_minutes=int(done.active_today.total_seconds() // 60),
                last_activity_at=activity,
                idle_seconds=idle_seconds(activity, now),
                pending=inboxes.get(agent.pk, (0, 0))[0],
                important=inboxes.get(agent.pk, (0, 0))[1],
                online=bool(agent.online),
                through_msg=facts.through_msg(now),
                last_seen=_last_seen(agent),
                transport=(agent.transport or "channel") if agent.online else "none",
                held_since=agent.held_since if agent.online else None,
                held_reason=(agent.held_reason or "") if agent.online else "",
            )
        )
    return rows


# ---------------------------------------------------------------- accounts


@dataclass(frozen=True)
class AccountGroup:
    label: str
    agents: list[str]
    view: usage.Shown


def account_groups(lobby: Lobby, now: datetime, *, show_emails: bool) -> list[AccountGroup]:
    """Plan usage grouped by the email each agent reports; the freshest reading speaks.

    Emails only on a private dashboard; a public one says "An account" (numbered).
    """
    agents = list(
        Agent.objects.filter(lobby=lobby, enabled=True)
        .exclude(appearance__hidden=True)
        .order_by("agent_id")
    )
    looks = _appearances(agents)
    readings = usage.readings_for({a.pk for a in agents})
    groups: dict[str, tuple[list[str], usage.Shown]] = {}
    for agent in agents:
        view = usage.shown(readings.get(agent.pk), now)
        if view is None:
            continue
        key = view.reading.account_email or f"\0{agent.agent_id}"
        names, best = groups.get(key, ([], view))
        names.append(shown_name(looks.get(agent.pk), agent.agent_id))
        if view.reading.received_at > best.reading.received_at:
            best = view
        groups[key] = (names, best)
    result = []
    for number, (key, (names, view)) in enumerate(sorted(groups.items()), start=1):
        if key.startswith("\0"):
            label = "Account not reported"
        elif show_emails:
            label = key
        else:
            label = f"An account ({number})"
        result.append(AccountGroup(label, names, view))
    return result


# ---------------------------------------------------------------- tokens


@dataclass(frozen=True)
class TokenLine:
    agent_id: str
    name: str
    day: date
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int

    @property
    def total(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_creation_tokens
        )


def token_lines(lobby: Lobby, now: datetime) -> list[TokenLine]:
    """Per agent per UTC day for the last 14 days, sessions summed; newest day first."""
    first = now.astimezone(UTC).date() - timedelta(days=TOKEN_DAYS - 1)
    rows = (
        TokenSession.objects.filter(agent__lobby=lobby, day__gte=first)
        .exclude(agent__appearance__hidden=True)
        .values("agent_id", "agent__agent_id", "day")
        .annotate(
            i=Sum("input_tokens"),
            o=Sum("output_tokens"),
            r=Sum("cache_read_tokens"),
            c=Sum("cache_creation_tokens"),
        )
        .order_by("-day", "agent__agent_id")
    )
    looks = {a.agent_id: a for a in AgentAppearance.objects.filter(agent__lobby=lobby)}
    lines = []
    for row in rows:
        name = shown_name(looks.get(row["agent_id"]), row["agent__agent_id"])
        lines.append(
            TokenLine(
                row["agent__agent_id"], name, row["day"], row["i"], row["o"], row["r"], row["c"]
            )
        )
    return lines


# ---------------------------------------------------------------- the settings page


def dashboard_is_public(lobby: Lobby) -> bool:
    return BoardConfig.objects.filter(lobby=lobby, visibility=Visibility.PUBLIC).exists()


def settings_page(
    lobby: Lobby, rooms_page: str | None = None, archived_page: str | None = None
) -> dict[str, Any]:
    """Everything the settings page shows: the console's part, then the dashboard's."""
    facts = console_selectors.settings_of(lobby, rooms_page, archived_page)
    sources = {
        s.room_id: s
        for s in NotesSource.objects.filter(room_id__in=[r["room_pk"] for r in facts["rooms"]])
    }
    looks = {a.agent_id: a for a in AgentAppearance.objects.filter(agent__lobby=lobby)}
    config = BoardConfig.objects.filter(lobby=lobby).first()
    for room in facts["rooms"]:
        room["source"] = sources.get(room.pop("room_pk"))
    for agent in facts["agents"]:
        agent["look"] = looks.get(agent.pop("agent_pk"))
    return {
        **facts,
        **console_selectors.owner_controls_of(lobby),
        "visibility": config.visibility if config else Visibility.PRIVATE,
        "public_message_contents": bool(config and config.public_message_contents),
        "viewers_get_notifications": bool(config and config.viewers_get_notifications),
        "summary_model": config.summary_model if config else SummaryModel.HAIKU,
        "summary_effort": config.summary_effort if config else Effort.LOW,
        "models": SummaryModel.choices,
        "efforts": Effort.values,
    }

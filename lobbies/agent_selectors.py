"""Reads about agents: presence, activity, the lobby's listing and the operator's status.

Beside lobbies/selectors.py (messages, rooms, schedules, continuity): an agent's entry joins
live connection facts, its last messages and its usage reading. No writes here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from django.db.models import Count, Exists, F, Max, Min, OuterRef, Q, QuerySet, Subquery

from lobbies import question_selectors
from lobbies.activity import ActivityFacts, activity_of, working_after
from lobbies.api.answers import (
    AgentEntry,
    AgentList,
    HostName,
    NoticesHeld,
    Standing,
    TransportName,
    at,
)
from lobbies.api.operator_answers import (
    Lobbies,
    LobbyEntry,
    OperatorAgentEntry,
    OwnerQuestionEntry,
    WaitingConversation,
)
from lobbies.models import (
    Agent,
    Delivery,
    DeliveryState,
    Lobby,
    Message,
    Priority,
    ReceiptEvent,
    Scope,
    Transport,
)
from lobbies.names import OWNER_SENDER
from lobbies.push.presence import live_connections, waiting_runtime
from lobbies.usage import readings_for, usage_entry
from lobbies.wire.facts import iso

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
        turn_started_at: datetime | None
        turn_ended_at: datetime | None
        msg_seen_at: datetime | None
        host: str | None
        last_sent_at: datetime | None
        last_received_at: datetime | None
        online: bool  # board.selectors.shown_agents
        pending: int
        important: int  # pending and important (operator_agents)
        held: int

else:
    AnnotatedAgent = Agent


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
        # What the agent is doing (lobbies.activity): one LEFT JOIN on its activity row.
        turn_started_at=F("activity__turn_started_at"),
        turn_ended_at=F("activity__turn_ended_at"),
        msg_seen_at=F("activity__msg_seen_at"),
        host=F("activity__host"),
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


def activity_facts(agent: AnnotatedAgent, connected: bool | None = None) -> ActivityFacts:
    """The facts lobbies.activity's precedence reads; `connected` defaults to any live bridge
    (the dashboard passes its own: one of the current generation)."""
    return ActivityFacts(
        resting=agent.resting,
        connected=agent.connected if connected is None else connected,
        unseen_notified=agent.unseen_notified or 0,
        oldest_unseen_notified_at=agent.oldest_unseen_notified,
        turn_started_at=agent.turn_started_at,
        turn_ended_at=agent.turn_ended_at,
        last_message_at=last_message_at(agent),
        msg_seen_at=agent.msg_seen_at,
    )


def idle_seconds(activity: datetime | None, now: datetime) -> int | None:
    return None if activity is None else max(0, int((now - activity).total_seconds()))


def agent_entry(agent: AnnotatedAgent, now: datetime | None = None) -> AgentEntry:
    now = now or datetime.now(UTC)
    activity = last_activity_at(agent)
    transport, held = delivery_entry(agent)
    facts = activity_facts(agent)
    state = activity_of(facts, now, working_after())
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
        "idle_seconds": idle_seconds(activity, now),
        "activity": state.activity.value,
        "activity_since": iso(state.since),
        "host": cast(HostName, agent.host) if agent.host else None,
        "through_msg": facts.through_msg(now),
        "connected": agent.connected,
        "last_heartbeat_at": iso(agent.heartbeat_at),
        "last_receipt_at": iso(agent.last_receipt_at),
        "unseen_notified_count": agent.unseen_notified or 0,
        "oldest_unseen_notified_at": iso(agent.oldest_unseen_notified),
        "notification_attention_required": agent.notification_attention_required,
        "transport": transport,
        "notices_held": held,
    }


def delivery_entry(agent: AnnotatedAgent) -> tuple[TransportName, NoticesHeld | None]:
    """How pushes reach the agent: its bridge's transport (channel, tmux) or none when no
    bridge is connected; for tmux, since when and why notices are held (None: not held)."""
    if not agent.connected:
        return "none", None
    transport = cast(TransportName, agent.transport or Transport.CHANNEL)
    if agent.held_since is None:
        return transport, None
    return transport, {"since": at(agent.held_since), "reason": agent.held_reason or ""}


def list_agents(viewer: Agent) -> AgentList:
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


def standing(agent: Agent) -> Standing:
    """What an agent's token may learn of itself without a runtime (`pocolobby doctor`): a
    token that reaches here is accepted and its agent enabled; whether pushes flow is the rest."""
    return {
        "lobby": agent.lobby.name,
        "agent_id": agent.agent_id,
        "delivery_paused": agent.lobby.delivery_paused,
        "resting": agent.resting,
        "connected": live_connections().filter(agent=agent).exists(),
    }


def operator_agents(lobby: Lobby) -> list[OperatorAgentEntry]:
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


def waiting_entry(agent: Agent, now: datetime) -> WaitingConversation | None:
    """The new conversation waiting to take over the agent, while it still asks."""
    runtime_id = waiting_runtime(agent, now)
    since, asked = agent.waiting_since, agent.waiting_seen_at
    if runtime_id is None or since is None or asked is None:  # waiting: both are set
        return None
    return {"runtime_id": runtime_id, "since": at(since), "last_asked_at": at(asked)}


def lobby_entry(lobby: Lobby) -> LobbyEntry:
    return {"name": lobby.name, "created_at": at(lobby.created_at)}


def all_lobbies() -> QuerySet[Lobby]:
    return Lobby.objects.order_by("name")


def status(lobby_name: str | None = None) -> Lobbies:
    lobbies = all_lobbies()
    if lobby_name:
        lobbies = lobbies.filter(name=lobby_name)
    return {
        "lobbies": [
            {
                **lobby_entry(lobby),
                "agents": operator_agents(lobby),
                "owner_questions": owner_question_entries(lobby),
            }
            for lobby in lobbies
        ]
    }


QUESTION_OPENING = 120


def owner_question_entries(lobby: Lobby) -> list[OwnerQuestionEntry]:
    """The lobby's unanswered questions to the owner, longest waiting first."""
    return [
        {
            "message_id": q.message_id,
            "agent_id": q.agent_id,
            "kind": q.kind,
            "asked_at": at(q.asked_at),
            "opening": q.content.split("\n", 1)[0][:QUESTION_OPENING],
        }
        for q in question_selectors.waiting_questions(lobby.pk)
    ]

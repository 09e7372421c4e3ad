"""What the console's home shows about each lobby: agents online of all, what waits on the
owner (the agents' request counts and their unanswered questions), and when its agents last
said anything. A few queries for every lobby on the page, not one per lobby."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, Subquery, Sum

from lobbies import question_selectors
from lobbies.models import Agent, Lobby, Message
from lobbies.names import OWNER_SENDER
from lobbies.push.presence import live_connections


@dataclass(frozen=True)
class LobbyFacts:
    agents: int = 0
    online: int = 0
    waiting: int = 0
    last_activity: datetime | None = None


def lobby_facts(names: list[str]) -> dict[str, LobbyFacts]:
    online = live_connections().filter(
        agent=OuterRef("pk"), generation=OuterRef("runtime_generation")
    )
    agents = (
        Agent.objects.filter(lobby__name__in=names, enabled=True)
        .exclude(agent_id=OWNER_SENDER)
        .annotate(live=Exists(online))
        .values("lobby__name")
        .annotate(
            total=Count("id"),
            on=Count("id", filter=Q(live=True)),
            waiting=Sum("owner_request_count"),
        )
        .order_by()
    )
    counts: dict[str, Mapping[str, Any]] = {row["lobby__name"]: row for row in agents}
    pks = dict(Lobby.objects.filter(name__in=names).values_list("name", "pk"))
    questions = question_selectors.waiting_counts(pks.values())
    newest = Message.objects.filter(lobby=OuterRef("pk")).order_by("-created_at")
    lasts = dict(
        Lobby.objects.filter(name__in=names)
        .annotate(last=Subquery(newest.values("created_at")[:1]))
        .values_list("name", "last")
    )
    return {
        name: LobbyFacts(
            agents=counts.get(name, {}).get("total", 0),
            online=counts.get(name, {}).get("on", 0),
            waiting=(counts.get(name, {}).get("waiting", 0) or 0)
            + questions.get(pks.get(name, 0), 0),
            last_activity=lasts.get(name),
        )
        for name in names
    }

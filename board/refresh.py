"""The dashboard's model-written half: the last good picture, and starting background work.

The page calls `on_dashboard_opened` on every render or live refresh; it must return at
once (notes fetches and summaries run in the background, one at a time per lobby) and never
raise. `picture_of` reads only the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from board.models import AttemptOutcome, SummaryAttempt
from lobbies.models import Lobby


@dataclass(frozen=True)
class AgentSummary:
    now: str
    next: str | None  # None: the sources cannot tell, so the page leaves it out


@dataclass(frozen=True)
class SourceStatus:
    room: str
    repository: str
    commit: str  # "" before the first good fetch
    fetched_at: datetime | None
    truncated: bool
    problem: str  # plain words, "" when the last check went well


@dataclass(frozen=True)
class Picture:
    agents: dict[str, AgentSummary] = field(default_factory=dict)  # by agent_id
    summarized_at: datetime | None = None
    # Plain sentences for the page: a failed summary or fetch, a missing secret.
    problems: list[str] = field(default_factory=list)
    sources: list[SourceStatus] = field(default_factory=list)


def picture_of(lobby: Lobby) -> Picture:
    last = (
        SummaryAttempt.objects.filter(lobby=lobby, outcome=AttemptOutcome.SUCCEEDED)
        .order_by("-finished_at")
        .first()
    )
    if last is None or not isinstance(last.summary, dict):
        return Picture()
    agents = {
        agent_id: AgentSummary(now=str(entry.get("now", "")), next=entry.get("next"))
        for agent_id, entry in (last.summary.get("agents") or {}).items()
        if isinstance(entry, dict)
    }
    return Picture(agents=agents, summarized_at=last.finished_at)


def on_dashboard_opened(lobby: Lobby) -> None:
    """Start a notes check or a summary in the background when the rules say so."""

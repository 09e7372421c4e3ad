"""The tokens page's chart: each agent's daily totals over the last 14 days, drawn as SVG on
the server (no chart library: a bar per day needs only rects and numbers we computed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from board.models import shown_name
from board.selectors import TOKEN_DAYS, TokenLine, _appearances, shown_agents, token_lines
from lobbies.models import Lobby


@dataclass(frozen=True)
class AgentTokens:
    agent_id: str
    name: str
    days: list[tuple[date, int]]  # oldest first, every day of the window, 0 when none
    host: str = ""  # what runs it, as list_agents' `host` ("" when nothing said)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.days)


def agent_tokens(lobby: Lobby, now: datetime) -> tuple[list[AgentTokens], list[TokenLine]]:
    """Every shown agent's series (those with no counts too, for the empty state) and the
    lines behind them."""
    lines = token_lines(lobby, now)
    last = now.astimezone(UTC).date()
    window = [last - timedelta(days=n) for n in range(TOKEN_DAYS - 1, -1, -1)]
    totals: dict[str, dict[date, int]] = {}
    for line in lines:
        totals.setdefault(line.agent_id, {})[line.day] = line.total
    agents = shown_agents(lobby)
    looks = _appearances(agents)
    series = [
        AgentTokens(
            a.agent_id,
            shown_name(looks.get(a.pk), a.agent_id),
            [(day, totals.get(a.agent_id, {}).get(day, 0)) for day in window],
            a.host or "",
        )
        for a in agents
    ]
    return series, lines

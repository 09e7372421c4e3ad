"""Shared set-up for the dashboard tests: visitors, live connections and summaries as rows."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from django.test import Client
from django.utils import timezone

from board.models import AttemptOutcome, SummaryAttempt
from console import local
from console.access import OPERATOR_COOKIE
from lobbies.models import Agent, Lobby
from lobbies.push import presence

LOCAL_HOST = "127.0.0.1:8787"


def operator_client() -> Client:
    """The local operator, signed in the way a `pocolobby settings` ticket does it."""
    token = local.redeem_ticket(local.issue_ticket())
    assert token
    client = Client(HTTP_HOST=LOCAL_HOST)
    client.cookies[f"__Host-{OPERATOR_COOKIE}"] = token
    return client


def connect(agent: Agent) -> None:
    """A live bridge connection for the agent's current runtime generation."""
    agent.refresh_from_db()
    presence.open_connection(agent.pk, agent.runtime_generation)


def summarize(lobby: Lobby, agents: dict[str, dict[str, Any]], at: datetime | None = None) -> None:
    """A succeeded summary as the summarizer would store it."""
    moment = at or timezone.now()
    SummaryAttempt.objects.create(
        lobby=lobby,
        model="claude-haiku-5-5",
        effort="low",
        input_hash="0" * 64,
        outcome=AttemptOutcome.SUCCEEDED,
        summary={"agents": agents, "sources": []},
        started_at=moment - timedelta(seconds=5),
        finished_at=moment,
    )


def chips(html: str) -> dict[str, str]:
    """agent_id -> chip words, read from the agent rows of a page or part."""
    found = {}
    for agent_id, body in re.findall(
        r'<li class="agent" data-agent="([^"]+)">(.*?)</li>', html, flags=re.S
    ):
        match = re.search(r'<span class="chip ([a-z-]+)">([^<]+)</span>', body)
        assert match, body
        found[agent_id] = match.group(2)
    return found

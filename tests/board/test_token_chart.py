"""The tokens page's chart: each shown agent's daily totals as server-drawn SVG bars, the
busiest day full height, and a plain sentence for an agent with no counts."""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone

from board.actions import SessionDay, store_token_days
from lobbies.models import AgentActivity
from tests.board.dashboard_helpers import operator_client
from tests.conftest import AgentClient


def test_each_agent_gets_fourteen_bars_or_an_empty_state(lead: AgentClient, backend) -> None:
    today = timezone.now().date()
    store_token_days(
        lead.agent,
        [
            SessionDay("s-1", today, 1000, 500, 0, 0),
            SessionDay("s-2", today - timedelta(days=1), 300, 0, 0, 0),
        ],
        timezone.now(),
    )
    html = operator_client().get("/my-team/tokens").content.decode()
    lead_item = html.split('<li data-agent="lead">')[1].split("</li>")[0]
    bars = re.findall(r'<rect x="\d+" y="([\d.]+)" width="8" height="([\d.]+)"', lead_item)
    assert len(bars) == 14
    assert bars[-1] == ("0.00", "40.00")  # today, the busiest day: full height
    assert float(bars[-2][1]) == 40 * 300 / 1500
    assert "1,800 in 14 days" in lead_item and 'aria-label="Tokens per day' in lead_item
    backend_item = html.split('<li data-agent="backend">')[1].split("</li>")[0]
    assert (
        "<svg" not in backend_item and "No token counts from <bdi>backend</bdi> yet" in backend_item
    )


def test_the_empty_state_says_what_each_host_can_show(make_agent) -> None:
    """Claude Code: its Stop hook; Codex: its own session files, read by the bridge; Gemini, a
    shell or msg: no token counts; never "set pocolobby hook as its Stop hook" for those."""
    hosts = {"claude": "claude-code", "cx": "codex", "gm": "gemini", "sh": "shell", "m": "msg"}
    for name, host in hosts.items():
        agent = make_agent(name)
        AgentActivity.objects.create(agent=agent.agent, host=host)
    html = operator_client().get("/my-team/tokens").content.decode()

    def item(name: str) -> str:
        return html.split(f'<li data-agent="{name}">')[1].split("</li>")[0]

    assert "as its Stop hook" in item("claude")
    assert "Codex" in item("cx") and "session files the bridge reads" in item("cx")
    assert "Stop hook" not in item("cx") and "reports no token counts" not in item("cx")
    for name in ("gm", "sh", "m"):
        assert "Stop hook" not in item(name) and "reports no token counts" in item(name), name
    assert "Gemini CLI" in item("gm") and "shell" in item("sh") and "msg" in item("m")

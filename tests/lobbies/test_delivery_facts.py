"""Transport facts: a bridge's `delivery` frame (channel or tmux, held notices, attention) as
recorded on its connection and shown by list_agents and the operator's status."""

from __future__ import annotations

import pytest

from lobbies.actions.runtime import DeliveryReport, report_delivery
from lobbies.agent_selectors import status
from lobbies.errors import BrokerError
from lobbies.models import Agent, Connection
from lobbies.push import presence
from tests.conftest import AgentClient


def _connect(agent: Agent) -> int:
    agent.refresh_from_db()
    return presence.open_connection(agent.pk, agent.runtime_generation)


def _entry(client: AgentClient, name: str) -> dict:
    return {a["agent_id"]: a for a in client.ok("list_agents")["agents"]}[name]


def test_an_agent_without_a_bridge_has_no_transport_and_a_silent_bridge_is_a_channel(
    lead: AgentClient, backend: AgentClient
) -> None:
    assert _entry(lead, "backend")["transport"] == "none"
    _connect(backend.agent)
    entry = _entry(lead, "backend")
    assert entry["transport"] == "channel" and entry["notices_held"] is None


def test_a_tmux_bridge_reports_held_notices_with_their_reason_and_then_their_release(
    lead: AgentClient, backend: AgentClient
) -> None:
    connection = _connect(backend.agent)
    generation = backend.agent.runtime_generation
    busy = DeliveryReport.parse(
        {"transport": "tmux", "held": True, "held_reason": "the agent is busy (no idle prompt)"}
    )
    report_delivery(connection, generation, busy)
    entry = _entry(lead, "backend")
    assert entry["transport"] == "tmux"
    assert entry["notices_held"]["reason"] == "the agent is busy (no idle prompt)"
    since = entry["notices_held"]["since"]
    report_delivery(connection, generation, busy)  # still held: the first moment stays
    assert _entry(lead, "backend")["notices_held"]["since"] == since
    assert entry["notification_attention_required"] is False

    report_delivery(connection, generation, DeliveryReport.parse({"transport": "tmux"}))
    entry = _entry(lead, "backend")
    assert entry["transport"] == "tmux" and entry["notices_held"] is None
    operator_row = {a["agent_id"]: a for a in status("my-team")["lobbies"][0]["agents"]}
    assert operator_row["backend"]["transport"] == "tmux"


def test_a_notice_given_up_requires_attention_only_from_the_current_generation(
    lead: AgentClient, backend: AgentClient
) -> None:
    connection = _connect(backend.agent)
    generation = backend.agent.runtime_generation
    gave_up = DeliveryReport.parse(
        {"transport": "tmux", "held": True, "held_reason": "gave up", "attention": True}
    )
    report_delivery(connection, generation - 1, gave_up)
    assert not Agent.objects.get(pk=backend.agent.pk).notification_attention_required
    report_delivery(connection, generation, gave_up)
    assert Agent.objects.get(pk=backend.agent.pk).notification_attention_required
    assert _entry(lead, "backend")["notification_attention_required"] is True


@pytest.mark.parametrize(
    ("frame", "named"),
    [
        ({"transport": "pigeon"}, "transport"),
        ({}, "transport"),
        ({"transport": "tmux", "held": "yes"}, "held"),
        ({"transport": "tmux", "attention": 1}, "attention"),
        ({"transport": "tmux", "held": True, "held_reason": "x" * 201}, "held_reason"),
        ({"transport": "tmux", "held": True, "held_reason": ["busy"]}, "held_reason"),
    ],
)
def test_a_bad_delivery_frame_is_refused_naming_the_field(frame: dict, named: str) -> None:
    with pytest.raises(BrokerError) as refused:
        DeliveryReport.parse(frame)
    assert refused.value.code == "invalid_frame" and named in refused.value.message


def test_a_held_reason_is_stored_as_one_printable_line(lead: AgentClient, backend: AgentClient):
    connection = _connect(backend.agent)
    report = DeliveryReport.parse(
        {"transport": "tmux", "held": True, "held_reason": "pane\x1b[31m gone\n\tnow"}
    )
    report_delivery(connection, backend.agent.runtime_generation, report)
    assert Connection.objects.get(pk=connection).held_reason == "pane [31m gone now"


def test_a_report_for_a_closed_connection_changes_nothing(backend: AgentClient) -> None:
    connection = _connect(backend.agent)
    presence.close_connection(connection)
    report_delivery(
        connection,
        backend.agent.runtime_generation,
        DeliveryReport.parse({"transport": "tmux", "held": True, "attention": True}),
    )
    assert not Agent.objects.get(pk=backend.agent.pk).notification_attention_required

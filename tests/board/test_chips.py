"""State chips: computed on the server from live facts alone, by a fixed precedence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from board.selectors import CHIPS, Chip, chip_for
from lobbies.activity import Activity, ActivityFacts
from lobbies.models import Agent, AgentActivity, BrokerProcess, Delivery, Message
from tests.board.dashboard_helpers import chips, connect, operator_client
from tests.conftest import AgentClient

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def test_every_state_has_its_chip_from_the_shared_precedence() -> None:
    """The table of cases is lobbies.activity's (tests/lobbies/test_activity.py); the chips
    only name its states, so list_agents and the page cannot disagree."""
    assert {a.value for a in CHIPS} == {a.value for a in Activity}
    facts = ActivityFacts(resting=False, connected=True, turn_started_at=NOW)
    assert chip_for(facts, NOW) is Chip.WORKING
    assert chip_for(ActivityFacts(resting=True, connected=True), NOW) is Chip.RESTING


def _as_bridges() -> None:
    """The sends here stand for a bridge's: forget that they came without runtime headers
    (which `pocolobby msg` calls do, and which keep an agent present through msg)."""
    AgentActivity.objects.update(msg_seen_at=None)


# ------------------------------------------------------------ from the store, on the page


def _chips() -> dict[str, str]:
    return chips(operator_client().get("/my-team/parts/agents").content.decode())


@pytest.mark.django_db
def test_an_offline_bridge_shows_away_though_a_direct_message_just_arrived(
    lead: AgentClient, backend: AgentClient
) -> None:
    assert _chips() == {"lead": "Away", "backend": "Away"}
    connect(backend.agent)
    lead.send("backend", "hi", "r1")
    _as_bridges()
    assert _chips()["backend"] == "Idle"
    Agent.objects.filter(pk=backend.agent.pk).update(runtime_generation=99)  # a newer runtime
    assert _chips()["backend"] == "Away"


@pytest.mark.django_db
def test_a_connection_of_a_dead_broker_process_shows_away(lead: AgentClient) -> None:
    connect(lead.agent)
    lead.send("lead", "note to self", "r1")
    _as_bridges()
    assert _chips()["lead"] == "Idle"
    BrokerProcess.objects.update(last_seen_at=timezone.now() - timedelta(hours=1))
    assert _chips()["lead"] == "Away"


@pytest.mark.django_db
def test_resting_wins_over_everything(lead: AgentClient) -> None:
    connect(lead.agent)
    _turn(lead, "start")
    Agent.objects.filter(pk=lead.agent.pk).update(resting=True)
    assert _chips()["lead"] == "Resting"


@pytest.mark.django_db
def test_not_responding_when_notified_messages_stay_unacknowledged(
    lead: AgentClient, backend: AgentClient
) -> None:
    connect(lead.agent)
    connect(backend.agent)
    lead.send("backend", "please look", "r1")
    _turn(backend, "start")
    assert _chips()["backend"] == "Working"
    Delivery.objects.filter(recipient=backend.agent).update(
        notification_attempted_at=timezone.now()
    )
    assert _chips()["backend"] == "Not responding"


@pytest.mark.django_db
def test_working_from_the_hooks_turns(lead: AgentClient) -> None:
    connect(lead.agent)
    assert _chips()["lead"] == "Away"  # connected, never a message
    _turn(lead, "start")
    assert _chips()["lead"] == "Working"
    _turn(lead, "end")
    assert _chips()["lead"] == "Working"  # under two minutes ago
    AgentActivity.objects.filter(agent=lead.agent).update(
        turn_started_at=timezone.now() - timedelta(minutes=10),
        turn_ended_at=timezone.now() - timedelta(minutes=3),
    )
    assert _chips()["lead"] == "Idle"  # a turn ended 3 minutes ago is a sign of life
    AgentActivity.objects.filter(agent=lead.agent).update(
        turn_started_at=timezone.now() - timedelta(minutes=40),
        turn_ended_at=timezone.now() - timedelta(minutes=31),
    )
    assert _chips()["lead"] == "Away"


@pytest.mark.django_db
def test_away_once_the_last_message_is_30_minutes_old(
    lead: AgentClient, backend: AgentClient
) -> None:
    connect(lead.agent)
    lead.send("backend", "hi", "r1")
    _as_bridges()
    assert _chips()["lead"] == "Idle"
    Message.objects.update(created_at=timezone.now() - timedelta(minutes=31))
    assert _chips()["lead"] == "Away"


def _turn(agent: AgentClient, event: str) -> None:
    response = agent.client.post(
        "/v1/turns",
        {"event": event},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent.token}",
    )
    assert response.status_code == 200, response.content

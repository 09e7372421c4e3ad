"""State chips: computed on the server from live facts alone, by a fixed precedence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from board.models import WorkStretch
from board.selectors import Chip, ChipFacts, chip_for
from lobbies.models import Agent, BrokerProcess, Delivery, Message
from tests.board.dashboard_helpers import chips, connect, operator_client
from tests.conftest import AgentClient

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
ALL = ChipFacts(
    resting=True,
    online=True,
    unseen_notified=3,
    turn_open=True,
    last_turn_ended_at=None,
    last_message_at=NOW,
)


def _facts(**changes) -> ChipFacts:
    base = dict(
        resting=False,
        online=True,
        unseen_notified=0,
        turn_open=False,
        last_turn_ended_at=None,
        last_message_at=NOW - timedelta(minutes=5),
    )
    return ChipFacts(**{**base, **changes})


def test_precedence_resting_then_offline_away_then_not_responding_then_working() -> None:
    assert chip_for(ALL, NOW) is Chip.RESTING
    assert chip_for(_facts(online=False, unseen_notified=2, turn_open=True), NOW) is Chip.AWAY
    assert chip_for(_facts(unseen_notified=1, turn_open=True), NOW) is Chip.NOT_RESPONDING
    assert chip_for(_facts(turn_open=True, last_message_at=None), NOW) is Chip.WORKING


def test_working_lasts_two_minutes_after_the_turn_ends() -> None:
    just = _facts(last_turn_ended_at=NOW - timedelta(seconds=119))
    later = _facts(last_turn_ended_at=NOW - timedelta(seconds=121))
    assert chip_for(just, NOW) is Chip.WORKING
    assert chip_for(later, NOW) is Chip.IDLE


def test_away_after_30_minutes_without_a_message_otherwise_idle() -> None:
    assert chip_for(_facts(last_message_at=None), NOW) is Chip.AWAY
    assert chip_for(_facts(last_message_at=NOW - timedelta(minutes=30)), NOW) is Chip.AWAY
    assert chip_for(_facts(last_message_at=NOW - timedelta(minutes=29)), NOW) is Chip.IDLE


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
    assert _chips()["backend"] == "Idle"
    Agent.objects.filter(pk=backend.agent.pk).update(runtime_generation=99)  # a newer runtime
    assert _chips()["backend"] == "Away"


@pytest.mark.django_db
def test_a_connection_of_a_dead_broker_process_shows_away(lead: AgentClient) -> None:
    connect(lead.agent)
    lead.send("lead", "note to self", "r1")
    assert _chips()["lead"] == "Idle"
    BrokerProcess.objects.update(last_seen_at=timezone.now() - timedelta(hours=1))
    assert _chips()["lead"] == "Away"


@pytest.mark.django_db
def test_resting_wins_over_everything(lead: AgentClient) -> None:
    connect(lead.agent)
    WorkStretch.objects.create(agent=lead.agent, started_at=timezone.now())
    Agent.objects.filter(pk=lead.agent.pk).update(resting=True)
    assert _chips()["lead"] == "Resting"


@pytest.mark.django_db
def test_not_responding_when_notified_messages_stay_unacknowledged(
    lead: AgentClient, backend: AgentClient
) -> None:
    connect(lead.agent)
    connect(backend.agent)
    lead.send("backend", "please look", "r1")
    WorkStretch.objects.create(agent=backend.agent, started_at=timezone.now())
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
    WorkStretch.objects.filter(agent=lead.agent).update(
        started_at=timezone.now() - timedelta(minutes=10),
        ended_at=timezone.now() - timedelta(minutes=3),
    )
    assert _chips()["lead"] == "Away"


@pytest.mark.django_db
def test_away_once_the_last_message_is_30_minutes_old(
    lead: AgentClient, backend: AgentClient
) -> None:
    connect(lead.agent)
    lead.send("backend", "hi", "r1")
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

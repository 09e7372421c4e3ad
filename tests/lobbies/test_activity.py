"""Who is doing what: the one precedence, msg presence, and watch_agents' coalesced events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import get_args

import pytest
import time_machine
from django.utils import timezone

from lobbies.activity import Activity, ActivityFacts, activity_of
from lobbies.api import answers
from lobbies.models import AgentActivity, BrokerProcess, Host
from lobbies.push import activity_timer, presentation
from pocolobby.bridge.pane import activity_line
from tests.board.dashboard_helpers import connect
from tests.conftest import AgentClient

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)

# (case, facts beyond a connected agent that sent a message 5 minutes ago, state, since)
CASES = [
    ("resting wins over all", dict(resting=True, unseen_notified=2, turn_started_at=NOW), "resting", None),  # noqa: E501
    ("no bridge, no msg: away", dict(connected=False, turn_started_at=NOW), "away", None),
    ("no bridge, msg 10 min ago: present", dict(connected=False, msg_seen_at=NOW - 10 * MIN), "idle", NOW - 5 * MIN),  # noqa: E501
    ("no bridge, msg 31 min ago: away", dict(connected=False, msg_seen_at=NOW - 31 * MIN), "away", NOW - MIN),  # noqa: E501
    ("unseen notified beats a turn", dict(unseen_notified=1, oldest_unseen_notified_at=NOW - 3 * MIN, turn_started_at=NOW), "not_responding", NOW - 3 * MIN),  # noqa: E501
    ("an open turn", dict(turn_started_at=NOW - 7 * MIN, last_message_at=None), "working", NOW - 7 * MIN),  # noqa: E501
    ("a turn ended 119 s ago", dict(turn_started_at=NOW - 9 * MIN, turn_ended_at=NOW - timedelta(seconds=119)), "working", NOW - 9 * MIN),  # noqa: E501
    ("a turn ended 3 min ago", dict(turn_started_at=NOW - 9 * MIN, turn_ended_at=NOW - 3 * MIN), "idle", NOW - MIN),  # noqa: E501
    ("no sign for 30 min", dict(last_message_at=NOW - 30 * MIN), "away", NOW),
    ("never a sign", dict(last_message_at=None), "away", None),
    ("a message 29 min ago", dict(last_message_at=NOW - 29 * MIN), "idle", NOW - 29 * MIN),
]  # fmt: skip


def test_one_precedence_answers_every_case() -> None:
    for case, changes, state, since in CASES:
        facts = ActivityFacts(
            **{"resting": False, "connected": True, "last_message_at": NOW - 5 * MIN, **changes}
        )
        found = activity_of(facts, NOW)
        assert (found.activity.value, found.since) == (state, since), case


def test_the_typed_answers_name_every_state_and_host() -> None:
    assert set(get_args(answers.ActivityName)) == {a.value for a in Activity}
    assert set(get_args(answers.HostName)) == set(Host.values)


def _entry(viewer: AgentClient, agent_id: str) -> dict:
    return {a["agent_id"]: a for a in viewer.ok("list_agents")["agents"]}[agent_id]


def _turn(agent: AgentClient, event: str, host: str = "claude-code") -> None:
    response = agent.client.post(
        "/v1/turns",
        {"event": event, "host": host},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent.token}",
    )
    assert response.status_code == 200, response.content


@pytest.mark.django_db
def test_an_agent_using_msg_is_active_through_msg_not_away(
    lead: AgentClient, backend: AgentClient
) -> None:
    connect(lead.agent)
    AgentActivity.objects.filter(agent=lead.agent).update(msg_seen_at=None)
    before = _entry(lead, "backend")
    assert (before["activity"], before["host"], before["through_msg"]) == ("away", None, False)
    backend.send("lead", "done with the migration", "m-1")  # `pocolobby msg send`
    after = _entry(lead, "backend")
    assert after["connected"] is False and after["transport"] == "none"
    assert (after["activity"], after["host"], after["through_msg"]) == ("idle", "msg", True)


@pytest.mark.django_db
def test_turns_from_the_hooks_are_the_agents_activity_with_its_host(
    lead: AgentClient, backend: AgentClient
) -> None:
    connect(backend.agent)
    _turn(backend, "start")
    entry = _entry(lead, "backend")
    assert (entry["activity"], entry["host"]) == ("working", "claude-code")
    assert entry["activity_since"] is not None


def _watch(agent: AgentClient, **arguments) -> tuple[int, dict]:
    return agent.call("watch_agents", **arguments)


@pytest.mark.django_db
def test_watch_agents_needs_manage_rooms(lead: AgentClient, backend: AgentClient) -> None:
    status, body = _watch(backend)
    assert status == 403 and body["error"]["code"] == "permission_required", body
    listed = backend.client.get("/v1/tools", HTTP_AUTHORIZATION=f"Bearer {backend.token}")
    assert "watch_agents" not in [t["name"] for t in listed.json()["tools"]]
    assert _watch(lead, agent_ids=["backend"]) == (
        200,
        {"every_agent": False, "watching": ["backend"]},
    )
    assert _watch(lead)[1] == {"every_agent": True, "watching": None}
    assert _watch(lead, on=False)[1] == {"every_agent": False, "watching": None}
    status, body = _watch(lead, agent_ids=["nobody"])
    assert status == 400 and "nobody" in body["error"]["message"]


def _tick(at: datetime) -> list[tuple[int, dict]]:
    activity_timer._last_read.clear()
    BrokerProcess.objects.update(last_seen_at=at)  # this process stays alive meanwhile
    with time_machine.travel(at, tick=False):
        return activity_timer.run_activity(timezone.now())


@pytest.mark.django_db
def test_activity_events_are_coalesced_like_receipts_and_never_about_the_watcher(
    make_agent, lead: AgentClient
) -> None:
    workers = [make_agent(f"w{n:02d}") for n in range(22)]
    start = timezone.now()
    connect(lead.agent)
    for worker in workers:
        connect(worker.agent)
    assert _watch(lead)[0] == 200
    assert _tick(start) == []  # watching starts: the present is in list_agents, not pushed

    with time_machine.travel(start + timedelta(seconds=1), tick=False):
        _turn(workers[0], "start")
        _turn(lead, "start")  # the watcher's own change is never its event
    pushes = _tick(start + timedelta(seconds=2))
    assert pushes == [
        (
            lead.agent.pk,
            {
                "type": "agent.activity",
                "changes": [
                    {
                        "agent_id": "w00",
                        "activity": "working",
                        "since": (start + timedelta(seconds=1))
                        .isoformat(timespec="milliseconds")
                        .replace("+00:00", "Z"),
                    }
                ],
            },
        )
    ]

    with time_machine.travel(start + timedelta(seconds=3), tick=False):
        for worker in workers:
            _turn(worker, "start" if worker is not workers[0] else "end")
    assert _tick(start + timedelta(seconds=4)) == []  # within 30 s of the last event
    pushes = _tick(start + timedelta(seconds=33))
    assert len(pushes) == 1
    changes = pushes[0][1]["changes"]
    assert len(changes) == 20  # at most 20 in one
    assert all(set(c) == {"agent_id", "activity", "since"} for c in changes)
    rest = _tick(start + timedelta(seconds=64))[0][1]["changes"]
    # w00 ended its turn but shows working for two minutes more: 21 changed, 20 went first
    assert len(rest) == 1 and not {c["agent_id"] for c in rest} & {c["agent_id"] for c in changes}

    shown = presentation.activity_notice("lead", "my-team", changes[:2])
    assert "No reply needed" in shown.content
    assert activity_line(changes[:2]).startswith("# pocolobby: activity: w")
    assert activity_line([{"agent_id": "x; rm -rf /", "activity": "working"}]) == (
        "# pocolobby: activity: changes - a fact for you, no reply needed (list_agents has more)"
    )

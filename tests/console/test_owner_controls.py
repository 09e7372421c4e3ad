"""Issue 16's owner controls on the lobby settings page: each calls the same lobbies action
as the CLI and the admin API, audited with the owner's account as the actor; refused plainly
(nothing changed) for a viewer, a foreign origin, an unknown agent or a bad field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from console.models import DashboardViewer, LobbyOwner
from lobbies.api.catalog import catalog_for
from lobbies.models import Agent, AgentActivity, AuditEvent, Delivery, Lobby, Message, Schedule
from tests.console.conftest import post_json
from tests.console.test_local_operator import operator_browser
from tests.console.test_settings import signed_in_on


@pytest.fixture
def owner_browser(hosted, lobby, lead, backend, make_account):
    owner = make_account("owner@example.com")
    LobbyOwner.objects.create(lobby=lobby, account=owner, created_at=timezone.now())
    return signed_in_on(lobby, "owner@example.com", make_account)


def ok(client, path: str, body: dict) -> dict:
    answer = post_json(client, path, body)
    assert answer.status_code == 200, answer.content
    return answer.json()


def audited(action: str) -> AuditEvent:
    event = AuditEvent.objects.filter(action=action).latest("pk")
    assert (event.actor_kind, event.account) == ("account", "owner@example.com")
    return event


def test_the_owner_rests_and_resumes_an_agent(owner_browser):
    body = ok(owner_browser, "/settings/agents/rest", {"agent": "backend", "rest": True})
    assert body["message"] == "backend is resting: nothing is pushed to it"
    assert Agent.objects.get(agent_id="backend").resting is True
    assert audited("agents_rested").detail == {"rest": True, "at": None}
    page = owner_browser.get("/settings").content.decode()
    assert "Resume backend" in page and "Resting: nothing is pushed" in page
    ok(owner_browser, "/settings/agents/rest", {"agent": "backend", "rest": False})
    assert Agent.objects.get(agent_id="backend").resting is False


def test_the_owner_retries_notifications_of_a_spent_budget(owner_browser, backend):
    Agent.objects.filter(pk=backend.agent.pk).update(
        notification_attention_required=True, notify_attempts=9, notify_next_at=None
    )
    assert "retry budget is spent" in owner_browser.get("/settings").content.decode()
    ok(owner_browser, "/settings/agents/retry-notifications", {"agent": "backend"})
    row = Agent.objects.get(pk=backend.agent.pk)
    assert (row.notification_attention_required, row.notify_attempts) == (False, 0)
    assert audited("notifications_retried").agent_id == "backend"


def test_the_owner_changes_permissions(owner_browser, backend):
    body = ok(
        owner_browser,
        "/settings/agents/permissions",
        {"agent": "backend", "broadcast": True, "manage_rooms": False},
    )
    assert body["message"] == "saved the permissions of backend: broadcast"
    row = Agent.objects.get(pk=backend.agent.pk)
    assert (row.broadcast, row.manage_rooms) == (True, False)
    assert audited("permissions_changed").detail == {"broadcast": True, "manage_rooms": False}


def _schedule(lead, content: str) -> int:
    """lead's timed message to backend, sent before the test switches to hosted hosts."""
    later = (timezone.now() + timedelta(hours=2)).isoformat()
    return int(lead.send("backend", content, "s-1", deliver_at=later)["message_id"])


@pytest.fixture
def scheduled(lobby, lead, backend) -> int:
    one = _schedule(lead, "deploy <b>tonight</b>")
    lead.ok(
        "schedule_message",
        to="backend",
        content="standup",
        client_request_id="d-1",
        time_zone="UTC",
        times=["09:00"],
    )
    return one


def test_the_owner_cancels_what_an_agent_scheduled(scheduled, owner_browser):
    one = scheduled
    page = owner_browser.get("/settings").content.decode()
    assert "1 scheduled message, 1 daily schedule" in page
    assert "deploy &lt;b&gt;tonight&lt;/b&gt;" in page  # what an agent wrote, escaped
    body = ok(owner_browser, "/settings/agents/cancel-scheduled", {"agent": "lead"})
    assert (body["messages"], body["schedules"]) == (1, 1)
    assert Message.objects.get(pk=one).cancelled_at is not None
    assert Schedule.objects.get().status == "cancelled"
    assert audited("scheduled_cancelled").detail == {"messages": 1, "schedules": 1}


def test_the_owner_cancels_any_scheduled_message_in_the_lobby(scheduled, owner_browser):
    one = scheduled
    ok(owner_browser, "/settings/scheduled/cancel", {"message_id": one})
    assert Delivery.objects.get(message_id=one).held_reason == "cancelled"
    assert audited("scheduled_cancelled").detail == {"message_id": one}
    assert f'data-scheduled="{one}"' not in owner_browser.get("/settings").content.decode()


def test_the_owner_pauses_and_resumes_the_lobbys_delivery(owner_browser, lobby):
    body = ok(owner_browser, "/settings/delivery", {"paused": True})
    assert body["message"] == "delivery is paused: sends queue, nothing is pushed"
    assert Lobby.objects.get(pk=lobby.pk).delivery_paused is True
    audited("delivery_paused")
    assert 'data-delivery="paused"' in owner_browser.get("/settings").content.decode()
    ok(owner_browser, "/settings/delivery", {"paused": False})
    assert Lobby.objects.get(pk=lobby.pk).delivery_paused is False
    audited("delivery_resumed")


def test_the_owner_lets_every_agent_watch_and_withdraws_it(owner_browser, lobby, backend):
    def tools() -> set[str]:
        agent = Agent.objects.select_related("lobby").get(pk=backend.agent.pk)
        return {tool["name"] for tool in catalog_for(agent)["tools"]}

    assert Agent.objects.get(pk=backend.agent.pk).manage_rooms is False
    assert "watch_agents" not in tools()
    body = ok(owner_browser, "/settings/watching", {"allowed": True})
    assert body["message"] == "every agent may now watch the others (watch_agents)"
    assert Lobby.objects.get(pk=lobby.pk).agents_may_watch is True
    audited("watching_allowed")
    assert 'data-watching="every agent"' in owner_browser.get("/settings").content.decode()
    assert "watch_agents" in tools()
    AgentActivity.objects.update_or_create(agent=backend.agent, defaults={"watching": []})

    ok(owner_browser, "/settings/watching", {"allowed": False})
    audited("watching_withdrawn")
    assert "watch_agents" not in tools()
    assert AgentActivity.objects.get(agent=backend.agent).watching is None  # stopped watching


def test_the_local_operator_has_the_same_controls(lobby, lead, backend):
    client = operator_browser()
    answer = post_json(client, "/my-team/settings/agents/rest", {"agent": "backend", "rest": True})
    assert answer.status_code == 200, answer.content
    event = AuditEvent.objects.filter(action="agents_rested").latest("pk")
    assert event.actor_kind == "operator"


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/settings/agents/rest", {"agent": "ghost", "rest": True}, 404, "unknown_agent"),
        ("/settings/agents/rest", {"agent": "owner", "rest": True}, 404, "unknown_agent"),
        ("/settings/agents/rest", {"agent": "backend", "rest": "yes"}, 400, "invalid_field"),
        ("/settings/agents/permissions", {"agent": "backend", "broadcast": True}, 400, None),
        ("/settings/scheduled/cancel", {"message_id": 999999}, 404, "unknown_message"),
        ("/settings/delivery", {"paused": True, "extra": 1}, 400, "invalid_field"),
        ("/settings/watching", {"allowed": "yes"}, 400, "invalid_field"),
    ],
)
def test_bad_requests_are_refused_and_change_nothing(owner_browser, path, body, status, code):
    before = AuditEvent.objects.count()
    answer = post_json(owner_browser, path, body)
    assert answer.status_code == status, answer.content
    if code:
        assert answer.json()["error"]["code"] == code
    assert answer.json()["error"]["message"]
    assert AuditEvent.objects.count() == before
    assert not Agent.objects.filter(resting=True).exists()


def test_a_viewer_and_a_foreign_origin_are_refused(owner_browser, lobby, make_account):
    answer = post_json(
        owner_browser, "/settings/delivery", {"paused": True}, origin="https://evil.example"
    )
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "bad_origin"
    DashboardViewer.objects.create(lobby=lobby, email="see@example.com", created_at=timezone.now())
    viewer = signed_in_on(lobby, "see@example.com", make_account, settings=False)
    answer = post_json(viewer, "/settings/agents/rest", {"agent": "backend", "rest": True})
    assert answer.status_code in (403, 404)
    assert Lobby.objects.get(pk=lobby.pk).delivery_paused is False
    assert not Agent.objects.filter(resting=True).exists()
    assert not AuditEvent.objects.filter(action__in=["agents_rested", "delivery_paused"]).exists()

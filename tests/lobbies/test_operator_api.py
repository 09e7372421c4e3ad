from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from lobbies.actions.runtime import RuntimeConflict, claim_runtime, wait_for_hand_over
from lobbies.models import Agent, AuditEvent, Credential, Delivery, Lobby, Message

ADMIN = {"HTTP_AUTHORIZATION": "Bearer pla_test-admin-token"}


def admin(method: str, path: str, body: dict | None = None):
    client = Client()
    kwargs = {"data": json.dumps(body), "content_type": "application/json"} if body else {}
    return getattr(client, method)(f"/v1/admin{path}", **kwargs, **ADMIN)


@pytest.fixture
def team(db):
    assert admin("post", "/lobbies", {"name": "my-team"}).status_code == 201


def test_the_admin_token_is_required(db):
    response = Client().get("/v1/admin/lobbies", HTTP_AUTHORIZATION="Bearer pla_wrong")
    assert response.status_code == 401
    assert Client().get("/v1/admin/lobbies").status_code == 401


def test_lobbies_are_created_listed_and_deleted_for_good(team):
    assert [lb["name"] for lb in admin("get", "/lobbies").json()["lobbies"]] == ["my-team"]
    assert admin("post", "/lobbies", {"name": "my-team"}).json()["error"]["code"] == "lobby_exists"
    assert admin("delete", "/lobbies/my-team").status_code == 200
    assert not Lobby.objects.exists()
    again = admin("post", "/lobbies", {"name": "my-team"})
    assert (again.status_code, again.json()["error"]["code"]) == (409, "lobby_name_retired")
    actions = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["lobby_created", "lobby_deleted"]


@pytest.mark.parametrize("name", ["settings", "v1", "Bad_Name", "-x", "", "a" * 41])
def test_reserved_and_malformed_lobby_names_are_refused(db, name):
    response = admin("post", "/lobbies", {"name": name})
    assert response.status_code == 400
    assert response.json()["error"]["code"] in {"reserved_name", "invalid_name"}
    assert not Lobby.objects.exists()


def test_adding_an_agent_returns_its_token_once_and_stores_a_hash(team):
    response = admin(
        "post",
        "/lobbies/my-team/agents",
        {"agent_id": "backend", "description": "API work", "manage_rooms": True},
    )
    assert response.status_code == 201
    token = response.json()["token"]
    assert token.startswith("plt_") and len(token) > 40
    assert not Credential.objects.filter(token_hash=token).exists()
    listing = admin("get", "/lobbies/my-team/agents").json()["agents"]
    assert listing[0]["agent_id"] == "backend" and "token" not in json.dumps(listing).lower()
    event = AuditEvent.objects.get(action="agent_added")
    assert (event.actor_kind, event.agent_id, event.detail["manage_rooms"]) == (
        "operator",
        "backend",
        True,
    )


def test_an_unknown_lobby_or_agent_is_404(team):
    assert admin("get", "/lobbies/nope/agents").json()["error"]["code"] == "unknown_lobby"
    response = admin("post", "/lobbies/my-team/agents/ghost/disable")
    assert (response.status_code, response.json()["error"]["code"]) == (404, "unknown_agent")


def test_disable_holds_undelivered_copies_visibly(lead, backend):
    sent = lead.send("backend", "m", "r-1")
    response = admin("post", "/lobbies/my-team/agents/backend/disable")
    assert response.json()["held"] == 1
    delivery = Delivery.objects.get(message_id=sent["message_id"])
    assert (delivery.state, delivery.held_reason) == ("held", "recipient_disabled")
    facts = lead.ok("get_messages", view="history")["messages"][0]["recipients"][0]
    assert facts["delivery_state"] == "held" and facts["held_reason"] == "recipient_disabled"
    status = admin("get", "/status?lobby=my-team").json()["lobbies"][0]["agents"]
    assert {a["agent_id"]: a["enabled"] for a in status} == {"backend": False, "lead": True}


def test_remove_keeps_messages_the_agent_sent(lead, backend):
    lead.send("backend", "to be kept", "r-1")
    backend.send("lead", "from a leaving agent", "r-2")
    assert admin("delete", "/lobbies/my-team/agents/backend").status_code == 200
    kept = Message.objects.get(sender_name="backend")
    assert kept.sender is None
    assert [m["content"] for m in lead.ok("get_messages")["messages"]] == ["from a leaving agent"]


def test_reset_runtime_is_audited(backend):
    response = admin("post", "/lobbies/my-team/agents/backend/reset-runtime")
    assert response.status_code == 200
    assert AuditEvent.objects.filter(action="runtime_reset", agent_id="backend").exists()


def test_an_unknown_agent_action_is_404(backend):
    response = admin("post", "/lobbies/my-team/agents/backend/promote")
    assert response.json()["error"]["code"] == "unknown_action"


def test_disabling_twice_says_so_and_changes_nothing(backend):
    assert admin("post", "/lobbies/my-team/agents/backend/disable").status_code == 200
    again = admin("post", "/lobbies/my-team/agents/backend/disable")
    assert (again.status_code, again.json()["error"]["code"]) == (409, "already_disabled")
    enabled = admin("post", "/lobbies/my-team/agents/backend/enable")
    assert enabled.status_code == 200
    twice = admin("post", "/lobbies/my-team/agents/backend/enable")
    assert twice.json()["error"]["code"] == "already_enabled"
    actions = AuditEvent.objects.filter(agent_id="backend").values_list("action", flat=True)
    assert sorted(actions) == ["agent_added", "agent_disabled", "agent_enabled"]


def test_the_operator_rests_and_resumes_an_agent(backend):
    rested = admin("post", "/lobbies/my-team/agents/backend/rest")
    assert rested.json() == {"agent": "backend", "resting": True}
    assert Agent.objects.get(agent_id="backend").resting
    assert admin("post", "/lobbies/my-team/agents/backend/resume").json()["resting"] is False
    assert not Agent.objects.get(agent_id="backend").resting
    events = AuditEvent.objects.filter(action="agents_rested", actor_kind="operator")
    assert [e.detail["rest"] for e in events.order_by("id")] == [True, False]


def test_retry_notifications_gives_a_fresh_budget(backend):
    Agent.objects.filter(agent_id="backend").update(
        notification_attention_required=True, notify_attempts=5
    )
    assert admin("post", "/lobbies/my-team/agents/backend/retry-notifications").status_code == 200
    agent = Agent.objects.get(agent_id="backend")
    assert not agent.notification_attention_required and agent.notify_attempts == 0
    assert AuditEvent.objects.filter(action="notifications_retried").exists()


def test_permissions_are_granted_withdrawn_and_checked(backend):
    path = "/lobbies/my-team/agents/backend/permissions"
    granted = admin("post", path, {"broadcast": True})
    assert granted.json() == {"agent": "backend", "broadcast": True, "manage_rooms": False}
    same = admin("post", path, {"broadcast": True})
    assert (same.status_code, same.json()["error"]["code"]) == (409, "permissions_unchanged")
    bad = admin("post", path, {"broadcast": "yes please"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_arguments")
    assert Agent.objects.get(agent_id="backend").broadcast
    assert AuditEvent.objects.filter(action="permissions_changed").count() == 1


def test_status_takes_only_the_lobby_its_document_lists(team):
    """`?lobby=` is parsed with the query model the OpenAPI document shows; nothing else."""
    assert admin("get", "/status?lobby=").status_code == 200
    assert admin("get", "/status?lobby=nobody").json()["error"]["code"] == "unknown_lobby"
    response = admin("get", "/status?lobbby=my-team")
    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_arguments")
    assert "lobbby" in response.json()["error"]["message"]


def test_hand_over_admits_the_waiting_conversation_and_needs_the_admin_token(backend):
    holder, waiting = str(uuid.uuid4()), str(uuid.uuid4())
    claim_runtime(backend.agent, holder, None)
    Agent.objects.filter(pk=backend.agent.pk).update(runtime_first_ready_at=timezone.now())
    for first_ask_ago in (5, 0):  # its bridge asks, and asks again
        with pytest.raises(RuntimeConflict) as refused:
            claim_runtime(backend.agent, waiting, None)
        wait_for_hand_over(refused.value)
        if first_ask_ago:
            Agent.objects.filter(pk=backend.agent.pk).update(
                waiting_since=timezone.now() - timedelta(seconds=first_ask_ago)
            )
    (entry,) = admin("get", "/status?lobby=my-team").json()["lobbies"][0]["agents"]
    assert entry["waiting"]["runtime_id"] == waiting
    path = "/v1/admin/lobbies/my-team/agents/backend/hand-over"
    as_agent = Client().post(path, HTTP_AUTHORIZATION=f"Bearer {backend.token}")
    assert as_agent.status_code == 401
    assert not AuditEvent.objects.filter(action="runtime_handed_over").exists()
    response = admin("post", "/lobbies/my-team/agents/backend/hand-over")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "agent": "backend",
        "runtime_id": waiting,
        "retired_runtime_id": holder,
    }
    assert AuditEvent.objects.filter(action="runtime_handed_over", actor_kind="operator").exists()
    again = admin("post", "/lobbies/my-team/agents/backend/hand-over")
    assert (again.status_code, again.json()["error"]["code"]) == (409, "nothing_waiting")

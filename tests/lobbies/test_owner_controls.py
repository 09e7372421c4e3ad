"""Owner controls through the admin API, each with its audit row."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from lobbies.access.secret_files import admin_token
from lobbies.models import Agent, AuditEvent, Delivery, Lobby, Message, Schedule
from lobbies.push import frames


def admin(path: str, body: dict | None = None) -> tuple[int, dict]:
    response = Client().post(
        f"/v1/admin/lobbies/my-team{path}",
        data=json.dumps(body or {}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {admin_token(settings.DATA_DIR)}",
    )
    return response.status_code, response.json()


def audited(action: str) -> AuditEvent:
    return AuditEvent.objects.filter(action=action).latest("id")


def test_permissions_change_after_add_and_take_effect(lead, backend):
    status, body = backend.call("broadcast", content="all hands", client_request_id="b-1")
    assert (status, body["error"]["code"]) == (403, "permission_required")

    status, body = admin("/agents/backend/permissions", {"broadcast": True})

    assert (status, body) == (200, {"agent": "backend", "broadcast": True, "manage_rooms": False})
    assert backend.call("broadcast", content="all hands", client_request_id="b-1")[0] == 200
    assert audited("permissions_changed").detail == {"broadcast": True, "manage_rooms": False}
    status, body = admin("/agents/backend/permissions", {"broadcast": "maybe"})
    assert (status, body["error"]["code"]) == (400, "invalid_arguments")
    assert Agent.objects.get(agent_id="backend").broadcast is True


def test_rest_and_resume_set_the_state_rest_agents_sets(lead, backend):
    assert admin("/agents/backend/rest") == (200, {"agent": "backend", "resting": True})
    assert Agent.objects.get(agent_id="backend").resting is True
    assert audited("agents_rested").detail == {"rest": True, "at": None}
    assert admin("/agents/backend/resume")[0] == 200
    assert Agent.objects.get(agent_id="backend").resting is False


def test_retry_notifications_gives_a_spent_budget_a_fresh_start(lead, backend):
    Agent.objects.filter(pk=backend.agent.pk).update(
        notification_attention_required=True, notify_attempts=9, notify_next_at=None
    )
    status, body = admin("/agents/backend/retry-notifications")
    assert (status, body) == (200, {"retried": "backend"})
    row = Agent.objects.get(pk=backend.agent.pk)
    assert (row.notification_attention_required, row.notify_attempts) == (False, 0)
    assert row.notify_next_at is not None
    assert audited("notifications_retried").agent_id == "backend"


def test_cancel_an_agents_scheduled_messages_and_schedules(lead, backend):
    later = (timezone.now() + timedelta(hours=2)).isoformat()
    one = lead.send("backend", "later", "s-1", deliver_at=later)["message_id"]
    lead.ok(
        "schedule_message",
        to="backend",
        content="standup",
        client_request_id="d-1",
        time_zone="UTC",
        times=["09:00"],
    )
    status, body = admin("/agents/lead/cancel-scheduled")
    assert (status, body) == (200, {"agent": "lead", "messages": 1, "schedules": 1})
    assert Message.objects.get(pk=one).cancelled_at is not None
    assert Delivery.objects.get(message_id=one).held_reason == "cancelled"
    assert Schedule.objects.get().status == "cancelled"
    assert audited("scheduled_cancelled").detail == {"messages": 1, "schedules": 1}


def test_the_owner_cancels_any_scheduled_message_in_the_lobby(lead, backend):
    later = (timezone.now() + timedelta(hours=2)).isoformat()
    one = backend.send("lead", "later", "s-2", deliver_at=later)["message_id"]
    status, body = admin("/cancel-scheduled", {"message_id": one})
    assert (status, body) == (200, {"message_id": one, "status": "cancelled"})
    assert audited("scheduled_cancelled").detail == {"message_id": one}
    status, body = admin("/cancel-scheduled", {"message_id": 999999})
    assert (status, body["error"]["code"]) == (404, "unknown_message")


def test_a_paused_lobby_queues_sends_and_pushes_nothing_until_resumed(lead, backend):
    Agent.objects.filter(pk=backend.agent.pk).update(
        runtime_id="0f0e0d0c-0b0a-4909-8807-060504030201", runtime_generation=1
    )
    assert admin("/delivery", {"paused": True}) == (
        200,
        {"lobby": "my-team", "delivery_paused": True},
    )
    sent = lead.send("backend", "during maintenance", "p-1")["message_id"]
    assert frames.push_frame(backend.agent.pk, 1) is None
    assert Delivery.objects.get(message_id=sent).state == "pending"
    assert audited("delivery_paused").lobby_name == "my-team"

    assert admin("/delivery", {"paused": False})[0] == 200
    frame = frames.push_frame(backend.agent.pk, 1)
    assert frame is not None and frame["message_ids"] == [sent]
    assert Lobby.objects.get(name="my-team").delivery_paused is False
    assert audited("delivery_resumed").lobby_name == "my-team"


@pytest.mark.parametrize("path", ["/agents/ghost/rest", "/agents/ghost/permissions"])
def test_unknown_agents_are_named(lead, path):
    status, body = admin(path, {})
    assert (status, body["error"]["code"]) == (404, "unknown_agent")


def test_the_operators_answer_to_a_question_is_audited_once_and_idempotent(lead, backend):
    """`pocolobby lobby reply`'s route: the asker receives it with reply_to, one audit row
    (actor operator) however often it is retried; reply_to and to, or neither, is refused."""
    asked = lead.send("owner", "may I ship?", "q-1", kind="question")["message_id"]
    body = {"reply_to": asked, "content": "ship it", "client_request_id": "op-1"}

    status, first = admin("/owner-messages", body)
    assert status == 200, first
    assert (first["to"], first["reply_to"], first["duplicate"]) == ("lead", asked, False)
    status, again = admin("/owner-messages", body)
    assert (status, again["message_id"], again["duplicate"]) == (200, first["message_id"], True)

    reply = Message.objects.get(pk=first["message_id"])
    assert (reply.sender_name, reply.reply_to) == ("owner", asked)
    event = AuditEvent.objects.get(action="owner_message_sent")
    assert (event.actor_kind, event.target) == ("operator", "lead")
    assert event.detail["message_id"] == reply.pk
    for both_or_neither in ({**body, "to": "lead"}, {"content": "x", "client_request_id": "n"}):
        status, refused = admin("/owner-messages", both_or_neither)
        assert (status, refused["error"]["code"]) == (400, "invalid_arguments")
    assert Message.objects.filter(sender_name="owner").count() == 1

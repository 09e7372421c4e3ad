from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from lobbies.actions import operator
from lobbies.actions.operator import disable_agent
from lobbies.fastlane.queries import RECIPIENT_QUEUE
from lobbies.models import Delivery, Message
from pocolobby.config import Bounds
from tests.conftest import AgentClient


def test_send_is_stored_with_sender_from_the_credential(lead: AgentClient, backend: AgentClient):
    result = lead.send("backend", "Review the auth change", "r-1", priority="important")
    assert result["status"] == "stored"
    assert [r["agent_id"] for r in result["recipients"]] == ["backend"]
    assert result["recipients"][0]["delivery_state"] == "pending"
    message = Message.objects.get(pk=result["message_id"])
    assert message.sender_id == lead.agent.pk and message.sender_name == "lead"
    assert message.priority == "important" and message.sequence == 1
    assert Delivery.objects.get(message=message).recipient_id == backend.agent.pk


def test_a_client_supplied_sender_is_refused(lead: AgentClient, backend: AgentClient):
    status, body = lead.call(
        "send_message", to="backend", content="hi", client_request_id="r-1", **{"from": "backend"}
    )
    assert status == 400
    assert "unknown argument 'from'" in body["error"]["message"]
    assert Message.objects.count() == 0


def test_sequences_are_per_lobby_and_increase(lead: AgentClient, backend: AgentClient):
    first = lead.send("backend", "one", "r-1")
    second = backend.send("lead", "two", "r-2")
    assert (first["sequence"], second["sequence"]) == (1, 2)


def test_sending_to_yourself_is_an_ordinary_direct_message(lead: AgentClient):
    result = lead.send("lead", "note to self", "self-1")
    assert [r["agent_id"] for r in result["recipients"]] == ["lead"]
    inbox = lead.ok("get_messages")
    assert [m["content"] for m in inbox["messages"]] == ["note to self"]


def test_unknown_recipient_is_refused_and_nothing_stored(lead: AgentClient):
    status, body = lead.call("send_message", to="ghost", content="hi", client_request_id="r-1")
    assert (status, body["error"]["code"]) == (404, "unknown_recipient")
    assert "ghost" in body["error"]["message"]
    assert Message.objects.count() == 0


def test_disabled_recipient_is_refused(lead: AgentClient, backend: AgentClient):
    operator.disable_agent("my-team", "backend")
    status, body = lead.call("send_message", to="backend", content="hi", client_request_id="r-1")
    assert (status, body["error"]["code"]) == (409, "recipient_disabled")
    assert Message.objects.count() == 0


def test_an_agent_of_another_lobby_is_not_addressable(make_agent, lead: AgentClient):
    operator.create_lobby("other-team")
    make_agent("stranger", lobby_name="other-team")
    status, body = lead.call("send_message", to="stranger", content="hi", client_request_id="r")
    assert (status, body["error"]["code"]) == (404, "unknown_recipient")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (None, False),
        ("notice", False),
        ("report", False),
        ("request", True),
        ("assignment", True),
        ("question", True),
    ],
)
def test_reply_expected_defaults_by_kind(lead, backend, kind, expected):
    options = {"kind": kind} if kind else {}
    result = lead.send("backend", "x", f"r-{kind}", **options)
    message = Message.objects.get(pk=result["message_id"])
    assert (message.kind, message.reply_expected) == (kind, expected)


def test_reply_expected_can_be_overridden_but_needs_a_kind(lead, backend):
    result = lead.send("backend", "x", "r-1", kind="notice", reply_expected=True)
    assert Message.objects.get(pk=result["message_id"]).reply_expected is True
    status, body = lead.call(
        "send_message", to="backend", content="x", client_request_id="r-2", reply_expected=True
    )
    assert status == 400 and "needs a kind" in body["error"]["message"]


def test_structured_fields_are_stored_and_bounded(lead, backend):
    fields = {
        "commit": "abc1234",
        "files": ["a.py", "b.py"],
        "evidence": "dropbox:team/run-1",
        "options": ["ship", "wait"],
        "recommendation": "ship",
    }
    result = lead.send("backend", "x", "r-1", kind="question", fields=fields)
    assert Message.objects.get(pk=result["message_id"]).fields == fields

    status, body = lead.call(
        "send_message",
        to="backend",
        content="x",
        client_request_id="r-2",
        fields={"files": [f"f{i}" for i in range(51)]},
    )
    assert status == 400 and "fields.files" in body["error"]["message"]
    status, body = lead.call(
        "send_message", to="backend", content="x", client_request_id="r-3", fields={"colour": "red"}
    )
    assert status == 400 and "unknown argument 'fields.colour'" in body["error"]["message"]
    assert Message.objects.count() == 1


def test_content_over_64_kib_is_refused_naming_the_limit(lead, backend):
    status, body = lead.call(
        "send_message", to="backend", content="é" * 40_000, client_request_id="big"
    )
    assert status == 400
    assert "80000 bytes" in body["error"]["message"] and "65536" in body["error"]["message"]
    assert lead.send("backend", "x" * 65536, "just-fits")["status"] == "stored"


def test_identical_retry_returns_the_original(lead, backend):
    first = lead.send("backend", "deploy", "r-1", kind="assignment")
    again = lead.send("backend", "deploy", "r-1", kind="assignment")
    assert again["message_id"] == first["message_id"] and again["duplicate"] is True
    assert again["recipients"] == first["recipients"]
    assert Message.objects.count() == 1 and Delivery.objects.count() == 1


def test_a_retry_gets_the_original_after_its_recipient_was_disabled(lead, backend):
    first = lead.send("backend", "deploy", "r-1")
    disable_agent(lead.agent.lobby.name, "backend")
    again = lead.send("backend", "deploy", "r-1")
    assert again["message_id"] == first["message_id"] and again["duplicate"] is True
    status, body = lead.call("send_message", to="backend", content="other", client_request_id="r-1")
    assert (status, body["error"]["code"]) == (409, "idempotency_conflict")
    status, body = lead.call("send_message", to="backend", content="new", client_request_id="r-2")
    assert (status, body["error"]["code"]) == (409, "recipient_disabled")
    assert Message.objects.count() == 1


def test_a_changed_request_under_the_same_key_is_refused(lead, backend):
    first = lead.send("backend", "deploy", "r-1")
    status, body = lead.call(
        "send_message", to="backend", content="deploy now", client_request_id="r-1"
    )
    assert (status, body["error"]["code"]) == (409, "idempotency_conflict")
    assert body["error"]["message_id"] == first["message_id"]
    assert Message.objects.count() == 1


def test_two_keys_are_two_messages_even_with_the_same_words(lead, backend):
    a = lead.send("backend", "same words", "r-1")
    b = lead.send("backend", "same words", "r-2")
    assert a["message_id"] != b["message_id"]


def test_the_same_key_from_two_senders_is_two_messages(lead, backend):
    a = lead.send("backend", "x", "shared")
    b = backend.send("lead", "x", "shared")
    assert a["message_id"] != b["message_id"]


def test_send_rate_is_limited_per_agent_with_retry_after(lead, backend):
    with override_settings(BOUNDS=Bounds(sends_per_minute=3)):
        for n in range(3):
            lead.send("backend", "x", f"r-{n}")
        status, body = lead.call("send_message", to="backend", content="x", client_request_id="r")
        assert (status, body["error"]["code"]) == (429, "rate_limited")
        assert 1 <= body["error"]["retry_after"] <= 60
        assert "POCOLOBBY_SENDS_PER_MINUTE" in body["error"]["message"]
        # An identical retry of an accepted send is not a new send.
        assert lead.send("backend", "x", "r-0")["duplicate"] is True
        assert backend.send("lead", "x", "b-1")["status"] == "stored"
    assert Message.objects.count() == 4


def test_recipient_queue_count_capacity_refuses_new_sends(lead, backend):
    with override_settings(BOUNDS=Bounds(queued_messages_per_recipient=2)):
        lead.send("backend", "x", "r-1")
        lead.send("backend", "x", "r-2")
        status, body = lead.call("send_message", to="backend", content="x", client_request_id="r")
        assert (status, body["error"]["code"]) == (507, "recipient_capacity")
        assert "POCOLOBBY_QUEUED_MESSAGES" in body["error"]["message"]
        # Acknowledging frees room; accepted messages were never dropped.
        ids = [m["message_id"] for m in backend.ok("get_messages")["messages"]]
        assert len(ids) == 2
        backend.ok("acknowledge_messages", message_ids=ids[:1])
        assert lead.send("backend", "x", "r-3")["status"] == "stored"


def test_recipient_queued_bytes_capacity_refuses_new_sends(lead, backend):
    with override_settings(BOUNDS=Bounds(queued_bytes_per_recipient=10)):
        lead.send("backend", "12345678", "r-1")
        status, body = lead.call(
            "send_message", to="backend", content="abc", client_request_id="r-2"
        )
        assert (status, body["error"]["code"]) == (507, "recipient_capacity")
        assert "POCOLOBBY_QUEUED_BYTES" in body["error"]["message"]
    assert Message.objects.count() == 1


def test_one_full_recipient_refuses_a_broadcast_to_all(make_agent):
    lead = make_agent("lead", broadcast=True)
    make_agent("backend")
    make_agent("design")
    with override_settings(BOUNDS=Bounds(queued_messages_per_recipient=1)):
        lead.send("design", "x", "r-1")
        status, body = lead.call("broadcast", content="all hands", client_request_id="r-2")
        assert (status, body["error"]["code"]) == (507, "recipient_capacity")
        assert body["error"]["message"].startswith("design already has 1")
    assert Message.objects.count() == 1  # all or nothing


def test_scheduled_copies_take_room_and_final_holds_do_not(lead, backend):
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    with override_settings(BOUNDS=Bounds(queued_messages_per_recipient=2)):
        lead.send("backend", "x", "r-1", deliver_at=later)
        lead.send("backend", "x", "r-2")
        status, body = lead.call("send_message", to="backend", content="x", client_request_id="r")
        assert (status, body["error"]["code"]) == (507, "recipient_capacity")
        Delivery.objects.filter(state="pending").update(state="held", held_reason="removed")
        assert lead.send("backend", "x", "r-3")["status"] == "stored"


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query plan")
@pytest.mark.django_db
def test_the_capacity_count_reads_only_the_queued_index():
    """A recipient's acknowledged history must not slow each send to it (issue 2's bar)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {RECIPIENT_QUEUE}", [1])
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "COVERING INDEX delivery_queued" in plan


def test_reply_to_may_name_an_expired_message_but_not_an_invisible_one(make_agent, lead, backend):
    ops = make_agent("ops")
    private = backend.send("ops", "between us", "p-1")
    assert lead.send("backend", "re: old work", "r-1", reply_to=999_999)["status"] == "stored"
    status, body = lead.call(
        "send_message",
        to="backend",
        content="x",
        client_request_id="r-2",
        reply_to=private["message_id"],
    )
    assert (status, body["error"]["code"]) == (404, "unknown_message")
    answer = ops.send("backend", "re", "o-1", reply_to=private["message_id"])
    assert Message.objects.get(pk=answer["message_id"]).reply_to == private["message_id"]


def test_the_rest_route_and_the_tool_route_share_idempotency(lead, backend):
    via_route = lead.client.post(
        "/v1/messages",
        data=json.dumps({"to": "backend", "content": "x", "client_request_id": "r-1"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {lead.token}",
    ).json()
    via_tool = lead.send("backend", "x", "r-1")
    assert via_tool["message_id"] == via_route["message_id"] and via_tool["duplicate"] is True

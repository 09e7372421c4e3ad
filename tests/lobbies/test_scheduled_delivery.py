"""deliver_at: stored now, invisible until due, delivered by the dispatcher, late if missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import override_settings

from lobbies.actions import operator
from lobbies.models import Delivery, Message
from lobbies.push import frames, timers
from pocolobby.config import Bounds

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


@pytest.fixture
def clock():
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def _at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def test_a_scheduled_send_is_stored_and_invisible_until_due(clock, lead, backend):
    sent = lead.send("backend", "stand up", "r1", deliver_at=_at(30))
    assert sent["status"] == "stored"
    assert sent["recipients"][0]["delivery_state"] == "held"
    assert sent["recipients"][0]["held_reason"] == "scheduled"
    assert backend.ok("get_messages")["messages"] == []
    assert backend.ok("get_messages", view="history")["messages"] == []
    status, body = backend.call("acknowledge_messages", message_ids=[sent["message_id"]])
    assert (status, body["error"]["code"]) == (409, "not_yet_delivered")

    clock.move_to(T0 + timedelta(minutes=30, seconds=1))
    timers.tick()
    inbox = backend.ok("get_messages")["messages"]
    assert [m["content"] for m in inbox] == ["stand up"] and inbox[0]["late"] is False
    assert backend.ok("acknowledge_messages", message_ids=[sent["message_id"]])["acknowledged"]


def test_an_early_acknowledgment_refuses_the_whole_batch(clock, lead, backend):
    now = lead.send("backend", "now", "r1")["message_id"]
    later = lead.send("backend", "later", "r2", deliver_at=_at(10))["message_id"]
    status, _ = backend.call("acknowledge_messages", message_ids=[now, later])
    assert status == 409
    assert Delivery.objects.get(message_id=now).state == "pending"


def test_a_time_missed_while_the_broker_was_down_is_delivered_late(clock, lead, backend):
    lead.send("backend", "reminder", "r1", deliver_at=_at(5))
    clock.move_to(T0 + timedelta(hours=2))  # the broker was down across the time
    timers.tick()
    message = backend.ok("get_messages")["messages"][0]
    assert message["late"] is True


@pytest.mark.parametrize(
    ("when", "expected"),
    [(-1, "in the past"), (60 * 24 * 31, "30 days")],
)
def test_deliver_at_bounds(clock, lead, backend, when, expected):
    status, body = lead.call(
        "send_message", to="backend", content="x", client_request_id="r", deliver_at=_at(when)
    )
    assert (status, body["error"]["code"]) == (400, "invalid_deliver_at")
    assert expected in body["error"]["message"] and not Message.objects.exists()


def test_deliver_at_needs_a_zone(lead, backend):
    status, body = lead.call(
        "send_message",
        to="backend",
        content="x",
        client_request_id="r",
        deliver_at="2030-01-01T09:00:00",
    )
    assert status == 400 and "time zone" in body["error"]["message"]


def test_a_sender_holds_at_most_100_waiting_messages(clock, lead, backend):
    with override_settings(BOUNDS=Bounds(sends_per_minute=1000)):
        for n in range(100):
            lead.send("backend", "x", f"r{n}", deliver_at=_at(10))
        status, body = lead.call(
            "send_message",
            to="backend",
            content="x",
            client_request_id="r-last",
            deliver_at=_at(10),
        )
    assert (status, body["error"]["code"]) == (409, "too_many_scheduled")


def test_list_cancel_and_update(clock, lead, backend):
    sent = lead.send("backend", "draft", "r1", deliver_at=_at(10))
    listed = lead.ok("list_scheduled")["messages"]
    assert [m["message_id"] for m in listed] == [sent["message_id"]]
    lead.ok("update_scheduled", message_id=sent["message_id"], content="final", deliver_at=_at(20))
    clock.move_to(T0 + timedelta(minutes=15))
    timers.tick()
    assert backend.ok("get_messages")["messages"] == []
    clock.move_to(T0 + timedelta(minutes=21))
    timers.tick()
    assert [m["content"] for m in backend.ok("get_messages")["messages"]] == ["final"]
    status, body = lead.call("cancel_scheduled", message_id=sent["message_id"])
    assert (status, body["error"]["code"]) == (409, "already_delivered")


def test_a_cancelled_message_never_arrives_and_cancelling_again_finds_it(clock, lead, backend):
    sent = lead.send("backend", "oops", "r1", deliver_at=_at(10))
    assert lead.ok("cancel_scheduled", message_id=sent["message_id"])["status"] == "cancelled"
    assert lead.ok("cancel_scheduled", message_id=sent["message_id"])["status"] == "cancelled"
    clock.move_to(T0 + timedelta(minutes=11))
    timers.tick()
    assert backend.ok("get_messages")["messages"] == []
    # Held for good: acknowledging records nothing, without refusal.
    result = backend.ok("acknowledge_messages", message_ids=[sent["message_id"]])
    assert result["held_message_ids"] == [sent["message_id"]]


def test_someone_elses_scheduled_message_cannot_be_cancelled(clock, lead, backend):
    sent = lead.send("backend", "x", "r1", deliver_at=_at(10))
    status, body = backend.call("cancel_scheduled", message_id=sent["message_id"])
    assert (status, body["error"]["code"]) == (404, "unknown_message")


def test_disabling_the_recipient_holds_its_scheduled_copies_for_good(clock, lead, backend):
    sent = lead.send("backend", "later", "r-disabled", deliver_at=_at(30))
    operator.disable_agent("my-team", "backend")
    clock.move_to(T0 + timedelta(minutes=31))
    timers.tick()
    copy = Delivery.objects.get(message_id=sent["message_id"])
    assert (copy.state, copy.held_reason) == ("held", "recipient_disabled")
    operator.enable_agent("my-team", "backend")
    timers.tick()
    assert Delivery.objects.get(message_id=sent["message_id"]).state == "held"
    assert backend.ok("get_messages")["messages"] == []


def test_a_scheduled_message_due_after_the_binding_is_pushed_with_its_body(clock, lead, backend):
    from lobbies.actions.runtime import claim_runtime

    waited = lead.send("backend", "was waiting", "r0")["message_id"]
    due = lead.send("backend", "falls due later", "r1", deliver_at=_at(10))["message_id"]
    claim = claim_runtime(backend.agent, "0b9c7a3e-7c2f-4d7e-9a55-3f8f1c0d2e11", None)
    clock.move_to(T0 + timedelta(minutes=10, seconds=1))
    timers.tick()  # delivered after the session bound, though accepted before it
    bootstrap = frames.bootstrap_frame(backend.agent.pk, claim.generation)
    assert bootstrap["message_ids"] == [waited]  # the backlog is what waited at binding
    pushed = frames.push_frame(backend.agent.pk, claim.generation)
    assert pushed["message_ids"] == [due] and "falls due later" in pushed["content"]

"""Broadcast: a permission, a snapshot of the lobby at acceptance, stored atomically."""

from __future__ import annotations

from lobbies.actions import operator
from lobbies.models import Delivery


def test_broadcast_needs_the_permission(backend):
    status, body = backend.call("broadcast", content="all hands", client_request_id="b")
    assert (status, body["error"]["code"]) == (403, "permission_required")


def test_broadcast_reaches_every_enabled_agent_but_the_sender(make_agent, backend):
    herald = make_agent("herald", broadcast=True)
    make_agent("ops")
    make_agent("idle")
    operator.disable_agent("my-team", "idle")
    sent = herald.ok("broadcast", content="release at 5", client_request_id="b1")
    assert sorted(r["agent_id"] for r in sent["recipients"]) == ["backend", "ops"]
    assert backend.ok("get_messages")["messages"][0]["scope"] == "broadcast"
    # A retry does not add agents admitted later.
    make_agent("newcomer")
    again = herald.ok("broadcast", content="release at 5", client_request_id="b1")
    assert again["duplicate"] is True and len(again["recipients"]) == 2


def test_disabling_a_recipient_holds_its_copy_visibly(make_agent, backend):
    herald = make_agent("herald", broadcast=True)
    sent = herald.ok("broadcast", content="x", client_request_id="b1")
    operator.disable_agent("my-team", "backend")
    copy = Delivery.objects.get(message_id=sent["message_id"], recipient=backend.agent)
    assert copy.held_reason == "recipient_disabled"
    facts = herald.ok("get_messages", view="history")["messages"][0]["recipients"]
    assert facts[0]["delivery_state"] == "held"

"""Superseding: a correction replaces unseen copies; those who saw the original get it too."""

from __future__ import annotations

from lobbies.models import Delivery, Message
from lobbies.push.presentation import headline_for


def test_unseen_copies_are_held_and_seen_ones_get_the_new_message(make_agent, lead, backend):
    ops = make_agent("ops")
    lead.ok("create_room", room_id="app", members=["lead", "backend", "ops"])
    old = lead.ok("send_room_message", room_id="app", content="deploy at 3", client_request_id="a")
    ops.ok("acknowledge_messages", message_ids=[old["message_id"]])
    new = lead.ok(
        "send_room_message",
        room_id="app",
        content="deploy at 4",
        client_request_id="b",
        supersedes=old["message_id"],
    )
    held = Delivery.objects.get(message_id=old["message_id"], recipient=backend.agent)
    assert (held.state, held.held_reason) == ("held", "superseded")
    assert [m["content"] for m in backend.ok("get_messages")["messages"]] == ["deploy at 4"]
    assert [m["content"] for m in ops.ok("get_messages")["messages"]] == ["deploy at 4"]
    assert backend.ok("get_messages")["messages"][0]["supersedes"] == old["message_id"]
    # Acknowledging the replaced copy records nothing, without refusal.
    result = backend.ok("acknowledge_messages", message_ids=[old["message_id"]])
    assert result["held_message_ids"] == [old["message_id"]]
    assert new["status"] == "stored"


def test_only_your_own_message_can_be_superseded(lead, backend):
    theirs = backend.send("lead", "mine", "a")
    status, body = lead.call(
        "send_message",
        to="backend",
        content="x",
        client_request_id="b",
        supersedes=theirs["message_id"],
    )
    assert (status, body["error"]["code"]) == (403, "not_your_message")
    assert Delivery.objects.get(message_id=theirs["message_id"]).state == "pending"


def test_the_push_says_what_it_replaces(lead, backend):
    old = lead.send("backend", "v1", "a")
    new = lead.send("backend", "v2", "b", supersedes=old["message_id"])
    headline = headline_for(Message.objects.get(pk=new["message_id"]))
    assert f"It replaces message {old['message_id']}." in headline

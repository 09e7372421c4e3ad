from __future__ import annotations

from lobbies.actions import operator
from lobbies.models import Delivery, ReceiptEvent


def test_acknowledging_marks_exactly_the_named_messages_seen(lead, backend):
    ids = [lead.send("backend", f"m{n}", f"r-{n}")["message_id"] for n in range(3)]
    result = backend.ok("acknowledge_messages", message_ids=[ids[2]])
    assert result["acknowledged"] == [ids[2]] and result["unknown_message_ids"] == []
    states = dict(Delivery.objects.values_list("message_id", "state"))
    # A later message acknowledged first never acknowledges the earlier ones.
    assert states == {ids[0]: "pending", ids[1]: "pending", ids[2]: "seen"}


def test_receipts_are_numbered_per_agent_and_idempotent(lead, backend):
    ids = [lead.send("backend", f"m{n}", f"r-{n}")["message_id"] for n in range(3)]
    first = backend.ok("acknowledge_messages", message_ids=[ids[1], ids[0]])
    assert first["receipt_sequence"] == 2
    again = backend.ok("acknowledge_messages", message_ids=[ids[0], ids[2]])
    assert again["acknowledged"] == [ids[0], ids[2]] and again["receipt_sequence"] == 3
    events = list(ReceiptEvent.objects.order_by("sequence").values_list("sequence", "message_id"))
    assert events == [(1, ids[1]), (2, ids[0]), (3, ids[2])]
    # The sender's own receipt counter is untouched.
    lead.send("lead", "self", "self-1")
    self_ack = lead.ok(
        "acknowledge_messages", message_ids=[lead.ok("get_messages")["messages"][0]["message_id"]]
    )
    assert self_ack["receipt_sequence"] == 1


def test_ids_no_longer_stored_are_reported_not_refused(lead, backend):
    sent = lead.send("backend", "m", "r-1")["message_id"]
    result = backend.ok("acknowledge_messages", message_ids=[sent, 424242])
    assert result["acknowledged"] == [sent] and result["unknown_message_ids"] == [424242]


def test_a_message_not_delivered_to_you_refuses_the_whole_batch(make_agent, lead, backend):
    ops = make_agent("ops")
    mine = lead.send("backend", "for backend", "r-1")["message_id"]
    theirs = lead.send("ops", "for ops", "r-2")["message_id"]
    status, body = backend.call("acknowledge_messages", message_ids=[mine, theirs])
    assert (status, body["error"]["code"]) == (409, "not_a_recipient")
    assert body["error"]["message_ids"] == [theirs]
    assert ReceiptEvent.objects.count() == 0
    assert Delivery.objects.get(message_id=mine).state == "pending"
    assert ops.ok("acknowledge_messages", message_ids=[theirs])["acknowledged"] == [theirs]


def test_held_copies_record_nothing_without_refusal(lead, backend):
    sent = lead.send("backend", "m", "r-1")["message_id"]
    operator.disable_agent("my-team", "backend")
    operator.enable_agent("my-team", "backend")
    result = backend.ok("acknowledge_messages", message_ids=[sent])
    assert result["held_message_ids"] == [sent] and result["acknowledged"] == []
    assert ReceiptEvent.objects.count() == 0


def test_an_empty_or_oversized_batch_is_refused(backend):
    status, body = backend.call("acknowledge_messages", message_ids=[])
    assert status == 400 and "message_ids" in body["error"]["message"]
    status, body = backend.call("acknowledge_messages", message_ids=list(range(1, 502)))
    assert status == 400 and "message_ids" in body["error"]["message"]
    status, body = backend.call("acknowledge_messages", message_ids=["1"])
    assert status == 400

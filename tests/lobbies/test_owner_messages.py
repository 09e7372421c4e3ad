"""The lobby's human owner as a sender: the name `owner` is reserved, its messages go through
the agents' send action, and agents see them marked as the owner's."""

from __future__ import annotations

import dataclasses
import json

import pytest
from channels.layers import get_channel_layer

from lobbies.actions import operator
from lobbies.actions.owner_messages import send_owner_message
from lobbies.errors import BrokerError
from lobbies.models import (
    ActorKind,
    Agent,
    AuditEvent,
    Credential,
    Lobby,
    Message,
    SeenReceipt,
)
from lobbies.push.presentation import OWNER_SENTENCE
from tests.conftest import AgentClient
from tests.lobbies.stream import bootstrapped, frame, new_runtime, open_stream, sync


def _reply(lobby: Lobby, to: str, content: str, key: str, **options):
    return send_owner_message(
        lobby,
        to=to,
        content=content,
        important=options.get("important", False),
        client_request_id=key,
        actor_kind=ActorKind.ACCOUNT,
        account="boss@example.com",
    )


def test_no_agent_can_take_the_name_owner(lobby):
    with pytest.raises(BrokerError) as refused:
        operator.add_agent("my-team", "owner")
    assert (refused.value.status, refused.value.code) == (400, "reserved_name")
    assert not Agent.objects.filter(agent_id="owner").exists()


def test_an_agent_cannot_send_as_the_owner(lobby, lead: AgentClient, backend):
    forged = {"from": "owner"}
    status, body = lead.call(
        "send_message", to="backend", content="ship it", client_request_id="r-1", **forged
    )
    assert status == 400 and "from" in body["error"]["message"]
    assert Message.objects.filter(sender__agent_id="lead").count() == 0


def test_an_agent_writes_to_the_owner_and_the_copy_waits_for_the_owner(
    lobby, lead: AgentClient, backend
):
    """Issue 32: a message to `owner` is stored like any direct message (the Messages page
    shows it; a push goes out if it expects a reply), its copy pending on the owner's row,
    which is made for it and stays disabled and unlisted."""
    sent = lead.send("owner", "may I ship?", "r-2", kind="question")
    assert [r["agent_id"] for r in sent["recipients"]] == ["owner"]
    message = Message.objects.get(pk=sent["message_id"])
    assert message.reply_expected and message.deliveries.get().state == "pending"
    owner = Agent.objects.get(lobby=lobby, agent_id="owner")
    assert not owner.enabled and not Credential.objects.filter(agent=owner).exists()
    listed = lead.ok("list_agents")["agents"]
    assert "owner" not in [a["agent_id"] for a in listed]
    again = lead.send("owner", "may I ship?", "r-2", kind="question")  # a retry
    assert (again["message_id"], again["duplicate"]) == (sent["message_id"], True)


def test_the_owners_answer_acknowledges_what_its_agent_wrote_to_the_owner_and_nothing_else(
    lobby, lead: AgentClient, backend
):
    """What an agent wrote to `owner` waits until the owner answers that agent: the answer
    acknowledges it (a receipt for the sender who asked), so the owner's row never fills its
    queue; another agent's message to the owner still waits."""
    asked = lead.send("owner", "may I ship?", "r-1", kind="question", notify_when_seen=True)
    other = backend.send("owner", "the build is red", "r-2")
    _reply(lobby, "lead", "yes, ship it", "k-1")
    state = {
        m: Message.objects.get(pk=m).deliveries.get().state
        for m in (asked["message_id"], other["message_id"])
    }
    assert state == {asked["message_id"]: "seen", other["message_id"]: "pending"}
    owner = Agent.objects.get(lobby=lobby, agent_id="owner")
    assert SeenReceipt.objects.filter(message_id=asked["message_id"], seen_by="owner").exists()
    assert owner.receipt_sequence == 1
    _reply(lobby, "lead", "and tag it", "k-2")  # nothing left to answer: nothing changes
    assert Agent.objects.get(pk=owner.pk).receipt_sequence == 1


def test_the_owner_row_never_holds_a_token_nor_joins_a_room(lobby, lead: AgentClient):
    _reply(lobby, "lead", "hello", "k-1")
    for attempt in (
        lambda: operator.rotate_credential("my-team", "owner"),
        lambda: operator.enable_agent("my-team", "owner"),
        lambda: operator.remove_agent("my-team", "owner"),
    ):
        with pytest.raises(BrokerError) as refused:
            attempt()
        assert refused.value.code == "unknown_agent"
    owner = Agent.objects.get(lobby=lobby, agent_id="owner")
    assert not owner.enabled and not Credential.objects.filter(agent=owner).exists()
    status, body = lead.call("create_room", room_id="design", members=["lead", "owner"])
    assert status == 400 and "owner" in body["error"]["message"]
    names = [a["agent_id"] for a in lead.ok("list_agents")["agents"]]
    assert "owner" not in names


def test_the_owners_message_shows_in_the_agents_history_and_sender_facts(lobby, lead, backend):
    outcome = _reply(lobby, "backend", "Please ship the fix today.", "k-1", important=True)
    inbox = backend.ok("get_messages")["messages"]
    assert [(m["from"], m["from_owner"], m["priority"]) for m in inbox] == [
        ("owner", True, "important")
    ]
    history = backend.ok("get_messages", view="history")["messages"]
    assert history[0]["message_id"] == outcome.message.pk and history[0]["from_owner"] is True
    lead.send("backend", "peer note", "r-1")
    peer = backend.ok("get_messages", view="history")["messages"][0]
    assert peer["from"] == "lead" and "from_owner" not in peer
    event = AuditEvent.objects.get(action="owner_message_sent")
    assert (event.actor_kind, event.account, event.target, event.detail["message_id"]) == (
        "account",
        "boss@example.com",
        "backend",
        outcome.message.pk,
    )


def test_a_retried_reply_stores_one_message_and_one_audit_event(lobby, backend):
    first = _reply(lobby, "backend", "once", "k-1")
    again = _reply(lobby, "backend", "once", "k-1")
    assert again.duplicate and again.message.pk == first.message.pk
    assert Message.objects.filter(sender_name="owner").count() == 1
    assert AuditEvent.objects.filter(action="owner_message_sent").count() == 1


def test_a_reply_over_the_bounds_or_to_a_stranger_stores_nothing(lobby, backend, settings):
    settings.BOUNDS = dataclasses.replace(settings.BOUNDS, content_bytes=10)
    with pytest.raises(BrokerError) as too_big:
        _reply(lobby, "backend", "x" * 11, "k-1")
    assert too_big.value.status == 400 and "limit is 10 bytes" in too_big.value.message
    with pytest.raises(BrokerError) as stranger:
        _reply(lobby, "ghost", "hi", "k-2")
    assert stranger.value.code == "unknown_recipient"
    assert (
        not Message.objects.exists()
        and not AuditEvent.objects.filter(action="owner_message_sent").exists()
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_push_marks_the_owner_as_the_sender(lobby, backend):
    stream = await open_stream(backend.token, new_runtime())
    await bootstrapped(stream)
    await sync(_reply)(lobby, "backend", "Stop the deploy.", "k-1", important=True)
    pushed = await frame(stream)
    assert pushed["meta"]["from"] == "owner"
    headline, payload = pushed["content"].split("\n", 1)
    assert "from owner" in headline and OWNER_SENTENCE in headline
    assert json.loads(payload)["messages"][0]["from_owner"] is True
    await stream.disconnect()
    await get_channel_layer().flush()

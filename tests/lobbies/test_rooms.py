"""Rooms: membership by coordinators, snapshots at acceptance, removal, deletion, archive."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lobbies.actions import operator
from lobbies.actions.rooms import archive_room, restore_room
from lobbies.errors import BrokerError
from lobbies.models import ActorKind, ArchivedRoom, AuditEvent, Delivery, Message, Room


@pytest.fixture
def team(make_agent, lead, backend):
    ops = make_agent("ops")
    web = make_agent("web")
    lead.ok("create_room", room_id="app", members=["lead", "backend", "ops"])
    return {"lead": lead, "backend": backend, "ops": ops, "web": web}


def _inbox(client) -> list[str]:
    return [m["content"] for m in client.ok("get_messages")["messages"]]


def test_room_management_needs_manage_rooms(backend):
    status, body = backend.call("create_room", room_id="app", members=[])
    assert (status, body["error"]["code"]) == (403, "permission_required")
    tools = backend.client.get("/v1/tools", HTTP_AUTHORIZATION=f"Bearer {backend.token}").json()
    assert "create_room" not in {t["name"] for t in tools["tools"]}


def test_only_admitted_agents_of_the_lobby_can_be_members(make_agent, lead):
    operator.create_lobby("other-team")
    make_agent("stranger", lobby_name="other-team")
    status, body = lead.call("create_room", room_id="app", members=["lead", "stranger"])
    assert (status, body["error"]["code"]) == (400, "unknown_agent")
    assert "'stranger'" in body["error"]["message"] and not Room.objects.exists()


def test_a_room_message_reaches_the_members_at_acceptance_without_the_sender(team):
    lead, backend, ops, web = team["lead"], team["backend"], team["ops"], team["web"]
    sent = lead.ok("send_room_message", room_id="app", content="standup", client_request_id="r1")
    assert sorted(r["agent_id"] for r in sent["recipients"]) == ["backend", "ops"]
    assert _inbox(backend) == ["standup"] and _inbox(ops) == ["standup"]
    assert _inbox(lead) == [] and _inbox(web) == []
    # Joining later grants no earlier history.
    lead.ok("add_room_members", room_id="app", members=["web"])
    assert web.ok("get_messages", view="history")["messages"] == []
    message = backend.ok("get_messages")["messages"][0]
    assert (message["room_id"], message["to"], message["scope"]) == ("app", "*", "room")


def test_offline_and_disabled_members(team):
    operator.disable_agent("my-team", "ops")
    sent = team["lead"].ok("send_room_message", room_id="app", content="x", client_request_id="r")
    assert [r["agent_id"] for r in sent["recipients"]] == ["backend"]


def test_a_non_member_cannot_send_to_a_room(team):
    status, body = team["web"].call(
        "send_room_message", room_id="app", content="x", client_request_id="r"
    )
    assert (status, body["error"]["code"]) == (403, "not_a_member")


def test_named_addressees_only_get_deliveries(team):
    lead = team["lead"]
    sent = lead.ok(
        "send_room_message",
        room_id="app",
        content="you two",
        client_request_id="r",
        addressed_to=["ops"],
    )
    assert [r["agent_id"] for r in sent["recipients"]] == ["ops"]
    assert _inbox(team["backend"]) == []
    message = team["ops"].ok("get_messages")["messages"][0]
    assert message["addressed_to"] == ["ops"] and message["to"] == "*"


def test_one_wrong_addressee_refuses_the_whole_send(team):
    lead = team["lead"]
    for names in (["ops", "web"], ["ops", "lead"], ["ghost"]):
        status, body = lead.call(
            "send_room_message",
            room_id="app",
            content="x",
            client_request_id="r",
            addressed_to=names,
        )
        assert (status, body["error"]["code"]) == (400, "not_a_member"), names
    status, body = lead.call(
        "send_room_message",
        room_id="app",
        content="x",
        client_request_id="r",
        addressed_to=[f"a{i}" for i in range(21)],
    )
    assert status == 400 and "addressed_to" in body["error"]["message"]
    assert not Message.objects.exists()


def test_an_unknown_room_is_404(lead):
    status, body = lead.call(
        "send_room_message", room_id="nope", content="x", client_request_id="r"
    )
    assert (status, body["error"]["code"]) == (404, "unknown_room")


def test_removal_holds_unseen_copies_and_redacts_history(team):
    lead, backend = team["lead"], team["backend"]
    seen = lead.ok("send_room_message", room_id="app", content="seen", client_request_id="r1")
    unseen = lead.ok("send_room_message", room_id="app", content="unseen", client_request_id="r2")
    backend.ok("acknowledge_messages", message_ids=[seen["message_id"]])
    lead.ok("remove_room_members", room_id="app", members=["backend"])
    copy = Delivery.objects.get(message_id=unseen["message_id"], recipient=backend.agent)
    assert (copy.state, copy.held_reason) == ("held", "removed")
    history = backend.ok("get_messages", view="history")["messages"]
    assert all(m["content"] is None and m["redacted"] for m in history)
    assert _inbox(backend) == []
    # Rejoining replays nothing; new messages arrive again.
    lead.ok("add_room_members", room_id="app", members=["backend"])
    assert _inbox(backend) == []
    lead.ok("send_room_message", room_id="app", content="again", client_request_id="r3")
    assert _inbox(backend) == ["again"]
    # The sender's own history keeps the bodies.
    assert "unseen" in [m["content"] for m in lead.ok("get_messages", view="history")["messages"]]


def test_set_room_members_replaces_the_list(team):
    room = team["lead"].ok("set_room_members", room_id="app", members=["lead", "web"])
    assert room["members"] == ["lead", "web"]
    listed = team["web"].ok("list_rooms")["rooms"]
    assert listed == [
        {
            "room_id": "app",
            "members": ["lead", "web"],
            "member": True,
            "created_at": listed[0]["created_at"],
        }
    ]


def test_deleting_a_room_holds_unseen_copies_and_keeps_history(team):
    lead, backend = team["lead"], team["backend"]
    sent = lead.ok("send_room_message", room_id="app", content="bye", client_request_id="r1")
    result = lead.ok("delete_room", room_id="app")
    assert result["held"] == 2
    copy = Delivery.objects.get(message_id=sent["message_id"], recipient=backend.agent)
    assert copy.held_reason == "room_deleted"
    assert lead.ok("list_rooms")["rooms"] == []
    assert lead.ok("get_messages", view="history")["messages"][0]["room_id"] == "app"
    # The id may be reused; the new room inherits nothing.
    lead.ok("create_room", room_id="app", members=["lead", "backend"])
    assert _inbox(backend) == []
    assert AuditEvent.objects.filter(action="room_deleted", target="app").exists()


def test_deleting_a_room_cancels_its_schedules(team):
    lead = team["lead"]
    created = lead.ok(
        "schedule_message",
        room_id="app",
        content="daily",
        client_request_id="s",
        time_zone="Europe/Berlin",
        times=["09:00"],
    )
    lead.ok("delete_room", room_id="app")
    assert lead.ok("list_scheduled")["schedules"] == []
    assert created["schedule_id"]


def test_archive_delivers_what_was_accepted_and_reserves_the_name(team):
    lead, backend = team["lead"], team["backend"]
    lead.ok("send_room_message", room_id="app", content="still arrives", client_request_id="r1")
    archive_room(lead.agent.lobby_id, "app", actor_kind=ActorKind.OPERATOR)
    assert _inbox(backend) == ["still arrives"]
    status, body = lead.call("create_room", room_id="app", members=[])
    assert (status, body["error"]["code"]) == (409, "room_archived")
    restore_room(lead.agent.lobby_id, "app", actor_kind=ActorKind.OPERATOR)
    assert lead.ok("list_rooms")["rooms"][0]["members"] == []


def test_a_room_beyond_the_lobbys_limit_is_refused_and_nothing_is_created(team, settings):
    """Issue 39: 1,500 rooms made the settings page 2.9 MB. The limit counts live rooms."""
    lead = team["lead"]
    settings.BOUNDS = replace(settings.BOUNDS, lobby_rooms=3)
    lead.ok("create_room", room_id="design", members=["lead"])
    lead.ok("create_room", room_id="ops", members=[])
    status, body = lead.call("create_room", room_id="extra", members=["lead"])
    assert (status, body["error"]["code"]) == (409, "too_many_rooms")
    assert "3 rooms" in body["error"]["message"]
    assert "POCOLOBBY_LOBBY_ROOMS" in body["error"]["message"]
    assert not Room.objects.filter(room_id="extra").exists()
    assert not AuditEvent.objects.filter(action="room_created", target="extra").exists()
    # An archived room frees its place; restoring it while the lobby is full is refused.
    archive_room(lead.agent.lobby_id, "ops", actor_kind=ActorKind.OPERATOR)
    lead.ok("create_room", room_id="extra", members=[])
    with pytest.raises(BrokerError) as refused:
        restore_room(lead.agent.lobby_id, "ops", actor_kind=ActorKind.OPERATOR)
    assert refused.value.code == "too_many_rooms"
    assert ArchivedRoom.objects.filter(room_id="ops").exists()
    lead.ok("delete_room", room_id="design")
    restore_room(lead.agent.lobby_id, "ops", actor_kind=ActorKind.OPERATOR)
    assert sorted(r["room_id"] for r in lead.ok("list_rooms")["rooms"]) == ["app", "extra", "ops"]

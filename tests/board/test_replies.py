"""The owner answers an agent from the dashboard's reply boxes: the owner's browser (hosted)
or the local operator may; viewers, the public, other lobbies' sessions and other origins may
not; refusals name the reason and store nothing; a retried form stores one message."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from board.models import BoardConfig, Visibility
from console.access import LOBBY_COOKIE
from console.models import Account, DashboardViewer, LobbyOwner, WebSession
from lobbies.actions import operator
from lobbies.models import AuditEvent, Lobby, Message
from tests.board.dashboard_helpers import LOCAL_HOST, operator_client
from tests.conftest import AgentClient

pytestmark = pytest.mark.django_db

HOST = "my-team.pocolobby.test"
ORIGIN = f"https://{HOST}"


def _browser(email: str, lobby: Lobby, role: str, host: str = HOST) -> Client:
    account = Account.objects.create(email=email, created_at=timezone.now())
    if role == "owner":
        LobbyOwner.objects.create(lobby=lobby, account=account, created_at=timezone.now())
    elif role == "viewer":
        DashboardViewer.objects.create(lobby=lobby, email=email, created_at=timezone.now())
    token = WebSession.open(account, lobby, timezone.now(), timedelta(hours=1))
    client = Client(HTTP_HOST=host)
    client.cookies[f"__Host-{LOBBY_COOKIE}"] = token
    return client


def _reply(client: Client, body: dict, origin: str = ORIGIN, base: str = ""):
    return client.post(
        f"{base}/reply",
        data=json.dumps(body),
        content_type="application/json",
        secure=client.defaults["HTTP_HOST"] != LOCAL_HOST,
        HTTP_ORIGIN=origin,
    )


def _on_api(agent: AgentClient) -> AgentClient:
    agent.client.defaults["HTTP_HOST"] = "api.pocolobby.test"
    return agent


def _form(**changes) -> dict:
    return {"to": "backend", "content": "Ship it today.", "client_request_id": "form-1", **changes}


def _refused(answer, status: int, words: str) -> None:
    assert answer.status_code == status, answer.content
    assert words in answer.json()["error"]["message"]
    assert not Message.objects.filter(sender_name="owner").exists()


def test_the_owner_answers_an_agent_and_it_is_audited(hosted, lobby, backend: AgentClient):
    owner = _browser("boss@example.com", lobby, "owner")
    answer = _reply(owner, _form(important=True))
    assert answer.status_code == 200, answer.content
    assert answer.json()["message"].startswith("Sent to backend as the owner")
    message = Message.objects.get(sender_name="owner")
    assert (message.priority, message.content) == ("important", "Ship it today.")
    event = AuditEvent.objects.get(action="owner_message_sent")
    assert (event.account, event.target) == ("boss@example.com", "backend")
    inbox = _on_api(backend).ok("get_messages")["messages"]
    assert [(m["from"], m.get("from_owner")) for m in inbox] == [("owner", True)]


def test_a_double_tap_stores_one_message(hosted, lobby, backend):
    owner = _browser("boss@example.com", lobby, "owner")
    first, second = _reply(owner, _form()), _reply(owner, _form())
    assert first.status_code == second.status_code == 200
    assert second.json()["duplicate"] is True
    assert first.json()["message_id"] == second.json()["message_id"]
    assert Message.objects.filter(sender_name="owner").count() == 1
    assert AuditEvent.objects.filter(action="owner_message_sent").count() == 1


def test_a_viewer_or_the_public_cannot_reply_and_sees_no_reply_box(hosted, lobby, lead, backend):
    _on_api(backend).ok("set_owner_requests", count=1, line="approve the release")
    viewer = _browser("viewer@example.com", lobby, "viewer")
    _refused(_reply(viewer, _form()), 403, "only this lobby's owner can answer")
    page = viewer.get("/", secure=True).content.decode()
    assert "approve the release" in page and "data-reply" not in page
    BoardConfig.objects.create(lobby=lobby, visibility=Visibility.PUBLIC, updated_at=timezone.now())
    _refused(_reply(Client(HTTP_HOST=HOST), _form()), 403, "only this lobby's owner")
    owner_page = _browser("boss@example.com", lobby, "owner").get("/", secure=True).content
    # One waiting item, two agents and the message to every agent.
    assert owner_page.decode().count("data-reply-form") == 4
    assert "data-broadcast" in owner_page.decode() and "data-broadcast" not in page


def test_another_lobbys_session_or_origin_is_refused(hosted, lobby, backend):
    other = operator.create_lobby("other-team")
    stranger = _browser("boss@example.com", other, "owner", host="other-team.pocolobby.test")
    stranger.defaults["HTTP_HOST"] = HOST  # its cookie, sent to my-team's host
    _refused(_reply(stranger, _form()), 403, "this dashboard is private")
    owner = _browser("owner@example.com", lobby, "owner")
    _refused(_reply(owner, _form(), origin="https://evil.example"), 403, "must be sent from")
    _refused(_reply(owner, _form(), origin=""), 403, "came from nowhere")


def test_bad_replies_are_refused_by_name_with_nothing_stored(hosted, lobby, backend, settings):
    owner = _browser("boss@example.com", lobby, "owner")
    _refused(_reply(owner, _form(to="ghost")), 404, "no agent 'ghost'")
    _refused(_reply(owner, _form(content="")), 400, "content")
    _refused(_reply(owner, _form(client_request_id="has space")), 400, "client_request_id")
    _refused(_reply(owner, _form(sender="lead")), 400, "sender: not a field of this form")
    big = "x" * (settings.BOUNDS.content_bytes + 1)
    _refused(_reply(owner, _form(content=big)), 400, "the limit is")
    operator.disable_agent("my-team", "backend")
    _refused(_reply(owner, _form()), 409, "disabled")
    assert not AuditEvent.objects.filter(action="owner_message_sent").exists()


def test_a_removed_owner_cannot_reply_any_more(hosted, lobby, backend):
    owner = _browser("boss@example.com", lobby, "owner")
    LobbyOwner.objects.filter(lobby=lobby).delete()
    _refused(_reply(owner, _form()), 403, "this dashboard is private")


def test_the_local_operator_answers_on_a_local_broker(lobby, backend):
    client = operator_client()
    answer = _reply(client, _form(), origin=f"http://{LOCAL_HOST}", base="/my-team")
    assert answer.status_code == 200, answer.content
    event = AuditEvent.objects.get(action="owner_message_sent")
    assert (event.actor_kind, event.target) == ("operator", "backend")


def _broadcast(client: Client, body: dict, origin: str = ORIGIN):
    return client.post(
        "/broadcast",
        data=json.dumps(body),
        content_type="application/json",
        secure=True,
        HTTP_ORIGIN=origin,
    )


def test_the_owner_broadcasts_through_the_agents_broadcast(hosted, lobby, lead, backend):
    owner = _browser("boss@example.com", lobby, "owner")
    body = {"content": "Freeze merges at five.", "client_request_id": "all-1", "important": True}
    first, again = _broadcast(owner, body), _broadcast(owner, body)
    assert first.status_code == again.status_code == 200, first.content
    assert first.json()["message"].startswith("Sent to every agent (2) as the owner")
    assert again.json()["duplicate"] is True  # a double tap stores one message
    message = Message.objects.get(sender_name="owner")
    assert (message.scope, message.priority) == ("broadcast", "important")
    for agent in (lead, backend):
        inbox = _on_api(agent).ok("get_messages")["messages"]
        assert [(m["from"], m.get("from_owner")) for m in inbox] == [("owner", True)]
    (event,) = AuditEvent.objects.filter(action="owner_message_sent")
    assert (event.account, event.target, event.detail["recipients"]) == (
        "boss@example.com",
        "*",
        2,
    )


def test_a_viewer_or_a_foreign_origin_cannot_broadcast(hosted, lobby, lead, backend, settings):
    body = {"content": "hello", "client_request_id": "all-1"}
    viewer = _browser("viewer@example.com", lobby, "viewer")
    _refused(_broadcast(viewer, body), 403, "only this lobby's owner can answer")
    owner = _browser("boss@example.com", lobby, "owner")
    _refused(_broadcast(owner, body, origin="https://evil.example"), 403, "must be sent from")
    _refused(_broadcast(owner, {**body, "to": "lead"}), 400, "to: not a field of this form")
    big = "x" * (settings.BOUNDS.content_bytes + 1)
    _refused(_broadcast(owner, {**body, "content": big}), 400, "the limit is")
    settings.BOUNDS = dataclasses.replace(settings.BOUNDS, broadcast_fanout=1)
    _refused(_broadcast(owner, body), 413, "POCOLOBBY_BROADCAST_FANOUT")
    assert not AuditEvent.objects.filter(action="owner_message_sent").exists()


def test_an_agent_cannot_broadcast_as_the_owner(lobby, make_agent):
    caster = make_agent("caster", broadcast=True)
    status, body = caster.call(
        "broadcast", content="I am the owner", client_request_id="x-1", sender="owner"
    )
    assert status == 400 and "sender" in body["error"]["message"]
    assert not Message.objects.filter(sender_name="owner").exists()


def test_the_local_operator_broadcasts_on_a_local_broker(lobby, lead, backend):
    answer = operator_client().post(
        "/my-team/broadcast",
        data=json.dumps({"content": "Standup in five.", "client_request_id": "op-1"}),
        content_type="application/json",
        HTTP_ORIGIN=f"http://{LOCAL_HOST}",
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["recipients"] == 2
    event = AuditEvent.objects.get(action="owner_message_sent")
    assert (event.actor_kind, event.target, event.detail["broadcast"]) == ("operator", "*", True)

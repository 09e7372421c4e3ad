# ruff: noqa: E501  (the pinned bytes are one line each)
"""A pushed message's JSON is the wire: its keys and their order stay what bridges read."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lobbies.fastlane import queries
from lobbies.models import Message
from lobbies.push.presentation import message_payload, messages_content
from tests.conftest import AgentClient

T = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)


def _message(pk: int, **fields: object) -> Message:
    defaults: dict[str, object] = {
        "sequence": pk,
        "sender_name": "lead",
        "scope": "direct",
        "kind": None,
        "reply_expected": False,
        "priority": "info",
        "content": "hello",
        "content_bytes": 5,
        "fields": {},
        "reply_to": None,
        "correlation_id": "",
        "room_name": "",
        "addressed_to": [],
        "created_at": T,
    }
    return Message(pk=pk, **{**defaults, **fields})


PLAIN = _message(1)
EVERYTHING = _message(
    2,
    sender_name="owner",
    scope="room",
    kind="request",
    reply_expected=True,
    priority="important",
    content='say "hi"',
    content_bytes=8,
    fields={"ticket": 7},
    reply_to=1,
    correlation_id="c-1",
    room_name="ops",
    addressed_to=["backend"],
    supersedes=1,
    deliver_at=T,
    late=True,
    schedule_id=3,
    slot=T,
)
DESCRIBED = {2: [{"id": 4, "name": "a.png", "media_type": "image/png", "size": 10}]}


def test_a_pushed_message_with_every_fact_keeps_its_bytes():
    assert messages_content([EVERYTHING, PLAIN], cap_bytes=65536, attachments=DESCRIBED) == (
        (
            "PocoLobby 2 messages (1 IMPORTANT, listed first) from lead, owner. Handle it before lower-priority queued work; it did not interrupt a running tool."
            "\n"
            '{"messages":[{"message_id":2,"from":"owner","scope":"room","kind":"request","reply_expected":true,"priority":"important","created_at":"2026-12-05T09:30:00.000Z","from_owner":true,"reply_to":1,"room_id":"ops","addressed_to":["backend"],"supersedes":1,"deliver_at":"2026-12-05T09:30:00.000Z","late":true,"schedule_id":3,"slot":"2026-12-05T09:30:00.000Z","correlation_id":"c-1","attachments":[{"id":4,"name":"a.png","media_type":"image/png","size":10}],"content":"say \\"hi\\"","fields":{"ticket":7}},{"message_id":1,"from":"lead","scope":"direct","kind":null,"reply_expected":false,"priority":"info","created_at":"2026-12-05T09:30:00.000Z","content":"hello"}]}'
        ),
        False,
    )


def test_a_push_cut_to_headers_keeps_its_bytes():
    assert messages_content([EVERYTHING, PLAIN], cap_bytes=300, attachments=DESCRIBED) == (
        (
            "PocoLobby 2 messages from lead, owner, too large to push whole (over 300 bytes): truncated to headers. Read them with get_messages and acknowledge each one you handle."
            "\n"
            '{"truncated":true,"count":2,"messages":[{"message_id":2,"from":"owner","scope":"room","kind":"request","reply_expected":true,"priority":"important","created_at":"2026-12-05T09:30:00.000Z","from_owner":true,"reply_to":1,"room_id":"ops","addressed_to":["backend"],"supersedes":1,"deliver_at":"2026-12-05T09:30:00.000Z","late":true,"schedule_id":3,"slot":"2026-12-05T09:30:00.000Z","correlation_id":"c-1","attachments":[{"id":4,"name":"a.png","media_type":"image/png","size":10}],"content_bytes":8}],"listed":1}'
        ),
        True,
    )


def test_a_plain_pushed_message_keeps_its_bytes():
    assert messages_content([PLAIN], cap_bytes=65536) == (
        (
            "PocoLobby direct message from lead."
            "\n"
            '{"messages":[{"message_id":1,"from":"lead","scope":"direct","kind":null,"reply_expected":false,"priority":"info","created_at":"2026-12-05T09:30:00.000Z","content":"hello"}]}'
        ),
        False,
    )


@pytest.mark.django_db
def test_a_push_says_of_a_message_what_its_answer_says(lead: AgentClient, backend: AgentClient):
    """The pushed shape and `MessageEntry` are two views of one message: every key a push
    carries has the answer's value (a push omits what does not apply instead of null)."""
    lead.ok("create_room", room_id="ops", members=["lead", "backend"])
    first = lead.ok("send_room_message", room_id="ops", content="one", client_request_id="r-1")[
        "message_id"
    ]
    sent = lead.ok(
        "send_room_message",
        room_id="ops",
        addressed_to=["backend"],
        content='say "hi"',
        client_request_id="r-2",
        kind="request",
        priority="important",
        reply_to=first,
        correlation_id="c-1",
        fields={"commit": "abc1234"},
        supersedes=first,
    )["message_id"]
    [message] = queries.messages_by_id([sent])
    pushed = dict(message_payload(message))
    [answered] = [m for m in backend.ok("get_messages")["messages"] if m["message_id"] == sent]
    assert pushed == {key: answered[key] for key in pushed}
    assert set(pushed) >= {"room_id", "addressed_to", "supersedes", "correlation_id", "fields"}
    header = dict(message_payload(message, with_body=False))
    assert header.pop("content_bytes") == len('say "hi"')
    assert header == {key: answered[key] for key in header}

"""The send path's hand-written statements: the keys an INSERT answers."""

from __future__ import annotations

import uuid

from django.utils import timezone

from lobbies.fastlane import store
from lobbies.models import Message, Notice, NoticeKind
from tests.conftest import AgentClient


def test_an_insert_answers_the_key_the_database_gave_its_row(lead: AgentClient):
    rows = [
        store.insert(
            Message,
            {
                "lobby_id": lead.agent.lobby_id,
                "sequence": sequence,
                "sender_id": lead.agent.pk,
                "sender_name": "lead",
                "scope": "direct",
                "priority": "info",
                "content": f"message {sequence}",
                "content_bytes": 9,
                "client_request_id": f"r-{sequence}",
                "request_hash": "0" * 64,
                "created_at": timezone.now(),
            },
        )
        for sequence in (1, 2)
    ]
    stored = dict(Message.objects.values_list("pk", "content"))
    assert {row.pk: row.content for row in rows} == stored
    assert rows[0].pk != rows[1].pk


def test_an_insert_of_a_row_with_its_own_key_answers_that_key(lead: AgentClient):
    key = uuid.uuid4()
    row = {
        "id": key,
        "agent_id": lead.agent.pk,
        "runtime_id": "",
        "generation": 0,
        "kind": NoticeKind.MESSAGES,
        "message_ids": [],
        "created_at": timezone.now(),
    }
    notice = store.insert(Notice, row)
    assert notice.pk == key
    assert Notice.objects.get().pk == key

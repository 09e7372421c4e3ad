"""The hand-written statements' rules say what the models say (lobbies/fastlane/queries.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from lobbies.fastlane import queries, store
from lobbies.models import (
    DELIVERABLE,
    SILENT_SELF_NOTE,
    Credential,
    Delivery,
    DeliveryState,
    HeldReason,
    Message,
    Schedule,
    is_silent_self_note,
)
from tests.conftest import AgentClient


@pytest.mark.django_db
def test_the_queued_rule_is_the_deliverable_condition_as_the_queue_index_is_built_on_it():
    """SQLite uses the partial index `delivery_queued` only for a WHERE holding its
    condition term for term, so the SQL rule must be the text Django writes for it."""
    (index,) = [i for i in Delivery._meta.indexes if i.name == "delivery_queued"]
    assert index.condition == DELIVERABLE
    created = str(index.create_sql(Delivery, connection.schema_editor()))
    assert created.endswith(f"WHERE {queries.QUEUED}")


def test_a_note_to_yourself_is_silent_alike_in_sql_in_the_orm_and_in_python(
    lead: AgentClient, backend: AgentClient
):
    """The self-note rule exists in three forms (the push path's SQL, the retry timer's ORM
    condition, the send's wake); each picks the same copies."""
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    lead.send("lead", "note", "n-1")
    lead.send("lead", "reminder", "n-2", deliver_at=later)
    lead.send("lead", "occurrence", "n-3")
    lead.send("backend", "to a peer", "n-4")
    backend.send("lead", "from a peer", "n-5")
    lead.ok(
        "schedule_message",
        to="lead",
        content="daily",
        client_request_id="s-1",
        time_zone="UTC",
        times=["09:00"],
    )
    Message.objects.filter(content="occurrence").update(schedule=Schedule.objects.get())
    in_sql = {
        row[0]
        for row in store.rows(
            "SELECT t.id FROM lobbies_delivery t JOIN lobbies_message m ON m.id = t.message_id"  # noqa: S608
            f" WHERE {queries.silent_self_note()}",
            [],
        )
    }
    in_orm = set(Delivery.objects.filter(SILENT_SELF_NOTE).values_list("pk", flat=True))
    in_python = {
        d.pk
        for d in Delivery.objects.select_related("message")
        if is_silent_self_note(
            d.message.sender_id,
            d.recipient_id,
            deliver_at=d.message.deliver_at,
            schedule_pk=d.message.schedule_id,
        )
    }
    note = Delivery.objects.get(message__content="note").pk
    assert in_sql == in_orm == in_python == {note}


def test_a_recipient_queue_counts_what_may_still_reach_it(lead: AgentClient, backend: AgentClient):
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    lead.send("backend", "now", "r-1")
    lead.send("backend", "later", "r-2", deliver_at=later)
    lead.send("backend", "gone", "r-3")
    Delivery.objects.filter(message__content="gone").update(
        state=DeliveryState.HELD, held_reason=HeldReason.SUPERSEDED
    )
    queue = queries.recipient_queue(backend.agent.pk)
    assert (queue.messages, queue.bytes) == (2, len("now") + len("later"))


def test_a_send_slot_names_the_counts_its_bounds_need(lead: AgentClient, backend: AgentClient):
    lead.send("backend", "one", "r-1")
    lead.send("backend", "two", "r-2")
    slot = queries.open_send(
        lead.agent.lobby_id,
        lead.agent.pk,
        rate_since=timezone.now() - timedelta(minutes=1),
        queue_of=backend.agent.pk,
    )
    assert (slot.stored, slot.sent_last_minute) == (2, 2)
    assert slot.queue == queries.Queue(messages=2, bytes=6)
    plain = queries.open_send(lead.agent.lobby_id, lead.agent.pk, rate_since=None, queue_of=None)
    assert plain.sequence == slot.sequence + 1
    assert (plain.sent_last_minute, plain.queue) == (None, None)


def test_a_bearer_names_its_agent_and_whether_the_token_was_revoked(lead: AgentClient):
    credential = Credential.objects.get(agent=lead.agent)
    found = queries.bearer(credential.token_hash)
    assert found is not None
    assert (found.agent.pk, found.token_hash, found.revoked) == (
        lead.agent.pk,
        credential.token_hash,
        False,
    )
    assert not hasattr(found.agent, "token_hash")
    assert queries.bearer("0" * 64) is None

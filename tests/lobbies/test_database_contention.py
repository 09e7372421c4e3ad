"""Lock cycles on PostgreSQL that the chaos soak (benchmarks/chaos.py) met with two brokers:
a bridge's claim locked the lobby row with its agent row while a send held the lobby row and
waited for that agent, and an acknowledgment chosen as a deadlock's victim answered 500.

Each test holds a lock from a second real PostgreSQL session, as a concurrent transaction
would; skipped on SQLite (one writer at a time, no row locks).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection

from lobbies.actions.runtime import claim_runtime
from lobbies.models import Delivery, Notice
from lobbies.push import frames
from tests.eventually import eventually

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row locks and deadlock detection are PostgreSQL's")


@contextmanager
def other_session() -> Iterator[psycopg.Connection[Any]]:
    """A second session on the test database, as another broker process's transaction."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    session = psycopg.connect(**params)
    try:
        yield session
    finally:
        session.rollback()
        session.close()


def test_claiming_a_runtime_does_not_wait_for_the_lobby_row_a_send_holds(backend):
    """A send holds its lobby's row (the sequence bump) until it commits, and locks its
    sender's row after it. A claim that also locked the lobby row closed the cycle."""
    with other_session() as send:
        send.execute(
            "UPDATE lobbies_lobby SET message_sequence = message_sequence + 1 WHERE id = %s",
            [backend.agent.lobby_id],
        )
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '3s'")
        try:
            claim = claim_runtime(backend.agent, str(uuid.uuid4()), None)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
    assert claim.started and claim.generation == 1


def test_an_acknowledgment_aborted_by_a_deadlock_is_run_again_not_answered_500(lead, backend):
    """Another transaction holds the delivery's row and then asks for the agent's row (as a
    deferred foreign-key check does at commit) while the acknowledgment holds the agent's row
    and waits for the delivery: PostgreSQL aborts the acknowledgment's transaction."""
    sent = lead.send("backend", "for backend", "r-1")["message_id"]
    answer: dict[str, Any] = {}

    def acknowledge() -> None:
        try:
            answer["status"], answer["body"] = backend.call(
                "acknowledge_messages", message_ids=[sent]
            )
        finally:
            connection.close()

    with other_session() as other:
        # This session never gives up first: the acknowledgment is the deadlock's victim.
        other.execute("SET deadlock_timeout = '20s'")
        other.execute("SELECT id FROM lobbies_delivery WHERE message_id = %s FOR UPDATE", [sent])
        worker = threading.Thread(target=acknowledge)
        worker.start()
        eventually(lambda: _waiting_on_a_lock(other), timeout=10, every=0.05)
        other.execute(
            "SELECT id FROM lobbies_agent WHERE id = %s FOR KEY SHARE", [backend.agent.pk]
        )
        other.commit()
        worker.join(30)
    assert answer["status"] == 200, answer
    assert answer["body"]["acknowledged"] == [sent]
    assert Delivery.objects.get(message_id=sent).state == "seen"


def _waiting_on_a_lock(other: psycopg.Connection[Any]) -> bool:
    """Some other session of this database waits for a row lock (the acknowledgment)."""
    # Activity is read once per transaction unless the snapshot is cleared.
    other.execute("SELECT pg_stat_clear_snapshot()")
    rows = other.execute(
        "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    ).fetchall()
    return bool(rows)


def test_transport_facts_wait_for_an_acknowledgment_instead_of_deadlocking_with_it(lead, backend):
    """A batch with `received` and `host_written` of one notice updates its deliveries twice,
    so PostgreSQL checks their foreign keys at COMMIT (`FOR KEY SHARE` on the agent's row,
    which the acknowledgment holds `FOR UPDATE` while it waits for those deliveries). Taking
    the agents' rows first, in order, makes the batch wait instead."""
    claim = claim_runtime(backend.agent, str(uuid.uuid4()), None)
    sent = lead.send("backend", "for backend", "r-1")["message_id"]
    frame = frames.push_frame(backend.agent.pk, claim.generation)
    assert frame is not None and frame["message_ids"] == [sent]
    failure: list[BaseException] = []

    def record() -> None:
        try:
            frames.record_transport_facts(
                [
                    (backend.agent.pk, claim.generation, frame["notice_id"], fact)
                    for fact in ("received", "host_written")
                ]
            )
        except BaseException as error:  # reported by the assertion below
            failure.append(error)
        finally:
            connection.close()

    with other_session() as acknowledgment:
        # The acknowledgment never gives up first: a deadlock would abort the batch.
        acknowledgment.execute("SET deadlock_timeout = '20s'")
        acknowledgment.execute(
            "SELECT id FROM lobbies_agent WHERE id = %s FOR UPDATE", [backend.agent.pk]
        )
        worker = threading.Thread(target=record)
        worker.start()
        eventually(lambda: _waiting_on_a_lock(acknowledgment), timeout=10, every=0.05)
        acknowledgment.execute(
            "SELECT id FROM lobbies_delivery WHERE recipient_id = %s FOR UPDATE",
            [backend.agent.pk],
        )
        acknowledgment.commit()
        worker.join(30)
    assert failure == []
    assert Notice.objects.get(id=frame["notice_id"]).host_written_at is not None
    assert Delivery.objects.get(message_id=sent).notified_generation == claim.generation


def test_transport_facts_do_not_deadlock_with_a_send_checking_its_recipients(lead, backend):
    """A send holds its sender's row (the fence) and, at COMMIT, takes `FOR KEY SHARE` on
    its recipients' rows (deferred foreign-key checks). A facts batch for both agents that
    held the recipient's row `FOR UPDATE` while waiting for the sender's closed a cycle."""
    # The batch locks in ascending order: it holds the send's recipient and waits for its sender.
    recipient, sender = sorted([lead.agent.pk, backend.agent.pk])
    failure: list[BaseException] = []

    def record() -> None:
        try:
            frames.record_transport_facts(
                [(pk, 1, str(uuid.uuid4()), "received") for pk in (sender, recipient)]
            )
        except BaseException as error:  # reported by the assertion below
            failure.append(error)
        finally:
            connection.close()

    with other_session() as send:
        send.execute("SET deadlock_timeout = '20s'")  # the batch would be the victim
        send.execute("SELECT id FROM lobbies_agent WHERE id = %s FOR UPDATE", [sender])
        worker = threading.Thread(target=record)
        worker.start()
        eventually(lambda: _waiting_on_a_lock(send), timeout=10, every=0.05)
        send.execute("SELECT id FROM lobbies_agent WHERE id = %s FOR KEY SHARE", [recipient])
        send.commit()
        worker.join(30)
    assert failure == []

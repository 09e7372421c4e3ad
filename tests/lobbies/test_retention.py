"""One day of retention, at its boundaries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from lobbies.actions import retention
from lobbies.actions.retention import sweep
from lobbies.models import (
    ActorKind,
    AuditAction,
    AuditEvent,
    Delivery,
    Message,
    ReceiptEvent,
    Schedule,
)
from lobbies.push import timers

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _send(client, to: str, content: str, key: str, **options):
    with time_machine.travel(T0, tick=False):
        return client.send(to, content, key, **options)


def test_a_message_goes_a_day_after_it_reached_its_recipients(lead, backend):
    sent = _send(lead, "backend", "old", "r1")
    with time_machine.travel(T0, tick=False):
        backend.ok("acknowledge_messages", message_ids=[sent["message_id"]])
    sweep(T0 + timedelta(hours=23, minutes=59))
    assert Message.objects.filter(pk=sent["message_id"]).exists()
    sweep(T0 + timedelta(days=1))
    assert not Message.objects.filter(pk=sent["message_id"]).exists()
    assert not Delivery.objects.exists() and not ReceiptEvent.objects.exists()
    # Acknowledging it now records nothing and is no error; a reply may name it.
    result = backend.ok("acknowledge_messages", message_ids=[sent["message_id"]])
    assert result["unknown_message_ids"] == [sent["message_id"]]
    assert backend.send("lead", "re: old", "r2", reply_to=sent["message_id"])["status"] == "stored"


def test_unacknowledged_messages_go_too(lead, backend):
    sent = _send(lead, "backend", "never read", "r1")
    sweep(T0 + timedelta(days=1, seconds=1))
    assert not Message.objects.filter(pk=sent["message_id"]).exists()


def test_a_scheduled_message_waits_and_counts_from_its_delivery(lead, backend):
    due = T0 + timedelta(days=3)
    sent = _send(lead, "backend", "later", "r1", deliver_at=due.isoformat())
    sweep(T0 + timedelta(days=2))
    assert Message.objects.filter(pk=sent["message_id"]).exists()
    with time_machine.travel(due, tick=False):
        timers.tick()
    sweep(due + timedelta(hours=23))
    assert Message.objects.filter(pk=sent["message_id"]).exists()
    sweep(due + timedelta(days=1, seconds=1))
    assert not Message.objects.filter(pk=sent["message_id"]).exists()


def test_a_cancelled_message_goes_a_day_after_its_cancellation(lead, backend):
    sent = _send(lead, "backend", "oops", "r1", deliver_at=(T0 + timedelta(days=5)).isoformat())
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        lead.ok("cancel_scheduled", message_id=sent["message_id"])
    sweep(T0 + timedelta(hours=25))
    assert Message.objects.filter(pk=sent["message_id"]).exists()  # still found by a repeat
    sweep(T0 + timedelta(hours=26, seconds=1))
    assert not Message.objects.filter(pk=sent["message_id"]).exists()


def test_a_schedule_cancelled_more_than_a_day_ago_goes(lead, backend):
    with time_machine.travel(T0, tick=False):
        created = lead.ok(
            "schedule_message",
            to="backend",
            content="x",
            client_request_id="s",
            time_zone="UTC",
            times=["09:00"],
        )
        lead.ok("cancel_scheduled", schedule_id=created["schedule_id"])
    sweep(T0 + timedelta(hours=23))
    assert Schedule.objects.exists()
    sweep(T0 + timedelta(days=1, seconds=1))
    assert not Schedule.objects.exists()


def test_an_idle_sweep_only_reads(lead, backend):
    _send(lead, "backend", "fresh", "r1")
    with CaptureQueriesContext(connection) as queries:
        sweep(T0 + timedelta(hours=1))
    assert all(q["sql"].lstrip().upper().startswith("SELECT") for q in queries.captured_queries)


def test_audit_events_beyond_each_lobbys_newest_are_trimmed(db, monkeypatch):
    monkeypatch.setattr(retention, "AUDIT_KEPT_PER_LOBBY", 3)
    for i in range(5):
        for lobby in ("team", "other", ""):
            AuditEvent.objects.create(
                actor_kind=ActorKind.OPERATOR,
                action=AuditAction.LOBBY_CREATED,
                lobby_name=lobby,
                target=f"{lobby}-{i}",
                created_at=T0 + timedelta(minutes=i),
            )
    assert retention.trim_audit_events() == 6
    for lobby in ("team", "other", ""):
        kept = AuditEvent.objects.filter(lobby_name=lobby).values_list("target", flat=True)
        assert sorted(kept) == [f"{lobby}-2", f"{lobby}-3", f"{lobby}-4"]
    assert retention.trim_audit_events() == 0

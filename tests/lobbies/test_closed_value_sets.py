"""Every closed value set is enforced by the database itself, not only by the API."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from lobbies.models import AuditEvent


@pytest.mark.parametrize(
    ("table", "column"),
    [
        ("lobbies_message", "scope"),
        ("lobbies_message", "kind"),
        ("lobbies_message", "priority"),
        ("lobbies_delivery", "state"),
        ("lobbies_delivery", "held_reason"),
    ],
)
def test_an_unknown_value_is_refused_by_a_check(lead, backend, table, column):
    lead.send("backend", "m", "r-1")
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {column} = 'bogus'")  # noqa: S608


def test_a_held_delivery_needs_a_reason_and_only_then(lead, backend):
    lead.send("backend", "m", "r-1")
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE lobbies_delivery SET state = 'held'")
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE lobbies_delivery SET held_reason = 'scheduled'")


def test_audit_actor_kind_and_action_are_closed(db):
    with pytest.raises(IntegrityError), transaction.atomic():
        AuditEvent.objects.create(
            actor_kind="robot", action="lobby_created", created_at=timezone.now()
        )
    with pytest.raises(IntegrityError), transaction.atomic():
        AuditEvent.objects.create(
            actor_kind="operator", action="made_up", created_at=timezone.now()
        )

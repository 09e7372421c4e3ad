"""Migration lobbies.0018: single-column indexes a composite one already serves are dropped
(fewer pages written per send), and every lookup they served still reads an index."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("lobbies", "0017_attachments")]
AFTER = [("lobbies", "0018_fewer_indexes_per_send")]

# The lookups the dropped indexes served: foreign keys' cascades and checks, retention.
LOOKUPS = {
    "lobbies_message": ["lobby_id", "sender_id", "schedule_id"],
    "lobbies_delivery": ["message_id", "recipient_id"],
}
DROPPED = {
    "lobbies_message": ["lobby_id", "sender_id", "schedule_id", "cancelled_at"],
    "lobbies_delivery": ["message_id", "recipient_id"],
}


def _index_names(table: str) -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.get_constraints(cursor, table))


def _own_index(table: str, column: str) -> str:
    """The name Django gave the column's own index (db_index=True)."""
    with connection.schema_editor() as editor:
        return editor._create_index_name(table, [column])


def _plan(sql: str) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # an index, if one can serve
            cursor.execute(f"EXPLAIN {sql}")
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        return " ".join(str(row) for row in cursor.fetchall())


def _migrate(target: list[tuple[str, str]]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)


@pytest.mark.django_db(transaction=True)
def test_the_redundant_indexes_go_and_come_back_on_reversal():
    try:
        _migrate(BEFORE)
        for table, columns in DROPPED.items():
            assert {_own_index(table, c) for c in columns} <= _index_names(table)
        _migrate(AFTER)
        for table, columns in DROPPED.items():
            assert not {_own_index(table, c) for c in columns} & _index_names(table)
        assert "message_cancelled" in _index_names("lobbies_message")
        _migrate(BEFORE)  # reversed: the indexes are back
        for table, columns in DROPPED.items():
            assert {_own_index(table, c) for c in columns} <= _index_names(table)
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db
def test_every_lookup_the_dropped_indexes_served_still_reads_an_index():
    for table, columns in LOOKUPS.items():
        for column in columns:
            plan = _plan(f"SELECT id FROM {table} WHERE {column} = 1")  # noqa: S608
            assert "Seq Scan" not in plan and " SCAN " not in f" {plan} ", (table, column, plan)
            assert "INDEX" in plan.upper(), (table, column, plan)
    cancelled = _plan("SELECT id FROM lobbies_message WHERE cancelled_at <= '2026-01-01'")
    assert "message_cancelled" in cancelled, cancelled

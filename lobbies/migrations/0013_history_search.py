"""History search through an index: SQLite FTS5 (trigram) or PostgreSQL pg_trgm (GIN).

SQLite: an external-content FTS5 table over lobbies_message.content, kept by triggers, so a
send's row and its search entry commit in the same transaction and the retention sweep's
DELETE removes both; existing stores are indexed here ('rebuild'). The trigram tokenizer
folds case for all of Unicode and matches substrings of 3 characters or more.
PostgreSQL: a GIN trigram index on UPPER(content), the expression Django's `icontains`
compares, so the same query is served by the index; an ordinary index, so transactional.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from django.db import migrations

SQLITE_UP = [
    "CREATE VIRTUAL TABLE lobbies_message_search USING fts5(content,"
    " content='lobbies_message', content_rowid='id', tokenize='trigram')",
    "CREATE TRIGGER lobbies_message_search_insert AFTER INSERT ON lobbies_message BEGIN"
    " INSERT INTO lobbies_message_search(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER lobbies_message_search_delete AFTER DELETE ON lobbies_message BEGIN"
    " INSERT INTO lobbies_message_search(lobbies_message_search, rowid, content)"
    " VALUES ('delete', old.id, old.content); END",
    "CREATE TRIGGER lobbies_message_search_update AFTER UPDATE OF content ON lobbies_message"
    " BEGIN INSERT INTO lobbies_message_search(lobbies_message_search, rowid, content)"
    " VALUES ('delete', old.id, old.content);"
    " INSERT INTO lobbies_message_search(rowid, content) VALUES (new.id, new.content); END",
    "INSERT INTO lobbies_message_search(lobbies_message_search) VALUES ('rebuild')",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS lobbies_message_search_insert",
    "DROP TRIGGER IF EXISTS lobbies_message_search_delete",
    "DROP TRIGGER IF EXISTS lobbies_message_search_update",
    "DROP TABLE IF EXISTS lobbies_message_search",
]
POSTGRES_UP = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX message_search ON lobbies_message USING gin ((UPPER(content)) gin_trgm_ops)",
]
POSTGRES_DOWN = ["DROP INDEX IF EXISTS message_search"]


def _run(statements: dict[str, list[str]]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        vendor = schema_editor.connection.vendor
        if vendor == "sqlite" and statements is FORWARD and sqlite3.sqlite_version_info < (3, 34):
            raise RuntimeError(
                f"history search needs SQLite 3.34 or later (FTS5 trigram); this Python's "
                f"SQLite is {sqlite3.sqlite_version}"
            )
        for sql in statements.get(vendor, []):
            schema_editor.execute(sql)

    return run


FORWARD = {"sqlite": SQLITE_UP, "postgresql": POSTGRES_UP}
BACKWARD = {"sqlite": SQLITE_DOWN, "postgresql": POSTGRES_DOWN}


class Migration(migrations.Migration):
    dependencies = [("lobbies", "0012_audit_actions_of_the_second_wave")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD))]

"""A store's shape is compared with what the schema steps make, on SQLite and PostgreSQL
(issue 43): a changed column type, a dropped NOT NULL, a missing index, a missing foreign key
and an extra table are each refused with its name, the SQLite file byte-for-byte untouched
and the PostgreSQL database untouched; a healthy store passes. The committed description
(lobbies/storage/shape.json) agrees with fresh stores of both vendors.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from lobbies.storage import shape
from lobbies.storage.discipline import IncompatibleStore, diagnose
from tests import postgres
from tests.server import _template_store

pytestmark = pytest.mark.django_db

AGENT = '"status_line" varchar(200) NOT NULL'
CHECKPOINT_FK = (
    '"agent_id" bigint NOT NULL UNIQUE REFERENCES "lobbies_agent" ("id") DEFERRABLE INITIALLY '
    "DEFERRED"
)

# (what to do to a healthy SQLite store: a statement, or (table, its SQL's old part, new
# part) rewritten in sqlite_master; what the refusal names)
SQLITE_DAMAGE: dict[str, tuple[str | tuple[str, str, str], str]] = {
    "column type": (
        ("lobbies_agent", AGENT, '"status_line" text NOT NULL'),
        "lobbies_agent.status_line: expected varchar(200) NOT NULL, found text NOT NULL",
    ),
    "not null": (
        ("lobbies_agent", AGENT, '"status_line" varchar(200)'),
        "lobbies_agent.status_line: expected varchar(200) NOT NULL, found varchar(200)",
    ),
    "index": ("DROP INDEX delivery_inbox", "index delivery_inbox on lobbies_delivery: missing"),
    "foreign key": (
        ("lobbies_checkpoint", CHECKPOINT_FK, '"agent_id" bigint NOT NULL UNIQUE'),
        "foreign key lobbies_checkpoint.agent_id: expected -> lobbies_agent.id, found none",
    ),
    "extra table": (
        "CREATE TABLE my_own_notes (body TEXT)",
        "table my_own_notes: not made by PocoLobby's schema steps",
    ),
}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def healthy(tmp_path: Path) -> Path:
    path = tmp_path / "pocolobby.sqlite3"
    shutil.copyfile(_template_store(), path)
    return path


def damage(path: Path, change: str | tuple[str, str, str]) -> None:
    conn = sqlite3.connect(path)
    if isinstance(change, str):
        conn.execute(change)
    else:
        table, old, new = change
        conn.execute("PRAGMA writable_schema = ON")
        changed = conn.execute(
            "UPDATE sqlite_master SET sql = replace(sql, ?, ?) WHERE name = ? AND instr(sql, ?)",
            (old, new, table, old),
        )
        assert changed.rowcount == 1
    conn.commit()
    conn.close()


def test_the_description_agrees_with_a_fresh_sqlite_store(healthy: Path):
    conn = sqlite3.connect(f"{healthy.as_uri()}?mode=ro", uri=True)
    try:
        found = shape.sqlite_shape(conn)
    finally:
        conn.close()
    assert shape.differences(shape.expected("sqlite"), found) == []  # type: ignore[arg-type]


def test_a_healthy_sqlite_store_passes_and_extra_plain_indexes_are_the_owners(healthy: Path):
    damage(healthy, "CREATE INDEX my_message_index ON lobbies_message (content_bytes)")
    assert diagnose(healthy).state == "ours"


@pytest.mark.parametrize("kind", sorted(SQLITE_DAMAGE))
def test_a_sqlite_store_of_another_shape_is_refused_untouched_naming_it(healthy: Path, kind: str):
    change, named = SQLITE_DAMAGE[kind]
    damage(healthy, change)
    before = digest(healthy)
    with pytest.raises(IncompatibleStore) as refused:
        diagnose(healthy)
    assert named in str(refused.value)
    assert digest(healthy) == before
    assert not healthy.with_name(healthy.name + "-wal").exists()


# ---------------------------------------------------------------- PostgreSQL

PG_DAMAGE = {
    "column type": (
        "ALTER TABLE lobbies_agent ALTER COLUMN status_line TYPE text",
        "lobbies_agent.status_line: expected character varying(200) NOT NULL, found text NOT NULL",
    ),
    "not null": (
        "ALTER TABLE lobbies_agent ALTER COLUMN status_line DROP NOT NULL",
        "lobbies_agent.status_line: expected character varying(200) NOT NULL, "
        "found character varying(200)",
    ),
    "index": ("DROP INDEX delivery_inbox", "index delivery_inbox on lobbies_delivery: missing"),
    "foreign key": (
        "ALTER TABLE lobbies_checkpoint DROP CONSTRAINT {checkpoint_fk}",
        "foreign key lobbies_checkpoint.agent_id: expected -> lobbies_agent.id, found none",
    ),
    "extra table": (
        "CREATE TABLE my_own_notes (body text)",
        "table my_own_notes: not made by PocoLobby's schema steps",
    ),
}


@pytest.fixture(scope="module")
def pg_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One database `pocolobby init` made; each test's damage is rolled back or undone."""
    for name in postgres.own_database("shape"):
        made = postgres.cli(name, tmp_path_factory.mktemp("pgshape"), "init")
        assert made.returncode == 0, made.stderr
        yield name


def _shape_after(database: str, statement: str) -> list[str]:
    """The differences a store shows with `statement` applied, in a transaction rolled back."""
    with psycopg.connect(postgres.url(database)) as conn, conn.cursor() as cursor:
        fk = cursor.execute(
            "SELECT conname FROM pg_constraint WHERE contype = 'f' "
            "AND conrelid = 'lobbies_checkpoint'::regclass"
        ).fetchone()
        cursor.execute(statement.format(checkpoint_fk=f'"{fk[0]}"'))
        found = shape.postgres_shape(cursor)
        conn.rollback()
    return shape.differences(shape.expected("postgresql"), found)  # type: ignore[arg-type]


def test_the_description_agrees_with_a_fresh_postgres_store(pg_store: str):
    assert _shape_after(pg_store, "SELECT 1") == []


@pytest.mark.parametrize("kind", sorted(PG_DAMAGE))
def test_a_postgres_store_of_another_shape_is_told_apart_naming_it(pg_store: str, kind: str):
    statement, named = PG_DAMAGE[kind]
    assert named in _shape_after(pg_store, statement)


def test_a_postgres_store_of_another_shape_is_refused_untouched(pg_store: str, tmp_path: Path):
    with postgres.admin(pg_store) as conn:
        conn.execute("ALTER TABLE lobbies_agent ALTER COLUMN status_line DROP NOT NULL")
    try:
        before = postgres.snapshot(pg_store)
        refused = postgres.cli(pg_store, tmp_path, "init")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "lobbies_agent.status_line: expected character varying(200) NOT NULL" in (
            refused.stderr
        )
        assert "Traceback" not in refused.stderr
        assert postgres.snapshot(pg_store) == before
    finally:
        with postgres.admin(pg_store) as conn:
            conn.execute("ALTER TABLE lobbies_agent ALTER COLUMN status_line SET NOT NULL")
    assert postgres.cli(pg_store, tmp_path, "init").returncode == 0  # healthy again: opened


def test_the_description_names_this_releases_schema_steps():
    """A new migration needs a new description: `python -m lobbies.storage.shape` writes it."""
    from django.db.migrations.loader import MigrationLoader

    known = MigrationLoader(None, ignore_no_migrations=True).disk_migrations
    assert shape.described_steps() == sorted(f"{app}.{name}" for app, name in known)


def test_an_upgrade_to_another_shape_is_rolled_back_leaving_the_file_untouched(tmp_path: Path):
    """The whole shape is compared inside the upgrade's transaction."""
    from tests.lobbies.test_storage import embedded_env

    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(_template_store(), data / "pocolobby.sqlite3")
    store = data / "pocolobby.sqlite3"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pocolobby", *args],
            env={**embedded_env(data), "POCOLOBBY_ADMIN_TOKEN": "pla_shape"},
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    back = cli("manage", "migrate", "board", "0003")  # an older release's store
    assert back.returncode == 0, back.stderr
    damage(store, "CREATE TABLE my_own_notes (body TEXT)")
    before = digest(store)
    refused = cli("init")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "table my_own_notes: not made by PocoLobby's schema steps" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert digest(store) == before

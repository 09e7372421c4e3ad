"""The embedded store opens only its own files and leaves any other byte-for-byte unchanged."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from lobbies.storage.discipline import APPLICATION_ID, FORMAT_VERSION


def embedded_env(data_dir: Path) -> dict[str, str]:
    """The environment of a broker on the embedded default, whatever this test run uses."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "POCOLOBBY_")) and k not in {"DATABASE_URL", "REDIS_URL"}
    }
    env["POCOLOBBY_DATA_DIR"] = str(data_dir)
    return env


def run_init(data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = embedded_env(data_dir)
    env["POCOLOBBY_ADMIN_TOKEN"] = "pla_storage-test"
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", "init"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def db_file(tmp_path: Path) -> Path:
    return tmp_path / "pocolobby.sqlite3"


def make_sqlite(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def assert_refused_untouched(tmp_path: Path, expected: str) -> None:
    path = db_file(tmp_path)
    before = digest(path)
    size = path.stat().st_size
    result = run_init(tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert digest(path) == before and path.stat().st_size == size


def test_an_absent_file_is_initialised_with_our_identity(tmp_path):
    result = run_init(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "initialised" in result.stdout
    conn = sqlite3.connect(db_file(tmp_path))
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"lobbies_message", "lobbies_delivery", "django_migrations"} <= tables
    conn.close()
    again = run_init(tmp_path)
    assert again.returncode == 0 and "opened" in again.stdout


def test_an_empty_file_is_initialised(tmp_path):
    db_file(tmp_path).touch()
    result = run_init(tmp_path)
    assert result.returncode == 0, result.stderr
    conn = sqlite3.connect(db_file(tmp_path))
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


def test_another_applications_file_is_refused_untouched(tmp_path):
    make_sqlite(
        db_file(tmp_path),
        "PRAGMA application_id = 1128351288",
        "CREATE TABLE members (member_id INTEGER PRIMARY KEY)",
    )
    assert_refused_untouched(tmp_path, "belongs to another application (application_id 0x4341")


def test_tables_without_our_identity_are_refused_untouched(tmp_path):
    make_sqlite(
        db_file(tmp_path), "CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('keep me')"
    )
    assert_refused_untouched(tmp_path, "no PocoLobby identity")


def test_a_file_from_a_newer_format_is_refused_untouched(tmp_path):
    assert run_init(tmp_path).returncode == 0
    make_sqlite(db_file(tmp_path), f"PRAGMA user_version = {FORMAT_VERSION + 1}")
    assert_refused_untouched(tmp_path, "written by a newer PocoLobby (format 2")


def test_a_file_with_unknown_schema_steps_is_refused_untouched(tmp_path):
    assert run_init(tmp_path).returncode == 0
    make_sqlite(
        db_file(tmp_path),
        "INSERT INTO django_migrations (app, name, applied) "
        "VALUES ('lobbies', '9999_from_the_future', '2030-01-01')",
    )
    assert_refused_untouched(tmp_path, "lobbies.9999_from_the_future")


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path):
    db_file(tmp_path).write_text("my diary\n" * 100)
    assert_refused_untouched(tmp_path, "is not a SQLite database")


@pytest.mark.parametrize("pragma", ["journal_mode", "synchronous", "foreign_keys", "temp_store"])
def test_broker_connections_use_wal_full_sync_foreign_keys_and_memory_temp_store(tmp_path, pragma):
    """temp_store=MEMORY: a shared commit's savepoint journal spilled to a temporary file
    otherwise, about 40 writes a send (docs/PERFORMANCE.md)."""
    assert run_init(tmp_path).returncode == 0
    env = embedded_env(tmp_path) | {"DJANGO_SETTINGS_MODULE": "pocolobby.settings"}
    script = (
        "import django; django.setup(); from django.db import connection;"
        f"c = connection.cursor(); c.execute('PRAGMA {pragma}'); print(c.fetchone()[0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    expected = {"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "temp_store": "2"}
    assert out == expected[pragma]


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("DROP TABLE lobbies_checkpoint", "table lobbies_checkpoint: missing"),
        (
            "ALTER TABLE lobbies_agent DROP COLUMN status_line",
            "lobbies_agent.status_line: expected varchar(200) NOT NULL, found no column",
        ),
        ("DROP INDEX delivery_inbox", "index delivery_inbox on lobbies_delivery: missing"),
    ],
)
def test_a_file_of_ours_missing_a_table_column_or_index_is_refused_untouched(
    tmp_path, damage, named
):
    assert run_init(tmp_path).returncode == 0
    make_sqlite(db_file(tmp_path), damage, "CREATE TABLE my_own_notes (body TEXT)")
    assert_refused_untouched(tmp_path, named)


def test_an_index_of_the_owners_is_compatible_a_table_is_not(tmp_path):
    """Issue 43: the store's whole shape is compared; an index that is not unique changes no
    write and is the owner's to add (tests/lobbies/test_store_shape.py has the rest)."""
    assert run_init(tmp_path).returncode == 0
    make_sqlite(
        db_file(tmp_path), "CREATE INDEX my_message_index ON lobbies_message (content_bytes)"
    )
    again = run_init(tmp_path)
    assert again.returncode == 0 and "opened" in again.stdout, again.stderr
    make_sqlite(db_file(tmp_path), "CREATE TABLE my_own_notes (body TEXT)")
    assert_refused_untouched(tmp_path, "table my_own_notes: not made by PocoLobby's schema steps")

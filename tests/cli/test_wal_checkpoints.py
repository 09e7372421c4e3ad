"""The store's WAL is checkpointed on a thread of its own
(lobbies/fastlane/sqlite/checkpoints.py)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import httpx
import pytest
from django.db import connection

from lobbies.fastlane.sqlite.checkpoints import BACKSTOP_PAGES, WalCheckpointer
from pocolobby.backup import STORE_NAME
from tests.eventually import eventually

pytest_plugins = ("tests.server_fixtures",)


def _rows_in_the_store_file_alone(store: Path, table: str, tmp_path: Path) -> int:
    """What the store file holds without its WAL: a copy of the file alone, opened read-only."""
    alone = tmp_path / "alone.sqlite3"
    shutil.copyfile(store, alone)
    reader = sqlite3.connect(f"file:{alone}?immutable=1", uri=True)
    try:
        found = reader.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", [table]
        ).fetchone()[0]
        if not found:
            return -1
        return int(reader.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608
    except sqlite3.DatabaseError:
        return -2  # copied while a checkpoint wrote it: look again
    finally:
        reader.close()


def test_commits_reach_the_store_file_through_the_checkpointer_thread(tmp_path: Path):
    store = tmp_path / "store.sqlite3"
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")  # commits never checkpoint by themselves
    writer.execute("CREATE TABLE message (id INTEGER PRIMARY KEY, body TEXT)")
    for n in range(50):
        writer.execute("INSERT INTO message (body) VALUES (?)", [f"m{n}"])
    assert _rows_in_the_store_file_alone(store, "message", tmp_path) == -1  # all in the WAL
    checkpointer = WalCheckpointer(store, seconds=0.05).start()
    try:
        eventually(lambda: checkpointer.checkpoints >= 1, timeout=10, every=0.05)
        assert _rows_in_the_store_file_alone(store, "message", tmp_path) == 50
        # The writer goes on meanwhile, and what it commits later follows.
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO message (body) VALUES ('late')")
        writer.execute("COMMIT")
        eventually(
            lambda: _rows_in_the_store_file_alone(store, "message", tmp_path) == 51,
            timeout=10,
            every=0.05,
        )
    finally:
        checkpointer.stop()
        writer.close()
    assert not checkpointer.thread.is_alive()


@pytest.mark.django_db
def test_the_brokers_connections_checkpoint_only_as_a_backstop():
    if connection.vendor != "sqlite":
        pytest.skip("a SQLite setting")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_autocheckpoint")
        assert cursor.fetchone()[0] == BACKSTOP_PAGES


def test_a_served_stores_sends_reach_its_file_well_before_the_backstop(broker, tmp_path: Path):
    """Without the serve process's checkpointer, a few sends stay in the WAL until the
    backstop's 10,000 pages: the store file alone would not hold them."""
    configs = broker.provision("ckpt", ["lead", "dev"], tmp_path / "configs")
    lead = configs["lead"]
    for n in range(5):
        answer = httpx.post(
            f"{broker.url}/v1/messages",
            headers=lead.headers,
            json={"to": "dev", "content": f"n{n}", "client_request_id": f"c{n}"},
        )
        assert answer.status_code == 200, answer.text
    store = broker.data_dir / STORE_NAME
    eventually(
        lambda: _rows_in_the_store_file_alone(store, "lobbies_message", tmp_path) == 5,
        timeout=10,
        every=0.05,
    )

"""`pocolobby backup` and `pocolobby restore` on PostgreSQL: a pg_dump archive, restored with
pg_restore into the same restore mode as a SQLite store, with real brokers and the real CLI.

Each test makes a database of its own and drops it (tests/postgres.py: skipped without a
reachable PostgreSQL or pg_dump, failed instead where POCOLOBBY_REQUIRE_POSTGRES=1).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.bridge_client import send_message
from tests.postgres import (
    admin,
    cli,
    create_database,
    drop_database,
    own_database,
    require_tools,
    snapshot,
    url,
)
from tests.server import AgentConfig, Broker, clean_env

pytestmark = pytest.mark.slow


@pytest.fixture
def database() -> Iterator[str]:
    require_tools("pg_dump", "pg_restore")
    yield from own_database("pocolobby_restore")


def backup_path(stdout: str) -> Path:
    return Path(re.search(r"^backup (\S+):", stdout, re.M).group(1))


def status_of(broker: Broker, token: str) -> tuple[int, str]:
    response = httpx.get(
        f"{broker.url}/v1/agents", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    return response.status_code, response.json().get("error", {}).get("code", "")


def message_ids(database: str) -> set[int]:
    with admin(database) as conn:
        return {row[0] for row in conn.execute("SELECT id FROM lobbies_message")}


def tables(database: str) -> set[str]:
    with admin(database) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    return {name for (name,) in rows}


def test_a_postgresql_restore_loses_what_came_after_the_backup_and_closes_access_until_finish(
    database: str, tmp_path: Path
):
    env = {"DATABASE_URL": url(database)}
    broker = Broker(tmp_path / "data", env=env).start()
    try:
        first = broker.provision("ops", ["alpha", "beta"], tmp_path / "configs")
        m1 = asyncio.run(send_message(broker.url, first["alpha"].token, "beta", "one", "p-1"))
        m2 = asyncio.run(send_message(broker.url, first["alpha"].token, "beta", "two", "p-2"))
        incarnation = httpx.get(f"{broker.url}/v1/health").json()["incarnation"]

        taken = broker.cli("backup", "--to", str(tmp_path / "backups"), env=env)
        assert taken.returncode == 0, taken.stderr
        assert "pg_restore --list ok" in taken.stdout
        assert f"ops 2; last message id {m2}" in taken.stdout
        made = backup_path(taken.stdout)
        assert stat.S_IMODE(made.stat().st_mode) == 0o700
        assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in made.iterdir()} == {
            "store.dump": 0o600,
            "manifest.json": 0o600,
        }
        assert (made / "store.dump").read_bytes()[:5] == b"PGDMP"
        manifest = json.loads((made / "manifest.json").read_text())
        assert manifest["store"] == "postgresql" and manifest["last_message_id"] == m2

        m3 = asyncio.run(send_message(broker.url, first["alpha"].token, "beta", "three", "p-3"))

        # While the broker serves the database, on whatever port: refused, nothing changed.
        before = snapshot(database)
        refused = broker.cli(
            "restore", str(made), env={**env, "POCOLOBBY_URL": "http://127.0.0.1:9"}
        )
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "restore refused, nothing changed" in refused.stderr
        assert f"pocolobby serve pid {broker.pid} (shared," in refused.stderr
        assert snapshot(database) == before
        broker.stop()

        configs_dir = tmp_path / "new-configs"
        restored = broker.cli("restore", str(made), "--configs-dir", str(configs_dir), env=env)
        assert restored.returncode == 0, restored.stderr
        assert "restore --finish" in restored.stdout
        assert message_ids(database) == {m1, m2}  # the message sent after the backup is gone
        assert "pocolobby_restore_pending" not in tables(database)
        # ... but not lost silently: the store as it was is kept beside, and says so.
        aside = re.search(r"the store as it was is in (\S+)\)", restored.stdout).group(1)
        assert json.loads((Path(aside) / "manifest.json").read_text())["last_message_id"] == m3
        fresh = {p.stem: AgentConfig.read(p) for p in configs_dir.glob("*.json")}
        assert set(fresh) == {"ops-alpha", "ops-beta"}
        for config in fresh.values():
            assert stat.S_IMODE(config.path.stat().st_mode) == 0o600
            assert config.token not in restored.stdout

        broker.start()
        health = httpx.get(f"{broker.url}/v1/health").json()
        assert health["restore_mode"] is True and health["incarnation"] != incarnation
        assert "RESTORE MODE" in broker.cli("status").stdout
        assert status_of(broker, fresh["ops-beta"].token) == (503, "restore_mode")
        for old in (first["alpha"].token, first["beta"].token):
            assert status_of(broker, old) == (401, "token_revoked")

        finish = broker.cli("restore", "--finish")
        assert finish.returncode == 0, finish.stderr
        assert "2 pending copies" in finish.stdout
        assert httpx.get(f"{broker.url}/v1/health").json()["restore_mode"] is False
        assert status_of(broker, fresh["ops-alpha"].token) == (200, "")
        for old in (first["alpha"].token, first["beta"].token):
            assert status_of(broker, old) == (401, "token_revoked")
        history = httpx.get(
            f"{broker.url}/v1/messages",
            params={"view": "history"},
            headers=fresh["ops-beta"].headers,
        ).json()
        assert sorted(m["message_id"] for m in history["messages"]) == [m1, m2]
    finally:
        broker.stop()


def test_a_postgresql_restore_on_a_new_machine_puts_the_backups_attachment_files_back(
    database: str, tmp_path: Path
):
    # The old machine keeps its files outside its data directory (POCOLOBBY_ATTACHMENTS_DIR):
    # the backup copies them from there.
    old_env = {"DATABASE_URL": url(database), "POCOLOBBY_ATTACHMENTS_DIR": str(tmp_path / "old")}
    old = Broker(tmp_path / "old-machine", env=old_env).start()
    try:
        configs = old.provision("ops", ["alpha", "beta"], tmp_path / "configs")
        attachment, data = old.send_screenshot(configs["alpha"], "beta", tmp_path)
        taken = old.cli("backup", "--to", str(tmp_path / "backups"), env=old_env)
        assert taken.returncode == 0, taken.stderr
        assert ", 1 attachment files)" in taken.stdout
    finally:
        old.stop()
    shutil.rmtree(tmp_path / "old")  # the old machine is gone, with its files

    files = tmp_path / "new-files"
    new_env = {"DATABASE_URL": url(database), "POCOLOBBY_ATTACHMENTS_DIR": str(files)}
    new = Broker(tmp_path / "new-machine", env=new_env)
    try:
        configs_dir = tmp_path / "new-configs"
        restored = new.cli(
            "restore", str(backup_path(taken.stdout)), "--configs-dir", str(configs_dir),
            env=new_env,
        )  # fmt: skip
        assert restored.returncode == 0, restored.stderr
        assert f"; 1 attachment files put back in {files}" in restored.stdout
        assert [p.name for p in files.iterdir()] == [hashlib.sha256(data).hexdigest()]
        new.start()
        assert new.cli("restore", "--finish", env=new_env).returncode == 0
        beta = AgentConfig.read(configs_dir / "ops-beta.json")
        got = httpx.get(f"{new.url}/v1/attachments/{attachment}", headers=beta.headers, timeout=10)
        assert got.status_code == 200 and got.content == data
    finally:
        new.stop()


def _foreign_archive(tmp_path: Path) -> Path:
    """A pg_dump archive of a database that is not a PocoLobby store."""
    other = create_database("pocolobby_foreign")
    try:
        with admin(other) as conn:
            conn.execute("CREATE TABLE notes (body text)")
            conn.execute("INSERT INTO notes VALUES ('not ours')")
        path = tmp_path / "foreign.dump"
        subprocess.run(
            ["pg_dump", "--format=custom", f"--file={path}", url(other)],
            env=clean_env(),
            check=True,
            capture_output=True,
        )
    finally:
        drop_database(other)
    return path


def test_a_postgresql_restore_refuses_what_is_not_its_own_and_an_unfinished_one_stays_refused(
    database: str, tmp_path: Path
):
    data = tmp_path / "data"
    assert cli(database, data, "init").returncode == 0, "init"
    taken = cli(database, data, "backup", "--to", str(tmp_path / "b"))
    assert taken.returncode == 0, taken.stderr
    made = backup_path(taken.stdout)

    sqlite_data = tmp_path / "sqlite"
    sqlite_env = clean_env({"POCOLOBBY_DATA_DIR": str(sqlite_data)})
    for args in (["init"], ["backup", "--to", str(tmp_path / "sb")]):
        subprocess.run(
            [sys.executable, "-m", "pocolobby", *args],
            env=sqlite_env,
            check=True,
            capture_output=True,
        )
    (sqlite_backup,) = (tmp_path / "sb").iterdir()
    junk = tmp_path / "junk.dump"
    junk.write_bytes(b"PGDMP" + b"\0" * 200)

    env = {"POCOLOBBY_URL": "http://127.0.0.1:9"}
    before = snapshot(database)
    for source, reason in [
        (sqlite_backup, "is a SQLite backup, and this broker's store is postgresql"),
        (junk, "pg_restore failed"),
        (_foreign_archive(tmp_path), "holds tables (notes) but no PocoLobby identity"),
        (tmp_path / "absent", "does not exist"),
    ]:
        result = cli(database, data, "restore", str(source), env=env)
        assert result.returncode == 1, (source, result.stdout, result.stderr)
        assert "restore refused, nothing changed" in result.stderr, result.stderr
        assert reason in result.stderr, (reason, result.stderr)
        assert "Traceback" not in result.stderr
    assert snapshot(database) == before

    # A restore that died after pg_restore (its marker left): every start is refused...
    with admin(database) as conn:
        conn.execute(
            "CREATE TABLE pocolobby_restore_pending "
            "(source text NOT NULL, pre_restore text NOT NULL, began_at timestamptz NOT NULL)"
        )
        conn.execute(
            "INSERT INTO pocolobby_restore_pending VALUES (%s, %s, now())",
            [str(made), "/kept/here"],
        )
    for command in (("init",), ("serve", "--port", "9")):
        stopped = cli(database, data, *command)
        assert stopped.returncode == 2, (command, stopped.stdout, stopped.stderr)
        assert "did not finish" in stopped.stderr and str(made) in stopped.stderr, command
        assert "/kept/here" in stopped.stderr
    # ... until the restore is run again.
    again = cli(database, data, "restore", str(made), env=env)
    assert again.returncode == 0, again.stderr
    opened = cli(database, data, "init")
    assert opened.returncode == 0 and "RESTORE MODE" in opened.stdout, opened.stderr


def test_a_postgresql_backup_removes_what_a_killed_one_left(database: str, tmp_path: Path):
    """The working folder as a killed `pocolobby backup` leaves it (its pid gone, no process
    holding its lock): the next backup removes it and says so; tests/cli/test_backup_restore.py
    kills a real one."""
    data, to = tmp_path / "data", tmp_path / "b"
    assert cli(database, data, "init").returncode == 0, "init"
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    leftover = to / f".pocolobby-backup-20260101T000000.000000Z.tmp-{gone.stdout.strip()}"
    leftover.mkdir(parents=True)
    (leftover / "store.dump").write_bytes(b"PGDMP half a store")
    Path(f"{leftover}.lock").touch()

    taken = cli(database, data, "backup", "--to", str(to))

    assert taken.returncode == 0, taken.stderr
    assert f"removed {leftover}, left unfinished by a backup that was killed" in taken.stdout
    assert not leftover.exists() and not Path(f"{leftover}.lock").exists()
    assert backup_path(taken.stdout).is_dir()

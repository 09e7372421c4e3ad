"""`pocolobby backup` and `pocolobby restore` with real broker subprocesses and the real CLI."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.bridge_client import Bridge, payload, send_message
from tests.eventually import eventually
from tests.server import REPO_ROOT, AgentConfig, Broker, BrokerFactory, clean_env

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow


def backup_path(stdout: str) -> Path:
    return Path(re.search(r"^backup (\S+):", stdout, re.M).group(1))


def last_message_id(stdout: str) -> int:
    return int(re.search(r"last message id (\d+)", stdout).group(1))


def cli(data_dir: Path, *args: str, env: dict[str, str] | None = None, umask: int = 0o022):
    """The CLI without a broker: only the data directory."""
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", *args],
        cwd=REPO_ROOT,
        env=clean_env({"POCOLOBBY_DATA_DIR": str(data_dir), **(env or {})}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lambda: os.umask(umask),
    )


def test_a_backup_under_send_load_holds_exactly_the_sends_answered_before_it(
    broker_factory: BrokerFactory, tmp_path: Path
):
    broker = broker_factory(env={"POCOLOBBY_SENDS_PER_MINUTE": "100000"})
    configs = broker.provision("load", ["alpha", "beta"], tmp_path / "configs")
    answered: list[tuple[float, int]] = []
    refusals: list[str] = []
    stop = threading.Event()

    def sender(worker: int) -> None:
        with httpx.Client(base_url=broker.url, headers=configs["alpha"].headers) as client:
            n = 0
            while not stop.is_set():
                n += 1
                response = client.post(
                    "/v1/messages",
                    json={"to": "beta", "content": f"m{n}", "client_request_id": f"{worker}-{n}"},
                )
                if response.status_code != 200:
                    refusals.append(response.text)
                    return
                answered.append((time.monotonic(), response.json()["message_id"]))

    threads = [threading.Thread(target=sender, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    eventually(lambda: len(answered) >= 30 or bool(refusals), timeout=60, every=0.05)
    began = time.monotonic()
    result = broker.cli("backup", "--to", str(tmp_path / "backups"))
    ended = len(answered)
    eventually(lambda: len(answered) >= ended + 10 or bool(refusals), timeout=60, every=0.05)
    stop.set()
    for thread in threads:
        thread.join()

    assert result.returncode == 0, result.stderr
    assert refusals == []
    assert "integrity_check ok" in result.stdout
    before = {mid for at, mid in answered if at < began}
    last = last_message_id(result.stdout)
    copy = backup_path(result.stdout) / "store.sqlite3"
    conn = sqlite3.connect(f"{copy.as_uri()}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        held = {row[0] for row in conn.execute("SELECT id FROM lobbies_message")}
        copies = dict(
            conn.execute("SELECT message_id, COUNT(*) FROM lobbies_delivery GROUP BY message_id")
        )
        sequence = conn.execute(
            "SELECT message_sequence FROM lobbies_lobby WHERE name = 'load'"
        ).fetchone()[0]
    finally:
        conn.close()
    all_answered = {mid for _, mid in answered}
    assert len(before) >= 30 and len(all_answered) > len(held)  # sends ran on both sides
    assert before <= held
    assert held == {mid for mid in all_answered if mid <= last}
    assert f"load {sequence}" in result.stdout and sequence == len(held)
    assert all(copies.get(mid) == 1 for mid in held)  # every message with its inbox row


def test_backup_rotates_and_fails_loudly_without_a_store_or_on_postgresql(tmp_path: Path):
    data = tmp_path / "data"
    assert cli(data, "init").returncode == 0
    for _ in range(3):
        result = cli(data, "backup", "--to", str(tmp_path / "b"), "--keep", "2")
        assert result.returncode == 0, result.stderr
    assert "removed old backup" in result.stdout
    assert len([p for p in (tmp_path / "b").iterdir() if p.name.startswith("pocolobby-")]) == 2

    missing = cli(tmp_path / "nothing-here", "backup")
    assert missing.returncode == 1 and "no store at" in missing.stderr

    # On PostgreSQL it runs pg_dump (tests/cli/test_backup_restore_postgres.py); a server
    # that does not answer is one line, without the password.
    pg = cli(data, "backup", env={"DATABASE_URL": "postgres://ops:secret@127.0.0.1:9/poco"})
    assert pg.returncode == 1, pg.stderr
    assert "cannot connect to PostgreSQL" in pg.stderr and "Traceback" not in pg.stderr
    assert "secret" not in pg.stderr


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_restore_refuses_what_is_not_a_sound_store_of_this_release(tmp_path: Path):
    data = tmp_path / "data"
    assert cli(data, "init").returncode == 0
    store = data / "pocolobby.sqlite3"
    before = _digest(store)

    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"not a database at all" * 100)
    newer = tmp_path / "newer.sqlite3"
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA application_id = {0x506F4C62}")  # ours
    conn.execute("PRAGMA user_version = 99")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    damaged = tmp_path / "damaged.sqlite3"
    backup = cli(data, "backup", "--to", str(tmp_path / "b"))
    source = backup_path(backup.stdout) / "store.sqlite3"
    raw = bytearray(source.read_bytes())
    page = 4096
    for offset in range(8 * page, min(len(raw), 40 * page), page):
        raw[offset + 100 : offset + 400] = b"\xff" * 300
    damaged.write_bytes(bytes(raw))

    for path, reason in [
        (junk, "not a SQLite database"),
        (newer, "newer PocoLobby"),
        (damaged, "malformed"),  # the diagnosis or integrity_check, whichever reads it first
        (tmp_path / "absent", "does not exist"),
    ]:
        result = cli(data, "restore", str(path), env={"POCOLOBBY_URL": "http://127.0.0.1:9"})
        assert result.returncode == 1, (path, result.stdout, result.stderr)
        assert "restore refused, nothing changed" in result.stderr and reason in result.stderr
    assert _digest(store) == before
    assert sorted(p.name for p in data.iterdir() if "restore" in p.name) == []


def test_restore_refuses_while_a_broker_serves(broker: Broker, tmp_path: Path):
    backup = broker.cli("backup", "--to", str(tmp_path / "b"))
    result = broker.cli("restore", str(backup_path(backup.stdout)))
    assert result.returncode == 1 and "stop it before restoring" in result.stderr


def status_of(broker: Broker, token: str) -> tuple[int, str]:
    response = httpx.get(
        f"{broker.url}/v1/agents", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    return response.status_code, response.json().get("error", {}).get("code", "")


async def _bootstrap_after_finish(broker: Broker, token: str) -> tuple[dict, dict]:
    async with await Bridge.connect(broker.url, token) as bridge:
        _, bootstrap = await bridge.bootstrapped()
        await bridge.nothing(1.0)  # nothing pushed again with its body
        return bootstrap, payload(bootstrap)


async def _refused_bridge(broker: Broker, token: str) -> int | None:
    bridge = await Bridge.connect(broker.url, token)
    _, code = await bridge.refused()
    return code


def test_restore_end_to_end_closes_access_until_finish_and_lists_uncertain_work(
    broker_factory: BrokerFactory, tmp_path: Path
):
    broker = broker_factory(name="restored")
    first = broker.provision("ops", ["alpha", "beta"], tmp_path / "configs")
    m1 = asyncio.run(send_message(broker.url, first["alpha"].token, "beta", "one", "e-1"))
    m2 = asyncio.run(send_message(broker.url, first["alpha"].token, "beta", "two", "e-2"))
    incarnation = httpx.get(f"{broker.url}/v1/health").json()["incarnation"]
    backup = broker.cli("backup", "--to", str(tmp_path / "backups"))
    assert backup.returncode == 0, backup.stderr
    rotated_path = tmp_path / "rotated-alpha.json"
    broker.cli_ok("agent", "rotate", "ops", "alpha", "--config", str(rotated_path))
    rotated = AgentConfig.read(rotated_path)
    m3 = asyncio.run(send_message(broker.url, rotated.token, "beta", "three", "e-3"))
    broker.stop()

    configs_dir = tmp_path / "new-configs"
    result = broker.cli(
        "restore", str(backup_path(backup.stdout)), "--configs-dir", str(configs_dir)
    )
    assert result.returncode == 0, result.stderr
    assert "restore --finish" in result.stdout
    fresh = {p.stem: AgentConfig.read(p) for p in configs_dir.glob("*.json")}
    assert set(fresh) == {"ops-alpha", "ops-beta"}
    for config in fresh.values():
        assert stat.S_IMODE(config.path.stat().st_mode) == 0o600
        assert config.url == broker.url
        assert config.token not in result.stdout

    broker.start()
    health = httpx.get(f"{broker.url}/v1/health").json()
    assert health["restore_mode"] is True and health["incarnation"] != incarnation
    assert "RESTORE MODE" in broker.cli_ok("status").stdout
    assert status_of(broker, fresh["ops-beta"].token) == (503, "restore_mode")
    assert asyncio.run(_refused_bridge(broker, fresh["ops-beta"].token)) == 4503
    for old in (first["alpha"].token, first["beta"].token):
        assert status_of(broker, old) == (401, "token_revoked")
    assert status_of(broker, rotated.token) == (401, "invalid_token")  # not in that history

    finish = broker.cli("restore", "--finish")
    assert finish.returncode == 0, finish.stderr
    assert "2 pending copies" in finish.stdout
    assert httpx.get(f"{broker.url}/v1/health").json()["restore_mode"] is False
    for old in (first["alpha"].token, first["beta"].token):
        assert status_of(broker, old) == (401, "token_revoked")
    assert status_of(broker, rotated.token) == (401, "invalid_token")
    assert status_of(broker, fresh["ops-alpha"].token) == (200, "")

    bootstrap, shown = asyncio.run(_bootstrap_after_finish(broker, fresh["ops-beta"].token))
    assert shown["backlog"]["message_ids"] == [m1, m2]
    assert shown["restored"] == {"uncertain_message_ids": [m1, m2]}
    assert "restored from a backup" in bootstrap["content"]
    context = httpx.post(
        f"{broker.url}/v1/tools/get_context", json={}, headers=fresh["ops-beta"].headers
    ).json()
    assert context["restored"]["uncertain_message_ids"] == [m1, m2]
    assert context["broker"]["incarnation"] == health["incarnation"]
    history = httpx.get(
        f"{broker.url}/v1/messages", params={"view": "history"}, headers=fresh["ops-beta"].headers
    ).json()
    assert m3 not in [m["message_id"] for m in history["messages"]]


def test_attachment_files_kept_outside_the_data_directory_are_backed_up_and_put_back(
    broker_factory: BrokerFactory, tmp_path: Path
):
    files = tmp_path / "files"  # POCOLOBBY_ATTACHMENTS_DIR, say another volume
    env = {"POCOLOBBY_ATTACHMENTS_DIR": str(files)}
    broker = broker_factory(env=env, name="moved-files")
    configs = broker.provision("ops", ["alpha", "beta"], tmp_path / "configs")
    attachment, data = broker.send_screenshot(configs["alpha"], "beta", tmp_path)
    taken = broker.cli("backup", "--to", str(tmp_path / "backups"), env=env)
    assert taken.returncode == 0, taken.stderr
    assert ", 1 attachment files)" in taken.stdout
    made = backup_path(taken.stdout)
    assert [p.name for p in (made / "attachments").iterdir()] == [hashlib.sha256(data).hexdigest()]
    broker.stop()
    shutil.rmtree(files)  # the volume lost

    # Where the files cannot go (a file in the directory's place): refused, nothing changed.
    files.write_text("not a directory")
    store = broker.data_dir / "pocolobby.sqlite3"
    before = store.read_bytes()
    refused = broker.cli("restore", str(made), env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "restore refused, nothing changed: the backup's attachments could not be put back" in (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr
    assert store.read_bytes() == before and not list(broker.data_dir.glob(".restore-*"))
    files.unlink()

    configs_dir = tmp_path / "new-configs"
    restored = broker.cli("restore", str(made), "--configs-dir", str(configs_dir), env=env)
    assert restored.returncode == 0, restored.stderr
    assert f"; 1 attachment files put back in {files}" in restored.stdout
    broker.start()
    assert broker.cli("restore", "--finish", env=env).returncode == 0
    beta = AgentConfig.read(configs_dir / "ops-beta.json")
    got = httpx.get(f"{broker.url}/v1/attachments/{attachment}", headers=beta.headers, timeout=10)
    assert got.status_code == 200 and got.content == data


def test_the_web_push_key_travels_with_a_backup_and_comes_back_with_its_store(
    broker_factory: BrokerFactory, tmp_path: Path
):
    """The key the owners' devices subscribed with: a restore without it made every device
    turn notifications on again (push services refuse another key)."""
    from py_vapid import Vapid02  # local: only this test makes keys

    def new_pem() -> str:
        vapid = Vapid02()
        vapid.generate_keys()
        return vapid.private_pem().decode("ascii")

    broker = broker_factory(name="push-key")
    key = broker.data_dir / "vapid-private-key.pem"
    key.write_text(subscribed_with := new_pem())
    key.chmod(0o600)
    taken = broker.cli("backup", "--to", str(tmp_path / "backups"))
    assert taken.returncode == 0, taken.stderr
    copied = backup_path(taken.stdout) / "vapid-private-key.pem"
    assert copied.read_text() == subscribed_with and stat.S_IMODE(copied.stat().st_mode) == 0o600
    broker.stop()

    key.write_text(made_since := new_pem())  # say a new machine made its own
    restored = broker.cli("restore", str(backup_path(taken.stdout)))
    assert restored.returncode == 0, restored.stderr
    assert key.read_text() == subscribed_with and stat.S_IMODE(key.stat().st_mode) == 0o600
    (aside,) = broker.data_dir.glob("vapid-private-key.pem.pre-restore-*")
    assert aside.read_text() == made_since
    assert not list(broker.data_dir.glob(".restore-*"))  # nothing staged left behind
    broker.start()
    assert key.read_text() == subscribed_with  # the broker serves with it


def test_putting_attachment_files_back_adds_only_whole_missing_content(tmp_path: Path):
    from pocolobby.backup import merge_attachments  # local: the CLI's module, in process

    source, target = tmp_path / "backup", tmp_path / "live"
    source.mkdir()
    target.mkdir()
    good, kept, bad = b"good bytes", b"already here", b"what the name promised"
    names = {content: hashlib.sha256(content).hexdigest() for content in (good, kept, bad)}
    (source / names[good]).write_bytes(good)
    (source / names[kept]).write_bytes(kept)
    (target / names[kept]).write_bytes(kept)
    (source / names[bad]).write_bytes(b"bit rot")  # its name no longer its content's hash
    (source / ".lock").write_bytes(b"")

    added, damaged = merge_attachments(source, target)
    assert (added, damaged) == (1, [names[bad]])
    assert sorted(p.name for p in target.iterdir()) == sorted([names[good], names[kept]])
    assert (target / names[good]).read_bytes() == good


def test_a_restore_interrupted_mid_swap_resumes_restore_mode_on_the_next_start(
    tmp_path: Path,
):
    donor, victim = tmp_path / "donor", tmp_path / "victim"
    assert cli(donor, "init").returncode == 0
    backup = cli(donor, "backup", "--to", str(tmp_path / "b"))
    env = {"POCOLOBBY_URL": "http://127.0.0.1:9"}
    assert cli(donor, "restore", str(backup_path(backup.stdout)), env=env).returncode == 0
    # The victim crashed after staging its restored copy and writing the marker.
    assert cli(victim, "init").returncode == 0
    staged = victim / ".restore-1.sqlite3"
    source = sqlite3.connect(donor / "pocolobby.sqlite3")
    target = sqlite3.connect(staged)
    source.backup(target)
    source.close()
    target.close()
    (victim / "restore-in-progress.json").write_text(
        json.dumps({"store": str(staged), "attachments": None, "aside": "T1"})
    )

    result = cli(victim, "init")

    assert result.returncode == 0, result.stderr
    assert "completed an interrupted restore" in result.stdout
    assert "RESTORE MODE" in result.stdout
    assert (victim / "pocolobby.sqlite3.pre-restore-T1").exists()
    assert not (victim / "restore-in-progress.json").exists()


def _modes_seen_while(work, root: Path) -> dict[str, set[int]]:
    """Run `work()` while another thread stats every file under `root` as fast as it can:
    each file name and the modes it was seen with, from its first moments on."""
    seen: dict[str, set[int]] = {}
    done = threading.Event()

    def watch() -> None:
        finished = False
        while not finished:
            finished = done.is_set()  # one more look after the work, so a loaded machine that
            # ran no look while a file existed still sees it
            try:
                for path in root.rglob("*"):
                    with contextlib.suppress(FileNotFoundError):
                        mode = path.lstat().st_mode
                        if stat.S_ISREG(mode):
                            seen.setdefault(path.name, set()).add(stat.S_IMODE(mode))
            except FileNotFoundError:  # a directory renamed mid-walk
                continue

    watcher = threading.Thread(target=watch)
    previous = os.umask(0)  # the most permissive: only the code's own modes protect the files
    watcher.start()
    try:
        work()
    finally:
        done.set()
        watcher.join()
        os.umask(previous)
    return seen


def test_a_backup_is_private_from_the_moment_it_is_written_whatever_the_umask(tmp_path: Path):
    from pocolobby.backup import take_backup

    data = tmp_path / "data"
    assert cli(data, "init").returncode == 0
    destination = tmp_path / "backups"
    destination.mkdir()

    seen = _modes_seen_while(lambda: take_backup(data, destination, None), destination)

    assert {"store.sqlite3", "manifest.json"} <= set(seen), seen
    assert all(modes == {0o600} for modes in seen.values()), seen
    (taken,) = destination.iterdir()
    assert stat.S_IMODE(taken.stat().st_mode) == 0o700
    for name in ("store.sqlite3", "manifest.json"):
        assert stat.S_IMODE((taken / name).stat().st_mode) == 0o600


def test_a_restored_store_is_private_from_the_moment_it_is_written(tmp_path: Path):
    from pocolobby.backup import copy_store

    data = tmp_path / "data"
    assert cli(data, "init").returncode == 0
    staging = tmp_path / "staging"
    staging.mkdir()
    copied = staging / "restored.sqlite3"

    seen = _modes_seen_while(lambda: copy_store(data / "pocolobby.sqlite3", copied), staging)

    assert "restored.sqlite3" in seen and all(m == {0o600} for m in seen.values()), seen

    # And end to end, under a permissive umask: the live store after `restore`, before any
    # `serve` tightens anything, and the backup `pocolobby backup` wrote.
    backup = cli(data, "backup", "--to", str(tmp_path / "b"), umask=0)
    source = backup_path(backup.stdout)
    assert {stat.S_IMODE(p.stat().st_mode) for p in source.iterdir()} == {0o600}
    env = {"POCOLOBBY_URL": "http://127.0.0.1:9"}
    restored = cli(data, "restore", str(source), env=env, umask=0)
    assert restored.returncode == 0, restored.stderr
    assert stat.S_IMODE((data / "pocolobby.sqlite3").stat().st_mode) == 0o600


def test_what_a_killed_backup_left_is_removed_by_the_next_one_and_a_running_ones_kept(
    tmp_path: Path,
):
    data, to = tmp_path / "data", tmp_path / "b"
    assert cli(data, "init").returncode == 0
    # The store held exclusively (a rollback journal), so the backup waits mid-way, its
    # working folder made, until it is killed.
    holder = sqlite3.connect(data / "pocolobby.sqlite3", isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    killed = subprocess.Popen(
        [sys.executable, "-m", "pocolobby", "backup", "--to", str(to)],
        cwd=REPO_ROOT,
        env=clean_env({"POCOLOBBY_DATA_DIR": str(data)}),
    )
    leftover = to / "missing"
    try:

        def working() -> bool:
            nonlocal leftover
            found = list(to.glob(f".pocolobby-backup-*.tmp-{killed.pid}")) if to.is_dir() else []
            leftover = found[0] if found else leftover
            return (leftover / "store.sqlite3").exists()

        eventually(working, timeout=60, every=0.05, what="the backup's working folder")
    finally:
        killed.kill()  # SIGKILL: no cleanup of its own
        killed.wait()
        holder.execute("ROLLBACK")
        holder.close()
    assert leftover.is_dir()
    # Another backup still running (it holds its lock) and a name not ours are kept.
    running = to / ".pocolobby-backup-20260101T000000.000000Z.tmp-1"
    running.mkdir()
    held = os.open(f"{running}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    other = to / ".pocolobby-backup-notes.tmp-1"
    other.mkdir()
    try:
        result = cli(data, "backup", "--to", str(to))
    finally:
        os.close(held)

    assert result.returncode == 0, result.stderr
    assert f"removed {leftover}, left unfinished by a backup that was killed" in result.stdout
    assert not leftover.exists() and not Path(f"{leftover}.lock").exists()
    assert running.is_dir() and other.is_dir()
    assert backup_path(result.stdout).is_dir()
    # Once that other backup is gone too (its lock free), the next run removes its folder.
    again = cli(data, "backup", "--to", str(to))
    assert f"removed {running}, left unfinished" in again.stdout and not running.exists()


def test_what_a_killed_restore_left_staged_is_removed_by_the_next_restore(tmp_path: Path):
    data = tmp_path / "data"
    assert cli(data, "init").returncode == 0
    source = backup_path(cli(data, "backup", "--to", str(tmp_path / "b")).stdout)
    staged = [
        data / ".restore-4194301.sqlite3",
        data / ".restore-4194301.sqlite3-wal",
        data / ".restore-4194301-vapid.pem",
        data / "attachments" / f".restore-4194301-{'a' * 64}",
    ]
    for path in staged:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"a killed restore's copy")
    folder = data / ".restore-4194301-attachments"
    folder.mkdir()
    (folder / ("b" * 64)).write_bytes(b"x")
    kept = data / ".restore-notes.txt"
    kept.write_text("not ours")

    env = {"POCOLOBBY_URL": "http://127.0.0.1:9"}
    restored = cli(data, "restore", str(source), env=env)

    assert restored.returncode == 0, restored.stderr
    for path in [*staged, folder]:
        assert f"removed {path}, left staged by a restore that was killed" in restored.stdout
        assert not path.exists()
    assert kept.exists()

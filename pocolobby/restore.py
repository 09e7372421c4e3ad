"""`pocolobby restore BACKUP`: check a backup, prepare it in restore mode, then swap it in.

The live store is not touched until the restored copy is complete, migrated, in restore mode
and every replacement configuration is written: a refusal or a crash before then leaves the
broker's data as it was. The swap itself is covered by a marker file (pocolobby/backup.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from pocolobby import backup, store_lock


class RestoreRefused(Exception):
    """The backup or the situation does not allow a restore; nothing was changed."""


@dataclass(frozen=True)
class RestoreReport:
    source: Path
    incarnation: str
    configs: list[Path]
    swap: str

    def lines(self) -> str:
        return (
            f"restored {self.source} (incarnation {self.incarnation}); {self.swap}\n"
            f"every earlier agent token is revoked; {len(self.configs)} replacement "
            f"configurations written (mode 0600):\n"
            + "".join(f"  {path}\n" for path in self.configs)
            + "start the broker (pocolobby serve): it starts in restore mode, dispatch paused and "
            "agents refused; check it (pocolobby status), give each agent its new configuration, "
            "then reopen access with `pocolobby restore --finish`"
        )


def broker_answers(url: str) -> bool:
    try:
        httpx.get(f"{url}/v1/health", timeout=2)
    except httpx.HTTPError:
        return False
    return True


def _write_config(directory: Path, url: str, lobby: str, agent: str, token: str) -> Path:
    path = directory / f"{lobby}-{agent}.json"
    fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"url": url, "token": token, "lobby": lobby, "agent": agent}, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    return path


def restore(raw_source: str, configs_dir: Path, url: str) -> RestoreReport:
    """Refuse, or restore `raw_source` into this data directory in restore mode."""
    # Local: Django is set up by the caller (pocolobby.cli._setup_django) before this runs.
    from django.db import connection

    if connection.vendor != "sqlite":
        raise RestoreRefused(
            "this broker uses PostgreSQL: restore it with pg_restore (docs/OPERATIONS.md), then "
            "rotate every agent token before reopening access (docs/OPERATIONS.md)"
        )
    # The store's lock first: a broker serving this store holds it, whatever port it listens
    # on, and no broker starts on the store while this one prepares and swaps.
    live = Path(connection.settings_dict["NAME"])
    live.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        store_lock.hold(live, store_lock.describe("restore"))
    except store_lock.StoreInUse as exc:
        raise RestoreRefused(f"{exc}; stop it before restoring") from None
    try:
        return _restore_holding_the_lock(raw_source, configs_dir, url)
    finally:
        store_lock.release(live)


def _restore_holding_the_lock(raw_source: str, configs_dir: Path, url: str) -> RestoreReport:
    # Local: Django is set up by the caller (pocolobby.cli._setup_django) before this runs.
    from django.conf import settings
    from django.db import connection

    from lobbies.actions.restore import broker_state, enter_restore_mode
    from lobbies.storage import IncompatibleStore, diagnose, prepare_store

    if broker_answers(url):
        raise RestoreRefused(f"a broker answers at {url}; stop it before restoring")
    try:
        source = backup.locate(raw_source)
    except backup.BackupFailed as exc:
        raise RestoreRefused(str(exc)) from None
    try:
        if diagnose(source.store).state != "ours":
            raise RestoreRefused(f"{source.store} is not a PocoLobby store (it is empty)")
    except IncompatibleStore as exc:
        raise RestoreRefused(str(exc)) from None
    verdict = backup.integrity(source.store)
    if verdict != "ok":
        raise RestoreRefused(f"{source.store} failed its integrity check: {verdict}")

    data_dir = Path(settings.DATA_DIR)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    configs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = os.getpid()
    staged = data_dir / f".restore-{stamp}.sqlite3"
    for suffix in ("", "-wal", "-shm", "-journal"):  # a crashed earlier restore's, same pid
        Path(f"{staged}{suffix}").unlink(missing_ok=True)
    staged_attachments = data_dir / f".restore-{stamp}-attachments" if source.attachments else None
    try:
        backup.copy_store(source.store, staged)
        if source.attachments and staged_attachments:
            shutil.copytree(source.attachments, staged_attachments)
        connection.close()
        connection.settings_dict["NAME"] = str(staged)
        prepare_store()
        replacements = enter_restore_mode(str(raw_source), source.taken_at)
        incarnation = str(broker_state().incarnation)
        connection.close()
        configs = [_write_config(configs_dir, url, r.lobby, r.agent, r.token) for r in replacements]
    except BaseException:
        connection.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{staged}{suffix}").unlink(missing_ok=True)
        if staged_attachments:
            shutil.rmtree(staged_attachments, ignore_errors=True)
        raise
    backup.write_marker(data_dir, staged, staged_attachments)
    swap = backup.complete_swap(data_dir) or ""
    return RestoreReport(source.store, incarnation, configs, swap)

"""`pocolobby restore BACKUP`: check a backup, prepare it in restore mode, then put it in place.

One set of rules for both stores: the store's lock held exclusive (no broker serves it), no
broker answering at POCOLOBBY_URL, the backup checked against the store's rules before the
live store is touched, and the restored store closed (`enter_restore_mode`, with every
replacement configuration written, and every browser signed out: its console sessions,
hand-offs and pending sign-in codes removed) before any broker may open it.

SQLite: the live store is not touched until the restored copy is complete, migrated, in
restore mode and every replacement configuration is written. The swap itself is covered by a
marker file (pocolobby/backup.py).

PostgreSQL: the live store is first copied aside (pg_dump, `pocolobby-pre-restore-<time>`),
then a marker table (lobbies/storage/discipline.py, RESTORE_PENDING_TABLE) is made, pg_restore
replaces
the store in one transaction, the schema steps run, and one transaction enters restore mode,
writes the configurations and drops the marker. A crash in between leaves the marker, and every
broker refuses the store until a restore finishes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from pocolobby import backup, config, store_lock

if TYPE_CHECKING:
    from console.actions.sign_in import SignedOut


class RestoreRefused(Exception):
    """The backup or the situation does not allow a restore; nothing was changed."""


class RestoreFailed(Exception):
    """A PostgreSQL restore failed after pg_restore replaced the store: the store stays
    refused (its marker) until a restore finishes; the message says where the old one is."""


@dataclass(frozen=True)
class RestoreReport:
    source: Path
    incarnation: str
    configs: list[Path]
    swap: str
    signed_out: SignedOut
    leftovers: list[Path] = field(default_factory=list)

    def lines(self) -> str:
        killed = "left staged by a restore that was killed"
        out = self.signed_out
        return (
            "".join(f"removed {path}, {killed}\n" for path in self.leftovers)
            + f"restored {self.source} (incarnation {self.incarnation}); {self.swap}\n"
            f"every browser is signed out: {out.sessions} console sessions, {out.handoffs} "
            f"hand-offs and {out.codes} pending sign-in codes of the backup removed "
            "(people sign in again)\n"
            f"every earlier agent token is revoked; {len(self.configs)} replacement "
            f"configurations written (mode 0600):\n"
            + "".join(f"  {path}\n" for path in self.configs)
            + "start the broker (pocolobby serve): it starts in restore mode, dispatch paused and "
            "agents refused; check it (pocolobby status), give each agent its new configuration, "
            "then reopen access with `pocolobby restore --finish`"
        )


def _put_back_attachments(source: backup.Source, target: Path) -> str:
    """Merge the backup's attachment files into `target`; what the report says of it."""
    if source.attachments is None:
        return ""
    added, damaged = backup.merge_attachments(source.attachments, target)
    said = f"; {added} attachment files put back in {target}"
    if damaged:
        shown = ", ".join(name[:12] for name in damaged[:5])
        said += (
            f" ({len(damaged)} left out: their content does not match their SHA-256 name: "
            f"{shown}{', ...' if len(damaged) > 5 else ''})"
        )
    return said


def _merge_attachments_or_refuse(source: backup.Source, target: Path) -> str:
    try:
        return _put_back_attachments(source, target)
    except OSError as exc:  # a full or read-only volume: the store is not touched yet
        raise RestoreRefused(f"the backup's attachments could not be put back: {exc}") from None


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
    """Refuse, or restore `raw_source` into this broker's store in restore mode."""
    # Local: Django is set up by the caller (pocolobby.cli.common.setup_django) before this runs.
    from django.db import connection

    if connection.vendor == "postgresql":
        return _restore_postgres(raw_source, configs_dir, url)
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


def _source(raw_source: str, url: str, vendor: str) -> backup.Source:
    """The backup to restore, once nothing serves the store; RestoreRefused otherwise."""
    if broker_answers(url):
        raise RestoreRefused(f"a broker answers at {url}; stop it before restoring")
    try:
        source = backup.locate(raw_source)
    except backup.BackupFailed as exc:
        raise RestoreRefused(str(exc)) from None
    if source.kind != vendor:
        made_by = "pg_dump (PostgreSQL)" if source.kind == "postgresql" else "SQLite"
        raise RestoreRefused(
            f"{source.store} is a {made_by} backup, and this broker's store is {vendor}; "
            "a backup is restored into the kind of store it was taken from"
        )
    return source


@dataclass(frozen=True)
class _Closed:
    incarnation: str
    configs: list[Path]
    signed_out: SignedOut


def _close_the_store(
    raw_source: str, source: backup.Source, configs_dir: Path, url: str
) -> _Closed:
    """Restore mode on the restored store (the one Django's connection names now), every
    browser signed out, and every replacement configuration written; in the caller's
    transaction, if any."""
    # Local: models are usable only after the caller's django.setup().
    from console.actions.sign_in import sign_everyone_out
    from lobbies.actions.restore import broker_state
    from lobbies.actions.restore_commands import enter_restore_mode

    replacements = enter_restore_mode(str(raw_source), source.taken_at)
    signed_out = sign_everyone_out()
    incarnation = str(broker_state().incarnation)
    configs = [_write_config(configs_dir, url, r.lobby, r.agent, r.token) for r in replacements]
    return _Closed(incarnation, configs, signed_out)


def _restore_holding_the_lock(raw_source: str, configs_dir: Path, url: str) -> RestoreReport:
    # Local: Django is set up by the caller (pocolobby.cli.common.setup_django) before this runs.
    from django.conf import settings
    from django.db import connection

    from lobbies.storage.discipline import IncompatibleStore, diagnose, prepare_store

    source = _source(raw_source, url, "sqlite")
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
    # The default attachments directory is swapped with the store; one moved elsewhere
    # (POCOLOBBY_ATTACHMENTS_DIR, perhaps another volume) gets the backup's files merged in.
    attachments = config.attachments_dir(data_dir)
    leftovers = _remove_staged(data_dir, attachments)
    stamp = os.getpid()
    staged = data_dir / f".restore-{stamp}.sqlite3"
    swapped = attachments == data_dir / backup.ATTACHMENTS
    staged_attachments = (
        data_dir / f".restore-{stamp}-attachments" if source.attachments and swapped else None
    )
    staged_key = data_dir / f".restore-{stamp}-vapid.pem" if source.vapid_key else None
    try:
        backup.copy_store(source.store, staged)
        if source.attachments and staged_attachments:
            shutil.copytree(source.attachments, staged_attachments)
        if source.vapid_key and staged_key:
            staged_key.unlink(missing_ok=True)  # a crashed earlier restore's, same pid
            backup.copy_vapid_key(source.vapid_key, staged_key)
        merged = "" if swapped else _merge_attachments_or_refuse(source, attachments)
        connection.close()
        connection.settings_dict["NAME"] = str(staged)
        prepare_store()
        closed = _close_the_store(raw_source, source, configs_dir, url)
        connection.close()
    except BaseException:
        connection.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{staged}{suffix}").unlink(missing_ok=True)
        if staged_attachments:
            shutil.rmtree(staged_attachments, ignore_errors=True)
        if staged_key:
            staged_key.unlink(missing_ok=True)
        raise
    backup.write_marker(data_dir, staged, staged_attachments, staged_key)
    swap = (backup.complete_swap(data_dir) or "") + merged
    return RestoreReport(
        source.store, closed.incarnation, closed.configs, swap, closed.signed_out, leftovers
    )


def _remove_staged(data_dir: Path, attachments: Path) -> list[Path]:
    """What killed restores left staged (each a whole store copy), removed; RestoreRefused
    when that fails, before anything is changed."""
    try:
        return backup.remove_staged(data_dir, attachments)
    except OSError as exc:
        raise RestoreRefused(f"a killed restore's staged files cannot be removed: {exc}") from None


# ---------------------------------------------------------------- PostgreSQL


def _restore_postgres(raw_source: str, configs_dir: Path, url: str) -> RestoreReport:
    lock = store_lock.PostgresStoreLock("restore")
    try:
        lock.take_exclusive()
    except store_lock.StoreInUse as exc:
        raise RestoreRefused(f"{exc}; stop it before restoring") from None
    except OSError as exc:  # PostgreSQL unreachable (ConnectionError)
        raise RestoreRefused(f"cannot take the store's lock ({exc})") from None
    try:
        return _restore_postgres_holding_the_lock(raw_source, configs_dir, url)
    finally:
        lock.release()


def _restore_postgres_holding_the_lock(
    raw_source: str, configs_dir: Path, url: str
) -> RestoreReport:
    # Local: Django is set up by the caller (pocolobby.cli.common.setup_django) before this runs.
    from django.conf import settings
    from django.db import connection, transaction

    from lobbies.storage.discipline import (
        RESTORE_PENDING_TABLE,
        IncompatibleStore,
        diagnose_postgres,
        judge_postgres,
        prepare_store,
    )
    from pocolobby import pg_backup

    source = _source(raw_source, url, "postgresql")
    database = str(connection.settings_dict["NAME"])
    try:
        session = pg_backup.connect("restore")
        try:
            major = pg_backup.server_major(session)
        finally:
            session.close()
        pg_restore = pg_backup.find_tool("pg_restore", major)
        archive = pg_backup.read_archive(pg_restore, source.store)
    except backup.BackupFailed as exc:
        raise RestoreRefused(f"{source.store}: {exc}") from None
    try:
        verdict = judge_postgres(
            str(source.store), archive.tables, archive.identity, archive.applied
        )
        if verdict.state != "ours":
            raise RestoreRefused(f"{source.store} holds no PocoLobby store (it is empty)")
        live = diagnose_postgres(restoring=True)
    except IncompatibleStore as exc:
        raise RestoreRefused(str(exc)) from None
    with connection.cursor() as cursor:
        live_tables = set(connection.introspection.table_names(cursor))
    extra = sorted(live_tables - archive.tables - {RESTORE_PENDING_TABLE})
    if extra:
        raise RestoreRefused(
            f"the database {database} holds tables the backup does not ({', '.join(extra[:5])}"
            f"{', ...' if len(extra) > 5 else ''}: a later release made them); restore into an "
            "empty database instead (docs/OPERATIONS.md, Restore on PostgreSQL)"
        )

    data_dir = Path(settings.DATA_DIR)
    configs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    leftovers = _remove_staged(data_dir, config.attachments_dir(data_dir))
    before = ""
    if live.state == "ours":  # the store as it is, kept: nothing is lost silently
        try:
            aside = pg_backup.take_backup(
                data_dir, data_dir / "backups", None, prefix=pg_backup.PRE_RESTORE_PREFIX
            )
        except backup.BackupFailed as exc:
            raise RestoreRefused(f"the live store could not be copied aside first: {exc}") from None
        before = str(aside.path)

    # files before the rows that name them, as an upload writes them
    merged = _merge_attachments_or_refuse(source, config.attachments_dir(data_dir))

    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS pocolobby_restore_pending "
            "(source text NOT NULL, pre_restore text NOT NULL, began_at timestamptz NOT NULL)"
        )
        cursor.execute("DELETE FROM pocolobby_restore_pending")
        cursor.execute(
            "INSERT INTO pocolobby_restore_pending VALUES (%s, %s, now())",
            [str(raw_source), before],
        )
    connection.close()
    try:
        pg_backup.restore_archive(pg_restore, source.store, database)
    except backup.BackupFailed as exc:
        # pg_restore's one transaction rolled back: the store is as it was; unmark it.
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS pocolobby_restore_pending")
        raise RestoreRefused(str(exc)) from None

    kept = f" (the store as it was is in {before})" if before else ""
    try:
        prepare_store(restoring=True)
        with transaction.atomic():
            closed = _close_the_store(raw_source, source, configs_dir, url)
            with connection.cursor() as cursor:
                cursor.execute("DROP TABLE pocolobby_restore_pending")
    except Exception as exc:
        raise RestoreFailed(
            f"{source.store} was restored into {database} but could not be put into restore "
            f"mode ({exc}); every broker refuses the store until `pocolobby restore` is run "
            f"again{kept}"
        ) from None
    finally:
        connection.close()
    placed = f"restored into the PostgreSQL database {database} with pg_restore{kept}{merged}"
    return RestoreReport(
        source.store, closed.incarnation, closed.configs, placed, closed.signed_out, leftovers
    )

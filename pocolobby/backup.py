"""`pocolobby backup` and the file side of `pocolobby restore`.

A backup is a directory `pocolobby-backup-<UTC time>` holding `store.sqlite3` (on PostgreSQL
`store.dump`, see pocolobby/pg_backup.py) (SQLite's online
backup API, one step, so one read snapshot: every commit before it, no part of any later one),
`attachments/` when the data directory has one (copied after the snapshot: attachments are
written before the rows naming them, so every one the copy names is there), and
`manifest.json`. It is assembled under a temporary name and renamed into place once checked;
the next backup removes what a killed one left under such a name (`remove_leftovers`).

A restore prepares the restored store beside the live one, in restore mode, before anything
is replaced; a marker file then covers the two renames, and the next `serve`/`init`
finishes an interrupted swap (lobbies/actions/restore_commands.py says what restore mode is).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lobbies.access.secret_files import VAPID_KEY_FILE, read_secret, write_secret_file
from lobbies.storage.blobs import SHA256_PATTERN, digest_of_file
from lobbies.storage.discipline import APPLICATION_ID, FORMAT_VERSION
from pocolobby import config

STORE_NAME = "pocolobby.sqlite3"
BACKUP_STORE = "store.sqlite3"
BACKUP_DUMP = "store.dump"  # on PostgreSQL (pocolobby/pg_backup.py)
MANIFEST = "manifest.json"
ATTACHMENTS = "attachments"
PREFIX = "pocolobby-backup-"
MARKER = "restore-in-progress.json"
# A backup being written (`working_folder`): `.<prefix><time>.tmp-<pid>`, on PostgreSQL also
# with pocolobby/pg_backup.py's PRE_RESTORE_PREFIX; its writer holds `<it>.lock` beside it.
WORKING = re.compile(r"^\.pocolobby-(?:backup|pre-restore)-[0-9T.]+Z\.tmp-([0-9]+)$")
# What a restore stages in the data directory and attachments folder (pocolobby/restore.py,
# `merge_attachments`): `.restore-<pid>` and a known ending.
STAGED = re.compile(
    r"^\.restore-([0-9]+)(?:\.sqlite3(?:-wal|-shm|-journal)?|-attachments|-vapid\.pem"
    r"|-[0-9a-f]{64})$"
)


class BackupFailed(Exception):
    """A backup or restore step failed; nothing was put in place."""


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_private(path: Path) -> None:
    """Create `path` empty with mode 0600, whatever the umask, before SQLite opens it.

    SQLite creates a missing file 0644 (less the umask) and gives its journals the file's
    mode; created here first, the copy and its journals are never readable by others, not
    even for the moment between a create and a chmod.
    """
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _private_opener(path: str, flags: int) -> int:
    """For open(..., opener=): a new file is created mode 0600."""
    return os.open(path, flags, 0o600)


def _fsync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            _fsync_path(Path(directory) / name)
        _fsync_path(Path(directory))


def integrity(path: Path) -> str:
    """PRAGMA integrity_check's answer for the file ("ok" when sound), read-only."""
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()
    return "; ".join(str(r[0]) for r in rows[:5])


def contents(path: Path) -> dict[str, Any]:
    """What a store file holds: each lobby's last message sequence and the newest message id."""
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        lobbies = dict(
            conn.execute("SELECT name, message_sequence FROM lobbies_lobby ORDER BY name")
        )
        last_id, count = conn.execute("SELECT MAX(id), COUNT(*) FROM lobbies_message").fetchone()
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
    finally:
        conn.close()
    return {
        "application_id": application_id,
        "lobbies": lobbies,
        "last_message_id": last_id or 0,
        "messages": count,
    }


@dataclass(frozen=True)
class BackupReport:
    path: Path
    bytes: int
    store_bytes: int
    attachment_files: int
    seconds: float
    lobbies: dict[str, int]
    last_message_id: int
    removed: list[Path]
    check: str = "integrity_check ok"
    leftovers: list[Path] = field(default_factory=list)

    def lines(self) -> str:
        sequences = ", ".join(f"{name} {seq}" for name, seq in self.lobbies.items()) or "none"
        text = (
            f"backup {self.path}: {self.bytes} bytes (store {self.store_bytes}, "
            f"{self.attachment_files} attachment files) in {self.seconds:.2f} s; "
            f"{self.check}\n"
            f"last message sequence per lobby: {sequences}; last message id {self.last_message_id}"
        )
        for old in self.removed:
            text += f"\nremoved old backup {old}"
        for left in self.leftovers:
            text += f"\nremoved {left}, left unfinished by a backup that was killed"
        return text


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def take_backup(data_dir: Path, destination: Path, keep: int | None) -> BackupReport:
    """Copy the live store (and attachments) into `destination`, checked, then rotate."""
    source = data_dir / STORE_NAME
    if not source.is_file():
        raise BackupFailed(f"no store at {source}; is --data-dir right?")
    name = PREFIX + _stamp()
    final = destination / name
    began = time.monotonic()
    try:
        destination.mkdir(mode=0o700, parents=True, exist_ok=True)
        leftovers = remove_leftovers(destination)
        with working_folder(destination, name) as temp:
            manifest, files, held = _copy_store(source, data_dir, temp, final)
    except (sqlite3.Error, OSError) as exc:
        raise BackupFailed(f"backup failed: {exc}") from None
    return finished(final, destination, keep, manifest, files, began, held, leftovers=leftovers)


def _copy_store(
    source: Path, data_dir: Path, temp: Path, final: Path
) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """The SQLite backup's copy, check and manifest, sealed as `final`."""
    store = temp / BACKUP_STORE
    _create_private(store)
    src = sqlite3.connect(source, timeout=30)
    try:
        if src.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            raise BackupFailed(f"{source} is not a PocoLobby store (application_id)")
        dst = sqlite3.connect(store)
        try:
            src.backup(dst)  # pages=-1: the whole file in one step, under one snapshot
            # A rollback-journal file: a copy opened read-only leaves no -wal/-shm beside it.
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()
    finally:
        src.close()
    files = copy_attachments(data_dir, temp)
    copy_vapid_key(data_dir / VAPID_KEY_FILE, temp / VAPID_KEY_FILE)
    verdict = integrity(store)
    if verdict != "ok":
        raise BackupFailed(f"the copy failed its integrity check: {verdict}")
    held = contents(store)
    manifest = {
        "format": "pocolobby-backup",
        "store_format": FORMAT_VERSION,
        "taken_at": now_iso(),
        "store_bytes": store.stat().st_size,
        "attachment_files": files,
        "lobbies": held["lobbies"],
        "last_message_id": held["last_message_id"],
        "messages": held["messages"],
        "integrity_check": verdict,
    }
    seal(temp, final, manifest)
    return manifest, files, held


@contextlib.contextmanager
def working_folder(destination: Path, name: str) -> Iterator[Path]:
    """The private folder `.{name}.tmp-{pid}` a backup is assembled in, removed unless it was
    sealed (renamed into place). While it lives its writer holds an flock on `<folder>.lock`
    beside it, so the next backup tells a killed run's leftover (lock free) from a running
    one's (`remove_leftovers`), on this machine or another sharing the folder."""
    temp = destination / f".{name}.tmp-{os.getpid()}"
    lock = Path(f"{temp}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # new and ours: taken at once
        temp.mkdir(mode=0o700)
        try:
            yield temp
        finally:
            shutil.rmtree(temp, ignore_errors=True)  # nothing left there once sealed
            lock.unlink(missing_ok=True)
    finally:
        os.close(fd)


def _abandoned(temp: Path, pid: int) -> bool:
    """Whether no running backup holds `temp`: its lock is free, or (a folder from before the
    lock) it has none and its process is gone."""
    try:
        fd = os.open(f"{temp}.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            pass
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    finally:
        os.close(fd)  # the lock, if taken, goes with it; the folder is removed next
    return True


def remove_leftovers(destination: Path) -> list[Path]:
    """Remove the working folders killed backups left in `destination` (a whole store copy
    each), and their locks: only names of ours (WORKING) that no running backup holds."""
    removed = []
    for entry in sorted(destination.iterdir()):
        match = WORKING.match(entry.name)
        if match is None or entry.is_symlink() or not entry.is_dir():
            continue
        if _abandoned(entry, int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            Path(f"{entry}.lock").unlink(missing_ok=True)
            removed.append(entry)
    return removed


def remove_staged(data_dir: Path, attachments: Path) -> list[Path]:
    """Remove what killed restores left staged (STAGED names) in the data directory and the
    attachments folder. The caller holds the store's lock, so no other restore runs; a staged
    restore the marker names (its swap was interrupted; the next start finishes it) is kept."""
    kept = ""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        staged = STAGED.match(Path(json.loads((data_dir / MARKER).read_text())["store"]).name)
        kept = staged.group(1) if staged else ""
    removed = []
    for folder in dict.fromkeys([data_dir, attachments]):
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            match = STAGED.match(entry.name)
            if match is None or match.group(1) == kept:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def finished(
    final: Path,
    destination: Path,
    keep: int | None,
    manifest: dict[str, Any],
    files: int,
    began: float,
    held: dict[str, Any],
    check: str = "integrity_check ok",
    leftovers: list[Path] | None = None,
) -> BackupReport:
    """A written backup's report, after rotating the older ones (SQLite and PostgreSQL)."""
    seconds = time.monotonic() - began
    size = sum(p.stat().st_size for p in final.rglob("*") if p.is_file())
    removed = rotate(destination, keep) if keep else []
    return BackupReport(
        final,
        size,
        manifest["store_bytes"],
        files,
        seconds,
        held["lobbies"],
        held["last_message_id"],
        removed,
        check=check,
        leftovers=leftovers or [],
    )


def seal(temp: Path, final: Path, manifest: dict[str, Any]) -> None:
    """Write the manifest (0600), fsync everything, rename the backup into place."""
    with open(temp / MANIFEST, "x", opener=_private_opener) as handle:
        handle.write(json.dumps(manifest, indent=2) + "\n")
    _fsync_tree(temp)
    os.replace(temp, final)
    _fsync_path(final.parent)


def copy_attachments(data_dir: Path, temp: Path) -> int:
    """Copy the attachment files (if any; config.attachments_dir, wherever it is) into the
    backup's `attachments/`; how many files."""
    attachments = config.attachments_dir(data_dir)
    if not attachments.is_dir():
        return 0

    def not_content(_folder: str, names: list[str]) -> list[str]:  # the lock, temporary files
        return [name for name in names if not SHA256_PATTERN.match(name)]

    shutil.copytree(attachments, temp / ATTACHMENTS, ignore=not_content)
    return sum(len(f) for _, _, f in os.walk(temp / ATTACHMENTS))


def copy_vapid_key(key: Path, target: Path) -> None:
    """Copy the broker's Web Push key file (SQLite; if made yet) to `target`, as the broker
    writes it (lobbies/access/secret_files.py: 0600, fsynced, never over an existing file)."""
    if pem := read_secret(key):
        write_secret_file(target, pem)


def merge_attachments(source: Path, target: Path) -> tuple[int, list[str]]:
    """Put the backup's attachment files that `target` lacks into it; (how many were added,
    names whose content does not match their SHA-256, left out).

    A file is named by its content's SHA-256, so one already there is the same file and the
    live directory's other files stay (rows restored later may name them). Each is written
    under a temporary name, fsynced, checked and renamed, as an upload is
    (lobbies/storage/blobs.py).
    """
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    added, damaged = 0, []
    for path in sorted(source.iterdir()):
        if not path.is_file() or not SHA256_PATTERN.match(path.name):
            continue  # the lock file, a crashed upload's temporary file
        final = target / path.name
        if final.exists():
            continue
        temp = target / f".restore-{os.getpid()}-{path.name}"
        shutil.copyfile(path, temp)
        _fsync_path(temp)
        if digest_of_file(temp) != path.name:
            temp.unlink()
            damaged.append(path.name)
            continue
        os.replace(temp, final)
        added += 1
    _fsync_path(target)
    return added, damaged


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rotate(destination: Path, keep: int) -> list[Path]:
    """Remove all but the newest `keep` complete backups (their names sort by time)."""
    complete = sorted(p for p in destination.iterdir() if p.is_dir() and p.name.startswith(PREFIX))
    old = complete[:-keep] if keep > 0 else []
    for path in old:
        shutil.rmtree(path)
    return old


# ---------------------------------------------------------------- restore (file side)


@dataclass(frozen=True)
class Source:
    """A backup to restore: its store file, attachments (if any) and when it was taken."""

    store: Path
    attachments: Path | None
    taken_at: datetime | None
    kind: str = "sqlite"  # or "postgresql": a pg_dump custom-format archive
    vapid_key: Path | None = None  # SQLite: the broker's Web Push key file, when it had one


# A pg_dump custom-format archive begins with these bytes.
PG_DUMP_MAGIC = b"PGDMP"


def _kind(path: Path) -> str:
    with contextlib.suppress(OSError), path.open("rb") as handle:
        if handle.read(len(PG_DUMP_MAGIC)) == PG_DUMP_MAGIC:
            return "postgresql"
    return "sqlite"


def locate(raw: str) -> Source:
    """A backup directory (with manifest) or a bare store file (for example a `.backup` copy,
    or a `pg_dump --format=custom` archive)."""
    path = Path(raw).expanduser().resolve()
    if path.is_dir():
        store = path / BACKUP_STORE
        if not store.is_file() and (path / BACKUP_DUMP).is_file():
            store = path / BACKUP_DUMP
        if not store.is_file():
            raise BackupFailed(
                f"{path} holds no {BACKUP_STORE} or {BACKUP_DUMP}; it is not a PocoLobby backup"
            )
        taken = None
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            stamp = json.loads((path / MANIFEST).read_text())["taken_at"]
            taken = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        attachments = path / ATTACHMENTS
        key = path / VAPID_KEY_FILE
        return Source(
            store,
            attachments if attachments.is_dir() else None,
            taken,
            _kind(store),
            key if key.is_file() else None,
        )
    if path.is_file():
        taken = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        return Source(path, None, taken, _kind(path))
    raise BackupFailed(f"{path} does not exist")


def copy_store(source: Path, target: Path) -> None:
    """Copy a store file with the backup API (never a file copy) into a new file of mode
    0600, then fsync it."""
    _create_private(target)
    src = sqlite3.connect(f"{source.as_uri()}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()
    _fsync_path(target)


def write_marker(
    data_dir: Path,
    staged_store: Path,
    staged_attachments: Path | None,
    staged_vapid_key: Path | None = None,
) -> None:
    marker = data_dir / MARKER
    temp = marker.with_suffix(".tmp")
    temp.write_text(
        json.dumps(
            {
                "store": str(staged_store),
                "attachments": str(staged_attachments) if staged_attachments else None,
                "vapid_key": str(staged_vapid_key) if staged_vapid_key else None,
                "aside": _stamp(),
            }
        )
    )
    _fsync_path(temp)
    os.replace(temp, marker)
    _fsync_path(data_dir)


def complete_swap(data_dir: Path) -> str | None:
    """Put a prepared restore in place (again, if interrupted); None when none is pending.

    Idempotent: each step checks whether it already happened. The live store (with its WAL)
    and attachments are kept beside, renamed `*.pre-restore-<time>`, never deleted.
    """
    marker = data_dir / MARKER
    if not marker.exists():
        return None
    plan = json.loads(marker.read_text())
    staged = Path(plan["store"])
    live = data_dir / STORE_NAME
    aside = plan["aside"]
    if staged.exists():
        for suffix in ("", "-wal", "-shm"):
            current = data_dir / (STORE_NAME + suffix)
            if current.exists():
                os.replace(current, data_dir / f"{STORE_NAME}{suffix}.pre-restore-{aside}")
        os.replace(staged, live)
    staged_attachments = Path(plan["attachments"]) if plan["attachments"] else None
    attachments = data_dir / ATTACHMENTS
    if staged_attachments is not None and staged_attachments.exists():
        if attachments.exists():
            os.replace(attachments, data_dir / f"{ATTACHMENTS}.pre-restore-{aside}")
        os.replace(staged_attachments, attachments)
    staged_key = Path(plan["vapid_key"]) if plan.get("vapid_key") else None  # older markers
    if staged_key is not None and staged_key.exists():
        key = data_dir / VAPID_KEY_FILE
        if key.exists():
            os.replace(key, data_dir / f"{VAPID_KEY_FILE}.pre-restore-{aside}")
        os.replace(staged_key, key)
    _fsync_path(data_dir)
    marker.unlink()
    _fsync_path(data_dir)
    return f"restored store put in place at {live} (the previous one kept as *.pre-restore-{aside})"

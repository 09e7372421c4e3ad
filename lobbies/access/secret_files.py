"""Secrets kept as files in the private data directory: written once, mode 0600, read thereafter.

Django-free, so the project's settings can use it before Django is set up.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

# The broker's Web Push (VAPID) private key on SQLite (board/notifications/vapid.py; on
# PostgreSQL a row): backups carry it, so a restored store's push subscriptions still match it.
VAPID_KEY_FILE = "vapid-private-key.pem"


def private_directory(path: Path) -> None:
    """Create the data directory mode 0700 (its parents as the umask says), if absent."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def make_private(path: Path) -> list[Path]:
    """Tighten the data directory to 0700 and everything in it to 0600 (directories 0700).

    Returns what other users could read or write before, so the caller can say so once.
    Symbolic links are neither followed nor changed.
    """
    loosened: list[Path] = []
    if not path.is_dir() or path.is_symlink():
        return loosened
    for entry in [path, *path.rglob("*")]:
        if entry.is_symlink():
            continue
        mode = entry.stat().st_mode & 0o777
        wanted = 0o700 if entry.is_dir() else 0o600
        if mode & 0o077:
            loosened.append(entry)
            os.chmod(entry, wanted)
    return loosened


def write_secret_file(path: Path, value: str) -> None:
    """Create a mode-0600 file holding one secret; never replace an existing one.

    Written to a temporary file, fsynced, then linked into place: the name either does not
    exist or holds the whole secret, so a crash never leaves an empty one.
    """
    private_directory(path.parent)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(value + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temp, path)  # FileExistsError if another process won; never replaces
        _fsync_directory(path.parent)
    finally:
        Path(temp).unlink(missing_ok=True)


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_secret(path: Path) -> str:
    """The secret in `path`, or "" when absent or empty (an empty file is no secret)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def read_or_create_secret(path: Path, prefix: str = "") -> str:
    """Read a secret kept in the data directory, creating it on first use.

    An empty file (what a crash of an older release could leave) is replaced.
    """
    value = read_secret(path)
    if value:
        return value
    if path.exists():
        path.unlink()
    value = prefix + secrets.token_urlsafe(32)
    try:
        write_secret_file(path, value)
    except FileExistsError:
        return read_secret(path)
    CREATED_SECRETS.append(path)
    return value


# Secret files this process created, so a start refused before it began can take them back.
CREATED_SECRETS: list[Path] = []


def admin_token(directory: Path) -> str:
    """POCOLOBBY_ADMIN_TOKEN, else `<directory>/admin-token` (created mode 0600 on first use)."""
    configured = os.environ.get("POCOLOBBY_ADMIN_TOKEN")
    if configured:
        return configured.strip()
    return read_or_create_secret(directory / "admin-token", prefix="pla_")

"""Where the broker keeps its files and which limits it enforces, from the environment only."""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs

DEFAULT_PORT = 8787
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


def data_dir() -> Path:
    """The data directory: POCOLOBBY_DATA_DIR, else the per-user data directory."""
    configured = os.environ.get("POCOLOBBY_DATA_DIR")
    path = Path(configured) if configured else Path(platformdirs.user_data_dir("pocolobby"))
    return path.expanduser().resolve()


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


def admin_token(directory: Path | None = None) -> str:
    """POCOLOBBY_ADMIN_TOKEN, else `<data dir>/admin-token` (created mode 0600 on first use)."""
    configured = os.environ.get("POCOLOBBY_ADMIN_TOKEN")
    if configured:
        return configured.strip()
    return read_or_create_secret((directory or data_dir()) / "admin-token", prefix="pla_")


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from exc
    if value <= 0:
        raise SystemExit(f"{name} must be positive, got {value}")
    return value


def _seconds_list_env(name: str, default: tuple[float, ...]) -> tuple[float, ...]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        values = tuple(float(part) for part in raw.split(","))
    except ValueError as exc:
        raise SystemExit(f"{name} must be comma-separated seconds, got {raw!r}") from exc
    if not values or any(v <= 0 for v in values):
        raise SystemExit(f"{name} must list positive seconds, got {raw!r}")
    return values


@dataclass(frozen=True)
class Bounds:
    """Default bounds; each can be tuned with the environment variable of the same name."""

    content_bytes: int = 64 * 1024
    request_bytes: int = 256 * 1024
    sends_per_minute: int = 120
    queued_messages_per_recipient: int = 1000
    queued_bytes_per_recipient: int = 16 * 1024 * 1024
    push_bytes: int = 32 * 1024
    checkpoint_bytes: int = 32 * 1024
    # A scheduled message delivered later than this after its time says it is late.
    late_after_seconds: int = 60
    push_batch_ms: int = 10
    # Delays before each retry of an unresolved notification; its length is the budget.
    notify_retry_seconds: tuple[float, ...] = (30, 60, 120, 300, 300)
    receipt_wait_seconds: float = 2
    receipt_spacing_seconds: float = 30
    receipts_per_event: int = 20
    # A connection's request headers must all arrive within this (pocolobby/server.py).
    header_seconds: int = 10

    @classmethod
    def from_env(cls) -> Bounds:
        return cls(
            content_bytes=_int_env("POCOLOBBY_CONTENT_BYTES", cls.content_bytes),
            request_bytes=_int_env("POCOLOBBY_REQUEST_BYTES", cls.request_bytes),
            sends_per_minute=_int_env("POCOLOBBY_SENDS_PER_MINUTE", cls.sends_per_minute),
            queued_messages_per_recipient=_int_env(
                "POCOLOBBY_QUEUED_MESSAGES", cls.queued_messages_per_recipient
            ),
            queued_bytes_per_recipient=_int_env(
                "POCOLOBBY_QUEUED_BYTES", cls.queued_bytes_per_recipient
            ),
            push_bytes=_int_env("POCOLOBBY_PUSH_BYTES", cls.push_bytes),
            checkpoint_bytes=_int_env("POCOLOBBY_CHECKPOINT_BYTES", cls.checkpoint_bytes),
            late_after_seconds=_int_env("POCOLOBBY_LATE_AFTER_SECONDS", cls.late_after_seconds),
            push_batch_ms=_int_env("POCOLOBBY_PUSH_BATCH_MS", cls.push_batch_ms),
            header_seconds=_int_env("POCOLOBBY_HEADER_SECONDS", cls.header_seconds),
            notify_retry_seconds=_seconds_list_env(
                "POCOLOBBY_NOTIFY_RETRY_SECONDS", cls.notify_retry_seconds
            ),
        )

"""Secrets kept as files in the data directory: written once, mode 0600, read thereafter.

Django-free, so the project's settings can use it before Django is set up.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_secret_file(path: Path, value: str) -> None:
    """Create a mode-0600 file holding one secret; never replace an existing one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_or_create_secret(path: Path, prefix: str = "") -> str:
    """Read a secret kept in the data directory, creating it on first use."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        value = prefix + secrets.token_urlsafe(32)
        try:
            write_secret_file(path, value)
        except FileExistsError:
            return path.read_text().strip()
        return value


def admin_token(directory: Path) -> str:
    """POCOLOBBY_ADMIN_TOKEN, else `<directory>/admin-token` (created mode 0600 on first use)."""
    configured = os.environ.get("POCOLOBBY_ADMIN_TOKEN")
    if configured:
        return configured.strip()
    return read_or_create_secret(directory / "admin-token", prefix="pla_")

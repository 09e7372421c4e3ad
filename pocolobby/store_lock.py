"""One `pocolobby serve` per SQLite store: a lock file held for the process's life.

Two brokers on one SQLite file would both run the timers (deliveries, retries, retention)
and each believe it is the only registered process. The lock is an `flock` on a file beside
the database: the kernel releases it when the process ends, however it ends, so a crash
never leaves a stale lock to clear by hand. PostgreSQL is the scale-out path and takes no
lock here.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class StoreInUse(Exception):
    """Another live process holds the store's lock; the message names it."""


# The open lock file of this process: closing it (or exiting) releases the lock.
_HELD: dict[str, int] = {}


def lock_path(database: Path) -> Path:
    return database.with_name(database.name + ".serve-lock")


def hold(database: Path, description: str) -> Path:
    """Take the store's lock for the rest of this process, or raise StoreInUse naming the
    process that has it (its pid and what it said it serves, written into the file)."""
    path = lock_path(database)
    if str(path) in _HELD:
        return path
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 400).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        raise StoreInUse(
            f"refusing to start: {holder} already serves the store {database}; "
            "stop it first (one process owns a SQLite store)"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pocolobby serve (pid {os.getpid()}, {description})\n".encode())
    _HELD[str(path)] = fd
    return path


def release(database: Path) -> None:
    """Give the lock back (tests; a serving process keeps it until it exits)."""
    fd = _HELD.pop(str(lock_path(database)), None)
    if fd is not None:
        os.close(fd)

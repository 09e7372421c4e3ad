"""Capacity guards on the send path (seed section 5): refuse before anything is stored.

Each refusal names the setting that bounds it. Previously accepted work is kept: a guard
only stops new sends. Each check is cheap: a statvfs at most once a second, and counts read
in the send's sequence bump (lobbies/fastlane/queries.py `open_send`).
"""

from __future__ import annotations

import functools
import os
import shutil
import time

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from lobbies.errors import BrokerError, ErrorCode
from lobbies.models import Scope

# Free space read at most this often: a statvfs per send showed in a send's profile
# (docs/PERFORMANCE.md, "Figures from code comments"), and a volume does not fill in a second by
# anything this guard could stop.
FREE_SPACE_SECONDS = 1.0
_free_space: dict[str, tuple[float, int]] = {}


@functools.lru_cache(maxsize=8)
def _folder(store: str) -> str:
    """The store file's folder, worked out once: `abspath` stats nothing but still costs a
    send (docs/PERFORMANCE.md, "Figures from code comments")."""
    return os.path.dirname(os.path.abspath(store))


def free_disk_bytes() -> int | None:
    """Free bytes on the SQLite store's volume (read at most once a second); None on a
    database server."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor != "sqlite":
        return None
    folder = _folder(db.settings_dict["NAME"])
    now = time.monotonic()
    read = _free_space.get(folder)
    if read is None or now - read[0] >= FREE_SPACE_SECONDS:
        read = (now, shutil.disk_usage(folder).free)
        _free_space[folder] = read
    return read[1]


def check_send(scope: str, recipients: int) -> None:
    bounds = settings.BOUNDS
    if scope == Scope.BROADCAST and recipients > bounds.broadcast_fanout:
        raise BrokerError(
            413,
            ErrorCode.FANOUT_TOO_LARGE,
            f"a broadcast would reach {recipients} agents; the limit is "
            f"{bounds.broadcast_fanout} (POCOLOBBY_BROADCAST_FANOUT): use a room",
        )
    free = free_disk_bytes()
    if free is not None and free < bounds.disk_reserve_bytes:
        raise BrokerError(
            507,
            ErrorCode.STORAGE_CAPACITY,
            f"the store's volume has {free} bytes free, under the reserve of "
            f"{bounds.disk_reserve_bytes} (POCOLOBBY_DISK_RESERVE_BYTES); nothing was stored",
        )


def check_lobby_room(stored: int) -> None:
    """Refuse a send to a lobby that stores its limit of messages; `stored` before this one."""
    bounds = settings.BOUNDS
    if stored >= bounds.lobby_messages:
        raise BrokerError(
            507,
            ErrorCode.LOBBY_CAPACITY,
            f"this lobby stores {bounds.lobby_messages} messages, its limit "
            "(POCOLOBBY_LOBBY_MESSAGES); nothing was stored; retention or the owner must free some",
        )

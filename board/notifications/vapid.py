"""The broker's VAPID key: made once per broker, never shown, never logged.

SQLite keeps it as a mode-0600 file in the data directory (it travels with the store's
folder, like the secret key); PostgreSQL keeps it as a row, so every serve process of a
scale-out shares one key and a subscription made through one is pushed by another.
"""

from __future__ import annotations

import base64
import contextlib
import threading

from cryptography.hazmat.primitives import serialization
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from py_vapid import Vapid02  # type: ignore[import-untyped]

from board.models import VapidKey
from lobbies.access.secret_files import VAPID_KEY_FILE, read_secret, write_secret_file

KEY_FILE = VAPID_KEY_FILE

_lock = threading.Lock()
_cached: dict[str, Vapid02] = {}


def _new_pem() -> str:
    vapid = Vapid02()
    vapid.generate_keys()
    return vapid.private_pem().decode("ascii").strip()


def _stored_pem() -> str:
    if connection.vendor == "sqlite":
        path = settings.DATA_DIR / KEY_FILE
        pem = read_secret(path)
        if not pem:
            with contextlib.suppress(FileExistsError):  # another process made it: read it
                write_secret_file(path, _new_pem())
            pem = read_secret(path)
        return pem
    with transaction.atomic():
        row = VapidKey.objects.order_by("pk").first()
        if row is None:
            row = VapidKey.objects.create(private_pem=_new_pem(), created_at=timezone.now())
    # Two processes racing on first use may both insert; every process uses the first row.
    first = VapidKey.objects.order_by("pk").first()
    return first.private_pem if first else row.private_pem


def broker_vapid() -> Vapid02:
    """The broker's key, made on first use."""
    where = str(settings.DATA_DIR) if connection.vendor == "sqlite" else connection.vendor
    with _lock:
        vapid = _cached.get(where)
        if vapid is None:
            vapid = Vapid02.from_pem(_stored_pem().encode("ascii"))
            _cached[where] = vapid
        return vapid


def forget_cached_key() -> None:
    """Tests that swap the data directory or database read the key again."""
    with _lock:
        _cached.clear()


def public_key() -> str:
    """The applicationServerKey a browser subscribes with: the uncompressed P-256 point,
    base64url without padding."""
    raw = broker_vapid().public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

"""`/v1/health`: a live process that cannot read its store is not ready (503)."""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connection, transaction

from lobbies.models import BrokerState
from lobbies.wire.facts import iso

# PostgreSQL's bound on the health read; a SQLite read in WAL mode never waits for writers.
STATEMENT_TIMEOUT_MS = 2000


class StoreUnavailable(Exception):
    """The store did not answer the health read."""


def _read() -> dict[str, Any]:
    state = BrokerState.objects.filter(pk=1).first()
    if state is None:
        return {"restore_mode": False, "incarnation": None}
    return {
        "restore_mode": state.restore_mode,
        "incarnation": str(state.incarnation),
        "restored_at": iso(state.restored_at),
    }


def read_store() -> dict[str, Any]:
    """One cheap query, bounded; what it says about restore mode goes into the answer."""
    try:
        if connection.vendor == "postgresql":
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}")
                return _read()
        return _read()
    except DatabaseError as exc:
        connection.close_if_unusable_or_obsolete()
        raise StoreUnavailable(f"the store did not answer: {type(exc).__name__}") from None

"""Django's SQLite backend with one in-process queue for write transactions.

SQLite allows one writer; a second `BEGIN IMMEDIATE` waits in SQLite's busy handler, which
sleeps in growing steps (up to 100 ms) and wakes late. Under concurrent sends that sleeping,
not the work, set the pace. Here every write transaction of the process first takes one
lock, so waiting writers wake the moment the previous one commits; SQLite's own busy timeout
remains for other processes (the CLI's `init`, a backup).
"""

from __future__ import annotations

import threading

from django.db import OperationalError
from django.db.backends.sqlite3 import base

WRITE_LOCK = threading.Lock()
LOCK_TIMEOUT_SECONDS = 30


class DatabaseWrapper(base.DatabaseWrapper):
    _holds_write_lock = False

    def _start_transaction_under_autocommit(self) -> None:
        if not WRITE_LOCK.acquire(timeout=LOCK_TIMEOUT_SECONDS):
            raise OperationalError("database is locked (no write slot within 30 s)")
        self._holds_write_lock = True
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]  # Django's private hook, absent from the stubs
        except BaseException:
            self._release_write_lock()
            raise

    def _release_write_lock(self) -> None:
        if self._holds_write_lock:
            self._holds_write_lock = False
            WRITE_LOCK.release()

    def _commit(self) -> None:
        try:
            super()._commit()  # type: ignore[misc]  # Django's private hook, absent from the stubs
        finally:
            self._release_write_lock()

    def _rollback(self) -> None:
        try:
            super()._rollback()  # type: ignore[misc]  # Django's private hook, absent from the stubs
        finally:
            self._release_write_lock()

    def _close(self) -> None:
        try:
            super()._close()  # type: ignore[misc]  # Django's private hook, absent from the stubs
        finally:
            self._release_write_lock()

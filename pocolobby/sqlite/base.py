"""Django's SQLite backend with one in-process queue for write transactions.

SQLite allows one writer; a second `BEGIN IMMEDIATE` waits in SQLite's busy handler, which
sleeps in growing steps (up to 100 ms) and wakes late. Under concurrent sends that sleeping,
not the work, set the pace. Here every write transaction of the process first takes one
lock, so waiting writers wake the moment the previous one commits; SQLite's own busy timeout
remains for other processes (the CLI's `init`, a backup).
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import OperationalError
from django.db.backends.sqlite3 import base

WRITE_LOCK = threading.Lock()
LOCK_TIMEOUT_SECONDS = 30


@functools.cache
def _debug() -> bool:
    """settings.DEBUG, read once and again after a test changes it. Each read of
    `settings.X` is a Python-level __getattribute__ that raises and swallows an
    AttributeError (Django's LazyObject), and every statement of the send path asks whether
    queries are logged."""
    return bool(settings.DEBUG)


def _forget_debug(*, setting: str, **kwargs: Any) -> None:
    if setting == "DEBUG":
        _debug.cache_clear()


setting_changed.connect(_forget_debug)


class DatabaseWrapper(base.DatabaseWrapper):
    _holds_write_lock = False

    @property
    def queries_logged(self) -> bool:
        """As Django's, with settings.DEBUG remembered."""
        return bool(self.force_debug_cursor or _debug())

    def _start_transaction_under_autocommit(self) -> None:
        if not WRITE_LOCK.acquire(timeout=LOCK_TIMEOUT_SECONDS):
            raise OperationalError("database is locked (no write slot within 30 s)")
        self._holds_write_lock = True
        try:
            mode = self.transaction_mode  # type: ignore[attr-defined]  # Django 5.1's option, absent from the stubs
            if not self._run_plain("BEGIN" if mode is None else f"BEGIN {mode}"):
                super()._start_transaction_under_autocommit()  # type: ignore[misc]  # Django's private hook, absent from the stubs
        except BaseException:
            self._release_write_lock()
            raise

    def _run_plain(self, sql: str) -> bool:
        """Run a transaction-control statement (BEGIN, SAVEPOINT, RELEASE, ROLLBACK TO) on
        the driver directly, as lobbies.store runs the send path's statements; False (not
        run) when queries are logged or wrapped, for Django's cursor to run it visibly.

        Through Django's cursor each cost ~20 us of Python; a send in a shared commit
        (pocolobby.asgi) makes four of them: two savepoints, each released.
        """
        if self.connection is None or self.execute_wrappers or self.queries_logged:
            return False
        with self.wrap_database_errors:
            self.connection.execute(sql).close()
        return True

    def _savepoint(self, sid: str) -> None:
        sql = self.ops.savepoint_create_sql(sid)
        if not self._run_plain(sql):
            super()._savepoint(sid)  # type: ignore[misc]  # Django's private hook, absent from the stubs

    def _savepoint_commit(self, sid: str) -> None:
        sql = self.ops.savepoint_commit_sql(sid)
        if not self._run_plain(sql):
            super()._savepoint_commit(sid)  # type: ignore[misc]  # Django's private hook, absent from the stubs

    def _savepoint_rollback(self, sid: str) -> None:
        sql = self.ops.savepoint_rollback_sql(sid)
        if not self._run_plain(sql):
            super()._savepoint_rollback(sid)  # type: ignore[misc]  # Django's private hook, absent from the stubs

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

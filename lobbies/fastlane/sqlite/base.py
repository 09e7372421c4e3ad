"""Django's SQLite backend with one in-process queue for write transactions.

SQLite allows one writer; a second `BEGIN IMMEDIATE` waits in SQLite's busy handler, which
sleeps in growing steps (up to 100 ms) and wakes late. Under concurrent sends that sleeping,
not the work, set the pace. Here every write transaction of the process first takes one
lock, so waiting writers wake the moment the previous one commits; SQLite's own busy timeout
remains for other processes (the CLI's `init`, a backup).

It also keeps the savepoints a shared commit of /v1 requests needs (pocolobby.asgi) cheap:
none at all in an optimistic commit, which a failing block abandons instead
(`optimistic_commit`); named by depth and merged where nothing was written otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import OperationalError, connections
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


class SharedCommitAbandoned(BaseException):
    """A request of an optimistic shared commit needs a rollback of its own (see
    `optimistic_commit`). A BaseException, so no handler of the request's own errors
    (`except Exception`, which answers 500) takes it for one of them."""


class DatabaseWrapper(base.DatabaseWrapper):
    _holds_write_lock = False
    _needs_rollback = False
    optimistic = False  # see optimistic_commit()
    merging = False  # see merging_savepoints()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._savepoints: list[_Savepoint] = []  # open, innermost last

    # Django marks the transaction for rollback when an atomic block without a savepoint
    # fails; in an optimistic shared commit that block was a request's, whose own rollback
    # only a savepoint could have given, so the shared commit is abandoned at once.
    @property
    def needs_rollback(self) -> bool:
        return self._needs_rollback

    @needs_rollback.setter
    def needs_rollback(self, value: bool) -> None:
        self._needs_rollback = value
        if value and self.optimistic:
            raise SharedCommitAbandoned

    def _savepoint_allowed(self) -> bool:
        return not self.optimistic and bool(super()._savepoint_allowed())  # type: ignore[misc]  # Django's private hook, absent from the stubs

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
        the driver directly, as lobbies.fastlane.store runs the send path's statements; False (not
        run) when queries are logged or wrapped, for Django's cursor to run it visibly.

        Through Django's cursor each cost more Python than the statement (docs/PERFORMANCE.md,
        "Figures from code comments"); a send in a shared commit
        (pocolobby.asgi) makes four of them: two savepoints, each released.
        """
        if self.connection is None or self.execute_wrappers or self.queries_logged:
            return False
        with self.wrap_database_errors:
            self.connection.execute(sql).close()
        return True

    # Savepoints. Each is named by its depth (`p1`, `p2`...), not by Django's per-thread
    # counter, so the driver's statement cache keeps its SAVEPOINT and RELEASE prepared. A
    # savepoint opened while `merging` and with nothing written since the enclosing one
    # opened is that one's alias and runs no SQL: rolling back to the enclosing savepoint
    # undoes exactly what it would. (A shared commit wraps each request in a savepoint,
    # and a send opens its own at once: two savepoints a send, one of them for nothing.)

    def _savepoint(self, sid: str) -> None:
        stack = self._savepoints
        changes = self.connection.total_changes
        if self.merging and stack and stack[-1].changes == changes:
            stack.append(_Savepoint(sid, stack[-1].name, changes, own=False))
            return
        name = f"p{len(stack) + 1}"
        self._run_transaction_sql(self.ops.savepoint_create_sql(name))
        stack.append(_Savepoint(sid, name, changes, own=True))

    def _savepoint_commit(self, sid: str) -> None:
        stack = self._savepoints
        at = _position(stack, sid)
        opened = stack[at]
        del stack[at:]  # RELEASE releases every savepoint opened after it too
        if opened.own:
            self._run_transaction_sql(self.ops.savepoint_commit_sql(opened.name))

    def _savepoint_rollback(self, sid: str) -> None:
        stack = self._savepoints
        at = _position(stack, sid)
        self._run_transaction_sql(self.ops.savepoint_rollback_sql(stack[at].name))
        del stack[at + 1 :]  # ROLLBACK TO keeps the savepoint and cancels the later ones

    def _run_transaction_sql(self, sql: str) -> None:
        if not self._run_plain(sql):
            with self.cursor() as cursor:
                cursor.execute(sql)

    def _forget_savepoints(self) -> None:
        self._savepoints.clear()

    def _release_write_lock(self) -> None:
        if self._holds_write_lock:
            self._holds_write_lock = False
            WRITE_LOCK.release()

    def _commit(self) -> None:
        try:
            super()._commit()  # type: ignore[misc]  # Django's private hook, absent from the stubs
        finally:
            self._forget_savepoints()
            self._release_write_lock()

    def _rollback(self) -> None:
        try:
            super()._rollback()  # type: ignore[misc]  # Django's private hook, absent from the stubs
        finally:
            self._forget_savepoints()
            self._release_write_lock()

    def _close(self) -> None:
        try:
            super()._close()  # type: ignore[misc]  # Django's private hook, absent from the stubs
        finally:
            self._forget_savepoints()
            self._release_write_lock()


@dataclass
class _Savepoint:
    sid: str  # Django's name for it
    name: str  # the SQL savepoint it stands for
    changes: int  # the connection's total changes when it was opened
    own: bool  # False: an alias of the enclosing savepoint, with no SQL of its own


def _position(stack: list[_Savepoint], sid: str) -> int:
    for at in range(len(stack) - 1, -1, -1):
        if stack[at].sid == sid:
            return at
    raise OperationalError(f"no open savepoint {sid}")


def _embedded(alias: str) -> DatabaseWrapper:
    db = connections[alias]
    if not isinstance(db, DatabaseWrapper):
        raise TypeError(f"{alias} is not the embedded store; savepoints are its own here")
    return db


@contextlib.contextmanager
def optimistic_commit(alias: str) -> Iterator[None]:
    """Within (inside a transaction): atomic blocks open no savepoints, and one that fails
    raises SharedCommitAbandoned, for the caller to roll the whole transaction back.

    A shared commit's requests (pocolobby.asgi) each needed a savepoint only in case it
    failed alone, and nearly none does: the savepoints and the copies of the pages written
    under them were a share of a send's instructions worth saving (docs/PERFORMANCE.md, "Figures
    from code comments"). The caller serves
    the requests again, each in a savepoint, when one fails.
    """
    db = _embedded(alias)
    db.optimistic = True
    try:
        yield
    finally:
        db.optimistic = False


@contextlib.contextmanager
def merging_savepoints(alias: str) -> Iterator[None]:
    """Within: a savepoint opened with nothing written since the enclosing one opened runs
    no SQL of its own (see DatabaseWrapper). For code that runs no DDL, whose changes
    the connection's change count sees: a shared commit's requests."""
    db = _embedded(alias)
    before, db.merging = db.merging, True
    try:
        yield
    finally:
        db.merging = before

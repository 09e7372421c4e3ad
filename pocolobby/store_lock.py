"""The store's lock: one owner of a SQLite store, and no schema change under a live broker.

Two brokers on one SQLite file would both run the timers (deliveries, retries, retention)
and each believe it is the only registered process; an upgrade or a restore under a live
broker loses what it accepts after. So every command that changes the store (`serve`,
`init`, `restore`, the writing `manage` commands) takes the lock before it touches anything,
and is refused, naming the holder, while another has it.

SQLite: an exclusive `flock` on `<store>.serve-lock`, which records who holds it. The kernel
releases it when the process ends, however it ends, so a crash never leaves a stale lock.

PostgreSQL: a session advisory lock on a dedicated connection. Several `serve` processes
legitimately share one database (the scale-out layout), so `serve` holds it shared; `init`,
`restore` and `manage` hold it exclusive. The holders are named from pg_stat_activity.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Any 64-bit number of our own ("PoLb", 2); loops.py's dispatcher lock is ("PoLb", 1).
STORE_LOCK_KEY = 0x506F4C62_00000002
# PostgreSQL keeps the first 63 bytes of an application_name.
APPLICATION_NAME_BYTES = 63


class StoreInUse(Exception):
    """Another live process holds the store's lock; `holder` names it."""

    def __init__(self, holder: str, store: str, *, several: bool = False) -> None:
        super().__init__(f"{holder} {'hold' if several else 'holds'} the store {store}")
        self.holder = holder
        self.store = store

    def refusal(self, refused: str, advice: str = "stop it first") -> str:
        return f"refusing to {refused}: {self}; {advice}"


def describe(command: str, detail: str = "") -> str:
    """How this process names itself as a holder: command, pid, what it serves, since when."""
    since = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return (
        f"pocolobby {command} (pid {os.getpid()}, {detail + ', ' if detail else ''}since {since})"
    )


def _printable(text: str) -> str:
    """The holder's line as stored, with anything a terminal would act on made visible."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


# ---------------------------------------------------------------- SQLite: flock

# The open lock file of this process, per lock path: closing it (or exiting) releases the lock.
_HELD: dict[str, int] = {}
# Lock files this process created (a refused start takes them back).
_CREATED: set[str] = set()


def lock_path(database: Path) -> Path:
    return database.with_name(database.name + ".serve-lock")


def hold(database: Path, description: str) -> Path:
    """Take the store's lock for the rest of this process, or raise StoreInUse naming the
    process that has it (the line it wrote into the file). `description` is this process's
    line (`describe`)."""
    path = lock_path(database)
    if str(path) in _HELD:
        return path
    while True:
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 400).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise StoreInUse(_printable(holder), str(database)) from None
        # A holder that took the lock back (release) may have removed the file after we
        # opened it: a lock on a removed file locks nothing, so take the one at the path.
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{description}\n".encode())
    _HELD[str(path)] = fd
    if created:
        _CREATED.add(str(path))
    return path


def release(database: Path) -> None:
    """Give the lock back (a refused start; tests). A lock file this process created is
    removed, so a refusal leaves the directory as it found it."""
    path = lock_path(database)
    fd = _HELD.pop(str(path), None)
    if fd is None:
        return
    if str(path) in _CREATED:
        _CREATED.discard(str(path))
        path.unlink(missing_ok=True)  # while still held: see the inode check in hold()
    os.close(fd)


# ---------------------------------------------------------------- PostgreSQL: advisory lock


# OPTIONS that Django reads itself and never gives libpq (django/db/backends/postgresql).
DJANGO_ONLY_OPTIONS = frozenset({"assume_role", "isolation_level", "pool", "server_side_binding"})


def connection_params(db: Mapping[str, Any]) -> dict[str, Any]:
    """psycopg.connect's arguments for a DATABASES entry: the broker's own connection's, with
    every libpq option DATABASE_URL carried (sslmode, sslrootcert, options, ...)."""
    options = {k: v for k, v in (db.get("OPTIONS") or {}).items() if k not in DJANGO_ONLY_OPTIONS}
    given = {
        "host": db.get("HOST"),
        "port": db.get("PORT"),
        "dbname": db.get("NAME"),
        "user": db.get("USER"),
        "password": db.get("PASSWORD"),
    }
    return {**options, **{k: v for k, v in given.items() if v}}


def pg_connect(application_name: str | None) -> Any:
    """A connection of its own (autocommit) to the configured PostgreSQL database, named
    `application_name` (None: libpq's default, PGAPPNAME).

    Not Django's: Django closes and reopens its connections, and a session lock lives only as
    long as its session.
    """
    import psycopg  # local: installed everywhere, but only a PostgreSQL broker needs it
    from django.conf import settings  # local: store_lock is importable before Django is set up

    params = connection_params(settings.DATABASES["default"])
    if application_name is not None:
        name = application_name.encode()[:APPLICATION_NAME_BYTES].decode("utf-8", "ignore")
        params["application_name"] = name
    return psycopg.connect(**params, autocommit=True)


# This process's holds on a PostgreSQL store: kept (and so held) until the process exits.
HELD_POSTGRES: list[PostgresStoreLock] = []
# Why this process stopped serving, when a lost lock could not be held again (keep_held).
LOST: list[str] = []


# Called (from any thread) the moment a write finds the lock's session lost, so the watch
# (pocolobby/loops.py) checks it now rather than at its next tick.
ON_LOST: list[Callable[[], object]] = []


def keep_held() -> str | None:
    """PostgresStoreLock.keep for every hold of this process; the first reason to stop."""
    for lock in HELD_POSTGRES:
        reason = lock.keep()
        if reason is not None:
            LOST.append(reason)
            return reason
    return None


def write_refusal() -> str | None:
    """Why this process may not write now, None if it may: on PostgreSQL, from the moment
    its store lock's session is seen lost until the lock is held again (an `init` or a
    `restore` may hold it alone meanwhile). Asked before every write request; it costs a
    flag and a poll of the lock's socket, no round trip."""
    for lock in HELD_POSTGRES:
        if lock.serving and not lock.alive():
            return "this broker's hold on the store's lock was lost with its session; retry"
    return None


class PostgresStoreLock:
    """This process's hold on the database's store lock, on a session of its own."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.connection: Any = None
        self.exclusive = False
        self.shared = False
        self.serving = False  # held shared by `serve`: keep() re-takes it when its session dies
        # The session's socket while it holds the lock; None from the moment it is seen lost
        # (write_refusal) until keep() holds the lock again.
        self.held_on: int | None = None
        self.checking = threading.Lock()  # held while keep() talks on the session

    def _session(self) -> Any:
        import psycopg  # local: as in pg_connect

        if self.connection is None:
            try:
                self.connection = pg_connect(f"pocolobby {self.command} pid {os.getpid()}")
            except psycopg.OperationalError as exc:
                raise ConnectionError(f"cannot connect to PostgreSQL: {exc}") from None
        return self.connection

    def _refused(self) -> StoreInUse:
        holders = self.holders()
        return StoreInUse(
            holders or "another session", self.database(), several=holders.count("; ") > 0
        )

    def database(self) -> str:
        from django.conf import settings  # local: as in pg_connect

        db = settings.DATABASES["default"]
        return f"postgres://{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db['NAME']}"

    def take_exclusive(self) -> None:
        """Hold the lock alone, or raise StoreInUse naming every holder."""
        row = (
            self._session().execute("SELECT pg_try_advisory_lock(%s)", [STORE_LOCK_KEY]).fetchone()
        )
        if not row[0]:
            raise self._refused()
        self.exclusive = True

    def try_exclusive(self) -> bool:
        try:
            self.take_exclusive()
        except StoreInUse:
            return False
        return True

    def take_shared(self, wait_seconds: float) -> None:
        """Hold the lock beside other holders of it shared, waiting up to `wait_seconds` for
        an exclusive holder (another `serve` checking the schema, or an `init`) to finish."""
        import psycopg  # local: as in pg_connect

        session = self._session()
        session.execute(f"SET lock_timeout = {max(1, int(wait_seconds * 1000))}")
        try:
            session.execute("SELECT pg_advisory_lock_shared(%s)", [STORE_LOCK_KEY])
        except psycopg.errors.LockNotAvailable:
            raise self._refused() from None
        finally:
            session.execute("RESET lock_timeout")
        self.shared = self.serving = True
        self.held_on = session.fileno()

    def share(self) -> None:
        """From exclusive to shared without a moment unlocked: other brokers may start."""
        if self.exclusive:
            self._session().execute("SELECT pg_advisory_lock_shared(%s)", [STORE_LOCK_KEY])
            self._session().execute("SELECT pg_advisory_unlock(%s)", [STORE_LOCK_KEY])
            self.exclusive, self.shared, self.serving = False, True, True
            self.held_on = self._session().fileno()

    def keep(self) -> str | None:
        """While serving: check the session that holds the lock shared, and when it was lost (a
        database restart, a terminated backend) take the lock again on a new one, without
        waiting. None while held, or while PostgreSQL cannot be reached (the next check tries
        again); otherwise why this broker must stop: another command holds the lock alone,
        so the store may be changing under it (a restore, an `init`, a `manage`)."""
        if not self.serving:
            return None
        with self.checking:
            return self._keep()

    def _keep(self) -> str | None:
        import psycopg  # local: as in pg_connect

        if self.connection is not None:
            try:
                self.connection.execute("SELECT 1")
                self.held_on = self.connection.fileno()  # alive (what was read was not an end)
                return None
            except psycopg.Error:
                self.release()
        try:
            row = (
                self._session()
                .execute("SELECT pg_try_advisory_lock_shared(%s)", [STORE_LOCK_KEY])
                .fetchone()
            )
        except (ConnectionError, psycopg.Error):
            self.release()
            return None
        if row[0]:
            self.shared = True
            self.held_on = self.connection.fileno()
            log.warning("the store's lock was lost with its session; held again (shared)")
            return None
        return (
            f"the store's lock was lost with its session and is now held alone by "
            f"{self.holders() or 'another session'}"
        )

    def alive(self) -> bool:
        """Whether the lock's session may still hold it, known without a round trip: the
        session is idle between checks, so anything to read on its socket is PostgreSQL
        ending it (a terminated backend's last words, a closed socket). A socket that reads
        ready marks the hold lost at once, and wakes keep()."""
        fd = self.held_on
        if fd is None:
            return False
        if not self.checking.acquire(blocking=False):
            return True  # keep() is reading its answer there; it finds a lost session itself
        try:
            poll = select.poll()
            poll.register(fd, select.POLLIN | select.POLLPRI)
            if not poll.poll(0):
                return True
            self.held_on = None
        finally:
            self.checking.release()
        for wake in ON_LOST:
            wake()
        return False

    def holders(self) -> str:
        """The other sessions holding the lock, as their processes named themselves."""
        classid, objid = STORE_LOCK_KEY >> 32, STORE_LOCK_KEY & 0xFFFFFFFF
        rows = (
            self._session()
            .execute(
                "SELECT a.application_name, l.mode, a.backend_start, host(a.client_addr) "
                "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 1 "
                "AND l.pid <> pg_backend_pid() ORDER BY a.backend_start",
                [classid, objid],
            )
            .fetchall()
        )
        named = []
        for name, mode, since, address in rows:
            who = _printable(name or "a session without a name")
            held = "shared" if mode == "ShareLock" else "exclusive"
            at = f" from {address}" if address else ""
            stamp = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            named.append(f"{who} ({held}, connected{at} since {stamp})")
        return "; ".join(named)

    def release(self) -> None:
        self.held_on = None
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        self.exclusive = self.shared = False

"""On PostgreSQL the store's lock is an advisory lock over a real connection: brokers share
it, `init` and `manage` need it alone; and a database that is not ours, or from a newer
release, is refused and left unchanged.

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, no password); skipped when unreachable
unless POCOLOBBY_REQUIRE_POSTGRES=1 (tests/postgres.py). Each test creates a uniquely named
database and drops it at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lobbies.storage.discipline import APPLICATION_ID, FORMAT_VERSION
from pocolobby.loops import ALERTS_LOCK_KEY, LEADER_LOCK_KEY
from pocolobby.store_lock import STORE_LOCK_KEY
from tests.postgres import PG_SERVER, admin, cli, own_database, snapshot
from tests.server import REPO_ROOT, Broker, clean_env

pytestmark = pytest.mark.slow


@pytest.fixture
def database() -> Iterator[str]:
    yield from own_database("pocolobby_lock")


def store_lock_modes(database: str) -> list[str]:
    with admin(database) as conn:
        rows = conn.execute(
            "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = %s) "
            "AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
            [database, STORE_LOCK_KEY >> 32, STORE_LOCK_KEY & 0xFFFFFFFF],
        ).fetchall()
    return sorted(mode for (mode,) in rows)


@contextlib.contextmanager
def frozen(*brokers: Broker) -> Iterator[None]:
    """Brokers stopped (SIGSTOP) with their sessions and locks alive: they write nothing."""
    for broker in brokers:
        os.kill(broker.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for broker in brokers:
            os.kill(broker.pid, signal.SIGCONT)


def test_brokers_share_the_store_and_init_and_migrate_are_refused_while_they_serve(
    database: str, tmp_path: Path
):
    env = {"DATABASE_URL": f"{PG_SERVER}/{database}"}
    a = Broker(tmp_path / "a", env=env)
    b = Broker(tmp_path / "b", env=env)
    try:
        a.start()  # alone: it initialises the database, then holds the lock shared
        b.start()  # beside it, shared
        assert store_lock_modes(database) == ["ShareLock", "ShareLock"]
        for broker in (a, b):
            assert httpx.get(f"{broker.url}/v1/health").json()["service"] == "pocolobby"

        with frozen(a, b):
            before = snapshot(database)
            refused = [
                cli(database, tmp_path / "a", "init"),
                cli(database, tmp_path / "a", "manage", "migrate"),
                cli(database, tmp_path / "a", "manage", "migrate", "board", "0003"),
            ]
            after = snapshot(database)
        assert after == before
        for result in refused:
            assert result.returncode == 1, result.stdout + result.stderr
            assert "refusing to " in result.stderr and "hold the store" in result.stderr
            for broker in (a, b):
                assert f"pocolobby serve pid {broker.pid} (shared," in result.stderr
            assert "Traceback" not in result.stderr
    finally:
        b.stop()
        a.stop()

    assert store_lock_modes(database) == []  # the sessions ended with the processes
    back = cli(database, tmp_path / "a", "manage", "migrate", "board", "0003")
    assert back.returncode == 0, back.stderr
    upgraded = cli(database, tmp_path / "a", "init")
    assert upgraded.returncode == 0 and "upgraded" in upgraded.stdout, upgraded.stderr


def test_a_serve_is_refused_while_init_holds_the_lock_alone(database: str, tmp_path: Path):
    assert cli(database, tmp_path, "init").returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-m", "pocolobby", "manage", "shell", "-c", "import time; time.sleep(60)"],
        cwd=REPO_ROOT,
        env=clean_env(
            {"DATABASE_URL": f"{PG_SERVER}/{database}", "POCOLOBBY_DATA_DIR": str(tmp_path)}
        ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while store_lock_modes(database) != ["ExclusiveLock"]:
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        init = cli(database, tmp_path, "init")
        assert init.returncode == 1, init.stdout + init.stderr
        assert f"pocolobby manage shell pid {holder.pid} (exclusive," in init.stderr
    finally:
        holder.terminate()
        holder.wait(30)


def test_a_database_not_ours_or_from_a_newer_release_is_refused_unchanged(
    database: str, tmp_path: Path
):
    with admin(database) as conn:
        conn.execute("CREATE TABLE notes (body text)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
    before = snapshot(database)
    foreign = cli(database, tmp_path, "init")
    assert foreign.returncode == 2, foreign.stdout + foreign.stderr
    assert "holds tables (notes) but no PocoLobby identity" in foreign.stderr
    assert snapshot(database) == before
    with admin(database) as conn:
        conn.execute("DROP TABLE notes")

    initialised = cli(database, tmp_path, "init")
    assert initialised.returncode == 0 and "initialised" in initialised.stdout
    assert snapshot(database)["identity"] == [(APPLICATION_ID, FORMAT_VERSION)]

    for change, undo, expected in [
        (
            (
                "INSERT INTO django_migrations (app, name, applied) VALUES (%s, %s, now())",
                ["lobbies", "9999_from_the_future"],
            ),
            ("DELETE FROM django_migrations WHERE name = %s", ["9999_from_the_future"]),
            "schema steps this release does not know: lobbies.9999_from_the_future",
        ),
        (
            ("UPDATE pocolobby_identity SET format_version = %s", [FORMAT_VERSION + 1]),
            ("UPDATE pocolobby_identity SET format_version = %s", [FORMAT_VERSION]),
            f"written by a newer PocoLobby (format {FORMAT_VERSION + 1}",
        ),
        (
            ("UPDATE pocolobby_identity SET application_id = %s", [0x43415338]),
            ("UPDATE pocolobby_identity SET application_id = %s", [APPLICATION_ID]),
            "belongs to another application (pocolobby_identity holds 0x43415338",
        ),
    ]:
        with admin(database) as conn:
            conn.execute(*change)
        before = snapshot(database)
        for command in (("init",), ("serve", "--port", "9"), ("manage", "migrate")):
            result = cli(database, tmp_path, *command)
            assert result.returncode == 2, (command, result.stdout, result.stderr)
            assert expected in result.stderr and "Traceback" not in result.stderr, command
            assert snapshot(database) == before, command
        with admin(database) as conn:
            conn.execute(*undo)

    # A store this broker made before the identity row existed is ours: stamped, not refused.
    with admin(database) as conn:
        conn.execute("DROP TABLE pocolobby_identity")
    adopted = cli(database, tmp_path, "init")
    assert adopted.returncode == 0, adopted.stderr
    assert snapshot(database)["identity"] == [(APPLICATION_ID, FORMAT_VERSION)]


def test_the_locks_own_connection_carries_every_libpq_option_of_database_url(database: str):
    """An sslmode (or any option) in DATABASE_URL reaches the lock's and the leaders' sessions
    too: without it a server that requires TLS refused them while Django's own connected."""
    import dj_database_url  # local: the broker's own parser of DATABASE_URL
    import psycopg

    from pocolobby.store_lock import connection_params

    db = dj_database_url.parse(
        f"{PG_SERVER}/{database}"
        "?sslmode=disable&options=-c%20statement_timeout%3D4321&isolation_level=1"
    )
    params = connection_params(db)
    assert params["sslmode"] == "disable" and "isolation_level" not in params  # Django's own
    with psycopg.connect(**params, autocommit=True) as session:
        (timeout,) = session.execute("SHOW statement_timeout").fetchone()
        (name,) = session.execute("SELECT current_database()").fetchone()
    assert (timeout, name) == ("4321ms", database)


def lock_session(database: str, broker: Broker) -> int | None:
    """The backend pid of the session holding the store's lock for `broker`, if any."""
    with admin(database) as conn:
        row = conn.execute(
            "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = %s "
            "AND l.classid::bigint = %s AND l.objid::bigint = %s",
            [f"pocolobby serve pid {broker.pid}", *divmod(STORE_LOCK_KEY, 1 << 32)],
        ).fetchone()
    return row[0] if row else None


def test_a_broker_whose_lock_session_is_lost_holds_the_lock_again(database: str, tmp_path: Path):
    broker = Broker(tmp_path / "a", env={"DATABASE_URL": f"{PG_SERVER}/{database}"}).start()
    try:
        first = lock_session(database, broker)
        assert first is not None
        with admin(database) as conn:  # as a database restart or a DBA would end it
            conn.execute("SELECT pg_terminate_backend(%s)", [first])
        deadline = time.monotonic() + 30
        while lock_session(database, broker) in (None, first):
            assert time.monotonic() < deadline, "the broker never held the lock again"
            time.sleep(0.2)
        assert store_lock_modes(database) == ["ShareLock"]
        assert httpx.get(f"{broker.url}/v1/health").json()["service"] == "pocolobby"
        assert "held again (shared)" in broker.log_path.read_text()
    finally:
        broker.stop()


def test_a_broker_that_finds_its_lost_lock_held_alone_stops_and_says_why(
    database: str, tmp_path: Path
):
    broker = Broker(tmp_path / "a", env={"DATABASE_URL": f"{PG_SERVER}/{database}"}).start()
    try:
        session = lock_session(database, broker)
        holder = admin(database)
        holder.execute("SET application_name = 'pocolobby restore (a stand-in)'")
        with frozen(broker):  # no check of the broker's runs between the two statements
            holder.execute("SELECT pg_terminate_backend(%s)", [session])
            holder.execute("SELECT pg_advisory_lock(%s)", [STORE_LOCK_KEY])
        assert broker.process is not None
        code = broker.process.wait(30)
        log = broker.log_path.read_text()
        assert code == 1, log
        assert (
            "stopped serving: the store's lock was lost with its session and is now held "
            "alone by pocolobby restore (a stand-in) (exclusive," in log
        )
        assert "Traceback" not in log
        holder.close()
    finally:
        broker.stop()


def test_a_serving_broker_holds_the_store_lock_shared_and_leads_dispatch_and_alerts(
    database: str, tmp_path: Path
):
    """Three locks on three keys: the alerts' once shared the store lock's key, and with every
    broker holding that one shared no broker ever took it alone: no push, no mail."""
    broker = Broker(tmp_path / "a", env={"DATABASE_URL": f"{PG_SERVER}/{database}"}).start()
    try:
        wanted = {
            (STORE_LOCK_KEY, "ShareLock"),
            (LEADER_LOCK_KEY, "ExclusiveLock"),
            (ALERTS_LOCK_KEY, "ExclusiveLock"),
        }
        deadline = time.monotonic() + 30
        while (held := advisory_locks(database)) != wanted:
            assert time.monotonic() < deadline, held
            time.sleep(0.2)
        assert len({key for key, _ in wanted}) == 3
    finally:
        broker.stop()


def advisory_locks(database: str) -> set[tuple[int, str]]:
    with admin(database) as conn:
        rows = conn.execute(
            "SELECT (classid::bigint << 32) | objid::bigint, mode FROM pg_locks "
            "WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = %s)",
            [database],
        ).fetchall()
    return {(key, mode) for key, mode in rows}


def test_no_send_is_stored_from_the_moment_the_lock_session_is_lost(database: str, tmp_path: Path):
    """A restore (a stand-in) waits for the store's lock alone; the broker's lock session is
    terminated, so the restore holds it at once. Every send tried after that is refused
    (503, or no answer once the broker has stopped), none `stored`: the broker sees the loss
    at the next write, not at its next check of the lock (the probe saw up to 1.38 s)."""
    broker = Broker(tmp_path / "a", env={"DATABASE_URL": f"{PG_SERVER}/{database}"}).start()
    holder = admin(database)
    try:
        configs = broker.provision("team", ["lead", "backend"], tmp_path / "configs")
        session = lock_session(database, broker)
        holder.execute("SET application_name = 'pocolobby restore (a stand-in)'")
        waiter = threading.Thread(
            target=holder.execute, args=("SELECT pg_advisory_lock(%s)", [STORE_LOCK_KEY])
        )
        waiter.start()
        deadline = time.monotonic() + 10
        while not waiting_for_the_store_lock(database):
            assert time.monotonic() < deadline, "the stand-in never waited for the lock"
            time.sleep(0.05)
        answers: list[tuple[float, int]] = []  # (when sent, status; 0: no answer)
        stop = threading.Event()

        def send() -> None:
            with httpx.Client(timeout=10) as client:
                n = 0
                while not stop.is_set():
                    n += 1
                    sent_at = time.monotonic()
                    try:
                        status = client.post(
                            f"{broker.url}/v1/tools/send_message",
                            json={"to": "backend", "content": "hi", "client_request_id": f"{n}"},
                            headers=configs["lead"].headers,
                        ).status_code
                    except httpx.TransportError:
                        status = 0
                    answers.append((sent_at, status))

        sender = threading.Thread(target=send)
        sender.start()
        while sum(1 for _, status in answers if status == 200) < 5:
            time.sleep(0.01)
        with admin(database) as killer:
            killer.execute("SELECT pg_terminate_backend(%s, 5000)", [session])
        killed_at = time.monotonic()
        waiter.join(10)
        assert broker.process is not None
        assert broker.process.wait(30) == 1  # it found the lock held alone, and stopped
        stop.set()
        sender.join(15)
        after = [status for sent_at, status in answers if sent_at >= killed_at]
        assert after and 200 not in after, after
        assert 503 in [status for _, status in answers]  # refused before the broker stopped
    finally:
        holder.close()
        broker.stop()


def waiting_for_the_store_lock(database: str) -> bool:
    with admin(database) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND classid::bigint = %s AND objid::bigint = %s",
            [STORE_LOCK_KEY >> 32, STORE_LOCK_KEY & 0xFFFFFFFF],
        ).fetchone()
    return bool(row[0])

"""Tests against a real PostgreSQL server of their own: each makes a uniquely named database
on 127.0.0.1:5432 (user postgres, no password) and drops it at the end, whatever DATABASE_URL
says (they never touch the suite's test database).

Skipped when the server cannot be reached (or, for the backup tests, pg_dump is missing),
except where POCOLOBBY_REQUIRE_POSTGRES=1 (.ci/run sets it where it runs PostgreSQL): then
they fail, so CI cannot pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.server import REPO_ROOT, clean_env

PG_SERVER = "postgresql://postgres@127.0.0.1:5432"


def missing(reason: str) -> None:
    """Skip, or fail where PostgreSQL is required."""
    if os.environ.get("POCOLOBBY_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"POCOLOBBY_REQUIRE_POSTGRES=1 but {reason}")
    pytest.skip(reason)


def admin(dbname: str = "postgres") -> psycopg.Connection:
    return psycopg.connect(f"{PG_SERVER}/{dbname}", autocommit=True, connect_timeout=3)


def require_tools(*names: str) -> None:
    for name in names:
        if shutil.which(name) is None:
            missing(f"{name} is not installed (apt-get install postgresql-client)")


def create_database(prefix: str) -> str:
    try:
        connection = admin()
    except psycopg.Error as exc:
        missing(f"PostgreSQL is not reachable at {PG_SERVER}: {exc}")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(name: str) -> None:
    with admin() as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')


def own_database(prefix: str) -> Iterator[str]:
    """For a fixture: a new database, dropped after the test."""
    name = create_database(prefix)
    try:
        yield name
    finally:
        drop_database(name)


def url(database: str) -> str:
    return f"{PG_SERVER}/{database}"


def cli(
    database: str, data_dir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI on that database (no broker needed)."""
    return subprocess.run(
        [sys.executable, "-m", "pocolobby", *args],
        cwd=REPO_ROOT,
        env=clean_env(
            {"DATABASE_URL": url(database), "POCOLOBBY_DATA_DIR": str(data_dir), **(env or {})}
        ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def snapshot(database: str) -> dict[str, object]:
    """What a refused command could have changed: every table's columns, the schema steps
    recorded, the identity row, and the row count of every table."""
    with admin(database) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY 1, 2"
        ).fetchall()
        tables = sorted({table for table, _, _ in columns})
        counts = {
            t: conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(t))
            ).fetchone()[0]
            for t in tables
        }
        steps = (
            conn.execute("SELECT app, name FROM django_migrations ORDER BY 1, 2").fetchall()
            if "django_migrations" in tables
            else []
        )
        identity = (
            conn.execute("SELECT * FROM pocolobby_identity").fetchall()
            if "pocolobby_identity" in tables
            else []
        )
    return {"columns": columns, "counts": counts, "steps": steps, "identity": identity}

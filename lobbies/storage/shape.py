"""The store's shape (tables, column types, NOT NULLs, indexes, foreign keys, triggers) as a
store holds it, and what this release's schema steps make: `shape.json` beside this
module, one description per database vendor, written by

    python -m lobbies.storage.shape [--postgres postgresql://USER@HOST:PORT]

which runs the real `pocolobby init` on a scratch SQLite file and a scratch PostgreSQL
database and reads them back with the readers below; tests/lobbies/test_store_shape.py makes
fresh stores of both vendors and fails when they differ from the file, so a new migration
without a new description cannot pass.

Reading a store's shape is a few catalog queries (SQLite PRAGMAs, PostgreSQL's pg_catalog),
cheaper than building Django's migration state; lobbies/storage/discipline.py compares the two
before
any write and refuses a store that differs, naming each difference.

Tolerated: indexes of the owner's own that are not unique (they change no write), and the
shadow tables SQLite's FTS5 keeps for a virtual table (their layout is SQLite's, per version).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Protocol, TypedDict

DESCRIPTION = Path(__file__).with_name("shape.json")
FTS5_SHADOWS = ("_data", "_idx", "_content", "_docsize", "_config")


class Shape(TypedDict):
    # table -> column -> [declared type, NOT NULL]; a virtual table has no columns listed
    tables: dict[str, dict[str, list[Any]]]
    # index name -> [table, unique, definition]
    indexes: dict[str, list[Any]]
    # "table.column" -> "table.column" it references
    foreign_keys: dict[str, str]
    triggers: list[str]


class Cursor(Protocol):
    def execute(self, sql: str, params: Any = ..., /) -> Any: ...
    def fetchall(self) -> list[Any]: ...


def _words(sql: str) -> str:
    return " ".join(sql.split())


def sqlite_shape(conn: sqlite3.Connection, skip: frozenset[str] = frozenset()) -> Shape:
    """A SQLite store's shape, read with PRAGMAs (works inside a transaction and read-only)."""

    def rows(sql: str) -> list[Any]:
        return conn.execute(sql).fetchall()

    master = rows("SELECT type, name, tbl_name, sql FROM sqlite_master")
    virtual = {
        name
        for kind, name, _, sql in master
        if kind == "table" and (sql or "").upper().startswith("CREATE VIRTUAL TABLE")
    }
    shadows = {v + suffix for v in virtual for suffix in FTS5_SHADOWS}
    shape: Shape = {"tables": {}, "indexes": {}, "foreign_keys": {}, "triggers": []}
    for kind, name, _, _ in sorted(master, key=lambda r: (r[0], r[1])):
        if (name.startswith("sqlite_") and kind == "table") or name in shadows or name in skip:
            continue
        if kind == "trigger":
            shape["triggers"].append(name)
        if kind != "table":
            continue
        if name in virtual:
            shape["tables"][name] = {}
            continue
        shape["tables"][name] = {
            column: [kind_.lower(), bool(notnull)]
            for _, column, kind_, notnull, _, _ in rows(f'PRAGMA table_info("{name}")')
        }
        for _, index, unique, _, _ in rows(f'PRAGMA index_list("{name}")'):
            columns = [c for _, _, c in rows(f'PRAGMA index_info("{index}")')]
            index_sql = next((s for k, n, _, s in master if k == "index" and n == index), None)
            definition = _words(index_sql) if index_sql else f"({', '.join(columns)})"
            shape["indexes"][index] = [name, bool(unique), definition]
        for fk in rows(f'PRAGMA foreign_key_list("{name}")'):
            shape["foreign_keys"][f"{name}.{fk[3]}"] = f"{fk[2]}.{fk[4]}"
    return shape


FOREIGN_KEY = re.compile(
    r"FOREIGN KEY \((?P<cols>[^)]*)\) REFERENCES (?P<ref>[^(]+)\((?P<to>[^)]*)\)"
)


def postgres_shape(cursor: Cursor, skip: frozenset[str] = frozenset()) -> Shape:
    """A PostgreSQL store's shape in the current schema, from pg_catalog (writes nothing)."""
    shape: Shape = {"tables": {}, "indexes": {}, "foreign_keys": {}, "triggers": []}
    cursor.execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
        "ORDER BY c.relname, a.attnum"
    )
    for table, column, kind, notnull in cursor.fetchall():
        if table in skip:
            continue
        columns = shape["tables"].setdefault(table, {})
        if column is not None:
            columns[column] = [kind, bool(notnull)]
    cursor.execute(
        "SELECT i.relname, t.relname, x.indisunique, pg_get_indexdef(x.indexrelid), n.nspname "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_class t ON t.oid = x.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE n.nspname = current_schema() ORDER BY i.relname"
    )
    for index, table, unique, definition, schema in cursor.fetchall():
        if table not in skip:
            definition = definition.replace(f" ON {schema}.", " ON ")
            shape["indexes"][index] = [table, bool(unique), _words(definition)]
    cursor.execute(
        "SELECT t.relname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
        "JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE n.nspname = current_schema() AND c.contype = 'f' ORDER BY 1, 2"
    )
    for table, definition in cursor.fetchall():
        found = FOREIGN_KEY.search(definition)
        if found is not None and table not in skip:
            ref = found["ref"].strip().split(".")[-1].strip('"')
            shape["foreign_keys"][f"{table}.{found['cols']}"] = f"{ref}.{found['to']}"
    cursor.execute(
        "SELECT tgname FROM pg_trigger g JOIN pg_class t ON t.oid = g.tgrelid "
        "JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE n.nspname = current_schema() AND NOT g.tgisinternal ORDER BY 1"
    )
    shape["triggers"] = [name for (name,) in cursor.fetchall()]
    return shape


@functools.cache
def _description() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DESCRIPTION.read_text(encoding="utf-8"))
    return data


def expected(vendor: str) -> Shape | None:
    """The committed description's shape for `vendor` (None for a vendor it has none of)."""
    shape: Shape | None = _description().get(vendor)
    return shape


def described_steps() -> list[str]:
    """The schema steps ("app.name", sorted) the committed description was made at."""
    return list(_description()["steps"])


def _column(spec: list[Any]) -> str:
    return f"{spec[0]}{' NOT NULL' if spec[1] else ''}"


def differences(want: Shape, found: Shape) -> list[str]:
    """Each way `found` differs from `want`, named: "table.column: expected X, found Y"."""
    said: list[str] = []
    for table in sorted(want["tables"].keys() - found["tables"].keys()):
        said.append(f"table {table}: missing")
    for table in sorted(found["tables"].keys() - want["tables"].keys()):
        said.append(f"table {table}: not made by PocoLobby's schema steps")
    for table in sorted(want["tables"].keys() & found["tables"].keys()):
        columns, present = want["tables"][table], found["tables"][table]
        for column in sorted(columns.keys() | present.keys()):
            expect, have = columns.get(column), present.get(column)
            if expect != have:
                said.append(
                    f"{table}.{column}: expected {_column(expect) if expect else 'no column'}, "
                    f"found {_column(have) if have else 'no column'}"
                )
    for index, spec in sorted(want["indexes"].items()):
        have = found["indexes"].get(index)
        if have is None:
            said.append(f"index {index} on {spec[0]}: missing")
        elif have != spec:
            said.append(f"index {index} on {spec[0]}: expected {spec[2]}, found {have[2]}")
    for index, spec in sorted(found["indexes"].items()):
        if index not in want["indexes"] and spec[1]:
            said.append(f"unique index {index} on {spec[0]}: not made by PocoLobby's schema steps")
    for key in sorted(want["foreign_keys"].keys() | found["foreign_keys"].keys()):
        expect_fk, have_fk = want["foreign_keys"].get(key), found["foreign_keys"].get(key)
        if expect_fk != have_fk:
            said.append(
                f"foreign key {key}: expected {f'-> {expect_fk}' if expect_fk else 'none'}, "
                f"found {f'-> {have_fk}' if have_fk else 'none'}"
            )
    for trigger in sorted(set(want["triggers"]) ^ set(found["triggers"])):
        state = "missing" if trigger in want["triggers"] else "not made by PocoLobby"
        said.append(f"trigger {trigger}: {state}")
    return said


# ---------------------------------------------------------------- writing the description


def _init(env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "pocolobby", "init"],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=300, check=True,
    )  # fmt: skip


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "POCOLOBBY_")) and k not in {"DATABASE_URL", "REDIS_URL"}
    }
    return {**env, "POCOLOBBY_ADMIN_TOKEN": "pla_shape", **extra}


def fresh_sqlite_shape() -> Shape:
    with tempfile.TemporaryDirectory(prefix="pocolobby-shape-") as raw:
        _init(_clean_env({"POCOLOBBY_DATA_DIR": raw}))
        conn = sqlite3.connect(Path(raw) / "pocolobby.sqlite3")
        try:
            return sqlite_shape(conn)
        finally:
            conn.close()


def fresh_postgres_shape(server: str) -> Shape:
    """`server`: postgresql://USER@HOST:PORT, allowed to create and drop a scratch database."""
    import psycopg  # local: only this command and the tests talk to PostgreSQL directly

    name = f"pocolobby_shape_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with tempfile.TemporaryDirectory(prefix="pocolobby-shape-") as raw:
            _init(_clean_env({"POCOLOBBY_DATA_DIR": raw, "DATABASE_URL": f"{server}/{name}"}))
        with psycopg.connect(f"{server}/{name}") as conn, conn.cursor() as cursor:
            return postgres_shape(cursor)
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def known_steps() -> list[str]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "pocolobby.settings")
    import django  # local: the command runs outside a configured Django

    django.setup()
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    return sorted(f"{app}.{name}" for app, name in loader.disk_migrations)


def main() -> None:
    parser = argparse.ArgumentParser(description="Write lobbies/storage/shape.json")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    args = parser.parse_args()
    data = {
        "steps": known_steps(),
        "sqlite": fresh_sqlite_shape(),
        "postgresql": fresh_postgres_shape(args.postgres),
    }
    DESCRIPTION.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {DESCRIPTION}")


if __name__ == "__main__":
    main()

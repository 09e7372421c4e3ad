"""`pocolobby backup` and the database side of `pocolobby restore` on PostgreSQL.

A backup is the directory pocolobby/backup.py describes, with `store.dump` (a `pg_dump
--format=custom` archive) in place of `store.sqlite3`. pg_dump runs on a snapshot this module
exports, and the manifest's figures (sequences per lobby, last message id) are read in that
same snapshot, so they describe exactly what the archive holds.

The tools: pg_dump refuses a server newer than itself, and pg_restore an archive newer than
itself, so each is looked for as the server's major version first (Debian and Ubuntu keep one
set per version under /usr/lib/postgresql/<major>/bin), then on PATH, and refused, saying
which version to install, when older than the server.

They connect with the broker's own settings passed in libpq's environment variables
(PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD and the SSL options), never on a command line
that `ps` would show; ~/.pgpass and PGPASSFILE work as for any libpq client.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lobbies.storage.discipline import APPLICATION_ID, IDENTITY_TABLE, RESTORE_PENDING_TABLE
from pocolobby import backup, store_lock
from pocolobby.backup import BackupFailed

# The store in pocolobby/backup.py's directory layout, on PostgreSQL.
DUMP = backup.BACKUP_DUMP
# Where `pocolobby restore` keeps the store as it was before it, under the backups directory.
PRE_RESTORE_PREFIX = "pocolobby-pre-restore-"
# libpq's environment variable for each connection option dj-database-url may put in OPTIONS.
_LIBPQ_OPTIONS = {
    "sslmode": "PGSSLMODE",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "connect_timeout": "PGCONNECT_TIMEOUT",
}
TOOL_TIMEOUT_SECONDS = 3600


def libpq_env(application: str) -> dict[str, str]:
    """This process's environment with the broker's connection settings for libpq."""
    from django.conf import settings  # local: Django is set up by the caller

    db = settings.DATABASES["default"]
    env = dict(os.environ)
    for name, value in (
        ("PGHOST", db.get("HOST")),
        ("PGPORT", db.get("PORT")),
        ("PGUSER", db.get("USER")),
        ("PGPASSWORD", db.get("PASSWORD")),
        ("PGDATABASE", db.get("NAME")),
    ):
        if value:
            env[name] = str(value)
    for option, variable in _LIBPQ_OPTIONS.items():
        if option in (db.get("OPTIONS") or {}):
            env[variable] = str(db["OPTIONS"][option])
    env["PGAPPNAME"] = application
    return env


def _major(version_line: str) -> int | None:
    # "pg_dump (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)": the first number after the name
    match = re.search(r"\)\s+(\d+)", version_line) or re.search(r"\b(\d+)\.", version_line)
    return int(match.group(1)) if match else None


def find_tool(name: str, server_major: int) -> str:
    """pg_dump or pg_restore of the server's major version or newer; BackupFailed if none."""
    candidates = [f"/usr/lib/postgresql/{server_major}/bin/{name}"]
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    seen = []
    for candidate in candidates:
        if not os.access(candidate, os.X_OK):
            continue
        try:
            answer = subprocess.run(
                [candidate, "--version"], capture_output=True, text=True, timeout=30, check=False
            ).stdout.strip()
        except OSError:
            continue
        major = _major(answer)
        if major is not None and major >= server_major:
            return candidate
        seen.append(f"{candidate} ({answer or 'no version'})")
    found = f"found only {', '.join(seen)}" if seen else f"no {name} found"
    raise BackupFailed(
        f"{name} {server_major} or newer is needed for this PostgreSQL {server_major} server; "
        f"{found}. Install the PostgreSQL {server_major} client tools (Debian, Ubuntu: "
        f"postgresql-client-{server_major}) or put their bin directory first on PATH"
    )


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "; ".join(lines[-3:]) or "no message"


def run_tool(
    command: list[str], application: str, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL client tool with the broker's connection; BackupFailed on failure."""
    try:
        result = subprocess.run(
            command,
            env=libpq_env(application),
            stdin=subprocess.DEVNULL,
            timeout=TOOL_TIMEOUT_SECONDS,
            check=False,
            **kwargs,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackupFailed(f"{Path(command[0]).name} failed: {exc}") from None
    if result.returncode != 0:
        stderr = result.stderr if isinstance(result.stderr, str) else ""
        raise BackupFailed(f"{Path(command[0]).name} failed: {_tail(stderr)}")
    return result


def connect(command: str) -> Any:
    """A psycopg session of its own, or BackupFailed saying why not."""
    import psycopg  # local: as in store_lock.pg_connect

    try:
        return store_lock.pg_connect(f"pocolobby {command} pid {os.getpid()}")
    except psycopg.OperationalError as exc:
        raise BackupFailed(f"cannot connect to PostgreSQL: {_tail(str(exc))}") from None


def server_major(session: Any) -> int:
    return int(session.info.server_version) // 10000


# ---------------------------------------------------------------- backup


def _contents(session: Any) -> dict[str, Any]:
    """What the store holds, read in the session's snapshot; BackupFailed if not ours."""
    import psycopg  # local: as in store_lock.pg_connect

    try:
        rows = session.execute("SELECT application_id FROM pocolobby_identity").fetchall()
        if [int(r[0]) for r in rows] != [APPLICATION_ID]:
            raise BackupFailed("the database is not a PocoLobby store (pocolobby_identity)")
        lobbies = {
            str(name): int(seq)
            for name, seq in session.execute(
                "SELECT name, message_sequence FROM lobbies_lobby ORDER BY name"
            ).fetchall()
        }
        last_id, count = session.execute("SELECT MAX(id), COUNT(*) FROM lobbies_message").fetchone()
    except psycopg.errors.UndefinedTable:
        raise BackupFailed(
            "the database is not an initialised PocoLobby store (run `pocolobby init`)"
        ) from None
    return {"lobbies": lobbies, "last_message_id": int(last_id or 0), "messages": int(count)}


def take_backup(
    data_dir: Path, destination: Path, keep: int | None, *, prefix: str = backup.PREFIX
) -> backup.BackupReport:
    """pg_dump the store (and copy the attachments) into `destination`, checked, then rotate."""
    import psycopg  # local: as in store_lock.pg_connect

    session = connect("backup")
    name = prefix + backup._stamp()
    final = destination / name
    began = time.monotonic()
    try:
        destination.mkdir(mode=0o700, parents=True, exist_ok=True)
        leftovers = backup.remove_leftovers(destination)
        with backup.working_folder(destination, name) as temp:
            manifest, files, held = _dump(session, data_dir, temp, final)
    except (psycopg.Error, OSError) as exc:
        raise BackupFailed(f"backup failed: {_tail(str(exc))}") from None
    finally:
        session.close()
    return backup.finished(
        final,
        destination,
        keep,
        manifest,
        files,
        began,
        held,
        check="pg_restore --list ok",
        leftovers=leftovers,
    )


def _dump(
    session: Any, data_dir: Path, temp: Path, final: Path
) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """pg_dump under one snapshot, the attachments, the archive read back and the manifest,
    sealed as `final`."""
    pg_dump = find_tool("pg_dump", server_major(session))
    pg_restore = find_tool("pg_restore", server_major(session))
    # One snapshot for pg_dump and for the figures the manifest records.
    session.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    snapshot = session.execute("SELECT pg_export_snapshot()").fetchone()[0]
    held = _contents(session)
    store = temp / DUMP
    with open(store, "xb", opener=backup._private_opener) as out:
        run_tool(
            [
                pg_dump,
                "--format=custom",
                "--no-password",
                f"--snapshot={snapshot}",
                f"--exclude-table={RESTORE_PENDING_TABLE}",
            ],
            "pocolobby backup (pg_dump)",
            stdout=out,
            stderr=subprocess.PIPE,
            text=False,
        )
    session.execute("COMMIT")
    files = backup.copy_attachments(data_dir, temp)
    entries = archive_tables(pg_restore, store)  # the archive reads back whole
    if "lobbies_message" not in entries:
        raise BackupFailed("the archive pg_dump wrote holds no lobbies_message table")
    manifest = {
        "format": "pocolobby-backup",
        "store": "postgresql",
        "store_format": backup.FORMAT_VERSION,
        "taken_at": backup.now_iso(),
        "server_version": session.info.server_version,
        "store_bytes": store.stat().st_size,
        "attachment_files": files,
        "lobbies": held["lobbies"],
        "last_message_id": held["last_message_id"],
        "messages": held["messages"],
        "archive_check": "pg_restore --list ok",
    }
    backup.seal(temp, final, manifest)
    return manifest, files, held


# ---------------------------------------------------------------- reading an archive

# A table's entry in `pg_restore --list`: "ID; CATALOG OID TABLE SCHEMA NAME OWNER".
_TABLE_ENTRY = re.compile(r"^\d+; \d+ \d+ TABLE (\S+) (\S+) ")


def archive_list(pg_restore: str, archive: Path) -> str:
    """The archive's table of contents (`pg_restore --list`); BackupFailed if unreadable."""
    result = run_tool(
        [pg_restore, "--list", str(archive)],
        "pocolobby restore (pg_restore --list)",
        capture_output=True,
        text=True,
    )
    return result.stdout


def archive_tables(pg_restore: str, archive: Path) -> set[str]:
    tables = set()
    for line in archive_list(pg_restore, archive).splitlines():
        match = _TABLE_ENTRY.match(line)
        if match and match.group(1) == "public":
            tables.add(match.group(2))
    return tables


def _unescape(field: str) -> str | None:
    """One field of COPY's text format."""
    if field == "\\N":
        return None
    escapes = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), field)


def archive_rows(pg_restore: str, archive: Path, tables: list[str]) -> dict[str, list[dict]]:
    """The rows of `tables` as the archive holds them (columns by name), without a database:
    `pg_restore --data-only --table=...` writes their COPY blocks as text."""
    command = [pg_restore, "--data-only", "--file=-"] + [f"--table={t}" for t in tables]
    script = run_tool(
        [*command, str(archive)],
        "pocolobby restore (pg_restore --data-only)",
        capture_output=True,
        text=True,
    ).stdout
    rows: dict[str, list[dict]] = {table: [] for table in tables}
    current: tuple[str, list[str]] | None = None
    for line in script.splitlines():
        header = re.match(r"^COPY (?:\S+\.)?(\S+) \((.*)\) FROM stdin;$", line)
        if header:
            current = (
                header.group(1).strip('"'),
                [c.strip().strip('"') for c in header.group(2).split(",")],
            )
            rows.setdefault(current[0], [])
        elif line == "\\.":
            current = None
        elif current is not None:
            values = [_unescape(field) for field in line.split("\t")]
            rows[current[0]].append(dict(zip(current[1], values, strict=False)))
    return rows


@dataclass(frozen=True)
class Archive:
    """What a pg_dump archive holds that the store's rules read."""

    tables: set[str]
    identity: list[tuple[int, int]]
    applied: set[tuple[str, str]]


def read_archive(pg_restore: str, archive: Path) -> Archive:
    tables = archive_tables(pg_restore, archive) - {RESTORE_PENDING_TABLE}
    wanted = [t for t in (IDENTITY_TABLE, "django_migrations") if t in tables]
    rows = archive_rows(pg_restore, archive, wanted) if wanted else {}
    try:
        identity = [
            (int(r["application_id"] or 0), int(r["format_version"] or 0))
            for r in rows.get(IDENTITY_TABLE, [])
        ]
    except (KeyError, ValueError):
        identity = [(0, 0)]
    applied = {(str(r.get("app")), str(r.get("name"))) for r in rows.get("django_migrations", [])}
    return Archive(tables, identity, applied)


# ---------------------------------------------------------------- restoring an archive


def restore_archive(pg_restore: str, archive: Path, database: str) -> None:
    """pg_restore the archive over the store in one transaction: all of it, or nothing.

    --clean --if-exists drops each object the archive holds before making it again; objects
    it does not hold are left (the caller refuses a store with tables the archive lacks).
    --no-owner --no-acl: the objects belong to the broker's own role, whoever dumped them.
    The restore's own marker table is left out, whatever the archive holds.
    """
    listing = archive_list(pg_restore, archive)
    kept = "".join(
        line + "\n" for line in listing.splitlines() if RESTORE_PENDING_TABLE not in line
    )
    fd, list_path = tempfile.mkstemp(prefix="pocolobby-restore-", suffix=".list")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(kept)
        run_tool(
            [
                pg_restore,
                "--clean",
                "--if-exists",
                "--single-transaction",
                "--exit-on-error",
                "--no-owner",
                "--no-acl",
                "--no-password",
                f"--use-list={list_path}",
                f"--dbname={database}",
                str(archive),
            ],
            "pocolobby restore (pg_restore)",
            capture_output=True,
            text=True,
        )
    finally:
        with contextlib.suppress(OSError):
            os.unlink(list_path)

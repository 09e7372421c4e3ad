"""Storage discipline: a store's identity is checked before any write.

A SQLite file is opened only if it is ours (PRAGMA application_id) at a schema this release
knows. A file of another identity, with tables but no identity, or from a newer release is
refused with a message naming which, and is left byte-for-byte unchanged: the diagnosis reads
it through a read-only connection. An empty file is initialised in one transaction.

A store at this release's last schema step must also have the shape those steps make
(lobbies/storage/shape.py: tables, column types, NOT NULLs, indexes, foreign keys, triggers);
one that differs is refused naming each difference, and an upgraded store is compared inside
the upgrade's transaction, which rolls back when it differs.

A PostgreSQL database carries the same identity as one row of the table `pocolobby_identity`
(a table, not a COMMENT, so pg_dump and pg_restore carry it) and is refused on the same
grounds, read in a transaction that writes nothing.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from lobbies.storage import shape

# "PoLb": stamped into every database file this broker creates.
APPLICATION_ID = 0x506F4C62
# The file format family; a newer release that changes it is refused by this one.
FORMAT_VERSION = 1


class IncompatibleStore(Exception):
    """The selected file is not one this release may open. Nothing was written to it."""


# The PostgreSQL identity: made beside the schema steps, never by one (see the module doc).
IDENTITY_TABLE = "pocolobby_identity"
# Made by `pocolobby restore` on PostgreSQL before pg_restore replaces the store, dropped in
# the transaction that puts the restored store into restore mode; never in a backup. While it
# exists, the store is refused (pocolobby/restore.py).
RESTORE_PENDING_TABLE = "pocolobby_restore_pending"


@dataclass(frozen=True)
class Diagnosis:
    state: str  # "new" (absent or empty: initialise) or "ours"
    unapplied: tuple[str, ...] = ()
    # A PostgreSQL store made before the identity row existed: stamped at its next upgrade.
    unstamped: bool = False

    @property
    def needs_writing(self) -> bool:
        return self.state == "new" or bool(self.unapplied) or self.unstamped


def _known_migrations() -> set[tuple[str, str]]:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return set(loader.disk_migrations)


def diagnose(path: Path) -> Diagnosis:
    """Decide, without writing, whether `path` may be opened, initialised or upgraded."""
    if not path.exists() or path.stat().st_size == 0:
        return Diagnosis("new")
    try:
        with path.open("rb") as handle:
            header = handle.read(100)
    except OSError as exc:
        raise IncompatibleStore(f"{path}: cannot be read ({exc.strerror})") from None
    if not header.startswith(b"SQLite format 3\x00"):
        raise IncompatibleStore(f"{path} is not a SQLite database; refusing to touch it")
    # A read-only look at a file in WAL mode still makes its -wal and -shm; take back the
    # ones this look made, so a refused file's directory is left as it was.
    companions = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
    made = [companion for companion in companions if not companion.exists()]
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise IncompatibleStore(f"{path}: cannot be opened read-only ({exc})") from None
    try:
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
        user_version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        applied: set[tuple[str, str]] = set()
        if "django_migrations" in tables:
            applied = {tuple(r) for r in conn.execute("SELECT app, name FROM django_migrations")}
        found = shape.sqlite_shape(conn) if application_id == APPLICATION_ID else None
    except sqlite3.Error as exc:
        raise IncompatibleStore(f"{path}: cannot be read as a database ({exc})") from None
    finally:
        conn.close()
        for companion in made:
            companion.unlink(missing_ok=True)

    if application_id == 0:
        if tables:
            raise IncompatibleStore(
                f"{path} holds tables ({', '.join(sorted(tables)[:5])}) but no PocoLobby identity "
                "(application_id 0); it belongs to something else, refusing to touch it"
            )
        return Diagnosis("new")
    if application_id != APPLICATION_ID:
        raise IncompatibleStore(
            f"{path} belongs to another application (application_id {application_id:#x}, "
            f"PocoLobby is {APPLICATION_ID:#x}); refusing to touch it"
        )
    if user_version > FORMAT_VERSION:
        raise IncompatibleStore(
            f"{path} was written by a newer PocoLobby (format {user_version}; this release "
            f"knows format {FORMAT_VERSION}); upgrade PocoLobby to open it"
        )
    known = _refuse_unknown_steps(str(path), applied)
    missing = tuple(sorted(f"{app}.{name}" for app, name in known - applied))
    if not missing and found is not None:
        # At this release's last step: the whole shape, compared with what the steps make.
        refuse_other_shape(str(path), "sqlite", found, known)
        return Diagnosis("ours")
    # Before an upgrade: the parts the recorded steps make must be there (the whole shape is
    # compared after the upgrade, inside its transaction).
    lacking = _missing_parts(path, applied)
    if lacking:
        raise IncompatibleStore(
            f"{path} has PocoLobby's identity but not the shape its recorded schema steps "
            f"make: missing {', '.join(lacking[:5])}"
            f"{f' and {len(lacking) - 5} more' if len(lacking) > 5 else ''}; refusing to touch it"
        )
    return Diagnosis("ours", unapplied=missing)


def refuse_other_shape(
    store: str, vendor: str, found: shape.Shape, known: set[tuple[str, str]]
) -> None:
    """IncompatibleStore naming each difference between the store's shape and the one this
    release's schema steps make (lobbies/storage/shape.json), when the store has them all."""
    if shape.described_steps() != sorted(f"{app}.{name}" for app, name in known):
        return  # a description of other steps: tests/lobbies/test_store_shape.py fails on it
    want = shape.expected(vendor)
    said = shape.differences(want, found) if want is not None else []
    if said:
        more = f"; and {len(said) - 5} more" if len(said) > 5 else ""
        raise IncompatibleStore(
            f"{store} has PocoLobby's identity but not the shape this release's schema steps "
            f"make: {'; '.join(said[:5])}{more}. Refusing to touch it"
        )


def _refuse_unknown_steps(store: str, applied: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The schema steps this release knows; IncompatibleStore if the store has others."""
    known = _known_migrations()
    unknown = sorted(f"{app}.{name}" for app, name in applied - known)
    if unknown:
        raise IncompatibleStore(
            f"{store} was written by a newer PocoLobby (schema steps this release does not "
            f"know: {', '.join(unknown[:5])}); upgrade PocoLobby to open it"
        )
    return known


def diagnose_postgres(*, restoring: bool = False) -> Diagnosis:
    """Decide, without writing, whether the configured PostgreSQL database may be opened,
    initialised or upgraded (the SQLite rules, read from the identity row). A database a
    restore did not finish is refused too, except by the restore itself (`restoring`)."""
    store = f"the PostgreSQL database {connection.settings_dict['NAME']}"
    with transaction.atomic(), connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
        identity: list[tuple[int, int]] = []
        if IDENTITY_TABLE in tables:
            cursor.execute("SELECT application_id, format_version FROM pocolobby_identity")
            identity = [(int(a), int(f)) for a, f in cursor.fetchall()]
        applied: set[tuple[str, str]] = set()
        if "django_migrations" in tables:
            cursor.execute("SELECT app, name FROM django_migrations")
            applied = {(str(app), str(name)) for app, name in cursor.fetchall()}
        found = shape.postgres_shape(cursor, skip=frozenset({RESTORE_PENDING_TABLE}))
        pending: list[tuple[str, str, str]] = []
        if RESTORE_PENDING_TABLE in tables and not restoring:
            cursor.execute(
                "SELECT source, pre_restore, began_at::text FROM pocolobby_restore_pending"
            )
            pending = [(str(s), str(p), str(b)) for s, p, b in cursor.fetchall()]
    if RESTORE_PENDING_TABLE in tables and not restoring:
        source, before, began = pending[0] if pending else ("the backup", "", "?")
        raise IncompatibleStore(
            f"a restore into {store} from {source} (begun {began}) did not finish, so the "
            f"store may be the restored one without its restore mode; run `pocolobby restore "
            f"{source}` again"
            + (f" (the store as it was before that restore is in {before})" if before else "")
        )
    diagnosis = judge_postgres(store, tables - {RESTORE_PENDING_TABLE}, identity, applied)
    if not diagnosis.needs_writing:
        refuse_other_shape(store, "postgresql", found, applied)
    return diagnosis


def judge_postgres(
    store: str,
    tables: set[str],
    identity: list[tuple[int, int]],
    applied: set[tuple[str, str]],
) -> Diagnosis:
    """The PostgreSQL rules, from what a database (or a pg_dump archive of one) holds: its
    tables, the identity table's rows and the schema steps recorded."""
    if not identity and not tables:
        return Diagnosis("new")
    if not identity:
        # Stores this broker made before the identity row: ours if its schema steps say so.
        if not any(app == "lobbies" for app, _ in applied):
            raise IncompatibleStore(
                f"{store} holds tables ({', '.join(sorted(tables)[:5])}) but no PocoLobby "
                "identity; it belongs to something else, refusing to touch it"
            )
    elif len(identity) != 1 or identity[0][0] != APPLICATION_ID:
        raise IncompatibleStore(
            f"{store} belongs to another application ({IDENTITY_TABLE} holds "
            f"{', '.join(f'{a:#x}' for a, _ in identity) or 'no row'}, PocoLobby is "
            f"{APPLICATION_ID:#x}); refusing to touch it"
        )
    elif identity[0][1] > FORMAT_VERSION:
        raise IncompatibleStore(
            f"{store} was written by a newer PocoLobby (format {identity[0][1]}; this release "
            f"knows format {FORMAT_VERSION}); upgrade PocoLobby to open it"
        )
    known = _refuse_unknown_steps(store, applied)
    missing = tuple(sorted(f"{app}.{name}" for app, name in known - applied))
    return Diagnosis("ours", unapplied=missing, unstamped=not identity)


def diagnose_configured() -> Diagnosis:
    """The configured store's diagnosis, whichever database it is."""
    if connection.vendor == "postgresql":
        return diagnose_postgres()
    return diagnose(Path(connection.settings_dict["NAME"]))


def _expected_shape(applied: set[tuple[str, str]]) -> dict[str, tuple[list[str], list[str]]]:
    """table -> (columns, index and constraint names) as the applied schema steps made them."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    state = loader.project_state([node for node in applied if node in loader.graph.nodes])
    namer = connection.schema_editor()  # only its index-naming rule; nothing is executed
    shape: dict[str, tuple[list[str], list[str]]] = {}
    for model in state.apps.get_models(include_auto_created=True):
        meta = model._meta
        if not meta.managed or meta.proxy:
            continue
        fields = [f for f in meta.local_concrete_fields if f.column]
        columns = [str(f.column) for f in fields]
        names = [str(i.name) for i in meta.indexes] + [str(c.name) for c in meta.constraints]
        names += [
            # Django's private naming rule (absent from the stubs), the one migrations use.
            str(namer._create_index_name(meta.db_table, [f.column], suffix=""))  # type: ignore[attr-defined]
            for f in fields
            # db_index is absent from the stubs' Field; every concrete field has it.
            if getattr(f, "db_index", False) and not f.unique and not f.primary_key
        ]
        shape[meta.db_table] = (columns, names)
    return shape


def _missing_parts(path: Path, applied: set[tuple[str, str]]) -> list[str]:
    """Required tables, columns, indexes and constraints the file lacks; extra ones are fine."""
    expected = _expected_shape(applied)
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        schema = {
            name: (kind, sql or "")
            for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master")
        }
        lacking = []
        for table, (columns, names) in sorted(expected.items()):
            if schema.get(table, ("",))[0] != "table":
                lacking.append(f"table {table}")
                continue
            present = {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}
            lacking += [f"column {table}.{c}" for c in columns if c not in present]
            table_sql = schema[table][1]
            lacking += [
                f"index {name} on {table}"
                for name in names
                if schema.get(name, ("",))[0] != "index" and f'"{name}"' not in table_sql
            ]
        return lacking
    except sqlite3.Error as exc:
        raise IncompatibleStore(f"{path}: cannot be read as a database ({exc})") from None
    finally:
        conn.close()


def _migrate_in_one_transaction(stamp: bool) -> None:
    """Apply every unapplied migration (and the identity stamp) in one SQLite transaction."""
    # SQLite cannot switch foreign keys off inside a transaction, and the schema editor needs
    # them off; so switch them off first, and back on (with a check) after the commit.
    connection.ensure_connection()
    connection.disable_constraint_checking()
    try:
        with transaction.atomic():
            executor = MigrationExecutor(connection)
            targets = executor.loader.graph.leaf_nodes()
            executor.migrate(targets)
            if stamp:
                with connection.cursor() as cursor:
                    cursor.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    cursor.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
            connection.check_constraints()
            # A store that differs is refused: this transaction rolls back.
            raw = connection.connection
            assert raw is not None  # ensure_connection() above
            found = shape.sqlite_shape(raw)
            known = set(executor.loader.disk_migrations)
            refuse_other_shape(str(connection.settings_dict["NAME"]), "sqlite", found, known)
    finally:
        connection.enable_constraint_checking()


def _prepare_postgres(diagnosis: Diagnosis) -> str:
    """Initialise or upgrade a PostgreSQL store, identity row included, in one transaction."""
    store = f"the PostgreSQL database {connection.settings_dict['NAME']}"
    if not diagnosis.needs_writing:
        return f"opened {store}"
    with transaction.atomic():
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        if diagnosis.state == "new" or diagnosis.unstamped:
            with connection.cursor() as cursor:
                cursor.execute(
                    "CREATE TABLE pocolobby_identity "
                    "(application_id bigint NOT NULL, format_version integer NOT NULL)"
                )
                cursor.execute(
                    "INSERT INTO pocolobby_identity VALUES (%s, %s)",
                    [APPLICATION_ID, FORMAT_VERSION],
                )
        # A store that differs is refused: this transaction rolls back.
        with connection.cursor() as cursor:
            found = shape.postgres_shape(cursor, skip=frozenset({RESTORE_PENDING_TABLE}))
        refuse_other_shape(store, "postgresql", found, set(executor.loader.disk_migrations))
    if diagnosis.state == "new":
        return f"initialised {store}"
    return f"upgraded {store} ({len(diagnosis.unapplied)} schema steps)"


def prepare_store(*, restoring: bool = False) -> str:
    """Check, then initialise or upgrade, the configured database. Returns what was done.
    `restoring`: the restore itself, on PostgreSQL, before it finishes (diagnose_postgres)."""
    if connection.vendor == "postgresql":
        return _prepare_postgres(diagnose_postgres(restoring=restoring))
    if connection.vendor != "sqlite":
        raise IncompatibleStore(
            f"PocoLobby stores live in SQLite or PostgreSQL, not {connection.vendor}"
        )
    path = Path(connection.settings_dict["NAME"])
    diagnosis = diagnose(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if diagnosis.state == "new":
        _migrate_in_one_transaction(stamp=True)
        return f"initialised {path}"
    if diagnosis.unapplied:
        _migrate_in_one_transaction(stamp=False)
        return f"upgraded {path} ({len(diagnosis.unapplied)} schema steps)"
    return f"opened {path}"

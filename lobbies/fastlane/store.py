"""Statements of the send path, written once as SQL.

The ORM compiles every query on every call, and on the send path that compilation cost more
than the database work itself (profiled: ~10 statements, each cheaper to run than to build).
These helpers keep the ORM's field adaptation (datetimes, JSON) and its model instances, and
skip only the query compiler. Both SQLite and PostgreSQL take this SQL.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX
from django.db.models.base import ModelState
from django.db.models.expressions import Col
from django.db.models.signals import post_init, pre_init

if TYPE_CHECKING:
    from django.db.backends.utils import _SQLType as SqlValue

M = TypeVar("M", bound=models.Model)

# What a hand-written statement binds: values the driver adapts (Django's adaptation, where a
# field needs one, has run first: `as_db_time`, `_prepared`); django-stubs' own list of them.
Params: TypeAlias = "Sequence[SqlValue]"
# A row as the driver returns it: its columns' types are the statement's, known to its caller.
Row = tuple[Any, ...]
# A model field of any value type (django-stubs' two type parameters: set and get).
Field: TypeAlias = "models.Field[Any, Any]"  # not subscriptable at run time
# A column the ORM converts when it reads one: (position, column, converters, stored as UTC).
Converter = tuple[int, Col, list[Callable[..., object]], bool]
# A column an INSERT writes: (field, attribute, types that need no adaptation, "datetime"/"json").
Written: TypeAlias = "tuple[Field, str, tuple[type, ...], str]"


class Cursor(Protocol):
    """The DB-API cursor both drivers (and Django's wrapper) hand back."""

    @property
    def lastrowid(self) -> int | None: ...
    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Row | None: ...
    def fetchall(self) -> list[Row]: ...


@functools.lru_cache(maxsize=512)
def _qmark(sql: str) -> str:
    """`%s` placeholders as SQLite's `?`, exactly as Django's SQLite cursor converts them."""
    return FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%")


@functools.cache
def embedded() -> bool:
    """Whether the store is the embedded SQLite one, for code on the event loop.

    There `connection` is per task: each request's `connection.vendor` built a new
    DatabaseWrapper, a large share of the loop's time in a send (docs/PERFORMANCE.md, "Figures
    from code comments")."""
    return bool(connections[DEFAULT_DB_ALIAS].vendor == "sqlite")


def _db() -> BaseDatabaseWrapper:
    """This thread's connection, looked up once per call: each `connection.x` is a lookup
    through asgiref's thread-local, and a send made dozens of them (docs/PERFORMANCE.md,
    "Figures from code comments")."""
    return connections[DEFAULT_DB_ALIAS]


def _one_row(sql: str, params: Params, db: BaseDatabaseWrapper | None = None) -> Row | None:
    """The first row a statement returns (None: no row)."""
    return _run(sql, params, db or _db(), _fetch_one)


def _all_rows(sql: str, params: Params, db: BaseDatabaseWrapper | None = None) -> list[Row]:
    """Every row a statement returns, as the driver returns them."""
    return _run(sql, params, db or _db(), _fetch_all)


def _rowcount(sql: str, params: Params, db: BaseDatabaseWrapper | None = None) -> int:
    """The number of rows a write touched."""
    return _run(sql, params, db or _db(), _fetch_rowcount)


def _new_key(sql: str, params: Params, db: BaseDatabaseWrapper) -> int | None:
    """The key of the row an INSERT made: the connection's last rowid (SQLite's answer)."""
    return _run(sql, params, db, _fetch_lastrowid)


def _fetch_one(cursor: Cursor) -> Row | None:
    return cursor.fetchone()


def _fetch_all(cursor: Cursor) -> list[Row]:
    return cursor.fetchall()


def _fetch_rowcount(cursor: Cursor) -> int:
    return cursor.rowcount


def _fetch_lastrowid(cursor: Cursor) -> int | None:
    return cursor.lastrowid


Read = TypeVar("Read")


def _run(sql: str, params: Params, db: BaseDatabaseWrapper, read: Callable[[Cursor], Read]) -> Read:
    """Run one statement on `db` and `read` its answer from the cursor.

    On an open SQLite connection with no query logging (DEBUG, CaptureQueriesContext) and no
    execute wrappers, the statement goes straight to the driver: Django's cursor wrapper
    cost more than SQLite took to run most of these (docs/PERFORMANCE.md, "Figures from code
    comments"). The same
    checks run first (thread, broken transaction) and errors are Django's either way.
    """
    raw = db.connection
    direct = raw is not None and db.vendor == "sqlite"
    if direct and not db.execute_wrappers and not db.queries_logged:
        db.validate_thread_sharing()
        db.validate_no_broken_transaction()
        with db.wrap_database_errors:
            cursor = raw.execute(_qmark(sql), params)
            try:
                return read(cursor)
            finally:
                cursor.close()
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        return read(cursor)


def marks(values: Collection[object]) -> str:
    """`%s, %s, ...`: one placeholder per value, for `IN (...)` lists of hand-written SQL."""
    return ", ".join(["%s"] * len(values))


@functools.cache
def _reader(model: type[models.Model], vendor: str) -> tuple[str, list[str], list[Converter]]:
    """The column list, attribute names and per-column converters the ORM would apply.

    Converters are listed as (position, column, functions, utc) for the columns that have
    any, so reading a row touches only those; `utc` marks a SQLite datetime column, which
    `_convert` reads as `time_reader` does.
    """
    fields = model._meta.concrete_fields
    columns = ", ".join(f't."{f.column}"' for f in fields)
    converters: list[Converter] = []
    for position, field in enumerate(fields):
        column = field.get_col(model._meta.db_table)
        found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if found:
            utc = vendor == "sqlite" and _is_datetime(field) and len(found) == 1
            converters.append((position, column, found, utc))
    return columns, [f.attname for f in fields], converters


def _convert(row: Row, converters: list[Converter], db: BaseDatabaseWrapper) -> list[Any]:
    values = list(row)
    utc = db.timezone is UTC  # as time_reader: SQLite's times are stored in UTC
    for position, column, functions, as_utc in converters:
        value = values[position]
        if as_utc and utc:
            values[position] = _utc(value)
            continue
        for convert in functions:
            value = convert(value, column, db)
        values[position] = value
    return values


def _instance(model: type[M], attnames: list[str], values: list[object], alias: str) -> M:
    """A model instance of a full row, as `Model.from_db` builds it.

    `Model.__init__` sets each field through its descriptor and sends pre_init and
    post_init; with no receiver for either (none of our models has one) the instance is the
    same with its attributes set at once, in much less time (docs/PERFORMANCE.md, "Figures from
    code comments").
    """
    if (pre_init.receivers or post_init.receivers) and (
        pre_init.has_listeners(model) or post_init.has_listeners(model)
    ):
        return model.from_db(alias, attnames, values)
    instance = model.__new__(model)
    state = instance._state = ModelState()
    state.adding = False
    state.db = alias
    instance.__dict__.update(zip(attnames, values, strict=True))
    return instance


def select_all(
    model: type[M],
    where: str,
    params: Params,
    *,
    join: str = "",
    tail: str = "",
) -> list[M]:
    """Every row of `model` matching `where` (its table aliased `t`), as model instances."""
    db = _db()
    columns, attnames, converters = _reader(model, db.vendor)
    found = _all_rows(
        f'SELECT {columns} FROM "{model._meta.db_table}" t {join} WHERE {where} {tail}',  # noqa: S608
        params,
        db,
    )
    return [_instance(model, attnames, _convert(row, converters, db), db.alias) for row in found]


def execute(sql: str, params: Params) -> int:
    """A hand-written write; returns the number of rows it touched."""
    return _rowcount(sql, params)


@functools.lru_cache(maxsize=256)
def _select_sql(
    model: type[models.Model],
    vendor: str,
    where: str,
    join: str,
    annotations: tuple[tuple[str, str], ...],
    for_update: bool,
) -> str:
    columns, _, _ = _reader(model, vendor)
    extra = [f"{expression} AS {alias}" for alias, expression in annotations]
    listed = ", ".join([columns, *extra])
    return (
        f'SELECT {listed} FROM "{model._meta.db_table}" t {join} '  # noqa: S608
        f"WHERE {where} LIMIT 1"
        + (" FOR UPDATE OF t" if for_update and vendor == "postgresql" else "")
    )


def select(
    model: type[M],
    where: str,
    params: Params,
    *,
    join: str = "",
    annotations: dict[str, str] | None = None,
    for_update: bool = False,
) -> M | None:
    """The first row of `model` matching `where` (SQL on its own table, aliased `t`).

    `annotations` adds `alias: SQL expression` columns, set as plain attributes.
    `for_update` locks the row on PostgreSQL; SQLite's write transaction already does.
    """
    db = _db()
    _, attnames, converters = _reader(model, db.vendor)
    extra = tuple((annotations or {}).items())
    sql = _select_sql(model, db.vendor, where, join, extra, for_update)
    row = _one_row(sql, params, db)
    if row is None:
        return None
    count = len(attnames)
    instance = _instance(model, attnames, _convert(row[:count], converters, db), db.alias)
    for (alias, _), value in zip(extra, row[count:], strict=True):
        setattr(instance, alias, value)
    return instance


# Field classes whose adaptation leaves a value of these exact types unchanged: a plain str
# (or None) for text, an int (or None) for integers and keys, a bool for booleans (None too
# where the column is nullable), None for datetimes. Any other value, and every other field
# class (JSON, subclasses), goes through get_db_prep_save.
_NONE = type(None)
_PASSTHROUGH: dict[type[Field], tuple[type, ...]] = {
    models.CharField: (str, _NONE),
    models.TextField: (str, _NONE),
    models.IntegerField: (int, _NONE),
    models.BigIntegerField: (int, _NONE),
    models.PositiveIntegerField: (int, _NONE),
    models.PositiveSmallIntegerField: (int, _NONE),
    models.BigAutoField: (int, _NONE),
    models.ForeignKey: (int, _NONE),
}


def _plain_types(field: Field) -> tuple[type, ...]:
    if type(field) is models.BooleanField:
        return (bool, _NONE) if field.null else (bool,)
    if type(field) is models.DateTimeField:
        return (_NONE,)  # None stays None; aware datetimes are adapted below
    return _PASSTHROUGH.get(type(field), ())


def _kind(field: Field, vendor: str) -> str:
    """ "datetime" or "json" for the fields `_prepared` adapts itself, else "". (JSON only
    on SQLite, which takes the text; psycopg is handed its own Jsonb wrapper.)"""
    if _is_datetime(field):
        return "datetime"
    if vendor == "sqlite" and type(field) is models.JSONField and field.encoder is None:
        return "json"
    return ""


def _is_datetime(field: Field) -> bool:
    """For an aware datetime, get_db_prep_save of this field is the backend's adaptation."""
    return type(field) is models.DateTimeField


@functools.lru_cache(maxsize=256)
def _writer(
    model: type[models.Model], vendor: str, names: tuple[str, ...]
) -> tuple[str, list[Written], list[str]]:
    """For an INSERT of `names` (and defaults for the rest): its SQL, the fields in column
    order with the types that need no adaptation, and every concrete field's attribute name
    in model order."""
    written = [
        f
        for f in model._meta.concrete_fields
        if not f.primary_key or f.attname in names  # a key the database does not generate
    ]
    unknown = set(names) - {f.attname for f in written}
    if unknown:
        raise TypeError(f"{model.__name__} has no fields {sorted(unknown)}")
    columns = ", ".join(f'"{f.column}"' for f in written)
    placeholders = marks(written)
    pk = model._meta.pk
    sql = f'INSERT INTO "{model._meta.db_table}" ({columns}) VALUES ({placeholders})'  # noqa: S608
    if vendor != "sqlite" and pk.attname not in names:
        # SQLite answers a generated key as the connection's last rowid (`_new_key`):
        # RETURNING there buffers its rows in an ephemeral table opened and closed per
        # statement (docs/PERFORMANCE.md, "Figures from code comments").
        sql += f' RETURNING "{pk.column}"'
    plan: list[Written] = [(f, f.attname, _plain_types(f), _kind(f, vendor)) for f in written]
    return sql, plan, [f.attname for f in model._meta.concrete_fields]


def _prepared(
    plan: list[Written],
    values: Mapping[str, object],
    full: dict[str, object],
    db: BaseDatabaseWrapper,
) -> list[SqlValue]:
    """A row's parameters in column order, each adapted as its field would; `full` gets
    every value written, defaults included."""
    prepared: list[SqlValue] = []
    for field, name, plain, kind in plan:
        value = values[name] if name in values else field.get_default()
        full[name] = value
        if type(value) in plain:
            # one of `plain` (str, int, bool, None); no cast(): a call a column on the send path
            prepared.append(value)  # type: ignore[arg-type]
        elif kind == "datetime" and type(value) is datetime and value.utcoffset() is not None:
            prepared.append(_db_time(value, db))
        elif kind == "json" and type(value) in (dict, list) and not value:
            prepared.append("{}" if type(value) is dict else "[]")  # json.dumps's own text
        else:
            prepared.append(field.get_db_prep_save(value, db))
    return prepared


def _db_time(moment: datetime, db: BaseDatabaseWrapper) -> str | None:
    """An aware datetime as the backend's adaptation stores it; a UTC one on SQLite (whose
    connection time zone is UTC here) directly, as the naive UTC text Django writes."""
    if db.vendor == "sqlite" and moment.tzinfo is UTC and db.timezone is UTC:
        # str() of the naive datetime; `replace(tzinfo=None)` parses keywords, slowly
        # (docs/PERFORMANCE.md, "Figures from code comments").
        return datetime.combine(moment.date(), moment.time()).isoformat(" ")
    return db.ops.adapt_datetimefield_value(moment)


def insert(model: type[M], values: Mapping[str, object]) -> M:
    """INSERT one row, adapting each value as its field would, and return the instance."""
    db = _db()
    sql, plan, attnames = _writer(model, db.vendor, tuple(values))
    full: dict[str, object] = {}
    prepared = _prepared(plan, values, full, db)
    pk = model._meta.pk.attname
    if pk in values:  # a key of the row's own (a UUID): nothing to read back
        _rowcount(sql, prepared, db)
    elif db.vendor == "sqlite":
        full[pk] = _new_key(sql, prepared, db)
    else:
        full[pk] = _returned(sql, prepared, db)[0]
    return _instance(model, attnames, [full[name] for name in attnames], db.alias)


# Rows per multi-row INSERT: well under SQLite's 32,766 parameters for any of our tables.
ROWS_PER_INSERT = 500


def insert_many(model: type[models.Model], rows: Sequence[Mapping[str, object]]) -> None:
    """INSERT rows that carry their own keys (every row the same columns), many per
    statement: a broadcast's notices, one statement instead of one per recipient."""
    if not rows:
        return
    db = _db()
    sql, plan, _ = _writer(model, db.vendor, tuple(rows[0]))
    head, _, group = sql.partition(" VALUES ")
    group = group.partition(" RETURNING ")[0]  # PostgreSQL's; a multi-row INSERT needs none
    for start in range(0, len(rows), ROWS_PER_INSERT):
        chunk = rows[start : start + ROWS_PER_INSERT]
        params = [value for row in chunk for value in _prepared(plan, row, {}, db)]
        _rowcount(f"{head} VALUES {', '.join([group] * len(chunk))}", params, db)


def scalar_row(sql: str, params: Params) -> Row:
    """The one row of a statement that always returns one (a SELECT of aggregates, an
    UPDATE ... RETURNING of a row known to exist)."""
    return _returned(sql, params, _db())


def _returned(sql: str, params: Params, db: BaseDatabaseWrapper) -> Row:
    row = _one_row(sql, params, db)
    if row is None:
        raise DatabaseError(f"a statement that returns one row returned none: {sql[:60]!r}")
    return tuple(row)


def as_db_time(moment: datetime | None) -> str | None:
    """A datetime as this backend stores it, for parameters of hand-written SQL."""
    db = _db()
    if type(moment) is datetime and moment.utcoffset() is not None:
        return _db_time(moment, db)
    return db.ops.adapt_datetimefield_value(moment)


def rows(sql: str, params: Params) -> list[Row]:
    """Every row of a hand-written SELECT, as the driver returns it (no conversion)."""
    return [tuple(row) for row in _all_rows(sql, params)]


def time_reader() -> Callable[[Any], datetime | None]:
    """How to read a datetime column of `rows` as the ORM returns it (aware); ask once a page.

    SQLite stores UTC (the connection's time zone is UTC here), read as naive datetimes where
    the column's declared type says so and as text otherwise; marking them UTC directly is
    much cheaper than the ORM's converter (docs/PERFORMANCE.md, "Figures from code comments"),
    which is kept for any other time zone.
    PostgreSQL's driver already returns aware datetimes.
    """
    if connection.vendor != "sqlite":
        return _as_is
    if connection.timezone is UTC:
        return _utc
    convert = getattr(connection.ops, "convert_datetimefield_value")  # noqa: B009 (SQLite's)
    return lambda value: None if value is None else convert(value, None, connection)


def _as_is(value: Any) -> Any:
    return value


def _utc(value: datetime | str | None) -> datetime | None:
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    # `moment.replace(tzinfo=UTC)`, without its keyword parsing (docs/PERFORMANCE.md, "Figures
    # from code comments").
    return datetime.combine(moment.date(), moment.time(), UTC)


def as_json(value: Any) -> Any:
    """A JSON column of `rows`: both backends hand Django the text (Django decodes it)."""
    if value == "{}":  # most messages' fields and addressees: skip the decoder
        return {}
    if value == "[]":
        return []
    return json.loads(value) if isinstance(value, str) else value

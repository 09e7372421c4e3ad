"""Statements of the send path, written once as SQL.

The ORM compiles every query on every call, and on the send path that compilation cost more
than the database work itself (profiled: ~10 statements, each cheaper to run than to build).
These helpers keep the ORM's field adaptation (datetimes, JSON) and its model instances, and
skip only the query compiler. Both SQLite and PostgreSQL take this SQL.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


@functools.cache
def _reader(model: type[models.Model], vendor: str) -> tuple[str, list[str], list[Any]]:
    """The column list, attribute names and per-column converters the ORM would apply."""
    fields = model._meta.concrete_fields
    columns = ", ".join(f't."{f.column}"' for f in fields)
    converters = []
    for field in fields:
        column = field.get_col(model._meta.db_table)
        found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        converters.append((column, found))
    return columns, [f.attname for f in fields], converters


def select_all(
    model: type[M],
    where: str,
    params: list[Any],
    *,
    join: str = "",
    tail: str = "",
) -> list[M]:
    """Every row of `model` matching `where` (its table aliased `t`), as model instances."""
    columns, attnames, converters = _reader(model, connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT {columns} FROM "{model._meta.db_table}" t {join} WHERE {where} {tail}',  # noqa: S608
            params,
        )
        rows = cursor.fetchall()
    instances = []
    for row in rows:
        values = []
        for value, (column, functions) in zip(row, converters, strict=True):
            for convert in functions:
                value = convert(value, column, connection)
            values.append(value)
        instances.append(model.from_db(connection.alias, attnames, values))
    return instances


def execute(sql: str, params: list[Any]) -> int:
    """A hand-written write; returns the number of rows it touched."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def select(
    model: type[M],
    where: str,
    params: list[Any],
    *,
    join: str = "",
    annotations: dict[str, str] | None = None,
    for_update: bool = False,
) -> M | None:
    """The first row of `model` matching `where` (SQL on its own table, aliased `t`).

    `annotations` adds `alias: SQL expression` columns, set as plain attributes.
    `for_update` locks the row on PostgreSQL; SQLite's write transaction already does.
    """
    columns, attnames, converters = _reader(model, connection.vendor)
    extra = list((annotations or {}).items())
    listed = ", ".join([columns] + [f"{expression} AS {alias}" for alias, expression in extra])
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT {listed} FROM "{model._meta.db_table}" t {join} '  # noqa: S608
            f"WHERE {where} LIMIT 1"
            + (" FOR UPDATE OF t" if for_update and connection.vendor == "postgresql" else ""),
            params,
        )
        row = cursor.fetchone()
    if row is None:
        return None
    values = []
    for value, (column, functions) in zip(row, converters, strict=False):
        for convert in functions:
            value = convert(value, column, connection)
        values.append(value)
    instance = model.from_db(connection.alias, attnames, values)
    for (alias, _), value in zip(extra, row[len(attnames) :], strict=True):
        setattr(instance, alias, value)
    return instance


def insert(model: type[M], values: dict[str, Any]) -> M:
    """INSERT one row, adapting each value as its field would, and return the instance."""
    fields = {
        f.attname: f
        for f in model._meta.concrete_fields
        if not f.primary_key or f.attname in values  # a key the database does not generate
    }
    unknown = set(values) - set(fields)
    if unknown:
        raise TypeError(f"{model.__name__} has no fields {sorted(unknown)}")
    values = {
        name: values[name] if name in values else f.get_default() for name, f in fields.items()
    }
    names = list(fields)
    prepared = [fields[name].get_db_prep_save(values[name], connection) for name in names]
    columns = ", ".join(f'"{fields[name].column}"' for name in names)
    marks = ", ".join(["%s"] * len(names))
    pk = model._meta.pk
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{model._meta.db_table}" ({columns}) VALUES ({marks}) '  # noqa: S608
            f'RETURNING "{pk.column}"',
            prepared,
        )
        key = cursor.fetchone()[0]
    instance = model(**values)
    setattr(instance, pk.attname, key)
    instance._state.adding = False
    return instance


def scalar_row(sql: str, params: list[Any]) -> tuple[Any, ...]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return tuple(cursor.fetchone())


def as_db_time(moment: Any) -> Any:
    """A datetime as this backend stores it, for parameters of hand-written SQL."""
    return connection.ops.adapt_datetimefield_value(moment)

"""Tables that follow the stream: the table the sink creates or evolves, and its DDL.

``create_table=True`` creates a missing table from the input's written columns (types by
:func:`column_type`, the inverse of the input check's rules in :mod:`._types`; the
``key_columns`` as primary key); ``evolve_schema=True`` adds the columns the input gained,
nullable. The sink never drops, renames or retypes a column, nor drops a constraint: a
difference only such a change resolves raises :class:`PostgresCode.SCHEMA_EVOLUTION` naming the
statement a person would run. ``order_by`` columns the table lacks only order the rows
(as without these options): they are never created.

Two steps, so that nothing changes before the input is checked and recovery has finished
the epochs in doubt (whose prepared transactions hold locks on the table):

1. :func:`planned_table` (the input check, every epoch, no DDL): the table as the sink's
   DDL will leave it; ``check_input`` checks the input against it and gives the layout;
2. :func:`apply_layout` (driver, after recovery, before the epoch's plan is logged): in one
   transaction under the sink's DDL lock, read the table again and create it or add the
   layout's missing columns (``IF NOT EXISTS``: concurrent sinks and replays are
   harmless), commit, then check that the table holds the layout's columns with their
   types (else :class:`PostgresCode.TABLE_CHANGED`: someone else's DDL came in between). An ALTER
   that prepared work of the sink would block (a failed epoch the same sink object has
   not finished yet) is refused at once (:class:`PostgresCode.EVOLUTION_BLOCKED`).

The layout's digest is part of the epoch plan's fingerprint (``PostgresResource``), so a
replay of an epoch in doubt is checked to write the same columns (docs/postgres-sink.md,
"Tables that follow the stream").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

import pyarrow as pa
from psycopg import sql

from connectors.postgres._config import MAX_IDENTIFIER_BYTES, PostgresSinkConfig
from connectors.postgres._connect import Conn
from connectors.postgres._control import DDL_LOCK_KEY, qualified
from connectors.postgres._errors import PostgresCode, PostgresSinkError
from connectors.postgres._schema import (
    ColumnInfo,
    TableInfo,
    TableLayout,
    describe_table,
    find_table,
    table_not_found,
)
from connectors.postgres._twophase import list_prepared
from connectors.postgres._types import check_column_type, spark_name
from connectors.stage import StageCode

log = logging.getLogger("connectors.postgres")

# (Arrow type test, column type as format_type() spells it, its pg_type name), first match.
_TYPES: tuple[tuple[Callable[[pa.DataType], bool], str, str], ...] = (
    (pa.types.is_boolean, "boolean", "bool"),
    (lambda t: t in (pa.int8(), pa.int16(), pa.uint8()), "smallint", "int2"),
    (lambda t: t in (pa.int32(), pa.uint16()), "integer", "int4"),
    (lambda t: t in (pa.int64(), pa.uint32()), "bigint", "int8"),
    (lambda t: t == pa.uint64(), "numeric(20,0)", "numeric"),
    (lambda t: t in (pa.float16(), pa.float32()), "real", "float4"),
    (pa.types.is_float64, "double precision", "float8"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "text", "text"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "bytea", "bytea"),
    (pa.types.is_date, "date", "date"),
    (pa.types.is_time, "time without time zone", "time"),
)


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (for messages; statements use ``sql.Identifier``)."""
    return '"' + name.replace('"', '""') + '"'


def column_type(name: str, arrow_type: pa.DataType) -> tuple[str, str]:
    """Return (type as ``format_type`` spells it, base type) of the column made for ``arrow_type``.

    Raises:
        StageCode.INPUT_SCHEMA: no column type fits (an all-null ``NullType``, a nested
            or other type without a counterpart), or the name is too long for PostgreSQL.

    """
    if len(name.encode()) > MAX_IDENTIFIER_BYTES or "\0" in name:
        msg = (
            f"column {name!r} cannot be created: PostgreSQL names are at most "
            f"{MAX_IDENTIFIER_BYTES} bytes without NUL; rename it in Spark"
        )
        raise PostgresSinkError(msg, column=name, code=StageCode.INPUT_SCHEMA)
    if pa.types.is_decimal(arrow_type):
        return f"numeric({arrow_type.precision},{arrow_type.scale})", "numeric"
    if pa.types.is_timestamp(arrow_type):
        if arrow_type.tz is not None:
            return "timestamp with time zone", "timestamptz"
        return "timestamp without time zone", "timestamp"
    for test, type_sql, base in _TYPES:
        if test(arrow_type):
            return type_sql, base
    if pa.types.is_null(arrow_type):
        hint = "no value of it has a type; cast it in Spark, e.g. lit(None).cast('string')"
    elif pa.types.is_nested(arrow_type) or pa.types.is_dictionary(arrow_type):
        hint = "serialize it with to_json() (a json/jsonb column takes the string)"
    else:
        hint = "cast it in Spark to a simple type"
    msg = (
        f"column {name!r} is {spark_name(arrow_type)}, for which the sink creates no "
        f"column: {hint}, or add the column to the table yourself"
    )
    raise PostgresSinkError(msg, column=name, code=StageCode.INPUT_SCHEMA)


def _new_column(field: pa.Field, *, key: bool) -> ColumnInfo:
    type_sql, base = column_type(field.name, field.type)
    return ColumnInfo(
        name=field.name,
        type_sql=type_sql,
        base_type=base,
        type_kind="b",
        not_null=key,
        has_default=False,
        generated=False,
        identity_always=False,
        max_chars=None,
    )


def planned_table(
    table: TableInfo | None, fields: Sequence[pa.Field], cfg: PostgresSinkConfig
) -> TableInfo:
    """Return ``table`` as the sink's DDL will leave it for input ``fields`` (no I/O).

    Without ``create_table`` / ``evolve_schema`` that is ``table`` itself (a missing one
    raises :class:`PostgresCode.TABLE_NOT_FOUND`).

    Raises:
        PostgresCode.SCHEMA_EVOLUTION: ``evolve_schema`` and the input needs a column's type to
            change, or lacks a NOT NULL column without default.
        StageCode.INPUT_SCHEMA: a column to create has no PostgreSQL type (see
            :func:`column_type`).

    """
    if table is None:
        if not cfg.create_table:
            raise table_not_found(cfg.schema, cfg.table)
        keys = cfg.key_columns
        columns = tuple(_new_column(f, key=f.name in keys) for f in fields)
        return TableInfo(
            schema=cfg.schema,
            name=cfg.table,
            columns=columns,
            primary_key=keys,
            unique_keys=(frozenset(keys),) if keys else (),
        )
    if not cfg.evolve_schema:
        return table
    _refuse_changes(table, fields)
    added = tuple(_new_column(f, key=False) for f in fields if table.column(f.name) is None)
    return dataclasses.replace(table, columns=table.columns + added) if added else table


def _refuse_changes(table: TableInfo, fields: Sequence[pa.Field]) -> None:
    where = f"{quote_ident(table.schema)}.{quote_ident(table.name)}"
    names = {f.name for f in fields}
    for f in fields:
        col = table.column(f.name)
        if col is None or col.generated or col.identity_always:
            continue  # added, or refused by the input check naming the generated column
        try:
            check_column_type(f.name, f.type, col.base_type, col.type_sql)
        except PostgresSinkError as exc:
            if exc.code is not StageCode.INPUT_SCHEMA:
                raise
            wanted, _ = column_type(f.name, f.type)
            needed = f"ALTER TABLE {where} ALTER COLUMN {quote_ident(f.name)} TYPE {wanted}"
            msg = (
                f"column {f.name!r} of {table.schema}.{table.name} is {col.type_sql}, but the "
                f"input is now {spark_name(f.type)}; evolve_schema only adds columns, it never "
                f"changes a type: cast the column in Spark to fit, or change it yourself ({needed})"
            )
            raise PostgresSinkError(
                msg, column=f.name, needed=needed, code=PostgresCode.SCHEMA_EVOLUTION
            ) from None
    for col in table.columns:
        if col.not_null and not col.has_default and not col.generated and col.name not in names:
            needed = f"ALTER TABLE {where} ALTER COLUMN {quote_ident(col.name)} DROP NOT NULL"
            msg = (
                f"column {col.name!r} of {table.schema}.{table.name} is NOT NULL without a "
                "default, and the input no longer has it; evolve_schema never drops a column "
                f"or a constraint: put the column back in the input, or allow nulls ({needed})"
            )
            raise PostgresSinkError(
                msg, column=col.name, needed=needed, code=PostgresCode.SCHEMA_EVOLUTION
            )


def layout_ddl(
    cfg: PostgresSinkConfig, layout: TableLayout, table: TableInfo | None
) -> list[sql.Composed]:
    """Statements that make ``table`` (None: missing) hold ``layout``'s columns; may be none."""
    target = qualified(cfg.schema, cfg.table)
    if table is None:
        columns = [
            sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(type_sql))
            for name, type_sql in layout.columns
        ]
        if layout.keys:
            keys = sql.SQL(", ").join(sql.Identifier(k) for k in layout.keys)
            columns.append(sql.SQL("PRIMARY KEY ({})").format(keys))
        create = sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})")
        return [create.format(target, sql.SQL(", ").join(columns))]
    missing = [(n, t) for n, t in layout.columns if table.column(n) is None]
    if not missing:
        return []
    adds = sql.SQL(", ").join(
        sql.SQL("ADD COLUMN IF NOT EXISTS {} {}").format(sql.Identifier(n), sql.SQL(t))
        for n, t in missing
    )
    return [sql.SQL("ALTER TABLE {} {}").format(target, adds)]


def apply_layout(conn: Conn, cfg: PostgresSinkConfig, layout: TableLayout) -> None:
    """Create or evolve the table for ``layout`` in one transaction, then check it (step 2)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK_KEY,))
        table = find_table(conn, cfg.schema, cfg.table)
        allowed = cfg.create_table if table is None else cfg.evolve_schema
        statements = layout_ddl(cfg, layout, table) if allowed else []
        if table is None and statements and not _schema_exists(conn, cfg.schema):
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(cfg.schema))
            )
        if table is not None and statements:
            _refuse_if_blocked(conn, cfg)
        for statement in statements:
            conn.execute(statement)
    if statements:
        done = "created" if table is None else "added columns to"
        names = [n for n, _ in layout.columns if table is None or table.column(n) is None]
        log.info("postgres sink %s: %s %s.%s: %s", cfg.sink_id, done, cfg.schema, cfg.table, names)
    check_layout(describe_table(conn, cfg.schema, cfg.table), layout)


def _refuse_if_blocked(conn: Conn, cfg: PostgresSinkConfig) -> None:
    """Raise :class:`PostgresCode.EVOLUTION_BLOCKED` if prepared work of the sink would block the ALTER."""
    pending = list_prepared(conn, cfg.sink_id)
    if pending:
        epochs = sorted({g.epoch for g in pending})
        msg = (
            f"sink {cfg.sink_id!r} must add columns to {cfg.schema}.{cfg.table}, but its "
            f"prepared transactions of epoch(s) {epochs} (in doubt after a failed epoch) hold "
            "locks on it; nothing was changed: run the batch again with its previous columns "
            "(the sink finishes the epoch first), or restart with a new sink object, whose "
            "recovery finishes them before any DDL"
        )
        raise PostgresSinkError(msg, code=PostgresCode.EVOLUTION_BLOCKED)


def _schema_exists(conn: Conn, schema: str) -> bool:
    row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return row is not None


def check_layout(table: TableInfo, layout: TableLayout) -> None:
    """Raise :class:`PostgresCode.TABLE_CHANGED` unless ``table`` holds ``layout``'s columns and key."""
    for name, type_sql in layout.columns:
        col = table.column(name)
        if col is None or col.type_sql != type_sql:
            found = "missing" if col is None else col.type_sql
            msg = (
                f"column {name!r} of {table.schema}.{table.name} is {found}, but the input was "
                f"checked against {type_sql}: the table changed meanwhile (someone else's DDL); "
                "nothing was logged or written; run the batch again (restart the query) to "
                "check it against the table as it is now"
            )
            raise PostgresSinkError(msg, code=PostgresCode.TABLE_CHANGED)
    if layout.keys and frozenset(layout.keys) not in table.unique_keys:
        msg = (
            f"{table.schema}.{table.name} has no unique key on {list(layout.keys)} any more: "
            "the table changed meanwhile (someone else's DDL); nothing was logged or written"
        )
        raise PostgresSinkError(msg, code=PostgresCode.TABLE_CHANGED)

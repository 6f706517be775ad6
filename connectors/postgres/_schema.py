"""Target-table introspection and the check of the input's Arrow schema against it.

:func:`describe_table` reads the catalog (columns with their base types, NOT NULL,
defaults, generated/identity columns, varchar limits, primary and unique keys);
:func:`check_input` compares an Arrow schema (what Spark hands to ``mapInArrow``) with it
and returns the :class:`TableLayout` the write tasks use, or raises an :class:`StageCode.INPUT`
subclass naming the column and the fix. The type rules are in :mod:`._types`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

import pyarrow as pa

from connectors.postgres._config import PostgresSinkConfig, WriteMode
from connectors.postgres._connect import Conn
from connectors.postgres._errors import PostgresCode, PostgresSinkError
from connectors.postgres._types import check_column_type
from connectors.stage import StageCode
from connectors.stage._rows import HASH_COLUMN


@dataclass(frozen=True, kw_only=True)
class ColumnInfo:
    """One column of the target table."""

    name: str
    type_sql: str  # format_type(): what CREATE TABLE would say, e.g. "character varying(20)"
    base_type: str  # pg_type.typname of the type, of a domain's base type for domains
    type_kind: str  # pg_type.typtype of the base type: b(ase), e(num), c(omposite), ...
    not_null: bool
    has_default: bool
    generated: bool  # GENERATED ALWAYS AS (...) STORED: cannot be written
    identity_always: bool  # GENERATED ALWAYS AS IDENTITY: cannot be written
    max_chars: int | None  # varchar(n) / char(n)


@dataclass(frozen=True, kw_only=True)
class TableInfo:
    """The target table: its columns in order, primary key and unique keys."""

    schema: str
    name: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[str, ...]
    unique_keys: tuple[frozenset[str], ...]

    def column(self, name: str) -> ColumnInfo | None:
        """Return the column named ``name`` (exact, case-sensitive), or None."""
        return next((c for c in self.columns if c.name == name), None)


_COLUMNS_SQL = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), bt.typname, bt.typtype,
       a.attnotnull, a.atthasdef, a.attgenerated <> '', a.attidentity = 'a',
       CASE WHEN bt.typname IN ('varchar', 'bpchar') AND a.atttypmod > 4
            THEN a.atttypmod - 4 END
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

# The columns of _COLUMNS_SQL, in its order.
_COLUMN_FIELDS = tuple(f.name for f in fields(ColumnInfo))

_KEYS_SQL = """
SELECT i.indisprimary,
       array_agg(a.attname ORDER BY array_position(i.indkey::int2[], a.attnum))
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = %s AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
GROUP BY i.indexrelid, i.indisprimary
"""


def find_table(conn: Conn, schema: str, table: str) -> TableInfo | None:
    """Read the target table's definition; None if there is no such table."""
    row = conn.execute(
        "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (schema, table),
    ).fetchone()
    if row is None:
        return None
    oid = row[0]
    columns = tuple(
        ColumnInfo(**dict(zip(_COLUMN_FIELDS, r, strict=True)))
        for r in conn.execute(_COLUMNS_SQL, (oid,)).fetchall()
    )
    primary: tuple[str, ...] = ()
    unique: list[frozenset[str]] = []
    for is_primary, names in conn.execute(_KEYS_SQL, (oid,)).fetchall():
        unique.append(frozenset(names))
        if is_primary:
            primary = tuple(names)
    return TableInfo(
        schema=schema, name=table, columns=columns, primary_key=primary, unique_keys=tuple(unique)
    )


def table_not_found(schema: str, table: str) -> PostgresSinkError:
    """Return the error of a missing target table, saying how to create it."""
    msg = (
        f"table {schema}.{table} does not exist (or is not a table); create it before "
        "the first batch (or pass create_table=True), or fix table=/schema= of the sink"
    )
    return PostgresSinkError(msg, code=PostgresCode.TABLE_NOT_FOUND)


def describe_table(conn: Conn, schema: str, table: str) -> TableInfo:
    """Read the target table's definition; raise :class:`PostgresCode.TABLE_NOT_FOUND` if absent."""
    found = find_table(conn, schema, table)
    if found is None:
        raise table_not_found(schema, table)
    return found


@dataclass(frozen=True, kw_only=True)
class TableLayout:
    """What a write task needs to know about the table and the input (picklable).

    ``columns``: the written columns in input order with their SQL types; ``keys``: the
    conflict key (upsert and changelog); ``update_columns``: the non-key written columns an
    upsert overwrites; ``arrow_types``: the checked Arrow type of each written column, so a
    task refuses batches of another schema; ``op_column``: the changelog's op column.
    """

    schema: str
    table: str
    write_mode: WriteMode
    columns: tuple[tuple[str, str], ...]
    arrow_types: tuple[str, ...]
    keys: tuple[str, ...] = ()
    update_columns: tuple[str, ...] = ()
    op_column: str | None = None
    max_chars: tuple[tuple[str, int], ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        """Names of the written columns, in order."""
        return tuple(name for name, _ in self.columns)

    def digest(self) -> str:
        """Stable digest of the column layout (names the load table)."""
        raw = repr((self.columns, self.keys, self.op_column)).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


def _check_writable(table: TableInfo, written: list[str]) -> None:
    where = f"{table.schema}.{table.name}"
    for name in written:
        col = table.column(name)
        if col is None:
            msg = (
                f"input column {name!r} does not exist in table {where} (columns: "
                f"{', '.join(c.name for c in table.columns)}); drop or rename it in Spark, or "
                "add the column to the table"
            )
            raise PostgresSinkError(msg, column=name, code=StageCode.INPUT_SCHEMA)
        if col.generated or col.identity_always:
            msg = (
                f"column {name!r} of {where} is generated by the database and cannot be "
                "written; drop it from the input"
            )
            raise PostgresSinkError(msg, column=name, code=StageCode.INPUT_SCHEMA)
    for col in table.columns:
        if col.not_null and not col.has_default and not col.generated and col.name not in written:
            msg = (
                f"column {col.name!r} of {where} is NOT NULL without a default, but the input "
                "has no such column; add it to the input"
            )
            raise PostgresSinkError(msg, column=col.name, code=StageCode.INPUT_SCHEMA)


def _resolve_keys(cfg: PostgresSinkConfig, table: TableInfo, written: list[str]) -> tuple[str, ...]:
    where = f"{table.schema}.{table.name}"
    keys = cfg.key_columns or table.primary_key
    if not keys:
        msg = (
            f"write_mode {cfg.write_mode.value!r} needs a key, and {where} has no primary key; "
            "pass key_columns=[...] naming a unique key of the table"
        )
        raise PostgresSinkError(msg, code=StageCode.INPUT_SCHEMA)
    if frozenset(keys) not in table.unique_keys:
        msg = (
            f"key_columns {list(keys)} are not a primary key or unique index of {where} (an "
            "upsert needs one to find the existing row); create a unique index on them"
        )
        raise PostgresSinkError(msg, column=keys[0], code=StageCode.INPUT_SCHEMA)
    for key in keys:
        if key not in written:
            msg = f"key column {key!r} is missing from the input; the upsert needs it"
            raise PostgresSinkError(msg, column=key, code=StageCode.INPUT_SCHEMA)
    return tuple(keys)


def written_fields(schema: pa.Schema, cfg: PostgresSinkConfig) -> list[pa.Field]:
    """Return the input's fields written to columns (not the hash nor a changelog's op)."""
    op_column = cfg.op_column if cfg.write_mode is WriteMode.CHANGELOG else None
    return [f for f in schema if f.name != HASH_COLUMN and f.name != op_column]


def check_input(schema: pa.Schema, table: TableInfo, cfg: PostgresSinkConfig) -> TableLayout:
    """Check the input's Arrow ``schema`` against ``table``; return the write :class:`TableLayout`.

    Raises:
        StageCode.INPUT_SCHEMA: a column is missing in the table (or a NOT NULL one in the
            input), a type cannot be written to its column, or no usable key is known;
            the error's ``column`` names the column.

    """
    op_column = cfg.op_column if cfg.write_mode is WriteMode.CHANGELOG else None
    fields = written_fields(schema, cfg)
    if op_column is not None:
        idx = schema.get_field_index(op_column)
        if idx < 0 or not (
            pa.types.is_string(schema.field(idx).type)
            or pa.types.is_large_string(schema.field(idx).type)
        ):
            msg = (
                f"write_mode 'changelog' needs a string column {op_column!r} (insert / "
                "update_before / update_after / delete) in the input"
            )
            raise PostgresSinkError(msg, column=op_column, code=StageCode.INPUT_SCHEMA)
    written = [f.name for f in fields]
    reserved = [n for n in written if n.startswith("_eos_")]
    if reserved:
        msg = f"input column {reserved[0]!r}: names starting with _eos_ are reserved by the sink"
        raise PostgresSinkError(msg, column=reserved[0], code=StageCode.INPUT_SCHEMA)
    if len(set(written)) != len(written):
        msg = f"the input names a column twice: {written}"
        raise PostgresSinkError(msg, code=StageCode.INPUT_SCHEMA)
    _check_writable(table, written)
    columns = []
    limits = []
    for f in fields:
        col = table.column(f.name)
        assert col is not None  # noqa: S101 - checked by _check_writable
        check_column_type(f.name, f.type, col.base_type, col.type_sql)
        columns.append((f.name, col.type_sql))
        if col.max_chars is not None:
            limits.append((f.name, col.max_chars))
    keys: tuple[str, ...] = ()
    if cfg.write_mode is not WriteMode.APPEND:
        keys = _resolve_keys(cfg, table, written)
    return TableLayout(
        schema=table.schema,
        table=table.name,
        write_mode=cfg.write_mode,
        columns=tuple(columns),
        arrow_types=tuple(str(f.type) for f in fields),
        keys=keys,
        update_columns=tuple(n for n in written if n not in keys) if keys else (),
        op_column=op_column,
        max_chars=tuple(limits),
    )

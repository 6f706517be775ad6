"""The PostgreSQL table of the pipeline: its definition, the rows the query writes, the op rule.

The query's input columns (``key``, ``value`` = JSON ``{"id", "key", "seq"}``,
``in_partition``, ``in_offset``) become the table rows of :data:`TABLE_COLUMNS`:

* ``id`` / ``seq`` are taken out of the JSON value, ``key``, ``in_partition`` and
  ``in_offset`` are kept (they order the rows inside a write partition, so the last change
  of a key is the one the table keeps);
* ``write_mode="append"``: no key at all, so a duplicated record is a second row the checker
  counts instead of an insert the database refuses;
* ``"upsert"`` / ``"changelog"``: ``key`` is the primary key; the table holds the last change
  of each key;
* ``"changelog"``: the input also carries the op column ``op``, chosen per record by one rule
  (:func:`changelog_op`, the same rule as :data:`CHANGELOG_OP_SQL` for Spark): every
  :data:`DELETE_EVERY`-th record id deletes its key, the first record of a key inserts it,
  the others are ``update_after``.

:func:`create_table` creates the table (nothing else of the sink: the sink creates its own
control tables); :func:`table_rows` is the Spark projection; :func:`record_op` tells the
checker the op of an input record.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from connectors.verify import Record

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Columns of the pipeline's table, in order.
TABLE_COLUMNS = ("id", "key", "seq", "in_partition", "in_offset")
# The changelog's op column (PostgresSink's default ``op_column``).
OP_COLUMN = "op"
# Every DELETE_EVERY-th record id (ids DELETE_EVERY - 1, 2 * DELETE_EVERY - 1, ...) deletes its key.
DELETE_EVERY = 5
# The op rule in Spark SQL, over the projected ``id`` and ``seq`` columns.
CHANGELOG_OP_SQL = (
    f"CASE WHEN id % {DELETE_EVERY} = {DELETE_EVERY - 1} THEN 'delete' "
    "WHEN seq = 0 THEN 'insert' ELSE 'update_after' END"
)
_ROW_SQL = (
    "CAST(get_json_object(CAST(value AS STRING), '$.id') AS BIGINT) AS id",
    "key",
    "CAST(get_json_object(CAST(value AS STRING), '$.seq') AS BIGINT) AS seq",
    "in_partition",
    "in_offset",
)
_DDL = (
    "id bigint NOT NULL, key text NOT NULL, seq bigint NOT NULL, in_partition integer NOT NULL, "
    "in_offset bigint NOT NULL"
)


def changelog_op(record_id: int, seq: int) -> str:
    """Return the changelog op of the record with ``record_id`` and per-key ``seq``."""
    if record_id % DELETE_EVERY == DELETE_EVERY - 1:
        return "delete"
    return "insert" if seq == 0 else "update_after"


def record_op(record: Record) -> str:
    """Return the changelog op of an input record (its JSON value's ``id`` and ``seq``)."""
    body = json.loads(record.value or b"{}")
    return changelog_op(int(body["id"]), int(body["seq"]))


def create_table(
    dsn: str, table: str, *, schema: str = "public", write_mode: str = "append"
) -> None:
    """Create ``schema.table`` for ``write_mode`` (and the schema) if they do not exist."""
    import psycopg
    from psycopg import sql

    key = "" if write_mode == "append" else ", PRIMARY KEY (key)"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {}.{} (" + _DDL + key + ")").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
        )


def table_rows(df: DataFrame, write_mode: str) -> DataFrame:
    """Project the query's input DataFrame onto the table's columns (plus ``op`` for a changelog)."""
    rows = df.selectExpr(*_ROW_SQL)
    if write_mode == "changelog":
        rows = rows.selectExpr(*TABLE_COLUMNS, f"{CHANGELOG_OP_SQL} AS {OP_COLUMN}")
    return rows

"""The bulk write of one partition inside the caller's open transaction.

Statements per task, whatever the number of rows (never a round trip per row):

* append: one ``COPY target (columns) FROM STDIN (FORMAT csv)`` streaming every batch;
* upsert / changelog: ``TRUNCATE`` the partition's load table, one ``COPY`` into it, one
  merge statement, ``TRUNCATE`` again. The merge keeps the last row of each key
  (``DISTINCT ON (key) ... ORDER BY key, _eos_seq DESC``), so a key repeated within the
  partition never hits ``ON CONFLICT`` twice; a changelog deletes the keys whose last op
  is ``delete`` and upserts the others, in one statement (a data-modifying CTE).

Why not a TEMP load table: PostgreSQL refuses to ``PREPARE TRANSACTION`` a
transaction that touched a temporary table (SQLSTATE 0A000). The load table is a
regular UNLOGGED table of the control schema, one per (sink, partition, column layout),
created outside the data transaction by :func:`ensure_load_table`; only one live
instance of a partition exists (the participant fences older ones), and the TRUNCATE
lock is held until the prepared transaction is finished, so instances never share rows.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
from psycopg import sql

from connectors.postgres._config import WriteMode
from connectors.postgres._connect import Conn
from connectors.postgres._control import qualified, run_ddl
from connectors.postgres._encode import OP_COLUMN, SEQ_COLUMN, encode_batch
from connectors.postgres._schema import TableLayout


def _idents(names: Iterable[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


def ensure_load_table(conn: Conn, layout: TableLayout, control_schema: str, name: str) -> None:
    """Create the unlogged load table of ``layout`` if absent (autocommit connection)."""
    columns = [
        sql.SQL("{} {}").format(sql.Identifier(col), sql.SQL(type_sql))
        for col, type_sql in layout.columns
    ]
    columns.append(sql.SQL("{} bigint NOT NULL").format(sql.Identifier(SEQ_COLUMN)))
    if layout.write_mode is WriteMode.CHANGELOG:
        columns.append(sql.SQL("{} text NOT NULL").format(sql.Identifier(OP_COLUMN)))
    run_ddl(
        conn,
        [
            sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({})").format(
                qualified(control_schema, name), sql.SQL(", ").join(columns)
            )
        ],
    )


def merge_statement(layout: TableLayout, load_table: sql.Composable) -> sql.Composed:
    """Return the statement moving the load table's rows into the target (upsert or changelog)."""
    target = qualified(layout.schema, layout.table)
    cols = _idents(layout.column_names)
    keys = _idents(layout.keys)
    action: sql.Composable
    if layout.update_columns:
        action = sql.SQL("DO UPDATE SET {}").format(
            sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c))
                for c in layout.update_columns
            )
        )
    else:
        action = sql.SQL("DO NOTHING")
    extra = sql.SQL(", {}").format(sql.Identifier(OP_COLUMN)) if layout.op_column else sql.SQL("")
    last = sql.SQL(
        "SELECT DISTINCT ON ({keys}) {cols}{extra} FROM {load} ORDER BY {keys}, {seq} DESC"
    ).format(keys=keys, cols=cols, extra=extra, load=load_table, seq=sql.Identifier(SEQ_COLUMN))
    if layout.write_mode is WriteMode.UPSERT:
        return sql.SQL(
            "INSERT INTO {target} ({cols}) SELECT {cols} FROM ({last}) s "
            "ON CONFLICT ({keys}) {action}"
        ).format(target=target, cols=cols, last=last, keys=keys, action=action)
    match = sql.SQL(" AND ").join(
        sql.SQL("t.{0} = s.{0}").format(sql.Identifier(k)) for k in layout.keys
    )
    return sql.SQL(
        "WITH last AS ({last}), "
        "gone AS (DELETE FROM {target} t USING last s WHERE s.{op} = 'delete' AND {match}) "
        "INSERT INTO {target} ({cols}) SELECT {cols} FROM last WHERE {op} <> 'delete' "
        "ON CONFLICT ({keys}) {action}"
    ).format(
        last=last,
        target=target,
        op=sql.Identifier(OP_COLUMN),
        match=match,
        cols=cols,
        keys=keys,
        action=action,
    )


class BulkWriter:
    """Writes one partition's batches with a fixed number of statements (see module doc).

    Contract: ``write(batches)`` runs inside the caller's open transaction on ``conn`` and
    returns the number of rows written (changelog: after dropping update_before rows).
    Nothing is committed here; any error leaves the transaction to be rolled back.
    """

    def __init__(self, conn: Conn, layout: TableLayout, load_table: sql.Composable | None) -> None:
        if layout.write_mode is not WriteMode.APPEND and load_table is None:
            msg = f"write_mode {layout.write_mode.value!r} needs a load table"
            raise ValueError(msg)
        self._conn = conn
        self._layout = layout
        self._load_table = load_table

    def _copy(
        self, into: sql.Composable, names: list[str], batches: Iterable[pa.RecordBatch]
    ) -> int:
        rows = 0
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(into, _idents(names))
        with self._conn.cursor() as cur, cur.copy(statement) as copy:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                data, n = encode_batch(batch, self._layout, rows)
                if n:
                    copy.write(data)
                rows += n
        return rows

    def write(self, batches: Iterable[pa.RecordBatch]) -> int:
        """Write every row of ``batches``; return the number of rows written."""
        layout = self._layout
        if layout.write_mode is WriteMode.APPEND:
            return self._copy(
                qualified(layout.schema, layout.table), list(layout.column_names), batches
            )
        assert self._load_table is not None  # noqa: S101 - checked in __init__
        names = [*layout.column_names, SEQ_COLUMN]
        if layout.write_mode is WriteMode.CHANGELOG:
            names.append(OP_COLUMN)
        truncate = sql.SQL("TRUNCATE {}").format(self._load_table)
        self._conn.execute(truncate)
        rows = self._copy(self._load_table, names, batches)
        if rows:
            self._conn.execute(merge_statement(layout, self._load_table))
            self._conn.execute(truncate)
        return rows

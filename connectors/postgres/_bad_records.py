"""The PostgreSQL sink's bad records: input check per row, server rejections, dead letters.

With ``on_bad_record="dead-letter"`` or ``"skip"`` (``connectors.stage._bad_records``):

* :class:`PostgresClassifier` finds the rows the input check would refuse (a null key, an
  unknown changelog op, a varchar/char value longer than the column), deterministically;
* :func:`write_isolating` writes the good rows under a ``SAVEPOINT``; when the server
  rejects them with a class 22 (bad value) or 23 (constraint) error it rolls back to the
  savepoint and bisects: each half again under its own savepoint, down to single rows,
  which are the rejected ones. All in the task's one transaction; ``O(k log n)``
  statements for ``k`` rejected rows of ``n`` (the rows are held in memory for it);
* :func:`write_dead_letters` copies bad records into the dead-letter table in the same
  transaction (two-phase and idempotency-table alike): exactly-once with the epoch.

The dead-letter table (:func:`ensure_dead_letter_table`, created on the driver) lives in
the control schema; its columns are in :data:`DEAD_LETTER_COLUMNS`. docs/bad-records.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from connectors.postgres._classify import sqlstate_of, to_sink_error
from connectors.postgres._config import WriteMode
from connectors.postgres._connect import Conn
from connectors.postgres._control import qualified, run_ddl
from connectors.postgres._encode import ALL_OPS
from connectors.postgres._errors import PostgresCode
from connectors.postgres._schema import TableLayout
from connectors.postgres._writer import BulkWriter
from connectors.stage import BadRow, DeadLetterContext, StageCode
from connectors.stage._bad_records import (
    ERROR_CLASS_COLUMN,
    ERROR_MESSAGE_COLUMN,
    bad_batch,
    drop_rows,
)
from connectors.stage._rows import HASH_COLUMN

# SQLSTATE classes whose rows are bad records (22: data exception, 23: integrity constraint
# violation); every other error still fails the epoch.
REJECTED_CLASSES = frozenset({"22", "23"})
# Columns of the dead-letter table, in order (``record`` is the row as JSON).
DEAD_LETTER_COLUMNS = (
    "sink_id",
    "batch_id",
    "epoch",
    "write_partition",
    "error_class",
    "error_message",
    "record",
    "source_topic",
    "source_partition",
    "source_offset",
)
# Input columns read as a record's source coordinates (the first present of each pair).
_SOURCE = (
    ("source_topic", "topic"),
    ("source_partition", "partition"),
    ("source_offset", "offset"),
)


def _rows(mask: pa.Array) -> list[int]:
    return [int(i) for i in np.flatnonzero(np.asarray(pc.fill_null(mask, False)))]


class PostgresClassifier:
    """The input check per row (module docstring); picklable."""

    def __init__(self, layout: TableLayout) -> None:
        self._layout = layout

    def classify(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, list[BadRow]]:
        """Return the good rows and the rows the input check refuses."""
        layout, found = self._layout, dict[int, BadRow]()
        if layout.write_mode is WriteMode.CHANGELOG and layout.op_column is not None:
            op = batch.column(batch.schema.get_field_index(layout.op_column))
            ops = op.to_pylist()
            for i in _rows(
                pc.invert(pc.fill_null(pc.is_in(op, value_set=pa.array(ALL_OPS)), False))
            ):
                found.setdefault(
                    i,
                    BadRow(
                        i,
                        StageCode.RECORD.text,
                        f"op {ops[i]!r} is not one of {', '.join(ALL_OPS)}",
                    ),
                )
        for key in layout.keys:
            for i in _rows(pc.is_null(batch.column(batch.schema.get_field_index(key)))):
                found.setdefault(i, BadRow(i, StageCode.RECORD.text, f"key column {key!r} is null"))
        for name, limit in layout.max_chars:
            lengths = pc.utf8_length(batch.column(batch.schema.get_field_index(name)))
            for i in _rows(pc.greater(lengths, limit)):
                found.setdefault(
                    i,
                    BadRow(
                        i,
                        PostgresCode.VALUE_TOO_LARGE.text,
                        f"column {name!r} holds {lengths[i].as_py()} characters; it allows {limit}",
                    ),
                )
        return drop_rows(batch, sorted(found)), [found[i] for i in sorted(found)]


def _rejected(exc: psycopg.Error) -> bool:
    code = sqlstate_of(exc)
    return code is not None and code[:2] in REJECTED_CLASSES


def write_isolating(
    conn: Conn, writer: BulkWriter, batches: Iterable[pa.RecordBatch], where: str
) -> list[pa.RecordBatch]:
    """Write ``batches``; return the rows the server rejected (bisection under savepoints).

    Runs inside the caller's open transaction; an error of another class is raised.
    """
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return []
    table = pa.Table.from_batches(batches).combine_chunks()
    rejected: list[BadRow] = []

    def attempt(lo: int, hi: int) -> None:
        try:
            with conn.transaction():  # a SAVEPOINT inside the open transaction
                writer.write(table.slice(lo, hi - lo).to_batches())
        except psycopg.Error as exc:
            if not _rejected(exc):
                raise
            if hi - lo == 1:
                error = to_sink_error(exc, where)
                rejected.append(BadRow(lo, error.code.text, _server_message(exc)))
                return
            mid = (lo + hi) // 2
            attempt(lo, mid)
            attempt(mid, hi)

    attempt(0, table.num_rows)
    if not rejected:
        return []
    return [bad_batch(table.to_batches(max_chunksize=table.num_rows)[0], rejected)]


def _server_message(exc: psycopg.Error) -> str:
    diag = exc.diag
    parts = [f"SQLSTATE {diag.sqlstate}", diag.message_primary or str(exc)]
    if diag.message_detail:
        parts.append(diag.message_detail)
    return ": ".join(p for p in parts if p)


def _index_name(table: str) -> str:
    return f"{table[:50]}_epoch_idx"


def ensure_dead_letter_table(conn: Conn, schema: str, table: str) -> None:
    """Create the dead-letter table (and its index by sink and epoch) if absent.

    Nothing runs when the index (created last) exists: ``CREATE INDEX IF NOT EXISTS``
    would wait for the table's lock, which the prepared transactions of an epoch in doubt
    hold (their dead letters) until the sink's recovery, after this, ends them.
    """
    exists = conn.execute(
        "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s",
        (schema, _index_name(table)),
    ).fetchone()
    if exists is not None:
        return
    name = qualified(schema, table)
    run_ddl(
        conn,
        [
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " sink_id text NOT NULL, batch_id bigint, epoch bigint NOT NULL,"
                " write_partition integer NOT NULL, error_class text NOT NULL,"
                " error_message text NOT NULL, record jsonb NOT NULL, source_topic text,"
                " source_partition integer, source_offset bigint,"
                " dead_lettered_at timestamptz NOT NULL DEFAULT now())"
            ).format(name),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (sink_id, epoch)").format(
                sql.Identifier(_index_name(table)), name
            ),
        ],
    )


def _json_value(value: object) -> Any:
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    return value


def _dead_letter_rows(
    records: pa.RecordBatch, context: DeadLetterContext
) -> Iterable[tuple[Any, ...]]:
    hidden = {HASH_COLUMN, ERROR_CLASS_COLUMN, ERROR_MESSAGE_COLUMN}
    cols = {n: records.column(i).to_pylist() for i, n in enumerate(records.schema.names)}
    data = [n for n in records.schema.names if n not in hidden]
    for i in range(records.num_rows):
        row = {n: _json_value(cols[n][i]) for n in data}
        source = []
        for names in _SOURCE:
            present = [cols[n][i] for n in names if n in cols]
            source.append(present[0] if present else None)
        yield (
            context.sink_id,
            context.batch_id,
            context.epoch,
            context.partition,
            cols[ERROR_CLASS_COLUMN][i],
            cols[ERROR_MESSAGE_COLUMN][i],
            json.dumps(row, sort_keys=True, default=str),
            *source,
        )


def write_dead_letters(
    conn: Conn,
    schema: str,
    table: str,
    records: Sequence[pa.RecordBatch],
    context: DeadLetterContext,
) -> None:
    """Copy ``records`` into the dead-letter table inside the caller's open transaction."""
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        qualified(schema, table), sql.SQL(", ").join(map(sql.Identifier, DEAD_LETTER_COLUMNS))
    )
    with conn.cursor() as cur, cur.copy(statement) as copy:
        for batch in records:
            for row in _dead_letter_rows(batch, context):
                copy.write_row(row)

r"""Arrow batches to COPY data: checked, filtered and encoded as CSV in vectorized code.

Per batch (no per-row Python):

1. the batch's columns must be the ones checked on the driver (names and Arrow types),
   else :class:`StageCode.INPUT_SCHEMA`; the hidden ``_eos_hash`` column is dropped;
2. changelog: every ``op`` must be insert / update_before / update_after / delete
   (else :class:`StageCode.RECORD`); ``update_before`` rows are dropped;
3. key columns must not be null; varchar(n)/char(n) values must fit
   (:class:`PostgresCode.VALUE_TOO_LARGE` naming the column);
4. binary columns become ``\\x``-hex text (bytea's input form);
5. upsert/changelog: a ``_eos_seq`` column numbers the rows in arrival order (the last row
   of a key wins) and the op is appended as ``_eos_op``;
6. the result is written as CSV by Arrow's C++ writer: strings always quoted, so an empty
   string stays empty and an unquoted empty field is NULL, exactly PostgreSQL's CSV rules.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from connectors.postgres._config import WriteMode
from connectors.postgres._errors import PostgresCode, PostgresSinkError
from connectors.postgres._schema import TableLayout
from connectors.stage import StageCode
from connectors.stage._rows import HASH_COLUMN

SEQ_COLUMN = "_eos_seq"
OP_COLUMN = "_eos_op"
# Changelog operations; update_before rows are dropped (the update_after row carries the
# new image), as in the Kafka sink.
WRITTEN_OPS = ("insert", "update_after", "delete")
ALL_OPS = (*WRITTEN_OPS, "update_before")
_CSV_OPTIONS = pacsv.WriteOptions(include_header=False, quoting_style="needed")


def _check_columns(batch: pa.RecordBatch, layout: TableLayout) -> pa.RecordBatch:
    names = [n for n in batch.schema.names if n not in (HASH_COLUMN, layout.op_column)]
    types = [str(batch.schema.field(n).type) for n in names]
    if tuple(names) != layout.column_names or tuple(types) != layout.arrow_types:
        msg = (
            f"a batch has columns {list(zip(names, types, strict=True))}, but the sink checked "
            f"{list(zip(layout.column_names, layout.arrow_types, strict=True))}; the input schema changed "
            "within one epoch"
        )
        raise PostgresSinkError(msg, code=StageCode.INPUT_SCHEMA)
    return batch


def _changelog_ops(batch: pa.RecordBatch, layout: TableLayout) -> tuple[pa.RecordBatch, pa.Array]:
    assert layout.op_column is not None  # noqa: S101 - changelog layouts have one
    op = batch.column(batch.schema.get_field_index(layout.op_column))
    known = pc.fill_null(pc.is_in(op, value_set=pa.array(ALL_OPS)), False)
    if not pc.all(known).as_py():
        sample = pc.filter(op, pc.invert(known))[0].as_py()
        msg = (
            f"column {layout.op_column!r} holds {sample!r}; a changelog row's op must be one "
            f"of {', '.join(ALL_OPS)}"
        )
        raise PostgresSinkError(msg, column=layout.op_column, code=StageCode.RECORD)
    keep = pc.not_equal(op, "update_before")
    if not pc.all(keep).as_py():
        batch = batch.filter(keep)
        op = pc.filter(op, keep)
    return batch, op


def _check_values(batch: pa.RecordBatch, layout: TableLayout) -> None:
    for key in layout.keys:
        nulls = batch.column(batch.schema.get_field_index(key)).null_count
        if nulls:
            msg = f"key column {key!r} is null in {nulls} row(s); every row needs its key"
            raise PostgresSinkError(msg, column=key, code=StageCode.RECORD)
    for name, limit in layout.max_chars:
        column = batch.column(batch.schema.get_field_index(name))
        longest = pc.max(pc.utf8_length(column)).as_py()
        if longest is not None and longest > limit:
            msg = (
                f"column {name!r} holds a value of {longest} characters, but the table column "
                f"allows {limit}; shorten the values in Spark or widen the column"
            )
            raise PostgresSinkError(msg, column=name, code=PostgresCode.VALUE_TOO_LARGE)


def hex_bytea(column: pa.Array) -> pa.Array:
    r"""Return binary values as bytea's text input ``\\x<hex>`` (vectorized; nulls stay null)."""
    column = column.cast(pa.large_binary())
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64)[
        column.offset : column.offset + len(column) + 1
    ]
    start, end = int(offsets[0]), int(offsets[-1])
    raw = column.buffers()[2]
    hexed = np.frombuffer(
        (bytes(raw)[start:end] if raw is not None else b"").hex().encode(), dtype=np.uint8
    )
    lengths = np.diff(offsets) * 2 + 2
    new_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    out = np.empty(int(new_offsets[-1]), dtype=np.uint8)
    prefix = np.zeros(len(out), dtype=bool)
    prefix[new_offsets[:-1]] = True
    prefix[new_offsets[:-1] + 1] = True
    out[new_offsets[:-1]] = ord("\\")
    out[new_offsets[:-1] + 1] = ord("x")
    out[~prefix] = hexed
    # A fresh bitmap starting at bit 0, whatever the input's offset.
    validity = pc.is_valid(column).buffers()[1] if column.null_count else None
    return pa.Array.from_buffers(
        pa.large_string(),
        len(column),
        [validity, pa.py_buffer(new_offsets.tobytes()), pa.py_buffer(out.tobytes())],
        null_count=column.null_count,
    )


def encode_batch(batch: pa.RecordBatch, layout: TableLayout, seq_start: int) -> tuple[bytes, int]:
    """Return the CSV COPY data of ``batch`` and its number of rows (see module docstring)."""
    _check_columns(batch, layout)
    op: pa.Array | None = None
    if layout.write_mode is WriteMode.CHANGELOG:
        batch, op = _changelog_ops(batch, layout)
    _check_values(batch, layout)
    arrays: list[pa.Array] = []
    names: list[str] = []
    for name in layout.column_names:
        column = batch.column(batch.schema.get_field_index(name))
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            column = hex_bytea(column)
        arrays.append(column)
        names.append(name)
    if layout.write_mode is not WriteMode.APPEND:
        arrays.append(pa.array(np.arange(seq_start, seq_start + batch.num_rows, dtype=np.int64)))
        names.append(SEQ_COLUMN)
    if op is not None:
        arrays.append(op)
        names.append(OP_COLUMN)
    out = io.BytesIO()
    pacsv.write_csv(pa.record_batch(arrays, names=names), out, _CSV_OPTIONS)
    return out.getvalue(), batch.num_rows

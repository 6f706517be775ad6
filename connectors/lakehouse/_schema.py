"""The input check of the table sinks: the micro-batch's columns against the table's.

Rules (the same for Delta Lake and Iceberg):

1. every column of the input is written: the table must have it with the same type (after
   :func:`normalized`: Spark's large strings are strings, every zoned timestamp is a UTC
   microsecond timestamp), else an :class:`connectors.stage.StageCode.INPUT_SCHEMA` names the
   column and the exact change that fixes it;
2. a column the table lacks is added with ``evolve_schema=True`` (nullable: the table's
   earlier rows hold null), else refused; a column is never dropped or retyped;
3. a column of the table the input lacks is written as null (every reader of both formats
   reads a column absent from a file as null), so it must be nullable;
4. ``order_by`` columns the table lacks only order the rows; they are not written.
5. partition columns must be in the input, of a type that has a partition value: integers,
   strings, dates, booleans;
6. upserts and changelogs: the key columns must be in the input; a changelog's op column
   must be a string column of the input, and is not written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from connectors.stage import StageCode, StageError

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True, kw_only=True)
class TableLayout:
    """What the check decided: the written columns (as the files hold them), the added ones."""

    schema: pa.Schema  # the written columns, normalized, in input order
    added: tuple[str, ...] = ()  # columns the table gains (evolve_schema)
    create: bool = False  # the table does not exist yet and is created (create_table)
    keys: tuple[str, ...] = ()  # upsert / changelog: the key columns
    op_column: str | None = None  # changelog: the op column (shipped, not written)

    @property
    def shipped(self) -> tuple[str, ...]:
        """Return the columns the write tasks get: the written ones, then the op column."""
        return (*self.schema.names, *((self.op_column,) if self.op_column else ()))


def normalized(t: pa.DataType) -> pa.DataType:
    """Return the type a table file holds for ``t`` (Spark's Arrow type of a column)."""
    import pyarrow as pa

    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=None if t.tz is None else "UTC")
    return t


def _partition_type(t: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_date(t)
        or pa.types.is_boolean(t)
    )


def check_layout(
    arrow: pa.Schema,
    table: pa.Schema | None,
    *,
    what: str,
    order_by: Sequence[str] = (),
    partition_by: Sequence[str] = (),
    create_table: bool = False,
    evolve_schema: bool = False,
    keys: Sequence[str] = (),
    op_column: str | None = None,
) -> TableLayout:
    """Check the input's Arrow schema against the table's (None: no table); see the module.

    ``what``: the table's name in messages.
    """
    import pyarrow as pa

    if not arrow.names:
        msg = f"the DataFrame has no columns; {what} needs at least one"
        raise StageError(msg, code=StageCode.INPUT_SCHEMA)
    if table is None and not create_table:
        msg = f"{what} does not exist: create it, or pass create_table=True to create it from the stream"
        raise StageError(msg, code=StageCode.INPUT_SCHEMA)
    known = {} if table is None else {f.name: f for f in table}
    fields, added = [], []
    if op_column is not None:
        index = arrow.get_field_index(op_column)
        if index < 0 or not (
            pa.types.is_string(arrow.field(index).type)
            or pa.types.is_large_string(arrow.field(index).type)
        ):
            msg = (
                f"the changelog's op column {op_column!r} must be a string column of the DataFrame"
            )
            raise StageError(msg, column=op_column, code=StageCode.INPUT_SCHEMA)
    for col in arrow:
        if col.name == op_column:
            continue  # rule 6
        if col.name in order_by and table is not None and col.name not in known:
            continue  # rule 4
        want = normalized(col.type)
        have = known.get(col.name)
        if have is not None and normalized(have.type) != want:
            msg = (
                f"column {col.name!r} is {have.type} in {what} and {col.type} in the DataFrame; "
                f"cast it in the query (to {have.type}): the sink never retypes a column"
            )
            raise StageError(msg, column=col.name, code=StageCode.INPUT_SCHEMA)
        if have is None and table is not None:
            if not evolve_schema:
                msg = (
                    f"column {col.name!r} ({col.type}) is not in {what}; drop it from the "
                    "DataFrame, add it to the table, or pass evolve_schema=True to add it"
                )
                raise StageError(msg, column=col.name, code=StageCode.INPUT_SCHEMA)
            added.append(col.name)
        fields.append(pa.field(col.name, want, nullable=True))
    for name, have in known.items():  # rule 3
        if name not in arrow.names and not have.nullable:
            msg = (
                f"column {name!r} of {what} is NOT NULL and the DataFrame does not have it; add "
                "it to the query (the sink never drops a column)"
            )
            raise StageError(msg, column=name, code=StageCode.INPUT_SCHEMA)
    schema = pa.schema(fields)
    for name in partition_by:
        index = schema.get_field_index(name)
        if index < 0:
            msg = f"partition column {name!r} is not in the DataFrame"
            raise StageError(msg, column=name, code=StageCode.INPUT_SCHEMA)
        if not _partition_type(schema.field(index).type):
            msg = (
                f"partition column {name!r} is {schema.field(index).type}; partition by an "
                "integer, string, date or boolean column"
            )
            raise StageError(msg, column=name, code=StageCode.INPUT_SCHEMA)
    for name in keys:  # rule 6
        if schema.get_field_index(name) < 0:
            msg = f"key column {name!r} is not in the DataFrame"
            raise StageError(msg, column=name, code=StageCode.INPUT_SCHEMA)
    return TableLayout(
        schema=schema,
        added=tuple(added),
        create=table is None,
        keys=tuple(keys),
        op_column=op_column,
    )

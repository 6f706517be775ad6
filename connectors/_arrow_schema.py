"""The Arrow schema Spark hands a ``mapInArrow`` function, on every supported PySpark.

A connector checks its input's Arrow types against the Spark schema before the tasks run
(the PostgreSQL sink) or builds the batches it returns from it (``async_map``). Spark sends
timestamps in the session time zone and strings and binaries as large types when
``spark.sql.execution.arrow.useLargeVarTypes`` is on. PySpark's ``to_arrow_schema`` says
so itself from 4.2 on (``timezone=``, ``prefers_large_types=``); older releases (3.5 to
4.1) say UTC and small types, so :func:`arrow_schema` corrects their answer.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType


def arrow_schema(schema: StructType, *, timezone: str, large_types: bool = False) -> pa.Schema:
    """Return the Arrow schema of ``schema``'s rows as Spark's Arrow batches carry them.

    ``timezone``: the session time zone (the zone of every ``TimestampType`` column,
    nested ones too); ``large_types``: whether strings and binaries are Arrow's large types.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:  # PySpark 4.2 or later
        return to_arrow_schema(schema, timezone=timezone, prefers_large_types=large_types)
    import pyarrow as pa

    base = to_arrow_schema(schema)
    return pa.schema(
        [f.with_type(_corrected(f.type, timezone, large_types)) for f in base],
        metadata=base.metadata,
    )


def _corrected(t: pa.DataType, timezone: str, large: bool) -> pa.DataType:
    """``t`` with the zone of zoned timestamps set to ``timezone``, large types if ``large``."""
    import pyarrow as pa

    if pa.types.is_timestamp(t):  # TimestampNTZType has no zone and keeps none
        return t if t.tz is None else pa.timestamp(t.unit, tz=timezone)
    if pa.types.is_string(t):
        return pa.large_string() if large else t
    if pa.types.is_binary(t):
        return pa.large_binary() if large else t
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_corrected(t.value_type, timezone, large)))
    if pa.types.is_map(t):
        return pa.map_(
            _corrected(t.key_type, timezone, large), _corrected(t.item_type, timezone, large)
        )
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_corrected(f.type, timezone, large)) for f in t])
    return t

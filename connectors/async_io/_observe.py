"""``MetricsObservation``: the operator's metrics through Spark's observed metrics.

Spark Connect has no accumulators, but it has observed metrics (``DataFrame.observe``
with a ``pyspark.sql.Observation``): aggregates computed while an action runs and handed
to the driver with its result, in classic and Connect sessions alike. So each task ends
its partition with one **metrics row**: every column of the output at its type's zero and
the hidden column ``METRICS_COLUMN``
holding the partition's :class:`AsyncMetrics` as JSON. The plan observes
``collect_list(METRICS_COLUMN)`` (the list skips the data rows' nulls), then filters the
metrics rows out and drops the column: the caller's DataFrame has exactly the columns and
rows it would have without metrics. :attr:`MetricsObservation.value` merges the list.

Contract:

1. one observation per action: create it, pass it to ``async_map(..., metrics=obs)``,
   run one action on the result, read :attr:`MetricsObservation.value` (Spark hands
   observed metrics over once the action is done; an observation serves one DataFrame);
2. the metrics of a successful task attempt count once (Spark's observed metrics merge
   successful attempts); a recomputed stage counts again, so, as with accumulators, the
   numbers are for monitoring, not for correctness;
3. a partition whose output is not read to its end (a ``limit`` that stops early) sends
   no metrics row: its numbers are missing from the value;
4. batch DataFrames only (Spark refuses an ``Observation`` on a streaming DataFrame):
   in a streaming query, call ``async_map`` inside ``foreachBatch``, one observation per
   batch; :class:`txn.TxnCode.CONFIG` at ``async_map`` otherwise.
"""

from __future__ import annotations

import decimal
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connectors.async_io._errors import AsyncIOError
from connectors.async_io._metrics import AsyncMetrics
from txn import TxnCode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# The hidden column of the metrics rows (filtered out before the caller sees the rows).
METRICS_COLUMN = "__async_map_metrics"
_PARTS = "parts"


class MetricsObservation:
    """Gathers :class:`AsyncMetrics` of every partition through observed metrics.

    Works wherever ``DataFrame.observe`` does, Spark Connect included (module contract).
    ``name``: the observation's name (default: a unique one).
    """

    def __init__(self, name: str | None = None) -> None:
        """Create the observation (no Spark call: any session may run it)."""
        from pyspark.sql import Observation

        self.name = name or f"async_map_{uuid.uuid4().hex[:12]}"
        self._observation = Observation(self.name)

    def observe(self, df: DataFrame) -> DataFrame:
        """Observe the metrics rows of ``df``, then drop them and their column (driver)."""
        from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

        if df.isStreaming:
            msg = (
                "MetricsObservation works on batch DataFrames only (Spark refuses an "
                "Observation on a streaming one); call async_map inside foreachBatch"
            )
            raise AsyncIOError(msg, code=TxnCode.CONFIG)
        observed = df.observe(self._observation, F.collect_list(METRICS_COLUMN).alias(_PARTS))
        return observed.where(F.col(METRICS_COLUMN).isNull()).drop(METRICS_COLUMN)

    @property
    def value(self) -> AsyncMetrics:
        """The merged metrics of every partition of the observed action (after it ran)."""
        parts = self._observation.get.get(_PARTS) or []
        merged = AsyncMetrics()
        for part in parts:
            merged = merged.merge(AsyncMetrics.from_json(str(part)))
        return merged


def with_metrics_column(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Return a data batch with the hidden column appended (null on every row)."""
    return batch.append_column(METRICS_COLUMN, pa.nulls(batch.num_rows, pa.string()))


def metrics_row(schema: pa.Schema, metrics: AsyncMetrics) -> pa.RecordBatch:
    """Return the partition's metrics row in ``schema`` (the output's, hidden column last).

    Every other column holds its type's zero, never a null: Spark checks the declared
    nullability of each column, and a zero passes whatever it is.
    """
    arrays = [
        pa.array([metrics.to_json()], pa.string())
        if field.name == METRICS_COLUMN
        else pa.array([_zero(field.type)], field.type)
        for field in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _zero(kind: pa.DataType) -> Any:
    """Return the zero of ``kind`` (a placeholder cell; None only for the null type)."""
    if pa.types.is_null(kind):
        return None
    if pa.types.is_struct(kind):
        return {kind.field(i).name: _zero(kind.field(i).type) for i in range(kind.num_fields)}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        return []
    if pa.types.is_boolean(kind):
        return False
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return ""
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return b""
    if pa.types.is_decimal(kind):
        return decimal.Decimal(0)
    if pa.types.is_floating(kind):
        return 0.0
    return 0  # integers, dates, times, timestamps and durations take an integer

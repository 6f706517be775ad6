"""Spark glue: ``async_map`` over ``DataFrame.mapInArrow`` and a metrics accumulator."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.accumulators import Accumulator, AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StringType, StructField, StructType

from connectors._arrow_schema import arrow_schema
from connectors._worker_heap import freeze_worker_heap
from connectors.async_io._config import AsyncConfig
from connectors.async_io._errors import AsyncIOError
from connectors.async_io._function import check_async_callable
from connectors.async_io._metrics import AsyncMetrics
from connectors.async_io._observe import (
    METRICS_COLUMN,
    MetricsObservation,
    metrics_row,
    with_metrics_column,
)
from connectors.async_io._operator import AsyncOperator
from txn import TxnCode


class _MetricsParam(AccumulatorParam[AsyncMetrics]):
    """Accumulator algebra: zero is empty metrics, addition is ``AsyncMetrics.merge``."""

    def zero(self, value: AsyncMetrics) -> AsyncMetrics:
        return AsyncMetrics()

    def addInPlace(self, value1: AsyncMetrics, value2: AsyncMetrics) -> AsyncMetrics:  # noqa: N802
        return value1.merge(value2)


class MetricsAccumulator:
    """Gathers the AsyncMetrics of every partition into the driver (a Spark accumulator).

    Contract:
        1. Create it on the driver and pass it to ``async_map(..., metrics=acc)``.
        2. Each task adds its partition's metrics when its partition is fully processed.
        3. Read ``value`` on the driver after the action that ran the plan.

    Spark applies accumulator updates made inside transformations at least once: a
    retried task or a recomputed stage adds again. The counters are for monitoring, not
    for correctness. Failed task attempts add nothing. Call ``reset`` between micro-batches
    (e.g. at the start of a ``foreachBatch`` function) for per-batch numbers. Classic
    Spark only (Spark Connect has no accumulators: :class:`MetricsObservation` works there).
    """

    def __init__(self, spark: SparkSession) -> None:
        """Create the accumulator on ``spark``'s context.

        Raises:
            TxnCode.CONFIG: a Spark Connect session (no SparkContext, no accumulators).

        """
        try:
            sc = spark.sparkContext
        except (AttributeError, NotImplementedError) as exc:  # Connect: PySparkAttributeError
            msg = (
                "MetricsAccumulator needs Spark accumulators, which a Spark Connect session "
                "does not have; pass metrics=MetricsObservation() under Spark Connect"
            )
            raise AsyncIOError(msg, code=TxnCode.CONFIG) from exc
        self._accumulator: Accumulator[AsyncMetrics] = sc.accumulator(
            AsyncMetrics(), _MetricsParam()
        )

    @property
    def value(self) -> AsyncMetrics:
        """The merged metrics of every partition processed so far."""
        return self._accumulator.value

    def reset(self) -> None:
        """Start counting from zero again (driver only)."""
        self._accumulator.value = AsyncMetrics()

    @property
    def accumulator(self) -> Accumulator[AsyncMetrics]:
        """The underlying Spark accumulator (what travels to the tasks)."""
        return self._accumulator


@dataclass(frozen=True, kw_only=True)
class PartitionRunner:
    """The picklable function ``mapInArrow`` runs once per partition.

    ``observed``: the output's Arrow schema with ``METRICS_COLUMN`` (a
    :class:`MetricsObservation`): every batch gets the hidden column, and the partition
    ends with its metrics row (in the schema of the batches sent, else this one).
    """

    fn: Any
    enrichment_schema: pa.Schema
    config: AsyncConfig
    accumulator: Accumulator[AsyncMetrics] | None = None
    observed: pa.Schema | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Run the operator over this partition and report its metrics at the end."""
        freeze_worker_heap()
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        operator = AsyncOperator(self.fn, self.enrichment_schema, self.config, partition=partition)
        if self.observed is None:
            yield from operator.run(batches)
        else:
            schema = self.observed
            for batch in operator.run(batches):
                out = with_metrics_column(batch)
                schema = out.schema
                yield out
            yield metrics_row(schema, operator.metrics)
        if self.accumulator is not None:
            self.accumulator.add(operator.metrics)


def async_map(
    df: DataFrame,
    fn: Any,
    *,
    output_schema: StructType | str,
    config: AsyncConfig | None = None,
    metrics: MetricsAccumulator | MetricsObservation | None = None,
) -> DataFrame:
    """Enrich every row of ``df`` by awaiting ``fn`` with many requests in flight.

    Args:
        df: the input DataFrame (batch or streaming).
        fn: an ``async def`` function (or AsyncFunction) taking a row dict, or with
            ``config.batch_size`` a list of row dicts, and returning a mapping
            ``{enrichment column: value}`` (None: all null), or a list of them.
        output_schema: the enrichment columns only, as a StructType or a DDL string
            such as ``"score double, label string"``. They are appended, nullable, to
            the input columns and must not reuse an input column name.
        config: AsyncConfig (ordering, capacity, timeout, retries); defaults if None.
        metrics: optional MetricsAccumulator (classic Spark) or MetricsObservation (any
            session, Spark Connect included; batch DataFrames) that gathers every
            partition's metrics.

    Returns:
        A lazy DataFrame: input columns + enrichment columns. Rows dropped on timeout
        (``on_timeout='drop'``) are absent. Row order within a partition follows the
        mode: input order (ordered) or completion order within each Arrow batch.

    Raises:
        TxnCode.CONFIG: at once, for a bad fn, schema or config (no I/O is done).

    """
    check_async_callable(fn)
    cfg = config if config is not None else AsyncConfig()
    enrichment = _as_struct(output_schema)
    taken = {name.lower() for name in df.columns}
    clash = sorted(f.name for f in enrichment.fields if f.name.lower() in taken)
    if clash:
        msg = f"enrichment columns {clash} already exist in the input; rename them"
        raise AsyncIOError(msg, code=TxnCode.CONFIG)
    large = df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
    arrow = arrow_schema(enrichment, timezone="UTC", large_types=str(large).lower() == "true")
    AsyncOperator(fn, arrow, cfg)  # validates schema, config and timeout_default; no I/O
    nullable = [StructField(f.name, f.dataType, True, f.metadata) for f in enrichment.fields]
    result_schema = StructType([*df.schema.fields, *nullable])
    if not isinstance(metrics, MetricsObservation):
        runner = PartitionRunner(
            fn=fn,
            enrichment_schema=arrow,
            config=cfg,
            accumulator=metrics.accumulator if metrics else None,
        )
        return df.mapInArrow(runner, result_schema)
    if METRICS_COLUMN in taken or df.isStreaming:
        msg = (
            f"MetricsObservation needs a batch DataFrame without a column {METRICS_COLUMN!r} "
            "(in a streaming query, call async_map inside foreachBatch)"
        )
        raise AsyncIOError(msg, code=TxnCode.CONFIG)
    hidden = StructType([*result_schema.fields, StructField(METRICS_COLUMN, StringType(), True)])
    observed = arrow_schema(hidden, timezone="UTC", large_types=str(large).lower() == "true")
    runner = PartitionRunner(
        fn=fn, enrichment_schema=arrow, config=cfg, accumulator=None, observed=observed
    )
    return metrics.observe(df.mapInArrow(runner, hidden))


def _as_struct(schema: StructType | str) -> StructType:
    if isinstance(schema, str):
        try:
            parsed = _parse_ddl(schema)
        except Exception as exc:  # Spark raises several parse error types
            msg = f"output_schema {schema!r} is not a valid DDL schema: {exc}"
            raise AsyncIOError(msg, code=TxnCode.CONFIG) from exc
        schema = parsed  # type: ignore[assignment]
    if not isinstance(schema, StructType) or not schema.fields:
        msg = f"output_schema must be a non-empty StructType or DDL string, got {schema!r}"
        raise AsyncIOError(msg, code=TxnCode.CONFIG)
    return schema


def _parse_ddl(ddl: str) -> DataType:
    """Parse a DDL schema with ``StructType.fromDDL`` (PySpark 4.0 or later).

    PySpark 3.5 lacks it; its own DDL parser there (the one ``createDataFrame`` uses) asks
    the driver's JVM, which the caller of ``async_map`` has.
    """
    from_ddl = getattr(StructType, "fromDDL", None)
    if from_ddl is not None:
        parsed: DataType = from_ddl(ddl)
        return parsed
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl)

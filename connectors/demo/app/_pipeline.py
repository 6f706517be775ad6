"""The streaming query of the demo and the end-to-end tests: input -> KafkaSink / PostgresSink.

Two inputs (``PipelineConfig.source``), both giving the columns ``key STRING, value BINARY,
in_partition INT, in_offset BIGINT`` (:data:`SPARK_SCHEMA_DDL`):

* ``"files"`` (the default): chunk files (``connectors.demo.app._chunks``) read with
  Spark's file source, one file per micro-batch (``maxFilesPerTrigger=1``);
* ``"kafka"``: the input topic itself, read with the kit's ``read_committed`` source
  (format ``kafka-rc``) from the earliest offsets, at most ``max_offsets_per_trigger``
  offsets per micro-batch; ``in_partition``/``in_offset`` are the record's Kafka position.

In both, Spark's checkpoint pins what batch ``N`` covers (a file name, or an offset range)
before the batch runs, so a replayed batch holds exactly the rows it held before.

Three sinks (``PipelineConfig.sink``, built by :func:`build_sink`):

* ``"kafka"`` (the default): ``KafkaSink`` into ``output_topic``;
* ``"postgres"``: ``PostgresSink`` into ``postgres_table`` (the rows of
  ``connectors.demo.app._tables``: the table is created by the caller, with
  :func:`create_table`); ``output_topic`` is not used;
* ``"kafka+postgres"``: both in one epoch (``connectors.stage.CompositeSink``, sink id
  ``sink_id``; the members are ``{sink_id}-kafka`` and ``{sink_id}-pg``, see
  :func:`member_ids`), each with ``parallelism`` write partitions;
* ``"delta"`` / ``"iceberg"``: ``DeltaSink`` / ``IcebergSink`` into the table at
  ``lake_path`` (the same rows as the PostgreSQL table; created from the stream), and
  ``"kafka+delta"`` / ``"kafka+iceberg"``: the topic and that table in one epoch (members
  ``{sink_id}-kafka`` and ``{sink_id}-lake``).

Contract of :func:`run_query`:

1. open the input stream of ``cfg.source`` (above);
2. hand every micro-batch to the sink through ``foreachBatch`` with the checkpoint
   location of the config, rows ordered by their input position within each write partition
   (:data:`ORDER_COLUMNS`), so the per-key output order follows the input (and an upsert
   keeps the last change of each key);
3. after each batch call ``on_epoch`` with an :class:`EpochLine`; ``fault_plan`` (a plan
   file, the demo's ``--chaos`` and the chaos tests): every batch runs with it injected
   (``connectors.testing.inject_faults``) in the process that runs the ``foreachBatch``
   call, so its driver steps fire there and its task steps in the batch's write tasks;
4. ``resume_from_output``: the sink is built with ``resume="from-output"`` and the Kafka
   source starts at ``connectors.kafka.resume_offsets`` (docs/operations.md, "Changing a
   query"); ``changed_query``: the query writes one more column (a header for Kafka, the
   table's ``note`` column, which the caller adds, for PostgreSQL);
5. run with ``trigger(availableNow=True)``: the query stops once everything present at its
   start is written (every chunk file, or the topic up to its last stable offset), and a
   restart with the same checkpoint resumes (and replays an in-doubt batch).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from connectors.demo.app._chunks import SPARK_SCHEMA_DDL
from connectors.demo.app._config import (
    ICEBERG_TABLE,
    KAFKA_PROJECTION,
    LAKE_FORMATS,
    ORDER_COLUMNS,
    SINK_BOTH,
    SINK_DELTA,
    SINK_ICEBERG,
    SINK_KAFKA,
    SINK_KAFKA_DELTA,
    SINK_KAFKA_ICEBERG,
    SINK_POSTGRES,
    SOURCE_KAFKA,
    EpochLine,
    PipelineConfig,
    lake_catalog,
    member_ids,
)
from connectors.demo.app._tables import table_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from connectors.kafka import KafkaSink
    from connectors.postgres import PostgresSink
    from connectors.stage import TransactionalSink


def make_spark(master: str, app_name: str = "eos-demo") -> SparkSession:
    """Create a local SparkSession suited to the sink (task retries come from ``master``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.worker.faulthandler.enabled", "true")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def build_sink(cfg: PipelineConfig) -> TransactionalSink:
    """Construct the sink of ``cfg.sink`` (module docstring; no network I/O)."""
    # checkpoint_location: the query binding reads the query's id there (under Spark Connect
    # the only way; on a classic session it is checked against the running query).
    stage: dict[str, Any] = {
        "guarantee": cfg.guarantee,
        "mode": cfg.mode,
        "checkpoint_location": cfg.checkpoint,
    }
    if cfg.stage_retries is not None:
        stage["stage_retries"] = cfg.stage_retries
    if cfg.resume_from_output:
        stage["resume"] = "from-output"
    if cfg.sink == SINK_KAFKA:
        return _kafka_sink(cfg, cfg.sink_id, epoch_log=cfg.epoch_log, **stage)
    if cfg.sink == SINK_POSTGRES:
        return _postgres_sink(cfg, cfg.sink_id, epoch_log=cfg.epoch_log, **stage)
    if cfg.sink in (SINK_DELTA, SINK_ICEBERG):
        return _lake_sink(cfg, cfg.sink_id, epoch_log=cfg.epoch_log, **stage)
    from connectors.stage import CompositeSink

    kafka_id, table_id = member_ids(cfg.sink_id, cfg.sink)
    table = (
        _postgres_sink(cfg, table_id, guarantee=cfg.guarantee)
        if cfg.sink == SINK_BOTH
        else _lake_sink(cfg, table_id, guarantee=cfg.guarantee)
    )
    members = (
        _kafka_sink(cfg, kafka_id, guarantee=cfg.guarantee),
        (table, _table_rows_of(cfg)),
    )
    return CompositeSink(members, sink_id=cfg.sink_id, epoch_log=cfg.epoch_log, **stage)


def _kafka_sink(cfg: PipelineConfig, sink_id: str, **options: Any) -> KafkaSink:
    from connectors.kafka import KafkaSink

    return KafkaSink(
        cfg.bootstrap,
        cfg.output_topic,
        sink_id,
        parallelism=cfg.parallelism,
        transaction_timeout_ms=cfg.transaction_timeout_ms,
        producer_config=dict(cfg.producer_config) or None,
        client_config=dict(cfg.client_config) or None,
        order_by=ORDER_COLUMNS,
        on_bad_record=cfg.on_bad_record,
        producer_strategy=cfg.producer_strategy,
        **({} if cfg.producer_lanes is None else {"producer_lanes": cfg.producer_lanes}),
        **options,
    )


def _postgres_sink(cfg: PipelineConfig, sink_id: str, **options: Any) -> PostgresSink:
    from connectors.postgres import PostgresSink

    assert cfg.postgres_dsn and cfg.postgres_table  # noqa: S101 - checked by the config
    keys = () if cfg.postgres_write_mode == "append" else ("key",)
    return PostgresSink(
        cfg.postgres_dsn,
        cfg.postgres_table,
        sink_id,
        schema=cfg.postgres_schema,
        control_schema=cfg.postgres_control_schema,
        write_mode=cfg.postgres_write_mode,
        key_columns=keys,
        commit_protocol=cfg.postgres_protocol,
        create_table=cfg.postgres_create_table,
        evolve_schema=cfg.postgres_evolve_schema,
        parallelism=cfg.parallelism,
        order_by=ORDER_COLUMNS,
        on_bad_record=cfg.on_bad_record,
        **options,
    )


def _faults(cfg: PipelineConfig) -> AbstractContextManager[object]:
    """Return the block a batch runs in: ``cfg.fault_plan`` injected, if it names one."""
    if not cfg.fault_plan:
        return contextlib.nullcontext()
    from connectors.testing.faults import FaultPlan, inject_faults

    return inject_faults(FaultPlan(cfg.fault_plan), sink_id=cfg.sink_id)


def _lake_sink(cfg: PipelineConfig, sink_id: str, **options: Any) -> TransactionalSink:
    """Return the table sink of ``cfg.sink`` at ``lake_path`` (the table created from the stream)."""
    from connectors.lakehouse import DeltaSink, IcebergSink

    assert cfg.lake_path  # noqa: S101 - checked by the config
    os.makedirs(cfg.lake_path, exist_ok=True)  # the SQLite catalog's directory
    common: dict[str, Any] = {
        "parallelism": cfg.parallelism,
        "order_by": ORDER_COLUMNS,
        "create_table": True,
        **options,
    }
    if common.get("epoch_log") is None:
        common["epoch_log"] = f"{cfg.lake_path}/{sink_id}.epochlog"
    if LAKE_FORMATS[cfg.sink] == SINK_DELTA:
        return DeltaSink(f"{cfg.lake_path}/delta", sink_id, **common)
    return IcebergSink(
        ICEBERG_TABLE,
        sink_id,
        catalog="eos",
        catalog_properties=lake_catalog(cfg.lake_path),
        **common,
    )


def _table_rows_of(cfg: PipelineConfig) -> Callable[[DataFrame], DataFrame]:
    mode = cfg.postgres_write_mode if cfg.writes_postgres else "append"

    def select(df: DataFrame) -> DataFrame:
        return table_rows(df, mode)

    return select


# The column a changed query adds (module step 4): a header (Kafka), ``note`` (PostgreSQL).
CHANGED_HEADERS = "array(named_struct('key', 'v', 'value', CAST('2' AS BINARY))) AS headers"
CHANGED_NOTE = "'v2' AS note"


def _changed(
    cfg: PipelineConfig, frame: Callable[[DataFrame], DataFrame]
) -> Callable[[DataFrame], DataFrame]:
    if not cfg.changed_query:
        return frame
    extra = CHANGED_NOTE if cfg.sink == SINK_POSTGRES else CHANGED_HEADERS
    return lambda df: frame(df).selectExpr("*", extra)


def input_stream(
    spark: SparkSession, cfg: PipelineConfig, starting_offsets: str = "earliest"
) -> DataFrame:
    """Open the streaming DataFrame of ``cfg.source`` (module step 1), in the input schema."""
    if cfg.source == SOURCE_KAFKA:
        from connectors.kafka import kafka_options, register

        reader = (
            spark.readStream.format(register(spark))
            .options(**kafka_options(cfg.bootstrap, cfg.client_config))
            .option("subscribe", cfg.input_topic)
            .option("startingOffsets", starting_offsets)
        )
        if cfg.max_offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
        return reader.load().selectExpr(*KAFKA_PROJECTION)
    return (
        spark.readStream.schema(SPARK_SCHEMA_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(cfg.input_dir)
    )


def run_query(
    spark: SparkSession,
    cfg: PipelineConfig,
    on_epoch: Callable[[EpochLine], None] | None = None,
    on_start: Callable[[TransactionalSink, StreamingQuery], None] | None = None,
) -> None:
    """Run the query of ``cfg`` to the end of its input (module contract).

    ``on_start(sink, query)`` is called once the query runs (e.g. to install a handler that
    stops it gracefully).
    """
    sink = build_sink(cfg)
    single_table = cfg.sink in (SINK_POSTGRES, SINK_DELTA, SINK_ICEBERG)
    frame = _changed(cfg, _table_rows_of(cfg) if single_table else (lambda df: df))
    # a composite: both members get every input row; count each row once.
    members = 2 if cfg.sink in (SINK_BOTH, SINK_KAFKA_DELTA, SINK_KAFKA_ICEBERG) else 1

    def write(df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        batch = frame(df)
        if cfg.postgres_gained_columns and batch_id >= cfg.postgres_gain_from_batch:
            batch = batch.selectExpr("*", *cfg.postgres_gained_columns)
        with _faults(cfg):
            result = sink(batch, batch_id)
        if on_epoch is not None:
            on_epoch(
                EpochLine(
                    epoch=batch_id,
                    rows=sum(r.rows for r in result.reports) // members,
                    skipped=result.skipped,
                    committed=result.committed,
                    seconds=round(time.monotonic() - started, 3),
                )
            )

    start = "earliest"
    if cfg.resume_from_output:
        from connectors.kafka import resume_offsets

        start = resume_offsets(sink, cfg.bootstrap, client_config=dict(cfg.client_config) or None)
    stream = input_stream(spark, cfg, start)
    query = (
        stream.writeStream.foreachBatch(write)
        .option("checkpointLocation", cfg.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    if on_start is not None:
        on_start(sink, query)
    try:
        query.awaitTermination()
    finally:
        sink.close()

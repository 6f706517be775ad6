"""The streaming query of the demo and the end-to-end tests: input -> KafkaSink.

Two inputs (``PipelineConfig.source``), both giving the columns ``key STRING, value BINARY,
in_partition INT, in_offset BIGINT`` (:data:`SPARK_SCHEMA_DDL`):

* ``"files"`` (the default): staged chunk files (``connectors.demo._staging``) read with
  Spark's file source, one file per micro-batch (``maxFilesPerTrigger=1``);
* ``"kafka"``: the input topic itself, read with the kit's ``read_committed`` source
  (format ``kafka-rc``) from the earliest offsets, at most ``max_offsets_per_trigger``
  offsets per micro-batch; ``in_partition``/``in_offset`` are the record's Kafka position.

In both, Spark's checkpoint pins what batch ``N`` covers (a file name, or an offset range)
before the batch runs, so a replayed batch holds exactly the rows it held before.

Contract of :func:`run_query`:

1. open the input stream of ``cfg.source`` (above);
2. hand every micro-batch to ``KafkaSink`` through ``foreachBatch`` with the checkpoint
   location of the config, rows ordered by their input position within each write partition
   (:data:`ORDER_COLUMNS`), so the per-key output order follows the input;
3. after each batch call ``on_epoch`` with an :class:`EpochLine`;
4. run with ``trigger(availableNow=True)``: the query stops once everything present at its
   start is written (every staged file, or the topic up to its last stable offset), and a
   restart with the same checkpoint resumes (and replays an in-doubt batch).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from connectors.demo._staging import SPARK_SCHEMA_DDL

# Seconds Spark waits for a python worker to connect back; generous on a busy machine.
PYTHON_WORKER_TIMEOUT_S = 120
# Order columns handed to the sink: input position, which follows the per-key input order.
ORDER_COLUMNS = ("in_partition", "in_offset")
# Input sources of the pipeline (``PipelineConfig.source``).
SOURCE_FILES = "files"
SOURCE_KAFKA = "kafka"
SOURCES = (SOURCE_FILES, SOURCE_KAFKA)
# The kafka-rc columns projected onto the pipeline's input schema (SPARK_SCHEMA_DDL).
KAFKA_PROJECTION = (
    "CAST(key AS STRING) AS key",
    "value",
    "partition AS in_partition",
    "offset AS in_offset",
)


class PipelineConfigError(ValueError):
    """A :class:`PipelineConfig` is inconsistent; the message names the field to fix."""


@dataclass(frozen=True)
class PipelineConfig:
    """Everything one run of the streaming query needs; JSON- and pickle-friendly.

    ``source="files"`` reads ``input_dir`` (``input_topic`` and ``max_offsets_per_trigger``
    are ignored); ``source="kafka"`` reads ``input_topic`` on ``bootstrap`` (``input_dir`` is
    ignored) and needs ``input_topic``. Validated at construction, without network I/O.

    Raises:
        PipelineConfigError: unknown ``source``, ``source="kafka"`` without ``input_topic``,
            or a ``max_offsets_per_trigger`` that is not positive.

    """

    bootstrap: str
    input_dir: str
    checkpoint: str
    output_topic: str
    sink_id: str
    guarantee: str = "exactly-once"
    mode: str = "aligned"
    parallelism: int | None = 2
    epoch_log: str | None = None
    fault_plan: str | None = None
    master: str = "local[2,4]"
    transaction_timeout_ms: int = 60_000
    stage_retries: int | None = None  # None: the sink's default
    producer_config: Mapping[str, str] = field(default_factory=dict)
    source: str = SOURCE_FILES
    input_topic: str | None = None
    max_offsets_per_trigger: int | None = None  # None: the whole topic in one batch

    def __post_init__(self) -> None:
        """Validate the source fields (see the class docstring)."""
        if self.source not in SOURCES:
            msg = f"source must be one of {', '.join(SOURCES)}, got {self.source!r}"
            raise PipelineConfigError(msg)
        if self.source == SOURCE_KAFKA and not self.input_topic:
            msg = 'source="kafka" needs input_topic: the topic to read'
            raise PipelineConfigError(msg)
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger <= 0:
            msg = f"max_offsets_per_trigger must be positive, got {self.max_offsets_per_trigger}"
            raise PipelineConfigError(msg)

    def to_json(self) -> str:
        """Serialize for the subprocess app."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PipelineConfig:
        """Parse what :meth:`to_json` wrote."""
        return cls(**json.loads(text))


@dataclass(frozen=True)
class EpochLine:
    """What one finished micro-batch reported (printed as a JSON line by the app)."""

    epoch: int
    rows: int
    skipped: bool
    committed: bool
    seconds: float = 0.0

    def to_line(self) -> str:
        """Render as the app's stdout line."""
        return "EPOCH " + json.dumps(asdict(self))

    @classmethod
    def parse(cls, line: str) -> EpochLine | None:
        """Parse an app stdout line; ``None`` if it is not an epoch line."""
        if not line.startswith("EPOCH "):
            return None
        return cls(**json.loads(line[len("EPOCH "):]))


def make_spark(master: str, app_name: str = "eos-demo") -> Any:
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


def build_sink(cfg: PipelineConfig) -> Any:
    """Construct the ``KafkaSink`` described by ``cfg`` (no network I/O)."""
    from connectors.kafka import FaultPlan, KafkaSink

    extra: dict[str, Any] = {}
    if cfg.stage_retries is not None:
        extra["stage_retries"] = cfg.stage_retries
    return KafkaSink(
        cfg.bootstrap,
        cfg.output_topic,
        cfg.sink_id,
        guarantee=cfg.guarantee,
        mode=cfg.mode,
        parallelism=cfg.parallelism,
        epoch_log=cfg.epoch_log,
        transaction_timeout_ms=cfg.transaction_timeout_ms,
        producer_config=dict(cfg.producer_config) or None,
        order_by=ORDER_COLUMNS,
        fault_plan=FaultPlan(cfg.fault_plan) if cfg.fault_plan else None,
        **extra,
    )


def input_stream(spark: Any, cfg: PipelineConfig) -> Any:
    """Open the streaming DataFrame of ``cfg.source`` (module step 1), in the input schema."""
    if cfg.source == SOURCE_KAFKA:
        from connectors.kafka_source import register

        reader = (
            spark.readStream.format(register(spark))
            .option("kafka.bootstrap.servers", cfg.bootstrap)
            .option("subscribe", cfg.input_topic)
            .option("startingOffsets", "earliest")
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
    spark: Any, cfg: PipelineConfig, on_epoch: Callable[[EpochLine], None] | None = None
) -> None:
    """Run the query of ``cfg`` to the end of its input (module contract)."""
    sink = build_sink(cfg)

    def write(df: Any, batch_id: int) -> None:
        started = time.monotonic()
        result = sink(df, batch_id)
        if on_epoch is not None:
            rows = sum(r.rows for r in result.reports)
            on_epoch(EpochLine(batch_id, rows, result.skipped, result.committed,
                               round(time.monotonic() - started, 3)))

    stream = input_stream(spark, cfg)
    query = (
        stream.writeStream.foreachBatch(write)
        .option("checkpointLocation", cfg.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        sink.close()

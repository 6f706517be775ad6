"""The streaming query of the demo and the end-to-end tests: chunk files -> KafkaSink.

Contract of :func:`run_query`:

1. read the staged chunk files with Spark's file source, one file per micro-batch
   (``maxFilesPerTrigger=1``), so a replayed batch ``N`` holds exactly the rows it held before;
2. hand every micro-batch to ``KafkaSink`` through ``foreachBatch`` with the checkpoint
   location of the config, rows ordered by their input position within each write partition;
3. after each batch call ``on_epoch`` with an :class:`EpochLine`;
4. run with ``trigger(availableNow=True)``: the query stops once every staged file is written,
   and a restart with the same checkpoint resumes (and replays an in-doubt batch).
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


@dataclass(frozen=True)
class PipelineConfig:
    """Everything one run of the streaming query needs; JSON- and pickle-friendly."""

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


def run_query(
    spark: Any, cfg: PipelineConfig, on_epoch: Callable[[EpochLine], None] | None = None
) -> None:
    """Run the query of ``cfg`` to the end of the staged files (module contract)."""
    sink = build_sink(cfg)

    def write(df: Any, batch_id: int) -> None:
        started = time.monotonic()
        result = sink(df, batch_id)
        if on_epoch is not None:
            rows = sum(r.rows for r in result.reports)
            on_epoch(EpochLine(batch_id, rows, result.skipped, result.committed,
                               round(time.monotonic() - started, 3)))

    stream = (
        spark.readStream.schema(SPARK_SCHEMA_DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(cfg.input_dir)
    )
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

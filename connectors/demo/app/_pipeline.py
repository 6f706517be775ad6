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
  :func:`member_ids`), each with ``parallelism`` write partitions.

Contract of :func:`run_query`:

1. open the input stream of ``cfg.source`` (above);
2. hand every micro-batch to the sink through ``foreachBatch`` with the checkpoint
   location of the config, rows ordered by their input position within each write partition
   (:data:`ORDER_COLUMNS`), so the per-key output order follows the input (and an upsert
   keeps the last change of each key);
3. after each batch call ``on_epoch`` with an :class:`EpochLine`;
4. ``resume_from_output``: the sink is built with ``resume="from-output"`` and the Kafka
   source starts at ``connectors.kafka.resume_offsets`` (docs/operations.md, "Changing a
   query"); ``changed_query``: the query writes one more column (a header for Kafka, the
   table's ``note`` column, which the caller adds, for PostgreSQL);
5. run with ``trigger(availableNow=True)``: the query stops once everything present at its
   start is written (every chunk file, or the topic up to its last stable offset), and a
   restart with the same checkpoint resumes (and replays an in-doubt batch).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from connectors.demo.app._chunks import SPARK_SCHEMA_DDL
from connectors.demo.app._tables import table_rows
from connectors.stage import BAD_RECORD_POLICIES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from connectors.kafka import KafkaSink
    from connectors.postgres import PostgresSink
    from connectors.stage import TransactionalSink

# Seconds Spark waits for a python worker to connect back; generous on a busy machine.
PYTHON_WORKER_TIMEOUT_S = 120
# Order columns handed to the sink: input position, which follows the per-key input order.
ORDER_COLUMNS = ("in_partition", "in_offset")
# Input sources of the pipeline (``PipelineConfig.source``).
SOURCE_FILES = "files"
SOURCE_KAFKA = "kafka"
SOURCES = (SOURCE_FILES, SOURCE_KAFKA)
# Sinks of the pipeline (``PipelineConfig.sink``).
SINK_KAFKA = "kafka"
SINK_POSTGRES = "postgres"
SINK_BOTH = "kafka+postgres"
SINKS = (SINK_KAFKA, SINK_POSTGRES, SINK_BOTH)
# Write modes and commit protocols of the PostgreSQL sink (``connectors.postgres.WriteMode``,
# ``CommitProtocol``; spelled out here so a Kafka-only config needs no psycopg).
POSTGRES_WRITE_MODES = ("append", "upsert", "changelog")
POSTGRES_PROTOCOLS = ("auto", "two-phase", "idempotency-table")
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
    ignored) and needs ``input_topic``. ``sink`` (module docstring) chooses the output; the
    ``postgres_*`` fields are the PostgreSQL sink's options (``postgres_dsn`` and
    ``postgres_table`` needed when it writes; ``postgres_protocol`` is its
    ``commit_protocol``; ``postgres_control_schema`` holds its markers and epoch log table;
    ``postgres_create_table`` / ``postgres_evolve_schema`` its ``create_table`` /
    ``evolve_schema``; ``postgres_gained_columns``: Spark SQL expressions the table rows
    gain from batch ``postgres_gain_from_batch`` on, a stream that gains columns).
    ``on_bad_record``: the policy of every sink of the query (``"fail"``, ``"dead-letter"``
    into its default dead-letter topic or table, or ``"skip"``; docs/bad-records.md).
    ``epoch_log``: a file path, or None for the sink's own log (the Kafka epoch log topic,
    the PostgreSQL epoch log table; ``kafka+postgres``: the Kafka one). ``client_config``:
    the librdkafka settings every Kafka client of the query shares (the sink's option of
    that name, the source's ``kafka.*`` options); never written by :meth:`to_json` nor shown
    in the repr: :class:`~connectors.demo.app.AppProcess` hands it to the app in its
    environment (``EOS_KAFKA_*``). Validated at construction, without network I/O.

    Raises:
        PipelineConfigError: unknown ``source``, ``sink``, write mode, protocol or policy,
            ``source="kafka"`` without ``input_topic``, a PostgreSQL sink without DSN or
            table, or a ``max_offsets_per_trigger`` that is not positive.

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
    sink: str = SINK_KAFKA
    postgres_dsn: str | None = None
    postgres_table: str | None = None
    postgres_schema: str = "public"
    postgres_control_schema: str = "eos"
    postgres_write_mode: str = "append"
    postgres_protocol: str = "auto"
    postgres_create_table: bool = False
    postgres_evolve_schema: bool = False
    postgres_gained_columns: tuple[str, ...] = ()
    postgres_gain_from_batch: int = 0
    on_bad_record: str = "fail"
    client_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    resume_from_output: bool = False
    changed_query: bool = False

    def __post_init__(self) -> None:
        """Validate the source and sink fields (see the class docstring)."""
        _one_of("source", self.source, SOURCES)
        _one_of("sink", self.sink, SINKS)
        _one_of("postgres_write_mode", self.postgres_write_mode, POSTGRES_WRITE_MODES)
        _one_of("postgres_protocol", self.postgres_protocol, POSTGRES_PROTOCOLS)
        _one_of("on_bad_record", self.on_bad_record, BAD_RECORD_POLICIES)
        if self.writes_postgres and not (self.postgres_dsn and self.postgres_table):
            msg = f"sink={self.sink!r} needs postgres_dsn and postgres_table: where to write"
            raise PipelineConfigError(msg)
        object.__setattr__(self, "postgres_gained_columns", tuple(self.postgres_gained_columns))
        if self.postgres_gained_columns and self.sink != SINK_POSTGRES:
            msg = 'postgres_gained_columns needs sink="postgres"'
            raise PipelineConfigError(msg)
        if self.source == SOURCE_KAFKA and not self.input_topic:
            msg = 'source="kafka" needs input_topic: the topic to read'
            raise PipelineConfigError(msg)
        if self.resume_from_output and self.source != SOURCE_KAFKA:
            msg = 'resume_from_output needs source="kafka": only Kafka input can resume'
            raise PipelineConfigError(msg)
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger <= 0:
            msg = f"max_offsets_per_trigger must be positive, got {self.max_offsets_per_trigger}"
            raise PipelineConfigError(msg)

    @property
    def writes_kafka(self) -> bool:
        """True when the query writes the output topic."""
        return self.sink in (SINK_KAFKA, SINK_BOTH)

    @property
    def writes_postgres(self) -> bool:
        """True when the query writes the PostgreSQL table."""
        return self.sink in (SINK_POSTGRES, SINK_BOTH)

    def to_json(self) -> str:
        """Serialize for the subprocess app (without ``client_config``: class doc)."""
        doc = asdict(self)
        del doc["client_config"]
        return json.dumps(doc)

    @classmethod
    def from_json(cls, text: str, environ: Mapping[str, str] | None = None) -> PipelineConfig:
        """Parse what :meth:`to_json` wrote; ``client_config`` from ``environ``'s variables."""
        from connectors.ops._properties import environment_settings

        shared = environment_settings(os.environ if environ is None else environ)
        return cls(**json.loads(text), client_config=shared)


def _one_of(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        msg = f"{name} must be one of {', '.join(choices)}, got {value!r}"
        raise PipelineConfigError(msg)


def member_ids(sink_id: str) -> tuple[str, str]:
    """Return the sink ids of the Kafka and the PostgreSQL member of ``sink="kafka+postgres"``."""
    return f"{sink_id}-kafka", f"{sink_id}-pg"


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
        return cls(**json.loads(line[len("EPOCH ") :]))


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
    from connectors.testing.faults import FaultPlan

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
    if cfg.fault_plan:
        stage["fault_plan"] = FaultPlan(cfg.fault_plan)
    if cfg.sink == SINK_KAFKA:
        return _kafka_sink(cfg, cfg.sink_id, epoch_log=cfg.epoch_log, **stage)
    if cfg.sink == SINK_POSTGRES:
        return _postgres_sink(cfg, cfg.sink_id, epoch_log=cfg.epoch_log, **stage)
    from connectors.stage import CompositeSink

    kafka_id, pg_id = member_ids(cfg.sink_id)
    members = (
        _kafka_sink(cfg, kafka_id, guarantee=cfg.guarantee),
        (_postgres_sink(cfg, pg_id, guarantee=cfg.guarantee), _table_rows_of(cfg)),
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


def _table_rows_of(cfg: PipelineConfig) -> Callable[[DataFrame], DataFrame]:
    mode = cfg.postgres_write_mode

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
    frame = _changed(cfg, _table_rows_of(cfg) if cfg.sink == SINK_POSTGRES else (lambda df: df))
    # kafka+postgres: both members get every input row; count each row once.
    members = 2 if cfg.sink == SINK_BOTH else 1

    def write(df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        batch = frame(df)
        if cfg.postgres_gained_columns and batch_id >= cfg.postgres_gain_from_batch:
            batch = batch.selectExpr("*", *cfg.postgres_gained_columns)
        result = sink(batch, batch_id)
        if on_epoch is not None:
            on_epoch(
                EpochLine(
                    batch_id,
                    sum(r.rows for r in result.reports) // members,
                    result.skipped,
                    result.committed,
                    round(time.monotonic() - started, 3),
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

"""The demo pipeline's configuration (:class:`PipelineConfig`) and its epoch line.

What each field means for the query: ``connectors.demo.app._pipeline``'s module docstring.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from connectors.kafka import PRODUCER_STRATEGIES
from connectors.stage._options import BAD_RECORD_POLICIES

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
SINK_DELTA = "delta"
SINK_ICEBERG = "iceberg"
SINK_KAFKA_DELTA = "kafka+delta"
SINK_KAFKA_ICEBERG = "kafka+iceberg"
SINKS = (
    SINK_KAFKA,
    SINK_POSTGRES,
    SINK_BOTH,
    SINK_DELTA,
    SINK_ICEBERG,
    SINK_KAFKA_DELTA,
    SINK_KAFKA_ICEBERG,
)
# The table sinks' kinds (connectors.lakehouse) by sink, and the Iceberg table they write.
LAKE_FORMATS = {
    SINK_DELTA: SINK_DELTA,
    SINK_KAFKA_DELTA: SINK_DELTA,
    SINK_ICEBERG: SINK_ICEBERG,
    SINK_KAFKA_ICEBERG: SINK_ICEBERG,
}
ICEBERG_TABLE = "eos.t"
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


@dataclass(frozen=True, kw_only=True)
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
    ``lake_path``: where the table sinks (``delta``, ``iceberg``, ``kafka+delta``,
    ``kafka+iceberg``) write: the Delta table's directory, or the directory of an Iceberg
    SQLite catalog and its warehouse (:func:`lake_catalog`, table :data:`ICEBERG_TABLE`);
    the table is created from the stream.
    ``on_bad_record``: the policy of every sink of the query (``"fail"``, ``"dead-letter"``
    into its default dead-letter topic or table, or ``"skip"``; docs/bad-records.md).
    ``producer_strategy``: the Kafka sink's (``"pooled"`` or ``"reference"``;
    docs/kafka-sink.md, "Producer strategies"); ``producer_lanes`` its worker lanes per
    write partition (None: the sink's default; docs/kafka-sink.md, "Producer lanes").
    ``epoch_log``: a file path, or None for the sink's own log (the Kafka epoch log topic,
    the PostgreSQL epoch log table; ``kafka+postgres``: the Kafka one). ``fault_plan``: a
    ``connectors.testing.FaultPlan`` file injected around every batch (``run_query``; the
    demo's ``--chaos`` and the chaos tests), not a sink option. ``client_config``:
    the librdkafka settings every Kafka client of the query shares (the sink's option of
    that name, the source's ``kafka.*`` options); never written by :meth:`to_json` nor shown
    in the repr: :class:`~connectors.demo.app.AppProcess` hands it to the app in its
    environment (``EOS_KAFKA_*``). Validated at construction, without network I/O.

    Raises:
        PipelineConfigError: unknown ``source``, ``sink``, write mode, protocol, policy or
            producer strategy,
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
    producer_strategy: str = "pooled"
    producer_lanes: int | None = None  # None: the Kafka sink's default
    client_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    lake_path: str | None = None
    resume_from_output: bool = False
    changed_query: bool = False

    def __post_init__(self) -> None:
        """Validate the source and sink fields (see the class docstring)."""
        _one_of("source", self.source, SOURCES)
        _one_of("sink", self.sink, SINKS)
        _one_of("postgres_write_mode", self.postgres_write_mode, POSTGRES_WRITE_MODES)
        _one_of("postgres_protocol", self.postgres_protocol, POSTGRES_PROTOCOLS)
        _one_of("on_bad_record", self.on_bad_record, BAD_RECORD_POLICIES)
        _one_of("producer_strategy", self.producer_strategy, PRODUCER_STRATEGIES)
        if self.writes_postgres and not (self.postgres_dsn and self.postgres_table):
            msg = f"sink={self.sink!r} needs postgres_dsn and postgres_table: where to write"
            raise PipelineConfigError(msg)
        if self.writes_lake and not self.lake_path:
            msg = f"sink={self.sink!r} needs lake_path: where the table is"
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
        return self.sink in (SINK_KAFKA, SINK_BOTH, SINK_KAFKA_DELTA, SINK_KAFKA_ICEBERG)

    @property
    def writes_lake(self) -> bool:
        """True when the query writes a Delta Lake or Iceberg table."""
        return self.sink in LAKE_FORMATS

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


def member_ids(sink_id: str, sink: str = SINK_BOTH) -> tuple[str, str]:
    """Return the sink ids of the Kafka and the table member of a composite ``sink``."""
    return f"{sink_id}-kafka", f"{sink_id}-pg" if sink == SINK_BOTH else f"{sink_id}-lake"


def lake_catalog(lake_path: str) -> dict[str, str]:
    """Return the properties of the Iceberg SQLite catalog under ``lake_path``."""
    return {
        "type": "sql",
        "uri": f"sqlite:///{lake_path}/catalog.db",
        "warehouse": f"file://{lake_path}/warehouse",
    }


@dataclass(frozen=True, kw_only=True)
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

"""Validated, picklable configuration of a Kafka sink.

Everything is checked at construction without network I/O; the result travels to the
write tasks, so it is a frozen dataclass of plain values. The options common to every
sink on the generic stage (guarantee, mode, parallelism, stage_retries, vote_channel,
order_by, ...) are inherited from :class:`connectors.stage.StageOptions`; the
Kafka ones are defined here, once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from connectors.kafka import _client
from connectors.kafka._client import Cluster, Settings, StateTopicDurability, librdkafka_settings
from connectors.kafka._errors import KafkaConnectorError, client_config_error, config_error
from connectors.kafka._formats import RecordFormat, parse_formats
from connectors.kafka._sink._strategy import PRODUCER_STRATEGIES, ProducerStrategy
from connectors.stage import StageOptions
from connectors.stage._options import build_config
from txn import Guarantee, TxnCode

# Version of the row-routing and checksum scheme; part of the fingerprint so that a
# change of scheme while an epoch is in doubt is detected instead of mis-compared.
SCHEME_VERSION = 1
# Smallest accepted transaction timeout: below one second a busy task cannot even
# flush its batch before the broker aborts the transaction.
MIN_TRANSACTION_TIMEOUT_MS = 1_000
# Fraction of transaction_timeout_ms an epoch's write stage may take before the sink
# warns: beyond it a slower batch risks being aborted by the broker's timeout.
TIMEOUT_WARN_FRACTION = 0.5
# librdkafka's default message.max.bytes: the largest record a producer accepts.
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
# Largest accepted producer_lanes: every lane is one more transactional id per partition
# that recovery, a parallelism shrink and each retry fence (one InitProducerId each).
MAX_PRODUCER_LANES = 16
# Default producer_lanes: the Python workers of a two-core executor (or local[2]).
DEFAULT_PRODUCER_LANES = 2
# Suffix of the default dead-letter topic (``<topic>.dlq``).
DEAD_LETTER_SUFFIX = ".dlq"
# Headers of a dead letter holding its source coordinates (option dead_letter_source).
DEAD_LETTER_SOURCE_HEADERS = (
    "eos.dlq.source.topic",
    "eos.dlq.source.partition",
    "eos.dlq.source.offset",
)
# Input columns with a meaning to the Kafka sink (Spark's Kafka sink columns and op).
SINK_COLUMNS = ("key", "value", "topic", "partition", "headers", "op")

_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
# Kafka's own limit on topic names.
_MAX_TOPIC_LEN = 249
# sink ids become transactional ids and group ids with suffixes; keep them short.
_MAX_SINK_ID_LEN = 200

# Producer settings tuned for throughput of a transactional batch writer; the user's
# producer_config overrides any of them.
DEFAULT_PRODUCER_CONFIG: dict[str, str] = {
    "linger.ms": "10",
    "batch.size": "1000000",
    "compression.type": "none",
    # Bounded queue: back-pressure instead of unbounded buffering (BufferError -> poll).
    "queue.buffering.max.messages": "100000",
    "queue.buffering.max.kbytes": "65536",
    # Same key -> same partition as the Java client (and Spark's own Kafka sink).
    "partitioner": "murmur2_random",
    "acks": "all",
    # No KIP-1102 re-bootstrap when every broker is briefly down (a broker restart):
    # librdkafka 2.16 then decommissions the learned broker, which stays cached as the
    # group coordinator, and send_offsets_to_transaction hangs past its timeout
    # (librdkafka issues #5511, #5456). Brokers are re-learned from metadata instead.
    "metadata.recovery.strategy": "none",
}

# Settings every client of the sink needs: in producer_config only the producers would
# get them (the admin, marker and epoch-log clients would fail to connect).
_SHARED = (
    "is a setting every client of the sink needs (its admin client, marker consumers "
    "and epoch log too): put it in client_config"
)
_SHARED_SETTINGS = {"security.protocol": _SHARED, "sasl.": _SHARED, "ssl.": _SHARED}


def _producer_settings(raw: object, shared: Settings) -> Settings:
    """Validate ``producer_config`` (parsed together with the defaults and ``client_config``)."""
    return librdkafka_settings(
        raw,
        option="producer_config",
        error=config_error,
        owned=_SHARED_SETTINGS,
        base={**DEFAULT_PRODUCER_CONFIG, **shared.as_dict()},
    )


def _client_settings(raw: object) -> Settings:
    """Validate ``client_config``: no producer-only default (those go to producer_config)."""
    producer_only = {
        k: "is a producer setting: put it in producer_config" for k in DEFAULT_PRODUCER_CONFIG
    }
    return librdkafka_settings(
        raw, option="client_config", error=client_config_error, owned=producer_only
    )


def _strategy(value: object) -> ProducerStrategy:
    """Validate ``producer_strategy``: a :class:`ProducerStrategy` or its value."""
    if isinstance(value, ProducerStrategy):
        return value
    try:
        return ProducerStrategy(value)
    except ValueError:
        choices = ", ".join(repr(s) for s in PRODUCER_STRATEGIES)
        msg = f"producer_strategy must be one of {choices}, got {value!r}"
        raise KafkaConnectorError(msg, code=TxnCode.CONFIG) from None


def _require_name(what: str, value: object, max_len: int) -> str:
    if not isinstance(value, str) or not value:
        msg = f"{what} must be a non-empty string, got {value!r}"
        raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
    if len(value) > max_len or not _NAME.match(value) or value in {".", ".."}:
        msg = (
            f"{what} {value!r} is not a valid Kafka name: use at most {max_len} characters "
            "from A-Z a-z 0-9 . _ -"
        )
        raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
    return value


@dataclass(frozen=True, kw_only=True)
class SinkConfig(StageOptions):
    """Validated options of one :class:`~connectors.kafka.KafkaSink`.

    Kafka options (the others: :class:`connectors.stage.StageOptions`):

    * ``bootstrap_servers``: ``host:port[,host:port...]``;
    * ``client_config``: librdkafka settings every Kafka client of the sink shares
      (``security.protocol``, ``sasl.*``, ``ssl.*``, ``client.id``, ...): its producers,
      marker consumers, admin client and Kafka epoch log (docs/user-guide.md, "Secured
      clusters"); secret values are hidden in every repr;
    * ``topic``: default output topic (None: every row names its ``topic``);
    * ``sink_id``: the sink's identity (transactional ids, marker groups, epoch log keys);
    * ``epoch_log``: a file path for a ``txn.FileEpochLog``, or None for the Kafka epoch
      log in ``epoch_log_topic`` (compacted, created if missing);
    * ``marker_topic``: the one-partition topic the idempotency markers commit offsets to;
    * ``create_topics``: create a missing output topic at preflight;
    * ``state_topic_replication`` / ``state_topic_min_insync_replicas``: the replication
      and topic config ``min.insync.replicas`` the sink creates its epoch-log and marker
      topics with (None: ``min(3, brokers)`` and ``min(2, replication)``);
    * ``strict_cluster_checks``: the preflight's durability findings on the output topic
      and the transaction state log (replication below 3, ``min.insync.replicas`` below 2,
      unclean leader election on; exactly-once only) raise ``KafkaCode.PREFLIGHT`` instead of
      being logged as warnings (docs/deploying.md, section 9);
    * ``transaction_timeout_ms``: the producers' transaction timeout (at most the
      broker's ``transaction.max.timeout.ms``, checked at preflight);
    * ``producer_config``: producer-only librdkafka settings (strings, numbers, bools)
      over the defaults and ``client_config``;
    * ``changelog``: rows carry an ``op`` column (upserts and tombstones);
    * ``key_format`` / ``value_format``: write the column in a Schema Registry format
      (``"avro"``, ``"protobuf"``, ``"json-schema"`` or a
      :class:`~connectors.kafka.RecordFormat`), with ``schema_registry`` the
      ``SchemaRegistryClient`` settings (credentials hidden in every repr; never shipped
      to the tasks). docs/kafka-sink.md, "Schema Registry formats";
    * ``dead_letter_topic``: with ``on_bad_record="dead-letter"``, the topic bad records
      go to (default ``<topic>.dlq``; required when the sink has no default topic; created
      at preflight if missing). docs/bad-records.md.
    * ``dead_letter_source``: with ``on_bad_record="dead-letter"``, three input column
      names (topic: string; partition, offset: integers) whose values a dead letter carries
      in its ``eos.dlq.source.topic`` / ``.partition`` / ``.offset`` headers (the record's
      source coordinates, e.g. the ``kafka-rc`` source's, renamed: ``topic`` and
      ``partition`` are the output's columns). The columns are shipped to the write tasks
      and enter the partitions' checksums (and the fingerprint) only when this is set.
    * ``producer_strategy``: how write tasks get their producers (``_strategy``):
      ``"pooled"`` (the default: kept by each Python worker across epochs, reused under
      the reuse rules, ``_reuse``) or ``"reference"`` (a new producer per task, closed at
      its end: the simple path, slower);
    * ``producer_lanes``: worker lanes per write partition (exactly-once), one per Python
      worker of a host (``_lanes``; each one more transactional id, beside the shared
      lane's): Spark moves tasks between workers, and each worker keeps a live producer of
      every partition on its own lane (docs/kafka-sink.md, "Producer lanes"). Set it to
      the Python workers per executor (the task slots, more when a task runs two Python
      operators at once); lowering it needs the old value's lanes aborted first
      (``eos abort-lingering``);
    * ``commit_offsets_to_group``: a consumer group id (exactly-once only) to which each
      epoch's input offsets are committed inside write partition 0's transaction, so lag
      tools see the committed progress (``_input_offsets``; docs/kafka-sink.md).
    """

    bootstrap_servers: str
    topic: str | None
    sink_id: str
    epoch_log: str | None = None
    epoch_log_topic: str = _client.DEFAULT_EPOCH_LOG_TOPIC
    marker_topic: str = _client.DEFAULT_MARKER_TOPIC
    create_topics: bool = False
    state_topic_replication: int | None = None
    state_topic_min_insync_replicas: int | None = None
    strict_cluster_checks: bool = False
    transaction_timeout_ms: int = 60_000
    client_config: Settings = Settings()
    producer_config: Settings = Settings()
    changelog: bool = False
    key_format: RecordFormat | None = None
    value_format: RecordFormat | None = None
    schema_registry: Settings = Settings()
    dead_letter_topic: str | None = None
    dead_letter_source: tuple[str, str, str] | None = None
    commit_offsets_to_group: str | None = None
    producer_strategy: ProducerStrategy = ProducerStrategy.POOLED
    producer_lanes: int = DEFAULT_PRODUCER_LANES

    @classmethod
    def create(cls, **options: Any) -> SinkConfig:
        """Validate raw options (as :class:`KafkaSink` takes them) and return the config.

        Raises:
            TxnCode.CONFIG: an option is unknown or invalid; the message names it.

        """
        return build_config(cls, options, KafkaConnectorError, "KafkaSink")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            msg = (
                "bootstrap_servers must be 'host:port[,host:port...]', "
                f"got {self.bootstrap_servers!r}"
            )
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
        if self.topic is not None:
            _require_name("topic", self.topic, _MAX_TOPIC_LEN)
        _require_name("sink_id", self.sink_id, _MAX_SINK_ID_LEN)
        _require_name("epoch_log_topic", self.epoch_log_topic, _MAX_TOPIC_LEN)
        _require_name("marker_topic", self.marker_topic, _MAX_TOPIC_LEN)
        timeout = self.transaction_timeout_ms
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int)
            or (timeout < MIN_TRANSACTION_TIMEOUT_MS)
        ):
            msg = (
                f"transaction_timeout_ms must be an int >= {MIN_TRANSACTION_TIMEOUT_MS}, "
                f"got {timeout!r}"
            )
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
        lanes = self.producer_lanes
        if (
            isinstance(lanes, bool)
            or not isinstance(lanes, int)
            or not 1 <= lanes <= MAX_PRODUCER_LANES
        ):
            msg = f"producer_lanes must be an int from 1 to {MAX_PRODUCER_LANES}, got {lanes!r}"
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
        object.__setattr__(self, "producer_strategy", _strategy(self.producer_strategy))
        log_path = None if self.epoch_log is None else os.fspath(self.epoch_log)
        if log_path is not None and not log_path:
            msg = "epoch_log must be a file path, or None for the Kafka epoch log"
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
        object.__setattr__(self, "epoch_log", log_path)
        object.__setattr__(self, "client_config", _client_settings(self.client_config))
        shared = self.client_config
        object.__setattr__(
            self, "producer_config", _producer_settings(self.producer_config, shared)
        )
        object.__setattr__(self, "create_topics", bool(self.create_topics))
        object.__setattr__(self, "strict_cluster_checks", bool(self.strict_cluster_checks))
        _ = self.state_topics  # validates the two values (TxnCode.CONFIG)
        object.__setattr__(self, "changelog", bool(self.changelog))
        formats = parse_formats(self.key_format, self.value_format, self.schema_registry)
        for name, value in zip(
            ("key_format", "value_format", "schema_registry"), formats, strict=True
        ):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "dead_letter_topic", self._dead_letter_topic())
        object.__setattr__(self, "dead_letter_source", self._dead_letter_source())
        self._check_offsets_group()

    def _dead_letter_source(self) -> tuple[str, str, str] | None:
        raw = self.dead_letter_source
        if raw is None:
            return None
        if self.on_bad_record != "dead-letter":
            msg = "dead_letter_source only applies with on_bad_record='dead-letter'; remove it"
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
        names = tuple(raw) if isinstance(raw, (tuple, list)) else ()
        if len(names) != len(DEAD_LETTER_SOURCE_HEADERS) or not all(
            isinstance(n, str) and n for n in names
        ):
            msg = (
                "dead_letter_source must name three input columns (topic, partition, offset), "
                f"e.g. ('in_topic', 'in_partition', 'in_offset'); got {raw!r}"
            )
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
        reserved = sorted(set(names) & set(SINK_COLUMNS))
        if reserved or len(set(names)) != len(names):
            msg = (
                f"dead_letter_source {names!r} must name distinct columns other than the "
                f"sink's own ({', '.join(SINK_COLUMNS)}); rename them, e.g. "
                "df.withColumnRenamed('topic', 'in_topic')"
            )
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
        return (names[0], names[1], names[2])

    def _dead_letter_topic(self) -> str | None:
        topic = self.dead_letter_topic
        if self.on_bad_record != "dead-letter":
            if topic is not None:
                msg = "dead_letter_topic only applies with on_bad_record='dead-letter'; remove it"
                raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
            return None
        if topic is None:
            if self.topic is None:
                msg = (
                    "on_bad_record='dead-letter' needs dead_letter_topic= when the sink has "
                    "no default topic (rows name their topics)"
                )
                raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
            topic = f"{self.topic[: _MAX_TOPIC_LEN - len(DEAD_LETTER_SUFFIX)]}{DEAD_LETTER_SUFFIX}"
        _require_name("dead_letter_topic", topic, _MAX_TOPIC_LEN)
        if topic in (self.topic, self.marker_topic, self.epoch_log_topic):
            msg = f"dead_letter_topic {topic!r} must differ from the sink's other topics"
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
        return topic

    @property
    def state_topics(self) -> StateTopicDurability:
        """Replication and min ISR of the epoch-log and marker topics the sink creates."""
        return StateTopicDurability(
            self.state_topic_replication, self.state_topic_min_insync_replicas
        )

    @property
    def message_max_bytes(self) -> int:
        """The producers' ``message.max.bytes``: larger records are bad records."""
        raw = self.producer_config.get("message.max.bytes") or self.client_config.get(
            "message.max.bytes"
        )
        return DEFAULT_MESSAGE_MAX_BYTES if raw is None else int(raw)

    def _check_offsets_group(self) -> None:
        group = self.commit_offsets_to_group
        if group is None:
            return
        _require_name("commit_offsets_to_group", group, _MAX_TOPIC_LEN)
        if not self.transactional:
            msg = (
                "commit_offsets_to_group needs guarantee='exactly-once': the input offsets "
                "are committed inside the output's Kafka transaction"
            )
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
        if group.startswith(_client.marker_group(self.sink_id, 0)[:-1]):
            msg = (
                f"commit_offsets_to_group {group!r} is a marker group of sink {self.sink_id!r}; "
                "use a group id of its own (no active members)"
            )
            raise KafkaConnectorError(msg, code=TxnCode.CONFIG)

    @property
    def transactional(self) -> bool:
        """True when writes go through Kafka transactions (exactly-once)."""
        return self.guarantee is Guarantee.EXACTLY_ONCE

    @property
    def warn_after_s(self) -> float | None:
        """Half the transaction timeout: a slower epoch risks a broker-side abort."""
        return (
            self.transaction_timeout_ms / 1000.0 * TIMEOUT_WARN_FRACTION
            if self.transactional
            else None
        )

    @property
    def cluster(self) -> Cluster:
        """The cluster every Kafka client of the sink connects to, with ``client_config``."""
        return Cluster(bootstrap_servers=self.bootstrap_servers, config=self.client_config)

    def producer_settings(self, transactional_id: str | None) -> dict[str, str]:
        """Return a write-task producer's own settings.

        ``client_config`` and the address come from :attr:`cluster` (the client factory
        puts these settings on top of them).
        """
        settings = {
            **DEFAULT_PRODUCER_CONFIG,
            **self.producer_config.as_dict(),
            "enable.idempotence": "true",
        }
        if transactional_id is not None:
            settings["transactional.id"] = transactional_id
            settings["transaction.timeout.ms"] = str(self.transaction_timeout_ms)
        return settings

    def transactional_id(self, partition: int, lane: int = 0) -> str:
        """Transactional id of write partition ``partition`` on producer lane ``lane``."""
        return _client.transactional_id(self.sink_id, partition, lane)

    def marker_group(self, partition: int) -> str:
        """Consumer group whose committed offset is the marker of ``partition``."""
        return _client.marker_group(self.sink_id, partition)

    def fingerprint(self) -> str:
        """Digest of the options that decide where rows land and how they are checked."""
        doc = {
            "v": SCHEME_VERSION,
            "topic": self.topic,
            "marker_topic": self.marker_topic,
            "changelog": self.changelog,
            **self.routing_fingerprint(),
            # shipped columns change the checksums: only when set (older plans unchanged)
            **(
                {"dead_letter_source": list(self.dead_letter_source)}
                if self.dead_letter_source
                else {}
            ),
        }
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()[:16]

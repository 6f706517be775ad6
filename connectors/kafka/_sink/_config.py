"""Validated, picklable configuration of a Kafka sink.

Everything is checked at construction without network I/O; the result travels to the
write tasks, so it is a frozen dataclass of plain values. The options common to every
sink on the generic stage (guarantee, mode, parallelism, stage_retries, vote_channel,
order_by, fault_plan) are inherited from :class:`connectors.stage.StageOptions`; the
Kafka ones are defined here, once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException

from connectors.kafka import _clients, _names
from connectors.kafka._errors import KafkaSinkConfigError
from connectors.stage import StageOptions, build_config
from txn import Guarantee

# Version of the row-routing and checksum scheme; part of the fingerprint so that a
# change of scheme while an epoch is in doubt is detected instead of mis-compared.
SCHEME_VERSION = 1
# Smallest accepted transaction timeout: below one second a busy task cannot even
# flush its batch before the broker aborts the transaction.
MIN_TRANSACTION_TIMEOUT_MS = 1_000
# Fraction of transaction_timeout_ms an epoch's write stage may take before the sink
# warns: beyond it a slower batch risks being aborted by the broker's timeout.
TIMEOUT_WARN_FRACTION = 0.5

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

# Settings the sink owns; setting them in producer_config is an error with a hint.
_RESERVED = {
    "bootstrap.servers": "pass bootstrap_servers= to KafkaSink",
    "transactional.id": "the sink derives it from sink_id ({sink_id}-{partition})",
    "transaction.timeout.ms": "pass transaction_timeout_ms= to KafkaSink",
    "enable.idempotence": "the guarantee decides it (always on for every guarantee)",
    "on_delivery": "the sink installs its own delivery callback",
}


def _require_name(what: str, value: object, max_len: int) -> str:
    if not isinstance(value, str) or not value:
        msg = f"{what} must be a non-empty string, got {value!r}"
        raise KafkaSinkConfigError(msg)
    if len(value) > max_len or not _NAME.match(value) or value in {".", ".."}:
        msg = (
            f"{what} {value!r} is not a valid Kafka name: use at most {max_len} characters "
            "from A-Z a-z 0-9 . _ -"
        )
        raise KafkaSinkConfigError(msg)
    return value


def _producer_items(raw: object) -> tuple[tuple[str, str], ...]:
    """Validate ``producer_config`` (a mapping, or the tuple form of an existing config)."""
    if raw is None:
        return ()
    if isinstance(raw, tuple):
        raw = dict(raw)
    if not isinstance(raw, Mapping):
        msg = f"producer_config must be a mapping of librdkafka settings, got {type(raw).__name__}"
        raise KafkaSinkConfigError(msg)
    items: list[tuple[str, str]] = []
    for key, value in raw.items():
        if not isinstance(key, str):
            msg = f"producer_config keys must be strings, got {key!r}"
            raise KafkaSinkConfigError(msg)
        if key in _RESERVED:
            msg = f"producer_config[{key!r}] is managed by the sink: {_RESERVED[key]}"
            raise KafkaSinkConfigError(msg)
        if isinstance(value, bool):
            items.append((key, "true" if value else "false"))
        elif isinstance(value, (str, int, float)):
            items.append((key, str(value)))
        else:
            msg = (
                f"producer_config[{key!r}] must be a string, number or bool (callbacks and "
                f"objects cannot be shipped to Spark tasks), got {type(value).__name__}"
            )
            raise KafkaSinkConfigError(msg)
    _check_librdkafka_accepts({**DEFAULT_PRODUCER_CONFIG, **dict(items)})
    return tuple(sorted(items))


def _check_librdkafka_accepts(settings: Mapping[str, str]) -> None:
    """Let librdkafka parse ``settings``: with no bootstrap servers it opens no connection."""
    probe = dict(settings)
    probe.setdefault("log_level", "3")  # errors only: an idle probe logs queue purges
    try:
        producer = _clients.producer(probe)
    except (KafkaException, ValueError, TypeError) as exc:
        msg = f"producer_config rejected by librdkafka: {exc}; fix or remove that setting"
        raise KafkaSinkConfigError(msg) from exc
    producer.flush(0)


@dataclass(frozen=True, kw_only=True)
class SinkConfig(StageOptions):
    """Validated options of one :class:`~connectors.kafka.KafkaSink`.

    Kafka options (the others: :class:`connectors.stage.StageOptions`):

    * ``bootstrap_servers``: ``host:port[,host:port...]``;
    * ``topic``: default output topic (None: every row names its ``topic``);
    * ``sink_id``: the sink's identity (transactional ids, marker groups, epoch log keys);
    * ``epoch_log``: a file path for a ``txn.FileEpochLog``, or None for the Kafka epoch
      log in ``epoch_log_topic`` (compacted, created if missing);
    * ``marker_topic``: the one-partition topic the idempotency markers commit offsets to;
    * ``create_topics``: create a missing output topic at preflight;
    * ``transaction_timeout_ms``: the producers' transaction timeout (at most the
      broker's ``transaction.max.timeout.ms``, checked at preflight);
    * ``producer_config``: librdkafka settings (strings, numbers, bools) over the defaults;
    * ``changelog``: rows carry an ``op`` column (upserts and tombstones).
    """

    bootstrap_servers: str
    topic: str | None
    sink_id: str
    epoch_log: str | None = None
    epoch_log_topic: str = _names.DEFAULT_EPOCH_LOG_TOPIC
    marker_topic: str = _names.DEFAULT_MARKER_TOPIC
    create_topics: bool = False
    transaction_timeout_ms: int = 60_000
    producer_config: tuple[tuple[str, str], ...] = ()
    changelog: bool = False

    @classmethod
    def create(cls, **options: Any) -> SinkConfig:
        """Validate raw options (as :class:`KafkaSink` takes them) and return the config.

        Raises:
            KafkaSinkConfigError: an option is unknown or invalid; the message names it.

        """
        return build_config(cls, options, KafkaSinkConfigError, "KafkaSink")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            msg = (
                "bootstrap_servers must be 'host:port[,host:port...]', "
                f"got {self.bootstrap_servers!r}"
            )
            raise KafkaSinkConfigError(msg)
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
            raise KafkaSinkConfigError(msg)
        log_path = None if self.epoch_log is None else os.fspath(self.epoch_log)
        if log_path is not None and not log_path:
            msg = "epoch_log must be a file path, or None for the Kafka epoch log"
            raise KafkaSinkConfigError(msg)
        object.__setattr__(self, "epoch_log", log_path)
        object.__setattr__(self, "producer_config", _producer_items(self.producer_config))
        object.__setattr__(self, "create_topics", bool(self.create_topics))
        object.__setattr__(self, "changelog", bool(self.changelog))

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

    def producer_settings(self, transactional_id: str | None) -> dict[str, str]:
        """Full librdkafka settings of a write-task producer."""
        settings = {
            **DEFAULT_PRODUCER_CONFIG,
            **dict(self.producer_config),
            "bootstrap.servers": self.bootstrap_servers,
            "enable.idempotence": "true",
        }
        if transactional_id is not None:
            settings["transactional.id"] = transactional_id
            settings["transaction.timeout.ms"] = str(self.transaction_timeout_ms)
        return settings

    def transactional_id(self, partition: int) -> str:
        """Transactional id of write partition ``partition``."""
        return _names.transactional_id(self.sink_id, partition)

    def marker_group(self, partition: int) -> str:
        """Consumer group whose committed offset is the marker of ``partition``."""
        return _names.marker_group(self.sink_id, partition)

    def fingerprint(self) -> str:
        """Digest of the options that decide where rows land and how they are checked."""
        doc = {
            "v": SCHEME_VERSION,
            "topic": self.topic,
            "marker_topic": self.marker_topic,
            "changelog": self.changelog,
            **self.routing_fingerprint(),
        }
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()[:16]

"""Validated, picklable configuration of a Kafka sink.

Everything is checked at construction without network I/O; the result travels to
the write tasks inside the plan's closure, so it is a frozen dataclass of plain values.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Producer

from connectors.kafka._errors import SinkConfigError
from connectors.kafka._faults import FaultPlan
from txn import CommitMode, ConfigError, Guarantee

# Version of the row-routing and checksum scheme; part of the fingerprint so that a
# change of scheme while an epoch is in doubt is detected instead of mis-compared.
SCHEME_VERSION = 1
# Smallest accepted transaction timeout: below one second a busy task cannot even
# flush its batch before the broker aborts the transaction.
MIN_TRANSACTION_TIMEOUT_MS = 1_000

# Vote channels of the aligned mode: a TCP vote server on the driver (fast), or Spark's
# BarrierTaskContext.allGather (no extra connection; its JVM loop costs about 1 s per epoch).
VOTE_CHANNELS = ("driver", "barrier")
DEFAULT_VOTE_CHANNEL = "driver"
# Re-runs of a failed write stage within one call: Spark aborts the job of a failed
# barrier stage instead of retrying it, and a re-run is safe (redo or skip by marker).
DEFAULT_STAGE_RETRIES = 2

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
    "error_cb": "the sink installs its own error callback",
}


def _require_name(what: str, value: object, max_len: int) -> str:
    if not isinstance(value, str) or not value:
        msg = f"{what} must be a non-empty string, got {value!r}"
        raise SinkConfigError(msg)
    if len(value) > max_len or not _NAME.match(value) or value in {".", ".."}:
        msg = (
            f"{what} {value!r} is not a valid Kafka name: use at most {max_len} characters "
            "from A-Z a-z 0-9 . _ -"
        )
        raise SinkConfigError(msg)
    return value


def _validate_producer_config(raw: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        msg = f"producer_config must be a mapping of librdkafka settings, got {type(raw).__name__}"
        raise SinkConfigError(msg)
    items: list[tuple[str, str]] = []
    for key, value in raw.items():
        if not isinstance(key, str):
            msg = f"producer_config keys must be strings, got {key!r}"
            raise SinkConfigError(msg)
        if key in _RESERVED:
            msg = f"producer_config[{key!r}] is managed by the sink: {_RESERVED[key]}"
            raise SinkConfigError(msg)
        if isinstance(value, bool):
            items.append((key, "true" if value else "false"))
        elif isinstance(value, (str, int, float)):
            items.append((key, str(value)))
        else:
            msg = (
                f"producer_config[{key!r}] must be a string, number or bool (callbacks and "
                f"objects cannot be shipped to Spark tasks), got {type(value).__name__}"
            )
            raise SinkConfigError(msg)
    merged = {**DEFAULT_PRODUCER_CONFIG, **dict(items)}
    _check_librdkafka_accepts(merged)
    return tuple(sorted(items))


def _check_librdkafka_accepts(settings: Mapping[str, str]) -> None:
    """Let librdkafka parse ``settings``: with no bootstrap servers it opens no connection."""
    probe = dict(settings)
    probe.setdefault("log_level", "3")  # errors only: an idle probe logs queue purges
    try:
        producer = Producer(probe)
    except (KafkaException, ValueError, TypeError) as exc:
        msg = f"producer_config rejected by librdkafka: {exc}; fix or remove that setting"
        raise SinkConfigError(msg) from exc
    producer.flush(0)


@dataclass(frozen=True)
class SinkConfig:
    """Validated options of one :class:`~connectors.kafka.KafkaSink` (see its docstring)."""

    bootstrap_servers: str
    topic: str | None
    sink_id: str
    guarantee: Guarantee = Guarantee.EXACTLY_ONCE
    mode: CommitMode = CommitMode.ALIGNED
    parallelism: int | None = None
    epoch_log: str | None = None
    epoch_log_topic: str = "eos-epoch-log"
    marker_topic: str = "eos-markers"
    create_topics: bool = False
    transaction_timeout_ms: int = 60_000
    producer_config: tuple[tuple[str, str], ...] = ()
    changelog: bool = False
    order_by: tuple[str, ...] = ()
    fault_plan: FaultPlan | None = None
    stage_retries: int = DEFAULT_STAGE_RETRIES
    vote_channel: str = DEFAULT_VOTE_CHANNEL

    @classmethod
    def build(
        cls,
        *,
        bootstrap_servers: str,
        topic: str | None,
        sink_id: str,
        guarantee: str | Guarantee,
        mode: str | CommitMode,
        parallelism: int | None,
        epoch_log: str | os.PathLike[str] | None,
        epoch_log_topic: str,
        marker_topic: str,
        create_topics: bool,
        transaction_timeout_ms: int,
        producer_config: Mapping[str, Any] | None,
        changelog: bool,
        order_by: Sequence[str],
        fault_plan: FaultPlan | None,
        stage_retries: int = DEFAULT_STAGE_RETRIES,
        vote_channel: str = DEFAULT_VOTE_CHANNEL,
    ) -> SinkConfig:
        """Validate every option and return the config, or raise :class:`SinkConfigError`."""
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
            msg = f"bootstrap_servers must be 'host:port[,host:port...]', got {bootstrap_servers!r}"
            raise SinkConfigError(msg)
        if topic is not None:
            _require_name("topic", topic, _MAX_TOPIC_LEN)
        _require_name("sink_id", sink_id, _MAX_SINK_ID_LEN)
        _require_name("epoch_log_topic", epoch_log_topic, _MAX_TOPIC_LEN)
        _require_name("marker_topic", marker_topic, _MAX_TOPIC_LEN)
        try:
            g = Guarantee.parse(guarantee)
            m = CommitMode.parse(mode)
        except ConfigError as exc:
            raise SinkConfigError(str(exc)) from None
        if parallelism is not None and (
            isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1
        ):
            msg = f"parallelism must be a positive int or None (Spark's default), got {parallelism!r}"
            raise SinkConfigError(msg)
        if (
            isinstance(transaction_timeout_ms, bool)
            or not isinstance(transaction_timeout_ms, int)
            or transaction_timeout_ms < MIN_TRANSACTION_TIMEOUT_MS
        ):
            msg = (
                f"transaction_timeout_ms must be an int >= {MIN_TRANSACTION_TIMEOUT_MS}, "
                f"got {transaction_timeout_ms!r}"
            )
            raise SinkConfigError(msg)
        if isinstance(order_by, str) or not all(isinstance(c, str) and c for c in order_by):
            msg = f"order_by must be a sequence of column names, e.g. ['offset'], got {order_by!r}"
            raise SinkConfigError(msg)
        if fault_plan is not None and not isinstance(fault_plan, FaultPlan):
            msg = f"fault_plan must be a FaultPlan or None, got {type(fault_plan).__name__}"
            raise SinkConfigError(msg)
        if isinstance(stage_retries, bool) or not isinstance(stage_retries, int) or stage_retries < 0:
            msg = f"stage_retries must be an int >= 0, got {stage_retries!r}"
            raise SinkConfigError(msg)
        if vote_channel not in VOTE_CHANNELS:
            msg = (
                f"vote_channel must be 'driver' (a vote server on the driver; executors "
                f"connect to it over TCP) or 'barrier' (Spark's allGather, about 1 s slower "
                f"per epoch), got {vote_channel!r}"
            )
            raise SinkConfigError(msg)
        log_path = None if epoch_log is None else os.fspath(epoch_log)
        if log_path is not None and not log_path:
            msg = "epoch_log must be a file path, or None for the Kafka epoch log"
            raise SinkConfigError(msg)
        return cls(
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            sink_id=sink_id,
            guarantee=g,
            mode=m,
            parallelism=parallelism,
            epoch_log=log_path,
            epoch_log_topic=epoch_log_topic,
            marker_topic=marker_topic,
            create_topics=bool(create_topics),
            transaction_timeout_ms=transaction_timeout_ms,
            producer_config=_validate_producer_config(producer_config),
            changelog=bool(changelog),
            order_by=tuple(order_by),
            fault_plan=fault_plan,
            stage_retries=stage_retries,
            vote_channel=vote_channel,
        )

    @property
    def transactional(self) -> bool:
        """True when writes go through Kafka transactions (exactly-once)."""
        return self.guarantee is Guarantee.EXACTLY_ONCE

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
        return f"{self.sink_id}-{partition}"

    def marker_group(self, partition: int) -> str:
        """Consumer group whose committed offset is the marker of ``partition``."""
        return f"{self.sink_id}.marker.{partition}"

    def fingerprint(self) -> str:
        """Digest of the options that decide where rows land and how they are checked."""
        doc = {
            "v": SCHEME_VERSION,
            "topic": self.topic,
            "marker_topic": self.marker_topic,
            "changelog": self.changelog,
            "order_by": list(self.order_by),
        }
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()[:16]

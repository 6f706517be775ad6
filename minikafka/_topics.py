"""Topic registry: names, ids, configs and the partition logs of each topic."""

from __future__ import annotations

import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from ._cluster import Leadership, Nodes, assign_replicas, new_leadership, topic_start_index
from ._config import BrokerConfig
from ._errors import KafkaProtocolError
from ._journal import Entry, Journal
from ._log import PartitionLog

_LEGAL_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# Topic configs DescribeConfigs reports, with Kafka's defaults.
TOPIC_CONFIG_DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "max.message.bytes": "1048588",
    "segment.bytes": "1073741824",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "message.timestamp.type": "CreateTime",
    "compression.type": "producer",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "86400000",
}
_CLEANUP_POLICIES = {"delete", "compact", "compact,delete", "delete,compact"}
_INT_CONFIGS = ("retention.ms", "max.message.bytes", "retention.bytes", "segment.bytes")
# Most partitions one CreateTopics or CreatePartitions may add to a topic; like Kafka's KRaft
# controller (10,000 records per operation), more is refused with POLICY_VIOLATION.
MAX_NEW_PARTITIONS = 10_000


@dataclass(kw_only=True)
class Topic:
    """One topic: its id, explicit configs, partition logs and their leadership."""

    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    replication: int = 1
    partitions: list[PartitionLog] = field(default_factory=list)
    leaders: list[Leadership] = field(default_factory=list)

    def config(self, key: str) -> str | None:
        """Effective value of a topic config (explicit, else default)."""
        return self.configs.get(key, TOPIC_CONFIG_DEFAULTS.get(key))


def validate_topic_configs(configs: dict[str, str | None]) -> None:
    """Raise INVALID_CONFIG for unknown keys or bad values of the configs we interpret."""
    for key, value in configs.items():
        if key not in TOPIC_CONFIG_DEFAULTS:
            raise KafkaProtocolError(ErrorCode.invalid_config, f"unknown topic config {key!r}")
        if value is None:
            continue
        if key == "cleanup.policy" and value.replace(" ", "") not in _CLEANUP_POLICIES:
            raise KafkaProtocolError(ErrorCode.invalid_config, f"bad cleanup.policy {value!r}")
        if key in _INT_CONFIGS:
            _int_config(key, value)
        if key == "min.insync.replicas" and _int_config(key, value) < 1:
            raise KafkaProtocolError(ErrorCode.invalid_config, f"{key} must be >= 1, got {value}")
        if key == "unclean.leader.election.enable" and value.lower() not in ("true", "false"):
            raise KafkaProtocolError(ErrorCode.invalid_config, f"{key} must be true or false")


def _int_config(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise KafkaProtocolError(
            ErrorCode.invalid_config, f"{key} must be an integer, got {value!r}"
        ) from None


def _check_new_partitions(count: int) -> None:
    if count > MAX_NEW_PARTITIONS:
        raise KafkaProtocolError(
            ErrorCode.policy_violation,
            f"{count} new partitions in one request; at most {MAX_NEW_PARTITIONS} are allowed",
        )


class TopicRegistry:
    """All topics of the broker, persisted through the journal."""

    def __init__(
        self, config: BrokerConfig, data_dir: Path | None, journal: Journal, nodes: Nodes
    ) -> None:
        self.config = config
        self.data_dir = data_dir
        self.journal = journal
        self.nodes = nodes
        self.topics: dict[str, Topic] = {}
        self.defaults = {
            **TOPIC_CONFIG_DEFAULTS,
            "min.insync.replicas": str(config.min_insync_replicas),
        }
        self._fsync = config.fsync_policy
        self._specs: dict[str, list[Any]] = {}
        self._log_starts: dict[tuple[str, int], int] = {}

    def get(self, name: str) -> Topic | None:
        """Return the topic called ``name`` or None."""
        return self.topics.get(name)

    def partition(self, name: str, index: int) -> PartitionLog | None:
        """Return the log of ``name``-``index`` or None if either does not exist."""
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def create(
        self,
        name: str,
        num_partitions: int,
        configs: dict[str, str] | None = None,
        *,
        replication: int = -1,
        validate_only: bool = False,
    ) -> Topic | None:
        """Create a topic; raise KafkaProtocolError with Kafka's code on bad input.

        ``replication`` -1 means ``default_replication_factor``; it may not exceed the
        nodes Metadata lists (INVALID_REPLICATION_FACTOR, as Kafka counts live brokers).
        """
        if not _LEGAL_NAME.match(name) or name in (".", ".."):
            raise KafkaProtocolError(ErrorCode.invalid_topic_exception, f"illegal topic {name!r}")
        if name in self.topics:
            raise KafkaProtocolError(ErrorCode.topic_already_exists, f"topic {name!r} exists")
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if num_partitions <= 0:
            raise KafkaProtocolError(
                ErrorCode.invalid_partitions, f"num_partitions must be > 0, got {num_partitions}"
            )
        _check_new_partitions(num_partitions)
        replication = self._check_replication(replication)
        clean = {k: v for k, v in (configs or {}).items() if v is not None}
        validate_topic_configs(dict(clean))
        if validate_only:
            return None
        topic_id = uuid.uuid4()
        entry = {"t": "topic", "name": name, "id": str(topic_id), "n": num_partitions, "cfg": clean}
        if replication != 1:
            entry["rf"] = replication
        self.journal.append(entry)
        return self._apply_create(name, topic_id, num_partitions, clean, replication)

    def _check_replication(self, replication: int) -> int:
        if replication == -1:
            replication = self.config.default_replication_factor
        available = sum(1 for n in self.nodes.ids if self.nodes.listed(n))
        if not 0 < replication <= available:
            raise KafkaProtocolError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {replication} outside 1..{available} (available nodes)",
            )
        return replication

    def delete(self, name: str) -> None:
        """Delete a topic and its files."""
        topic = self.topics.pop(name, None)
        if topic is None:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        self.journal.append({"t": "topic_del", "name": name})
        for plog in topic.partitions:
            plog.delete()
        if self.data_dir is not None:
            shutil.rmtree(self._topic_dir(name, topic.topic_id), ignore_errors=True)

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        """Grow a topic to ``total`` partitions."""
        topic = self.topics.get(name)
        if topic is None:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        if total <= len(topic.partitions):
            raise KafkaProtocolError(
                ErrorCode.invalid_partitions,
                f"topic {name!r} has {len(topic.partitions)} partitions; new count {total} "
                "must be larger",
            )
        _check_new_partitions(total - len(topic.partitions))
        if validate_only:
            return
        self.journal.append({"t": "parts", "name": name, "n": total})
        self._grow(topic, total)

    def delete_records(self, name: str, index: int, offset: int) -> int:
        """Move the log start of a partition to ``offset`` (-1: the high watermark).

        Records below the log start become unreadable; their bytes stay in the file
        (no physical truncation). Returns the new low watermark.
        """
        plog = self.partition(name, index)
        if plog is None:
            raise KafkaProtocolError(
                ErrorCode.unknown_topic_or_partition, f"no partition {name}-{index}"
            )
        target = plog.high_watermark if offset == -1 else offset
        if target < 0 or target > plog.high_watermark:
            raise KafkaProtocolError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} outside 0..{plog.high_watermark} of {name}-{index}",
            )
        if target > plog.log_start:
            self.journal.append({"t": "logstart", "name": name, "p": index, "o": target})
            plog.log_start = target
        return plog.log_start

    def apply(self, entry: Entry) -> bool:
        """Apply a replayed journal entry; False if it is not a topic entry.

        Replay only records the topic specs; :meth:`finish_replay` opens the logs, so
        files of topics deleted later in the journal are never reopened.
        """
        kind = entry["t"]
        if kind == "topic":
            spec = [uuid.UUID(entry["id"]), entry["n"], entry["cfg"], entry.get("rf", 1)]
            self._specs[entry["name"]] = spec
        elif kind == "topic_del":
            self._specs.pop(entry["name"], None)
        elif kind == "parts":
            self._specs[entry["name"]][1] = entry["n"]
        elif kind == "logstart":
            self._log_starts[(entry["name"], entry["p"])] = entry["o"]
        else:
            return False
        return True

    def finish_replay(self) -> None:
        """Open the partition logs of every topic the journal left alive."""
        for name, (topic_id, n, cfg, rf) in self._specs.items():
            topic = self._apply_create(name, topic_id, n, cfg, rf)
            for plog in topic.partitions:
                start = self._log_starts.get((name, plog.partition), 0)
                plog.log_start = min(start, plog.high_watermark)
        self._specs.clear()
        self._log_starts.clear()

    def snapshot(self) -> list[Entry]:
        """Journal entries that recreate the current topics and log starts."""
        out: list[Entry] = []
        for t in self.topics.values():
            entry: Entry = {
                "t": "topic",
                "name": t.name,
                "id": str(t.topic_id),
                "n": len(t.partitions),
                "cfg": t.configs,
            }
            if t.replication != 1:
                entry["rf"] = t.replication
            out.append(entry)
            out.extend(
                {"t": "logstart", "name": t.name, "p": plog.partition, "o": plog.log_start}
                for plog in t.partitions
                if plog.log_start > 0
            )
        return out

    def close(self) -> None:
        """Close every partition file."""
        for topic in self.topics.values():
            for plog in topic.partitions:
                plog.close()

    def _apply_create(
        self, name: str, topic_id: uuid.UUID, n: int, configs: dict[str, str], replication: int
    ) -> Topic:
        # A data dir written by a larger cluster: replicas capped by today's node count.
        topic = Topic(
            name=name,
            topic_id=topic_id,
            configs=dict(configs),
            replication=min(replication, len(self.nodes.ids)),
        )
        self.topics[name] = topic
        self._grow(topic, n)
        return topic

    def _grow(self, topic: Topic, total: int) -> None:
        ids = self.nodes.ids
        start = topic_start_index(topic.name, len(ids))
        for index in range(len(topic.partitions), total):
            path = None
            if self.data_dir is not None:
                path = self._topic_dir(topic.name, topic.topic_id) / f"{index}.log"
            topic.partitions.append(PartitionLog(topic.name, index, path, self._fsync))
            replicas = assign_replicas(index, topic.replication, ids, start)
            topic.leaders.append(new_leadership(replicas, self.nodes))

    def _topic_dir(self, name: str, topic_id: uuid.UUID) -> Path:
        assert self.data_dir is not None  # noqa: S101 - only called when persistent
        return self.data_dir / "topics" / f"{name}.{topic_id.hex}"

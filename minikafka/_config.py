"""Broker settings (:class:`BrokerConfig`), validated at construction."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ._errors import BrokerConfigError

# Largest request frame the broker reads (bytes); like Kafka's socket.request.max.bytes.
MAX_REQUEST_BYTES = 100 * 1024 * 1024
FSYNC_POLICIES = ("never", "commit", "always")
# How Metadata answers while topics are "loading" (topic_load_delay_ms after a start):
# "hidden": a listing of all topics has none, a named topic is UNKNOWN_TOPIC_OR_PARTITION;
# "errors": every topic, listed or named, comes with LEADER_NOT_AVAILABLE and no partitions;
# "empty": no topic entry at all, whatever was asked (a named topic is left out).
TOPIC_LOAD_MODES = ("hidden", "errors", "empty")


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Settings of one minikafka broker.

    Attributes:
        num_partitions: partitions of an auto-created topic (Kafka's num.partitions).
        auto_create_topics: create unknown topics on Metadata/Produce requests
            (Kafka's auto.create.topics.enable, default on).
        transaction_max_timeout_ms: largest transaction.timeout.ms an InitProducerId may ask.
        transaction_abort_check_interval_ms: how often open transactions are checked for
            their timeout.
        group_initial_rebalance_delay_ms: wait for more members before the first
            rebalance of an empty group completes.
        group_min_session_timeout_ms / group_max_session_timeout_ms: accepted range of a
            member's session.timeout.ms.
        offsets_retention_ms: how long the committed offsets of a group without members
            are kept (Kafka's offsets.retention.minutes, default 7 days): counted from
            when the group became empty, or from each commit for a group that never had
            members.
        offsets_retention_check_interval_ms: how often expired offsets are removed
            (Kafka's offsets.retention.check.interval.ms).
        fsync_policy: "never" (write to the OS on every request, never fsync), "commit"
            (also fsync the journal on every state change and a partition log whenever a
            transaction marker is written), "always" (fsync every append).
        max_message_bytes: largest record batch accepted (topic default max.message.bytes).
        max_request_bytes: largest request frame read; larger frames close the connection.
        topic_load_delay_ms: after the broker starts, Metadata answers for this long as if
            no topic were loaded yet (a restarted Kafka broker can answer Metadata before
            it has loaded its topics' metadata); for tests, default 0.
        topic_load_mode: how Metadata answers meanwhile, one of ``TOPIC_LOAD_MODES``
            (default "hidden").
        node_id: broker id reported in metadata.
        cluster_id: cluster id reported in metadata.

    """

    num_partitions: int = 1
    auto_create_topics: bool = True
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_check_interval_ms: int = 1_000
    group_initial_rebalance_delay_ms: int = 100
    group_min_session_timeout_ms: int = 1_000
    group_max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    fsync_policy: str = "commit"
    max_message_bytes: int = 1_048_588
    max_request_bytes: int = MAX_REQUEST_BYTES
    topic_load_delay_ms: int = 0
    topic_load_mode: str = "hidden"
    node_id: int = 0
    cluster_id: str = "minikafka-cluster"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int",) and (not isinstance(value, int) or isinstance(value, bool)):
                msg = f"BrokerConfig.{f.name} must be an int, got {value!r}"
                raise BrokerConfigError(msg)
        positive = (
            "num_partitions",
            "transaction_max_timeout_ms",
            "transaction_abort_check_interval_ms",
            "offsets_retention_ms",
            "offsets_retention_check_interval_ms",
            "max_message_bytes",
            "max_request_bytes",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                msg = f"BrokerConfig.{name} must be > 0, got {getattr(self, name)!r}"
                raise BrokerConfigError(msg)
        for name in ("group_initial_rebalance_delay_ms", "topic_load_delay_ms"):
            if getattr(self, name) < 0:
                msg = f"BrokerConfig.{name} must be >= 0"
                raise BrokerConfigError(msg)
        if self.fsync_policy not in FSYNC_POLICIES:
            msg = f"BrokerConfig.fsync_policy must be one of {FSYNC_POLICIES}, got {self.fsync_policy!r}"
            raise BrokerConfigError(msg)
        if self.topic_load_mode not in TOPIC_LOAD_MODES:
            msg = (
                f"BrokerConfig.topic_load_mode must be one of {TOPIC_LOAD_MODES}, "
                f"got {self.topic_load_mode!r}"
            )
            raise BrokerConfigError(msg)
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            msg = "BrokerConfig.group_min_session_timeout_ms exceeds group_max_session_timeout_ms"
            raise BrokerConfigError(msg)

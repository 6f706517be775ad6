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
# "empty": no topic entry at all, whatever was asked (a named topic is left out);
# "flap": the first answer on each connection lists every topic with no partition leader,
# later ones list no topic (as a client sees nodes that disagree; the stale verdict this
# leaves in librdkafka: docs/kafka-semantics.md, "A stale Unknown-topic verdict").
TOPIC_LOAD_MODES = ("hidden", "errors", "empty", "flap")
# Replication factor and min ISR of the internal topics (__consumer_offsets,
# __transaction_state) on a cluster of n nodes, as Kafka's defaults 3 and 2 allow.
INTERNAL_REPLICATION = 3
INTERNAL_MIN_ISR = 2


@dataclass(frozen=True, slots=True, kw_only=True)
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
        node_id: id of the first node (the others follow: node_id + 1, ...).
        cluster_id: cluster id reported in metadata.
        nodes: number of nodes, each with its own listener (one process, shared state;
            docs/minikafka.md, "Several nodes").
        default_replication_factor: replication of an auto-created topic and of a
            CreateTopics asking -1 (Kafka's default.replication.factor).
        min_insync_replicas: default ``min.insync.replicas`` of every topic (Kafka's broker
            setting): acks=all produce with fewer in-sync replicas gets NOT_ENOUGH_REPLICAS.
        offsets_topic_num_partitions / transaction_state_num_partitions: partitions of the
            (unlisted) internal topics whose leaders are the group and transaction
            coordinators (Kafka's offsets.topic.num.partitions and
            transaction.state.log.num.partitions, 50 each).
        transaction_state_replication_factor: replicas of each __transaction_state
            partition; 0 means min(3, nodes) (Kafka's default 3, capped by the cluster).
        transaction_state_min_isr: in-sync replicas a transaction coordinator needs to
            write; 0 means min(2, replication) (Kafka's transaction.state.log.min.isr 2).
        node_failure_detection_ms: after a hard node stop, how long Metadata still names
            the stopped node (leader, coordinator) before leadership moves, as Kafka's
            controller notices a dead broker only after broker.session.timeout.ms.
        coordinator_load_ms: after a coordinator partition changes leader, how long the new
            leader answers COORDINATOR_LOAD_IN_PROGRESS (Kafka loads the partition first).

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
    nodes: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    offsets_topic_num_partitions: int = 50
    transaction_state_num_partitions: int = 50
    transaction_state_replication_factor: int = 0
    transaction_state_min_isr: int = 0
    node_failure_detection_ms: int = 0
    coordinator_load_ms: int = 0

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
            "nodes",
            "default_replication_factor",
            "min_insync_replicas",
            "offsets_topic_num_partitions",
            "transaction_state_num_partitions",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                msg = f"BrokerConfig.{name} must be > 0, got {getattr(self, name)!r}"
                raise BrokerConfigError(msg)
        non_negative = (
            "group_initial_rebalance_delay_ms",
            "topic_load_delay_ms",
            "node_id",
            "transaction_state_replication_factor",
            "transaction_state_min_isr",
            "node_failure_detection_ms",
            "coordinator_load_ms",
        )
        for name in non_negative:
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
        self._check_replication()

    def _check_replication(self) -> None:
        for name in ("default_replication_factor", "transaction_state_replication_factor"):
            if getattr(self, name) > self.nodes:
                msg = (
                    f"BrokerConfig.{name} is {getattr(self, name)} but the cluster has "
                    f"{self.nodes} node(s); raise nodes or lower {name}"
                )
                raise BrokerConfigError(msg)

    @property
    def node_ids(self) -> tuple[int, ...]:
        """Ids of every node: ``node_id`` .. ``node_id + nodes - 1``."""
        return tuple(range(self.node_id, self.node_id + self.nodes))

    @property
    def txn_log_replication(self) -> int:
        """Replicas of each __transaction_state partition (0 in the setting: min(3, nodes))."""
        return self.transaction_state_replication_factor or min(INTERNAL_REPLICATION, self.nodes)

    @property
    def txn_log_min_isr(self) -> int:
        """In-sync replicas a transaction coordinator needs (0 in the setting: min(2, rf))."""
        return self.transaction_state_min_isr or min(INTERNAL_MIN_ISR, self.txn_log_replication)

    @property
    def offsets_log_replication(self) -> int:
        """Replicas of each __consumer_offsets partition: min(3, nodes), as Kafka's default."""
        return min(INTERNAL_REPLICATION, self.nodes)

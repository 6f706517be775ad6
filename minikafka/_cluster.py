"""Nodes, replica placement, partition leadership and coordinator placement of a cluster.

minikafka simulates what a client sees of a Kafka cluster of N nodes: which node leads
each partition, which node coordinates each group and transactional id, which nodes are
in sync, and how all of that moves when a node stops. It does not replicate: every node
serves the same state, so a node that returns is in sync at once and nothing written with
acks=all while the in-sync replicas met ``min.insync.replicas`` can be lost.

Placement (Kafka's rules; deterministic where Kafka draws at random):
1. The replicas of partition ``i`` of a topic follow Kafka's rack-unaware assignment
   (``AdminUtils.assignReplicasToBrokersRackUnaware``): first replica at
   ``(i + start) % n``, the others shifted by ``1 + (shift + j) % (n - 1)`` where the shift
   grows by one every ``n`` partitions. Kafka draws ``start`` and the first shift at
   random; minikafka uses ``abs(hash(topic)) % n`` for both, so a restart places every
   topic again the same way. Internal topics use 0.
2. The coordinator of a group (or transactional id) is the leader of partition
   ``abs(String.hashCode(id)) % partitions`` of ``__consumer_offsets``
   (``__transaction_state``), Kafka's ``partitionFor``.

Leadership:
1. A new partition's leader is its first replica on a listed node.
2. A node that stops hard keeps its leaderships until its failure is detected
   (``node_failure_detection_ms``; Metadata still names it meanwhile). Then, and at once
   on a clean stop, every partition it led gets the first other replica that is listed and
   running, or no leader (-1) if there is none.
3. A clean stop first moves every leadership it can (Kafka's controlled shutdown).
4. A node that starts again leads every leaderless partition it is a replica of; it takes
   back no other leadership (Kafka moves preferred leaders back only every 300 s).
5. Every change of leader bumps the partition's leader epoch. A coordinator partition
   whose leader changed answers COORDINATOR_LOAD_IN_PROGRESS for ``coordinator_load_ms``.
6. The in-sync replicas of a partition are its replicas on listed nodes.

All of this lives on the broker's loop thread, like the rest of the state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ._clock import Clock
from ._config import BrokerConfig

if TYPE_CHECKING:
    from ._topics import TopicRegistry

GROUP_COORDINATOR, TXN_COORDINATOR = 0, 1  # FindCoordinator key types
COORDINATOR_KINDS = {"group": GROUP_COORDINATOR, "transaction": TXN_COORDINATOR}
INTERNAL_TOPICS = {GROUP_COORDINATOR: "__consumer_offsets", TXN_COORDINATOR: "__transaction_state"}
NO_LEADER = -1
_INT32 = 2**32


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: 31-based over UTF-16 code units, as a signed int32."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) % _INT32
    return h - _INT32 if h >= 2**31 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: the absolute value, with 0 for Integer.MIN_VALUE."""
    return 0 if n == -(2**31) else abs(n)


def partition_for(key: str, partitions: int) -> int:
    """Kafka's ``partitionFor``: the internal partition that holds a group or transactional id."""
    return kafka_abs(java_string_hash(key)) % partitions


def topic_start_index(topic: str, nodes: int) -> int:
    """Where a topic's replica assignment starts (Kafka draws it at random)."""
    return kafka_abs(java_string_hash(topic)) % nodes


def assign_replicas(
    index: int, replication: int, node_ids: tuple[int, ...], start: int
) -> tuple[int, ...]:
    """Replicas of partition ``index`` by Kafka's rack-unaware assignment (module docstring)."""
    n = len(node_ids)
    first = (index + start) % n
    shift = start + index // n
    replicas = [node_ids[first]]
    for j in range(replication - 1):
        replicas.append(node_ids[(first + 1 + (shift + j) % (n - 1)) % n])
    return tuple(replicas)


@dataclass(slots=True, kw_only=True)
class Leadership:
    """Replicas, leader and leader epoch of one partition (Kafka's PartitionRegistration)."""

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    coordinates: bool = False  # a partition of an internal topic: its leader coordinates
    loading_until_s: float = 0.0


class Nodes:
    """Which nodes run, and which the cluster knows to be down.

    A stopped node's port refuses connections. It stays listed (in Metadata and in the
    in-sync replicas) until its failure is detected: then it is *fenced*.
    """

    def __init__(self, node_ids: tuple[int, ...], clock: Clock) -> None:
        self.ids = node_ids
        self._clock = clock
        self.stopped: set[int] = set()
        self.fenced: set[int] = set()
        self.started_s: dict[int, float] = dict.fromkeys(node_ids, clock.monotonic_s())
        self.loading_ended: set[int] = set()  # loading ended early (end-loading), until a start

    def listed(self, node: int) -> bool:
        """Whether Metadata lists the node (it runs, or its stop is not detected yet)."""
        return node not in self.fenced

    def running(self, node: int) -> bool:
        """Whether the node's port accepts connections."""
        return node not in self.stopped

    def in_sync(self, replicas: tuple[int, ...]) -> tuple[int, ...]:
        """Return the in-sync replicas: those on listed nodes (state is shared, none lags)."""
        if not self.fenced:
            return replicas
        return tuple(r for r in replicas if r not in self.fenced)

    def first_leader(self, replicas: tuple[int, ...]) -> int:
        """Return a new partition's leader: its first replica on a listed, running node."""
        for node in replicas:
            if node not in self.fenced and node not in self.stopped:
                return node
        return NO_LEADER

    def mark_started(self, node: int) -> None:
        """Record that ``node`` runs (again) from now."""
        self.stopped.discard(node)
        self.fenced.discard(node)
        self.loading_ended.discard(node)
        self.started_s[node] = self._clock.monotonic_s()


def new_leadership(
    replicas: tuple[int, ...], nodes: Nodes, *, coordinates: bool = False
) -> Leadership:
    """Leadership of a partition just created on ``replicas``."""
    return Leadership(
        replicas=replicas, leader=nodes.first_leader(replicas), coordinates=coordinates
    )


class Cluster:
    """Leadership of every partition and coordinator, and its changes (module docstring)."""

    def __init__(
        self, config: BrokerConfig, nodes: Nodes, topics: TopicRegistry, clock: Clock
    ) -> None:
        self._config = config
        self.nodes = nodes
        self._topics = topics
        self._clock = clock
        self.internal: dict[int, list[Leadership]] = {
            GROUP_COORDINATOR: self._internal_partitions(
                config.offsets_topic_num_partitions, config.offsets_log_replication
            ),
            TXN_COORDINATOR: self._internal_partitions(
                config.transaction_state_num_partitions, config.txn_log_replication
            ),
        }
        self._min_isr = {
            GROUP_COORDINATOR: config.min_insync_replicas,
            TXN_COORDINATOR: config.txn_log_min_isr,
        }

    def _internal_partitions(self, count: int, replication: int) -> list[Leadership]:
        ids = self._config.node_ids
        return [
            new_leadership(assign_replicas(i, replication, ids, 0), self.nodes, coordinates=True)
            for i in range(count)
        ]

    # ---- queries -----------------------------------------------------------------
    def listed_nodes(self) -> list[int]:
        """Nodes Metadata lists, in id order."""
        return [n for n in self.nodes.ids if self.nodes.listed(n)]

    def controller(self) -> int:
        """Return the node Metadata names as controller: the first listed one (-1: none)."""
        listed = self.listed_nodes()
        return listed[0] if listed else NO_LEADER

    def coordinator(self, key_type: int, key: str) -> Leadership:
        """Leadership of the internal partition that holds a group or transactional id."""
        partitions = self.internal[key_type]
        return partitions[partition_for(key, len(partitions))]

    def coordinator_error(
        self, key_type: int, key: str, node: int, *, write: bool
    ) -> ErrorCode | None:
        """Kafka's answer to a coordinator request for ``key`` sent to ``node``, or None.

        NOT_COORDINATOR if the node does not lead the key's partition;
        COORDINATOR_LOAD_IN_PROGRESS while it loads; for a request that writes to the
        internal topic, COORDINATOR_NOT_AVAILABLE below its min ISR (Kafka maps the
        NOT_ENOUGH_REPLICAS of the internal append so).
        """
        ld = self.coordinator(key_type, key)
        if ld.leader != node:
            return ErrorCode.not_coordinator
        if ld.loading_until_s and self._clock.monotonic_s() < ld.loading_until_s:
            return ErrorCode.coordinator_load_in_progress
        if write and len(self.nodes.in_sync(ld.replicas)) < self._min_isr[key_type]:
            return ErrorCode.coordinator_not_available
        return None

    def min_isr(self, configured: str | None) -> int:
        """Return a topic's ``min.insync.replicas``: its own setting, else the broker's."""
        return int(configured) if configured is not None else self._config.min_insync_replicas

    # ---- changes (node faults) ----------------------------------------------------
    def stop(self, node: int, *, clean: bool) -> None:
        """Stop a node: leaderships move first on a clean stop, and its failure is known."""
        if clean:
            for ld in self._led_by(node):
                self._elect(ld, exclude=node, keep_if_none=True)
        self.nodes.stopped.add(node)
        if clean:
            self.fence(node)

    def fence(self, node: int) -> None:
        """Notice that a stopped node is down: move its leaderships away (Kafka fences it)."""
        if node not in self.nodes.stopped or node in self.nodes.fenced:
            return
        self.nodes.fenced.add(node)
        for ld in self._led_by(node):
            self._elect(ld, exclude=node, keep_if_none=False)

    def start(self, node: int) -> None:
        """Run a node again: it leads every leaderless partition it is a replica of."""
        self.nodes.mark_started(node)
        for ld in self._all():
            if ld.leader == NO_LEADER and node in ld.replicas:
                self._set_leader(ld, node)

    def move_leader(self, ld: Leadership, node: int, *, load_s: float | None = None) -> None:
        """Make ``node`` the leader of a partition (it must be a running in-sync replica)."""
        if node not in ld.replicas:
            msg = f"node {node} is not a replica (replicas {list(ld.replicas)})"
            raise ValueError(msg)
        if not (self.nodes.listed(node) and self.nodes.running(node)):
            msg = f"node {node} is stopped; start it first"
            raise ValueError(msg)
        self._set_leader(ld, node, load_s=load_s)

    # ---- internals ----------------------------------------------------------------
    def _all(self) -> Iterator[Leadership]:
        for topic in self._topics.topics.values():
            yield from topic.leaders
        for partitions in self.internal.values():
            yield from partitions

    def _led_by(self, node: int) -> list[Leadership]:
        return [ld for ld in self._all() if ld.leader == node]

    def _elect(self, ld: Leadership, *, exclude: int, keep_if_none: bool) -> None:
        for candidate in ld.replicas:
            if (
                candidate != exclude
                and self.nodes.listed(candidate)
                and self.nodes.running(candidate)
            ):
                self._set_leader(ld, candidate)
                return
        if not keep_if_none:
            self._set_leader(ld, NO_LEADER)

    def _set_leader(self, ld: Leadership, node: int, *, load_s: float | None = None) -> None:
        if ld.leader != node:
            ld.leader = node
            ld.leader_epoch += 1
        if ld.coordinates and node != NO_LEADER:
            seconds = self._config.coordinator_load_ms / 1000 if load_s is None else load_s
            ld.loading_until_s = self._clock.monotonic_s() + seconds if seconds > 0 else 0.0

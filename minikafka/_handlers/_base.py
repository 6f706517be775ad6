"""Handler registry shared by the handler modules."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from .._cluster import GROUP_COORDINATOR, TXN_COORDINATOR
from .._offsets import CommittedOffset, Offsets

if TYPE_CHECKING:
    from .._broker import Broker
    from .._log import PartitionLog

Data = dict[str, Any]
Handler = Callable[["RequestContext", Any], "Data | Awaitable[Data] | None"]
ErrorBuilder = Callable[[Any, ErrorCode], Data]


@dataclass(slots=True)
class Connection:
    """What the broker remembers of one client connection."""

    metadata_answers: int = 0  # Metadata requests answered on it so far


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestContext:
    """What a handler knows about the request besides its body: also the node it reached."""

    broker: Broker
    api_key: int
    version: int
    client_id: str | None
    client_host: str
    node_id: int
    connection: Connection

    def led_partition(self, topic: str, index: int) -> tuple[PartitionLog | None, ErrorCode]:
        """Return the partition's log if this node leads it, else None and Kafka's answer.

        UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist,
        NOT_LEADER_OR_FOLLOWER when another node (or none) leads it.
        """
        t = self.broker.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            return None, ErrorCode.unknown_topic_or_partition
        if t.leaders[index].leader != self.node_id:
            return None, ErrorCode.not_leader_or_follower
        return t.partitions[index], ErrorCode.none

    def coordinates(self, key_type: int, key: str) -> bool:
        """Whether this node coordinates a group (key type 0) or transactional id (1)."""
        return self.broker.cluster.coordinator(key_type, key).leader == self.node_id

    def coordinator_error(self, key_type: int, key: str) -> ErrorCode | None:
        """Kafka's answer to a read of ``key``'s coordinator state here, or None to serve it."""
        return self.broker.cluster.coordinator_error(key_type, key, self.node_id, write=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiSpec:
    """One supported API: version range, handler, and an error-response builder."""

    api_key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    error_response: ErrorBuilder


API_TABLE: dict[int, ApiSpec] = {}

# APIs served by the coordinator of one key: api key -> (key type, how to read the key from
# the request, whether the request writes to the internal topic). InitProducerId without a
# transactional id (an idempotent producer) is served by any node.
Key = Callable[[Any], "str | None"]
COORDINATED: dict[int, tuple[int, Key, bool]] = {
    8: (GROUP_COORDINATOR, lambda r: r.group_id, True),  # OffsetCommit
    9: (GROUP_COORDINATOR, lambda r: r.group_id, False),  # OffsetFetch
    11: (GROUP_COORDINATOR, lambda r: r.group_id, False),  # JoinGroup
    12: (GROUP_COORDINATOR, lambda r: r.group_id, False),  # Heartbeat
    13: (GROUP_COORDINATOR, lambda r: r.group_id, False),  # LeaveGroup
    14: (GROUP_COORDINATOR, lambda r: r.group_id, True),  # SyncGroup
    28: (GROUP_COORDINATOR, lambda r: r.group_id, True),  # TxnOffsetCommit
    # an empty transactional id is INVALID_REQUEST on any node, as Kafka answers it
    22: (TXN_COORDINATOR, lambda r: r.transactional_id or None, True),  # InitProducerId
    24: (TXN_COORDINATOR, lambda r: r.v3_and_below_transactional_id, True),  # AddPartitionsToTxn
    25: (TXN_COORDINATOR, lambda r: r.transactional_id, True),  # AddOffsetsToTxn
    26: (TXN_COORDINATOR, lambda r: r.transactional_id, True),  # EndTxn
}


def coordinator_answer(ctx: RequestContext, req: Any) -> ErrorCode | None:
    """Kafka's answer when ``req`` reached a node that cannot serve its coordinator key now.

    NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE
    (:meth:`minikafka._cluster.Cluster.coordinator_error`); None for a request this node
    serves, and for every API that no coordinator serves.
    """
    routed = COORDINATED.get(ctx.api_key)
    if routed is None:
        return None
    key_type, key_of, write = routed
    key = key_of(req)
    if key is None:
        return None
    return ctx.broker.cluster.coordinator_error(key_type, key, ctx.node_id, write=write)


def top_level_error(_req: Any, code: ErrorCode) -> Data:
    """Error builder for APIs whose response has one top-level error_code."""
    return {"error_code": code}


def register(
    api_key: int, name: str, min_v: int, max_v: int, error: ErrorBuilder = top_level_error
) -> Callable[[Handler], Handler]:
    """Add a handler to :data:`API_TABLE`."""

    def deco(fn: Handler) -> Handler:
        API_TABLE[api_key] = ApiSpec(
            api_key=api_key,
            name=name,
            min_version=min_v,
            max_version=max_v,
            handler=fn,
            error_response=error,
        )
        return fn

    return deco


def per_partition_offsets_error(req: Any, code: ErrorCode) -> Data:
    """Error answer of an offset commit request: ``code`` for every partition asked."""
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                ],
            }
            for t in req.topics
        ]
    }


def offsets_to_store(
    ctx: RequestContext, req: Any, code: ErrorCode, *, expire_ms: int | None = None
) -> tuple[Offsets, list[Data]]:
    """Check an offset commit's partitions; return the offsets to store and the answer topics.

    Partitions that do not exist get UNKNOWN_TOPIC_OR_PARTITION first (as Kafka answers);
    the others get the request-level ``code``, and only with no error are they stored.
    """
    broker = ctx.broker
    now = broker.clock.wall_ms()
    accepted: Offsets = {}
    topics: list[Data] = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            pcode = code
            if broker.topics.partition(t.name, p.partition_index) is None:
                pcode = ErrorCode.unknown_topic_or_partition
            if pcode == ErrorCode.none:
                accepted[(t.name, p.partition_index)] = CommittedOffset(
                    offset=p.committed_offset,
                    metadata=p.committed_metadata,
                    leader_epoch=getattr(p, "committed_leader_epoch", -1),
                    commit_ms=now,
                    expire_ms=expire_ms,
                )
            parts.append({"partition_index": p.partition_index, "error_code": pcode})
        topics.append({"name": t.name, "partitions": parts})
    return accepted, topics

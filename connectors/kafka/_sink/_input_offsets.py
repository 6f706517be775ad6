"""``commit_offsets_to_group``: the epoch's input offsets in a consumer group, transactionally.

Scheme (docs/architecture.md, section 11; docs/kafka-sink.md, "Input offsets in a
consumer group"):

1. write partition 0's transaction commits, for the user's group, the ``end`` offsets of
   the epoch's Kafka input (``txn.InputOffsets`` of the plan) with
   ``send_offsets_to_transaction``, beside its marker: they become visible exactly when
   partition 0's output does, never earlier, and a redo of partition 0 commits them again;
2. the group is one without members: its metadata is that of a consumer that never
   joined (generation -1, no member id), built once per process and group without any
   network I/O (:func:`group_metadata`), like the marker groups;
3. the offsets name the input topics on the sink's cluster: the input must live there
   (real Kafka refuses offsets of partitions it does not have).

Aligned mode: partition 0 commits only after every write partition voted yes, so the
group never shows an epoch that can still be aborted. Unaligned mode: partition 0 commits
as soon as it is pre-committed; until the other partitions of the epoch commit (or, after
a failure, the replay of the same batch redoes them) the group can be ahead of the
visible output by that one epoch.
"""

from __future__ import annotations

import threading

from confluent_kafka import TopicPartition

from connectors.kafka import _client
from connectors.stage import StageCode, StageError
from txn import EpochPlan

# Write partition whose transaction carries the input offsets.
OFFSETS_PARTITION = 0

_lock = threading.Lock()
_metadata: dict[str, bytes] = {}


def group_metadata(group: str) -> bytes:
    """Return the consumer group metadata of ``group`` as a group without members.

    confluent-kafka serializes it to bytes (fork-safe, kept per process). The consumer that
    builds it gets no bootstrap servers: it never connects and is closed at once.
    """
    with _lock:
        cached = _metadata.get(group)
    if cached is not None:
        return cached
    consumer = _client.unconnected_consumer({"group.id": group, "log_level": 0})
    try:
        built: bytes = consumer.consumer_group_metadata()
    finally:
        consumer.close()
    with _lock:
        _metadata[group] = built
    return built


def require_kafka_input(plan: EpochPlan, sink_id: str, group: str) -> None:
    """Refuse an epoch whose Kafka input offsets are unknown (before anything is written).

    Raises:
        StageCode.NOT_KAFKA_INPUT: the plan recorded no Kafka input offsets.

    """
    if plan.input is not None and plan.input.end:
        return
    msg = (
        f"sink {sink_id!r} commits its input offsets to group {group!r}, but epoch "
        f"{plan.epoch} recorded no Kafka input offsets (the query reads no Kafka source, or "
        "runs under Spark Connect); remove commit_offsets_to_group or read Kafka"
    )
    raise StageError(msg, code=StageCode.NOT_KAFKA_INPUT)


def group_offsets(plan: EpochPlan) -> list[TopicPartition]:
    """Return the offsets partition 0 commits for ``plan``: its input's ``end``."""
    assert plan.input is not None  # noqa: S101 - require_kafka_input checked it at begin
    return [TopicPartition(topic, part, offset) for topic, part, offset in plan.input.end]

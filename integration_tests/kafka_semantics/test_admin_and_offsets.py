"""Topic administration and offset lookups: Metadata, CreatePartitions, DeleteTopics,
DeleteRecords and ListOffsets (earliest, latest, by timestamp, and max timestamp where the
broker is new enough)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from ._support import (
    CLIENT_TIMEOUT_S,
    Record,
    earliest_offset,
    end_offsets,
    fatal_error_of,
    plain_producer,
    produce_values,
    read_partition,
    wait_until,
)

API_LIST_OFFSETS = 2
# ListOffsets v7 added the max-timestamp lookup (KIP-734, Apache Kafka 3.0).
LIST_OFFSETS_MAX_TIMESTAMP_VERSION = 7


def _partition_count(admin: AdminClient, topic: str) -> int:
    md = admin.list_topics(topic=topic, timeout=CLIENT_TIMEOUT_S).topics[topic]
    return -1 if md.error is not None else len(md.partitions)


def _offset(admin: AdminClient, topic: str, partition: int, spec: OffsetSpec) -> tuple[int, int]:
    tp = TopicPartition(topic, partition)
    info = admin.list_offsets({tp: spec}, request_timeout=CLIENT_TIMEOUT_S)[tp].result(
        timeout=CLIENT_TIMEOUT_S
    )
    return info.offset, info.timestamp


def test_metadata_reports_partition_count(
    kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("metadata", partitions=3)
    md = kafka_admin.list_topics(topic=topic, timeout=CLIENT_TIMEOUT_S)
    partitions = md.topics[topic].partitions
    assert sorted(partitions) == [0, 1, 2]
    assert all(p.leader in md.brokers for p in partitions.values())


def test_list_offsets_earliest_latest_and_by_timestamp(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("list-offsets")
    assert end_offsets(kafka_admin, topic) == (0, 0)
    assert earliest_offset(kafka_admin, topic) == 0

    now_ms = int(time.time() * 1000)
    stamps = [now_ms - 30_000, now_ms - 20_000, now_ms - 10_000]
    producer = plain_producer(kafka_bootstrap)
    for i, stamp in enumerate(stamps):
        producer.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=stamp)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0

    assert earliest_offset(kafka_admin, topic) == 0
    assert end_offsets(kafka_admin, topic) == (3, 3)
    # The first offset whose timestamp is at or after the one asked for.
    assert _offset(kafka_admin, topic, 0, OffsetSpec.for_timestamp(stamps[1] - 1)) == (1, stamps[1])
    assert _offset(kafka_admin, topic, 0, OffsetSpec.for_timestamp(stamps[1])) == (1, stamps[1])
    # Past the newest record: no such offset (-1).
    assert _offset(kafka_admin, topic, 0, OffsetSpec.for_timestamp(now_ms + 60_000))[0] == -1


def test_delete_records_moves_the_log_start(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("delete-records")
    produce_values(plain_producer(kafka_bootstrap), topic, [f"v{i}" for i in range(5)])
    tp = TopicPartition(topic, 0, 2)
    futures = kafka_admin.delete_records(
        [tp], request_timeout=CLIENT_TIMEOUT_S, operation_timeout=CLIENT_TIMEOUT_S
    )
    deleted = futures[tp].result(timeout=CLIENT_TIMEOUT_S)
    assert deleted.low_watermark == 2
    assert earliest_offset(kafka_admin, topic) == 2
    assert end_offsets(kafka_admin, topic) == (5, 5)
    assert read_partition(kafka_bootstrap, topic, committed=False) == [
        Record(2, "v2"),
        Record(3, "v3"),
        Record(4, "v4"),
    ]


def test_create_partitions_adds_usable_partitions(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("grow")
    futures = kafka_admin.create_partitions(
        [NewPartitions(topic, 3)], request_timeout=CLIENT_TIMEOUT_S
    )
    futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    wait_until(lambda: _partition_count(kafka_admin, topic) == 3, "3 partitions in metadata")

    produce_values(plain_producer(kafka_bootstrap), topic, ["on-new-partition"], partition=2)
    assert read_partition(kafka_bootstrap, topic, 2, committed=False) == [
        Record(0, "on-new-partition")
    ]

    # Shrinking is not allowed.
    futures = kafka_admin.create_partitions(
        [NewPartitions(topic, 2)], request_timeout=CLIENT_TIMEOUT_S
    )
    with pytest.raises(KafkaException) as info:
        futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert fatal_error_of(info.value).code() == KafkaError.INVALID_PARTITIONS


def test_create_existing_topic_fails_and_delete_topic_removes_it(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("delete-me", partitions=2)
    futures = kafka_admin.create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=1)],
        request_timeout=CLIENT_TIMEOUT_S,
    )
    with pytest.raises(KafkaException) as info:
        futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert fatal_error_of(info.value).code() == KafkaError.TOPIC_ALREADY_EXISTS

    kafka_admin.delete_topics([topic], request_timeout=CLIENT_TIMEOUT_S)[topic].result(
        timeout=CLIENT_TIMEOUT_S
    )
    # Listing all topics (not this one by name) cannot auto-create it again.
    wait_until(
        lambda: topic not in kafka_admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics,
        "the deleted topic to leave the metadata",
    )
    tp = TopicPartition(topic, 0)
    lookup = kafka_admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=CLIENT_TIMEOUT_S)
    with pytest.raises(KafkaException) as info:
        lookup[tp].result(timeout=CLIENT_TIMEOUT_S)
    assert fatal_error_of(info.value).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_list_offsets_max_timestamp(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    new_topic: Callable[..., str],
    require_api: Callable[[int, int, str], None],
) -> None:
    require_api(
        API_LIST_OFFSETS,
        LIST_OFFSETS_MAX_TIMESTAMP_VERSION,
        "the max-timestamp offset lookup (KIP-734, Kafka 3.0+)",
    )
    topic = new_topic("max-timestamp")
    now_ms = int(time.time() * 1000)
    stamps = [now_ms - 30_000, now_ms - 10_000, now_ms - 20_000]  # newest in the middle
    producer = plain_producer(kafka_bootstrap)
    for i, stamp in enumerate(stamps):
        producer.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=stamp)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert _offset(kafka_admin, topic, 0, OffsetSpec.max_timestamp()) == (1, stamps[1])

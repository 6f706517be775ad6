"""Topic administration and offset lookups: Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DeleteRecords, DescribeConfigs of a topic, and ListOffsets (earliest, latest,
by timestamp, and max timestamp where the broker is new enough)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from ._support import (
    CLIENT_TIMEOUT_S,
    Record,
    earliest_offset,
    end_offsets,
    fatal_error_of,
    plain_producer,
    produce_values,
    read_partition,
    unique,
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
        Record(offset=2, value="v2"),
        Record(offset=3, value="v3"),
        Record(offset=4, value="v4"),
    ]
    # A read below the log start is refused (the source reports it as data loss).
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique("below-start"),
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        msg = None
        while msg is None:
            assert time.monotonic() < deadline, "no answer to a fetch below the log start"
            msg = consumer.poll(0.5)
        assert msg.error() is not None, f"read offset {msg.offset()} below the log start"
        assert msg.error().code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), CLIENT_TIMEOUT_S)
        assert low == 2
    finally:
        consumer.close()


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
        Record(offset=0, value="on-new-partition")
    ]

    # Shrinking is not allowed.
    futures = kafka_admin.create_partitions(
        [NewPartitions(topic, 2)], request_timeout=CLIENT_TIMEOUT_S
    )
    with pytest.raises(KafkaException) as info:
        futures[topic].result(timeout=CLIENT_TIMEOUT_S)
    assert fatal_error_of(info.value).code() == KafkaError.INVALID_PARTITIONS


def _listed(admin: AdminClient) -> dict[str, int]:
    """Topic name -> partition count of a full listing (which never auto-creates a topic)."""
    md = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}


def _create(admin: AdminClient, topic: NewTopic) -> KafkaError | None:
    future = admin.create_topics([topic], request_timeout=CLIENT_TIMEOUT_S)[topic.topic]
    try:
        future.result(timeout=CLIENT_TIMEOUT_S)
    except KafkaException as exc:
        return fatal_error_of(exc)
    return None


def test_create_topic_with_configs_and_refuse_an_existing_name(kafka_bootstrap: str) -> None:
    # A client of its own that never names the topic in a metadata request, so nothing here can
    # auto-create it (librdkafka's producer-type handles may, on brokers that allow it).
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    topic = f"created-{uuid.uuid4().hex[:10]}"
    configs = {"cleanup.policy": "compact", "retention.ms": "3600000"}
    assert _create(admin, NewTopic(topic, 3, -1, config=configs)) is None
    wait_until(lambda: _listed(admin).get(topic) == 3, "the new topic in the full listing")
    leaders = admin.list_topics(timeout=CLIENT_TIMEOUT_S).topics[topic].partitions.values()
    assert all(p.leader >= 0 for p in leaders)

    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = admin.describe_configs([resource], request_timeout=CLIENT_TIMEOUT_S)
    entries = described[resource].result(timeout=CLIENT_TIMEOUT_S)
    for key, value in configs.items():
        assert entries[key].value == value, entries[key]
        assert entries[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, entries[key]
    assert end_offsets(admin, topic, 2) == (0, 0)

    err = _create(admin, NewTopic(topic, 3, -1))
    assert err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS, err
    admin.delete_topics([topic], request_timeout=CLIENT_TIMEOUT_S)[topic].result(
        timeout=CLIENT_TIMEOUT_S
    )


def test_deleted_topic_leaves_the_metadata_and_never_comes_back_with_data(
    kafka_bootstrap: str,
) -> None:
    """What every Kafka shows after DeleteTopics, and only that.

    Not pinned: ListOffsets or Produce on the deleted name. Kafka in ZooKeeper mode removes a
    topic from the metadata before its partitions go away, and librdkafka may still know the old
    leaders, so such a request can succeed, time out or fail with different codes; with
    auto-creation on, a client naming the topic can even create it again.
    """
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # see the test above
    topic = f"deleted-{uuid.uuid4().hex[:10]}"
    assert _create(admin, NewTopic(topic, 2, -1)) is None
    wait_until(lambda: _listed(admin).get(topic) == 2, "the new topic in the full listing")
    produce_values(plain_producer(kafka_bootstrap), topic, ["old-0", "old-1"])

    admin.delete_topics([topic], request_timeout=CLIENT_TIMEOUT_S)[topic].result(
        timeout=CLIENT_TIMEOUT_S
    )
    wait_until(lambda: topic not in _listed(admin), "the deleted topic to leave the metadata")
    again = admin.delete_topics([topic], request_timeout=CLIENT_TIMEOUT_S)[topic]
    with pytest.raises(KafkaException) as info:
        again.result(timeout=CLIENT_TIMEOUT_S)
    assert fatal_error_of(info.value).code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # The name can be used again (once the broker has finished deleting) and starts empty.
    errors: list[KafkaError | None] = []

    def recreated() -> bool:
        errors.append(_create(admin, NewTopic(topic, 1, -1)))
        return errors[-1] is None

    wait_until(recreated, f"the name to be free again (last error {errors[-1:]})")
    wait_until(lambda: _listed(admin).get(topic) == 1, "the new topic in the full listing")
    assert earliest_offset(admin, topic) == 0
    assert end_offsets(admin, topic) == (0, 0)
    assert read_partition(kafka_bootstrap, topic, committed=False) == []
    admin.delete_topics([topic], request_timeout=CLIENT_TIMEOUT_S)[topic].result(
        timeout=CLIENT_TIMEOUT_S
    )


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

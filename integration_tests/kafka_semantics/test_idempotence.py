"""Idempotent producer: per-partition sequence numbers suppress duplicates and reject gaps.

librdkafka retries are hard to provoke on purpose, so the duplicate case is reproduced at the
wire level: the very same record batch (same producer id, epoch and base sequence) is sent
twice, exactly as a client retry after a lost response would send it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from ._support import CLIENT_TIMEOUT_S, Record, plain_producer, read_partition
from ._wire import (
    API_INIT_PRODUCER_ID,
    API_PRODUCE,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    ProduceResult,
    WireClient,
    record_batch,
)

MESSAGES_PER_PARTITION = 5000
PARTITIONS = 2


def _speakable(
    api_versions: dict[int, tuple[int, int]], api_key: int, ours: tuple[int, ...], name: str
) -> int:
    """Return the lowest of ``ours`` the broker accepts for ``api_key``, or skip the test."""
    low, high = api_versions.get(api_key, (1, 0))
    for version in ours:
        if low <= version <= high:
            return version
    pytest.skip(f"broker speaks {name} v{low}..v{high}; the raw client speaks only {ours}")


def test_idempotent_producer_writes_each_record_once_in_order(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("idempotent", partitions=PARTITIONS)
    producer = plain_producer(
        kafka_bootstrap,
        **{"enable.idempotence": True, "linger.ms": 5, "max.in.flight.requests.per.connection": 5},
    )
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(MESSAGES_PER_PARTITION):
        for partition in range(PARTITIONS):
            value = f"p{partition}-{i:06d}".encode()
            producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    if errors:
        raise KafkaException(errors[0])

    for partition in range(PARTITIONS):
        records = read_partition(kafka_bootstrap, topic, partition, committed=False)
        assert records == [
            Record(offset=i, value=f"p{partition}-{i:06d}") for i in range(MESSAGES_PER_PARTITION)
        ]


def test_resent_batch_is_deduplicated_and_sequence_gap_rejected(
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    api_versions: dict[int, tuple[int, int]],
    leader_client: Callable[[str, int], WireClient],
) -> None:
    init_version = _speakable(api_versions, API_INIT_PRODUCER_ID, (0, 1), "InitProducerId")
    _speakable(api_versions, API_PRODUCE, (3,), "Produce")
    topic = new_topic("idempotent-wire")
    client = leader_client(topic, 0)
    producer_id, epoch = client.init_producer_id(init_version)

    def batch(base_sequence: int, *vals: bytes) -> bytes:
        return record_batch(
            list(vals), producer_id=producer_id, producer_epoch=epoch, base_sequence=base_sequence
        )

    first = batch(0, b"a0", b"a1", b"a2")
    second = batch(3, b"b0", b"b1")
    assert client.produce(topic, 0, first) == ProduceResult(NONE, 0)
    assert client.produce(topic, 0, second) == ProduceResult(NONE, 3)

    # Retries of either of the last batches: acknowledged with the original offsets, not appended.
    assert client.produce(topic, 0, first) == ProduceResult(NONE, 0)
    assert client.produce(topic, 0, second) == ProduceResult(NONE, 3)

    # A gap in the sequence (5 is next, 9 is sent) is refused.
    gap = client.produce(topic, 0, batch(9, b"gap"))
    assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER

    assert client.produce(topic, 0, batch(5, b"c0")) == ProduceResult(NONE, 5)

    records = read_partition(kafka_bootstrap, topic, committed=False)
    assert records == [
        Record(offset=0, value="a0"),
        Record(offset=1, value="a1"),
        Record(offset=2, value="a2"),
        Record(offset=3, value="b0"),
        Record(offset=4, value="b1"),
        Record(offset=5, value="c0"),
    ]

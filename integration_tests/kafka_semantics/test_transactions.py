"""Transactional visibility, the last stable offset, and transaction timeouts (KIP-98).

Offsets below are exact: in one partition every data record takes one offset and every
transaction commit/abort marker takes one more. Each test waits until the LSO reaches the high
watermark after ending a transaction, so the marker has landed before anything else is written
(Kafka writes markers asynchronously after answering EndTxn).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ._support import (
    CLIENT_TIMEOUT_S,
    CONSUMER_POLL_S,
    READ_TIMEOUT_S,
    Record,
    broker_config,
    end_offsets,
    fatal_error_of,
    plain_producer,
    produce_values,
    read_partition,
    txn_producer,
    unique,
    values,
    wait_stable,
    wait_until,
)

# Milliseconds: a transaction timeout short enough for the broker to abort an idle transaction
# within the test, and at librdkafka's lower bound of 1000 ms or above.
SHORT_TXN_TIMEOUT_MS = 2000


def test_read_committed_sees_only_committed_and_plain_records(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("visibility")
    plain = plain_producer(kafka_bootstrap)
    txn = txn_producer(kafka_bootstrap, unique("visibility"))

    produce_values(plain, topic, ["p1"])  # offset 0
    txn.begin_transaction()
    produce_values(txn, topic, ["c1", "c2"])  # offsets 1, 2
    txn.commit_transaction(CLIENT_TIMEOUT_S)  # commit marker at 3
    assert wait_stable(kafka_admin, topic) == 4
    txn.begin_transaction()
    produce_values(txn, topic, ["a1", "a2"])  # offsets 4, 5
    txn.abort_transaction(CLIENT_TIMEOUT_S)  # abort marker at 6
    assert wait_stable(kafka_admin, topic) == 7
    produce_values(plain, topic, ["p2"])  # offset 7
    txn.begin_transaction()
    produce_values(txn, topic, ["c3"])  # offset 8
    txn.commit_transaction(CLIENT_TIMEOUT_S)  # commit marker at 9
    assert wait_stable(kafka_admin, topic) == 10

    uncommitted = read_partition(kafka_bootstrap, topic, committed=False)
    committed = read_partition(kafka_bootstrap, topic, committed=True)

    assert uncommitted == [
        Record(0, "p1"),
        Record(1, "c1"),
        Record(2, "c2"),
        Record(4, "a1"),
        Record(5, "a2"),
        Record(7, "p2"),
        Record(8, "c3"),
    ]
    assert committed == [
        Record(0, "p1"),
        Record(1, "c1"),
        Record(2, "c2"),
        Record(7, "p2"),
        Record(8, "c3"),
    ]


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_lso_stalls_while_transaction_open_and_advances_when_it_ends(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str], outcome: str
) -> None:
    topic = new_topic("lso")
    plain = plain_producer(kafka_bootstrap)
    txn = txn_producer(kafka_bootstrap, unique("lso"))

    produce_values(plain, topic, ["before"])  # offset 0
    txn.begin_transaction()
    produce_values(txn, topic, ["t1", "t2"])  # offsets 1, 2 (open)
    produce_values(plain, topic, ["during"])  # offset 3, after the open transaction

    # High watermark 4, LSO pinned at the open transaction's first offset.
    assert end_offsets(kafka_admin, topic) == (4, 1)
    reader = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique("lso-reader"),
            "isolation.level": "read_committed",
        }
    )
    try:
        marks = reader.get_watermark_offsets(
            TopicPartition(topic, 0), timeout=CLIENT_TIMEOUT_S, cached=False
        )
    finally:
        reader.close()
    assert marks == (0, 1), "a read_committed consumer's end offset is the LSO"
    # A read_committed reader stops at the LSO: not even the plain record after it is visible.
    assert read_partition(kafka_bootstrap, topic, committed=True) == [Record(0, "before")]

    if outcome == "commit":
        txn.commit_transaction(CLIENT_TIMEOUT_S)
    else:
        txn.abort_transaction(CLIENT_TIMEOUT_S)

    assert wait_stable(kafka_admin, topic) == 5  # marker at offset 4
    expected = ["before", "t1", "t2", "during"] if outcome == "commit" else ["before", "during"]
    assert values(read_partition(kafka_bootstrap, topic, committed=True)) == expected


def test_new_instance_init_transactions_aborts_open_transaction(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("init-aborts")
    txn_id = unique("init-aborts")
    first = txn_producer(kafka_bootstrap, txn_id)
    first.begin_transaction()
    produce_values(first, topic, ["open-1", "open-2"])  # offsets 0, 1, never committed
    assert end_offsets(kafka_admin, topic) == (2, 0)

    second = txn_producer(kafka_bootstrap, txn_id)  # must abort first's transaction

    assert wait_stable(kafka_admin, topic) == 3  # abort marker at offset 2
    assert read_partition(kafka_bootstrap, topic, committed=True) == []
    assert values(read_partition(kafka_bootstrap, topic, committed=False)) == ["open-1", "open-2"]

    second.begin_transaction()
    produce_values(second, topic, ["after"])  # offset 3
    second.commit_transaction(CLIENT_TIMEOUT_S)  # marker at 4
    assert wait_stable(kafka_admin, topic) == 5
    assert read_partition(kafka_bootstrap, topic, committed=True) == [Record(3, "after")]


def test_broker_aborts_transaction_after_its_timeout(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("txn-timeout")
    producer = txn_producer(
        kafka_bootstrap, unique("txn-timeout"), **{"transaction.timeout.ms": SHORT_TXN_TIMEOUT_MS}
    )
    producer.begin_transaction()
    produce_values(producer, topic, ["doomed-1", "doomed-2"])  # offsets 0, 1
    # (No check that the LSO is stalled here: on a busy machine the 2 s may already be over.)

    # Nobody ends the transaction: the coordinator must abort it on its own.
    assert wait_stable(kafka_admin, topic) == 3  # abort marker at offset 2
    assert read_partition(kafka_bootstrap, topic, committed=True) == []

    # The broker bumped the producer's epoch when it aborted, so a late commit cannot succeed.
    with pytest.raises(KafkaException):
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    assert read_partition(kafka_bootstrap, topic, committed=True) == []
    assert end_offsets(kafka_admin, topic) == (3, 3)


def test_transaction_timeout_above_broker_maximum_is_rejected(
    kafka_bootstrap: str, kafka_admin: AdminClient
) -> None:
    maximum_ms = int(broker_config(kafka_admin, "transaction.max.timeout.ms"))
    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": unique("too-long"),
            "transaction.timeout.ms": maximum_ms + 1,
        }
    )
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(CLIENT_TIMEOUT_S)
    assert fatal_error_of(info.value).code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_interleaved_transactions_in_one_partition(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("interleaved")
    first = txn_producer(kafka_bootstrap, unique("interleaved-a"))
    second = txn_producer(kafka_bootstrap, unique("interleaved-b"))
    first.begin_transaction()
    second.begin_transaction()
    produce_values(first, topic, ["a1"])  # offset 0
    produce_values(second, topic, ["b1"])  # offset 1
    produce_values(first, topic, ["a2"])  # offset 2
    second.commit_transaction(CLIENT_TIMEOUT_S)  # commit marker at 3

    # The later transaction committed, but the LSO stays at the first open one's start.
    seen: list[tuple[int, int]] = []

    def commit_marker_landed() -> bool:
        seen.append(end_offsets(kafka_admin, topic))
        return seen[-1][0] == 4

    wait_until(commit_marker_landed, "the commit marker to land")
    assert seen[-1] == (4, 0)
    assert read_partition(kafka_bootstrap, topic, committed=True) == []

    first.abort_transaction(CLIENT_TIMEOUT_S)  # abort marker at 4
    assert wait_stable(kafka_admin, topic) == 5
    assert read_partition(kafka_bootstrap, topic, committed=True) == [Record(1, "b1")]
    assert values(read_partition(kafka_bootstrap, topic, committed=False)) == ["a1", "b1", "a2"]


def test_read_committed_position_passes_trailing_markers_and_aborted_records(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    """The source detects the end of a range by consumer position; the log may end in a gap."""
    topic = new_topic("position")
    txn = txn_producer(kafka_bootstrap, unique("position"))
    txn.begin_transaction()
    produce_values(txn, topic, ["c1"])  # offset 0
    txn.commit_transaction(CLIENT_TIMEOUT_S)  # marker at 1
    assert wait_stable(kafka_admin, topic) == 2
    txn.begin_transaction()
    produce_values(txn, topic, ["a1", "a2"])  # offsets 2, 3
    txn.abort_transaction(CLIENT_TIMEOUT_S)  # marker at 4
    assert wait_stable(kafka_admin, topic) == 5

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique("position"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    got: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            assert time.monotonic() < deadline, f"no EOF after {got}"
            msg = consumer.poll(CONSUMER_POLL_S)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                break
            got.append(msg.value().decode())
        position = consumer.position([TopicPartition(topic, 0)])[0].offset
    finally:
        consumer.close()
    assert got == ["c1"]
    assert position == 5, "position must pass the aborted records and both markers"

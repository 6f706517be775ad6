"""Transactional visibility, the last stable offset, and transaction timeouts (KIP-98).

Offsets below are exact: in one partition every data record takes one offset and every
transaction commit/abort marker takes one more. Each test waits until the LSO reaches the high
watermark after ending a transaction, so the marker has landed before anything else is written
(Kafka writes markers asynchronously after answering EndTxn).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ._support import (
    CLIENT_TIMEOUT_S,
    FENCED_CODES,
    Record,
    broker_config,
    commit_values,
    consume_to_eof,
    end_offsets,
    eof_reader,
    fatal_error_of,
    group_consumer,
    plain_producer,
    produce_values,
    read_partition,
    txn_producer,
    unique,
    values,
    wait_stable,
    wait_until,
)
from ._wire import CONTROL_ABORT, READ_UNCOMMITTED, WireClient

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
        Record(offset=0, value="p1"),
        Record(offset=1, value="c1"),
        Record(offset=2, value="c2"),
        Record(offset=4, value="a1"),
        Record(offset=5, value="a2"),
        Record(offset=7, value="p2"),
        Record(offset=8, value="c3"),
    ]
    assert committed == [
        Record(offset=0, value="p1"),
        Record(offset=1, value="c1"),
        Record(offset=2, value="c2"),
        Record(offset=7, value="p2"),
        Record(offset=8, value="c3"),
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
    assert read_partition(kafka_bootstrap, topic, committed=True) == [
        Record(offset=0, value="before")
    ]

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
    topic = new_topic("init-aborts", partitions=2)
    source = new_topic("init-aborts-src")
    txn_id = unique("init-aborts")
    group = unique("init-aborts")
    first = txn_producer(kafka_bootstrap, txn_id)
    first.begin_transaction()
    produce_values(first, topic, ["open-1", "open-2"])  # offsets 0, 1 of partition 0
    produce_values(first, topic, ["open-3"], partition=1)  # offset 0 of partition 1
    member = group_consumer(kafka_bootstrap, group, committed=True)
    try:
        first.send_offsets_to_transaction(
            [TopicPartition(source, 0, 5)], member.consumer_group_metadata(), CLIENT_TIMEOUT_S
        )
        assert end_offsets(kafka_admin, topic) == (2, 0)

        second = txn_producer(kafka_bootstrap, txn_id)  # must abort first's transaction

        assert wait_stable(kafka_admin, topic) == 3  # abort marker at offset 2
        assert wait_stable(kafka_admin, topic, 1) == 2  # and at offset 1 of partition 1
        for partition in (0, 1):
            assert read_partition(kafka_bootstrap, topic, partition, committed=True) == []
        # The aborted transaction's offsets are dropped: neither committed nor left pending.
        (tp,) = member.committed([TopicPartition(source, 0)], timeout=CLIENT_TIMEOUT_S)
        assert (tp.error, tp.offset) == (None, OFFSET_INVALID)
    finally:
        member.close()
    assert values(read_partition(kafka_bootstrap, topic, committed=False)) == ["open-1", "open-2"]
    # The first instance is fenced: it can neither commit nor go on.
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(CLIENT_TIMEOUT_S)
    err = fatal_error_of(info.value)
    assert err.fatal() and err.code() in FENCED_CODES, err

    commit_values(second, topic, ["after"])  # offset 3, marker at 4
    assert wait_stable(kafka_admin, topic) == 5
    assert read_partition(kafka_bootstrap, topic, committed=True) == [
        Record(offset=3, value="after")
    ]


def test_broker_aborts_transaction_after_its_timeout(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    new_topic: Callable[..., str],
    leader_client: Callable[[str, int], WireClient],
) -> None:
    topic = new_topic("txn-timeout")
    txn_id = unique("txn-timeout")
    producer = txn_producer(
        kafka_bootstrap, txn_id, **{"transaction.timeout.ms": SHORT_TXN_TIMEOUT_MS}
    )
    producer.begin_transaction()
    produce_values(producer, topic, ["doomed-1", "doomed-2"])  # offsets 0, 1
    # (No check that the LSO is stalled here: on a busy machine the 2 s may already be over.)

    # Nobody ends the transaction: the coordinator must abort it on its own.
    assert wait_stable(kafka_admin, topic) == 3  # abort marker at offset 2
    assert read_partition(kafka_bootstrap, topic, committed=True) == []
    # It fenced the producer first: the marker carries a newer epoch than the data.
    raw = leader_client(topic, 0).fetch(topic, 0, 0, READ_UNCOMMITTED)
    data, marker = raw.batches[0], raw.batches[-1]
    assert (marker.base_offset, marker.control_type) == (2, CONTROL_ABORT), raw
    assert marker.producer_id == data.producer_id, raw
    assert marker.producer_epoch > data.producer_epoch, raw

    # The timed-out producer's next call (its commit) fails as fenced, fatally ...
    with pytest.raises(KafkaException) as info:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    err = fatal_error_of(info.value)
    assert err.fatal() and err.code() in FENCED_CODES, err
    with pytest.raises(KafkaException):
        producer.begin_transaction()
    assert read_partition(kafka_bootstrap, topic, committed=True) == []
    assert end_offsets(kafka_admin, topic) == (3, 3)

    # ... and a new instance of the same transactional id takes over normally.
    commit_values(txn_producer(kafka_bootstrap, txn_id), topic, ["redo"])  # offset 3, marker 4
    assert wait_stable(kafka_admin, topic) == 5
    assert read_partition(kafka_bootstrap, topic, committed=True) == [
        Record(offset=3, value="redo")
    ]


def test_transaction_max_timeout_is_described_and_enforced(
    kafka_bootstrap: str, kafka_admin: AdminClient
) -> None:
    maximum_ms = int(broker_config(kafka_admin, "transaction.max.timeout.ms"))
    assert maximum_ms > 0

    def producer(timeout_ms: int) -> Producer:
        conf = {"transactional.id": unique("max-timeout"), "transaction.timeout.ms": timeout_ms}
        return Producer({"bootstrap.servers": kafka_bootstrap, **conf})

    producer(maximum_ms).init_transactions(CLIENT_TIMEOUT_S)  # the maximum itself is allowed
    with pytest.raises(KafkaException) as info:
        producer(maximum_ms + 1).init_transactions(CLIENT_TIMEOUT_S)
    err = fatal_error_of(info.value)
    assert err.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT and err.fatal(), err


def _wait_high_watermark(
    admin: AdminClient, topic: str, partition: int, high_watermark: int
) -> int:
    """Wait for a partition's high watermark (markers included) to reach a value; return the LSO."""
    seen: list[tuple[int, int]] = []

    def reached() -> bool:
        seen.append(end_offsets(admin, topic, partition))
        return seen[-1][0] >= high_watermark

    wait_until(reached, f"high watermark {high_watermark} on {topic}/{partition} ({seen[-1:]})")
    assert seen[-1][0] == high_watermark, seen[-1]
    return seen[-1][1]


def test_lso_with_several_transactions_ending_out_of_order(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    """Three producers' transactions overlap in two partitions and end out of order."""
    topic = new_topic("out-of-order", partitions=2)
    a, b, c = (txn_producer(kafka_bootstrap, unique(f"out-of-order-{n}")) for n in "abc")
    for producer in (a, b, c):
        producer.begin_transaction()
    produce_values(a, topic, ["a-0"], partition=0)  # p0 offset 0
    produce_values(b, topic, ["b-0"], partition=0)  # p0 offset 1
    produce_values(c, topic, ["c-0"], partition=0)  # p0 offset 2
    produce_values(c, topic, ["c-1"], partition=1)  # p1 offset 0
    produce_values(a, topic, ["a-1"], partition=1)  # p1 offset 1
    produce_values(b, topic, ["b-1"], partition=1)  # p1 offset 2
    assert end_offsets(kafka_admin, topic, 0) == (3, 0)
    assert end_offsets(kafka_admin, topic, 1) == (3, 0)

    # The youngest commits first: each LSO stays at the oldest open transaction (a's).
    c.commit_transaction(CLIENT_TIMEOUT_S)  # markers at offset 3 of both partitions
    assert _wait_high_watermark(kafka_admin, topic, 0, 4) == 0
    assert _wait_high_watermark(kafka_admin, topic, 1, 4) == 1
    assert read_partition(kafka_bootstrap, topic, 0, committed=True) == []
    assert read_partition(kafka_bootstrap, topic, 1, committed=True) == [
        Record(offset=0, value="c-1")
    ]

    # The oldest aborts: each LSO moves to the next open one (b's), not to the end.
    a.abort_transaction(CLIENT_TIMEOUT_S)  # markers at offset 4
    assert _wait_high_watermark(kafka_admin, topic, 0, 5) == 1
    assert _wait_high_watermark(kafka_admin, topic, 1, 5) == 2
    assert read_partition(kafka_bootstrap, topic, 0, committed=True) == []
    assert read_partition(kafka_bootstrap, topic, 1, committed=True) == [
        Record(offset=0, value="c-1")
    ]

    b.commit_transaction(CLIENT_TIMEOUT_S)  # markers at offset 5
    assert wait_stable(kafka_admin, topic, 0) == 6
    assert wait_stable(kafka_admin, topic, 1) == 6
    assert read_partition(kafka_bootstrap, topic, 0, committed=True) == [
        Record(offset=1, value="b-0"),
        Record(offset=2, value="c-0"),
    ]
    assert read_partition(kafka_bootstrap, topic, 1, committed=True) == [
        Record(offset=0, value="c-1"),
        Record(offset=2, value="b-1"),
    ]


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

    consumer = eof_reader(kafka_bootstrap, committed=True)
    try:
        got = [m.value().decode() for m in consume_to_eof(consumer, topic)]
        position = consumer.position([TopicPartition(topic, 0)])[0].offset
    finally:
        consumer.close()
    assert got == ["c1"]
    assert position == 5, "position must pass the aborted records and both markers"


def test_compacted_topic_carries_transactional_keyed_records_and_tombstones(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    """The sink's epoch log: keyed records and tombstones, written in transactions, read back."""
    topic = new_topic("compacted-log", config={"cleanup.policy": "compact"})
    producer = txn_producer(kafka_bootstrap, unique("compacted-log"))
    producer.begin_transaction()
    producer.produce(topic, key=b"k1", value=b"v1", partition=0)
    producer.produce(topic, key=b"k2", value=b"v2", partition=0)
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, key=b"k1", value=None, partition=0)  # tombstone
    producer.produce(topic, key=b"k3", value=b"aborted", partition=0)
    producer.abort_transaction(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, key=b"k1", value=None, partition=0)  # tombstone
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    wait_stable(kafka_admin, topic)

    reader = eof_reader(kafka_bootstrap, committed=True)
    try:
        got = [(m.key(), m.value()) for m in consume_to_eof(reader, topic)]
    finally:
        reader.close()
    # Compaction may drop an older value of a key, never the latest one; whatever is left of
    # the committed records appears in commit order, and nothing of the aborted transaction.
    committed = [(b"k1", b"v1"), (b"k2", b"v2"), (b"k1", None)]
    assert got == [kv for kv in committed if kv in got], got
    assert got[-2:] == [(b"k2", b"v2"), (b"k1", None)], got

"""Offsets sent to a transaction become group offsets exactly when it commits (KIP-98, KIP-447).

The exactly-once sink stores its idempotency marker this way, so these tests also pin down what
it relies on: the offset metadata string round-trips, aborted offsets never appear, and the broker
refuses offsets for a partition that does not exist (no leniency to lean on).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ._support import (
    CLIENT_TIMEOUT_S,
    SETTLE_TIMEOUT_S,
    fatal_error_of,
    group_consumer,
    produce_values,
    read_partition,
    txn_producer,
    unique,
    values,
    wait_stable,
    wait_until,
)

# Seconds given to send_offsets_to_transaction for a partition that does not exist: librdkafka
# retries UNKNOWN_TOPIC_OR_PART until this runs out, then fails the call.
MISSING_PARTITION_TIMEOUT_S = 5.0
# Seconds one group member's poll blocks while the test waits for a rebalance.
MEMBER_POLL_S = 0.1
# Seconds a read_committed consumer's committed() may wait on a pending transactional offset
# before the test accepts that it would not return it: librdkafka retries UNSTABLE_OFFSET_COMMIT
# until the call's timeout.
PENDING_WAIT_S = 3.0
API_TXN_OFFSET_COMMIT = 28

Committed = dict[int, tuple[int, str]]


def group_offsets(admin: AdminClient, group: str, topic: str, partitions: int) -> Committed:
    """Return {partition: (offset, metadata)} of the group's committed offsets on ``topic``."""
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)]
    )
    futures = admin.list_consumer_group_offsets([request], request_timeout=CLIENT_TIMEOUT_S)
    result = futures[group].result(timeout=CLIENT_TIMEOUT_S)
    found: Committed = {}
    for tp in result.topic_partitions:
        assert tp.error is None, tp.error
        if tp.offset >= 0:
            found[tp.partition] = (tp.offset, tp.metadata or "")
    return found


def offsets(topic: str, marks: Committed) -> list[TopicPartition]:
    return [TopicPartition(topic, p, off, metadata=meta) for p, (off, meta) in marks.items()]


def test_sent_offsets_visible_only_after_commit_and_never_when_aborted(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    source = new_topic("offsets-src", partitions=2)
    sink = new_topic("offsets-sink")
    group = unique("offsets-group")
    group_consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        group_metadata = group_consumer.consumer_group_metadata()
        producer = txn_producer(kafka_bootstrap, unique("offsets"))

        # Transaction 1 (committed): offsets 5 and 7 with metadata.
        first: Committed = {0: (5, "epoch=1"), 1: (7, "epoch=1")}
        producer.begin_transaction()
        produce_values(producer, sink, ["out-1"])
        producer.send_offsets_to_transaction(
            offsets(source, first), group_metadata, CLIENT_TIMEOUT_S
        )
        assert group_offsets(kafka_admin, group, source, 2) == {}, "visible before commit"
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        wait_until(
            lambda: group_offsets(kafka_admin, group, source, 2) == first,
            "committed transactional offsets to become visible",
        )

        # Transaction 2 (aborted): offsets 9 on both partitions must never appear.
        producer.begin_transaction()
        produce_values(producer, sink, ["out-2"])
        aborted: Committed = {0: (9, "epoch=2"), 1: (9, "epoch=2")}
        producer.send_offsets_to_transaction(
            offsets(source, aborted), group_metadata, CLIENT_TIMEOUT_S
        )
        assert group_offsets(kafka_admin, group, source, 2) == first, "pending offsets leaked"
        producer.abort_transaction(CLIENT_TIMEOUT_S)

        # Transaction 3 (committed) touches partition 0 only; once it shows, the abort before it
        # has been applied too, and partition 1 must still hold transaction 1's offset.
        third: Committed = {0: (11, "epoch=3")}
        producer.begin_transaction()
        produce_values(producer, sink, ["out-3"])
        producer.send_offsets_to_transaction(
            offsets(source, third), group_metadata, CLIENT_TIMEOUT_S
        )
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        expected: Committed = {0: (11, "epoch=3"), 1: (7, "epoch=1")}
        wait_until(
            lambda: group_offsets(kafka_admin, group, source, 2) == expected,
            "transaction 3's offsets to become visible",
        )

        # A consumer of that group sees the same committed positions.
        committed = group_consumer.committed(
            [TopicPartition(source, 0), TopicPartition(source, 1)], timeout=CLIENT_TIMEOUT_S
        )
        assert [(tp.partition, tp.offset, tp.metadata) for tp in committed] == [
            (0, 11, "epoch=3"),
            (1, 7, "epoch=1"),
        ]
    finally:
        group_consumer.close()

    wait_stable(kafka_admin, sink)
    assert values(read_partition(kafka_bootstrap, sink, committed=True)) == ["out-1", "out-3"]


def test_offsets_for_a_missing_partition_are_refused(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    source = new_topic("offsets-missing", partitions=2)
    sink = new_topic("offsets-missing-sink")
    group = unique("offsets-missing")
    group_consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        producer = txn_producer(kafka_bootstrap, unique("offsets-missing"))
        producer.begin_transaction()
        produce_values(producer, sink, ["out"])
        with pytest.raises(KafkaException) as info:
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 5, 3, metadata="no-such-partition")],
                group_consumer.consumer_group_metadata(),
                MISSING_PARTITION_TIMEOUT_S,
            )
        err = fatal_error_of(info.value)
        assert not err.fatal(), f"a refused offset should not kill the producer: {err}"
        assert err.txn_requires_abort(), f"the transaction must be aborted: {err}"
        producer.abort_transaction(CLIENT_TIMEOUT_S)
    finally:
        group_consumer.close()

    wait_stable(kafka_admin, sink)
    assert read_partition(kafka_bootstrap, sink, committed=True) == []
    assert group_offsets(kafka_admin, group, source, 2) == {}


def _poll_until(members: list[Consumer], done: Callable[[], bool], what: str) -> None:
    """Poll every member in turn (no records are expected) until ``done()``."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for member in members:
            msg = member.poll(MEMBER_POLL_S)
            assert msg is None or msg.error() is None, msg.error()


def test_offsets_with_a_stale_group_generation_are_refused(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    new_topic: Callable[..., str],
    require_api: Callable[[int, int, str], None],
) -> None:
    require_api(API_TXN_OFFSET_COMMIT, 3, "group generation fencing of TxnOffsetCommit (KIP-447)")
    source = new_topic("offsets-generation", partitions=2)
    sink = new_topic("offsets-generation-sink")
    group = unique("offsets-generation")
    conf = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "partition.assignment.strategy": "range",
    }
    first, second = Consumer(conf), Consumer(conf)
    try:
        first.subscribe([source])
        _poll_until([first], lambda: len(first.assignment()) == 2, "the first member's join")
        stale = first.consumer_group_metadata()
        second.subscribe([source])
        _poll_until(
            [first, second],
            lambda: len(first.assignment()) == 1 and len(second.assignment()) == 1,
            "a rebalance to one partition each",
        )

        producer = txn_producer(kafka_bootstrap, unique("offsets-generation"))
        producer.begin_transaction()
        produce_values(producer, sink, ["stale"])
        with pytest.raises(KafkaException) as info:
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 0, 4)], stale, CLIENT_TIMEOUT_S
            )
        err = fatal_error_of(info.value)
        assert err.code() == KafkaError.ILLEGAL_GENERATION, err
        assert err.txn_requires_abort() and not err.fatal(), err
        producer.abort_transaction(CLIENT_TIMEOUT_S)

        # The current generation's metadata is accepted.
        producer.begin_transaction()
        produce_values(producer, sink, ["current"])
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, 6)], first.consumer_group_metadata(), CLIENT_TIMEOUT_S
        )
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        wait_until(
            lambda: group_offsets(kafka_admin, group, source, 2) == {0: (6, "")},
            "the current generation's offsets to become visible",
        )
    finally:
        first.close()
        second.close()

    wait_stable(kafka_admin, sink)
    assert values(read_partition(kafka_bootstrap, sink, committed=True)) == ["current"]


def _stable_read_refused(consumer: Consumer, tp: TopicPartition) -> KafkaError:
    """The error a read_committed committed() ends with while a transactional commit is pending."""
    try:
        (result,) = consumer.committed([tp], timeout=PENDING_WAIT_S)
    except KafkaException as exc:
        return fatal_error_of(exc)
    assert result.error is not None, f"committed() returned {result} despite a pending commit"
    return result.error


def test_read_committed_committed_never_returns_a_pending_offset(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    """KIP-447: how the sink's marker reader sees a transactional offset commit in flight."""
    source = new_topic("stable-src")
    sink = new_topic("stable-sink")
    group = unique("stable")
    tp = TopicPartition(source, 0)
    stable_reader = group_consumer(kafka_bootstrap, group, committed=True)
    plain_reader = group_consumer(kafka_bootstrap, group, committed=False)
    try:
        metadata = stable_reader.consumer_group_metadata()
        producer = txn_producer(kafka_bootstrap, unique("stable"))

        def send(offset: int, note: str) -> None:
            producer.begin_transaction()
            produce_values(producer, sink, [note])
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 0, offset, metadata=note)], metadata, CLIENT_TIMEOUT_S
            )

        send(3, "first")
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        wait_until(
            lambda: group_offsets(kafka_admin, group, source, 1) == {0: (3, "first")},
            "the first commit to become visible",
        )

        send(8, "second")  # left open
        (seen,) = plain_reader.committed([tp], timeout=CLIENT_TIMEOUT_S)
        assert (seen.offset, seen.metadata) == (3, "first"), "read_uncommitted: last committed"
        err = _stable_read_refused(stable_reader, tp)
        assert err.code() in (KafkaError._TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT), err
        stable = kafka_admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [tp])],
            require_stable=True,
            request_timeout=CLIENT_TIMEOUT_S,
        )[group].result(timeout=CLIENT_TIMEOUT_S)
        (listed,) = stable.topic_partitions
        assert listed.error is not None, listed
        assert listed.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT, listed

        producer.commit_transaction(CLIENT_TIMEOUT_S)
        (seen,) = stable_reader.committed([tp], timeout=CLIENT_TIMEOUT_S)
        assert (seen.error, seen.offset, seen.metadata) == (None, 8, "second")

        send(12, "third")
        producer.abort_transaction(CLIENT_TIMEOUT_S)
        (seen,) = stable_reader.committed([tp], timeout=CLIENT_TIMEOUT_S)
        assert (seen.error, seen.offset, seen.metadata) == (None, 8, "second")
    finally:
        stable_reader.close()
        plain_reader.close()

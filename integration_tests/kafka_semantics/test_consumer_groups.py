"""Consumer groups: membership, rebalances, and offsets of groups without members.

Both consumers of the membership test are polled from this one thread in turns; a rebalance
completes only while every member keeps polling, which the loop does.

The kit stores offsets in groups that never have members: the sink's idempotency markers
(transactional commits) and the source's monitoring commits (AlterConsumerGroupOffsets).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ._support import (
    CLIENT_TIMEOUT_S,
    SETTLE_TIMEOUT_S,
    broker_config,
    group_consumer,
    plain_producer,
    produce_values,
    unique,
)

PARTITIONS = 4
RECORDS_PER_PARTITION = 10
# Seconds one consumer poll in the round-robin loop may block: short, so both members keep
# heartbeating and joining while the other one waits.
TURN_POLL_S = 0.1
# Polls after the last expected record during which nothing more may arrive.
QUIET_POLLS = 20


def _member(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",
            "session.timeout.ms": 30000,
        }
    )


def _take(consumer: Consumer, into: list[tuple[int, str]]) -> None:
    msg: Message | None = consumer.poll(TURN_POLL_S)
    if msg is None:
        return
    if msg.error() is not None:
        raise KafkaException(msg.error())
    into.append((msg.partition(), msg.value().decode()))


def _wait(condition: Callable[[], bool], step: Callable[[], None], what: str) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        step()


def _produce_round(bootstrap: str, topic: str, tag: str) -> set[str]:
    producer = plain_producer(bootstrap)
    produced: set[str] = set()
    for partition in range(PARTITIONS):
        batch = [f"{tag}-p{partition}-{i}" for i in range(RECORDS_PER_PARTITION)]
        produce_values(producer, topic, batch, partition=partition)
        produced.update(batch)
    return produced


def _partitions(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def test_two_members_share_partitions_and_survivor_takes_over_with_committed_offsets(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("group", partitions=PARTITIONS)
    group = unique("group")
    first, second = _member(kafka_bootstrap, group), _member(kafka_bootstrap, group)
    got_first: list[tuple[int, str]] = []
    got_second: list[tuple[int, str]] = []
    second_closed = False
    try:
        first.subscribe([topic])
        second.subscribe([topic])

        def both_turns() -> None:
            _take(first, got_first)
            _take(second, got_second)

        # 1. Both members join; each owns two of the four partitions.
        _wait(
            lambda: (
                len(_partitions(first)) == 2
                and len(_partitions(second)) == 2
                and _partitions(first).isdisjoint(_partitions(second))
            ),
            both_turns,
            "a 2+2 assignment of 4 partitions",
        )
        assert got_first == [] and got_second == []  # nothing was produced yet

        # 2. Each member reads only its own partitions; together they read everything once.
        round_one = _produce_round(kafka_bootstrap, topic, "r1")
        _wait(lambda: len(got_first) + len(got_second) >= len(round_one), both_turns, "round 1")
        assert {p for p, _ in got_first} <= _partitions(first)
        assert {p for p, _ in got_second} <= _partitions(second)
        assert sorted(v for _, v in got_first + got_second) == sorted(round_one)
        first.commit(asynchronous=False)
        second.commit(asynchronous=False)

        # 3. The second member leaves; the first gets all four partitions and resumes each at the
        # committed offset: nothing of round 1 again, nothing of round 2 lost. Round 2 is
        # produced only once the takeover is complete: a record consumed but not committed
        # before an eager rebalance is legitimately delivered again after it.
        second.close()
        second_closed = True
        got_after: list[tuple[int, str]] = []
        _wait(
            lambda: len(_partitions(first)) == PARTITIONS,
            lambda: _take(first, got_after),
            "the survivor to own all partitions",
        )
        round_two = _produce_round(kafka_bootstrap, topic, "r2")
        _wait(
            lambda: len(got_after) >= len(round_two),
            lambda: _take(first, got_after),
            "the survivor to read round 2",
        )
        # Anything re-read from round 1 would have come before round 2 in its partition.
        assert sorted(v for _, v in got_after) == sorted(round_two)
        # Keep polling briefly: no stray extra records arrive either.
        extra: list[tuple[int, str]] = []
        for _ in range(QUIET_POLLS):
            _take(first, extra)
        assert extra == []
    finally:
        first.close()
        if not second_closed:
            second.close()


def _alter(admin: AdminClient, group: str, offsets: list[TopicPartition]) -> list[TopicPartition]:
    futures = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, offsets)], request_timeout=CLIENT_TIMEOUT_S
    )
    return list(futures[group].result(timeout=CLIENT_TIMEOUT_S).topic_partitions)


def _committed(bootstrap: str, group: str, tps: list[TopicPartition]) -> list[tuple[int, int]]:
    """(partition, offset) of ``group``'s committed offsets, read by a fresh consumer."""
    reader = group_consumer(bootstrap, group, committed=True)
    try:
        found = reader.committed(tps, timeout=CLIENT_TIMEOUT_S)
    finally:
        reader.close()
    assert all(tp.error is None for tp in found), found
    return [(tp.partition, tp.offset) for tp in found]


def test_offsets_of_groups_without_members(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("memberless", partitions=2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]

    # 1. The admin client commits to a group that never had members (generation -1).
    admin_group = unique("memberless-admin")
    stored = _alter(kafka_admin, admin_group, [TopicPartition(topic, 0, 4)])
    assert [(tp.partition, tp.offset, tp.error) for tp in stored] == [(0, 4, None)]
    assert _committed(kafka_bootstrap, admin_group, tps) == [(0, 4), (1, OFFSET_INVALID)]

    # 2. So does a consumer that only assign()s partitions; its offsets outlive it.
    simple_group = unique("memberless-assign")
    simple = group_consumer(kafka_bootstrap, simple_group, committed=False)
    try:
        simple.assign(tps)
        simple.commit(offsets=[TopicPartition(topic, 1, 9)], asynchronous=False)
    finally:
        simple.close()
    assert _committed(kafka_bootstrap, simple_group, tps) == [(0, OFFSET_INVALID), (1, 9)]

    # 3. Once the group has an active member, such commits are refused and change nothing.
    member = _member(kafka_bootstrap, admin_group)
    try:
        member.subscribe([topic])
        _wait(lambda: len(_partitions(member)) == 2, lambda: _take(member, []), "the join")
        refused = _alter(kafka_admin, admin_group, [TopicPartition(topic, 0, 40)])
        assert [tp.error.code() if tp.error else None for tp in refused] == [
            KafkaError.UNKNOWN_MEMBER_ID
        ]
    finally:
        member.close()
    assert _committed(kafka_bootstrap, admin_group, tps) == [(0, 4), (1, OFFSET_INVALID)]

    # 4. Offsets of a group without members are kept for offsets.retention.minutes after the
    # last commit (after the group emptied, for a group that had members). The kit's markers
    # rely on that span; the broker reports it.
    assert int(broker_config(kafka_admin, "offsets.retention.minutes")) > 0

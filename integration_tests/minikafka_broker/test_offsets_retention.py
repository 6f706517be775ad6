"""Offset retention with a short ``offsets_retention_ms`` (Kafka's rule since 2.1, KIP-211).

Offsets of a group without members expire ``offsets_retention_ms`` after their commit (a group
that never had members) or after the group became empty; a group with members keeps them.
The conformance suite cannot wait days for a real broker, so this runs on a broker configured
for seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from minikafka import BrokerConfig, EmbeddedKafka

from .conftest import CLIENT_TIMEOUT_S, make_topic

RETENTION_MS = 1500
# Seconds to wait for an expiry that is due after RETENTION_MS (busy machine).
EXPIRY_WAIT_S = 30.0
POLL_S = 0.1


@pytest.fixture
def short_retention() -> Iterator[EmbeddedKafka]:
    cfg = BrokerConfig(
        group_initial_rebalance_delay_ms=0,
        offsets_retention_ms=RETENTION_MS,
        offsets_retention_check_interval_ms=100,
    )
    with EmbeddedKafka(config=cfg) as kafka:
        yield kafka


def _offset(admin: AdminClient, group: str, topic: str) -> int:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    result = admin.list_consumer_group_offsets([request], request_timeout=CLIENT_TIMEOUT_S)
    (tp,) = result[group].result(timeout=CLIENT_TIMEOUT_S).topic_partitions
    return int(tp.offset)


def _commit(admin: AdminClient, group: str, topic: str, offset: int) -> None:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, offset)])
    futures = admin.alter_consumer_group_offsets([request], request_timeout=CLIENT_TIMEOUT_S)
    futures[group].result(timeout=CLIENT_TIMEOUT_S)


def _groups(admin: AdminClient) -> set[str]:
    listed = admin.list_consumer_groups(request_timeout=CLIENT_TIMEOUT_S).result()
    return {g.group_id for g in listed.valid}


def _wait(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + EXPIRY_WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL_S)


def test_offsets_expire_only_once_the_group_has_no_members(short_retention: EmbeddedKafka) -> None:
    bs = short_retention.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    topic = make_topic(bs)
    member = Consumer(
        {"bootstrap.servers": bs, "group.id": "with-member", "enable.auto.commit": False}
    )
    try:
        member.subscribe([topic])
        _wait(lambda: member.poll(POLL_S) is None and bool(member.assignment()), "the join")
        member.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
        _commit(admin, "standalone", topic, 3)
        assert _groups(admin) >= {"standalone", "with-member"}

        # The standalone group's offset goes once its retention has passed ...
        _wait(lambda: _offset(admin, "standalone", topic) < 0, "the standalone offset to expire")
        assert "standalone" not in _groups(admin)
        # ... while the group with a member, committed at the same time, keeps its offset.
        assert _offset(admin, "with-member", topic) == 7
    finally:
        member.close()

    # Once empty, it loses it too (counted from when it emptied, see test_group_rules.py).
    _wait(lambda: _offset(admin, "with-member", topic) < 0, "the emptied group's offset to expire")

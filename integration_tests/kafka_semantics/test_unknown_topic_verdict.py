"""librdkafka's "Unknown topic" and "Unknown partition" verdicts: when they come, what lifts them.

A long-lived client of the kit (the epoch-log producer, pooled producers) that once heard a
topic or partition does not exist refuses it locally (``_UNKNOWN_TOPIC``,
``_UNKNOWN_PARTITION``) until its own metadata changes; waiting and retrying with the same
client is not enough in every case (issue 38). These tests pin, against any broker, what
the recovery of the kit can rely on; docs/kafka-semantics.md ("A stale Unknown-topic
verdict") has librdkafka's mechanics with source locations. The stale verdict on a topic
that kept existing needs a broker that answers as a restarted one may; minikafka's
``flap`` load mode does, and integration_tests/minikafka_broker/test_stale_topic_verdict.py
pins the recipe there.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from integration_tests.conftest import ADMIN_REQUEST_TIMEOUT_S, wait_for_topic

from ._support import CLIENT_TIMEOUT_S, POLL_INTERVAL_S, plain_producer, produce_values

# Milliseconds of the producers' topic.metadata.propagation.max.ms (librdkafka: 30000):
# short, so the verdict on a missing topic comes within seconds.
PROPAGATION_MS = 2000
# Seconds a client may take to reach a verdict, or to lift one on its own (generous: busy
# machine; librdkafka scans its topics every second).
VERDICT_TIMEOUT_S = 60.0
# Seconds the test watches an old client keep a stale partition count: more than two of
# librdkafka's one-second topic scans, far less than its periodic refresh (300 s).
STALE_WATCH_S = 2.5


@pytest.fixture
def topic_name(kafka_admin: AdminClient) -> Iterator[str]:
    """A topic name that does not exist yet (deleted after the test if it was created)."""
    name = f"verdict-{uuid.uuid4().hex[:10]}"
    yield name
    try:
        kafka_admin.delete_topics([name], request_timeout=ADMIN_REQUEST_TIMEOUT_S)[name].result(
            timeout=ADMIN_REQUEST_TIMEOUT_S
        )
    except KafkaException:
        pass  # never created, or already gone


def _refused_locally(producer: Producer, topic: str, reports: list[KafkaError]) -> bool:
    """Try one record; whether produce() refused it at once with the local _UNKNOWN_TOPIC.

    Records it accepted are queued; their delivery reports land in ``reports``.
    """
    try:
        producer.produce(
            topic, b"probe", partition=0, on_delivery=lambda e, _m: reports.extend([e] if e else [])
        )
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError._UNKNOWN_TOPIC, exc
        return True
    producer.poll(POLL_INTERVAL_S)
    return False


def test_a_missing_topic_is_refused_after_the_propagation_time_and_accepted_once_created(
    kafka_bootstrap: str, kafka_admin: AdminClient, topic_name: str
) -> None:
    conf = {
        "bootstrap.servers": kafka_bootstrap,
        "linger.ms": 0,
        "topic.metadata.propagation.max.ms": PROPAGATION_MS,
        "allow.auto.create.topics": False,
    }
    old = Producer(conf)
    reports: list[KafkaError] = []
    first_use = time.monotonic()
    deadline = first_use + VERDICT_TIMEOUT_S
    while not _refused_locally(old, topic_name, reports):
        assert time.monotonic() < deadline, f"no Unknown-topic verdict (reports: {reports})"
    # librdkafka gives a topic it has never seen the propagation time before it gives up: the
    # records queued meanwhile fail with the broker's UNKNOWN_TOPIC_OR_PART, later ones are
    # refused by produce() itself with the local _UNKNOWN_TOPIC.
    assert time.monotonic() - first_use >= PROPAGATION_MS / 1000
    assert reports and {r.code() for r in reports} == {KafkaError.UNKNOWN_TOPIC_OR_PART}
    futures = kafka_admin.create_topics(
        [NewTopic(topic_name, 1, -1)], request_timeout=ADMIN_REQUEST_TIMEOUT_S
    )
    futures[topic_name].result(timeout=ADMIN_REQUEST_TIMEOUT_S)
    wait_for_topic(kafka_admin, topic_name, 1)
    fresh = Producer(conf)
    produce_values(fresh, topic_name, ["fresh"])  # a new client: accepted at once
    # The old client lifts the verdict by itself (its one-second topic scan asks again once
    # the negative cache entry has expired), without any call of the application.
    deadline = time.monotonic() + VERDICT_TIMEOUT_S
    delivered: list[bool] = []
    while not delivered:
        assert time.monotonic() < deadline, "the old client never accepted the created topic"
        try:
            old.produce(
                topic_name,
                b"old",
                partition=0,
                on_delivery=lambda e, _m: delivered.append(e is None),
            )
        except KafkaException as exc:
            assert exc.args[0].code() == KafkaError._UNKNOWN_TOPIC
        old.flush(POLL_INTERVAL_S)
    assert old.flush(CLIENT_TIMEOUT_S) == 0


def test_a_stale_partition_count_lasts_until_a_metadata_request_names_the_topic(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic
) -> None:
    topic = new_topic("verdict-parts", partitions=1)
    old = plain_producer(kafka_bootstrap)
    produce_values(old, topic, ["p0"])
    with pytest.raises(KafkaException) as info:
        old.produce(topic, b"p1", partition=1)
    assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    futures = kafka_admin.create_partitions(
        [NewPartitions(topic, 2)], request_timeout=ADMIN_REQUEST_TIMEOUT_S
    )
    futures[topic].result(timeout=ADMIN_REQUEST_TIMEOUT_S)
    wait_for_topic(kafka_admin, topic, 2)
    produce_values(plain_producer(kafka_bootstrap), topic, ["fresh"], partition=1)
    # The old client does not look again by itself (it knows the topic and its leaders) ...
    watched_until = time.monotonic() + STALE_WATCH_S
    while time.monotonic() < watched_until:
        with pytest.raises(KafkaException) as info:
            old.produce(topic, b"p1", partition=1)
        assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
        old.poll(POLL_INTERVAL_S)
    # ... until a metadata request of its own names the topic.
    old.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    produce_values(old, topic, ["p1"], partition=1)

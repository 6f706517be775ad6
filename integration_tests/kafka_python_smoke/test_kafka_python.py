"""Smoke test with a second, independent client library (kafka-python, pure Python).

It guards against a broker that only works with librdkafka's particular request versions and
habits: plain produce/consume, and a transactional produce with commit and abort read back with
read_committed and read_uncommitted consumers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

# Seconds for a kafka-python send/flush/transaction call on a busy machine.
CLIENT_TIMEOUT_S = 60.0
# Seconds to keep polling for records that were acknowledged before the read started (markers
# are written after the commit returns, so the committed part may show up with a delay).
READ_DEADLINE_S = 60.0
# Milliseconds one consumer poll may block.
POLL_MS = 500
# Polls after the expected records during which nothing more may arrive.
QUIET_POLLS = 4


def _read(bootstrap: str, topic: str, isolation: str, expected: int) -> list[str]:
    """Read partition 0 from the start until ``expected`` records came, then a few quiet polls."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        client_id=f"smoke-{uuid.uuid4().hex[:6]}",
    )
    tp = TopicPartition(topic, 0)
    got: list[str] = []
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + READ_DEADLINE_S
        while len(got) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=POLL_MS).values():
                got.extend(r.value.decode() for r in records)
        for _ in range(QUIET_POLLS):
            for records in consumer.poll(timeout_ms=POLL_MS).values():
                got.extend(r.value.decode() for r in records)
    finally:
        consumer.close()
    return got


def test_kafka_python_produce_and_consume(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("kp-plain")
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    try:
        sent = [f"plain-{i:03d}" for i in range(100)]
        futures = [producer.send(topic, value=v.encode(), partition=0) for v in sent]
        producer.flush(timeout=CLIENT_TIMEOUT_S)
        offsets = [f.get(timeout=CLIENT_TIMEOUT_S).offset for f in futures]
    finally:
        producer.close()
    assert offsets == list(range(100))
    assert _read(kafka_bootstrap, topic, "read_uncommitted", len(sent)) == sent


def test_kafka_python_transactions_commit_and_abort(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("kp-txn")
    producer = KafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:10]}"
    )
    committed_one = [f"c1-{i}" for i in range(10)]
    aborted = [f"a-{i}" for i in range(5)]
    committed_two = [f"c2-{i}" for i in range(3)]
    try:
        producer.init_transactions()
        for batch, commit in ((committed_one, True), (aborted, False), (committed_two, True)):
            producer.begin_transaction()
            for value in batch:
                producer.send(topic, value=value.encode(), partition=0)
            producer.flush(timeout=CLIENT_TIMEOUT_S)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()

    expected_committed = committed_one + committed_two
    everything = committed_one + aborted + committed_two
    assert _read(kafka_bootstrap, topic, "read_committed", len(expected_committed)) == (
        expected_committed
    )
    assert _read(kafka_bootstrap, topic, "read_uncommitted", len(everything)) == everything

"""Helpers for the kafka-rc source integration tests (real clients over TCP only)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

# Seconds for one client call (init/commit/abort transaction, flush, admin request);
# generous because the shared 2-core machine is busy.
CLIENT_TIMEOUT_S = 60.0
# Seconds to wait until the last stable offset reaches an expected value (markers are
# written asynchronously by the transaction coordinator).
SETTLE_TIMEOUT_S = 90.0
# Seconds between two polls of broker state while waiting.
POLL_INTERVAL_S = 0.2


class TxnWriter:
    """A transactional producer writing UTF-8 values to one topic-partition.

    ``settings``: the client settings the cluster needs (security), if any.
    """

    def __init__(self, bootstrap: str, topic: str, settings: dict[str, str] | None = None) -> None:
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"src-test-{uuid.uuid4().hex[:12]}",
                "linger.ms": 5,
                **(settings or {}),
            }
        )
        self.producer.init_transactions(CLIENT_TIMEOUT_S)

    def begin(self, values: list[str], partition: int = 0) -> None:
        """Begin a transaction, send ``values`` and flush (leaves it open)."""
        self.producer.begin_transaction()
        for v in values:
            self.producer.produce(self.topic, v.encode(), partition=partition)
        assert self.producer.flush(CLIENT_TIMEOUT_S) == 0

    def commit(self, values: list[str], partition: int = 0) -> None:
        self.begin(values, partition)
        self.producer.commit_transaction(CLIENT_TIMEOUT_S)

    def abort(self, values: list[str], partition: int = 0) -> None:
        self.begin(values, partition)
        self.producer.abort_transaction(CLIENT_TIMEOUT_S)


def produce_plain(
    bootstrap: str,
    topic: str,
    values: list[str],
    partition: int = 0,
    headers: list[tuple[str, bytes]] | None = None,
    settings: dict[str, str] | None = None,
) -> None:
    """Produce non-transactional records and wait for them to be acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(settings or {})})
    for v in values:
        producer.produce(
            topic, v.encode(), key=f"k-{v}".encode(), partition=partition, headers=headers
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def offsets(admin: AdminClient, topic: str, partition: int = 0) -> tuple[int, int, int]:
    """Return (earliest, last stable offset, high watermark) of one partition."""
    tp = TopicPartition(topic, partition)

    def one(spec: Any, level: IsolationLevel) -> int:
        futs = admin.list_offsets(
            {tp: spec}, isolation_level=level, request_timeout=CLIENT_TIMEOUT_S
        )
        return int(next(iter(futs.values())).result().offset)

    return (
        one(OffsetSpec.earliest(), IsolationLevel.READ_COMMITTED),
        one(OffsetSpec.latest(), IsolationLevel.READ_COMMITTED),
        one(OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED),
    )


def wait_lso(admin: AdminClient, topic: str, expected: int, partition: int = 0) -> None:
    """Block until the partition's last stable offset equals ``expected``."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last = None
    while time.monotonic() < deadline:
        last = offsets(admin, topic, partition)[1]
        if last == expected:
            return
        time.sleep(POLL_INTERVAL_S)
    raise AssertionError(f"LSO of {topic}-{partition} is {last}, expected {expected}")


def batch_read(spark: Any, bootstrap: str, **options: str) -> list[Any]:
    """Run ``spark.read.format('kafka-rc')`` with options; return rows sorted by (partition, offset)."""
    reader = spark.read.format("kafka-rc").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted(reader.load().collect(), key=lambda r: (r.topic, r.partition, r.offset))


def values(rows: list[Any]) -> list[str]:
    return [bytes(r.value).decode() for r in rows]

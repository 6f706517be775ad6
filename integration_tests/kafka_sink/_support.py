"""Helpers of the Kafka sink integration tests: read back what is committed; a worker's resource."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from connectors.kafka._sink import _pool
from connectors.kafka._sink._participant import KafkaParticipant
from connectors.kafka._sink._resource import KafkaResource
from connectors.kafka._sink._transactional import TransactionalKafkaParticipant
from txn import EpochPlan

# Seconds without a message before a read_committed scan gives up waiting for EOF.
READ_IDLE_TIMEOUT_S = 30.0
# Milliseconds the broker may hold an empty fetch of these readers: they see a partition's
# end only through an empty fetch (end-of-partition), which Kafka's default (500) delays.
EMPTY_FETCH_WAIT_MS = "20"


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    partition: int
    headers: tuple[tuple[str, bytes], ...] = ()


def read_committed(bootstrap: str, topic: str) -> list[Rec]:
    """Every committed record of ``topic`` (read_committed, to the end of each partition)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ksink-it-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": "false",
            "enable.partition.eof": "true",
            "fetch.wait.max.ms": EMPTY_FETCH_WAIT_MS,
        }
    )
    try:
        md = consumer.list_topics(topic, timeout=30).topics[topic]
        parts = sorted(md.partitions)
        consumer.assign([TopicPartition(topic, p, -2) for p in parts])
        done: set[int] = set()
        out: list[Rec] = []
        while len(done) < len(parts):
            m = consumer.poll(READ_IDLE_TIMEOUT_S)
            if m is None:
                raise TimeoutError(f"no EOF on {topic} partitions {set(parts) - done}")
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    done.add(m.partition())
                    continue
                raise RuntimeError(str(m.error()))
            out.append(Rec(m.key(), m.value(), m.partition(), tuple(m.headers() or ())))
        return out
    finally:
        consumer.close()


def lso_reaches_high_watermark(bootstrap: str, topic: str) -> bool:
    """True when no open transaction pins any partition of ``topic`` (LSO == HW).

    The high watermark comes from a read_uncommitted client: with read_committed,
    ListOffsets answers the last stable offset instead.
    """
    raw = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ksink-hw-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        highs = {
            p: raw.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in raw.list_topics(topic, timeout=30).topics[topic].partitions
        }
    finally:
        raw.close()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ksink-lso-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": "true",
            "fetch.wait.max.ms": EMPTY_FETCH_WAIT_MS,
        }
    )
    try:
        # every partition at once: each one's first end-of-partition event is its position;
        # the topic's metadata first (assigned without it, the first fetch waits ~0.5 s)
        consumer.list_topics(topic, timeout=30)
        consumer.assign([TopicPartition(topic, p, -2) for p in highs])
        positions: dict[int, int] = {}
        while len(positions) < len(highs):
            m = consumer.poll(READ_IDLE_TIMEOUT_S)
            if m is None:
                return False
            if m.error() and m.error().code() == KafkaError._PARTITION_EOF:
                positions.setdefault(m.partition(), m.offset())
        return all(positions[p] >= high for p, high in highs.items())
    finally:
        consumer.close()


def values(records: list[Rec]) -> Counter[bytes | None]:
    return Counter(r.value for r in records)


def sid() -> str:
    """A fresh sink id (each test its own transactional ids, groups and log keys)."""
    return f"ksink-{uuid.uuid4().hex[:10]}"


def rows(spark: Any, n: int, start: int = 0, parts: int = 3) -> Any:
    """``n`` rows ``key=k{i}``, ``value=v{i}`` in ``parts`` input partitions."""
    return spark.range(start, start + n, numPartitions=parts).selectExpr(
        "concat('k', id) AS key", "concat('v', id) AS value"
    )


def _pids(batches: Any) -> Any:
    import os

    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_pydict({"pid": [os.getpid()] * batch.num_rows})


def python_workers(spark: Any, tasks: int = 16) -> int:
    """How many Python workers the session's executor runs: ``tasks`` one-row tasks report theirs.

    Spark hands each task to the worker idle longest, so a job of at least as many tasks as
    workers reaches all of them. More workers than task slots exist once a task has run two
    Python operators at once (e.g. a Python UDF beneath ``mapInArrow``): Spark keeps them.
    """
    df = spark.range(tasks, numPartitions=tasks).mapInArrow(_pids, "pid long")
    return len({row.pid for row in df.collect()})


# Seconds a worker waits for its preparation rounds to end: bounds a hang only (a round
# starts no producer after _pool.PREPARE_DEADLINE_S and each takes a few round trips).
PREPARATIONS_TIMEOUT_S = 120.0


def _rounds_ended(batches: Any) -> Any:
    import os

    import pyarrow as pa

    ended = _pool.POOL.wait_rounds(PREPARATIONS_TIMEOUT_S)
    for batch in batches:
        yield pa.RecordBatch.from_pydict(
            {"pid": [os.getpid()] * batch.num_rows, "ended": [ended] * batch.num_rows}
        )


def preparations_ended(spark: Any, workers: int) -> None:
    """Return once every Python worker's preparation rounds (``_pool.ClientPool.prepare``)
    have ended: one-row tasks reach every worker, as in :func:`python_workers`.

    Two tasks per worker: ``workers`` would do (Spark hands each task to the worker idle
    longest), the rest is margin; the job runs after every epoch, so it stays that small.
    """
    tasks = 2 * workers
    df = spark.range(tasks, numPartitions=tasks).mapInArrow(
        _rounds_ended, "pid long, ended boolean"
    )
    answers = {(row.pid, row.ended) for row in df.collect()}
    assert all(ended for _, ended in answers), answers
    assert len({pid for pid, _ in answers}) >= workers, answers  # every worker answered


def expected(n: int, start: int = 0) -> Counter[bytes]:
    """The values :func:`rows` writes, as a multiset."""
    return Counter(f"v{i}".encode() for i in range(start, start + n))


def rc_query(
    spark: Any, bootstrap: str, topic: str, sink: Any, checkpoint: str, per_batch: int
) -> Any:
    """Start ``topic`` (kafka-rc source, from the earliest offsets, ``per_batch`` records a
    batch) into ``sink`` with ``Trigger.AvailableNow``: key as a string, value as is."""
    from connectors.kafka import register

    return (
        spark.readStream.format(register(spark))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_batch))
        .load()
        .selectExpr("CAST(key AS STRING) AS key", "value")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def after_partition_commits(epoch: int, first: int = 0, then: int = 1) -> list[dict[str, Any]]:
    """Fault-plan entries that hold partition ``then`` of ``epoch`` until ``first`` committed.

    For unaligned tests where ``then`` fails on purpose and ``first`` must have committed on
    its own: without the order, the failed job may cancel ``first``'s task before its commit.
    """
    done = f"p{first}-committed"
    return [
        {
            "id": done,
            "step": "after_commit",
            "epoch": epoch,
            "partition": first,
            "action": "sleep",
            "seconds": 0.01,
            "times": 1,
        },
        {
            "id": f"p{then}-waits",
            "step": "after_open",
            "epoch": epoch,
            "partition": then,
            "action": "await",
            "waits_for": done,
            "seconds": 60,
            "times": 1,
        },
    ]


@dataclass(frozen=True)
class WorkerResource(KafkaResource):
    """KafkaResource whose participants use ``pool``: one Python worker's clients and lane."""

    pool: _pool.ClientPool = field(default_factory=_pool.ClientPool, compare=False)
    opened: list[KafkaParticipant] = field(default_factory=list, compare=False)

    def open(self, plan: EpochPlan, partition: int) -> KafkaParticipant:
        producers = self.producers(plan, partition, self.pool)
        participant = TransactionalKafkaParticipant(
            self.cfg, self.layout, plan, partition, producers=producers
        )
        self.opened.append(participant)
        return participant

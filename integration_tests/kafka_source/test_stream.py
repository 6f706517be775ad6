"""Streaming reads (spark.readStream) through kafka-rc against a real broker."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from connectors.kafka._source import KafkaOffsets

from ._support import CLIENT_TIMEOUT_S, TxnWriter, offsets, produce_plain, wait_lso

pytestmark = pytest.mark.spark

# Seconds a streaming query may run before the test gives up; generous for a busy machine.
QUERY_TIMEOUT_S = 240.0
# Seconds between checks while waiting for micro-batches to show up.
WAIT_STEP_S = 0.5


class Collector:
    """foreachBatch sink keeping each batch's rows by batch id (a replay overwrites)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[int, int, str]]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("partition", "offset", "value").collect()
        self.batches[batch_id] = [(r.partition, r.offset, bytes(r.value).decode()) for r in rows]

    def values(self) -> list[str]:
        return [v for b in sorted(self.batches) for _, _, v in self.batches[b]]


def stream(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("kafka-rc")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_available_now(df: Any, sink: Collector, checkpoint: Path) -> None:
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
    assert query.exception() is None


def test_rate_limited_batches_and_restart_without_gap_or_duplicate(
    rc_spark: Any,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = new_topic("rc-stream", partitions=2)
    w = TxnWriter(kafka_bootstrap, topic)
    expected: list[str] = []
    for i in range(4):
        committed = [f"c{i}-{j}" for j in range(10)]
        w.commit(committed)
        w.abort([f"x{i}-{j}" for j in range(5)])
        plain = [f"p{i}-{j}" for j in range(8)]
        produce_plain(kafka_bootstrap, topic, plain, partition=1)
        expected += committed + plain
    group = f"rc-monitor-{uuid.uuid4().hex[:8]}"
    opts = {"maxOffsetsPerTrigger": "20", "commitOffsetsToGroup": group}
    sink, checkpoint = Collector(), tmp_path / "ck"

    # Run 1: a continuous query, stopped after a few micro-batches (mid-stream).
    query = (
        stream(rc_spark, kafka_bootstrap, topic, **opts)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    while len(sink.batches) < 3 and time.monotonic() < deadline:
        assert query.exception() is None
        time.sleep(WAIT_STEP_S)
    query.stop()
    assert len(sink.batches) >= 3
    first_run = set(sink.batches)

    # More data arrives while the query is down, then run 2 resumes from the checkpoint.
    w.abort(["late-aborted"])
    w.commit(["late-0", "late-1"])
    produce_plain(kafka_bootstrap, topic, ["late-p"], partition=1)
    expected += ["late-0", "late-1", "late-p"]
    run_available_now(stream(rc_spark, kafka_bootstrap, topic, **opts), sink, checkpoint)

    assert set(sink.batches) > first_run
    assert sorted(sink.batches) == list(range(len(sink.batches)))  # contiguous batch ids
    got = sink.values()
    assert Counter(got) == Counter(expected)  # every record once, nothing aborted
    for batch in sink.batches.values():
        assert len(batch) <= 20  # maxOffsetsPerTrigger bounds offsets, rows are fewer
    for part in (0, 1):
        offs = [o for b in sorted(sink.batches) for p, o, _ in sink.batches[b] if p == part]
        assert offs == sorted(offs) and len(set(offs)) == len(offs)

    # Offsets were mirrored into the monitoring group when Spark committed the batches.
    # Spark calls commit(end) of batch N while planning batch N+1, so the group shows the
    # end of the last or the second-to-last batch of the offset log, never anything else.
    logged = checkpoint_offsets(checkpoint)
    request = [
        ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    ]
    result = kafka_admin.list_consumer_group_offsets(request, request_timeout=CLIENT_TIMEOUT_S)
    parts = result[group].result().topic_partitions
    committed = {(tp.topic, tp.partition): tp.offset for tp in parts}
    assert committed in (logged[-1], logged[-2])
    _, lso0, _ = offsets(kafka_admin, topic, 0)
    assert logged[-1] == {(topic, 0): lso0, (topic, 1): offsets(kafka_admin, topic, 1)[1]}


def checkpoint_offsets(checkpoint: Path) -> list[dict[tuple[str, int], int]]:
    """Source offsets of every batch in Spark's offset log, in batch order."""
    files = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    return [
        KafkaOffsets.from_json(p.read_text().strip().splitlines()[-1]).as_dict()
        for p in sorted(files, key=lambda p: int(p.name))
    ]


def test_new_partitions_are_discovered_between_batches(
    rc_spark: Any,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    topic = new_topic("rc-grow", partitions=1)
    produce_plain(kafka_bootstrap, topic, ["p0-a", "p0-b"])
    sink, checkpoint = Collector(), tmp_path / "ck"
    run_available_now(stream(rc_spark, kafka_bootstrap, topic), sink, checkpoint)
    assert sink.values() == ["p0-a", "p0-b"]

    futures = kafka_admin.create_partitions(
        [NewPartitions(topic, 3)], request_timeout=CLIENT_TIMEOUT_S
    )
    futures[topic].result(CLIENT_TIMEOUT_S)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(kafka_admin.list_topics(topic, timeout=10).topics[topic].partitions) < 3:
        assert time.monotonic() < deadline, "new partitions never showed up in metadata"
        time.sleep(WAIT_STEP_S)
    produce_plain(kafka_bootstrap, topic, ["p1-a"], partition=1)
    produce_plain(kafka_bootstrap, topic, ["p2-a", "p2-b"], partition=2)
    w = TxnWriter(kafka_bootstrap, topic)
    w.abort(["p2-aborted"], partition=2)
    w.commit(["p2-c"], partition=2)
    wait_lso(kafka_admin, topic, 6, partition=2)

    run_available_now(stream(rc_spark, kafka_bootstrap, topic), sink, checkpoint)
    assert Counter(sink.values()) == Counter(["p0-a", "p0-b", "p1-a", "p2-a", "p2-b", "p2-c"])
    assert checkpoint_offsets(checkpoint)[-1] == {
        (topic, 0): 2,
        (topic, 1): 1,
        (topic, 2): 6,
    }

"""Consumer reuse across micro-batches, against a real broker (real clients over TCP).

The task read path (``read_range``, what a Spark task runs) reads one micro-batch's range
after another in this process, as a reused Python worker does: with the cache one consumer
serves every range of a partition (ranges ending on abort markers, aborted transactions
between them) and a range read again gets a new one; with
``kafkaConsumer.cache.capacity=0`` each range gets its own. Through Spark, a multi-batch
stream reads every committed record once on both paths. The rules themselves are
unit-tested in tests/kafka_source/test_consumers.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from connectors.kafka._source import OffsetRange, SourceOptions, _consumers
from connectors.kafka._source._fetch import read_range

from ._support import TxnWriter, wait_lso

pytestmark = pytest.mark.spark

BATCHES = 5
PER_TXN = 7
RUN_TIMEOUT_S = 300.0
"""Seconds an availableNow run may take on a busy machine."""


@pytest.fixture(autouse=True)
def _no_idle_consumers() -> Iterator[None]:
    _consumers.close_idle()
    yield
    _consumers.close_idle()


ABORTED = 3
PER_BATCH = PER_TXN + 1 + ABORTED + 1  # offsets: records, commit marker, aborted, abort marker


def write_batches(bootstrap: str, admin: AdminClient, topic: str) -> tuple[list[int], list[str]]:
    """Per batch: one committed and one aborted transaction; each batch's end, the values."""
    writer = TxnWriter(bootstrap, topic)
    committed: list[str] = []
    for b in range(BATCHES):
        values = [f"b{b}-{i}" for i in range(PER_TXN)]
        writer.commit(values)
        writer.abort([f"aborted-{b}-{i}" for i in range(ABORTED)])
        committed += values
    ends = [(b + 1) * PER_BATCH for b in range(BATCHES)]  # each right after an abort marker
    wait_lso(admin, topic, ends[-1])
    return ends, committed


def read_values(opts: SourceOptions, rng: OffsetRange) -> list[str]:
    return [bytes(r["value"]).decode() for b in read_range(opts, rng) for r in b.to_pylist()]


@pytest.mark.parametrize("capacity", [64, 0], ids=["reuse", "one-consumer-per-read"])
def test_consecutive_ranges_reuse_one_consumer(
    kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str], capacity: int
) -> None:
    topic = new_topic("rc-reuse")
    ends, committed = write_batches(kafka_bootstrap, kafka_admin, topic)
    opts = SourceOptions.from_options(
        {
            "kafka.bootstrap.servers": kafka_bootstrap,
            "subscribe": topic,
            "kafkaConsumer.cache.capacity": str(capacity),
        }
    )
    before = _consumers.stats()
    got: list[str] = []
    for start, end in zip([0, *ends], ends, strict=False):  # each ends past a marker
        got += read_values(opts, OffsetRange(topic=topic, partition=0, start=start, end=end))
    assert got == committed  # every committed record once, in order, nothing aborted
    again = read_values(
        opts, OffsetRange(topic=topic, partition=0, start=ends[1], end=ends[2])
    )  # a batch replayed
    assert again == committed[2 * PER_TXN : 3 * PER_TXN]
    after = _consumers.stats()
    created, reused = after.created - before.created, after.reused - before.reused
    if capacity:
        # A steady-state batch opens no consumer; the replay starts behind the cached
        # consumer's position, which it invalidates: a new one.
        assert (created, reused) == (2, BATCHES - 1)
        assert after.idle == 1
    else:
        assert (created, reused) == (BATCHES + 1, 0)
        assert after.idle == 0


@pytest.mark.parametrize("capacity", ["64", "0"], ids=["reuse", "one-consumer-per-read"])
def test_a_multi_batch_stream_reads_every_record_once(
    rc_spark: Any,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    new_topic: Callable[..., str],
    tmp_path: Path,
    capacity: str,
) -> None:
    topic = new_topic("rc-reuse-stream", partitions=1)
    _ends, committed = write_batches(kafka_bootstrap, kafka_admin, topic)
    seen: list[str] = []

    def collect(df: Any, _batch_id: int) -> None:
        seen.extend(bytes(r.value).decode() for r in df.orderBy("offset").collect())

    query = (
        rc_spark.readStream.format("kafka-rc")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_TXN + 2))  # batches end inside transactions too
        .option("kafkaConsumer.cache.capacity", capacity)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(RUN_TIMEOUT_S)
    assert query.exception() is None
    assert seen == committed

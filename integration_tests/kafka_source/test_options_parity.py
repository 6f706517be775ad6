"""Spark's Kafka source options on kafka-rc, against a real broker (and Spark where it reads).

Each test states what Spark's Structured Streaming + Kafka integration guide says the
option does (docs/kafka-source.md, "Options"): timestamps resolve through ListOffsets by
timestamp, ``startingOffsetsByTimestampStrategy`` decides a start without a match,
``maxRecordsPerPartition`` splits a range, ``minOffsetsPerTrigger`` holds a small batch
back (never under ``Trigger.AvailableNow``). The driver-side rules with a scripted admin
client are in tests/kafka_source/test_source_options.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql.utils import CapturedException

from connectors.kafka._source import KafkaStreamReader, SourceOptions

from ._support import CLIENT_TIMEOUT_S, batch_read

pytestmark = pytest.mark.spark

BASE_TS = 1_700_000_000_000
"""CreateTime of the first record (ms); partition 0's records are 1 s apart, 1's 2 s."""
P0, P1 = 10, 5
RUN_TIMEOUT_S = 300.0
"""Seconds an availableNow run may take on a busy machine."""


def produce_timed(bootstrap: str, topic: str) -> None:
    """``P0`` records into partition 0 at BASE_TS + i s, ``P1`` into 1 at BASE_TS + 2i s."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, count, step in ((0, P0, 1000), (1, P1, 2000)):
        for i in range(count):
            ts = BASE_TS + i * step
            producer.produce(topic, f"p{partition}-{i}".encode(), partition=partition, timestamp=ts)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


@pytest.fixture
def timed(kafka_bootstrap: str, new_topic: Callable[..., str]) -> str:
    topic = new_topic("rc-times", partitions=2)
    produce_timed(kafka_bootstrap, topic)
    return topic


def positions(rows: list[Any]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in rows]


def test_a_batch_between_two_timestamps(rc_spark: Any, kafka_bootstrap: str, timed: str) -> None:
    # Start: the first record at or after BASE+3s (partition 0: offset 3; 1: BASE+4s, offset
    # 2). End: the first at or after BASE+7s, exclusive (0: offset 7; 1: BASE+8s, offset 4).
    rows = batch_read(
        rc_spark,
        kafka_bootstrap,
        subscribe=timed,
        startingTimestamp=str(BASE_TS + 3000),
        endingTimestamp=str(BASE_TS + 7000),
    )
    assert positions(rows) == [(0, 3), (0, 4), (0, 5), (0, 6), (1, 2), (1, 3)]
    assert all(BASE_TS + 3000 <= r.timestamp.timestamp() * 1000 < BASE_TS + 7000 for r in rows)


def test_per_partition_timestamps_and_an_end_without_match(
    rc_spark: Any, kafka_bootstrap: str, timed: str
) -> None:
    rows = batch_read(
        rc_spark,
        kafka_bootstrap,
        subscribe=timed,
        startingOffsetsByTimestamp=json.dumps({timed: {"0": BASE_TS + 8500, "1": BASE_TS}}),
        # Partition 0 has no record this late: its end is its latest offset (Spark's rule).
        endingOffsetsByTimestamp=json.dumps({timed: {"0": BASE_TS + 99_000, "1": BASE_TS + 2000}}),
    )
    assert positions(rows) == [(0, 9), (1, 0)]


def test_a_start_without_match_fails_naming_the_strategy(
    rc_spark: Any, kafka_bootstrap: str, timed: str
) -> None:
    with pytest.raises(CapturedException) as info:
        batch_read(
            rc_spark, kafka_bootstrap, subscribe=timed, startingTimestamp=str(BASE_TS + 9500)
        )
    text = str(info.value)
    assert "[offset-spec]" in text and "startingTimestamp" in text
    # Partition 0's last record is at BASE+9s, partition 1's at BASE+8s: neither matches.
    assert f"{timed}-0 (timestamp {BASE_TS + 9500})" in text
    assert f"{timed}-1 (timestamp {BASE_TS + 9500})" in text
    assert "startingOffsetsByTimestampStrategy=latest" in text


def test_strategy_latest_starts_a_stream_at_the_latest_offset(
    kafka_bootstrap: str, timed: str
) -> None:
    def initial(timestamp: int) -> dict[str, Any]:
        options = {
            "kafka.bootstrap.servers": kafka_bootstrap,
            "subscribe": timed,
            "startingTimestamp": str(timestamp),
            "startingOffsetsByTimestampStrategy": "latest",
        }
        return KafkaStreamReader(SourceOptions.from_options(options)).initialOffset()

    # BASE+6s: partition 0's record 6, partition 1's record 3 (BASE+6s too).
    assert initial(BASE_TS + 6000) == {timed: {"0": 6, "1": 3}}
    # BASE+8.5s: partition 0's record 9; partition 1 has none that late: its latest offset.
    assert initial(BASE_TS + 8500) == {timed: {"0": 9, "1": P1}}


def test_max_records_per_partition_splits_the_ranges(
    rc_spark: Any, kafka_bootstrap: str, timed: str
) -> None:
    df = (
        rc_spark.read.format("kafka-rc")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", timed)
        .option("maxRecordsPerPartition", "3")
        .load()
    )
    assert df.rdd.getNumPartitions() == 4 + 2  # ceil(10 / 3) + ceil(5 / 3)
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert positions(rows) == [(0, i) for i in range(P0)] + [(1, i) for i in range(P1)]


def test_min_offsets_per_trigger_holds_a_small_batch_back(kafka_bootstrap: str, timed: str) -> None:
    options = {
        "kafka.bootstrap.servers": kafka_bootstrap,
        "subscribe": timed,
        "startingOffsets": "earliest",
        "minOffsetsPerTrigger": "20",
        "maxTriggerDelay": "1h",
    }
    reader = KafkaStreamReader(SourceOptions.from_options(options))
    start = reader.initialOffset()
    limit = reader.getDefaultReadLimit()
    first = reader.latestOffset(start, limit)  # a run's first trigger always goes through
    assert first == {timed: {"0": P0, "1": P1}}
    produce_timed(kafka_bootstrap, timed)  # 15 more offsets: fewer than 20
    assert reader.latestOffset(first, limit) == first
    produce_timed(kafka_bootstrap, timed)  # 30 new in all
    assert reader.latestOffset(first, limit) == {timed: {"0": 3 * P0, "1": 3 * P1}}


def test_available_now_reads_everything_whatever_the_minimum(
    rc_spark: Any, kafka_bootstrap: str, timed: str, tmp_path: Path
) -> None:
    seen: list[int] = []
    query = (
        rc_spark.readStream.format("kafka-rc")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", timed)
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "1000")
        .load()
        .writeStream.foreachBatch(lambda df, _: seen.append(df.count()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(RUN_TIMEOUT_S)
    assert query.exception() is None
    assert sum(seen) == P0 + P1

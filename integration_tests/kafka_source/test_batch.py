"""Batch reads (spark.read) through the kafka-rc source against a real broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from ._support import TxnWriter, batch_read, offsets, produce_plain, values, wait_lso

pytestmark = pytest.mark.spark


def test_aborted_data_is_never_read(
    rc_spark: Any, kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("rc-abort")
    w = TxnWriter(kafka_bootstrap, topic)
    expected: list[str] = []
    for i in range(6):
        batch = [f"t{i}-{j}" for j in range(3)]
        if i % 2 == 0:
            w.commit(batch)
            expected += batch
        else:
            w.abort(batch)
        produce_plain(kafka_bootstrap, topic, [f"plain{i}"])
        expected.append(f"plain{i}")
    _, lso, hw = offsets(kafka_admin, topic)
    assert lso == hw
    rows = batch_read(rc_spark, kafka_bootstrap, subscribe=topic)
    assert values(rows) == expected
    assert not any("t1-" in v or "t3-" in v or "t5-" in v for v in values(rows))
    # offsets are strictly increasing and leave gaps where markers/aborted data sit
    offs = [r.offset for r in rows]
    assert offs == sorted(set(offs)) and offs[-1] < lso
    row = rows[0]
    assert row.topic == topic and row.partition == 0 and row.timestampType == 0
    assert row.key is None and row.timestamp is not None  # transactional writes had no key


def test_exactly_the_configured_range(
    rc_spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("rc-range", partitions=2)
    for p in (0, 1):
        produce_plain(kafka_bootstrap, topic, [f"p{p}-{i}" for i in range(30)], partition=p)
    start = json.dumps({topic: {"0": 10, "1": -2}})
    end = json.dumps({topic: {"0": 20, "1": 5}})
    rows = batch_read(
        rc_spark, kafka_bootstrap, subscribe=topic, startingOffsets=start, endingOffsets=end
    )
    got = [(r.partition, r.offset) for r in rows]
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(0, 5)]
    assert values(rows)[0] == "p0-10" and bytes(rows[0].key) == b"k-p0-10"


def test_range_ending_on_control_marker_and_entirely_aborted_range(
    rc_spark: Any, kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("rc-gaps")
    w = TxnWriter(kafka_bootstrap, topic)
    w.commit(["a0", "a1", "a2"])  # offsets 0-2, commit marker 3
    w.abort(["b0", "b1"])  # offsets 4-5, abort marker 6
    w.commit(["c0"])  # offset 7, commit marker 8
    wait_lso(kafka_admin, topic, 9)

    def read(lo: int, hi: int, **extra: str) -> list[str]:
        rng = {
            "startingOffsets": json.dumps({topic: {"0": lo}}),
            "endingOffsets": json.dumps({topic: {"0": hi}}),
            "kafkaConsumer.pollTimeoutMs": "60000",
        }
        return values(batch_read(rc_spark, kafka_bootstrap, subscribe=topic, **rng, **extra))

    assert read(0, 4) == ["a0", "a1", "a2"]  # ends on the commit marker
    assert read(0, 3) == ["a0", "a1", "a2"]  # ends just before the marker
    assert read(4, 7) == []  # aborted data plus its abort marker only
    assert read(3, 7) == []  # starts on a marker too
    assert read(5, 9) == ["c0"]  # starts inside an aborted transaction
    assert read(0, 9) == ["a0", "a1", "a2", "c0"]  # the log ends on a marker
    # splitting into single-offset tasks changes nothing
    assert read(0, 9, minPartitions="9") == ["a0", "a1", "a2", "c0"]


def test_open_transaction_stalls_the_latest_offset(
    rc_spark: Any, kafka_bootstrap: str, kafka_admin: AdminClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("rc-open")
    w = TxnWriter(kafka_bootstrap, topic)
    w.commit(["x0", "x1"])  # 0,1 + marker 2
    wait_lso(kafka_admin, topic, 3)
    w.begin(["open0", "open1"])  # 3,4 pending
    produce_plain(kafka_bootstrap, topic, ["after-open"])  # 5: behind the open txn
    _, lso, hw = offsets(kafka_admin, topic)
    assert (lso, hw) == (3, 6)
    assert values(batch_read(rc_spark, kafka_bootstrap, subscribe=topic)) == ["x0", "x1"]
    with pytest.raises(Exception, match="offset-spec"):
        batch_read(
            rc_spark,
            kafka_bootstrap,
            subscribe=topic,
            endingOffsets=json.dumps({topic: {"0": 6}}),
        )
    w.producer.commit_transaction(60)
    wait_lso(kafka_admin, topic, 7)
    assert values(batch_read(rc_spark, kafka_bootstrap, subscribe=topic)) == [
        "x0",
        "x1",
        "open0",
        "open1",
        "after-open",
    ]


def test_partitions_without_data_and_pattern_subscription(
    rc_spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    a = new_topic("rcpat", partitions=3)
    b = new_topic("rcpat", partitions=1)
    produce_plain(kafka_bootstrap, a, ["a1-0", "a1-1"], partition=1)
    produce_plain(kafka_bootstrap, b, ["b0-0"])
    pattern = f"({a}|{b})"
    rows = batch_read(rc_spark, kafka_bootstrap, subscribePattern=pattern)
    assert sorted(values(rows)) == ["a1-0", "a1-1", "b0-0"]
    empty = new_topic("rc-empty", partitions=2)
    assert batch_read(rc_spark, kafka_bootstrap, subscribe=empty) == []
    assign = json.dumps({a: [0, 1]})
    assert values(batch_read(rc_spark, kafka_bootstrap, assign=assign)) == ["a1-0", "a1-1"]


def test_headers_and_bad_options(
    rc_spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("rc-hdr")
    produce_plain(kafka_bootstrap, topic, ["h"], headers=[("trace", b"abc"), ("n", b"")])
    produce_plain(kafka_bootstrap, topic, ["no-h"])
    df = (
        rc_spark.read.format("kafka-rc")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [(h.key, bytes(h.value)) for h in rows[0].headers] == [("trace", b"abc"), ("n", b"")]
    assert rows[1].headers is None
    with pytest.raises(Exception, match="source-option.*startingoffsetz"):
        rc_spark.read.format("kafka-rc").option("kafka.bootstrap.servers", kafka_bootstrap).option(
            "subscribe", topic
        ).option("startingOffsetz", "earliest").load()
    with pytest.raises(Exception, match="offset-spec"):
        batch_read(
            rc_spark,
            kafka_bootstrap,
            subscribe=topic,
            startingOffsets=json.dumps({topic: {"0": 0, "7": 0}}),
        )

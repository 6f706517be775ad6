"""KafkaSink end to end with real Spark and a real broker: each guarantee, bad input."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from confluent_kafka.admin import NewTopic
from pyspark.sql import functions as F  # noqa: N812

from connectors.kafka import KafkaCode, KafkaConnectorError, KafkaSink, read_markers
from connectors.kafka._sink import _sink as sink_module
from connectors.stage import StageCode, StageError
from connectors.testing import FaultPlan, inject_faults
from integration_tests.kafka_sink._support import (
    expected,
    lso_reaches_high_watermark,
    read_committed,
    rows,
    sid,
    values,
)
from txn._model import PartitionOutcome

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    ("guarantee", "mode"),
    [
        ("exactly-once", "aligned"),
        ("exactly-once", "unaligned"),
        ("at-least-once", "aligned"),
        ("at-most-once", "aligned"),
    ],
)
def test_each_guarantee_writes_a_batch_exactly(spark, kafka_bootstrap, new_topic, guarantee, mode):
    topic = new_topic("ks-out", partitions=3)
    sink = KafkaSink(kafka_bootstrap, topic, sid(), guarantee=guarantee, mode=mode)
    try:
        result = sink(rows(spark, 600), 0)
        assert result.committed and not result.skipped
        assert sum(r.rows for r in result.reports) == 600
        result = sink(rows(spark, 400, start=600), 1)
        assert result.committed
        got = read_committed(kafka_bootstrap, topic)
        assert values(got) == expected(1000)
        by_key = {r.key: r.value for r in got}
        assert by_key[b"k7"] == b"v7"
        history = sink.epoch_log_history()
        assert history.is_committed(0) and history.is_committed(1)
    finally:
        sink.close()


@pytest.mark.parametrize("channel", ["driver", "barrier"])
def test_at_most_once_does_not_re_run_a_failed_stage(
    spark, kafka_bootstrap, new_topic, tmp_path, channel
):
    topic = new_topic("ks-amo", partitions=2)
    plan = tmp_path / "faults.json"
    plan.write_text(
        json.dumps(
            [
                {
                    "id": "boom",
                    "step": "mid_write",
                    "epoch": 0,
                    "partition": 0,
                    "action": "raise",
                    "after_rows": 10,
                    "times": 1,
                }
            ]
        )
    )
    sink = KafkaSink(
        kafka_bootstrap,
        topic,
        sid(),
        guarantee="at-most-once",
        parallelism=2,
        stage_retries=2,
        vote_channel=channel,
    )
    try:
        with pytest.raises(Exception, match="injected fault"), inject_faults(FaultPlan(str(plan))):
            sink(rows(spark, 200), 0)  # local[2]: no task retry; the stage must not re-run
        assert sink(rows(spark, 200), 0).skipped  # the replay gives the epoch up
        assert sink(rows(spark, 100, start=200), 1).committed
    finally:
        sink.close()
    got = values(read_committed(kafka_bootstrap, topic))
    assert max(got.values()) == 1, "a row was written twice"
    assert expected(100, start=200) <= got  # the next epoch is whole
    assert sum(got.values()) < 300  # the failed partition's rest was lost, not rewritten
    metrics = sink.metrics()
    assert metrics[0].stage_runs == 1 and metrics[0].error is not None


@pytest.mark.compat
@pytest.mark.parametrize("channel", ["driver", "barrier"])
def test_aligned_mode_over_each_vote_channel(spark, kafka_bootstrap, new_topic, channel):
    topic = new_topic("ks-vc", partitions=2)
    sink = KafkaSink(kafka_bootstrap, topic, sid(), parallelism=2, vote_channel=channel)
    try:
        for epoch, start in ((0, 0), (1, 500)):
            result = sink(rows(spark, 500, start=start), epoch)
            assert result.committed
            assert {r.outcome for r in result.reports} == {PartitionOutcome.COMMITTED}
            # every task decided on the same full set of votes
            assert len({r.votes for r in result.reports}) == 1
            assert [v.partition for v in result.reports[0].votes] == [0, 1]
        assert sink(rows(spark, 500), 0).skipped
        server = sink._res.votes
        assert (server is not None and server.running) is (channel == "driver")
    finally:
        sink.close()
    assert server is None or not server.running  # close() stops the driver's vote server
    assert values(read_committed(kafka_bootstrap, topic)) == expected(1000)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)


@pytest.mark.compat
def test_replay_of_a_committed_batch_writes_nothing(spark, kafka_bootstrap, new_topic):
    topic = new_topic("ks-replay", partitions=2)
    sink_id = sid()
    sink = KafkaSink(kafka_bootstrap, topic, sink_id)
    try:
        first = sink(rows(spark, 300), 5)
        assert all(r.outcome is PartitionOutcome.COMMITTED for r in first.reports)
        again = sink(rows(spark, 300), 5)
        assert again.skipped
    finally:
        sink.close()
    # A restarted driver (new sink object, same sink_id) also skips it.
    restarted = KafkaSink(kafka_bootstrap, topic, sink_id)
    try:
        assert restarted(rows(spark, 300), 5).skipped
    finally:
        restarted.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(300)
    markers = read_markers(kafka_bootstrap, sink_id, 2)
    assert {m.epoch for m in markers.values() if m} == {5}
    assert sum(m.rows for m in markers.values() if m) == 300


def test_same_rows_land_in_the_same_write_partition_whatever_the_upstream_order(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("ks-route", partitions=2)
    base = rows(spark, 500, parts=2)
    shuffled = base.repartition(7).orderBy(F.rand(seed=3))
    summaries = []
    for i, df in enumerate([base, shuffled]):
        sink = KafkaSink(
            kafka_bootstrap, topic, sid(), parallelism=2, epoch_log=str(tmp_path / f"log{i}")
        )
        try:
            result = sink(df, 0)
        finally:
            sink.close()
        summaries.append([(r.partition, r.rows, r.checksum) for r in result.reports])
    assert summaries[0] == summaries[1]
    assert all(n > 0 for _, n, _ in summaries[0])


def test_topic_partition_and_headers_columns(spark, kafka_bootstrap, new_topic, tmp_path):
    a = new_topic("ks-a", partitions=2)
    b = new_topic("ks-b", partitions=2)
    df = spark.createDataFrame(
        [("k1", "v1", a, 1, [("h", b"x")]), ("k2", "v2", b, 0, []), ("k3", "v3", None, None, None)],
        "key string, value string, topic string, partition int, "
        "headers array<struct<key:string,value:binary>>",
    )
    sink = KafkaSink(kafka_bootstrap, a, sid(), epoch_log=str(tmp_path / "log"))
    try:
        sink(df, 0)
    finally:
        sink.close()
    got_a = {r.key: r for r in read_committed(kafka_bootstrap, a)}
    got_b = {r.key: r for r in read_committed(kafka_bootstrap, b)}
    assert set(got_a) == {b"k1", b"k3"} and set(got_b) == {b"k2"}
    assert got_a[b"k1"].partition == 1 and got_a[b"k1"].headers == (("h", b"x"),)
    assert got_b[b"k2"].partition == 0


def test_empty_batch_commits_and_writes_nothing(spark, kafka_bootstrap, new_topic):
    topic = new_topic("ks-empty")
    sink = KafkaSink(kafka_bootstrap, topic, sid())
    try:
        result = sink(rows(spark, 10).filter("false"), 0)
        assert result.committed
        assert sink.epoch_log_history().is_committed(0)
    finally:
        sink.close()
    assert read_committed(kafka_bootstrap, topic) == []


def test_changelog_drops_update_before_and_writes_tombstones(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("ks-cl", partitions=2)
    df = spark.createDataFrame(
        [
            ("a", "1", "insert"),
            ("b", "1", "insert"),
            ("a", "1", "update_before"),
            ("a", "2", "update_after"),
            ("b", "1", "delete"),
        ],
        "key string, value string, op string",
    )
    sink = KafkaSink(
        kafka_bootstrap,
        topic,
        sid(),
        changelog=True,
        parallelism=1,
        epoch_log=str(tmp_path / "log"),
        order_by=["seq"],
    )
    try:
        sink(df.withColumn("seq", F.monotonically_increasing_id()), 0)
    finally:
        sink.close()
    got = [(r.key, r.value) for r in read_committed(kafka_bootstrap, topic)]
    assert sorted(got, key=repr) == sorted(
        [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", None)], key=repr
    )
    # per-key order follows the input order (order_by)
    assert [v for k, v in got if k == b"a"] == [b"1", b"2"]
    assert [v for k, v in got if k == b"b"] == [b"1", None]


def test_changelog_without_key_is_a_clear_error(spark, kafka_bootstrap, closing):
    sink = closing(KafkaSink(kafka_bootstrap, "unused", sid(), changelog=True))
    df = spark.createDataFrame([("1", "insert")], "value string, op string")
    with pytest.raises(
        KafkaConnectorError, match="key", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ):
        sink(df, 0)


def _assert_nothing_visible(bootstrap, topic, sink):
    assert read_committed(bootstrap, topic) == []
    assert lso_reaches_high_watermark(bootstrap, topic)
    assert not sink.epoch_log_history().is_committed(0)


def test_null_value_raises_typed_error_and_nothing_is_visible(spark, kafka_bootstrap, new_topic):
    topic = new_topic("ks-null", partitions=2)
    sink = KafkaSink(kafka_bootstrap, topic, sid())
    df = rows(spark, 200).withColumn(
        "value", F.when(F.col("key") == "k150", F.lit(None)).otherwise(F.col("value"))
    )
    try:
        with pytest.raises(
            KafkaConnectorError,
            match="'value'",
            check=lambda e: (
                e.code in (StageCode.RECORD, KafkaCode.RECORD_TOO_LARGE, KafkaCode.RECORD_FORMAT)
            ),
        ) as info:
            sink(df, 0)
        assert info.value.column == "value"
        _assert_nothing_visible(kafka_bootstrap, topic, sink)
        # The fixed batch replays the same epoch exactly.
        sink(rows(spark, 200), 0)
    finally:
        sink.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(200)


def test_wrong_column_type_raises_before_anything_runs(spark, kafka_bootstrap, new_topic):
    topic = new_topic("ks-type")
    sink = KafkaSink(kafka_bootstrap, topic, sid())
    try:
        with pytest.raises(
            KafkaConnectorError,
            match="'value' has type bigint",
            check=lambda e: e.code is StageCode.INPUT_SCHEMA,
        ) as info:
            sink(spark.range(5).selectExpr("id AS value"), 0)
        assert info.value.column == "value"
        assert sink.epoch_log_history().plan(0) is None
    finally:
        sink.close()


def test_oversized_record_raises_typed_error_and_nothing_is_visible(
    spark, kafka_bootstrap, new_topic
):
    topic = new_topic("ks-big", partitions=2)
    sink = KafkaSink(kafka_bootstrap, topic, sid(), producer_config={"message.max.bytes": 20000})
    df = rows(spark, 100).withColumn(
        "value",
        F.when(F.col("key") == "k42", F.repeat(F.lit("x"), 50000)).otherwise(F.col("value")),
    )
    try:
        with pytest.raises(
            KafkaConnectorError,
            match="message.max.bytes",
            check=lambda e: e.code is KafkaCode.RECORD_TOO_LARGE,
        ) as info:
            sink(df, 0)
        assert info.value.column == "value"
        _assert_nothing_visible(kafka_bootstrap, topic, sink)
    finally:
        sink.close()


def test_aligned_mode_checks_task_slots_up_front(spark, kafka_bootstrap, new_topic):
    topic = new_topic("ks-slots")
    slots = spark.sparkContext.defaultParallelism
    sink = KafkaSink(kafka_bootstrap, topic, sid(), parallelism=slots + 1)
    try:
        with pytest.raises(
            StageError, match="unaligned", check=lambda e: e.code is StageCode.INSUFFICIENT_SLOTS
        ):
            sink(rows(spark, 10), 0)
        assert sink.epoch_log_history().plan(0) is None
    finally:
        sink.close()
    # Unaligned mode runs with more write partitions than slots.
    unaligned = KafkaSink(kafka_bootstrap, topic, sid(), parallelism=slots + 1, mode="unaligned")
    try:
        result = unaligned(rows(spark, 90), 0)
        assert len(result.reports) == slots + 1
    finally:
        unaligned.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(90)


def test_missing_topic_is_a_preflight_error_unless_created(
    spark, kafka_bootstrap, monkeypatch, closing
):
    monkeypatch.setattr(sink_module, "TOPIC_METADATA_WAIT_S", 1.0)
    name = f"ks-missing-{uuid.uuid4().hex[:8]}"
    sink = closing(KafkaSink(kafka_bootstrap, name, sid()))
    with pytest.raises(
        KafkaConnectorError,
        match="create_topics=True",
        check=lambda e: e.code is KafkaCode.TOPIC_MISSING,
    ) as info:
        sink(rows(spark, 5), 0)
    assert not info.value.retry_stage and "did not show it for 1s" in str(info.value)
    creating = KafkaSink(kafka_bootstrap, name, sid(), create_topics=True)
    try:
        creating(rows(spark, 5), 0)
    finally:
        creating.close()
    assert values(read_committed(kafka_bootstrap, name)) == expected(5)


def test_topic_that_appears_during_the_metadata_wait_is_found(spark, kafka_bootstrap, kafka_admin):
    # A restarted broker can answer metadata before it has loaded its topics: preflight
    # looks again for a bounded time instead of calling the topic missing at once.
    name = f"ks-late-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(kafka_bootstrap, name, sid())

    def create_later() -> None:
        time.sleep(2.0)
        kafka_admin.create_topics([NewTopic(name, 1, -1)])[name].result(timeout=30)

    creator = threading.Thread(target=create_later)
    creator.start()
    try:
        sink.preflight()
    finally:
        creator.join()
        sink.close()


def test_unreachable_broker_is_not_reported_as_a_missing_topic(closing):
    sink = closing(KafkaSink("127.0.0.1:9", "out", sid()))  # nothing listens on port 9
    with pytest.raises(
        KafkaConnectorError,
        match="cannot connect to Kafka at 127.0.0.1:9",
        check=lambda e: e.code in (KafkaCode.BROKER_UNAVAILABLE, KafkaCode.CONNECT),
    ):
        sink.preflight()


def test_transaction_timeout_above_broker_limit_is_a_preflight_error(
    spark, kafka_bootstrap, new_topic, closing
):
    sink = closing(
        KafkaSink(kafka_bootstrap, new_topic("ks-to"), sid(), transaction_timeout_ms=10**9)
    )
    with pytest.raises(
        KafkaConnectorError,
        match="transaction.max.timeout.ms",
        check=lambda e: (
            e.code
            in (
                KafkaCode.PREFLIGHT,
                KafkaCode.BROKER_UNAVAILABLE,
                KafkaCode.CONNECT,
                KafkaCode.TOPIC_MISSING,
            )
        ),
    ):
        sink(rows(spark, 5), 0)

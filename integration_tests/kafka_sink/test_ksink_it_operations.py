"""Operating a sink under real streaming queries: query binding, graceful stop, metrics."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka import KafkaSink
from connectors.stage import StageCode, StageError
from connectors.testing import FaultPlan, inject_faults
from integration_tests.kafka_sink._support import (
    expected,
    lso_reaches_high_watermark,
    rc_query,
    read_committed,
    sid,
    values,
)

pytestmark = pytest.mark.spark

FILES = 3
PER_FILE = 40
# Seconds a streaming query may take to drain its files on a busy machine.
QUERY_TIMEOUT_S = 300.0


def stage_files(directory: Path, files: int = FILES, per_file: int = PER_FILE) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        lines = [
            json.dumps({"key": f"k{i}", "value": f"v{i}"})
            for i in range(f * per_file, (f + 1) * per_file)
        ]
        path = directory / f"part-{f:03d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))  # Spark reads oldest first


def start(spark: Any, source: Path, checkpoint: Path, sink: Any) -> Any:
    return (
        spark.readStream.schema("key STRING, value STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_new_checkpoint_with_an_old_sink_id_is_refused_until_started_over(
    spark, kafka_bootstrap, new_topic, tmp_path, closing
):
    topic, sink_id, source = new_topic("ks-bind", 2), sid(), tmp_path / "in"
    files = 2  # two batches a query: epochs 0-1, then the started-over query's 2-3
    stage_files(source, files=files)
    log_path = str(tmp_path / "epochs.log")

    def sink(**opts: Any) -> KafkaSink:
        return closing(KafkaSink(kafka_bootstrap, topic, sink_id, epoch_log=log_path, **opts))

    first = sink()
    start(spark, source, tmp_path / "ck-a", first).awaitTermination(QUERY_TIMEOUT_S)
    first.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(files * PER_FILE)

    # A user deletes the checkpoint: batch ids restart at 0 under a new query id.
    again = sink()
    query = start(spark, source, tmp_path / "ck-b", again)
    with pytest.raises(Exception, match="query-mismatch"):
        query.awaitTermination(QUERY_TIMEOUT_S)
    again.close()
    assert isinstance(query.exception(), Exception)
    assert values(read_committed(kafka_bootstrap, topic)) == expected(files * PER_FILE)

    # Starting over on purpose writes the new query's batches as new epochs.
    over = sink(start_over=True)
    start(spark, source, tmp_path / "ck-b", over).awaitTermination(QUERY_TIMEOUT_S)
    history = over.epoch_log_history()
    over.close()
    assert history.binding is not None and history.binding.epoch_offset == files
    got = values(read_committed(kafka_bootstrap, topic))
    assert got == expected(files * PER_FILE) + expected(files * PER_FILE)
    assert history.last_committed_epoch() == 2 * files - 1


def test_binding_error_names_the_fix(spark, kafka_bootstrap, new_topic, tmp_path, closing):
    topic, source = new_topic("ks-bind2", 1), tmp_path / "in"
    stage_files(source, files=1)
    log_path = str(tmp_path / "epochs.log")
    first = closing(KafkaSink(kafka_bootstrap, topic, "ks-bind-fix", epoch_log=log_path))
    start(spark, source, tmp_path / "ck-a", first).awaitTermination(QUERY_TIMEOUT_S)
    first.close()
    second = closing(KafkaSink(kafka_bootstrap, topic, "ks-bind-fix", epoch_log=log_path))
    # Batch 0 of another query, seen through the binder directly (no Spark needed here).
    with pytest.raises(StageError, check=lambda e: e.code is StageCode.QUERY_MISMATCH) as info:
        second._binder.epoch(second._open_log(), "another-query", 0)
    second.close()
    text = str(info.value)
    assert "start_over=True" in text and "eos reset ks-bind-fix --query another-query" in text


def test_graceful_stop_leaves_whole_epochs_and_nothing_open(
    spark, kafka_bootstrap, new_topic, tmp_path, closing
):
    topic, source = new_topic("ks-stop", 2), tmp_path / "in"
    stage_files(source, files=6)
    plan = tmp_path / "faults.json"
    # Hold epoch 1's write tasks for a moment, so that the stop arrives mid-epoch.
    plan.write_text(
        json.dumps(
            [
                {
                    "id": "hold",
                    "step": "after_pre_commit",
                    "epoch": 1,
                    "action": "sleep",
                    "seconds": 3.0,
                    "times": 2,
                }
            ]
        )
    )
    sink = closing(KafkaSink(kafka_bootstrap, topic, sid(), parallelism=2))
    with inject_faults(FaultPlan(str(plan))):
        query = start(spark, source, tmp_path / "ck", sink)
        while not Path(f"{plan}.hold.0").exists():  # epoch 1 is pre-committing now
            time.sleep(0.05)
        stopper = threading.Thread(target=lambda: sink.stop_gracefully(query, timeout_s=120))
        stopper.start()
        stopper.join(QUERY_TIMEOUT_S)
    assert not query.isActive
    done = [m for m in sink.metrics() if m.committed]
    sink.close()
    assert [m.epoch for m in done] == [0, 1], "the epoch in flight finished, no later one began"
    assert all(
        isinstance(m.error, str) and "[sink-stopped]" in m.error
        for m in sink.metrics()
        if not m.committed
    )
    assert values(read_committed(kafka_bootstrap, topic)) == expected(2 * PER_FILE)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)
    with pytest.raises(StageError, check=lambda e: e.code is StageCode.SINK_STOPPED):
        sink.write(None, 9)  # type: ignore[arg-type]


def test_streaming_query_reports_per_epoch_metrics(
    spark, kafka_bootstrap, new_topic, tmp_path, closing
):
    topic, source = new_topic("ks-metrics", 2), tmp_path / "in"
    stage_files(source)
    sink = closing(KafkaSink(kafka_bootstrap, topic, sid(), parallelism=2))
    query = start(spark, source, tmp_path / "ck", sink)
    query.awaitTermination(QUERY_TIMEOUT_S)
    metrics = sink.metrics()
    sink.close()
    assert [m.batch_id for m in metrics] == [0, 1, 2]
    for m in metrics:
        assert m.query_id == str(query.id) and m.committed and not m.skipped
        assert m.rows == PER_FILE and m.bytes > 0 and m.write_tasks == 2
        assert m.partitions_committed == 2 and m.partitions_skipped == 0
        # one write per epoch: its plan with the epoch before's completion (epoch 0: with
        # the query binding); the last completion is written at close
        assert m.epoch_log_appends == 2
        assert m.stage_runs == 1 and m.aborted_attempts == 0
        assert 0 < m.pre_commit_ms <= m.stage_ms <= m.epoch_ms
        assert m.vote_ms > 0 and m.commit_ms > 0
        assert json.loads(m.to_json())["epoch"] == m.epoch


@pytest.mark.usefixtures("rc_spark")  # the kafka-rc source: PySpark 4.2+
def test_keep_partitioning_writes_the_input_partitions_without_a_shuffle(
    spark, kafka_bootstrap, new_topic, tmp_path, closing
):
    from confluent_kafka import Producer

    source_topic, topic = new_topic("ks-keep-in", 2), new_topic("ks-keep-out", 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(80):  # two batches of 40: epoch 0, then epoch 1 with its failed first run
        producer.produce(source_topic, f"v{i}".encode(), f"k{i}".encode(), partition=i % 2)
    producer.flush(30)
    plan = tmp_path / "faults.json"  # epoch 1's first run fails half-way: the re-run reads
    plan.write_text(
        json.dumps(
            [
                {
                    "id": "boom",
                    "step": "mid_write",
                    "epoch": 1,  # again
                    "partition": 0,
                    "action": "raise",
                    "after_rows": 5,
                }
            ]
        )
    )
    sink = closing(
        KafkaSink(
            kafka_bootstrap,
            topic,
            sid(),
            mode="unaligned",
            keep_partitioning=True,
            stage_retries=1,
        )
    )
    with inject_faults(FaultPlan(str(plan))):
        query = rc_query(spark, kafka_bootstrap, source_topic, sink, str(tmp_path / "ck"), 40)
        query.awaitTermination(QUERY_TIMEOUT_S)
    metrics = sink.metrics()
    sink.close()
    assert Path(f"{plan}.boom.0").exists(), "the fault never fired: the test proves nothing"
    assert all(m.write_tasks == 2 for m in metrics)  # one task per input partition
    assert any(m.stage_runs == 2 for m in metrics)
    assert values(read_committed(kafka_bootstrap, topic)) == expected(80)
    assert lso_reaches_high_watermark(kafka_bootstrap, topic)


@pytest.mark.skipif(
    bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")),
    reason="restarts a broker it owns; an external cluster (KAFKA_BOOTSTRAP_SERVERS) cannot be "
    "restarted by the test",
)
def test_query_restarted_while_the_broker_loads_its_topics(spark, tmp_path):
    # Seen with Kafka 2.5: a query restarted while the broker came back failed its preflight
    # with "topic does not exist"; the broker answered Metadata before loading its topics.
    from confluent_kafka.admin import AdminClient, NewTopic

    from minikafka import BrokerProcess

    load_delay_ms = 4000
    source = tmp_path / "in"
    with BrokerProcess(data_dir=tmp_path / "broker") as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("out", 2, -1)])["out"].result(timeout=30)
        stage_files(source, files=1)
        log = str(tmp_path / "epochs.log")
        with KafkaSink(bootstrap, "out", "reload", epoch_log=log) as first:
            start(spark, source, tmp_path / "ck", first).awaitTermination(QUERY_TIMEOUT_S)
        broker.extra_args = ("--topic-load-delay-ms", str(load_delay_ms))
        broker.restart()  # its topics stay hidden from Metadata for load_delay_ms
        stage_files(source, files=2)
        with KafkaSink(bootstrap, "out", "reload", epoch_log=log) as again:
            started = time.monotonic()
            start(spark, source, tmp_path / "ck", again).awaitTermination(QUERY_TIMEOUT_S)
            assert again.metrics()[-1].committed
            assert time.monotonic() - started > 1.0  # the preflight did wait for the topics
        assert values(read_committed(bootstrap, "out")) == expected(2 * PER_FILE)

"""The Prometheus exporter under real streaming queries: the driver's endpoint scraped with
real HTTP GETs between and after epochs, and a short job's pushes to a recording gateway.

The short job's ``MetricsListener`` is also where the listener's views are checked (each
batch's progress joined with the sink's metrics, the source's lag and ``extra`` providers):
one kafka-rc query proves both."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from connectors.kafka import KafkaSink
from connectors.prometheus import MetricsServer, PrometheusCollector, PushGatewayExporter
from connectors.stage import MetricsListener
from connectors.testing import FaultPlan, inject_faults
from integration_tests.kafka_sink._support import (
    expected,
    rc_query,
    read_committed,
    sid,
    values,
)
from integration_tests.kafka_sink.test_ksink_it_operations import (
    PER_FILE,
    QUERY_TIMEOUT_S,
    stage_files,
)
from integration_tests.support.pushgateway import recording_gateway

pytestmark = pytest.mark.spark

# Seconds to wait for Spark's listener events, which arrive after the batch.
LISTENER_TIMEOUT_S = 180.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        return parse(answer.read().decode())


def value(samples: Samples, name: str, default: float | None = None, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    if default is not None:
        return samples.get(key, default)
    return samples[key]


def test_the_endpoint_scraped_during_a_streaming_query_shows_the_epoch_counters(
    spark, kafka_bootstrap, new_topic, tmp_path, closing
):
    topic, source, sink_id = new_topic("ks-prom", 2), tmp_path / "in", sid()
    stage_files(source)
    plan = tmp_path / "faults.json"  # epoch 1's first stage run fails: the re-run redoes it
    plan.write_text(
        json.dumps(
            [
                {
                    "id": "boom",
                    "step": "mid_write",
                    "epoch": 1,
                    "partition": 0,
                    "action": "raise",
                    "after_rows": 1,
                }
            ]
        )
    )
    sink = closing(KafkaSink(kafka_bootstrap, topic, sink_id, parallelism=2))
    collector = PrometheusCollector(sink)
    during: list[tuple[int, float]] = []  # (batch id, committed epochs scraped before it)
    with (
        MetricsServer(collector, port=0, host="127.0.0.1") as server,
        inject_faults(FaultPlan(str(plan))),
    ):

        def write(df: Any, batch_id: int) -> None:
            seen = scrape(server.port)  # a real GET of the driver's endpoint, mid-query
            committed = sum(
                v for (name, labels), v in seen.items()
                if name == "eos_sink_epochs_total" and ("outcome", "committed") in labels
            )  # fmt: skip
            during.append((batch_id, committed))
            sink(df, batch_id)

        query = (
            spark.readStream.schema("key STRING, value STRING")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(QUERY_TIMEOUT_S)
        assert query.exception() is None
        s = scrape(server.port)
        metrics = sink.metrics()
    collector.close()
    assert Path(f"{plan}.boom.0").exists(), "the fault never fired: the test proves nothing"
    assert during == [(0, 0), (1, 1), (2, 2)], during  # the counter advanced epoch by epoch
    key = {"sink_id": sink_id, "query_id": str(query.id)}
    # the scrape after the query agrees with sink.metrics(), field by field
    assert [m.batch_id for m in metrics] == [0, 1, 2]
    assert value(s, "eos_sink_epochs_total", **key, outcome="committed") == sum(
        m.committed for m in metrics
    )
    assert value(s, "eos_sink_epochs_total", **key, outcome="committed") == 3
    assert value(s, "eos_sink_epochs_total", **key, outcome="failed") == 0
    assert value(s, "eos_sink_rows_written_total", **key) == sum(m.rows_written for m in metrics)
    assert value(s, "eos_sink_rows_written_total", **key) == 3 * PER_FILE
    assert value(s, "eos_sink_member_rows_written_total", **key, member=sink_id) == 3 * PER_FILE
    assert value(s, "eos_sink_bytes_written_total", **key) == sum(m.bytes for m in metrics)
    assert value(s, "eos_sink_last_committed_epoch", **key) == metrics[-1].epoch
    assert value(s, "eos_sink_last_committed_batch_id", **key) == 2
    assert value(s, "eos_sink_last_epoch_failed", **key) == 0
    assert time.time() - value(s, "eos_sink_last_commit_timestamp_seconds", **key) < 600
    assert value(s, "eos_sink_write_tasks", **key) == 2
    # the failed first run of epoch 1: a re-run that redid its partitions
    assert value(s, "eos_sink_stage_runs_total", **key) == sum(m.stage_runs for m in metrics)
    assert value(s, "eos_sink_stage_runs_total", **key) == 4
    aborted = sum(m.aborted_attempts for m in metrics)
    assert value(s, "eos_sink_aborted_attempts_total", **key) == aborted >= 1
    assert value(s, "eos_sink_epochs_redone_total", **key) == 1
    assert value(s, "eos_sink_partitions_total", **key, state="redone") == sum(
        m.partitions_redone for m in metrics
    )
    assert value(s, "eos_sink_epoch_log_appends_total", **key) == sum(
        m.epoch_log_appends for m in metrics
    )
    hist = "eos_sink_epoch_duration_seconds"
    assert value(s, f"{hist}_count", **key) == 3
    assert value(s, f"{hist}_sum", **key) == pytest.approx(
        sum(m.epoch_ms for m in metrics) / 1000.0
    )
    phase = "eos_sink_phase_duration_seconds"
    assert value(s, f"{phase}_sum", **key, phase="commit") == pytest.approx(
        sum(m.commit_ms for m in metrics) / 1000.0
    )
    assert values(read_committed(kafka_bootstrap, topic)) == expected(3 * PER_FILE)


@pytest.mark.usefixtures("rc_spark")  # the kafka-rc source: PySpark 4.2+
def test_a_short_job_pushes_each_epoch_and_the_listener_joins_progress_metrics_and_lag(
    spark, kafka_bootstrap, new_topic, tmp_path, closing
):
    from confluent_kafka import Producer

    source_topic, topic, sink_id = new_topic("ks-prom-in", 1), new_topic("ks-prom-out", 2), sid()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(90):
        producer.produce(source_topic, f"v{i}".encode(), f"k{i}".encode())
    producer.flush(30)
    sink = closing(KafkaSink(kafka_bootstrap, topic, sink_id, parallelism=2))
    listener = MetricsListener(sink, extra={"static": lambda: {"answer": 42}})
    spark.streams.addListener(listener)
    collector = PrometheusCollector(sink, listener=listener)
    with recording_gateway() as gateway:
        pusher = PushGatewayExporter(
            collector, gateway.url, job="backfill", grouping_key={"sink_id": sink_id}
        ).start()
        try:
            query = rc_query(spark, kafka_bootstrap, source_topic, sink, str(tmp_path / "ck"), 30)
            assert query.awaitTermination(QUERY_TIMEOUT_S), "the query never drained its topic"
            assert query.exception() is None
            # The final push must carry the last batch's view: wait for that event (listener
            # events arrive asynchronously, after the batch), failing clearly if it never does.
            deadline = time.monotonic() + LISTENER_TIMEOUT_S
            while 2 not in {v.batch_id for v in listener.views()}:
                assert time.monotonic() < deadline, f"views so far: {listener.views()}"
                time.sleep(0.2)
            during = gateway.wait_for(1)  # at least one epoch's push came before the stop
        finally:
            spark.streams.removeListener(listener)
            pusher.stop()  # the final push: the listener's last view is in it
            collector.close()
        pushes = list(gateway.pushes)
    assert during and all(p.path == f"/metrics/job/backfill/sink_id/{sink_id}" for p in pushes)
    key = {"sink_id": sink_id, "query_id": str(query.id)}
    counts = [
        value(parse(p.body), "eos_sink_epochs_total", 0.0, **key, outcome="committed")
        for p in pushes
    ]
    assert counts == sorted(counts) and counts[0] >= 1, counts  # pushed after epochs, in order
    final = parse(pushes[-1].body)
    assert value(final, "eos_sink_epochs_total", **key, outcome="committed") == 3
    assert value(final, "eos_sink_rows_written_total", **key) == 90
    # The listener joins each batch's progress with the sink's metrics and the source's lag.
    views = [v for v in listener.views() if v.query_id == str(query.id)]
    assert [v.batch_id for v in views] == [0, 1, 2]
    for view in views:
        assert view.input_rows == 30
        metrics = view.sinks[sink.connector.sink_id]
        assert metrics.batch_id == view.batch_id and metrics.rows == 30
        assert view.extra == {"static": {"answer": 42}}
        assert json.loads(view.to_json())["batch_id"] == view.batch_id
    lags = [next(iter(v.source_lag.values())) for v in views]
    assert lags == [60, 30, 0], lags
    # the kafka-rc source is named by its topics, not by a Java object's Class@hash
    ((source, lags_by_topic),) = views[-1].topic_lag.items()
    assert {name for v in views for name in v.source_lag} == {source} and "@" not in source
    assert lags_by_topic == {source_topic: 0}
    assert source.endswith(f"[{source_topic}]")
    lag = {"query_id": str(query.id), "source": source, "topic": source_topic}
    assert value(final, "eos_source_lag_records", **lag) == 0
    # an earlier push, made when the listener had seen batch 0 only, showed the lag then
    seen = {
        value(parse(p.body), "eos_source_lag_records", -1.0, **lag) for p in pushes
    }  # fmt: skip
    assert seen <= {-1.0, 60.0, 30.0, 0.0}, seen

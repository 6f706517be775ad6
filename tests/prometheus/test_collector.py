"""Unit tests of ``connectors.prometheus._collector``: what a scrape of the collector's
registry shows for given epochs, progress views and async metrics (parsed back with
prometheus_client's own parser)."""

from __future__ import annotations

import logging
import re
from dataclasses import replace

import prometheus_client
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from connectors.async_io import AsyncMetrics
from connectors.async_io._metrics import MetricsRecorder
from connectors.prometheus import PrometheusCollector
from connectors.prometheus._totals import DURATION_BUCKETS_S
from connectors.stage import EpochMetrics
from connectors.stage._listener import ProgressView
from connectors.stage._metrics import MetricsBook

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(collector: PrometheusCollector) -> Samples:
    text = generate_latest(collector.registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def epoch(batch_id: int, **changes: object) -> EpochMetrics:
    base = EpochMetrics(
        sink_id="orders",
        batch_id=batch_id,
        epoch=batch_id + 10,
        query_id="q1",
        guarantee="exactly_once",
        mode="aligned",
        skipped=False,
        committed=True,
        rows=5,
        rows_written=5,
        member_rows={"orders": 5},
        bytes=100,
        write_tasks=2,
        partitions_committed=2,
        stage_runs=1,
        epoch_log_appends=2,
        pre_commit_ms=40.0,
        vote_ms=5.0,
        commit_ms=7.0,
        stage_ms=60.0,
        epoch_ms=80.0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


SINK = {"sink_id": "orders", "query_id": "q1"}


def test_epochs_are_counted_by_outcome_with_rows_and_the_last_commit() -> None:
    clock = iter([1000.0, 1001.0, 1002.0, 1003.0, 1004.0])
    collector = PrometheusCollector(clock=lambda: next(clock))
    collector.record(epoch(0))
    collector.record(epoch(1, rows=7, rows_written=7, member_rows={"orders": 7}))
    # a replayed batch whose epoch had committed: skipped, writes nothing
    collector.record(epoch(1, skipped=True, rows=0, rows_written=0, member_rows={}, stage_runs=0))
    collector.record(
        epoch(
            2,
            committed=False,
            rows=0,
            rows_written=0,
            member_rows={},
            aborted_attempts=2,
            task_retries=1,
            stage_runs=2,
            error="EpochAbortedError: boom",
        )
    )
    s = scrape(collector)
    assert value(s, "eos_sink_epochs_total", **SINK, outcome="committed") == 2
    assert value(s, "eos_sink_epochs_total", **SINK, outcome="skipped") == 1
    assert value(s, "eos_sink_epochs_total", **SINK, outcome="failed") == 1
    assert value(s, "eos_sink_rows_written_total", **SINK) == 12
    assert value(s, "eos_sink_member_rows_written_total", **SINK, member="orders") == 12
    assert value(s, "eos_sink_bytes_written_total", **SINK) == 400
    assert value(s, "eos_sink_aborted_attempts_total", **SINK) == 2
    assert value(s, "eos_sink_task_retries_total", **SINK) == 1
    assert value(s, "eos_sink_stage_runs_total", **SINK) == 4
    assert value(s, "eos_sink_partitions_total", **SINK, state="committed") == 8
    # the last commit: batch 1 (epoch 11), seen at the second clock reading
    assert value(s, "eos_sink_last_committed_epoch", **SINK) == 11
    assert value(s, "eos_sink_last_committed_batch_id", **SINK) == 1
    assert value(s, "eos_sink_last_commit_timestamp_seconds", **SINK) == 1001.0
    assert value(s, "eos_sink_last_epoch_failed", **SINK) == 1
    collector.record(epoch(2))  # the replay commits it
    s = scrape(collector)
    assert value(s, "eos_sink_last_epoch_failed", **SINK) == 0
    assert value(s, "eos_sink_last_committed_batch_id", **SINK) == 2


def test_durations_are_histograms_in_seconds_without_skipped_batches() -> None:
    collector = PrometheusCollector()
    collector.record(epoch(0, epoch_ms=80.0))
    collector.record(epoch(1, epoch_ms=3000.0, pre_commit_ms=2500.0))
    collector.record(epoch(1, skipped=True, epoch_ms=1.0, stage_runs=0))
    s = scrape(collector)
    name = "eos_sink_epoch_duration_seconds"
    assert value(s, f"{name}_count", **SINK) == 2
    assert value(s, f"{name}_sum", **SINK) == pytest.approx(3.08)
    assert value(s, f"{name}_bucket", **SINK, le="0.05") == 0
    assert value(s, f"{name}_bucket", **SINK, le="0.1") == 1
    assert value(s, f"{name}_bucket", **SINK, le="2.5") == 1
    assert value(s, f"{name}_bucket", **SINK, le="5.0") == 2
    assert value(s, f"{name}_bucket", **SINK, le="+Inf") == 2
    buckets = [k for k in s if k[0] == f"{name}_bucket"]
    assert len(buckets) == len(DURATION_BUCKETS_S) + 1
    assert value(s, "eos_sink_last_epoch_duration_seconds", **SINK) == 3.0
    phase = "eos_sink_phase_duration_seconds"
    assert value(s, f"{phase}_count", **SINK, phase="pre_commit") == 2
    assert value(s, f"{phase}_sum", **SINK, phase="pre_commit") == pytest.approx(2.54)
    assert value(s, f"{phase}_sum", **SINK, phase="vote") == pytest.approx(0.01)
    assert value(s, f"{phase}_sum", **SINK, phase="commit") == pytest.approx(0.014)
    assert value(s, f"{phase}_sum", **SINK, phase="stage") == pytest.approx(0.12)


def test_a_composite_shows_each_members_rows_and_queries_are_kept_apart() -> None:
    collector = PrometheusCollector()
    both = {"k": 5000, "p": 5000}
    collector.record(epoch(0, sink_id="both", rows=5000, rows_written=10000, member_rows=both))
    collector.record(epoch(0, sink_id="both", query_id="q2", rows_written=3, member_rows={"k": 3}))
    collector.record(epoch(0, sink_id="unbound", query_id=None))  # no query binding
    s = scrape(collector)
    q1, q2 = {"sink_id": "both", "query_id": "q1"}, {"sink_id": "both", "query_id": "q2"}
    assert value(s, "eos_sink_member_rows_written_total", **q1, member="k") == 5000
    assert value(s, "eos_sink_member_rows_written_total", **q1, member="p") == 5000
    assert value(s, "eos_sink_rows_written_total", **q1) == 10000
    assert value(s, "eos_sink_rows_written_total", **q2) == 3
    assert ("eos_sink_member_rows_written_total", frozenset({**q2, "member": "p"}.items())) not in s
    # no query id: an empty label value (Prometheus treats it as no label)
    unbound = {"sink_id": "unbound", "query_id": ""}
    assert value(s, "eos_sink_epochs_total", **unbound, outcome="committed") == 1


def test_watching_a_sink_counts_its_kept_epochs_and_close_stops_counting() -> None:
    book = MetricsBook()

    class Sink:  # what the collector uses of a TransactionalSink
        observe_metrics = staticmethod(book.observe)

    book.add(epoch(0))
    collector = PrometheusCollector(Sink())  # type: ignore[arg-type]
    book.add(epoch(1))
    seen: list[int] = []
    collector.on_epoch(lambda m: seen.append(m.batch_id))
    book.add(epoch(2))
    assert value(scrape(collector), "eos_sink_epochs_total", **SINK, outcome="committed") == 3
    assert seen == [2]
    collector.close()
    book.add(epoch(3))
    assert value(scrape(collector), "eos_sink_epochs_total", **SINK, outcome="committed") == 3


def view(query_id: str, batch_id: int, lag: dict[str, dict[str, int]]) -> ProgressView:
    return ProgressView(
        query_id=query_id,
        batch_id=batch_id,
        input_rows=0,
        durations_ms={},
        source_lag={k: sum(v.values()) for k, v in lag.items()},
        topic_lag=lag,
    )


def test_source_lag_per_topic_from_each_querys_latest_view() -> None:
    class Listener:  # what the collector uses of a MetricsListener
        def views(self) -> tuple[ProgressView, ...]:
            return (
                view("q1", 0, {"src[a,b]": {"a": 60, "b": 5}}),
                view("q2", 4, {"KafkaV2[Subscribe[c]]": {"c": 9}}),
                view("q1", 1, {"src[a,b]": {"a": 30, "b": 0}}),
            )

    s = scrape(PrometheusCollector(listener=Listener()))  # type: ignore[arg-type]
    lag = "eos_source_lag_records"
    assert value(s, lag, query_id="q1", source="src[a,b]", topic="a") == 30
    assert value(s, lag, query_id="q1", source="src[a,b]", topic="b") == 0
    assert value(s, lag, query_id="q2", source="KafkaV2[Subscribe[c]]", topic="c") == 9
    assert len([k for k in s if k[0] == lag]) == 3


def test_async_counters_and_latency_histogram(caplog: pytest.LogCaptureFixture) -> None:
    rec = MetricsRecorder()
    for latency_ms in (2.0, 2.0, 40.0, 700.0):
        rec.request_started()
        rec.request_finished(latency_ms)
    rec.rows_in, rec.rows_out, rec.retries, rec.timeouts, rec.dropped = 10, 9, 3, 1, 1
    current = rec.snapshot()

    def broken() -> AsyncMetrics:
        raise RuntimeError("accumulator gone")

    collector = PrometheusCollector(async_metrics={"enrich": lambda: current, "bad": broken})
    with caplog.at_level(logging.WARNING, logger="connectors.prometheus"):
        s = scrape(collector)
    op = {"operator": "enrich"}
    assert value(s, "eos_async_requests_total", **op) == 4
    assert value(s, "eos_async_rows_in_total", **op) == 10
    assert value(s, "eos_async_rows_out_total", **op) == 9
    assert value(s, "eos_async_retries_total", **op) == 3
    assert value(s, "eos_async_timeouts_total", **op) == 1
    assert value(s, "eos_async_dropped_rows_total", **op) == 1
    assert value(s, "eos_async_defaulted_rows_total", **op) == 0
    assert value(s, "eos_async_max_in_flight_requests", **op) == 1
    hist = "eos_async_request_duration_seconds"
    assert value(s, f"{hist}_count", **op) == 4
    assert value(s, f"{hist}_bucket", **op, le="0.001") == 0
    assert value(s, f"{hist}_bucket", **op, le="0.005") == 2
    assert value(s, f"{hist}_bucket", **op, le="0.05") == 3
    assert value(s, f"{hist}_bucket", **op, le="0.5") == 3
    assert value(s, f"{hist}_bucket", **op, le="1.0") == 4
    assert value(s, f"{hist}_bucket", **op, le="+Inf") == 4
    exact = (2.0 + 2.0 + 40.0 + 700.0) / 1000.0
    assert exact <= value(s, f"{hist}_sum", **op) <= exact * 1.02
    assert not any(dict(labels).get("operator") == "bad" for _, labels in s)
    assert "async metrics provider 'bad' failed" in caplog.text


def test_names_and_labels_follow_the_conventions_and_stay_out_of_the_default_registry() -> None:
    collector = PrometheusCollector(async_metrics={"enrich": AsyncMetrics})
    collector.record(epoch(0))
    text = generate_latest(collector.registry).decode()
    allowed = {
        "sink_id", "query_id", "outcome", "state", "member", "phase", "le", "operator",
    }  # fmt: skip
    for family in text_string_to_metric_families(text):
        assert re.fullmatch(r"eos_[a-z0-9_]+", family.name), family.name
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), family.name
        if family.type == "histogram":
            assert family.name.endswith("_seconds"), family.name
        for sample in family.samples:
            assert set(sample.labels) <= allowed, (family.name, sample.labels)
    default = generate_latest(prometheus_client.REGISTRY).decode()
    assert "eos_" not in default
    # two collectors do not share series
    assert "eos_sink_" not in generate_latest(PrometheusCollector().registry).decode()

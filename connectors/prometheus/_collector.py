"""``PrometheusCollector``: the kit's metrics as Prometheus metric families, in its own registry.

Three inputs, each read through its public value object:

1. sinks (:class:`~connectors.stage.TransactionalSink`, composites included): every
   :class:`~connectors.stage.EpochMetrics` through ``sink.observe_metrics``, added up per
   ``(sink_id, query_id)`` (``_totals``);
2. a :class:`~connectors.stage.MetricsListener`: each query's latest
   :class:`~connectors.stage._listener.ProgressView`, for the sources' lag per topic (read at scrape);
3. async I/O operators: ``name -> callable`` returning an
   :class:`~connectors.async_io.AsyncMetrics` (e.g. ``lambda: acc.value``; read at scrape).

The metric names and labels are listed in docs/operations.md, "Prometheus metrics". Labels
are the sink id, the query id, member sink ids, source names and topics, operator names:
never a batch id or anything of the client settings.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from connectors.async_io import AsyncMetrics
from connectors.prometheus._totals import OUTCOMES, PARTITION_STATES, PHASES, SinkTotals
from connectors.stage import EpochMetrics

if TYPE_CHECKING:
    from connectors.stage import MetricsListener, TransactionalSink

log = logging.getLogger("connectors.prometheus")

SINK_LABELS = ("sink_id", "query_id")
LAG_LABELS = ("query_id", "source", "topic")
ASYNC_LABELS = ("operator",)
# Upper bounds (seconds) of eos_async_request_duration_seconds: a cache hit to a slow call.
ASYNC_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# AsyncMetrics counters: (field, metric name without _total, help).
_ASYNC_COUNTERS = (
    ("rows_in", "eos_async_rows_in", "Input rows the async I/O operator read."),
    ("rows_out", "eos_async_rows_out", "Rows the async I/O operator emitted."),
    ("requests", "eos_async_requests", "Requests the async I/O operator started."),
    ("retries", "eos_async_retries", "Calls of the function beyond a request's first attempt."),
    ("timeouts", "eos_async_timeouts", "Requests that hit the timeout."),
    ("dropped", "eos_async_dropped_rows", "Rows left out after a timeout (on_timeout=DROP)."),
    ("defaulted", "eos_async_defaulted_rows", "Rows emitted with the timeout default."),
)
# SinkTotals counters: (attribute, metric name without _total, help).
_SINK_COUNTERS = (
    ("rows_written", "eos_sink_rows_written", "Rows the sink's epochs wrote (every member)."),
    ("bytes_written", "eos_sink_bytes_written", "Bytes the sink's write tasks wrote."),
    ("epochs_redone", "eos_sink_epochs_redone", "Epochs with partitions written again."),
    ("stage_runs", "eos_sink_stage_runs", "Runs of the write stage (re-runs included)."),
    ("task_retries", "eos_sink_task_retries", "Write task attempts beyond the first."),
    ("aborted_attempts", "eos_sink_aborted_attempts", "Failed stage runs and task attempts."),
    ("epoch_log_appends", "eos_sink_epoch_log_appends", "Records appended to the epoch log."),
    (
        "dead_lettered",
        "eos_sink_dead_lettered_records",
        "Bad records sent to the dead-letter destination.",
    ),
    ("skipped_records", "eos_sink_skipped_records", "Bad records left out (on_bad_record='skip')."),
)


class PrometheusCollector:
    """The kit's metrics for ``prometheus_client``, registered in its own ``registry``.

    Serve it with :class:`~connectors.prometheus.MetricsServer` or push it with
    :class:`~connectors.prometheus.PushGatewayExporter`, or register it elsewhere:
    ``collector.registry`` is a fresh ``CollectorRegistry`` (the process-wide default
    registry is left alone). :meth:`close` stops observing the sinks. Thread-safe.
    """

    def __init__(
        self,
        *sinks: TransactionalSink,
        listener: MetricsListener | None = None,
        async_metrics: Mapping[str, Callable[[], AsyncMetrics]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, str], SinkTotals] = {}
        self._removers: list[Callable[[], None]] = []
        self._epoch_callbacks: list[Callable[[EpochMetrics], None]] = []
        self._listener = listener
        self._async = dict(async_metrics or {})
        self._clock = clock
        for sink in sinks:
            self.watch(sink)
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def watch(self, sink: TransactionalSink) -> None:
        """Count ``sink``'s epochs: the ones it keeps now (``sink.metrics()``), then each new one."""
        remove = sink.observe_metrics(self.record)
        with self._lock:
            self._removers.append(remove)

    def record(self, metrics: EpochMetrics) -> None:
        """Add one epoch's metrics (what a watched sink calls), then tell the epoch callbacks."""
        key = (metrics.sink_id, metrics.query_id or "")
        with self._lock:
            totals = self._totals.setdefault(key, SinkTotals(sink_id=key[0], query_id=key[1]))
            totals.add(metrics, self._clock())
            callbacks = tuple(self._epoch_callbacks)
        for callback in callbacks:
            callback(metrics)

    def on_epoch(self, callback: Callable[[EpochMetrics], None]) -> Callable[[], None]:
        """Call ``callback`` after each recorded epoch; returns the function that removes it."""
        with self._lock:
            self._epoch_callbacks.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._epoch_callbacks:
                    self._epoch_callbacks.remove(callback)

        return remove

    def close(self) -> None:
        """Stop observing the sinks (the counted values stay)."""
        with self._lock:
            removers, self._removers = self._removers, []
        for remove in removers:
            remove()

    def collect(self) -> Iterator[Metric]:
        """Yield the metric families that have samples (the registry's scrape or push)."""
        with self._lock:
            families = list(_sink_families(list(self._totals.values())))
        if self._listener is not None:
            families.append(_lag_family(self._listener))
        families.extend(_async_families(self._async))
        return (family for family in families if family.samples)


def _sink_families(totals: list[SinkTotals]) -> Iterator[Metric]:
    epochs = CounterMetricFamily(
        "eos_sink_epochs",
        "foreachBatch calls of the sink by outcome: committed, skipped (a replayed batch "
        "whose epoch had committed), failed.",
        labels=(*SINK_LABELS, "outcome"),
    )
    partitions = CounterMetricFamily(
        "eos_sink_partitions",
        "Write partitions of the sink's epochs by state: committed, skipped (found "
        "committed), redone (written again), lost (at-most-once).",
        labels=(*SINK_LABELS, "state"),
    )
    members = CounterMetricFamily(
        "eos_sink_member_rows_written",
        "Rows each member sink wrote (one member for a single sink).",
        labels=(*SINK_LABELS, "member"),
    )
    counters = {
        attr: CounterMetricFamily(name, text, labels=SINK_LABELS)
        for attr, name, text in _SINK_COUNTERS
    }
    gauges = _sink_gauges()
    epoch_hist = HistogramMetricFamily(
        "eos_sink_epoch_duration_seconds",
        "Duration of the sink's epochs (foreachBatch calls that did not skip).",
        labels=SINK_LABELS,
        unit="seconds",
    )
    phase_hist = HistogramMetricFamily(
        "eos_sink_phase_duration_seconds",
        "Per-epoch duration of each phase: the slowest task's pre_commit, vote and commit, "
        "and the write stage's runs together (stage).",
        labels=(*SINK_LABELS, "phase"),
        unit="seconds",
    )
    for t in totals:
        key = [t.sink_id, t.query_id]
        for outcome in OUTCOMES:
            epochs.add_metric([*key, outcome], t.epochs[outcome])
        for state in PARTITION_STATES:
            partitions.add_metric([*key, state], t.partitions[state])
        for member, rows in sorted(t.member_rows.items()):
            members.add_metric([*key, member], rows)
        for attr, family in counters.items():
            family.add_metric(key, getattr(t, attr))
        for attr, gauge in gauges.items():
            value = getattr(t, attr)
            if value is not None:
                gauge.add_metric(key, float(value))
        epoch_hist.add_metric(key, t.epoch_s.cumulative(), t.epoch_s.total)
        for phase in PHASES:
            hist = t.phase_s[phase]
            phase_hist.add_metric([*key, phase], hist.cumulative(), hist.total)
    yield from (epochs, partitions, members, *counters.values(), *gauges.values())
    yield from (epoch_hist, phase_hist)


def _sink_gauges() -> dict[str, GaugeMetricFamily]:
    specs = (
        ("last_committed_epoch", "eos_sink_last_committed_epoch", "The last committed epoch."),
        (
            "last_committed_batch_id",
            "eos_sink_last_committed_batch_id",
            "The batch id of the last committed epoch.",
        ),
        (
            "last_commit_time_s",
            "eos_sink_last_commit_timestamp_seconds",
            "Unix time of the last committed epoch.",
        ),
        (
            "last_epoch_failed",
            "eos_sink_last_epoch_failed",
            "1 when the last foreachBatch call failed (its epoch may be in doubt until the "
            "next start completes it), else 0.",
        ),
        (
            "last_epoch_s",
            "eos_sink_last_epoch_duration_seconds",
            "Duration of the last epoch that did not skip.",
        ),
        ("write_tasks", "eos_sink_write_tasks", "Write tasks of the last epoch that ran a stage."),
    )
    return {attr: GaugeMetricFamily(name, text, labels=SINK_LABELS) for attr, name, text in specs}


def _lag_family(listener: MetricsListener) -> Metric:
    family = GaugeMetricFamily(
        "eos_source_lag_records",
        "Records available beyond the query's last batch, per source and topic (the latest "
        "offsets minus the batch's end offsets, from Spark's progress).",
        labels=LAG_LABELS,
    )
    latest = {view.query_id: view for view in listener.views()}  # oldest first: last wins
    for query_id, view in sorted(latest.items()):
        for source, topics in sorted(view.topic_lag.items()):
            for topic, lag in sorted(topics.items()):
                family.add_metric([query_id, source, topic], lag)
    return family


def _async_families(providers: Mapping[str, Callable[[], AsyncMetrics]]) -> Iterator[Metric]:
    counters = [
        (attr, CounterMetricFamily(name, text, labels=ASYNC_LABELS))
        for attr, name, text in _ASYNC_COUNTERS
    ]
    in_flight = GaugeMetricFamily(
        "eos_async_max_in_flight_requests",
        "High-water mark of requests in flight at once in one partition.",
        labels=ASYNC_LABELS,
    )
    latency = HistogramMetricFamily(
        "eos_async_request_duration_seconds",
        "Request durations, retries included (re-bucketed from the operator's histogram: a "
        "sample counts in the bucket of its 2%-wide bucket's upper edge; the sum is of those "
        "edges, at most 2% high).",
        labels=ASYNC_LABELS,
        unit="seconds",
    )
    for name, provider in sorted(providers.items()):
        try:
            value = provider()
        except Exception:  # a provider's failure must not fail the scrape
            log.warning("async metrics provider %r failed", name, exc_info=True)
            continue
        for attr, family in counters:
            family.add_metric([name], getattr(value, attr))
        in_flight.add_metric([name], value.max_in_flight)
        buckets, total = _rebucket(value)
        latency.add_metric([name], buckets, total)
    yield from (family for _, family in counters)
    yield from (in_flight, latency)


def _rebucket(value: AsyncMetrics) -> tuple[list[tuple[str, float]], float]:
    edges = [(ms / 1000.0, n) for ms, n in value.latency.upper_edges()]
    buckets = [
        (str(bound), float(sum(n for s, n in edges if s <= bound))) for bound in ASYNC_BUCKETS_S
    ]
    buckets.append(("+Inf", float(sum(n for _, n in edges))))
    return buckets, sum(s * n for s, n in edges)

"""Result queues and the mergeable latency histogram."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.async_io import AsyncMetrics
from connectors.async_io._metrics import LatencyHistogram, MetricsRecorder
from connectors.async_io._queues import OrderedResultQueue, UnorderedResultQueue


class Item:
    def __init__(self, n: int) -> None:
        self.n = n


@given(st.permutations(list(range(12))), st.randoms(use_true_random=False))
def test_ordered_queue_releases_in_put_order_only_after_the_prefix_is_done(
    completion: list[int], rnd: random.Random
) -> None:
    q: OrderedResultQueue[Item] = OrderedResultQueue()
    items = [Item(i) for i in range(12)]
    for it in items:
        q.put(it)
    done: set[int] = set()
    left: list[int] = []
    for n in completion:
        q.complete(items[n])
        done.add(n)
        if rnd.random() < 0.5:
            ready = [it.n for it in q.pop_ready()]
            left.extend(ready)
            # what left is exactly the done prefix of what had not left yet
            prefix = 0
            while prefix < 12 and prefix in done:
                prefix += 1
            assert left == list(range(prefix))
        assert len(q) == 12 - len(left)
    left.extend(it.n for it in q.pop_ready())
    assert left == list(range(12))
    assert len(q) == 0


@given(st.permutations(list(range(12))))
def test_unordered_queue_releases_in_completion_order(completion: list[int]) -> None:
    q: UnorderedResultQueue[Item] = UnorderedResultQueue()
    items = [Item(i) for i in range(12)]
    for it in items:
        q.put(it)
    left: list[int] = []
    for k, n in enumerate(completion):
        q.complete(items[n])
        if k % 3 == 0:
            left.extend(it.n for it in q.pop_ready())
    left.extend(it.n for it in q.pop_ready())
    assert left == completion
    assert len(q) == 0


def exact_percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[math.ceil(q / 100 * len(ordered)) - 1]


@settings(max_examples=50)
@given(st.lists(st.floats(min_value=0.01, max_value=60_000.0), min_size=1, max_size=300))
def test_histogram_percentiles_within_two_percent(samples: list[float]) -> None:
    rec = MetricsRecorder()
    for s in samples:
        rec.request_started()
        rec.request_finished(s)
    hist = rec.snapshot().latency
    assert hist.count == len(samples)
    for q in (50, 95, 99, 100):
        got = hist.percentile(q)
        assert got is not None
        want = exact_percentile(samples, q)
        assert abs(got - want) <= 0.0201 * want + 1e-9, (q, got, want)


@given(
    st.lists(st.floats(min_value=0.01, max_value=1000.0), min_size=1, max_size=100),
    st.lists(st.floats(min_value=0.01, max_value=1000.0), min_size=1, max_size=100),
)
def test_merge_equals_recording_everything_in_one(a: list[float], b: list[float]) -> None:
    def record(samples: list[float], peak: int) -> AsyncMetrics:
        rec = MetricsRecorder()
        for _ in range(peak):
            rec.request_started()
        for s in samples:
            rec.request_finished(s)
        return rec.snapshot()

    merged = record(a, 3).merge(record(b, 5))
    whole = record(a + b, 1)
    assert merged.latency == whole.latency
    assert merged.max_in_flight == 5


def test_empty_histogram_and_bad_percentile() -> None:
    assert LatencyHistogram().percentile(50) is None
    assert AsyncMetrics().p99_ms is None
    with pytest.raises(ValueError, match="percentile"):
        LatencyHistogram().percentile(0)


def _recorded(latencies: list[float]) -> AsyncMetrics:
    rec = MetricsRecorder()
    for ms in latencies:
        rec.request_started()
        rec.request_finished(ms)
    rec.rows_in, rec.rows_out, rec.retries, rec.timeouts = 9, 8, 2, 1
    rec.dropped, rec.defaulted = 1, 0
    return rec.snapshot()


@pytest.mark.parametrize("latencies", [[], [0.5], [0.0005, 3.0, 250.0, 250.0]])
def test_metrics_json_round_trip(latencies: list[float]) -> None:
    metrics = _recorded(latencies)
    assert AsyncMetrics.from_json(metrics.to_json()) == metrics
    assert AsyncMetrics.from_json(AsyncMetrics().to_json()) == AsyncMetrics()


def test_metrics_row_fills_every_column_with_a_zero() -> None:
    import pyarrow as pa

    from connectors.async_io._observe import METRICS_COLUMN, metrics_row

    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("name", pa.string(), nullable=False),
            pa.field("amount", pa.decimal128(10, 2), nullable=False),
            pa.field("at", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("day", pa.date32(), nullable=False),
            pa.field("tags", pa.list_(pa.string()), nullable=False),
            pa.field("attrs", pa.map_(pa.string(), pa.int32()), nullable=False),
            pa.field(
                "inner",
                pa.struct([pa.field("x", pa.float64(), nullable=False), ("b", pa.binary())]),
                nullable=False,
            ),
            pa.field("flag", pa.bool_()),
            pa.field(METRICS_COLUMN, pa.string()),
        ]
    )
    metrics = _recorded([1.0, 2.0])
    row = metrics_row(schema, metrics)
    assert row.schema == schema and row.num_rows == 1
    assert row.column(METRICS_COLUMN).null_count == 0
    assert AsyncMetrics.from_json(row.column(METRICS_COLUMN)[0].as_py()) == metrics
    assert all(row.column(i).null_count == 0 for i in range(len(schema)))

"""The pure helpers of the latency benchmark: percentiles, the summary, CDF points."""

from __future__ import annotations

import math
import pickle

import pytest

from benchmarks import _latency
from benchmarks._latency_load import LoadResult


def test_percentile_is_the_nearest_rank_and_a_measured_value():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert _latency.percentile(values, 50) == 3.0
    assert _latency.percentile(values, 100) == 5.0
    assert _latency.percentile(values, 1) == 1.0
    assert _latency.percentile(values, 99) == 5.0
    hundred = [float(i) for i in range(1, 101)]
    assert _latency.percentile(hundred, 99) == 99.0
    assert _latency.percentile(hundred, 50) == 50.0


def test_percentile_of_one_value_and_of_none():
    assert _latency.percentile([7.0], 50) == 7.0
    assert _latency.percentile([7.0], 99) == 7.0
    assert math.isnan(_latency.percentile([], 50))


@pytest.mark.parametrize("q", [0, -1, 100.5])
def test_percentile_rejects_q_outside_0_100(q: float):
    with pytest.raises(ValueError, match="percentile q"):
        _latency.percentile([1.0], q)


def test_summary_counts_records_not_seen():
    s = _latency.summarize([10.0, 20.0, 30.0], produced=4)
    assert (s.records, s.seen, s.missing) == (4, 3, 1)
    assert (s.p50_ms, s.p99_ms, s.max_ms) == (20.0, 30.0, 30.0)


def test_cdf_points_are_bounded_and_end_at_one():
    xs, ys = _latency.cdf_points([float(i) for i in range(1000, 0, -1)], points=10)
    assert len(xs) <= 11
    assert xs == sorted(xs) and ys == sorted(ys)
    assert (xs[0], xs[-1], ys[-1]) == (1.0, 1000.0, 1.0)
    assert _latency.cdf_points([]) == ([], [])
    assert _latency.cdf_points([3.0]) == ([3.0], [1.0])


def test_median_or_nan_skips_nan():
    assert _latency.median_or_nan([1.0, math.nan, 3.0]) == 2.0
    assert math.isnan(_latency.median_or_nan([]))


def test_load_result_pickles():
    r = LoadResult(
        window=(1.0, 2.0),
        produced=2,
        latencies_ms=(3.0, 4.0),
        total_produced=5,
        first_output_s=0.5,
    )
    assert pickle.loads(pickle.dumps(r)) == r

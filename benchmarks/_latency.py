"""Pure helpers of ``benchmarks.bench_latency``: percentiles, a latency summary, CDF points.

A latency is the time from a record's ``produce()`` call to the moment a read_committed
consumer of the sink's output topic returned it, in milliseconds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (``0 < q <= 100``) of ``values``; NaN when empty.

    Nearest rank: the smallest value with at least ``q`` percent of the values at or below
    it, so p100 is the maximum and every percentile is a measured value.
    """
    if not 0 < q <= 100:
        msg = f"percentile q must be in (0, 100], got {q}"
        raise ValueError(msg)
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = math.ceil(q / 100.0 * len(ordered))
    return ordered[max(rank, 1) - 1]


@dataclass(frozen=True, kw_only=True)
class LatencySummary:
    """One run's latencies: how many records were measured and seen, and their percentiles."""

    records: int  # produced in the measured window
    seen: int  # of them, read from the output before the drain timeout
    p50_ms: float
    p99_ms: float
    max_ms: float

    @property
    def missing(self) -> int:
        """Measured records not seen in the output in time (0 in a healthy run)."""
        return self.records - self.seen


def summarize(latencies_ms: Sequence[float], produced: int) -> LatencySummary:
    """Summarize the latencies of the ``produced`` records of the measured window."""
    return LatencySummary(
        records=produced,
        seen=len(latencies_ms),
        p50_ms=percentile(latencies_ms, 50),
        p99_ms=percentile(latencies_ms, 99),
        max_ms=percentile(latencies_ms, 100),
    )


def cdf_points(values: Sequence[float], points: int = 200) -> tuple[list[float], list[float]]:
    """At most ``points`` (value, fraction at or below it) pairs of the empirical CDF.

    Evenly spaced ranks, always including the first and last value (a plot of 1M latencies
    needs no 1M points).
    """
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return [], []
    step = max(1, n // points)
    ranks = sorted({*range(0, n, step), n - 1})
    return [ordered[i] for i in ranks], [(i + 1) / n for i in ranks]


def median_or_nan(values: Iterable[float]) -> float:
    """Median of ``values``; NaN when there are none (a table cell, not a failure)."""
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else math.nan

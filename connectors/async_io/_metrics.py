"""Counters and a mergeable latency histogram for the async I/O operator.

Latencies go into log-spaced buckets (each bucket 2% wider than the previous), so
histograms from many partitions merge by adding counts and a percentile read from the
merged histogram is within 2% of the exact value (clamped to the observed min/max).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

# Growth factor between consecutive latency buckets: bounds the relative percentile error.
_BUCKET_RATIO = 1.02
# Milliseconds: lower edge of bucket 0; anything faster is counted in bucket 0.
_MIN_LATENCY_MS = 0.001
_LOG_RATIO = math.log(_BUCKET_RATIO)


def _bucket_of(latency_ms: float) -> int:
    if latency_ms <= _MIN_LATENCY_MS:
        return 0
    return int(math.log(latency_ms / _MIN_LATENCY_MS) / _LOG_RATIO)


def _bucket_upper_ms(bucket: int) -> float:
    return float(_MIN_LATENCY_MS * _BUCKET_RATIO ** (bucket + 1))


@dataclass(frozen=True, kw_only=True)
class LatencyHistogram:
    """Immutable latency histogram in milliseconds; ``merge`` adds two of them."""

    buckets: tuple[tuple[int, int], ...] = ()
    count: int = 0
    min_ms: float = math.inf
    max_ms: float = 0.0

    @staticmethod
    def from_counts(counts: Mapping[int, int], min_ms: float, max_ms: float) -> LatencyHistogram:
        """Build a histogram from ``{bucket: count}``."""
        items = tuple(sorted((b, c) for b, c in counts.items() if c > 0))
        return LatencyHistogram(
            buckets=items, count=sum(c for _, c in items), min_ms=min_ms, max_ms=max_ms
        )

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        """Return the histogram of both sample sets."""
        counts = dict(self.buckets)
        for bucket, n in other.buckets:
            counts[bucket] = counts.get(bucket, 0) + n
        return LatencyHistogram.from_counts(
            counts, min(self.min_ms, other.min_ms), max(self.max_ms, other.max_ms)
        )

    def upper_edges(self) -> tuple[tuple[float, int], ...]:
        """``(upper edge in ms, count)`` of each non-empty bucket, in order.

        A sample lies at most 2% below its bucket's upper edge (the Prometheus exporter
        re-buckets from these).
        """
        return tuple((_bucket_upper_ms(bucket), n) for bucket, n in self.buckets)

    def percentile(self, q: float) -> float | None:
        """Return the ``q``-th percentile (0 < q <= 100) in ms; None without samples."""
        if not 0 < q <= 100:
            msg = f"percentile q must be in (0, 100], got {q!r}"
            raise ValueError(msg)
        if self.count == 0:
            return None
        rank = math.ceil(q / 100 * self.count)
        seen = 0
        for bucket, n in self.buckets:
            seen += n
            if seen >= rank:
                return min(max(_bucket_upper_ms(bucket), self.min_ms), self.max_ms)
        return self.max_ms


@dataclass(frozen=True, kw_only=True)
class AsyncMetrics:
    """What the operator did; counters add up when metrics of partitions are merged.

    Attributes:
        rows_in: input rows read.
        rows_out: rows emitted (rows_in minus dropped).
        requests: requests started (one per row, or one per chunk in batch mode).
        retries: calls of the user function beyond the first attempt of a request.
        timeouts: requests that hit the timeout (whatever on_timeout did with them).
        dropped: rows left out because their request timed out with on_timeout=DROP.
        defaulted: rows emitted with the timeout default.
        max_in_flight: high-water mark of requests in flight at once in one partition
            (merging takes the max, not the sum).
        latency: histogram of request durations (start to finish, retries included).

    """

    rows_in: int = 0
    rows_out: int = 0
    requests: int = 0
    retries: int = 0
    timeouts: int = 0
    dropped: int = 0
    defaulted: int = 0
    max_in_flight: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)

    @property
    def p50_ms(self) -> float | None:
        """Median request latency in ms (None before any request finished)."""
        return self.latency.percentile(50)

    @property
    def p95_ms(self) -> float | None:
        """95th percentile request latency in ms."""
        return self.latency.percentile(95)

    @property
    def p99_ms(self) -> float | None:
        """99th percentile request latency in ms."""
        return self.latency.percentile(99)

    def to_json(self) -> str:
        """Encode as compact JSON (:meth:`from_json` reads it back exactly)."""
        latency = self.latency
        doc = {
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "requests": self.requests,
            "retries": self.retries,
            "timeouts": self.timeouts,
            "dropped": self.dropped,
            "defaulted": self.defaulted,
            "max_in_flight": self.max_in_flight,
            "buckets": [list(b) for b in latency.buckets],
            "min_ms": None if latency.count == 0 else latency.min_ms,  # JSON has no inf
            "max_ms": latency.max_ms,
        }
        return json.dumps(doc, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> AsyncMetrics:
        """Decode :meth:`to_json`'s output."""
        doc = json.loads(text)
        min_ms = doc["min_ms"]
        latency = LatencyHistogram.from_counts(
            {int(b): int(c) for b, c in doc["buckets"]},
            math.inf if min_ms is None else float(min_ms),
            float(doc["max_ms"]),
        )
        counters = {k: int(doc[k]) for k in _COUNTERS}
        return AsyncMetrics(**counters, latency=latency)

    def merge(self, other: AsyncMetrics) -> AsyncMetrics:
        """Combine the metrics of two partitions (or two runs)."""
        return AsyncMetrics(
            rows_in=self.rows_in + other.rows_in,
            rows_out=self.rows_out + other.rows_out,
            requests=self.requests + other.requests,
            retries=self.retries + other.retries,
            timeouts=self.timeouts + other.timeouts,
            dropped=self.dropped + other.dropped,
            defaulted=self.defaulted + other.defaulted,
            max_in_flight=max(self.max_in_flight, other.max_in_flight),
            latency=self.latency.merge(other.latency),
        )


_COUNTERS = (
    "rows_in",
    "rows_out",
    "requests",
    "retries",
    "timeouts",
    "dropped",
    "defaulted",
    "max_in_flight",
)


class MetricsRecorder:
    """Mutable counters of one operator run; ``snapshot`` freezes them into AsyncMetrics."""

    def __init__(self) -> None:
        self.rows_in = 0
        self.rows_out = 0
        self.requests = 0
        self.retries = 0
        self.timeouts = 0
        self.dropped = 0
        self.defaulted = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._counts: dict[int, int] = {}
        self._min_ms = math.inf
        self._max_ms = 0.0

    def request_started(self) -> None:
        """Count a new request and update the in-flight high-water mark."""
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def request_finished(self, latency_ms: float | None) -> None:
        """Record the end of a request; ``None`` latency for a cancelled one (not sampled)."""
        self.in_flight -= 1
        if latency_ms is None:
            return
        bucket = _bucket_of(latency_ms)
        self._counts[bucket] = self._counts.get(bucket, 0) + 1
        self._min_ms = min(self._min_ms, latency_ms)
        self._max_ms = max(self._max_ms, latency_ms)

    def snapshot(self) -> AsyncMetrics:
        """Freeze the current counters."""
        return AsyncMetrics(
            rows_in=self.rows_in,
            rows_out=self.rows_out,
            requests=self.requests,
            retries=self.retries,
            timeouts=self.timeouts,
            dropped=self.dropped,
            defaulted=self.defaulted,
            max_in_flight=self.max_in_flight,
            latency=LatencyHistogram.from_counts(self._counts, self._min_ms, self._max_ms),
        )

"""The load of ``benchmarks.bench_latency``: a steady producer and a read_committed reader.

Runs in a process of its own (so neither competes with the Spark driver's Python for the
GIL): a producer sends ``rate`` records/s into the input topic, each value the
``time.time()`` of its ``produce()`` call; a read_committed consumer of the output topic
notes when each record becomes visible. Records produced before the output showed its first
record plus ``warmup_s`` are start-up and left out; the next ``seconds`` of produce time are
measured; then production stops and the reader waits up to ``drain_s`` for the rest.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, Producer

# Producer batching: a short linger, so produce time is close to the broker's arrival time.
PRODUCER_LINGER_MS = 5
# The reader's fetch wait: short, so a record is returned soon after it becomes visible.
READER_FETCH_WAIT_MS = 10
# Seconds per reader poll: short, so the producer loop (same thread) keeps its rate.
READER_POLL_S = 0.002
# Seconds the load waits for the query's first output before giving up (start-up).
FIRST_OUTPUT_TIMEOUT_S = 180.0


@dataclass(frozen=True, kw_only=True)
class LoadResult:
    """What the load measured (returned to the benchmark process, picklable)."""

    window: tuple[float, float]  # produce-time window measured (time.time())
    produced: int  # records produced in the window
    latencies_ms: tuple[float, ...]  # of the window's records seen, in order of arrival
    total_produced: int
    first_output_s: float  # from the first produce to the first visible output record


def run_load(
    bootstrap: str,
    in_topic: str,
    out_topic: str,
    *,
    rate: int,
    warmup_s: float,
    seconds: float,
    drain_s: float,
) -> LoadResult:
    """Produce at ``rate`` records/s and read the output; see the module docstring."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": PRODUCER_LINGER_MS,
            "client.id": "latency-load",
        }
    )
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"latency-reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
            "fetch.wait.max.ms": READER_FETCH_WAIT_MS,
        }
    )
    reader.subscribe([out_topic])
    seen: list[tuple[float, float]] = []  # (produce time, visible time)
    start = time.time()
    sent = in_window = measured_seen = 0
    first_output = window_start = window_end = None
    try:
        while True:
            now = time.time()
            if first_output is None and now - start > FIRST_OUTPUT_TIMEOUT_S:
                msg = f"no output in {FIRST_OUTPUT_TIMEOUT_S:.0f} s: is the query running?"
                raise RuntimeError(msg)
            if window_start is None and first_output is not None:
                window_start = first_output + warmup_s
                window_end = window_start + seconds
            if window_end is None or now < window_end:
                due = int((now - start) * rate)
                while sent < due:
                    stamp = time.time()
                    try:
                        producer.produce(in_topic, value=b"%.6f" % stamp)
                    except BufferError:
                        producer.poll(0.01)
                        continue
                    sent += 1
                    in_window += _inside(stamp, window_start, window_end)
                producer.poll(0)
            elif window_start is not None:
                producer.flush(0)
                if measured_seen >= in_window or now > window_end + drain_s:
                    break
            for record in reader.consume(1000, READER_POLL_S):
                value = record.value()
                if record.error() is None and value is not None:
                    visible = time.time()
                    produced_at = float(value)
                    seen.append((produced_at, visible))
                    measured_seen += _inside(produced_at, window_start, window_end)
                    if first_output is None:
                        first_output = visible
    finally:
        producer.flush(10.0)
        reader.close()
    assert window_start is not None and window_end is not None and first_output is not None
    measured = _measured(seen, window_start, window_end)
    return LoadResult(
        window=(window_start, window_end),
        produced=in_window,
        latencies_ms=tuple(1000.0 * (v - p) for p, v in measured),
        total_produced=sent,
        first_output_s=first_output - start,
    )


def _inside(t: float, lo: float | None, hi: float | None) -> bool:
    """Whether produce time ``t`` is in the measured window (False before it is known)."""
    return lo is not None and hi is not None and lo <= t < hi


def _measured(seen: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(p, v) for p, v in seen if _inside(p, lo, hi)]

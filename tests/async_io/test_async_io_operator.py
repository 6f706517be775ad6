"""AsyncOperator without Spark: ordering, capacity, fences, timeouts, retries, errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.async_io import (
    AsyncCode,
    AsyncConfig,
    AsyncFunction,
    AsyncIOError,
    AsyncOperator,
    OnTimeout,
    RetryPolicy,
)

SCHEMA = pa.schema([("y", pa.int64())])
# Seconds a "hanging" request sleeps; far beyond any timeout used here, and never
# actually waited for because the operator cancels it.
HANG_S = 600.0


def batches_of(sizes: list[int]) -> list[pa.RecordBatch]:
    out, start = [], 0
    for n in sizes:
        out.append(pa.record_batch({"x": pa.array(range(start, start + n), pa.int64())}))
        start += n
    return out


class Probe:
    """Async function that sleeps a per-row latency and records what it saw."""

    def __init__(self, latency_ms: dict[int, float] | None = None) -> None:
        self.latency_ms = latency_ms or {}
        self.in_flight = 0
        self.peak = 0
        self.completed: list[int] = []
        self.events: list[tuple[str, int]] = []

    async def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        x = row["x"]
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.events.append(("start", x))
        try:
            await asyncio.sleep(self.latency_ms.get(x, 0.0) / 1000.0)
        finally:
            self.in_flight -= 1
        self.events.append(("end", x))
        self.completed.append(x)
        return {"y": 10 * x}


latency_plans = st.lists(st.integers(1, 40), min_size=1, max_size=4).flatmap(
    lambda sizes: st.tuples(
        st.just(sizes),
        st.lists(st.floats(0.0, 8.0), min_size=sum(sizes), max_size=sum(sizes)),
        st.integers(1, 12),
    )
)
PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(latency_plans)
def test_ordered_mode_keeps_input_order_under_random_latency(
    plan: tuple[list[int], list[float], int],
) -> None:
    sizes, latencies, capacity = plan
    probe = Probe(dict(enumerate(latencies)))
    op = AsyncOperator(probe, SCHEMA, AsyncConfig(ordered=True, capacity=capacity))
    inputs = batches_of(sizes)
    outs = list(op.run(inputs))
    assert [o.num_rows for o in outs] == sizes
    for inp, out in zip(inputs, outs, strict=True):
        assert out.column("x").to_pylist() == inp.column("x").to_pylist()
        assert out.column("y").to_pylist() == [10 * x for x in inp.column("x").to_pylist()]
    assert probe.peak <= capacity
    assert op.metrics.max_in_flight == probe.peak


@PROPERTY
@given(latency_plans)
def test_unordered_mode_emits_in_completion_order_within_fences(
    plan: tuple[list[int], list[float], int],
) -> None:
    sizes, latencies, capacity = plan
    probe = Probe(dict(enumerate(latencies)))
    op = AsyncOperator(probe, SCHEMA, AsyncConfig(ordered=False, capacity=capacity))
    inputs = batches_of(sizes)
    outs = list(op.run(inputs))
    emitted = [x for out in outs for x in out.column("x").to_pylist()]
    assert emitted == probe.completed
    for inp, out in zip(inputs, outs, strict=True):  # fence: no row crosses its batch
        assert sorted(out.column("x").to_pylist()) == inp.column("x").to_pylist()
        assert out.column("y").to_pylist() == [10 * x for x in out.column("x").to_pylist()]
    assert probe.peak <= capacity


def test_unordered_mode_really_reorders() -> None:
    probe = Probe({0: 60.0, 1: 30.0, 2: 0.0})
    op = AsyncOperator(probe, SCHEMA, AsyncConfig(ordered=False, capacity=3))
    (out,) = op.run(batches_of([3]))
    assert out.column("x").to_pylist() == [2, 1, 0]


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("capacity", [1, 4, 32])
def test_capacity_is_reached_and_never_exceeded(ordered: bool, capacity: int) -> None:
    probe = Probe(dict.fromkeys(range(200), 2.0))
    op = AsyncOperator(probe, SCHEMA, AsyncConfig(ordered=ordered, capacity=capacity))
    list(op.run(batches_of([100, 100])))
    assert probe.peak == capacity
    assert op.metrics.max_in_flight == capacity
    assert op.metrics.requests == 200


@pytest.mark.parametrize("ordered", [True, False])
def test_batch_end_is_a_fence_and_next_batch_is_read_only_when_drained(ordered: bool) -> None:
    # the first row of every batch is slow, the rest fast: without a fence, later rows
    # would start (and in unordered mode leave) before the slow one finished.
    sizes = [5, 5, 5]
    probe = Probe({0: 50.0, 5: 50.0, 10: 50.0})
    in_flight_at_read: list[int] = []

    def source() -> Iterator[pa.RecordBatch]:
        for b in batches_of(sizes):
            in_flight_at_read.append(probe.in_flight)
            yield b

    op = AsyncOperator(probe, SCHEMA, AsyncConfig(ordered=ordered, capacity=100))
    outs = list(op.run(source()))
    assert in_flight_at_read == [0, 0, 0]
    for k, out in enumerate(outs):
        assert sorted(out.column("x").to_pylist()) == list(range(5 * k, 5 * k + 5))
    # every request of batch k ended before any request of batch k+1 started
    batch_of = [x // 5 for _, x in probe.events]
    assert batch_of == sorted(batch_of)
    if not ordered:
        assert outs[0].column("x").to_pylist()[-1] == 0  # slow row leaves last in its batch


def test_back_pressure_reads_no_batch_ahead() -> None:
    probe = Probe(dict.fromkeys(range(20), 1.0))
    pulled: list[int] = []

    def source() -> Iterator[pa.RecordBatch]:
        for k, b in enumerate(batches_of([10, 10])):
            pulled.append(k)
            yield b

    op = AsyncOperator(probe, SCHEMA, AsyncConfig(capacity=2))
    it = op.run(source())
    next(it)
    assert pulled == [0]  # the second batch is not read until the first is emitted
    next(it)
    assert pulled == [0, 1]


def test_timeout_fail_names_partition_and_row() -> None:
    async def fn(row: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(HANG_S if row["x"] == 13 else 0.0)
        return {"y": row["x"]}

    cfg = AsyncConfig(capacity=10, timeout_s=0.3, on_timeout=OnTimeout.FAIL)
    op = AsyncOperator(fn, SCHEMA, cfg, partition=4)
    it = op.run(batches_of([10, 10]))
    assert next(it).num_rows == 10
    with pytest.raises(AsyncIOError, check=lambda e: e.code is AsyncCode.REQUEST_TIMEOUT) as info:
        next(it)
    assert (info.value.partition, info.value.row_index) == (4, 13)
    assert "timed out after 0.3 s" in str(info.value)
    assert op.metrics.timeouts == 1


def test_a_failure_cancels_the_other_requests_in_flight() -> None:
    cancelled: list[int] = []

    async def fn(row: dict[str, Any]) -> dict[str, Any]:
        if row["x"] == 5:
            await asyncio.sleep(0.05)
            raise ValueError("bad input")
        try:
            await asyncio.sleep(HANG_S)
        except asyncio.CancelledError:
            cancelled.append(row["x"])
            raise
        return {"y": 0}

    op = AsyncOperator(fn, SCHEMA, AsyncConfig(capacity=8, timeout_s=HANG_S * 2))
    with pytest.raises(
        AsyncIOError,
        match="ValueError: bad input",
        check=lambda e: e.code is AsyncCode.REQUEST_FAILED,
    ):
        list(op.run(batches_of([10])))
    assert sorted(cancelled) == [0, 1, 2, 3, 4, 6, 7]
    assert op.metrics.timeouts == 0


def test_timeout_default_emits_the_default() -> None:
    async def fn(row: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(HANG_S if row["x"] % 4 == 0 else 0.0)
        return {"y": row["x"], "label": "ok"}

    schema = pa.schema([("y", pa.int64()), ("label", pa.string())])
    cfg = AsyncConfig(
        capacity=8,
        timeout_s=0.2,
        on_timeout=OnTimeout.DEFAULT,
        timeout_default={"label": "timeout"},
    )
    op = AsyncOperator(fn, schema, cfg)
    (out,) = op.run(batches_of([8]))
    rows = out.to_pylist()
    assert [r["x"] for r in rows] == list(range(8))
    for r in rows:
        if r["x"] % 4 == 0:
            assert (r["y"], r["label"]) == (None, "timeout")
        else:
            assert (r["y"], r["label"]) == (r["x"], "ok")
    m = op.metrics
    assert (m.timeouts, m.defaulted, m.dropped, m.rows_out) == (2, 2, 0, 8)


@pytest.mark.parametrize("ordered", [True, False])
def test_timeout_drop_leaves_rows_out_and_counts_them(ordered: bool) -> None:
    async def fn(row: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(HANG_S if row["x"] in (1, 6) else 0.0)
        return {"y": row["x"]}

    cfg = AsyncConfig(ordered=ordered, capacity=3, timeout_s=0.2, on_timeout=OnTimeout.DROP)
    op = AsyncOperator(fn, SCHEMA, cfg)
    outs = list(op.run(batches_of([4, 4])))
    kept = [sorted(o.column("x").to_pylist()) for o in outs]
    assert kept == [[0, 2, 3], [4, 5, 7]]
    m = op.metrics
    assert (m.rows_in, m.rows_out, m.timeouts, m.dropped) == (8, 6, 2, 2)


def test_retries_only_marked_exceptions_with_growing_backoff() -> None:
    calls: dict[int, list[float]] = {}

    async def flaky(row: dict[str, Any]) -> dict[str, Any]:
        times = calls.setdefault(row["x"], [])
        times.append(time.monotonic())
        if len(times) < 4:
            raise ConnectionResetError("transient")
        return {"y": len(times)}

    policy = RetryPolicy(
        max_attempts=4,
        retry_on=(ConnectionError,),
        initial_backoff_s=0.02,
        multiplier=3.0,
        max_backoff_s=1.0,
    )
    op = AsyncOperator(flaky, SCHEMA, AsyncConfig(capacity=5, retry=policy))
    (out,) = op.run(batches_of([5]))
    assert out.column("y").to_pylist() == [4] * 5
    assert op.metrics.retries == 15
    assert op.metrics.requests == 5
    for times in calls.values():  # sleeps are never shorter than asked: 20, 60, 180 ms
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert gaps[0] >= 0.02 and gaps[1] >= 0.06 and gaps[2] >= 0.18, gaps


def test_unmarked_exception_is_not_retried_and_names_the_row() -> None:
    calls: list[int] = []

    async def broken(row: dict[str, Any]) -> dict[str, Any]:
        calls.append(row["x"])
        if row["x"] == 2:
            raise KeyError("missing")
        return {"y": 0}

    policy = RetryPolicy(max_attempts=5, retry_on=(ConnectionError,), initial_backoff_s=0.01)
    op = AsyncOperator(broken, SCHEMA, AsyncConfig(capacity=1, retry=policy), partition=7)
    with pytest.raises(AsyncIOError, check=lambda e: e.code is AsyncCode.REQUEST_FAILED) as info:
        list(op.run(batches_of([4])))
    assert (info.value.partition, info.value.row_index) == (7, 2)
    assert isinstance(info.value.__cause__, KeyError)
    assert "KeyError" in info.value.detail and "after 1 attempt" in info.value.detail
    assert calls.count(2) == 1
    assert 3 not in calls  # capacity 1: the failure stops the batch before row 3 starts


def test_retries_are_bounded() -> None:
    attempts = 0

    async def always_down(row: dict[str, Any]) -> dict[str, Any]:
        nonlocal attempts
        attempts += 1
        raise ConnectionRefusedError("down")

    policy = RetryPolicy(max_attempts=4, retry_on=(ConnectionError,), initial_backoff_s=0.001)
    op = AsyncOperator(always_down, SCHEMA, AsyncConfig(capacity=1, retry=policy))
    with pytest.raises(
        AsyncIOError, match="after 4 attempt", check=lambda e: e.code is AsyncCode.REQUEST_FAILED
    ) as info:
        list(op.run(batches_of([1])))
    assert attempts == 4
    assert isinstance(info.value.__cause__, ConnectionRefusedError)
    assert op.metrics.retries == 3


def test_timeout_bounds_all_attempts_together() -> None:
    async def always_down(row: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionRefusedError("down")

    policy = RetryPolicy(
        max_attempts=50, retry_on=(ConnectionError,), initial_backoff_s=0.1, max_backoff_s=0.1
    )
    cfg = AsyncConfig(capacity=2, timeout_s=0.35, on_timeout=OnTimeout.DROP, retry=policy)
    op = AsyncOperator(always_down, SCHEMA, cfg)
    (out,) = op.run(batches_of([2]))
    assert out.num_rows == 0
    assert op.metrics.dropped == 2
    assert op.metrics.retries < 2 * 49


def test_users_own_timeout_error_is_a_failure_not_an_operator_timeout() -> None:
    async def fn(row: dict[str, Any]) -> dict[str, Any]:
        raise TimeoutError("client-side timeout")

    cfg = AsyncConfig(timeout_s=30.0, on_timeout=OnTimeout.DROP)
    with pytest.raises(
        AsyncIOError,
        match="client-side timeout",
        check=lambda e: e.code is AsyncCode.REQUEST_FAILED,
    ):
        list(AsyncOperator(fn, SCHEMA, cfg).run(batches_of([1])))


@pytest.mark.parametrize(
    ("result", "fragment"),
    [(42, "mapping"), ({"z": 1}, "not in the enrichment schema"), ({"y": "abc"}, "cannot hold")],
)
def test_bad_result_raises_enrichment_error_with_position(result: Any, fragment: str) -> None:
    async def fn(row: dict[str, Any]) -> Any:
        return result if row["x"] == 3 else {"y": 1}

    op = AsyncOperator(fn, SCHEMA, AsyncConfig(capacity=2), partition=1)
    with pytest.raises(
        AsyncIOError, match=fragment, check=lambda e: e.code is AsyncCode.ENRICHMENT_RESULT
    ) as info:
        list(op.run(batches_of([2, 2])))
    assert (info.value.partition, info.value.row_index) == (1, 3)


def test_none_result_gives_null_enrichment_and_missing_keys_are_null() -> None:
    async def fn(row: dict[str, Any]) -> dict[str, Any] | None:
        return None if row["x"] == 0 else {"a": row["x"]}

    schema = pa.schema([("a", pa.int64()), ("b", pa.string())])
    (out,) = AsyncOperator(fn, schema).run(batches_of([2]))
    assert out.to_pylist() == [{"x": 0, "a": None, "b": None}, {"x": 1, "a": 1, "b": None}]
    assert out.schema.field("a").nullable


def test_batch_mode_chunks_never_cross_input_batches() -> None:
    seen: list[list[int]] = []

    async def bulk(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen.append([r["x"] for r in rows])
        await asyncio.sleep(0.001 * (5 - len(rows)))
        return [{"y": r["x"] + 1} for r in rows]

    cfg = AsyncConfig(batch_size=4, capacity=2, ordered=True)
    op = AsyncOperator(bulk, SCHEMA, cfg)
    outs = list(op.run(batches_of([10, 3])))
    assert sorted(seen) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], [10, 11, 12]]
    assert [o.column("y").to_pylist() for o in outs] == [list(range(1, 11)), [11, 12, 13]]
    assert op.metrics.requests == 4


def test_batch_mode_wrong_length_is_reported() -> None:
    async def bulk(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"y": 1}]

    op = AsyncOperator(bulk, SCHEMA, AsyncConfig(batch_size=3))
    with pytest.raises(
        AsyncIOError,
        match="1 results for 3 rows",
        check=lambda e: e.code is AsyncCode.ENRICHMENT_RESULT,
    ) as info:
        list(op.run(batches_of([5])))
    assert info.value.row_index in (0, 3)


class Lifecycle(AsyncFunction):
    def __init__(self, fail_on: int | None = None) -> None:
        self.log: list[str] = []
        self.fail_on = fail_on
        self.loop: asyncio.AbstractEventLoop | None = None

    async def open(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.log.append("open")

    async def __call__(self, request: Any) -> dict[str, Any]:
        assert asyncio.get_running_loop() is self.loop
        assert self.log[0] == "open" and "close" not in self.log
        if request["x"] == self.fail_on:
            raise RuntimeError("bad row")
        self.log.append("call")
        return {"y": 0}

    async def close(self) -> None:
        self.log.append("close")


def test_async_function_lifecycle_open_calls_close() -> None:
    fn = Lifecycle()
    list(AsyncOperator(fn, SCHEMA).run(batches_of([3, 2])))
    assert fn.log == ["open"] + ["call"] * 5 + ["close"]


def test_async_function_closed_on_failure_and_on_early_exit() -> None:
    failing = Lifecycle(fail_on=1)
    with pytest.raises(AsyncIOError, check=lambda e: e.code is AsyncCode.REQUEST_FAILED):
        list(AsyncOperator(failing, SCHEMA, AsyncConfig(capacity=1)).run(batches_of([3])))
    assert failing.log[-1] == "close"

    early = Lifecycle()
    it = AsyncOperator(early, SCHEMA).run(batches_of([2, 2, 2]))
    next(it)
    it.close()
    assert early.log == ["open", "call", "call", "close"]


def test_empty_batches_and_metrics_after_each_batch() -> None:
    probe = Probe(dict.fromkeys(range(10), 1.0))
    op = AsyncOperator(probe, SCHEMA, AsyncConfig(capacity=4))
    seen = []
    for out in op.run(batches_of([0, 6, 0, 4])):
        seen.append((out.num_rows, op.metrics.rows_out, op.metrics.requests))
    assert seen == [(0, 0, 0), (6, 6, 6), (0, 6, 6), (4, 10, 10)]
    m = op.metrics
    assert m.latency.count == 10
    assert m.p50_ms is not None and m.p95_ms is not None and m.p99_ms is not None
    assert 1.0 <= m.p50_ms <= m.p95_ms <= m.p99_ms

"""async_map through real Spark mapInArrow against a real HTTP service on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark import cloudpickle
from pyspark.sql import SparkSession

from connectors.async_io import AsyncConfig, AsyncIOError, OnTimeout, RetryPolicy, async_map
from connectors.async_io._observe import MetricsObservation
from connectors.async_io._spark import MetricsAccumulator
from integration_tests.async_io._http import get_json
from txn import TxnCode

# Test helpers defined here travel to the Python workers by value (this module is not
# importable there).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.spark


class ServiceUnavailable(Exception):
    """HTTP 503: the service asks us to try again."""


class ServiceError(Exception):
    """Any other non-200 answer."""


# Seconds a request may take in the timeout tests. Only the rows that hang can reach it:
# the others return without suspending, and an asyncio timeout fires only at a suspension
# point, so the value sets how long the tests wait, never which rows time out.
TIMEOUT_S = 0.5


def enricher(
    port: int, ns: str, delay_of: Any = None, fail_first: int = 0, broken: tuple[int, ...] = ()
) -> Any:
    async def enrich(row: dict[str, Any]) -> dict[str, Any]:
        key = row["id"]
        delay = delay_of(key) if delay_of is not None else 0
        path = f"/enrich?ns={ns}&key={key}&delay_ms={delay}&fail_first={fail_first}"
        if key in broken:
            path += "&fail=1"
        status, body = await get_json(port, path)
        if status == 503:
            raise ServiceUnavailable(f"key {key}")
        if status != 200:
            raise ServiceError(f"HTTP {status} for key {key}")
        return {"score": body["score"], "hit": body["hit"]}

    return enrich


ENRICHMENT = "score bigint, hit int"


@contextlib.contextmanager
def arrow_batch_rows(spark: SparkSession, rows: int) -> Iterator[None]:
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(rows))
    try:
        yield
    finally:
        spark.conf.set(key, before)


@pytest.mark.compat
def test_ordered_enrichment_keeps_input_order(spark: SparkSession, http_service: Any) -> None:
    ns = uuid.uuid4().hex
    df = spark.range(0, 200, numPartitions=2)
    metrics = MetricsAccumulator(spark)
    fn = enricher(http_service.port, ns, delay_of=lambda k: (k * 37) % 25)
    out = async_map(
        df, fn, output_schema=ENRICHMENT, config=AsyncConfig(capacity=8), metrics=metrics
    )
    assert out.columns == ["id", "score", "hit"]
    rows = out.collect()
    assert [r.id for r in rows] == list(range(200))
    assert all(r.score == 3 * r.id + 1 and r.hit == 1 for r in rows)
    m = metrics.value
    assert (m.rows_in, m.rows_out, m.requests, m.retries, m.timeouts) == (200, 200, 200, 0, 0)
    assert m.max_in_flight == 8
    assert http_service.state.peak[ns] <= 16  # 2 partitions x capacity 8
    assert m.p50_ms is not None and m.p99_ms is not None and m.p50_ms <= m.p99_ms


def test_unordered_mode_reorders_only_within_arrow_batch_fences(
    spark: SparkSession, http_service: Any
) -> None:
    ns = uuid.uuid4().hex
    df = spark.range(0, 200, numPartitions=2)
    fn = enricher(http_service.port, ns, delay_of=lambda k: ((k * 7) % 5) * 8)
    cfg = AsyncConfig(ordered=False, capacity=10)
    with arrow_batch_rows(spark, 10):
        ids = [r.id for r in async_map(df, fn, output_schema=ENRICHMENT, config=cfg).collect()]
    assert sorted(ids) == list(range(200))
    chunks = [ids[i : i + 10] for i in range(0, 200, 10)]
    for i, chunk in enumerate(chunks):  # partition 0 holds 0..99, partition 1 100..199
        assert sorted(chunk) == list(range(10 * i, 10 * i + 10)), chunk
    assert any(chunk != sorted(chunk) for chunk in chunks)


def test_marked_failures_are_retried(spark: SparkSession, http_service: Any) -> None:
    ns = uuid.uuid4().hex
    df = spark.range(0, 60, numPartitions=2)
    metrics = MetricsAccumulator(spark)
    policy = RetryPolicy(max_attempts=3, retry_on=(ServiceUnavailable,), initial_backoff_s=0.01)
    cfg = AsyncConfig(capacity=5, retry=policy)
    fn = enricher(http_service.port, ns, fail_first=2)
    rows = async_map(df, fn, output_schema=ENRICHMENT, config=cfg, metrics=metrics).collect()
    assert sorted((r.id, r.score, r.hit) for r in rows) == [(k, 3 * k + 1, 3) for k in range(60)]
    assert metrics.value.retries == 120
    assert all(http_service.state.hits[(ns, k)] == 3 for k in range(60))


def test_permanent_failure_fails_the_job_naming_the_row(
    spark: SparkSession, http_service: Any
) -> None:
    ns = uuid.uuid4().hex
    df = spark.range(0, 100, numPartitions=2)  # key 87 is row 37 of partition 1
    policy = RetryPolicy(retry_on=(ServiceUnavailable,))
    fn = enricher(http_service.port, ns, broken=(87,))
    out = async_map(df, fn, output_schema=ENRICHMENT, config=AsyncConfig(retry=policy))
    with pytest.raises(Exception) as info:  # Spark wraps worker errors in PythonException
        out.collect()
    text = str(info.value)
    assert "AsyncIOError: [request-failed] partition 1, row 37" in text
    assert "ServiceError: HTTP 500 for key 87 (after 1 attempt(s))" in text
    assert http_service.state.hits[(ns, 87)] == 1


def hang_on_threes(port: int, ns: str) -> Any:
    """Rows ``k % 10 == 3`` send a request the service never answers; the others answer
    at once, without suspending (so no load can make them time out)."""

    async def enrich(row: dict[str, Any]) -> dict[str, Any]:
        key = row["id"]
        if key % 10 == 3:
            status, body = await get_json(port, f"/enrich?ns={ns}&key={key}&hold=1")
            return {"score": status, "hit": body}  # never reached: the service holds it
        return {"score": 3 * key + 1, "hit": 1}

    return enrich


def test_timeouts_drop_rows_and_count_them(spark: SparkSession, http_service: Any) -> None:
    ns = uuid.uuid4().hex
    df = spark.range(0, 200, numPartitions=2)
    metrics = MetricsAccumulator(spark)
    cfg = AsyncConfig(capacity=20, timeout_s=TIMEOUT_S, on_timeout=OnTimeout.DROP)
    fn = hang_on_threes(http_service.port, ns)
    rows = async_map(df, fn, output_schema=ENRICHMENT, config=cfg, metrics=metrics).collect()
    assert [(r.id, r.score) for r in rows] == [(k, 3 * k + 1) for k in range(200) if k % 10 != 3]
    m = metrics.value
    assert (m.timeouts, m.dropped, m.rows_out) == (20, 20, 180)


# Seconds a hanging row's request waits if its timeout never fires: bounds the hang of a
# broken timeout (the test then fails on the counts), far beyond TIMEOUT_S.
HANG_S = 120.0


async def hang_on_threes_locally(row: dict[str, Any]) -> dict[str, Any]:
    """Rows ``k % 10 == 3`` hang; the others return at once, without suspending."""
    if row["id"] % 10 == 3:
        await asyncio.sleep(HANG_S)
    return {"score": row["id"], "hit": 1}


def test_observed_metrics_without_accumulators(spark: SparkSession) -> None:
    """``MetricsObservation`` (what Spark Connect can use): counts, schema, rows unchanged.

    Three partitions, one of them empty after a filter, and every fifth row of one
    partition dropped on timeout: the metrics rows never reach the caller, the input
    column keeps its non-nullable type, and the counters are the partitions' sum.
    """
    df = spark.range(0, 90, numPartitions=3).where("id < 60")  # partition 3: no rows
    metrics = MetricsObservation()
    cfg = AsyncConfig(capacity=20, timeout_s=TIMEOUT_S, on_timeout=OnTimeout.DROP)
    fn = hang_on_threes_locally
    out = async_map(df, fn, output_schema=ENRICHMENT, config=cfg, metrics=metrics)
    assert out.columns == ["id", "score", "hit"]
    assert out.schema["id"].nullable is False
    rows = out.collect()
    assert sorted(r.id for r in rows) == [k for k in range(60) if k % 10 != 3]
    m = metrics.value
    assert (m.rows_in, m.rows_out, m.requests) == (60, 54, 60)
    assert (m.timeouts, m.dropped, m.retries) == (6, 6, 0)
    assert m.p50_ms is not None and m.max_in_flight >= 1


def test_observed_metrics_refuse_a_streaming_dataframe(spark: SparkSession) -> None:
    stream = spark.readStream.format("rate").load()
    with pytest.raises(
        AsyncIOError, match="foreachBatch", check=lambda e: e.code is TxnCode.CONFIG
    ):
        async_map(
            stream, hang_on_threes_locally, output_schema=ENRICHMENT, metrics=MetricsObservation()
        )


def test_batch_mode_sends_one_request_per_chunk(spark: SparkSession, http_service: Any) -> None:
    ns = uuid.uuid4().hex
    port = http_service.port

    async def bulk(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        keys = ",".join(str(r["id"]) for r in rows)
        status, body = await get_json(port, f"/bulk?ns={ns}&keys={keys}")
        assert status == 200
        return [{"score": s} for s in body["scores"]]

    metrics = MetricsAccumulator(spark)
    cfg = AsyncConfig(batch_size=7, capacity=4)
    df = spark.range(0, 100, numPartitions=2)
    rows = async_map(df, bulk, output_schema="score long", config=cfg, metrics=metrics).collect()
    assert [(r.id, r.score) for r in rows] == [(k, 3 * k + 1) for k in range(100)]
    assert metrics.value.requests == 2 * 8  # 50 rows per partition in chunks of 7
    assert all(http_service.state.hits[(ns, k)] == 1 for k in range(100))


def test_bad_arguments_fail_at_construction(spark: SparkSession) -> None:
    df = spark.range(3)

    async def fn(row: dict[str, Any]) -> None:
        return None

    with pytest.raises(
        AsyncIOError, match="already exist", check=lambda e: e.code is TxnCode.CONFIG
    ):
        async_map(df, fn, output_schema="ID long")
    with pytest.raises(AsyncIOError, match="DDL", check=lambda e: e.code is TxnCode.CONFIG):
        async_map(df, fn, output_schema="score nonsense_type")
    with pytest.raises(AsyncIOError, match="async def", check=lambda e: e.code is TxnCode.CONFIG):
        async_map(df, lambda row: row, output_schema="score long")


def test_streaming_micro_batches_with_per_batch_metrics(
    spark: SparkSession, http_service: Any, tmp_path: Any
) -> None:
    ns = uuid.uuid4().hex
    source = tmp_path / "in"
    for part in range(3):
        spark.range(part * 40, part * 40 + 40, numPartitions=2).write.parquet(
            str(source / f"part={part}")
        )
    stream = (
        spark.readStream.schema("id long")
        .option("maxFilesPerTrigger", 2)
        .parquet(str(source / "part=*"))
    )
    metrics = MetricsAccumulator(spark)
    fn = enricher(http_service.port, ns, delay_of=lambda k: k % 7)
    enriched = async_map(
        stream,
        fn,
        output_schema=ENRICHMENT,
        config=AsyncConfig(ordered=False, capacity=6),
        metrics=metrics,
    )
    seen: list[tuple[int, int]] = []
    per_batch: list[int] = []

    def sink(batch_df: Any, batch_id: int) -> None:
        metrics.reset()
        seen.extend((r.id, r.score) for r in batch_df.collect())
        per_batch.append(metrics.value.requests)

    query = (
        enriched.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout=240)
    assert not query.isActive
    assert sorted(seen) == [(k, 3 * k + 1) for k in range(120)]
    assert len(per_batch) >= 2 and sum(per_batch) == 120

"""A failure mid-batch, then replay: async_map + KafkaSink give exactly-once output.

The pipeline: a ``kafka-rc`` stream of JSON records -> ``async_map`` enrichment from the
real HTTP service on 127.0.0.1 -> ``foreachBatch(KafkaSink(...))`` exactly-once. Steps:

1. 120 input records, one input partition, 60 per micro-batch (two epochs);
2. first run: epoch 0 commits; in epoch 1 the service answers HTTP 500 for record 90 the
   first time it sees it (non-retriable), so the epoch fails after the sink logged its
   plan and the query stops with the error;
3. second run from the same checkpoint (a new sink instance, as after a driver restart):
   Spark replays epoch 1 and the service now answers. The write stage also fails twice
   (injected with the sink's fault plan): write task 0 after its pre-commit (its rows are
   flushed into an open transaction), and write task 1 right after its commit; the sink re-runs the stage (``stage_retries=2``
   from this run on), which must redo the aborted partition and skip the committed one by
   its marker;
4. the checker reads everything back: each input record exactly once with
   ``read_committed``, no aborted data visible, no open transaction, epoch log and
   markers agreeing; every output record carries the right enrichment.

Step 3's faults are what an at-least-once sink turns into duplicates (write task 1's rows
are written again by the re-run), so the test fails for a sink that is not exactly-once.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle

from connectors.async_io import AsyncConfig, async_map
from connectors.kafka import KafkaSink, register
from connectors.testing import FaultPlan, inject_faults
from connectors.verify import (
    check_exactly_once,
    print_report,
    produce_input,
    read_committed_topic,
)
from integration_tests.async_io._http import get_json

# Test helpers defined here travel to the Python workers by value (this module is not
# importable there).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.spark

# Seconds one run of the availableNow query may take on the busy shared machine.
RUN_TIMEOUT_S = 300.0
INPUT_RECORDS = 120
PER_BATCH = 60
# The record whose first enrichment request fails: in the middle of epoch 1.
FAILING_ID = 90


class ServiceError(Exception):
    """A non-200 answer of the enrichment service (not retried: no RetryPolicy)."""


def enricher(port: int, ns: str, fail_once: int) -> Callable[[dict[str, Any]], Any]:
    """Score lookup; the request of record ``fail_once`` fails the first time only."""

    async def enrich(row: dict[str, Any]) -> dict[str, Any]:
        key = row["id"]
        path = f"/enrich?ns={ns}&key={key}&delay_ms={key % 5}"
        if key == fail_once:
            path += "&fail_once=1"
        status, body = await get_json(port, path)
        if status != 200:
            msg = f"HTTP {status} for key {key}"
            raise ServiceError(msg)
        return {"score": body["score"]}  # deterministic: a replay enriches identically

    return enrich


def start_query(spark: Any, bootstrap: str, topic: str, fn: Any, sink: KafkaSink, ck: Path) -> Any:
    """Start source -> async_map -> KafkaSink as an availableNow query on checkpoint ``ck``."""
    records = (
        spark.readStream.format("kafka-rc")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(PER_BATCH))
        .load()
        .selectExpr(
            "from_json(CAST(value AS STRING), 'id long, key string, seq long') AS r",
            "offset AS in_offset",
        )
        .selectExpr("r.id AS id", "r.key AS key", "r.seq AS seq", "in_offset")
    )
    enriched = async_map(records, fn, output_schema="score bigint", config=AsyncConfig(capacity=8))
    out = enriched.selectExpr("key", "to_json(struct(id, key, seq, score)) AS value", "in_offset")
    return (
        out.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )


def write_faults(path: Path) -> None:
    """Two write-stage faults, each fired once: task 0 after pre-commit, task 1 after commit."""
    faults = [
        {"id": "pre", "step": "after_pre_commit", "partition": 0, "action": "raise"},
        {"id": "post", "step": "after_commit", "partition": 1, "action": "raise"},
    ]
    path.write_text(json.dumps(faults), encoding="utf-8")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["aligned", "unaligned"])
@pytest.mark.usefixtures("rc_spark")  # the kafka-rc source: PySpark 4.2+
def test_failure_mid_batch_then_replay_is_exactly_once(
    spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    http_service: Any,
    tmp_path: Path,
    closing: Callable[[KafkaSink], KafkaSink],
    mode: str,
) -> None:
    register(spark)
    inp = new_topic("aio-eos-in", partitions=1)  # one partition: offset order = id order
    out = new_topic("aio-eos-out", partitions=3)
    produce_input(kafka_bootstrap, inp, INPUT_RECORDS, keys=6)
    ns, sink_id = uuid.uuid4().hex, f"aio-eos-{uuid.uuid4().hex[:8]}"
    fn = enricher(http_service.port, ns, fail_once=FAILING_ID)
    plan_path = tmp_path / "faults.json"  # injected in the second run only
    ck = tmp_path / "ck"

    def sink(stage_retries: int) -> KafkaSink:  # a fresh instance per run, as after a restart
        return closing(
            KafkaSink(
                kafka_bootstrap,
                out,
                sink_id,
                guarantee="exactly-once",
                mode=mode,
                parallelism=2,
                order_by=("in_offset",),
                stage_retries=stage_retries,
            )
        )

    # No stage retries: a re-run inside the call would call the service again and get past
    # the failure, which then would not reach the query.
    first = start_query(spark, kafka_bootstrap, inp, fn, sink(0), ck)
    with pytest.raises(Exception) as failed:  # StreamingQueryException wrapping the task's
        first.awaitTermination(RUN_TIMEOUT_S)
    assert not first.isActive, "first run did not stop"
    error = str(failed.value)
    assert "[request-failed]" in error and f"HTTP 500 for key {FAILING_ID}" in error, error
    assert http_service.state.hits[(ns, FAILING_ID)] == 1
    # epoch 0 committed, nothing of the failed epoch 1 is visible
    assert sorted(
        json.loads(r.value)["id"] for r in read_committed_topic(kafka_bootstrap, out)
    ) == list(range(PER_BATCH))

    write_faults(plan_path)
    # Two stage retries absorb the two injected write-stage faults within the replayed call
    # (each failed attempt is redone or skipped by marker) instead of two more restarts.
    with inject_faults(FaultPlan(str(plan_path))):
        second = start_query(spark, kafka_bootstrap, inp, fn, sink(2), ck)
        assert second.awaitTermination(RUN_TIMEOUT_S), "second run did not stop"
    assert second.exception() is None
    assert (tmp_path / "faults.json.pre.0").exists() and (tmp_path / "faults.json.post.0").exists()
    assert http_service.state.hits[(ns, FAILING_ID)] >= 2

    report = check_exactly_once(kafka_bootstrap, input_topic=inp, output_topic=out, sink_id=sink_id)
    print_report(report)
    assert report.ok, [(a.kind.value, a.record_id, a.detail) for a in report.examples]
    assert report.epoch_log_checked and report.last_committed_epoch == 1
    assert report.committed_records == report.input_records == INPUT_RECORDS
    assert report.aborted_records > 0  # the failed attempts' data is in the log, hidden
    values = [json.loads(r.value) for r in read_committed_topic(kafka_bootstrap, out)]
    assert sorted(v["id"] for v in values) == list(range(INPUT_RECORDS))
    assert all(v["score"] == 3 * v["id"] + 1 for v in values)

"""Resume from the output: a changed query on a new checkpoint continues exactly after it.

docs/operations.md, "Changing a query". kafka-rc -> exactly-once KafkaSink: query A writes
some epochs (each plan records its input offsets), fails mid-epoch (or not), its checkpoint
is deleted; query B (a new column, another parallelism) starts from
``resume_offsets`` with ``resume="from-output"``. The checker then finds every input
record exactly once in the output. An epoch in doubt at the failure is settled first:
committed when every marker shows it, aborted (and taken over) when none does.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka import KafkaEpochLog, KafkaSink, resume_offsets
from connectors.ops import main as eos
from connectors.testing import FaultPlan, inject_faults
from connectors.verify import check_exactly_once, print_report, produce_input
from txn import EpochState

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

# Seconds one availableNow run may take on a busy machine (several epochs).
RUN_TIMEOUT_S = 400.0
HEADERS = "array(named_struct('key', 'v', 'value', cast('2' AS binary))) AS headers"


def _run(spark: Any, bootstrap: str, topic: str, sink: KafkaSink, ck: Path, **opts: str) -> Any:
    reader = (
        spark.readStream.format("kafka-rc")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("maxOffsetsPerTrigger", "60")
    )
    for key, value in opts.items():
        reader = reader.option(key, value)
    columns = ["key", "value"] + ([HEADERS] if sink.config.parallelism == 1 else [])
    query = (
        reader.load()
        .selectExpr(*columns)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(Exception):  # a failed query raises here; its exception is checked
        query.awaitTermination(RUN_TIMEOUT_S)
    return query


def _history(bootstrap: str, sink_id: str) -> Any:
    log = KafkaEpochLog(bootstrap, sink_id, create_topic=False)
    try:
        return log.load()
    finally:
        log.close()


def _eos_offsets(bootstrap: str, sink_id: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        eos(["--bootstrap-servers", bootstrap, "--json", "offsets", sink_id])
    return dict(json.loads(out.getvalue()))


@pytest.mark.parametrize("doubt", ["none", "driver_after_plan", "driver_before_complete"])
def test_a_changed_query_resumes_exactly_after_the_output(
    rc_spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    tmp_path: Path,
    closing: Callable[[KafkaSink], KafkaSink],
    doubt: str,
) -> None:
    inp = new_topic("resume-in", partitions=2)
    out = new_topic("resume-out", partitions=3)
    produce_input(kafka_bootstrap, inp, 200, keys=8)
    sink_id = f"resume-{uuid.uuid4().hex[:8]}"
    faults = tmp_path / "faults.json"
    if doubt != "none":  # the driver dies inside epoch 1: the epoch stays in doubt
        faults.write_text(json.dumps([{"id": "f", "step": doubt, "action": "raise", "epoch": 1}]))
    first = closing(
        KafkaSink(
            kafka_bootstrap,
            out,
            sink_id,
            parallelism=2,
            stage_retries=0,
        )
    )
    with inject_faults(FaultPlan(str(faults))) as plan:
        query = _run(
            rc_spark, kafka_bootstrap, inp, first, tmp_path / "ck-a", startingOffsets="earliest"
        )
    error = query.exception()  # in the message: Spark's own failures show what they were
    assert (error is None) == (doubt == "none"), f"{doubt}: {error}"
    assert plan.has_fired("f") == (doubt != "none"), f"{doubt}: {error}"
    first.close()
    history = _history(kafka_bootstrap, sink_id)
    plan0 = history.plan(0)
    assert plan0 is not None and plan0.input is not None
    assert plan0.input.start_map() == {(inp, 0): 0, (inp, 1): 0}
    assert sum(plan0.input.end_map().values()) == 60  # maxOffsetsPerTrigger
    if doubt != "none":
        assert history.state(1) is EpochState.PLANNED
    shown = _eos_offsets(kafka_bootstrap, sink_id)  # read-only: the last committed epoch
    last = history.last_committed_plan()
    if doubt == "driver_before_complete":  # every marker shows epoch 1: committed, read so
        last = history.plan(1)
    assert last is not None and last.input is not None and shown["epoch"] == last.epoch
    assert shown["starting_offsets"] == last.input.to_body()["end"]
    assert sum(p["lag"] for p in shown["partitions"]) == 200 - sum(last.input.end_map().values())

    shutil.rmtree(tmp_path / "ck-a")  # the checkpoint is gone
    produce_input(kafka_bootstrap, inp, 100, keys=8, start=200)
    second = closing(KafkaSink(kafka_bootstrap, out, sink_id, parallelism=1, resume="from-output"))
    start = resume_offsets(second, kafka_bootstrap)
    settled = _history(kafka_bootstrap, sink_id)
    if doubt == "driver_after_plan":  # no marker shows epoch 1: aborted, taken over
        assert settled.state(1) is EpochState.ABORTED
        assert json.loads(start) == plan0.input.to_body()["end"]
    elif doubt == "driver_before_complete":  # every marker shows it: committed
        assert settled.state(1) is EpochState.COMMITTED
        plan1 = settled.plan(1)
        assert plan1 is not None and plan1.input is not None
        assert json.loads(start) == plan1.input.to_body()["end"]
    assert _eos_offsets(kafka_bootstrap, sink_id)["starting_offsets"] == json.loads(start)
    query = _run(rc_spark, kafka_bootstrap, inp, second, tmp_path / "ck-b", startingOffsets=start)
    assert query.exception() is None, query.exception()

    report = check_exactly_once(kafka_bootstrap, input_topic=inp, output_topic=out, sink_id=sink_id)
    print_report(report)
    assert report.ok, [(a.kind.value, a.record_id, a.detail) for a in report.examples]
    assert report.committed_records == report.input_records == 300


def test_a_resumed_query_that_starts_elsewhere_is_refused_before_writing(
    rc_spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    tmp_path: Path,
    closing: Callable[[KafkaSink], KafkaSink],
) -> None:
    inp = new_topic("resume-bad-in", partitions=2)
    out = new_topic("resume-bad-out", partitions=1)
    produce_input(kafka_bootstrap, inp, 100, keys=4)
    sink_id = f"resume-bad-{uuid.uuid4().hex[:8]}"
    first = closing(KafkaSink(kafka_bootstrap, out, sink_id, parallelism=2))
    query = _run(
        rc_spark, kafka_bootstrap, inp, first, tmp_path / "ck-a", startingOffsets="earliest"
    )
    assert query.exception() is None, query.exception()
    first.close()
    before = _history(kafka_bootstrap, sink_id)

    second = closing(KafkaSink(kafka_bootstrap, out, sink_id, parallelism=2, resume="from-output"))
    query = _run(
        rc_spark, kafka_bootstrap, inp, second, tmp_path / "ck-b", startingOffsets="earliest"
    )
    error = str(query.exception())
    assert "[resume-input-mismatch]" in error and "starts at 0, the output ends at 100" in error, (
        error
    )
    after = _history(kafka_bootstrap, sink_id)
    assert (after.max_epoch(), after.binding) == (before.max_epoch(), before.binding)
    report = check_exactly_once(kafka_bootstrap, input_topic=inp, output_topic=out, sink_id=sink_id)
    assert report.ok and report.committed_records == 100

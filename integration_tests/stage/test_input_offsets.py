"""The driver's read of each micro-batch's input offsets, on the installed Spark line.

``make test-compat`` runs these on every supported line (README, "Supported Spark
versions"): the plan shapes of the rate source (a v2 source, as Spark's ``kafka`` is), of a
file source (v1) and, from PySpark 4.2, of ``kafka-rc`` are read from real queries, and a
driver running a multi-batch query into the exactly-once KafkaSink logs no warning and no
stack trace about them (issue 35: on 3.5 every batch logged one).
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka import KafkaEpochLog
from connectors.stage._binding import query_id_of
from connectors.stage._offsets import batch_input
from connectors.verify import produce_input
from integration_tests.stage import _offsets_app
from txn import EpochState, InputOffsets

pytestmark = [pytest.mark.spark, pytest.mark.compat, pytest.mark.timeout(600)]

BATCHES = 4
RUN_TIMEOUT_S = 240.0
"""Seconds a query may take for its batches on a busy machine."""
APP_TIMEOUT_S = 420.0
"""Seconds the driver subprocess may take (a JVM start, the batches, the shutdown)."""
POLL_S = 0.2
"""Seconds between two looks at a query's progress."""

# A driver-log line that warns or carries a stack trace: log4j's WARN/ERROR, Python
# logging's WARNING/ERROR/CRITICAL, librdkafka's levels 0-4, a Java frame, a traceback.
_ALARM = re.compile(
    r"\b(WARN|ERROR|WARNING|CRITICAL)\b|^%[0-4]\||^\s+at [\w$.]+\(|Traceback \(most recent"
)
# Not about the query: the sink's start-up warning about the cluster's durability settings
# (docs/deploying.md, section 9), given on a one-broker test cluster and not on a cluster
# with replication 3 and min ISR 2.
_CLUSTER_SETTING = re.compile(r"WARNING connectors\.kafka: .* is weaker than exactly-once needs")


def _record(spark: Any, df: Any, checkpoint: Path) -> list[InputOffsets | None]:
    """Run ``df`` until :data:`BATCHES` batches had rows; each batch's :func:`batch_input`."""
    found: list[InputOffsets | None] = []

    def each(batch: Any, batch_id: int) -> None:
        found.append(batch_input(batch, query_id_of(batch), batch_id))

    query = df.writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))
    running = query.start()
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(found) < BATCHES and time.monotonic() < deadline:
            assert running.exception() is None, running.exception()
            time.sleep(POLL_S)
    finally:
        running.stop()
    assert len(found) >= BATCHES, f"only {len(found)} batches in {RUN_TIMEOUT_S:.0f}s"
    return found


def _kit_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("connectors", "txn"))
    ]


def test_a_rate_source_is_recorded_as_another_source(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="connectors.stage.offsets")
    df = spark.readStream.format("rate").option("rowsPerSecond", "50").load()
    found = _record(spark, df, tmp_path / "ck")
    assert found == [InputOffsets(other_sources=1)] * len(found)
    assert _kit_warnings(caplog) == []
    debug = [r.getMessage() for r in caplog.records if r.name == "connectors.stage.offsets"]
    assert debug, "the rate source was not named in a debug line"
    assert all("\n" not in line for line in debug)


def test_a_file_source_and_a_rate_source_are_two_other_sources(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = tmp_path / "in"
    files.mkdir()
    for i in range(BATCHES + 2):
        (files / f"f{i}.json").write_text(json.dumps({"value": i}) + "\n")
    from_files = (
        spark.readStream.schema("value long").option("maxFilesPerTrigger", 1).json(str(files))
    )
    rate = spark.readStream.format("rate").option("rowsPerSecond", "50").load()
    df = from_files.unionByName(rate.select("value"))
    found = _record(spark, df, tmp_path / "ck")
    assert all(f is not None and not f.end and f.other_sources >= 1 for f in found), found
    assert InputOffsets(other_sources=2) in found  # a batch with a file: both sources counted
    assert _kit_warnings(caplog) == []


def test_kafka_rc_offsets_are_the_batches_ranges(
    rc_spark: Any,
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = new_topic("offsets-rc", partitions=2)
    produce_input(kafka_bootstrap, topic, 40, keys=8)
    df = (
        rc_spark.readStream.format("kafka-rc")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
        .load()
    )
    found = _record(rc_spark, df, tmp_path / "ck")
    assert all(f is not None and f.other_sources == 0 for f in found), found
    spans = [f for f in found if f is not None]
    assert spans[0].start_map() == {(topic, 0): 0, (topic, 1): 0}
    for before, after in zip(spans, spans[1:], strict=False):
        assert after.start_map() == before.end_map()  # one batch ends where the next begins
    assert sum(spans[-1].end_map().values()) == 10 * len(spans)
    assert _kit_warnings(caplog) == []


def test_the_driver_log_of_a_multi_batch_query_has_no_warning(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic("offsets-app-out", partitions=2)
    sink_id = f"offsets-app-{uuid.uuid4().hex[:8]}"
    args = [kafka_bootstrap, topic, sink_id, str(tmp_path / "ck"), str(BATCHES)]
    run = subprocess.run(
        [sys.executable, "-m", _offsets_app.__name__, *args],
        capture_output=True,
        text=True,
        timeout=APP_TIMEOUT_S,
        check=False,
    )
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-5000:]
    assert _offsets_app.STARTED in log and _offsets_app.STOPPING in log, log[-5000:]
    # The batches' part of the log: Spark's notes about the machine (host name, native
    # libraries) come before it, and ``query.stop()`` interrupting the batch then running
    # (a planned recovery: the sink redoes or aborts it) after it.
    during = log[log.index(_offsets_app.STARTED) : log.index(_offsets_app.STOPPING)]
    alarms = [
        line
        for line in during.splitlines()
        if _ALARM.search(line) and not _CLUSTER_SETTING.search(line)
    ]
    assert alarms == [], "\n".join(alarms[:20])
    epoch_log = KafkaEpochLog(kafka_bootstrap, sink_id, create_topic=False)
    try:
        history = epoch_log.load()
    finally:
        epoch_log.close()
    committed = [e for e in history.epochs() if history.state(e) is EpochState.COMMITTED]
    assert len(committed) >= BATCHES
    for epoch in committed:
        plan = history.plan(epoch)
        assert plan is not None and plan.input == InputOffsets(other_sources=1), plan

"""A KafkaSink object and its epoch log in one process: refused while the query runs, then taken over.

Without the check, a second sink object of the same ``sink_id`` would fence the running
query's epoch log and make that query fail at its next append.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka import KafkaSink
from integration_tests.kafka_sink._support import expected, read_committed, sid, values

pytestmark = pytest.mark.spark

PER_FILE = 25
# Seconds a streaming query may take to drain its files on a busy machine.
QUERY_TIMEOUT_S = 300.0


def stage_file(directory: Path, f: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"key": f"k{i}", "value": f"v{i}"})
        for i in range(f * PER_FILE, (f + 1) * PER_FILE)
    ]
    (directory / f"part-{f:03d}.json").write_text("\n".join(lines) + "\n")


def start(spark: Any, source: Path, checkpoint: Path, sink: Any, trigger: dict[str, Any]) -> Any:
    return (
        spark.readStream.schema("key STRING, value STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def test_a_second_sink_object_is_refused_while_the_query_runs_and_takes_over_after(
    spark: Any,
    kafka_bootstrap: str,
    new_topic: Any,
    tmp_path: Path,
    closing: Callable[[KafkaSink], KafkaSink],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, sink_id, source = new_topic("ks-life", 2), sid(), tmp_path / "in"
    caplog.set_level(logging.ERROR, logger="connectors.stage")
    running = {"processingTime": "200 milliseconds"}

    def make() -> KafkaSink:
        return closing(KafkaSink(kafka_bootstrap, topic, sink_id, parallelism=2))

    stage_file(source, 0)
    a = make()
    first = start(spark, source, tmp_path / "ck", a, running)
    try:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while len(read_committed(kafka_bootstrap, topic)) < PER_FILE:
            assert time.monotonic() < deadline, "the first batch was not written"
            time.sleep(0.2)
        b = make()
        stage_file(tmp_path / "in-b", 40)
        second = start(spark, tmp_path / "in-b", tmp_path / "ck-b", b, running)
        with pytest.raises(Exception, match="sink-in-use") as info:
            second.awaitTermination(QUERY_TIMEOUT_S)
        assert f"its query {first.id} is still active" in str(info.value)
        # the message is the first line a user reads, before Spark's Py4J trace
        [line] = [r.getMessage() for r in caplog.records if r.name == "connectors.stage"]
        assert line.startswith("StageError: [sink-in-use] ")
        assert f"{first.id} is still active" in line
        assert first.isActive and first.exception() is None
    finally:
        first.stop()
    stage_file(source, 1)
    with b:  # the query run again with the refused object, now that the first one stopped
        query = start(spark, source, tmp_path / "ck", b, {"availableNow": True})
        query.awaitTermination(QUERY_TIMEOUT_S)
        assert query.exception() is None
    a.close()
    assert values(read_committed(kafka_bootstrap, topic)) == expected(2 * PER_FILE)

"""The kit under Spark Connect: what works, and what must fail at start with a typed error.

Findings with pyspark 4.3 (a Connect server on ``local[2]``):

* works: the ``kafka-rc`` source (``spark.dataSource.register`` and a streaming read),
  ``KafkaSink`` in unaligned mode with an explicit ``parallelism`` (``foreachBatch``
  pickles the sink, which ships its config only, into the server's foreachBatch Python
  process), and ``async_map`` (``mapInArrow``);
* fails: anything that reaches for ``SparkContext``, which a Connect session does not have
  (PySpark raises ``PySparkAttributeError [JVM_ATTRIBUTE_NOT_SUPPORTED]``): the aligned
  sink's slot check and its driver vote server (``sc.master``, ``sc.getConf()``), a sink
  without ``parallelism`` (``defaultParallelism``), and ``MetricsAccumulator`` (Spark
  accumulators). The kit raises its own typed error naming Spark Connect for each
  (``connectors.stage.SparkConnectError``, ``connectors.async_io.AsyncConfigError``),
  before anything is logged or written.

Barrier ``mapInArrow`` itself works under Connect: with the slot check skipped, the aligned
sink with ``vote_channel="barrier"`` committed exactly once in an exploration run (see
docs/deploying.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from connectors.verify import check_exactly_once, produce_input
from integration_tests.connect.conftest import run_client

pytestmark = [pytest.mark.connect, pytest.mark.spark, pytest.mark.timeout(900)]

RECORDS = 200
# PySpark's own errors for a missing SparkContext: not the kit's typed error.
RAW_CONNECT_ERRORS = {"PySparkAttributeError", "PySparkNotImplementedError"}


def test_a_query_runs(connect_url: str, tmp_path: Path) -> None:
    assert run_client(connect_url, "range", {}, tmp_path / "client.log") == {"ok": True, "sum": 45}


def test_kafka_source_and_unaligned_sink_exactly_once(
    connect_url: str, tmp_path: Path, kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    inp, out = new_topic("cn-in", partitions=2), new_topic("cn-out", partitions=3)
    produce_input(kafka_bootstrap, inp, RECORDS)
    sink_id = f"cn-{uuid.uuid4().hex[:10]}"
    cfg = {
        "bootstrap": kafka_bootstrap,
        "input_dir": str(tmp_path / "unused"),
        "checkpoint": str(tmp_path / "checkpoint"),
        "output_topic": out,
        "sink_id": sink_id,
        "mode": "unaligned",
        "parallelism": 2,
        "source": "kafka",
        "input_topic": inp,
        "max_offsets_per_trigger": RECORDS // 2,
    }
    assert run_client(connect_url, "pipeline", cfg, tmp_path / "client.log") == {"ok": True}
    report = check_exactly_once(kafka_bootstrap, input_topic=inp, output_topic=out, sink_id=sink_id)
    assert report.ok and report.committed_records == RECORDS, report.examples


def test_async_map_runs(connect_url: str, tmp_path: Path) -> None:
    result = run_client(connect_url, "async_map", {"rows": 50}, tmp_path / "client.log")
    assert result == {"ok": True, "rows": 50, "all_doubled": True}


def test_async_metrics_fail_at_start_with_a_typed_error(connect_url: str, tmp_path: Path) -> None:
    result = run_client(
        connect_url, "async_map", {"rows": 10, "metrics": True}, tmp_path / "client.log"
    )
    assert not result["ok"]
    assert result["error_type"] not in RAW_CONNECT_ERRORS, result
    assert "Spark Connect" in result["error"]

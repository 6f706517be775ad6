"""The kit under Spark Connect: what works, and what must fail at start with a typed error.

Findings with pyspark 4.3 (a Connect server on ``local[2]``):

* works: the ``kafka-rc`` source (``spark.dataSource.register`` and a streaming read),
  ``KafkaSink`` in ``foreachBatch`` (``foreachBatch`` pickles the sink, which ships its
  config only, into the server's foreachBatch Python process), ``async_map``
  (``mapInArrow``) and its metrics through observed metrics (``MetricsObservation``);
  aligned mode, the query binding and the default parallelism: test_connect_exactly_once.py;
* fails: ``MetricsAccumulator`` (Spark accumulators need the ``SparkContext``, which a
  Connect session does not have; PySpark would raise ``PySparkAttributeError
  [JVM_ATTRIBUTE_NOT_SUPPORTED]``): the kit raises its own typed error
  (``txn.TxnCode.CONFIG``) naming what to use instead.
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


def test_async_metrics_accumulator_fails_at_start_with_a_typed_error(
    connect_url: str, tmp_path: Path
) -> None:
    result = run_client(
        connect_url, "async_map", {"rows": 10, "metrics": "accumulator"}, tmp_path / "client.log"
    )
    assert not result["ok"]
    assert result["error_type"] not in RAW_CONNECT_ERRORS, result
    assert "MetricsObservation" in result["error"]


def test_async_metrics_through_observed_metrics(connect_url: str, tmp_path: Path) -> None:
    result = run_client(
        connect_url, "async_map", {"rows": 50, "metrics": "observation"}, tmp_path / "client.log"
    )
    assert result == {
        "ok": True,
        "rows": 50,
        "all_doubled": True,
        "metrics": {
            "rows_in": 50,
            "rows_out": 50,
            "requests": 50,
            "latency_samples": 50,
            "columns": ["id", "doubled"],
        },
    }

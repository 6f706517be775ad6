"""Spark Connect client scenarios, one per process: ``python -m integration_tests.connect._client``.

Usage: ``python -m integration_tests.connect._client SCENARIO URL ARGS_JSON``. The process
creates a Connect session on URL (``sc://...``), runs the scenario and prints one line
``RESULT {json}``: ``{"ok": true, ...}`` or ``{"ok": false, "error_type", "error"}``.

A process of its own per client, because a Connect session switches its whole process
into Connect mode (see ``integration_tests.support.spark_connect``). Functions defined here run
as ``__main__`` and so travel to the server's Python workers by value.

Scenarios:

* ``range``: a trivial query (the smoke test);
* ``pipeline``: ``connectors.demo.app.run_query`` with ``PipelineConfig(**args)``: the streaming
  query, its source (files or ``kafka-rc``) and ``KafkaSink`` in ``foreachBatch``;
* ``sink_batch``: ``KafkaSink(**args["sink"])(df, 0)`` called from the client on a batch
  DataFrame of the input topic;
* ``bare_pipeline``: the ``pipeline`` query of ``PipelineConfig(**args)``, but its
  ``KafkaSink`` built without ``checkpoint_location`` (the refusal under Connect);
* ``async_map``: ``connectors.async_io.async_map`` over ``spark.range(args["rows"])`` (two
  partitions); ``args["metrics"]``: ``"accumulator"`` (a ``MetricsAccumulator``, refused under
  Connect) or ``"observation"`` (a ``MetricsObservation``, whose value is returned).
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from typing import Any


def _range(spark: Any, _: dict[str, Any]) -> dict[str, Any]:
    return {"sum": spark.range(10).selectExpr("sum(id) AS s").collect()[0]["s"]}


def _pipeline(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    from connectors.demo.app import PipelineConfig, run_query

    run_query(spark, PipelineConfig(**args))
    return {}


def _sink_batch(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    from connectors.demo.app._chunks import SPARK_SCHEMA_DDL
    from connectors.demo.app._config import ORDER_COLUMNS
    from connectors.kafka import KafkaSink
    from connectors.verify import read_committed_topic

    rows = [
        (r.key.decode() if r.key is not None else None, r.value, r.partition, r.offset)
        for r in read_committed_topic(args["bootstrap"], args["input_topic"])
    ]
    df = spark.createDataFrame(rows, SPARK_SCHEMA_DDL)
    sink = KafkaSink(
        args["bootstrap"],
        args["output_topic"],
        args["sink_id"],
        order_by=ORDER_COLUMNS,
        **args["sink"],
    )
    try:
        result = sink(df, 0)
    finally:
        sink.close()
    return {
        "committed": result.committed,
        "rows": sum(r.rows for r in result.reports),
        "partitions": len(result.reports),
    }


def _bare_pipeline(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    from connectors.demo.app import PipelineConfig
    from connectors.demo.app._config import ORDER_COLUMNS
    from connectors.demo.app._pipeline import input_stream
    from connectors.kafka import KafkaSink

    cfg = PipelineConfig(**args)
    sink = KafkaSink(cfg.bootstrap, cfg.output_topic, cfg.sink_id, order_by=ORDER_COLUMNS)
    query = (
        input_stream(spark, cfg)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", cfg.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return {}


async def _double(row: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"doubled": row["id"] * 2}


def _async_map(spark: Any, args: dict[str, Any]) -> dict[str, Any]:
    from connectors.async_io import AsyncConfig, async_map
    from connectors.async_io._observe import MetricsObservation
    from connectors.async_io._spark import MetricsAccumulator

    kind = args.get("metrics")
    metrics = {None: None, "accumulator": MetricsAccumulator, "observation": MetricsObservation}
    made = metrics[kind]
    observer = made(spark) if made is MetricsAccumulator else made() if made else None
    df = async_map(
        spark.range(0, args["rows"], 1, 2),
        _double,
        output_schema="doubled long",
        config=AsyncConfig(capacity=4),
        metrics=observer,
    )
    rows = df.collect()
    result = {"rows": len(rows), "all_doubled": all(r["doubled"] == 2 * r["id"] for r in rows)}
    if isinstance(observer, MetricsObservation):
        m = observer.value
        result["metrics"] = {
            "rows_in": m.rows_in,
            "rows_out": m.rows_out,
            "requests": m.requests,
            "latency_samples": m.latency.count,
            "columns": df.columns,
        }
    return result


SCENARIOS = {
    "range": _range,
    "pipeline": _pipeline,
    "sink_batch": _sink_batch,
    "bare_pipeline": _bare_pipeline,
    "async_map": _async_map,
}


def main() -> int:
    name, url, raw = sys.argv[1:4]
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        result = {"ok": True, **SCENARIOS[name](spark, json.loads(raw))}
    except Exception as exc:  # noqa: BLE001 - the result line reports any failure
        traceback.print_exc()
        # The whole message: the error a test looks for sits after the foreachBatch
        # process's traceback, whose length varies (chained exceptions); 4000 characters
        # left it at 1,788 with no chaining.
        result = {"ok": False, "error_type": type(exc).__name__, "error": str(exc)}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

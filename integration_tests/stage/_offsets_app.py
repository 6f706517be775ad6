"""A driver that runs a few micro-batches of a rate source into an exactly-once KafkaSink.

``python -m integration_tests.stage._offsets_app BOOTSTRAP TOPIC SINK_ID CHECKPOINT BATCHES``:
the default trigger (one batch after the
other). Spark's default logging (WARN) and Python's at INFO go to stderr, as a user's driver
would log them; the lines :data:`STARTED` and :data:`STOPPING` mark where the query ran.
Used by ``test_input_offsets.py`` to read the driver log of a multi-batch query.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from pyspark.sql import SparkSession

from connectors.kafka import KafkaSink

STARTED = "offsets-app: query started"
STOPPING = "offsets-app: stopping the query"
RUN_TIMEOUT_S = 240.0
"""Seconds the batches may take on a busy machine before the app gives up."""
POLL_S = 0.2
"""Seconds between two looks at the query's progress."""


def main(bootstrap: str, topic: str, sink_id: str, checkpoint: str, batches: int) -> int:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("offsets-app")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.adaptive.enabled", "false")  # Spark warns that streams ignore it
        .getOrCreate()
    )
    sink = KafkaSink(bootstrap, topic, sink_id)
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", "20")
        .load()
        .selectExpr("CAST(value AS STRING) AS key", "CAST(value AS STRING) AS value")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    print(STARTED, file=sys.stderr, flush=True)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline and query.exception() is None:
        progress = query.lastProgress
        if progress is not None and progress["batchId"] >= batches - 1:
            break
        time.sleep(POLL_S)
    print(STOPPING, file=sys.stderr, flush=True)
    failed = query.exception()
    query.stop()
    sink.close()
    spark.stop()
    return 1 if failed is not None else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    raise SystemExit(main(args[0], args[1], args[2], args[3], int(args[4])))

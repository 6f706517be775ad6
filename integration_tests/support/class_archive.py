"""Write a class data sharing archive of Spark's JVM for the test runs (``make test``).

The suite starts a few hundred Spark JVMs (each test session's driver, every end-to-end
application, cluster daemons); each loads and verifies some ten thousand classes from
Spark's jars before it does anything. ``python -m integration_tests.support.class_archive``
runs a small Spark workload (a batch query with a shuffle and Arrow through a Python
worker, a streaming query from files through ``foreachBatch``) in the demo application's
session, in a JVM started with ``-XX:ArchiveClassesAtExit=FILE``: at its exit the JVM
writes the classes it loaded to ``FILE``. A JVM started with ``-XX:SharedArchiveFile=FILE``
maps them instead (JDK 13+; measured 14 s against 8 s of CPU for a Spark start and a small
query). A JVM whose class path or JDK differs from the archive's ignores it, and so does
one whose archive file is missing: the archive saves time, it changes no behaviour.

The Makefile writes the archive once per venv and names it in the tests' JVM options.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

# Seconds the streaming query may take (a JVM start on a busy machine, a few batches).
STREAM_TIMEOUT_S = 300.0
ROWS = 1000
# Seconds the JVM may take to write the archive (some 160 MB) and exit.
JVM_EXIT_TIMEOUT_S = 120.0


def workload(spark: Any, tmp: Path) -> None:
    """Run what the suite's Spark JVMs run at start: SQL, a shuffle, Arrow, a stream."""
    frame = spark.range(ROWS).selectExpr("id", "id % 7 AS k", "CAST(id AS STRING) AS v")
    frame.groupBy("k").count().collect()
    frame.mapInArrow(lambda batches: batches, frame.schema).count()
    source = tmp / "input"
    frame.repartition(2).write.parquet(str(source))
    seen: list[int] = []
    query = (
        spark.readStream.schema(frame.schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.foreachBatch(lambda df, batch_id: seen.append(df.count()))
        .option("checkpointLocation", str(tmp / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(STREAM_TIMEOUT_S):
        query.stop()
        raise TimeoutError(f"the streaming query did not finish in {STREAM_TIMEOUT_S} s")
    if sum(seen) != ROWS:
        raise RuntimeError(f"the streaming query read {sum(seen)} rows of {ROWS}")


def main() -> int:
    """Run the workload in the demo application's session (JVM options from the caller)."""
    from connectors.demo.app._pipeline import make_spark

    spark = make_spark("local[2]", app_name="class-archive")
    gateway: Any = spark.sparkContext._gateway
    jvm = gateway.proc  # the JVM's process (spark-submit execs java)
    try:
        with tempfile.TemporaryDirectory(prefix="class-archive-") as tmp:
            workload(spark, Path(tmp))
    finally:
        spark.stop()
    # The JVM exits when its stdin closes, and writes the archive on its way out: wait for
    # that, so that no test JVM starts while the file is half written.
    jvm.stdin.close()
    return 0 if jvm.wait(timeout=JVM_EXIT_TIMEOUT_S) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

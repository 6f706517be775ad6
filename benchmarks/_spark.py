"""The SparkSession of the sink benchmarks: ``local[2]``, settings of the demo's session.

Same settings as ``connectors.demo.app.make_spark`` (Arrow on, Python worker reuse, two
shuffle partitions), except that the web UI, whose REST API the epoch profile reads
task metrics from, can be switched on.
"""

from __future__ import annotations

import os
import sys
from typing import Any

MASTER = "local[2]"


def bench_session(app_name: str, *, ui: bool = False) -> Any:
    """Create the benchmark's SparkSession (the environment must be set before: workers)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(MASTER)
        .appName(app_name)
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "false")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark

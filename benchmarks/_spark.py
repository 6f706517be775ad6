"""The SparkSession of the sink benchmarks: ``local[2]``, settings of the demo's session.

Same settings as ``connectors.demo.app.make_spark`` (Arrow on, Python worker reuse, two
shuffle partitions), except that the web UI, whose REST API the epoch profile reads
task metrics from, can be switched on.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

MASTER = "local[2]"
# Attempts of a benchmark step whose streaming query fails: on a busy machine a Python worker
# can miss Spark's fixed connect-back timeout and fail the query at start ("Python worker
# failed to connect back"); the step is then made again from the start.
QUERY_ATTEMPTS = 5

T = TypeVar("T")


class QueryFailed(RuntimeError):
    """A benchmark's streaming query stopped with an error (the step may be made again)."""


def with_query_attempts(step: Callable[[], T], what: str, console: Console) -> T:
    """Run ``step``; when its query fails, run it again, up to ``QUERY_ATTEMPTS`` in all."""
    from pyspark.errors import StreamingQueryException

    for attempt in range(1, QUERY_ATTEMPTS + 1):
        try:
            return step()
        except (QueryFailed, StreamingQueryException) as e:
            if attempt == QUERY_ATTEMPTS:
                raise
            first = str(e).strip().splitlines()[0][:160]
            console.print(f"[yellow]{what}, attempt {attempt} failed ({first}); again")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def checkpoint_dir(prefix: str) -> Iterator[str]:
    """A temporary directory for streaming checkpoints, deleted on exit."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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


def open_job_bench(
    stack: contextlib.ExitStack,
    app_name: str,
    *,
    bootstrap_servers: str | None,
    log_path: Path | None,
    console: Console,
    nodes: int = 1,
) -> tuple[str, Any, Progress]:
    """Set up a Spark job benchmark on ``stack``: its broker, session and progress display.

    With ``log_path``, every Kafka client of this process and of the Python workers logs
    its protocol requests there (``benchmarks._requests``; None: no request counting).
    ``nodes``: of the minikafka cluster started without ``bootstrap_servers``
    (``benchmarks._broker``). Returns the bootstrap address, the SparkSession and the started rich ``Progress``.
    """
    from benchmarks import _requests
    from benchmarks._broker import broker

    if log_path is not None:
        os.environ.update(_requests.worker_env())
        _requests.install()
        stack.enter_context(_requests.capture_stderr(log_path))
    bootstrap = stack.enter_context(broker(bootstrap_servers, nodes))
    spark = bench_session(app_name)
    stack.callback(spark.stop)
    progress = stack.enter_context(
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
    )
    return bootstrap, spark, progress

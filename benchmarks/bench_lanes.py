"""New producers per epoch when Spark runs more Python workers than the sink has lanes.

Run ``python -m benchmarks.bench_lanes`` (``--help`` for options). It starts a minikafka
broker in a subprocess (or uses ``--bootstrap-servers``) and a ``local[2]`` session, with
``--extra-workers`` first runs one job whose tasks each evaluate a Python UDF beneath
``mapInArrow`` (two Python workers per task: Spark then keeps four), counts the session's
Python workers, and writes ``--epochs`` small epochs of two partitions with an
exactly-once sink per mode, printing ``clients_new`` (write tasks served by newly
initialized producers) per epoch.

Why: each Python worker claims one producer lane of a sink (``producer_lanes``); a worker
beyond them writes on the shared lane and prepares nothing, so the tasks Spark hands it
(it hands them to every worker in turn) initialize producers. benchmarks/HISTORY.md,
section 6.2, and docs/kafka-sink.md, "Producer lanes".
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks._broker import broker
from benchmarks._spark import bench_session
from connectors.kafka import KafkaSink

RESULTS = Path(__file__).parent / "results"
# Seconds for topic creation.
ADMIN_TIMEOUT_S = 30.0
# One-row tasks of the job that counts Python workers: Spark hands each task to the worker
# idle longest, so a job of more tasks than workers reaches every one of them.
COUNT_TASKS = 16


def _pids(batches: Iterator[Any]) -> Iterator[Any]:
    import os

    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_pydict({"pid": [os.getpid()] * batch.num_rows})


def _passthrough(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def python_workers(spark: Any) -> int:
    """Count the session's Python workers (one-row tasks report their process id)."""
    df = spark.range(COUNT_TASKS, numPartitions=COUNT_TASKS).mapInArrow(_pids, "pid long")
    return len({row.pid for row in df.collect()})


def add_workers(spark: Any) -> None:
    """Run one job whose tasks hold two Python workers each (a UDF beneath ``mapInArrow``)."""
    from pyspark.sql.functions import udf

    plus = udf(lambda x: x + 1, "long")
    df = spark.range(100, numPartitions=2).select(plus("id").alias("id"))
    df.mapInArrow(_passthrough, "id long").collect()


def run_mode(
    spark: Any, bootstrap: str, mode: str, args: argparse.Namespace, tick: Callable[[], None]
) -> list[int]:
    """Write ``args.epochs`` epochs with a new sink; return its ``clients_new`` per epoch."""
    topic = f"bench-lanes-{mode}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(ADMIN_TIMEOUT_S)
    options: dict[str, Any] = {"parallelism": 2, "mode": mode}
    if args.lanes:
        options["producer_lanes"] = args.lanes
    sink = KafkaSink(bootstrap, topic, f"bench-lanes-{uuid.uuid4().hex[:10]}", **options)
    try:
        for epoch in range(args.epochs):
            start = epoch * args.rows
            df = spark.range(start, start + args.rows, numPartitions=3).selectExpr(
                "concat('k', id) AS key", "concat('v', id) AS value"
            )
            sink(df, epoch)
            tick()
        return [m.clients_new for m in sink.metrics()]
    finally:
        sink.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap-servers", default=None, help="a Kafka cluster")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--rows", type=int, default=60, help="rows per epoch")
    parser.add_argument("--modes", default="aligned,unaligned")
    parser.add_argument(
        "--extra-workers", action="store_true", help="first run a job of two workers per task"
    )
    parser.add_argument(
        "--lanes", type=int, default=0, help="producer_lanes (0: the sink's default)"
    )
    args = parser.parse_args(argv)
    console = Console()
    modes = args.modes.split(",")
    results: dict[str, Any] = {"args": vars(args), "load_average": os.getloadavg()}
    spark = bench_session("bench-lanes")
    try:
        if args.extra_workers:
            add_workers(spark)
        results["python_workers"] = python_workers(spark)
        console.print(f"Python workers of the session: {results['python_workers']}")
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
        with (
            broker(args.bootstrap_servers) as bootstrap,
            Progress(*columns, TimeElapsedColumn(), console=console) as progress,
        ):
            for mode in modes:
                task = progress.add_task(f"{mode} epochs", total=args.epochs)
                started = time.monotonic()
                new = run_mode(spark, bootstrap, mode, args, lambda t=task: progress.advance(t))
                results[mode] = new
                console.print(
                    f"{mode}: clients_new per epoch {new}; {time.monotonic() - started:.1f} s"
                )
    finally:
        spark.stop()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bench_lanes.json"
    out.write_text(json.dumps(results, indent=2))
    console.print(f"saved {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

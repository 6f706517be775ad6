"""Throughput of KafkaSink on a standalone Spark cluster with one and with two workers.

Run ``python -m benchmarks.bench_cluster`` (``--help`` for options). It starts a minikafka
broker (or uses ``--bootstrap-servers`` / ``KAFKA_BOOTSTRAP_SERVERS``), then for each cluster
size (one worker, then two; one core each, started on loopback with pyspark's own
``bin/spark-class`` by ``integration_tests.support.spark_cluster``) runs the same job from this
process as driver: ``--epochs`` epochs of ``--rows`` rows of ``--size`` bytes, a cached
DataFrame handed to the sink's ``foreachBatch`` function with consecutive batch ids, with

1. ``eos-unaligned``: KafkaSink exactly-once, unaligned, two write partitions on every
   cluster size (the same job, so the difference is the executors);
2. ``eos-aligned``: KafkaSink exactly-once, aligned, one write partition per worker (a
   barrier stage needs one slot per write partition).

The table shows the median epoch's rows/s and MB/s per cluster size and the speed-up of two
workers over one; the plot is saved as ``benchmarks/results/cluster.png`` (plus JSON).
On the shared 2-core build machine both workers, the broker and the driver share two cores,
so the speed-up says little about real clusters; run it where executors have cores of their
own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console

from benchmarks._broker import broker
from benchmarks._plot import bar_plot
from benchmarks._table import print_table
from integration_tests.support.spark_cluster import StandaloneCluster

RESULTS = Path(__file__).parent / "results"
# Seconds for topic creation.
ADMIN_TIMEOUT_S = 30.0
PARTITIONS = 3
UNALIGNED_TASKS = 2
WORKER_COUNTS = (1, 2)


@dataclass(frozen=True)
class Result:
    workers: int
    variant: str
    parallelism: int
    rows: int
    record_bytes: int
    epoch_seconds: tuple[float, ...]

    @property
    def rows_per_s(self) -> float:
        return self.rows / statistics.median(self.epoch_seconds)

    @property
    def mb_per_s(self) -> float:
        return self.rows_per_s * self.record_bytes / 1e6


def _session(cluster: StandaloneCluster) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(f"bench-cluster-{cluster.worker_count}w")
    for key, value in {
        **cluster.app_conf(),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
    }.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _run(
    spark: Any,
    bootstrap: str,
    workdir: Path,
    variant: str,
    parallelism: int,
    frame: Any,
    epochs: int,
) -> list[float]:
    from connectors.kafka import KafkaSink

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench-cl-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=ADMIN_TIMEOUT_S)
    sink = KafkaSink(
        bootstrap,
        topic,
        f"bench-{uuid.uuid4().hex[:8]}",
        mode=variant.removeprefix("eos-"),
        parallelism=parallelism,
        epoch_log=workdir / f"{topic}.log",
    )
    seconds = []
    try:
        for batch in range(epochs + 1):  # batch 0 warms up producers and Python workers
            started = time.monotonic()
            sink(frame, batch)
            if batch:
                seconds.append(time.monotonic() - started)
    finally:
        sink.close()
    return seconds


def _measure(
    workers: int, args: argparse.Namespace, bootstrap: str, workdir: Path, console: Console
) -> list[Result]:
    with StandaloneCluster(workdir / f"cluster-{workers}", workers) as cluster:
        os.environ.update(cluster.app_env())
        spark = _session(cluster)
        try:
            from connectors.stage._slots import wait_for_task_slots

            slots = wait_for_task_slots(spark, workers)
            console.print(f"{workers} worker(s): {slots.total} task slot(s) registered")
            frame = (
                spark.range(args.rows)
                .selectExpr(
                    "cast(id % 1000 as string) as key",
                    f"cast(rpad(lpad(cast(id as string), 12, '0'), {args.size}, 'x') as binary) "
                    "as value",
                )
                .repartition(workers)
                .cache()
            )
            frame.count()
            results = []
            for variant, parallelism in (
                ("eos-unaligned", UNALIGNED_TASKS),
                ("eos-aligned", workers),
            ):
                console.print(f"  {variant}, {parallelism} write partition(s) ...")
                seconds = _run(spark, bootstrap, workdir, variant, parallelism, frame, args.epochs)
                results.append(
                    Result(workers, variant, parallelism, args.rows, args.size, tuple(seconds))
                )
        finally:
            spark.stop()
    return results


def _report(results: list[Result], console: Console) -> None:
    base = {r.variant: r.rows_per_s for r in results if r.workers == 1}
    print_table(
        "KafkaSink on a standalone cluster (median epoch)",
        ["workers", "variant", "write partitions", "rows/s", "MB/s", "vs 1 worker"],
        [
            [
                r.workers,
                r.variant,
                r.parallelism,
                r.rows_per_s,
                r.mb_per_s,
                f"{r.rows_per_s / base[r.variant]:.2f}x",
            ]
            for r in results
        ],
        console,
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cluster.json").write_text(
        json.dumps([{**asdict(r), "rows_per_s": r.rows_per_s} for r in results], indent=2)
    )
    path = bar_plot(
        RESULTS / "cluster.png",
        f"KafkaSink on a standalone cluster ({results[0].rows:,} rows x "
        f"{results[0].record_bytes} B per epoch)",
        [f"{r.variant}\n{r.workers} worker(s)" for r in results],
        [r.rows_per_s for r in results],
        "rows/s (median epoch)",
    )
    console.print(f"plot: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000, help="rows per epoch")
    parser.add_argument("--size", type=int, default=100, help="record size in bytes")
    parser.add_argument("--epochs", type=int, default=3, help="measured epochs per case")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    args = parser.parse_args(argv)
    console = Console()
    results: list[Result] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp,
        broker(args.bootstrap_servers) as bootstrap,
    ):
        for workers in WORKER_COUNTS:
            results += _measure(workers, args, bootstrap, Path(tmp), console)
    _report(results, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

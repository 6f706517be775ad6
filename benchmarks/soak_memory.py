"""Memory soak: does a long-running exactly-once query keep its memory flat?

Run ``python -m benchmarks.soak_memory --minutes 60`` (part of ``make soak``;
``SOAK_MINUTES`` sets the minutes there). It starts a minikafka broker (or uses
``KAFKA_BOOTSTRAP_SERVERS``) and a local[2] SparkSession, then:

1. the query: Spark's ``rate`` source at ``--rate`` rows/s (default 200; JSON values of
   about 45 bytes, as in ``benchmarks._job``) -> ``KafkaSink`` exactly-once (aligned) with
   a ``processingTime`` trigger of ``--trigger`` seconds (default 1): small steady batches.
   The ``rate`` source plans in the JVM: a ``kafka-rc`` source starts a Python planner
   process per query, which on a very busy machine can miss Spark's fixed connect-back
   timeout and fail the query at start, and the soak is about the sink's memory;
2. every ``--interval`` seconds (default 60) it records the resident memory (RSS) of the
   driver (this process), of the Spark JVM and of each Python process below it (workers,
   the daemon, the source's planner), and the JVM heap in use right after a full GC;
3. at the end it prints the samples and the growth of each series from minute
   ``--settle`` (default 10, or half the run when shorter) to the end, with the goal of
   issue 36 (less than 5 %) as target lines, and saves a plot and JSON under
   ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import Progress

from benchmarks import _memory
from benchmarks._job import ADMIN_TIMEOUT_S, OUTPUT_PARTITIONS, QUERY_POLL_S
from benchmarks._plot import Series, line_plot
from benchmarks._spark import QueryFailed, checkpoint_dir, with_query_attempts
from benchmarks._table import Cell, print_table
from benchmarks._targets import Target, as_dicts, at_most, print_targets

RESULTS = Path(__file__).parent / "results"
COMMAND = "python -m benchmarks.soak_memory"
# Issue 36's goal: less than this growth after the first minutes.
MAX_GROWTH_PCT = 5.0


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One reading: minute since the query started, RSS per process, JVM heap, epochs so far."""

    minute: float
    driver_mib: float
    jvm_mib: float
    jvm_heap_mib: float  # in use right after a full GC
    workers_mib: dict[str, float] = field(default_factory=dict)  # "pid module" -> RSS
    epochs: int = 0

    @property
    def workers_total_mib(self) -> float:
        """All Python processes below the JVM together."""
        return sum(self.workers_mib.values())


def _python_module(cmd: str) -> str:
    """The ``-m`` module of a Python command line ("python" without one)."""
    parts = cmd.split()
    return parts[parts.index("-m") + 1] if "-m" in parts[:-1] else "python"


def sample(spark: Any, minute: float, epochs: int) -> Sample:
    """Read every process's RSS and the JVM heap after a full GC."""
    procs = _memory.descendants(os.getpid())
    java = [pid for pid, cmd in procs.items() if "java" in cmd.split(" ", 1)[0]]
    workers = {
        f"{pid} {_python_module(cmd)}": rss
        for pid, cmd in procs.items()
        if pid not in java and "pyspark" in cmd and (rss := _memory.rss_mib(pid)) is not None
    }
    jvm = spark._jvm  # noqa: SLF001 - PySpark has no public handle on the JVM runtime
    runtime = jvm.java.lang.Runtime.getRuntime()
    jvm.java.lang.System.gc()
    heap = (runtime.totalMemory() - runtime.freeMemory()) / 2**20
    return Sample(
        minute=minute,
        driver_mib=_memory.rss_mib(os.getpid()) or 0.0,
        jvm_mib=sum(_memory.rss_mib(p) or 0.0 for p in java),
        jvm_heap_mib=heap,
        workers_mib=workers,
        epochs=epochs,
    )


def soak(args: argparse.Namespace, console: Console) -> list[Sample]:
    """Run the query for ``args.minutes`` and sample memory every ``args.interval`` seconds."""
    from benchmarks._broker import broker
    from benchmarks._spark import bench_session
    from connectors.kafka import KafkaSink

    samples: list[Sample] = []
    out_topic = f"soak-out-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(broker(args.bootstrap_servers))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(out_topic, OUTPUT_PARTITIONS, 1)])[out_topic].result(
            timeout=ADMIN_TIMEOUT_S
        )
        spark = bench_session("soak-memory")
        stack.callback(spark.stop)
        sink = KafkaSink(bootstrap, out_topic, f"{out_topic}-sink", guarantee="exactly-once")
        stack.callback(sink.close)
        checkpoints = stack.enter_context(checkpoint_dir("soak-memory-ck-"))
        epochs = 0

        def count(_m: Any) -> None:
            nonlocal epochs
            epochs += 1

        sink.observe_metrics(count)
        query = with_query_attempts(
            lambda: _started_query(spark, args.rate, sink, args.trigger, checkpoints),
            "soak query start",
            console,
        )
        stack.callback(query.stop)
        started = time.monotonic()
        progress = stack.enter_context(Progress(console=console))
        task = progress.add_task("soak", total=args.minutes * 60)
        next_sample = started
        while (elapsed := time.monotonic() - started) < args.minutes * 60 + 1:
            if not query.isActive:
                msg = f"the soak query stopped: {query.exception()}"
                raise RuntimeError(msg)
            if time.monotonic() >= next_sample:
                s = sample(spark, elapsed / 60.0, epochs)
                samples.append(s)
                progress.update(
                    task,
                    description=f"minute {s.minute:.0f}: driver {s.driver_mib:.0f} MiB, "
                    f"JVM {s.jvm_mib:.0f} MiB (heap {s.jvm_heap_mib:.0f}), "
                    f"workers {s.workers_total_mib:.0f} MiB, {s.epochs} epochs",
                )
                next_sample += args.interval
            progress.update(task, completed=min(elapsed, args.minutes * 60))
            time.sleep(QUERY_POLL_S)
    return samples


def _started_query(spark: Any, rate: int, sink: Any, trigger_s: float, checkpoints: str) -> Any:
    """Start ``rate`` -> ``sink`` with a new checkpoint; return it once a batch has run.

    Raises :class:`QueryFailed` when the query stops before (its start is then made again).
    """
    from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias

    raw = spark.readStream.format("rate").option("rowsPerSecond", rate).load()
    frame = raw.select(
        F.col("value").cast("string").alias("key"),
        F.to_json(F.struct(F.col("value").alias("id"), F.col("timestamp").alias("ts"))).alias(
            "value"
        ),
    )
    query = (
        frame.writeStream.foreachBatch(sink)
        .trigger(processingTime=f"{trigger_s} seconds")
        .option("checkpointLocation", f"{checkpoints}/{uuid.uuid4().hex[:8]}")
        .start()
    )
    while query.lastProgress is None:
        if not query.isActive:
            msg = f"the soak query stopped at start: {query.exception()}"
            raise QueryFailed(msg)
        time.sleep(QUERY_POLL_S)
    return query


def series(samples: Sequence[Sample]) -> dict[str, list[tuple[float, float]]]:
    """The measured series, ``(minute, MiB)`` each: driver, JVM, heap, workers together."""
    return {
        "driver RSS": [(s.minute, s.driver_mib) for s in samples],
        "JVM RSS": [(s.minute, s.jvm_mib) for s in samples],
        "JVM heap after GC": [(s.minute, s.jvm_heap_mib) for s in samples],
        "Python workers RSS (sum)": [(s.minute, s.workers_total_mib) for s in samples],
    }


def targets(samples: Sequence[Sample], settle: float) -> list[Target]:
    """Less than ``MAX_GROWTH_PCT`` growth of each series from minute ``settle`` to the end."""
    return [
        at_most(
            "soak_memory",
            f"{name} grows < {MAX_GROWTH_PCT:g} % after minute {settle:g}",
            _memory.growth_pct(points, settle),
            MAX_GROWTH_PCT,
            "{:+.1f} %",
        )
        for name, points in series(samples).items()
    ]


def plot(samples: Sequence[Sample], path: Path, subtitle: str) -> Path:
    """Two panels over minutes: the series (MiB), and each Python process (MiB)."""
    workers: Series = {}
    for name in sorted({n for s in samples for n in s.workers_mib}):
        pts = [(s.minute, s.workers_mib[name]) for s in samples if name in s.workers_mib]
        workers[name] = ([m for m, _ in pts], [v for _, v in pts])
    main: Series = {n: ([m for m, _ in p], [v for _, v in p]) for n, p in series(samples).items()}
    return line_plot(
        path,
        f"Memory over a streaming exactly-once query\n{subtitle}",
        [("minutes", "MiB", main, {}), ("minutes (Python processes)", "MiB", workers, {})],
        log2_x=False,
    )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the query runs")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--settle", type=float, default=None, help="minute growth counts from")
    parser.add_argument("--rate", type=int, default=200, help="input rows/s")
    parser.add_argument("--trigger", type=float, default=1.0, help="processingTime seconds")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--out", default="soak_memory", help="file stem under results/")
    args = parser.parse_args(argv)
    if args.settle is None:
        args.settle = 10.0 if args.minutes >= 20 else args.minutes / 2
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    console = Console(width=max(Console().width, 140))
    load_before = os.getloadavg()
    samples = soak(args, console)
    load_after = os.getloadavg()
    load = f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    subtitle = (
        f"local[2], rate -> KafkaSink exactly-once, {args.rate} rows/s, "
        f"trigger {args.trigger:g} s, {args.minutes:g} min, {load}"
    )
    rows: list[list[Cell]] = [
        [
            round(s.minute, 1),
            s.epochs,
            round(s.driver_mib, 1),
            round(s.jvm_mib, 1),
            round(s.jvm_heap_mib, 1),
            len(s.workers_mib),
            round(s.workers_total_mib, 1),
        ]
        for s in samples
    ]
    print_table(
        f"Memory every {args.interval:g} s ({subtitle})",
        ["minute", "epochs", "driver MiB", "JVM MiB", "heap MiB", "Python procs", "Python MiB"],
        rows,
        console,
    )
    measured = targets(samples, args.settle)
    print_targets(measured, console)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(
        json.dumps(
            {
                "command": " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])]),
                "load_average": {"before": load_before, "after": load_after},
                "samples": [asdict(s) for s in samples],
                "targets": as_dicts(measured),
            },
            indent=1,
        )
    )
    png = plot(samples, RESULTS / f"{args.out}.png", subtitle)
    console.print(f"saved {png} and {RESULTS / f'{args.out}.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

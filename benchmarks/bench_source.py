"""Read throughput of the kafka-rc source vs a plain confluent-kafka consumer (the ceiling).

Run ``python -m benchmarks.bench_source`` (``--help`` for options). It starts a minikafka
broker in a subprocess, or uses ``KAFKA_BOOTSTRAP_SERVERS`` when that is set, then:

1. produces N records with 100-byte values into a one-partition topic;
2. ceiling: reads them with a plain read_committed confluent-kafka consumer loop in this
   process (``consume()`` in chunks, touching each value), until the position reaches N.
   It uses the source's librdkafka fetch settings and chunk size, so the two differ only
   in what Python does per poll;
3. reference: the same loop with Python's cyclic GC off (what the loop costs without the
   collections its messages trigger; not a target, shown to read the ratios by);
4. source task: runs the source's task-side read path (``read_range``: consumer, position
   end detection, Arrow batches) in this process, one range = one task;
5. Spark: ``spark.read.format("kafka-rc")`` on a local[1] session, one partition, one task,
   written to the ``noop`` sink (wall time incl. planning and Arrow transfer to the JVM);
6. Spark's fixed cost: the same read of one record (planning, scheduling, the Python
   worker, a consumer), to tell it from the cost per row;
7. Spark's own cost: the same N rows from a Python data source that builds them in memory
   (``benchmarks._memory_source``, no Kafka) read the same way, i.e. what Spark costs
   any Python source for them. With the task read path it gives the time both would take
   one after the other, printed as information beside the targets.

8. consumer reuse (``benchmarks._source_reuse``): micro-batches of 1,000 and 100,000 rows
   read one after the other, with a consumer per read (``kafkaConsumer.cache.capacity=0``,
   before) and with the worker's consumer cache (after): rows/s through the task read path
   and through a Spark stream, and the consumers each batch opened (task read path).
   ``--reuse-only`` runs just this section, ``--no-reuse`` skips it.

The phases run interleaved, ``--repeat`` rounds; each checks the rows it read and
keeps its best round (the machine is shared; the best round is the least disturbed one).
Results are printed as a table with the load average, then one line per target (issue
23: the source task's read path and the Spark read each >= 0.90x the ceiling), and saved
as PNG and JSON under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks import _source_reuse
from benchmarks._memory_source import NAME as MEMORY_ROWS
from benchmarks._memory_source import MemoryRows
from benchmarks._plot import bar_plot
from benchmarks._table import print_table
from benchmarks._targets import as_dicts, at_least
from connectors.kafka import register
from connectors.kafka._source import OffsetRange, SourceOptions
from connectors.kafka._source._fetch import ARROW_BATCH_ROWS, FETCH_QUEUE_BACKOFF_MS, read_range

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TARGET_RATIO = 0.90
"""The source's read path (task and through Spark) must reach this fraction of the ceiling."""
CLIENT_TIMEOUT_S = 120.0
"""Seconds for admin calls and producer flushes; generous on a busy machine."""
STALL_TIMEOUT_S = 60.0
"""Seconds the ceiling loop may go without progress before it is declared stuck."""
CONSUME_POLL_S = 0.5
"""Seconds one consume() call of the ceiling loop may block."""
PROGRESS_EVERY = 10_000
"""Records produced between two progress-bar refreshes."""
SMALL_BATCH, LARGE_BATCH = 1_000, 100_000
"""Rows per micro-batch of the consumer-reuse section."""


@dataclass(frozen=True)
class Result:
    """Best run of one phase."""

    phase: str
    rows: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


@contextlib.contextmanager
def bootstrap_servers() -> Iterator[str]:
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured
        return
    from minikafka import BrokerProcess

    with BrokerProcess() as broker:
        yield broker.bootstrap_servers


def prepare_topic(bootstrap: str, records: int, value_bytes: int, progress: Progress) -> str:
    topic = f"bench-source-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    value = b"x" * value_bytes
    task = progress.add_task("produce", total=records)
    for i in range(records):
        producer.produce(topic, value, key=b"%d" % i, partition=0)
        if i % PROGRESS_EVERY == 0:
            producer.poll(0)
            progress.update(task, completed=i)
    if producer.flush(CLIENT_TIMEOUT_S) != 0:
        raise RuntimeError("producer did not deliver every record")
    progress.update(task, completed=records)
    return topic


def ceiling(bootstrap: str, topic: str, records: int) -> int:
    """A plain consumer loop: consume chunks, touch each value, stop at position N.

    The same librdkafka fetch settings and chunk size as the source's, and like the
    source's, chunks never larger than what is left (``N - position``), so neither loop
    waits out a poll at the end of the records.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen, last_progress, position = 0, time.monotonic(), 0
    tp = [TopicPartition(topic, 0)]
    try:
        while position < records:
            chunk = max(1, min(ARROW_BATCH_ROWS, records - position))
            msgs = consumer.consume(chunk, timeout=CONSUME_POLL_S)
            for m in msgs:
                if m.error() is None:
                    m.value()
                    seen += 1
            if msgs:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise RuntimeError(f"ceiling loop stuck at {seen} rows")
            position = max(position, consumer.position(tp)[0].offset)
    finally:
        consumer.close()
    return seen


def source_task(bootstrap: str, topic: str, records: int) -> int:
    options = SourceOptions.from_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic})
    return sum(
        b.num_rows
        for b in read_range(options, OffsetRange(topic=topic, partition=0, start=0, end=records))
    )


def make_spark() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("bench-source")
        .config("spark.ui.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(MemoryRows)
    return spark


def spark_task(spark: Any, bootstrap: str, topic: str, records: int) -> int:
    df = (
        spark.read.format("kafka-rc")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("endingOffsets", json.dumps({topic: {"0": records}}))
        .load()
    )
    df.write.format("noop").mode("overwrite").save()
    return records  # verified separately: count() below is not part of the timing


def memory_task(spark: Any, topic: str, records: int, value_bytes: int) -> int:
    """The Spark read of ``spark_task`` from the in-memory source: Spark's own cost."""
    df = (
        spark.read.format(MEMORY_ROWS)
        .option("records", str(records))
        .option("value_bytes", str(value_bytes))
        .option("topic", topic)
        .load()
    )
    df.write.format("noop").mode("overwrite").save()
    return records


CEILING = "plain consumer loop (ceiling)"
GC_OFF = "consumer loop, GC off (reference)"
TASK = "kafka-rc task read path"
SPARK = "kafka-rc via Spark (1 task)"
SPARK_FIXED = "kafka-rc via Spark, 1 record (fixed cost)"
SPARK_OWN = "same rows from memory via Spark (Spark's own cost)"
NOT_READS = (SPARK_FIXED, SPARK_OWN)
"""Phases that do not read the topic (no ratio to the ceiling, not plotted)."""
TARGETS = {TASK: "source read path", SPARK: "source read path via Spark"}
"""Phases with a target, and the name of the target in the report line."""


def ceiling_gc_off(bootstrap: str, topic: str, records: int) -> int:
    """The ceiling loop with Python's cyclic GC off for its duration."""
    gc.disable()
    try:
        return ceiling(bootstrap, topic, records)
    finally:
        gc.enable()


Phase = tuple[str, int, Callable[[], int]]
"""A phase's name, the rows it must read, and the function that reads them."""


def best_of(phases: list[Phase], repeat: int) -> list[Result]:
    """Run ``phases`` interleaved ``repeat`` times; return each one's fastest run, in order."""
    best: dict[str, Result] = {}
    for _ in range(repeat):
        for name, records, fn in phases:
            t0 = time.perf_counter()
            rows = fn()
            elapsed = time.perf_counter() - t0
            if rows != records:
                raise RuntimeError(f"{name}: read {rows} rows, expected {records}")
            if name not in best or elapsed < best[name].seconds:
                best[name] = Result(name, rows, elapsed)
    return [best[name] for name, _, _ in phases]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark phases")
    parser.add_argument("--small-batches", type=int, default=30, help="1k-row batches (reuse)")
    section = parser.add_mutually_exclusive_group()
    section.add_argument("--no-reuse", action="store_true", help="skip the consumer-reuse section")
    section.add_argument("--reuse-only", action="store_true", help="only consumer reuse")
    args = parser.parse_args(argv)
    console = Console()
    load_before = os.getloadavg()
    with bootstrap_servers() as bootstrap:
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
        with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
            topic = prepare_topic(bootstrap, args.records, args.value_bytes, progress)
            spark = None if args.no_spark else make_spark()
            results = [] if args.reuse_only else read_phases(args, bootstrap, topic, spark)
            reuse: list[_source_reuse.ReuseResult] = []
            if not args.no_reuse:
                reuse = reuse_phases(args, bootstrap, topic, spark, progress)
    load = (load_before, os.getloadavg())
    if results:
        report(results, args, console, load)
    if reuse:
        report_reuse(reuse, args, console, load)
    return 0


def read_phases(args: argparse.Namespace, bootstrap: str, topic: str, spark: Any) -> list[Result]:
    """Phases 2-7 of the module docstring: the best round of each."""
    n = args.records
    phases: list[Phase] = [
        (CEILING, n, lambda: ceiling(bootstrap, topic, n)),
        (GC_OFF, n, lambda: ceiling_gc_off(bootstrap, topic, n)),
        (TASK, n, lambda: source_task(bootstrap, topic, n)),
    ]
    if spark is not None:
        count = (
            spark.read.format("kafka-rc")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
            .count()
        )
        if count != args.records:
            raise RuntimeError(f"Spark counted {count} rows, expected {args.records}")
        phases.append((SPARK, n, lambda: spark_task(spark, bootstrap, topic, n)))
        phases.append((SPARK_FIXED, 1, lambda: spark_task(spark, bootstrap, topic, 1)))
        own = functools.partial(memory_task, spark, topic, n, args.value_bytes)
        phases.append((SPARK_OWN, n, own))
    return best_of(phases, args.repeat)


def reuse_phases(
    args: argparse.Namespace, bootstrap: str, topic: str, spark: Any, progress: Progress
) -> list[_source_reuse.ReuseResult]:
    """Phase 8: the 100k-row batches read ``topic``, the 1k-row ones a topic of their own."""
    large = args.records // LARGE_BATCH
    if large < 2:
        raise SystemExit(f"--records must be at least {2 * LARGE_BATCH} for the reuse section")
    small_topic = prepare_topic(
        bootstrap, SMALL_BATCH * args.small_batches, args.value_bytes, progress
    )
    sizes = {SMALL_BATCH: (small_topic, args.small_batches), LARGE_BATCH: (topic, large)}
    task = progress.add_task("consumer reuse (rounds)", total=args.repeat * len(sizes))
    return _source_reuse.measure(
        bootstrap, sizes, args.repeat, spark, lambda: progress.advance(task)
    )


def report_reuse(
    results: list[_source_reuse.ReuseResult],
    args: argparse.Namespace,
    console: Console,
    load: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> None:
    """Print the reuse table; save its PNG and JSON."""
    load_text = f"load average {load[0][0]:.1f} before, {load[1][0]:.1f} after"
    title = f"kafka-rc consumer reuse, best of {args.repeat} ({load_text})"
    png = _source_reuse.report(results, title, RESULTS_DIR / "source_reuse.png", console)
    payload = {
        "command": " ".join(["python -m benchmarks.bench_source", *sys.argv[1:]]),
        "value_bytes": args.value_bytes,
        "repeat": args.repeat,
        "load_average": {"before": load[0], "after": load[1]},
        "results": [asdict(r) | {"rows_per_s": r.rows_per_s} for r in results],
    }
    out = RESULTS_DIR / "bench_source_reuse.json"
    out.write_text(json.dumps(payload, indent=2))
    console.print(f"saved {png} and {out}")


def report(
    results: list[Result],
    args: argparse.Namespace,
    console: Console,
    load: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> None:
    """Print the table and the target lines; save the PNG and the JSON."""
    ceiling_rps = results[0].rows_per_s
    rows = [
        [
            r.phase,
            r.rows,
            round(r.seconds, 3),
            round(r.rows_per_s),
            "-" if r.phase in NOT_READS else f"{r.rows_per_s / ceiling_rps:.2f}x",
        ]
        for r in results
    ]
    load_text = f"load average {load[0][0]:.1f} before, {load[1][0]:.1f} after"
    title = (
        f"kafka-rc read throughput, {args.value_bytes}-byte values, 1 partition, "
        f"best of {args.repeat} ({load_text})"
    )
    print_table(title, ["phase", "rows", "seconds", "rows/s", "of ceiling"], rows, console)
    ratios = print_targets(results, console)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    plotted = [r for r in results if r.phase not in NOT_READS]
    png = bar_plot(
        RESULTS_DIR / "source.png",
        f"kafka-rc read, {args.value_bytes} B values, 1 partition ({load_text})",
        [r.phase.replace(" (", "\n(") for r in plotted],
        [r.rows_per_s for r in plotted],
        "rows/s",
        [ceiling_rps * TARGET_RATIO if r.phase in TARGETS else None for r in plotted],
    )
    payload = {
        "records": args.records,
        "value_bytes": args.value_bytes,
        "repeat": args.repeat,
        "load_average": {"before": load[0], "after": load[1]},
        "results": [asdict(r) | {"rows_per_s": r.rows_per_s} for r in results],
        "target_ratio": TARGET_RATIO,
        "ratios_to_ceiling": ratios,
        # What benchmarks.summary reads: the command and the target lines (benchmarks._targets).
        "command": " ".join(["python -m benchmarks.bench_source", *sys.argv[1:]]),
        "targets": as_dicts(
            [
                at_least(
                    "bench_source",
                    f"{name} >= {TARGET_RATIO:.2f}x consumer loop",
                    ratios.get(phase),
                    TARGET_RATIO,
                    "x{:.2f}",
                )
                for phase, name in TARGETS.items()
            ]
        ),
    }
    out = RESULTS_DIR / "bench_source.json"
    out.write_text(json.dumps(payload, indent=2))
    console.print(f"saved {png} and {out}")


def print_targets(results: list[Result], console: Console) -> dict[str, float]:
    """Print one MET / NOT MET line per target (and Spark's rate less its fixed cost)."""
    ceiling_rps = results[0].rows_per_s
    ratios = {r.phase: r.rows_per_s / ceiling_rps for r in results if r.phase in TARGETS}
    for phase, ratio in ratios.items():
        verdict = "MET" if ratio >= TARGET_RATIO else "NOT MET"
        console.print(
            f"{TARGETS[phase]} >= {TARGET_RATIO:.2f}x consumer loop: {verdict}, {ratio:.2f}x"
        )
    by_phase = {r.phase: r for r in results}
    if SPARK in by_phase and SPARK_FIXED in by_phase:
        fixed = by_phase[SPARK_FIXED].seconds
        per_row = by_phase[SPARK].rows / max(by_phase[SPARK].seconds - fixed, 1e-9)
        console.print(
            f"(information, not a target) via Spark less its fixed cost of {fixed:.2f} s: "
            f"{per_row / ceiling_rps:.2f}x consumer loop"
        )
    if SPARK_OWN in by_phase and TASK in by_phase:
        own, task = by_phase[SPARK_OWN].seconds, by_phase[TASK].seconds
        console.print(
            f"(information, not a target) Spark's own cost for these rows from a Python source "
            f"without Kafka {own:.2f} s, plus the task read path {task:.2f} s, one after the "
            f"other: {results[0].seconds / (own + task):.2f}x consumer loop"
        )
    return ratios


if __name__ == "__main__":
    raise SystemExit(main())

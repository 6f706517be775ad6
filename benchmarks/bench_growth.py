"""Cost as the work grows: output partitions, write parallelism, input partitions.

Run ``python -m benchmarks.bench_growth`` (or ``python -m benchmarks growth``; ``--help``).
It starts a minikafka broker (or uses ``KAFKA_BOOTSTRAP_SERVERS``) and a local[2] session:

1. **Sink epoch overhead.** The job of ``benchmarks._job`` (``rate-micro-batch``,
   ``--rows`` rows per micro-batch) writes every micro-batch with ``eos-aligned``,
   ``eos-unaligned`` and ``alo-sink`` in turn (order rotating per batch), into output topics
   of P partitions with W write tasks: P in ``--partitions`` (4, 32, 128, 512) at W = 2,
   then W in ``--parallelism`` (1, 2, 4, 8) at P = ``--parallelism-partitions`` (32).
   The overhead of an exactly-once epoch is its time minus the at-least-once epoch's of
   the same micro-batch (median over the measured batches), also per output partition.
   Broker requests per epoch are counted by API (``benchmarks._requests``).
2. **Source planning.** The ``kafka-rc`` source reads topics of N partitions (``--inputs``:
   4, 64, 512) holding ``--records-per-input`` records each, ``maxOffsetsPerTrigger`` set
   so the backlog takes about ``--source-batches`` micro-batches, into Spark's ``noop``
   sink with ``Trigger.AvailableNow``. From Spark's progress per batch: ``latestOffset``
   (the driver's offset lookup) and ``queryPlanning`` (planning, with the source's
   partitions) are the planning cost; ``addBatch`` runs the N read tasks.

On 2 cores, W write tasks above 2 do not run in parallel: Spark runs two tasks at a time,
so W = 4 or 8 measures the cost of more transactions, producers and markers per epoch, not
more speed; and aligned mode, whose write tasks run at once in a barrier stage, refuses
more write tasks than task slots (``StageCode.INSUFFICIENT_SLOTS``), so only unaligned is
measured there. Results: tables, target lines (the overhead's least-squares slope over the
partition series at most 1 ms per added output partition per epoch: the growth, apart from
the fixed cost every epoch pays), a plot and JSON under ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import statistics
import sys
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console

from benchmarks import _requests
from benchmarks._job import ADMIN_TIMEOUT_S, EpochTime, Writers, paired, run_interleaved
from benchmarks._plot import Series, line_plot
from benchmarks._spark import checkpoint_dir
from benchmarks._table import Cell, print_table
from benchmarks._targets import Target, as_dicts, at_most, print_targets

RESULTS = Path(__file__).parent / "results"
COMMAND = "python -m benchmarks.bench_growth"
SINK_VARIANTS = ("eos-aligned", "eos-unaligned", "alo-sink")
EOS = ("eos-aligned", "eos-unaligned")
DEFAULT_WRITE_TASKS = 2
EXCLUDED = 2  # first micro-batches of a job left out (clients, workers, metadata warm up)
# Issue 36's goal: the exactly-once overhead grows by at most this much per added output
# partition per epoch (the slope over the partition series, growth_ms_per_partition).
MAX_MS_PER_PARTITION = 1.0


@dataclass(frozen=True, kw_only=True)
class SinkPoint:
    """One (output partitions, write tasks) configuration's exactly-once overhead."""

    partitions: int
    write_tasks: int
    alo_ms: float  # median at-least-once epoch
    overhead_ms: dict[str, float]  # per exactly-once variant: median paired difference
    requests: dict[str, dict[str, float]] = field(default_factory=dict)  # variant -> API -> n

    def per_partition_ms(self, variant: str) -> float:
        """Overhead per output partition (ms)."""
        return self.overhead_ms[variant] / self.partitions


@dataclass(frozen=True, kw_only=True)
class SourcePoint:
    """One input-partition count's per-batch cost (medians over the measured batches)."""

    inputs: int
    batches: int
    latest_offset_ms: float
    planning_ms: float
    add_batch_ms: float
    trigger_ms: float


def sink_point(
    spark: Any,
    bootstrap: str,
    partitions: int,
    write_tasks: int,
    args: argparse.Namespace,
    requests_log: Path | None,
) -> SinkPoint:
    """Run the interleaved job at one configuration and return its overhead."""
    slots = int(spark.sparkContext.defaultParallelism)
    # Aligned mode runs an epoch's write tasks at once (a barrier stage): not with more
    # write tasks than task slots (StageCode.INSUFFICIENT_SLOTS), so it is left out there.
    variants = [v for v in SINK_VARIANTS if v != "eos-aligned" or write_tasks <= slots]
    writers = Writers(bootstrap, [], partitions=partitions)
    try:
        for v in variants:
            writers.add_sink(
                v,
                guarantee="at-least-once" if v == "alo-sink" else "exactly-once",
                mode="unaligned" if v == "eos-unaligned" else "aligned",
                parallelism=write_tasks,
            )
        times = run_interleaved(spark, writers, variants, args.rows, args.batches)
    finally:
        writers.close()
    measured = [t for t in times if t.batch_id >= EXCLUDED]
    overhead = {
        v: float("nan") if (d := paired(measured, v, "alo-sink", "diff")) is None else d
        for v in EOS
    }
    alo = statistics.median(1000.0 * t.seconds for t in measured if t.variant == "alo-sink")
    return SinkPoint(
        partitions=partitions,
        write_tasks=write_tasks,
        alo_ms=alo,
        overhead_ms=overhead,
        requests=_requests_per_epoch(measured, requests_log),
    )


def _requests_per_epoch(
    measured: Sequence[EpochTime], requests_log: Path | None
) -> dict[str, dict[str, float]]:
    """Mean broker requests per epoch by API, per variant (empty without a request log)."""
    if requests_log is None:
        return {}
    reqs = _requests.read_log(requests_log)
    out: dict[str, dict[str, float]] = {}
    for v in SINK_VARIANTS:
        windows = {t.batch_id: (t.start, t.end) for t in measured if t.variant == v}
        per = _requests.split_by_window(reqs, windows)
        total: Counter[str] = Counter()
        for qs in per.values():
            total.update(_requests.by_api(qs))
        out[v] = {api: n / max(1, len(per)) for api, n in sorted(total.items())}
    return out


def source_point(spark: Any, bootstrap: str, inputs: int, args: argparse.Namespace) -> SourcePoint:
    """Read a topic of ``inputs`` partitions in micro-batches; return the per-batch costs."""
    topic = f"growth-in-{inputs}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, inputs, 1)])[topic].result(timeout=ADMIN_TIMEOUT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for p in range(inputs):
        for i in range(args.records_per_input):
            producer.produce(topic, value=b"%d" % i, partition=p)
        producer.poll(0)
    if producer.flush(ADMIN_TIMEOUT_S):
        msg = f"could not produce the input of {topic}"
        raise RuntimeError(msg)
    per_batch = max(1, inputs * args.records_per_input // args.source_batches)
    with contextlib.ExitStack() as stack:
        checkpoint = stack.enter_context(checkpoint_dir("bench-growth-ck-"))
        query = (
            spark.readStream.format("kafka-rc")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", per_batch)
            .load()
            .writeStream.format("noop")
            .trigger(availableNow=True)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        query.awaitTermination()
        progress = [p for p in query.recentProgress if p.numInputRows > 0][1:]  # first: warm-up
    med = statistics.median

    def dur(key: str) -> float:
        return float(med(p.durationMs.get(key, 0) for p in progress)) if progress else float("nan")

    return SourcePoint(
        inputs=inputs,
        batches=len(progress),
        latest_offset_ms=dur("latestOffset"),
        planning_ms=dur("queryPlanning"),
        add_batch_ms=dur("addBatch"),
        trigger_ms=dur("triggerExecution"),
    )


def _top_requests(counts: dict[str, float], keep: int = 6) -> str:
    """The most sent APIs of one epoch, ``"Produce 40, EndTxn 3, ..."``."""
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:keep]
    return ", ".join(f"{api} {n:.0f}" for api, n in top)


def report(sinks: Sequence[SinkPoint], sources: Sequence[SourcePoint], console: Console) -> None:
    """Print the sink and source tables."""
    rows: list[list[Cell]] = []
    for s in sinks:
        rows.append(
            [
                s.partitions,
                s.write_tasks,
                round(s.alo_ms, 1),
                *(round(s.overhead_ms[v], 1) for v in EOS),
                *(round(s.per_partition_ms(v), 3) for v in EOS),
            ]
        )
    print_table(
        "Exactly-once epoch overhead over at-least-once (median paired difference per batch)",
        ["output partitions", "write tasks", "alo epoch ms"]
        + [f"{v} +ms" for v in EOS]
        + [f"{v} ms/partition" for v in EOS],
        rows,
        console,
    )
    req_rows: list[list[Cell]] = [
        [s.partitions, s.write_tasks, v, _top_requests(s.requests.get(v, {}))]
        for s in sinks
        for v in SINK_VARIANTS
        if s.requests
    ]
    if req_rows:
        print_table(
            "Broker requests per epoch by API (mean over the measured epochs, driver and tasks)",
            ["output partitions", "write tasks", "variant", "requests"],
            req_rows,
            console,
        )
    print_table(
        "kafka-rc per-batch cost by input partitions (medians of Spark's progress, ms)",
        ["input partitions", "batches", "latestOffset", "queryPlanning", "addBatch", "trigger"],
        [
            [
                s.inputs,
                s.batches,
                s.latest_offset_ms,
                s.planning_ms,
                s.add_batch_ms,
                s.trigger_ms,
            ]
            for s in sources
        ],
        console,
    )


def growth_ms_per_partition(sinks: Sequence[SinkPoint], variant: str) -> float | None:
    """Least-squares slope of ``variant``'s overhead over output partitions (ms per partition).

    Over the partition series (``DEFAULT_WRITE_TASKS`` write tasks); ``None`` with fewer
    than two measured points. The slope is what grows with the partitions: the overhead
    divided by the partitions would charge every epoch's fixed cost (the marker and the
    epoch log, the same at 4 partitions as at 512) to each partition.
    """
    points = [
        (float(s.partitions), s.overhead_ms[variant])
        for s in sinks
        if s.write_tasks == DEFAULT_WRITE_TASKS and not math.isnan(s.overhead_ms[variant])
    ]
    if len({p for p, _ in points}) < 2:
        return None
    return statistics.linear_regression(*zip(*points, strict=True)).slope


def targets(sinks: Sequence[SinkPoint]) -> list[Target]:
    """Per exactly-once variant: overhead grows by at most ``MAX_MS_PER_PARTITION`` per partition."""
    series = sorted(
        (s for s in sinks if s.write_tasks == DEFAULT_WRITE_TASKS), key=lambda s: s.partitions
    )
    if len(series) < 2:
        return []
    low, high = series[0], series[-1]
    return [
        at_most(
            "bench_growth",
            f"{v} overhead grows <= {MAX_MS_PER_PARTITION:g} ms per added output partition "
            f"per epoch, {low.partitions} -> {high.partitions} partitions",
            growth_ms_per_partition(series, v),
            MAX_MS_PER_PARTITION,
            "{:.3f} ms/partition (overhead "
            + f"{low.overhead_ms[v]:+.0f} ms at {low.partitions}, "
            + f"{high.overhead_ms[v]:+.0f} ms at {high.partitions})",
        )
        for v in EOS
    ]


def plot(
    sinks: Sequence[SinkPoint],
    sources: Sequence[SourcePoint],
    path: Path,
    subtitle: str,
    w_partitions: int,
) -> Path:
    """Three panels: overhead vs partitions, overhead vs write tasks, source cost vs inputs."""
    by_p = [s for s in sinks if s.write_tasks == DEFAULT_WRITE_TASKS]
    by_w = sorted((s for s in sinks if s.partitions == w_partitions), key=lambda s: s.write_tasks)
    panels: list[tuple[str, str, Series, Series]] = [
        (
            "output partitions (2 write tasks)",
            "exactly-once overhead ms / epoch",
            {v: ([s.partitions for s in by_p], [s.overhead_ms[v] for s in by_p]) for v in EOS},
            {
                "1 ms per partition": (
                    [s.partitions for s in by_p],
                    [MAX_MS_PER_PARTITION * s.partitions for s in by_p],
                )
            },
        ),
        (
            f"write tasks ({w_partitions} output partitions)",
            "exactly-once overhead ms / epoch",
            {v: ([s.write_tasks for s in by_w], [s.overhead_ms[v] for s in by_w]) for v in EOS},
            {},
        ),
        (
            "kafka-rc input partitions",
            "ms per micro-batch",
            {
                "latestOffset": (
                    [s.inputs for s in sources],
                    [s.latest_offset_ms for s in sources],
                ),
                "queryPlanning": ([s.inputs for s in sources], [s.planning_ms for s in sources]),
                "addBatch": ([s.inputs for s in sources], [s.add_batch_ms for s in sources]),
            },
            {},
        ),
    ]
    return line_plot(path, f"Cost as the work grows\n{subtitle}", panels)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", default="4,32,128,512", help="output partitions")
    parser.add_argument("--parallelism", default="1,2,4,8", help="write tasks")
    parser.add_argument("--parallelism-partitions", type=int, default=32)
    parser.add_argument("--inputs", default="4,64,512", help="kafka-rc input partitions")
    parser.add_argument("--rows", type=int, default=20_000, help="rows per micro-batch")
    parser.add_argument("--batches", type=int, default=7, help="micro-batches per configuration")
    parser.add_argument("--records-per-input", type=int, default=50)
    parser.add_argument("--source-batches", type=int, default=6)
    parser.add_argument("--no-requests", action="store_true", help="do not count requests")
    parser.add_argument("--quick", action="store_true", help="smoke run: small grid")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--out", default="bench_growth", help="file stem under results/")
    args = parser.parse_args(argv)
    if args.quick:
        args.partitions, args.parallelism, args.inputs = "4,32", "1,2", "4,64"
        args.rows, args.batches, args.parallelism_partitions = 5_000, 4, 8
    if args.batches <= EXCLUDED:
        parser.error(f"--batches must exceed {EXCLUDED}")
    return args


def run(
    args: argparse.Namespace, console: Console, log_path: Path | None
) -> tuple[list[SinkPoint], list[SourcePoint]]:
    """Every sink configuration, then every source size, on one broker and session."""
    from benchmarks._spark import open_job_bench, with_query_attempts
    from connectors.kafka import register

    configs = [(p, DEFAULT_WRITE_TASKS) for p in _ints(args.partitions)]
    configs += [
        (args.parallelism_partitions, w)
        for w in _ints(args.parallelism)
        if (args.parallelism_partitions, w) not in configs
    ]
    sinks: list[SinkPoint] = []
    sources: list[SourcePoint] = []
    with contextlib.ExitStack() as stack:
        bootstrap, spark, progress = open_job_bench(
            stack,
            "bench-growth",
            bootstrap_servers=args.bootstrap_servers,
            log_path=log_path,
            console=console,
        )
        register(spark)
        task = progress.add_task("growth", total=len(configs) + len(_ints(args.inputs)))
        for p, w in configs:
            progress.update(task, description=f"sink: {p} partitions, {w} write tasks")
            sinks.append(
                with_query_attempts(
                    functools.partial(sink_point, spark, bootstrap, p, w, args, log_path),
                    f"sink: {p} partitions, {w} write tasks",
                    console,
                )
            )
            progress.update(task, advance=1)
        for n in _ints(args.inputs):
            progress.update(task, description=f"source: {n} input partitions")
            sources.append(
                with_query_attempts(
                    functools.partial(source_point, spark, bootstrap, n, args),
                    f"source: {n} input partitions",
                    console,
                )
            )
            progress.update(task, advance=1)
    return sinks, sources


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    console = Console(width=max(Console().width, 160))
    RESULTS.mkdir(parents=True, exist_ok=True)
    log_path = None if args.no_requests else RESULTS / f"{args.out}.stderr.log"
    load_before = os.getloadavg()
    sinks, sources = run(args, console, log_path)
    load_after = os.getloadavg()
    load = f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    subtitle = f"local[2], {args.rows:,}-row micro-batches, {load}"
    console.print(subtitle)
    report(sinks, sources, console)
    measured = targets(sinks)
    print_targets(measured, console)
    (RESULTS / f"{args.out}.json").write_text(
        json.dumps(
            {
                "command": " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])]),
                "load_average": {"before": load_before, "after": load_after},
                "sinks": [asdict(s) for s in sinks],
                "sources": [asdict(s) for s in sources],
                "targets": as_dicts(measured),
            },
            indent=1,
        )
    )
    png = plot(sinks, sources, RESULTS / f"{args.out}.png", subtitle, args.parallelism_partitions)
    console.print(f"saved {png} and {RESULTS / f'{args.out}.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

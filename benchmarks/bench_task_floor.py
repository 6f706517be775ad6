"""What Spark itself adds to every epoch of the kit: a barrier stage, and a worker's collection.

Run ``python -m benchmarks.bench_task_floor`` (or ``python -m benchmarks task_floor``;
``--help``). No Kafka: one local[2] session runs the shape of the sink's write stage, a
routing exchange (``repartition(2, key)``) and then ``mapInArrow`` over its partitions.

1. **Barrier stage.** The job with ``barrier=False`` (the unaligned and at-least-once
   stage) and ``barrier=True`` (the aligned stage, docs/architecture.md section 4 step 4d)
   in turn, ``--rounds`` times per row count (order alternating per round). The function
   only counts its rows, so the difference is Spark's own: gang scheduling the stage, the
   barrier context of every Python worker, the stage's bookkeeping.
2. **Per-task collection.** PySpark runs a full ``gc.collect()`` in a reused Python worker
   after every task (``connectors._worker_heap``). Tasks import what the kit's tasks import
   (pyarrow, confluent-kafka, the connectors) and time one ``gc.collect()`` the way the
   daemon runs it: first ``--rounds`` jobs as PySpark leaves the heap, then as many after
   ``freeze_worker_heap`` (the kit's tasks call it; once frozen a worker stays so, hence
   this order).

Results: two tables, a plot and JSON under ``benchmarks/results/``. No targets: these are
the floors the kit's latency and CPU sit on (docs/performance.md, "End-to-end latency" and
"Python workers").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks._latency import percentile
from benchmarks._plot import grouped_bar_plot
from benchmarks._spark import bench_session
from benchmarks._table import print_table

RESULTS = Path(__file__).parent / "results"
COMMAND = "python -m benchmarks.bench_task_floor"
VARIANTS = ("plain", "barrier")
WARMUP_ROUNDS = 2  # first rounds of each row count left out: workers and JIT warm up
GC_ROWS = 1000  # rows of each per-task collection job (its size does not matter)


@dataclass(frozen=True, kw_only=True)
class StageCell:
    """One row count's job times (ms) per variant, paired by round."""

    rows: int
    plain_ms: list[float]
    barrier_ms: list[float]

    def median(self, variant: str) -> float:
        """Median job time of ``variant`` (ms)."""
        return statistics.median(self.plain_ms if variant == "plain" else self.barrier_ms)

    def differences(self) -> list[float]:
        """Per round: the barrier job's time minus the plain job's (ms)."""
        return [b - p for p, b in zip(self.plain_ms, self.barrier_ms, strict=True)]


@dataclass(frozen=True, kw_only=True)
class CollectCell:
    """Per-task ``gc.collect()`` times (ms) and tracked objects, as PySpark or frozen."""

    heap: str  # "as PySpark leaves it" or "frozen"
    collect_ms: list[float]
    tracked: list[int]


def p90(values: Sequence[float]) -> float:
    """90th percentile (nearest rank) of ``values``."""
    return percentile(values, 90)


def _count_rows(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pydict({"n": [n]})


def _collect_like_the_daemon(freeze: bool) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def task(batches: Iterator[Any]) -> Iterator[Any]:
        import gc

        import pyarrow as pa

        import connectors.kafka
        import connectors.postgres
        import connectors.stage  # noqa: F401 - the heap of the kit's tasks
        from connectors._worker_heap import freeze_worker_heap

        for _ in batches:
            pass
        if freeze:
            freeze_worker_heap()
        started = time.perf_counter()
        gc.collect()
        ms = (time.perf_counter() - started) * 1000
        yield pa.RecordBatch.from_pydict({"ms": [ms], "tracked": [len(gc.get_objects())]})

    return task


def job_ms(spark: Any, rows: int, *, barrier: bool) -> float:
    """Wall time (ms) of one exchange + ``mapInArrow`` job over ``rows`` rows."""
    df = spark.range(rows).selectExpr("id % 8 AS k", "id AS v").repartition(2, "k")
    started = time.perf_counter()
    out = df.mapInArrow(_count_rows, "n long", barrier=barrier).collect()
    elapsed = (time.perf_counter() - started) * 1000
    if sum(r.n for r in out) != rows:
        raise AssertionError(f"the job counted {sum(r.n for r in out)} rows, not {rows}")
    return elapsed


def measure_stages(
    spark: Any, sizes: Sequence[int], rounds: int, progress: Progress
) -> list[StageCell]:
    """Alternate the two jobs ``rounds`` times per row count (after the warm-up rounds)."""
    cells = []
    for rows in sizes:
        task = progress.add_task(f"stage, {rows:,} rows", total=rounds + WARMUP_ROUNDS)
        times: dict[bool, list[float]] = {False: [], True: []}
        for i in range(rounds + WARMUP_ROUNDS):
            order = (False, True) if i % 2 == 0 else (True, False)
            measured = {b: job_ms(spark, rows, barrier=b) for b in order}
            if i >= WARMUP_ROUNDS:
                for b, ms in measured.items():
                    times[b].append(ms)
            progress.advance(task)
        cells.append(StageCell(rows=rows, plain_ms=times[False], barrier_ms=times[True]))
    return cells


def measure_collections(spark: Any, rounds: int, progress: Progress) -> list[CollectCell]:
    """Per-task collections: ``rounds`` jobs as PySpark leaves the heap, then frozen."""
    df = spark.range(GC_ROWS).selectExpr("id % 8 AS k").repartition(2, "k")
    cells = []
    for heap, freeze in (("as PySpark leaves it", False), ("frozen", True)):
        task = progress.add_task(f"collection, {heap}", total=rounds + WARMUP_ROUNDS)
        ms: list[float] = []
        tracked: list[int] = []
        for i in range(rounds + WARMUP_ROUNDS):
            out = df.mapInArrow(_collect_like_the_daemon(freeze), "ms double, tracked long")
            rows = out.collect()
            if i >= WARMUP_ROUNDS:
                ms += [r.ms for r in rows]
                tracked += [r.tracked for r in rows]
            progress.advance(task)
        cells.append(CollectCell(heap=heap, collect_ms=ms, tracked=tracked))
    return cells


def report(stages: list[StageCell], collections: list[CollectCell], console: Console) -> None:
    """Print both tables."""
    print_table(
        "exchange + mapInArrow job, local[2]",
        ["rows", "plain ms", "barrier ms", "barrier - plain ms (median)", "p90 difference ms"],
        [
            [
                c.rows,
                c.median("plain"),
                c.median("barrier"),
                statistics.median(c.differences()),
                p90(c.differences()),
            ]
            for c in stages
        ],
        console,
    )
    print_table(
        "gc.collect() in a Python worker after a task, the kit's modules imported",
        ["heap", "tasks", "median ms", "p90 ms", "tracked objects (median)"],
        [
            [
                c.heap,
                len(c.collect_ms),
                statistics.median(c.collect_ms),
                p90(c.collect_ms),
                int(statistics.median(c.tracked)),
            ]
            for c in collections
        ],
        console,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0 (it has no target)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1000,20000,200000", help="row counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds per cell")
    parser.add_argument("--out", default="bench_task_floor", help="result file name (no suffix)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.rows.split(",") if s]
    console = Console()
    load_before = os.getloadavg()
    spark = bench_session("bench-task-floor")
    try:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
        with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
            stages = measure_stages(spark, sizes, args.rounds, progress)
            collections = measure_collections(spark, args.rounds, progress)
    finally:
        spark.stop()
    console.print(f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    report(stages, collections, console)
    RESULTS.mkdir(parents=True, exist_ok=True)
    groups = [f"{c.rows:,} rows" for c in stages]
    png = grouped_bar_plot(
        RESULTS / f"{args.out}.png",
        "What Spark adds: a barrier stage; a worker's collection after each task",
        [
            (
                "ms per job (median)",
                groups,
                {v: [c.median(v) for c in stages] for v in VARIANTS},
                None,
            ),
            (
                "gc.collect() after a task, ms (median, p90)",
                [c.heap for c in collections],
                {
                    "median": [statistics.median(c.collect_ms) for c in collections],
                    "p90": [p90(c.collect_ms) for c in collections],
                },
                None,
            ),
        ],
    )
    (RESULTS / f"{args.out}.json").write_text(
        json.dumps(
            {
                "command": COMMAND + (" " + " ".join(argv) if argv else ""),
                "load_average": {"before": load_before, "after": os.getloadavg()},
                "stages": [asdict(c) for c in stages],
                "collections": [asdict(c) for c in collections],
            },
            indent=1,
        )
    )
    console.print(f"saved {png} and {RESULTS / f'{args.out}.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

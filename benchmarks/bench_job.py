"""The whole streaming job, one variant per job: steady state and start-up apart.

Run ``python -m benchmarks.bench_job`` (``--quick`` for a smoke run, ``--help`` for the
options). It starts a minikafka broker in a subprocess (or uses ``--bootstrap-servers`` /
``KAFKA_BOOTSTRAP_SERVERS``) and a ``local[2]`` SparkSession, runs one short unmeasured
job (a shuffle into ``mapInArrow``: the session's first shuffle and Python workers are paid
there, not by whichever variant runs first), then for each variant of ``benchmarks._job`` (the sinks,
the hand-written ``baseline``, ``noop``, ``rows-drop`` and ``arrow-drop``) a streaming job
of its own: the same ``rate-micro-batch`` source and ``to_json`` values as
``benchmarks.bench_sink``, ``--batches`` micro-batches of ``--rows`` rows, every batch
written by that variant alone (a new sink object per job, so its start-up is measured).

* **steady state**: batch ``b``'s time is from the end of batch ``b - 1`` to the end of
  batch ``b`` (Spark's own work between the batches included: offsets, planning, commit
  log); the first ``--excluded`` batches (default 2) are left out; rows/s is ``--rows``
  over the median of the other batches' times;
* **start-up**: from ``query.start()`` to the end of the last excluded batch (the sink's
  preflight, recovery, epoch log, vote server and first clients included);
* broker requests by API (librdkafka's protocol log, ``benchmarks._requests``): per
  steady batch (mean, driver and write tasks apart) and in the start-up window.

With ``--rounds N`` every variant runs N jobs, in an order rotated by one per round, and
the medians are over all their steady batches. Ratios are between variants of the same run
(jobs one after the other, not paired per batch as in ``bench_sink``): the load of the
shared machine is printed with them. Target lines (issue 23, restated by issue 36,
``benchmarks._targets``): exactly-once aligned >= 0.85x and unaligned >= 0.90x
``arrow-produce``, aligned >= 0.92x and unaligned >= 0.95x the sink's at-least-once in steady
state, no client set-up request from the write tasks of the median steady batch (the
mean and the batches with any printed beside it), start-up within
0.5 s of the hand-written sink's. Results: tables, ``benchmarks/results/bench_job.json``
and ``.png``; the run's stderr in ``benchmarks/results/bench_job.stderr.log``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks import _cpu, _requests
from benchmarks._job import (
    WRITE_TASKS,
    Writers,
    add_variants_option,
    drop_batches,
    rotated,
    run_stream,
    source_frame,
    variant_list,
)
from benchmarks._plot import grouped_bar_plot
from benchmarks._steady import Batch, JobRun, Summary, summarize
from benchmarks._table import optional_cell, print_table
from benchmarks._targets import (
    MAX_STARTUP_EXTRA_S,
    MIN_X_ALO,
    MIN_X_ARROW_PRODUCE,
    SETUP_APIS,
    Target,
    as_dicts,
    at_least,
    at_most,
    print_targets,
    setup_target,
    x_arrow_produce_format,
)

RESULTS = Path(__file__).parent / "results"
COMMAND = "python -m benchmarks.bench_job"
EOS = ("eos-aligned", "eos-unaligned")
DEFAULT_ROWS = 200_000
DEFAULT_BATCHES = 12
EXCLUDED = 2  # the first two batches: start-up
WARMUP_BATCHES = 2  # of the unmeasured job that starts the Python workers
WARMUP_ROWS = 10_000


class _Recorder:
    """The ``foreachBatch`` function of one job: writes, times, reports progress."""

    def __init__(self, writers: Writers, variant: str, round_: int, on_batch: Any) -> None:
        self._writers = writers
        self._variant = variant
        self._round = round_
        self._on_batch = on_batch
        self._cpu = _cpu.snapshot()
        self.batches: list[Batch] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        start = time.time()
        self._writers.write(self._variant, df, batch_id)
        end = time.time()
        now = _cpu.snapshot()
        cpu = _cpu.used(self._cpu, now).get("spark", float("nan")) if self._cpu else float("nan")
        self._cpu = now
        batch = Batch(self._variant, self._round, batch_id, start, end, cpu)
        self.batches.append(batch)
        self._on_batch(batch)


def run_job(
    spark: Any,
    bootstrap: str,
    variant: str,
    round_: int,
    rows: int,
    batches: int,
    on_batch: Any,
) -> JobRun:
    """Run one job of ``batches`` micro-batches written by ``variant`` alone."""
    writers = Writers(bootstrap, [variant])
    try:
        recorder = _Recorder(writers, variant, round_, on_batch)
        frame = source_frame(spark, rows)
        started = time.time()
        run_stream(spark, frame, recorder, batches)
        return JobRun(variant, round_, started, tuple(recorder.batches))
    finally:
        writers.close()


def _warm_up(spark: Any, on_batch: Any) -> None:
    """The unmeasured job: a shuffle into ``mapInArrow`` (what the sink's first job does)."""

    def each(df: Any, batch_id: int) -> None:
        shuffled = df.repartition(WRITE_TASKS, "key")
        shuffled.mapInArrow(drop_batches, df.schema).write.format("noop").mode("overwrite").save()
        on_batch(batch_id)

    run_stream(spark, source_frame(spark, WARMUP_ROWS), each, WARMUP_BATCHES)


def report(summaries: Sequence[Summary], console: Console, title: str) -> None:
    """Print the throughput table and the requests table."""
    print_table(
        title,
        [
            "variant",
            "batches",
            "median batch ms",
            "rows/s",
            "x arrow-drop",
            "x alo-sink",
            "x baseline",
            "x noop",
            "start-up s",
            "start-up vs baseline s",
            "CPU ms/batch",
        ],
        [
            [
                s.variant,
                s.batches,
                round(s.median_ms),
                round(s.rows_per_s),
                optional_cell(s.x_arrow),
                optional_cell(s.x_alo),
                optional_cell(s.x_baseline),
                optional_cell(s.x_noop),
                optional_cell(s.startup_s),
                optional_cell(s.startup_vs_baseline_s),
                optional_cell(s.cpu_ms, 0),
            ]
            for s in summaries
        ],
        console,
    )
    rows: list[list[Any]] = []
    for s in summaries:
        for when, per in (
            ("steady, per batch", s.steady_requests),
            ("start-up", s.startup_requests),
        ):
            for side, counts in per.items():
                if not counts:
                    continue
                setup = sum(c for api, c in counts.items() if api in SETUP_APIS)
                listing = ", ".join(
                    f"{api} {c:.3g}" for api, c in counts.items() if api != "Produce"
                )
                rows.append(
                    [
                        s.variant,
                        when,
                        side,
                        round(setup, 2),
                        round(counts.get("Produce", 0.0), 1),
                        listing,
                    ]
                )
    if rows:
        print_table(
            "Broker requests (steady: mean per measured batch; start-up: mean per job; "
            "tasks: all write tasks together)",
            ["variant", "window", "side", "set-up requests", "Produce", "by API (all but Produce)"],
            rows,
            console,
        )


def targets(summaries: Sequence[Summary], rows: int) -> list[Target]:
    """Issue 23's targets this run measured (module docstring)."""
    bench = "bench_job"
    by = {s.variant: s for s in summaries}
    out: list[Target] = []
    size = f"{rows // 1000}k-row batches"
    for v in EOS:
        s = by.get(v)
        if s is None:
            continue
        if "arrow-produce" in by:
            out.append(
                at_least(
                    bench,
                    f"whole job, {v} >= {MIN_X_ARROW_PRODUCE[v]}x arrow-produce, {size}",
                    s.x_arrow_produce,
                    MIN_X_ARROW_PRODUCE[v],
                    x_arrow_produce_format(s.x_arrow),
                )
            )
        if "alo-sink" in by:
            out.append(
                at_least(
                    bench,
                    f"whole job, {v} >= {MIN_X_ALO[v]}x the sink's at-least-once, {size}",
                    s.x_alo,
                    MIN_X_ALO[v],
                    "x{:.2f}",
                )
            )
        if s.setup_requests is not None:
            out.append(
                setup_target(
                    bench,
                    f"whole job, {v}: no client set-up requests from write tasks in steady state",
                    s.setup_requests,
                    "batch",
                    "batches",
                )
            )
        if "baseline" in by:
            out.append(
                at_most(
                    bench,
                    f"whole job, {v}: start-up within {MAX_STARTUP_EXTRA_S} s of the hand-written sink",
                    s.startup_vs_baseline_s,
                    MAX_STARTUP_EXTRA_S,
                    "{:+.2f} s",
                )
            )
    return out


def plot(summaries: Sequence[Summary], path: Path, subtitle: str) -> Path:
    """Steady-state rows/s and start-up seconds per variant."""
    panels: list[tuple[str, Sequence[str], dict[str, Sequence[float]], float | None]] = [
        (
            "steady-state rows/s (median batch)",
            ["steady state"],
            {s.variant: [s.rows_per_s] for s in summaries},
            None,
        ),
        (
            "start-up s (first batches)",
            ["start-up"],
            {s.variant: [float("nan") if s.startup_s is None else s.startup_s] for s in summaries},
            None,
        ),
    ]
    return grouped_bar_plot(path, f"Whole streaming job per variant ({subtitle})", panels)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 20k rows, 5 batches")
    parser.add_argument("--rows", type=int, default=None, help="rows per micro-batch (200000)")
    parser.add_argument("--batches", type=int, default=None, help="micro-batches per job (12)")
    parser.add_argument(
        "--excluded", type=int, default=EXCLUDED, help="first batches left out (start-up)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="jobs per variant")
    add_variants_option(parser)
    parser.add_argument(
        "--no-requests", action="store_true", help="do not log and count broker requests"
    )
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="minikafka nodes (without --bootstrap-servers); 3: replication 3, min ISR 2",
    )
    parser.add_argument("--out", default="bench_job", help="file stem under benchmarks/results")
    args = parser.parse_args(argv)
    args.rows = args.rows or (20_000 if args.quick else DEFAULT_ROWS)
    args.batches = args.batches or (5 if args.quick else DEFAULT_BATCHES)
    if args.batches <= args.excluded + 1:
        parser.error("--batches must exceed --excluded by at least 2")
    args.variant_list = variant_list(parser, args.variants)
    return args


def run(args: argparse.Namespace, console: Console, log_path: Path) -> list[JobRun]:
    """Run the warm-up job, then every variant's jobs; return the measured jobs."""
    from benchmarks._spark import open_job_bench

    runs: list[JobRun] = []
    total = WARMUP_BATCHES + args.rounds * len(args.variant_list) * args.batches
    with contextlib.ExitStack() as stack:
        bootstrap, spark, progress = open_job_bench(
            stack,
            "bench-job",
            bootstrap_servers=args.bootstrap_servers,
            nodes=args.nodes,
            log_path=None if args.no_requests else log_path,
            console=console,
        )
        task = progress.add_task("warm-up job", total=total)

        def seen(b: Batch) -> None:
            progress.update(
                task,
                advance=1,
                description=f"round {b.round} {b.variant}: batch {b.batch_id} "
                f"{b.end - b.start:.2f}s",
            )

        _warm_up(spark, lambda _b: progress.update(task, advance=1))
        for round_ in range(args.rounds):
            for variant in rotated(args.variant_list, round_):
                runs.append(
                    run_job(spark, bootstrap, variant, round_, args.rows, args.batches, seen)
                )
    return runs


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    console = Console(width=max(Console().width, 140))
    RESULTS.mkdir(parents=True, exist_ok=True)
    log_path = RESULTS / f"{args.out}.stderr.log"
    load_before = os.getloadavg()
    runs = run(args, console, log_path)
    load_after = os.getloadavg()
    requests = None if args.no_requests else _requests.read_log(log_path)
    summaries = summarize(runs, args.rows, args.excluded, requests)
    load = f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    subtitle = (
        f"local[2], {WRITE_TASKS} write tasks, {args.rows:,}-row batches, "
        f"batches {args.excluded}-{args.batches - 1} measured, {load}"
    )
    report(summaries, console, f"Whole streaming job, one variant per job ({subtitle})")
    measured = targets(summaries, args.rows)
    print_targets(measured, console)
    (RESULTS / f"{args.out}.json").write_text(
        json.dumps(
            {
                "command": " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])]),
                "args": {
                    k: v for k, v in vars(args).items() if isinstance(v, (int, str, list, bool))
                },
                "load_average": {"before": load_before, "after": load_after},
                "summaries": [asdict(s) for s in summaries],
                "targets": as_dicts(measured),
                "jobs": [asdict(r) for r in runs],
            },
            indent=1,
        )
    )
    png = plot(summaries, RESULTS / f"{args.out}.png", subtitle)
    console.print(f"saved {png} and {RESULTS / f'{args.out}.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""KafkaSink against the hand-written at-least-once sink, in one streaming job, side by side.

Run ``python -m benchmarks.bench_sink`` (``--quick`` for a smoke run, ``--help`` for the
options). It starts a minikafka broker in a subprocess (or uses ``--bootstrap-servers`` /
``KAFKA_BOOTSTRAP_SERVERS``, e.g. a real Kafka) and a ``local[2]`` SparkSession, then for
each epoch size (10k and 200k rows; 1M with ``--full``) runs the streaming job of
``benchmarks._job`` (``rate-micro-batch`` source, 4 input partitions, ``to_json`` values of
about 45 bytes, ``foreachBatch``) in which every micro-batch is written by every variant in
turn, in an order that rotates with the batch id:

``eos-aligned``, ``eos-unaligned`` (KafkaSink exactly-once), ``alo-sink`` (KafkaSink
at-least-once), ``baseline`` (hand-written ``foreachPartition`` + idempotent producer over
Rows), ``noop`` (Spark's noop writer: the job without Kafka), ``rows-drop`` (Rows shipped
to Python and dropped) and ``arrow-drop`` (``mapInArrow`` batches shipped to Python and
dropped: the ceiling of any Python sink on Spark, the path the sink's write stage uses).
On request (``--variants ...,eos-keep``): ``eos-keep``, exactly-once unaligned with
``keep_partitioning=True`` (no routing exchange), and ``eos-aligned-ref``,
``eos-unaligned-ref``, the exactly-once modes with ``producer_strategy="reference"`` (a new
producer per write task), each with no target line of its own.

Interleaving epoch by epoch makes load changes on the shared machine hit every variant
alike, so the report is about ratios: for each variant the median over epochs of the paired
per-epoch ratio to the baseline, to the sink's at-least-once, to ``noop`` and to
``arrow-drop``, and for the
exactly-once modes the median added milliseconds per epoch over the sink's at-least-once
(same batch). Next to wall time, the CPU seconds the job's processes used per epoch
(driver, Spark JVM, Python workers; the minikafka broker apart, ``benchmarks._cpu``):
on a loaded machine they vary much less than wall time, and on a CPU-bound 2-core box
they are what limits throughput. The first ``--warmup`` batches are not measured (sink preflight and recovery,
Python worker start-up, JIT).

Broker requests: every Kafka client of the run (driver and Spark workers) logs its requests
with librdkafka's ``debug=protocol`` (see ``benchmarks._requests``; ``--no-requests`` turns
it off); the report gives the mean requests per epoch of each variant by API, split into
the driver's (epoch log) and the write tasks'. The run's stderr (Spark's and librdkafka's)
goes to ``benchmarks/results/bench_sink.stderr.log``.

Targets (issue 23, restated by issue 36; ``benchmarks._targets``): one line each, MET / NOT
MET with the number: exactly-once aligned >= 0.85x and unaligned >= 0.90x ``arrow-produce``
at 200k-row epochs (the ratio to ``arrow-drop`` beside it); aligned >= 0.92x and unaligned
>= 0.95x the sink's at-least-once at every size; no ApiVersion, Metadata, FindCoordinator or
InitProducerId request from the write tasks of the median measured epoch (the steady
state; the mean and the epochs with any are printed beside it); the median sequential
round trips of a measured exactly-once epoch (driver, then the slowest task) below 12.

Results: tables on the console, ``benchmarks/results/bench_sink.json`` and ``.png``. Numbers
are measurements on a shared machine; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks import _requests
from benchmarks._job import (
    ALL_VARIANTS,
    KAFKA_VARIANTS,
    REFERENCE_VARIANTS,
    WRITE_TASKS,
    EpochTime,
    Writers,
    add_variants_option,
    paired,
    run_interleaved,
    variant_list,
)
from benchmarks._plot import grouped_bar_plot
from benchmarks._table import optional_cell, print_table
from benchmarks._targets import (
    MAX_ROUND_TRIPS,
    MIN_X_ALO,
    MIN_X_ARROW_PRODUCE,
    SetupCounts,
    Target,
    as_dicts,
    at_least,
    at_most,
    median_or_none,
    print_targets,
    round_trips,
    setup_requests,
    setup_target,
    x_arrow_produce_format,
)
from connectors.stage._options import DEFAULT_VOTE_CHANNEL, VOTE_CHANNELS

RESULTS = Path(__file__).parent / "results"
DEFAULT_ROWS = (10_000, 200_000)
QUICK_ROWS = (10_000, 50_000)
COMMAND = "python -m benchmarks.bench_sink"
EOS = ("eos-aligned", "eos-unaligned")
# Exactly-once variants whose added time over the at-least-once sink is shown (no targets).
EOS_SHOWN = (*EOS, *REFERENCE_VARIANTS)
DRIVER = "driver"
TASKS = "tasks"


@dataclass(frozen=True)
class Summary:
    """One variant at one epoch size, over the measured epochs."""

    rows: int
    variant: str
    epochs: int
    median_ms: float
    rows_per_s: float
    x_baseline: float | None
    x_alo: float | None
    x_noop: float | None
    added_ms: float | None  # exactly-once only: median paired difference to alo-sink
    requests: dict[str, dict[str, float]]  # {"driver"|"tasks": {api: mean per epoch}}
    cpu_ms: float | None = None  # median CPU ms per epoch: driver, JVM, Python workers
    broker_cpu_ms: float | None = None  # median CPU ms per epoch of the minikafka broker
    x_baseline_cpu: float | None = None  # paired ratio of CPU ms (baseline / this)
    x_alo_cpu: float | None = None
    x_arrow: float | None = None  # paired ratio to arrow-drop
    setup_requests: SetupCounts | None = None  # write tasks' set-up requests of each epoch
    round_trips: float | None = None  # exactly-once: median sequential round trips
    x_arrow_produce: float | None = None  # paired ratio to arrow-produce


def default_epochs(rows: int) -> int:
    """Measured epochs for an epoch size: more for small (noisy) epochs, 7 to 15."""
    return max(7, min(15, 1_000_000 // rows))


def _requests_per_epoch(
    per_epoch: Sequence[list[_requests.Request]],
) -> dict[str, dict[str, float]]:
    out: dict[str, Counter[str]] = {DRIVER: Counter(), TASKS: Counter()}
    for reqs in per_epoch:
        out[DRIVER].update(_requests.by_api(reqs, _requests.DRIVER_ROLES))
        out[TASKS].update(r.api for r in reqs if r.role not in _requests.DRIVER_ROLES)
    n = max(1, len(per_epoch))
    return {side: {api: c / n for api, c in sorted(counts.items())} for side, counts in out.items()}


def summarize(
    times: Sequence[EpochTime], requests: dict[tuple[int, str, int], list[Any]] | None
) -> list[Summary]:
    """Summaries per (epoch size, variant) of the measured epochs ``times``."""
    out = []
    for rows in sorted({t.rows for t in times}):
        sized = [t for t in times if t.rows == rows]
        for variant in [v for v in ALL_VARIANTS if any(t.variant == v for t in sized)]:
            mine = [t for t in sized if t.variant == variant]
            median_s = statistics.median(t.seconds for t in mine)
            per_epoch = (
                [requests.get((rows, variant, t.batch_id), []) for t in mine]
                if requests is not None
                else []
            )
            out.append(
                Summary(
                    rows,
                    variant,
                    len(mine),
                    1000.0 * median_s,
                    rows / median_s,
                    paired(sized, variant, "baseline", "ratio"),
                    paired(sized, variant, "alo-sink", "ratio"),
                    paired(sized, variant, "noop", "ratio"),
                    paired(sized, variant, "alo-sink", "diff") if variant in EOS_SHOWN else None,
                    _requests_per_epoch(per_epoch) if per_epoch else {},
                    _median_ms(t.cpu_s for t in mine),
                    _median_ms(t.broker_cpu_s for t in mine),
                    paired(sized, variant, "baseline", "ratio", "cpu_s"),
                    paired(sized, variant, "alo-sink", "ratio", "cpu_s"),
                    paired(sized, variant, "arrow-drop", "ratio"),
                    (
                        SetupCounts(tuple(setup_requests(reqs) for reqs in per_epoch))
                        if per_epoch
                        else None
                    ),
                    median_or_none(round_trips(reqs) for reqs in per_epoch)
                    if per_epoch and variant in EOS_SHOWN
                    else None,
                    x_arrow_produce=paired(sized, variant, "arrow-produce", "ratio"),
                )
            )
    return out


def _median_ms(values: Iterable[float]) -> float | None:
    known = [v for v in values if v == v]  # NaN: not measured
    return 1000.0 * statistics.median(known) if known else None


def report(summaries: Sequence[Summary], console: Console, title: str) -> None:
    """Print the throughput table and the requests table."""
    print_table(
        title,
        [
            "epoch rows",
            "variant",
            "epochs",
            "median ms",
            "rows/s",
            "x baseline",
            "x alo-sink",
            "x noop",
            "x arrow-drop",
            "added ms vs alo",
            "CPU ms",
            "broker CPU ms",
            "x baseline (CPU)",
            "x alo-sink (CPU)",
        ],
        [
            [
                s.rows,
                s.variant,
                s.epochs,
                round(s.median_ms),
                round(s.rows_per_s),
                optional_cell(s.x_baseline),
                optional_cell(s.x_alo),
                optional_cell(s.x_noop),
                optional_cell(s.x_arrow),
                optional_cell(s.added_ms, 0),
                optional_cell(s.cpu_ms, 0),
                optional_cell(s.broker_cpu_ms, 0),
                optional_cell(s.x_baseline_cpu),
                optional_cell(s.x_alo_cpu),
            ]
            for s in summaries
        ],
        console,
    )
    with_requests = [s for s in summaries if s.requests]
    if not with_requests:
        return
    rows: list[list[Any]] = []
    for s in with_requests:
        for side in (DRIVER, TASKS):
            counts = s.requests.get(side, {})
            if not counts:
                continue
            fixed = sum(c for api, c in counts.items() if api != "Produce")
            listing = ", ".join(f"{api} {c:.3g}" for api, c in counts.items() if api != "Produce")
            rows.append(
                [
                    s.rows,
                    s.variant,
                    side,
                    round(fixed, 1),
                    round(counts.get("Produce", 0.0), 1),
                    listing,
                ]
            )
    print_table(
        "Broker requests per epoch (mean over the measured epochs; tasks: all write "
        "tasks together)",
        ["epoch rows", "variant", "side", "all but Produce", "Produce", "by API (all but Produce)"],
        rows,
        console,
    )


def plot(summaries: Sequence[Summary], path: Path, subtitle: str) -> Path:
    """Two panels: throughput relative to arrow-drop, and to the sink's at-least-once."""
    sizes = sorted({s.rows for s in summaries})
    groups = [f"{n // 1000}k rows" for n in sizes]

    def values(variant: str, field: str) -> list[float]:
        found = {s.rows: getattr(s, field) for s in summaries if s.variant == variant}
        return [float("nan") if found.get(n) is None else float(found[n]) for n in sizes]

    present = [v for v in ALL_VARIANTS if any(s.variant == v for s in summaries)]
    panels: list[tuple[str, Sequence[str], dict[str, Sequence[float]], float | None]] = []
    if "arrow-drop" in present:
        ratio = {v: values(v, "x_arrow") for v in present if v != "arrow-drop"}
        panels.append(("throughput / arrow-drop (median paired ratio)", groups, ratio, None))
    if "arrow-produce" in present:
        ratio = {v: values(v, "x_arrow_produce") for v in present if v in EOS_SHOWN}
        panels.append(
            (
                "throughput / arrow-produce (target: aligned line)",
                groups,
                ratio,
                MIN_X_ARROW_PRODUCE["eos-aligned"],
            )
        )
    if "alo-sink" in present:
        alo = {v: values(v, "x_alo") for v in present if v in EOS_SHOWN}
        if alo:
            panels.append(
                (
                    "throughput / the sink's at-least-once (target: aligned line)",
                    groups,
                    alo,
                    MIN_X_ALO["eos-aligned"],
                )
            )
    if not panels:
        ratio = {v: values(v, "x_baseline") for v in present if v != "baseline"}
        panels.append(("throughput / hand-written sink (median paired ratio)", groups, ratio, None))
    return grouped_bar_plot(path, f"KafkaSink against its ceilings ({subtitle})", panels)


def targets(summaries: Sequence[Summary]) -> list[Target]:
    """Issue 23's targets measured by this run (see the module docstring)."""
    out: list[Target] = []
    bench = "bench_sink"
    for s in summaries:
        if s.variant not in EOS:
            continue
        size = f"{s.rows // 1000}k-row epochs"
        bound, alo = MIN_X_ARROW_PRODUCE[s.variant], MIN_X_ALO[s.variant]
        if s.rows >= 200_000 and s.x_arrow_produce is not None:
            out.append(
                at_least(
                    bench,
                    f"{s.variant} >= {bound}x arrow-produce at {size}",
                    s.x_arrow_produce,
                    bound,
                    x_arrow_produce_format(s.x_arrow),
                )
            )
        if s.x_alo is not None:
            out.append(
                at_least(
                    bench,
                    f"{s.variant} >= {alo}x the sink's at-least-once at {size}",
                    s.x_alo,
                    alo,
                    "x{:.2f}",
                )
            )
        if s.setup_requests is not None:
            out.append(
                setup_target(
                    bench,
                    f"{s.variant}: no client set-up requests from write tasks at {size}",
                    s.setup_requests,
                    "epoch",
                    "epochs",
                )
            )
        if s.round_trips is not None:
            out.append(
                at_most(
                    bench,
                    f"{s.variant}: round trips on the epoch's critical path < 12 at {size}",
                    s.round_trips,
                    MAX_ROUND_TRIPS,
                    "{:.0f}",
                )
            )
    return out


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 10k and 50k rows, 2 measured epochs each"
    )
    parser.add_argument("--full", action="store_true", help="add 1M-row epochs")
    parser.add_argument(
        "--rows", default=None, help="epoch sizes, comma-separated (default 10000,200000)"
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="measured epochs per size (default: 15 at 10k down to 7 at 200k+)",
    )
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured first batches")
    add_variants_option(parser)
    parser.add_argument("--pad", type=int, default=0, help="extra bytes in each JSON value")
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
    parser.add_argument(
        "--vote-channel",
        choices=VOTE_CHANNELS,
        default=DEFAULT_VOTE_CHANNEL,
        help="how aligned mode gathers votes (default %(default)s)",
    )
    parser.add_argument("--out", default="bench_sink", help="file stem under benchmarks/results")
    args = parser.parse_args(argv)
    sizes = (
        [int(r) for r in args.rows.split(",")]
        if args.rows
        else list(QUICK_ROWS if args.quick else DEFAULT_ROWS)
    )
    args.sizes = sizes + ([1_000_000] if args.full else [])
    args.variant_list = variant_list(parser, args.variants)
    return args


def _epochs_for(args: argparse.Namespace, rows: int) -> int:
    if args.epochs is not None:
        return int(args.epochs)
    return 2 if args.quick else default_epochs(rows)


def run(
    args: argparse.Namespace, console: Console, log_path: Path
) -> tuple[list[EpochTime], dict[str, dict[str, int]]]:
    """Run every epoch size; return all epoch times and the records written per variant."""
    from benchmarks._spark import open_job_bench

    times: list[EpochTime] = []
    written: dict[str, dict[str, int]] = {}
    total = sum((args.warmup + _epochs_for(args, n)) * len(args.variant_list) for n in args.sizes)
    with contextlib.ExitStack() as stack:
        bootstrap, spark, progress = open_job_bench(
            stack,
            "bench-sink",
            bootstrap_servers=args.bootstrap_servers,
            nodes=args.nodes,
            log_path=None if args.no_requests else log_path,
            console=console,
        )
        task = progress.add_task("epochs", total=total)
        for rows in args.sizes:
            batches = args.warmup + _epochs_for(args, rows)
            writers = Writers(bootstrap, args.variant_list, vote_channel=args.vote_channel)
            try:

                def seen(t: EpochTime, rows: int = rows) -> None:
                    progress.update(
                        task,
                        advance=1,
                        description=(
                            f"{rows:,} rows: batch {t.batch_id} {t.variant} {t.seconds:.2f}s"
                        ),
                    )

                sized = run_interleaved(
                    spark, writers, args.variant_list, rows, batches, pad=args.pad, on_epoch=seen
                )
                written[str(rows)] = writers.records_written()
            finally:
                writers.close()
            times += [t for t in sized if t.batch_id >= args.warmup]
    return times, written


def _check_written(
    written: dict[str, dict[str, int]], times: Sequence[EpochTime], warmup: int
) -> list[str]:
    problems = []
    for size, per_variant in written.items():
        batches = warmup + len({t.batch_id for t in times if t.rows == int(size)})
        for variant, records in per_variant.items():
            if records < int(size) * batches:
                problems.append(
                    f"{variant} at {size} rows wrote {records} records, "
                    f"expected at least {int(size) * batches}"
                )
    return problems


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    console = Console(width=max(Console().width, 140))
    RESULTS.mkdir(parents=True, exist_ok=True)
    log_path = RESULTS / f"{args.out}.stderr.log"
    load_before = os.getloadavg()
    times, written = run(args, console, log_path)
    load_after = os.getloadavg()
    requests = None
    if not args.no_requests:
        windows = {(t.rows, t.variant, t.batch_id): (t.start, t.end) for t in times}
        requests = _requests.split_by_window(_requests.read_log(log_path), windows)
    summaries = summarize(times, requests)
    load = f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    subtitle = f"local[2], {WRITE_TASKS} write tasks, {load}"
    report(summaries, console, f"Same streaming job, variants interleaved per epoch ({subtitle})")
    measured = targets(summaries)
    print_targets(measured, console)
    problems = _check_written(written, times, args.warmup)
    for p in problems:
        console.print(f"[red]{p}")
    (RESULTS / f"{args.out}.json").write_text(
        json.dumps(
            {
                "args": {
                    k: v for k, v in vars(args).items() if isinstance(v, (int, str, list, bool))
                },
                "load_average": {"before": load_before, "after": load_after},
                "command": " ".join([COMMAND, *(argv if argv is not None else sys.argv[1:])]),
                "summaries": [asdict(s) for s in summaries],
                "targets": as_dicts(measured),
                "epochs": [asdict(t) for t in times],
                "records_written": written,
                "kafka_variants": [v for v in args.variant_list if v in KAFKA_VARIANTS],
            },
            indent=1,
        )
    )
    png = plot(summaries, RESULTS / f"{args.out}.png", subtitle)
    console.print(f"saved {png} and {RESULTS / f'{args.out}.json'}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

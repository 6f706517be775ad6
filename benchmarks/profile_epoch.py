"""Profile KafkaSink epochs end to end: driver, write tasks, JVM stages, broker requests.

Run ``python -m benchmarks.profile_epoch`` (``--help`` for options). It runs the streaming
job of the sink benchmark (``benchmarks._job``: ``rate-micro-batch``, 4 input partitions,
``to_json`` values, ``foreachBatch``) on ``local[2]`` with the web UI on, writing every
micro-batch with the profiled variant (default ``eos-aligned``) and the comparison
variants in turn, and records:

* driver: timestamps around the sink call, input check, epoch-log loads and appends,
  ``prepare``, the write-stage job, vote rounds (``benchmarks._probe``); cProfile of the
  sink call in one extra epoch;
* write tasks (Spark Python workers): timestamps of open, marker read, each wait for the
  next Arrow batch, validation, produce, checksum, flush, pre-commit, vote round, commit,
  close; cProfile of the tasks of the extra epoch;
* JVM: each stage's wall times and task metrics from Spark's REST API
  (``benchmarks._spark_rest``): scheduler delay, deserialization, run and CPU time, GC,
  shuffle write time, shuffle fetch wait, result serialization;
* broker requests of every client with their round-trip times (librdkafka protocol log,
  ``benchmarks._requests``).

Step times are medians over the measured epochs (the cProfile epoch is left out of them).
The tables go to the console and, as Markdown, to ``benchmarks/results/profile_epoch.md``;
raw data to ``profile_epoch.json``, profiles to ``benchmarks/results/profile_epoch/``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import shutil
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks import _probe, _requests
from benchmarks._broker import broker
from benchmarks._job import ALL_VARIANTS, SINK_VARIANTS, EpochTime, Writers, run_interleaved
from benchmarks._spark_rest import JobMetrics, jobs_in_windows
from benchmarks._table import print_table
from connectors.stage._options import DEFAULT_VOTE_CHANNEL, VOTE_CHANNELS

RESULTS = Path(__file__).parent / "results"
TOP_FUNCTIONS = 15
# Task-side steps, in protocol order, for the breakdown table.
TASK_STEPS = (
    "open",
    "marker read",
    "first batch wait",
    "later batch waits",
    "validate",
    "produce",
    "poll (between batches, back-pressure)",
    "checksum",
    "flush",
    "send offsets (pre-commit - flush)",
    "vote round",
    "commit",
    "close",
)


class ProfiledWriters(Writers):
    """Writers that run one variant's write of one batch under cProfile."""

    def __init__(self, *args: Any, target: str, epoch: int, out: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._target, self._epoch, self._out = target, epoch, out

    def write(self, variant: str, df: Any, batch_id: int) -> None:
        """Write; under cProfile for the target variant's profiled epoch."""
        if (variant, batch_id) != (self._target, self._epoch):
            super().write(variant, df, batch_id)
            return
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            super().write(variant, df, batch_id)
        finally:
            profiler.disable()
            profiler.dump_stats(str(self._out))


def _median(values: Iterable[float]) -> float:
    items = [v for v in values if v == v]  # drop NaN
    return statistics.median(items) if items else float("nan")


def _ms(x: float) -> float:
    return round(1000.0 * x, 1)


def task_breakdown(events: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Seconds per step of one write task (events of that task only)."""
    total: dict[str, float] = defaultdict(float)
    waits = [e for e in events if e["name"] == "batch wait"]
    for e in events:
        total[e["name"]] += e["t1"] - e["t0"]
    out = {
        name: total.get(name, 0.0)
        for name in (
            "open",
            "marker read",
            "validate",
            "produce",
            "checksum",
            "flush",
            "vote round",
            "commit",
            "close",
        )
    }
    out["first batch wait"] = (waits[0]["t1"] - waits[0]["t0"]) if waits else 0.0
    out["later batch waits"] = sum(e["t1"] - e["t0"] for e in waits[1:])
    out["send offsets (pre-commit - flush)"] = total.get("pre-commit", 0.0) - total.get(
        "flush", 0.0
    )
    out["poll (between batches, back-pressure)"] = total.get(
        "serve (poll or flush)", 0.0
    ) - total.get("flush", 0.0)
    out["task"] = total.get("task", 0.0)
    out["other (in task, not above)"] = out["task"] - sum(out[s] for s in TASK_STEPS)
    return out


def _sink_id(writers: Writers, variant: str) -> str:
    return f"{writers.topics[variant]}-sink"


_QUIET = {
    "batch wait",
    "validate",
    "produce",
    "checksum",
    "serve (poll or flush)",
    "begin",
    "vote server check",
    "parallelism",
    "input check",
    "log load",
    "vote round open",
    "vote round close",
}


def timeline(
    epoch: EpochTime, events: Sequence[dict[str, Any]], jobs: Sequence[JobMetrics], sink_id: str
) -> list[list[Any]]:
    """Every step of one epoch: ``[start ms, end ms, side, task, step]`` from its start."""
    w0 = epoch.start
    rows: list[list[Any]] = []
    seen: set[tuple[Any, str]] = set()

    def add(t0: float, t1: float, side: str, task: Any, step: str) -> None:
        rows.append([_ms(t0 - w0), _ms(t1 - w0), side, task, step])

    for e in events:
        if e["name"] in _QUIET:
            continue
        if e["side"] == "driver" and epoch.start <= e["t0"] <= epoch.end:
            py4j = f" ({e['py4j_calls']} py4j calls)" if e.get("py4j_calls") else ""
            add(e["t0"], e["t1"], "driver", "", e["name"] + py4j)
        elif e.get("sink") == sink_id and e.get("epoch") == epoch.batch_id:
            key = (e.get("partition"), e["name"])
            if key in seen and e["name"] in ("marker read", "write"):
                continue  # repeated calls that find the work done
            seen.add(key)
            label = e["name"]
            if label == "open":
                label += " (pooled producer)" if e.get("reused") else " (new producer)"
            add(e["t0"], e["t1"], "task", e.get("partition"), label)
    for job in jobs:
        add(job.submitted, job.completed, "jvm", "", f"Spark job {job.job_id}")
        for st in job.stages:
            add(
                st.submitted,
                st.completed,
                "jvm",
                "",
                f"stage {st.stage_id}: {st.kind}, {st.tasks} tasks, first launched at "
                f"{_ms(st.first_launch - w0)} ms",
            )
    add(epoch.start + epoch.seconds, epoch.start + epoch.seconds, "driver", "", "sink call returns")
    return sorted(rows, key=lambda r: (r[0], r[1]))


def driver_table(events: Sequence[dict[str, Any]], epochs: Sequence[EpochTime]) -> list[list[Any]]:
    """Per driver step: calls, duration and py4j round trips per epoch (medians)."""
    per: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for t in epochs:
        mine = [e for e in events if e["side"] == "driver" and t.start <= e["t0"] <= t.end]
        for name in {e["name"] for e in mine}:
            of = [e for e in mine if e["name"] == name]
            per[name].append(
                (
                    len(of),
                    sum(e["t1"] - e["t0"] for e in of),
                    sum(e.get("py4j_calls", 0) for e in of),
                    sum(e.get("py4j_s", 0.0) for e in of),
                )
            )
    rows = [
        [
            name,
            round(_median(v[0] for v in vals), 1),
            _ms(_median(v[1] for v in vals)),
            round(_median(v[2] for v in vals)),
            _ms(_median(v[3] for v in vals)),
        ]
        for name, vals in per.items()
    ]
    return sorted(rows, key=lambda r: -r[2])


def pool_table(
    events: Sequence[dict[str, Any]], sink_id: str, epochs: Sequence[EpochTime]
) -> list[list[Any]]:
    """How often a write task reused its worker's pooled producer, and what opening cost."""
    batch_ids = {t.batch_id for t in epochs}
    opens = [
        e
        for e in events
        if e["name"] == "open" and e.get("sink") == sink_id and e.get("epoch") in batch_ids
    ]
    rows = []
    for reused in (True, False):
        mine = [e for e in opens if e.get("reused") is reused]
        why = (
            sorted({str(e.get("why_new", "")).split(" (")[0][:60] for e in mine})
            if not reused
            else []
        )
        rows.append(
            [
                "pooled producer reused" if reused else "new producer",
                len(mine),
                _ms(_median(e["t1"] - e["t0"] for e in mine)),
                _ms(max((e["t1"] - e["t0"] for e in mine), default=float("nan"))),
                "; ".join(why),
            ]
        )
    return rows


def jvm_table(jobs: dict[Any, list[JobMetrics]], epochs: Sequence[EpochTime]) -> list[list[Any]]:
    """Median stage metrics per variant and stage kind over the measured epochs."""
    grouped: dict[tuple[str, str], list[Any]] = defaultdict(list)
    outside: dict[str, list[float]] = defaultdict(list)
    for t in epochs:
        found = jobs.get((t.variant, t.batch_id), [])
        outside[t.variant].append(t.seconds - sum(j.completed - j.submitted for j in found))
        for job in found:
            for st in job.stages:
                grouped[(t.variant, st.kind)].append(st)
    rows = []
    for (variant, kind), stages in sorted(grouped.items()):

        def med(get: Any, stages: list[Any] = stages) -> float:
            return round(_median(get(s) for s in stages), 1)

        rows.append(
            [
                variant,
                kind,
                med(lambda s: s.tasks),
                med(lambda s: 1000 * (s.completed - s.submitted)),
                med(lambda s: 1000 * (s.first_launch - s.submitted)),
                med(lambda s: s.task_ms_median),
                med(lambda s: s.scheduler_delay_ms_median),
                med(lambda s: s.deserialize_ms),
                med(lambda s: s.run_ms),
                med(lambda s: s.cpu_ms),
                med(lambda s: s.gc_ms),
                med(lambda s: s.shuffle_write_ms),
                med(lambda s: s.shuffle_write_bytes / 1024),
                med(lambda s: s.shuffle_fetch_wait_ms),
                med(lambda s: s.result_serialize_ms + s.getting_result_ms),
                round(1000 * _median(outside[variant]), 1),
            ]
        )
    return rows


JVM_COLUMNS = [
    "variant",
    "stage",
    "tasks",
    "stage wall ms",
    "submit->first launch ms",
    "task ms (median)",
    "scheduler delay ms",
    "deserialize ms (sum)",
    "run ms (sum)",
    "cpu ms (sum)",
    "GC ms (sum)",
    "shuffle write ms (sum)",
    "shuffle write KiB",
    "fetch wait ms (sum)",
    "result ser.+get ms",
    "epoch ms outside Spark jobs",
]


def top_functions(paths: Sequence[Path], n: int = TOP_FUNCTIONS) -> list[list[Any]]:
    """Top ``n`` functions by own time over the given pstats files."""
    existing = [str(p) for p in paths if p.exists()]
    if not existing:
        return []
    stats = pstats.Stats(*existing)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    entries = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:n]
    total = sum(v[2] for v in raw.values())
    return [
        [
            f"{Path(f).name}:{line}({func})",
            nc,
            round(1000 * tt, 1),
            round(1000 * ct, 1),
            round(100 * tt / total, 1) if total else 0.0,
        ]
        for (f, line, func), (_cc, nc, tt, ct, _callers) in entries
    ]


def request_table(
    requests: dict[Any, list[_requests.Request]], epochs: Sequence[EpochTime], variant: str
) -> list[list[Any]]:
    """Mean requests per epoch of ``variant`` by role and API, with the mean summed RTT."""
    mine = [t for t in epochs if t.variant == variant]
    counts: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for t in mine:
        for r in requests.get((t.variant, t.batch_id), []):
            entry = counts[(r.role, r.api)]
            entry[0] += 1
            entry[1] += r.rtt_ms or 0.0
    n = max(1, len(mine))
    return [
        [role, api, round(c / n, 2), round(rtt / n, 1)]
        for (role, api), (c, rtt) in sorted(counts.items())
    ]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000, help="rows per epoch")
    parser.add_argument("--epochs", type=int, default=6, help="measured epochs")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured first batches")
    parser.add_argument("--variant", default="eos-aligned", choices=SINK_VARIANTS)
    parser.add_argument(
        "--compare",
        default="eos-unaligned,alo-sink,baseline,noop",
        help="variants written alongside (JVM metrics for comparison)",
    )
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--vote-channel", choices=VOTE_CHANNELS, default=DEFAULT_VOTE_CHANNEL)
    parser.add_argument("--out", default="profile_epoch", help="file stem under results/")
    args = parser.parse_args(argv)
    args.variants = [args.variant, *[v for v in args.compare.split(",") if v and v != args.variant]]
    unknown = set(args.variants) - set(ALL_VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}")
    return args


def _print(
    console: Console, md: list[str], title: str, columns: list[str], rows: list[list[Any]]
) -> None:
    print_table(title, columns, rows, console)
    md += [f"### {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    md += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    md.append("")


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    console = Console(width=max(Console().width, 160))
    probe_dir = RESULTS / args.out
    shutil.rmtree(probe_dir, ignore_errors=True)
    probe_dir.mkdir(parents=True)
    cprofile_epoch = args.warmup + args.epochs
    (probe_dir / _probe.CPROFILE_EPOCH_FILE).write_text(str(cprofile_epoch))
    os.environ.update(_requests.worker_env())
    os.environ[_probe.ENV_DIR] = str(probe_dir)
    _requests.install()
    _probe.install_driver_probes(probe_dir)
    from benchmarks._spark import bench_session

    load_before = os.getloadavg()
    log_path = probe_dir / "stderr.log"
    batches = cprofile_epoch + 1
    with contextlib.ExitStack() as stack:
        stack.enter_context(_requests.capture_stderr(log_path))
        bootstrap = stack.enter_context(broker(args.bootstrap_servers))
        spark = bench_session("profile-epoch", ui=True)
        stack.callback(spark.stop)
        writers = ProfiledWriters(
            bootstrap,
            args.variants,
            vote_channel=args.vote_channel,
            target=args.variant,
            epoch=cprofile_epoch,
            out=probe_dir / "driver.pstats",
        )
        stack.callback(writers.close)
        progress = stack.enter_context(
            Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            )
        )
        bar = progress.add_task("epochs", total=batches * len(args.variants))
        times = run_interleaved(
            spark,
            writers,
            args.variants,
            args.rows,
            batches,
            on_epoch=lambda t: progress.update(
                bar, advance=1, description=f"batch {t.batch_id} {t.variant}"
            ),
        )
        measured = [t for t in times if args.warmup <= t.batch_id < cprofile_epoch]
        windows = {(t.variant, t.batch_id): (t.start, t.end) for t in measured}
        jobs = jobs_in_windows(spark.sparkContext.uiWebUrl, windows)
        sink_id = _sink_id(writers, args.variant)
    load_after = os.getloadavg()
    events = _probe.read_events(probe_dir)
    requests = _requests.split_by_window(_requests.read_log(log_path), windows)
    report(
        args,
        console,
        measured,
        events,
        jobs,
        requests,
        sink_id,
        probe_dir,
        (load_before[0], load_after[0]),
        cprofile_epoch,
    )
    return 0


def report(
    args: argparse.Namespace,
    console: Console,
    measured: Sequence[EpochTime],
    events: Sequence[dict[str, Any]],
    jobs: dict[Any, list[JobMetrics]],
    requests: dict[Any, list[_requests.Request]],
    sink_id: str,
    probe_dir: Path,
    load: tuple[float, float],
    cprofile_epoch: int,
) -> None:
    """Print and save every table (see the module docstring)."""
    md: list[str] = [
        f"Profile of `{args.variant}` at {args.rows:,} rows per epoch, "
        f"{args.epochs} measured epochs, load average {load[0]:.1f} -> {load[1]:.1f}",
        "",
    ]
    target = [t for t in measured if t.variant == args.variant]
    _print(
        console,
        md,
        "Epoch wall time by variant (median ms)",
        ["variant", "median ms"],
        [[v, _ms(_median(t.seconds for t in measured if t.variant == v))] for v in args.variants],
    )
    middle = sorted(target, key=lambda t: t.seconds)[len(target) // 2]
    _print(
        console,
        md,
        f"Timeline of the median {args.variant} epoch (batch {middle.batch_id}, "
        f"{_ms(middle.seconds)} ms)",
        ["from ms", "to ms", "side", "task", "step"],
        timeline(middle, events, jobs.get((middle.variant, middle.batch_id), []), sink_id),
    )
    per_task = []
    for t in target:
        mine = [e for e in events if e.get("sink") == sink_id and e.get("epoch") == t.batch_id]
        for p in sorted({e["partition"] for e in mine}):
            per_task.append(task_breakdown([e for e in mine if e["partition"] == p]))
    steps = [*TASK_STEPS, "other (in task, not above)", "task"]
    _print(
        console,
        md,
        "Write task breakdown (ms, median over tasks)",
        ["step", "ms"],
        [[s, _ms(_median(b[s] for b in per_task))] for s in steps],
    )
    _print(
        console,
        md,
        f"Driver steps of one {args.variant} epoch (median per epoch; py4j round "
        "trips exclusive of nested steps)",
        ["step", "calls", "ms", "py4j calls", "py4j ms"],
        driver_table(events, target),
    )
    _print(
        console,
        md,
        "Write-task clients: pooled producer reused or not (per task)",
        ["opening", "tasks", "median ms", "max ms", "why new"],
        pool_table(events, sink_id, target),
    )
    _print(
        console,
        md,
        "JVM stages (median over epochs; from Spark's REST API)",
        JVM_COLUMNS,
        jvm_table(jobs, measured),
    )
    _print(
        console,
        md,
        f"Broker requests per {args.variant} epoch (mean) and summed RTT",
        ["role", "API", "requests", "RTT ms (sum)"],
        request_table(requests, measured, args.variant),
    )
    task_profiles = sorted(probe_dir.glob(f"task-{sink_id}-{cprofile_epoch}-*.pstats"))
    _print(
        console,
        md,
        f"Write tasks under cProfile (epoch {cprofile_epoch}, all tasks): top own time",
        ["function", "calls", "own ms", "cumulative ms", "% own"],
        top_functions(task_profiles),
    )
    _print(
        console,
        md,
        f"Driver sink call under cProfile (epoch {cprofile_epoch}): top own time",
        ["function", "calls", "own ms", "cumulative ms", "% own"],
        top_functions([probe_dir / "driver.pstats"]),
    )
    (RESULTS / f"{args.out}.md").write_text("\n".join(md))
    (RESULTS / f"{args.out}.json").write_text(
        json.dumps(
            {
                "args": {k: v for k, v in vars(args).items() if isinstance(v, (int, str, list))},
                "load_average": load,
                "epochs": [asdict(t) for t in measured],
                "jobs": {f"{k[0]}/{k[1]}": [asdict(j) for j in v] for k, v in jobs.items()},
                "task_breakdowns": per_task,
            },
            indent=1,
        )
    )
    console.print(f"saved {RESULTS / f'{args.out}.md'} and {RESULTS / f'{args.out}.json'}")


if __name__ == "__main__":
    raise SystemExit(main())

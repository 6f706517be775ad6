"""What-if measurements of the write stage's routing, without changing the sink's code.

Run ``python -m benchmarks.bench_routing`` (``--help`` for options). Same streaming job and
interleaving as ``benchmarks.bench_sink``; besides the sink's exactly-once aligned mode as
it is (``eos-aligned``), the hand-written ``baseline``, ``alo-sink`` and ``noop``, it writes
every micro-batch with exactly-once aligned sinks whose driver-side ``prepare`` (routing
plan) is swapped, in this process only, for:

* ``plan-sql``: the same plan and routing, built with one ``selectExpr`` instead of one
  py4j call per column expression (what the plan building costs on the driver);
* ``key-hash``: Spark's own hash partitioning of the key column (no ``_eos_route``
  column computed and shipped through the shuffle); the row hash before the exchange;
* ``hash-after``: ``key-hash``, with the row hash computed after the exchange (the shuffle
  ships only key and value);
* ``no-exchange``: keep the upstream partitioning, no shuffle: the opt-in for sources
  whose partitioning is deterministic across replays (this job's ``rate-micro-batch``
  source is). Write partition = input partition, so P = 4 here, and the mode is
  unaligned: an aligned (barrier) stage needs P <= task slots (2 on ``local[2]``), and
  Spark refuses a ``coalesce`` inside a barrier stage (SPARK-24820). Compare it with
  ``eos-unaligned``.

With ``--writer-ref GIT_REF`` one more exactly-once aligned sink, ``writer-ref``, writes
through the ``RecordWriter`` of that revision (``benchmarks._writer_swap``): the per-row
path before and after, side by side in the whole job.

These variants are measurements, not proposals ready to ship: ``key-hash`` sends every
null key to one partition, ``no-exchange`` is only correct for a deterministic upstream
partitioning. The table gives, per variant, the median paired ratio and millisecond
difference to ``eos-aligned``, the ratio to the hand-written sink, and the py4j round
trips the driver makes to build the plan.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks import _probe, _requests, _writer_swap
from benchmarks._broker import broker
from benchmarks._job import INPUT_PARTITIONS, EpochTime, Writers, run_interleaved
from benchmarks._plot import grouped_bar_plot
from benchmarks._table import print_table
from connectors.stage import _sink as _stage_sink
from connectors.stage._input import ROUTE_COLUMN
from connectors.stage._rows import HASH_COLUMN

RESULTS = Path(__file__).parent / "results"
REFERENCE = "eos-aligned"
BASE_VARIANTS = ("eos-aligned", "eos-unaligned", "alo-sink", "baseline", "noop")
Prepare = Callable[[Any, Any, int], Any]  # (df, the stage's InputSpec, parallelism)


def _sql_parts(input_spec: Any) -> tuple[list[str], str, str]:
    layout = input_spec.layout
    names = list(input_spec.columns)
    row_hash = "xxhash64(" + ", ".join(f"isnull({n}), {n}" for n in names) + ")"
    route = (
        "CASE WHEN key IS NOT NULL THEN xxhash64(key) ELSE xxhash64(1, value) END"
        if layout.key
        else "xxhash64(1, value)"
    )
    return names, row_hash, route


def _check(input_spec: Any) -> None:
    if input_spec.order_by or input_spec.layout.changelog or not input_spec.layout.key:
        msg = "the what-if plans cover keyed rows without order_by or changelog only"
        raise ValueError(msg)


def prepare_sql(df: Any, input_spec: Any, parallelism: int) -> Any:
    """The sink's plan (same hash, same routing), built with a few py4j calls."""
    _check(input_spec)
    names, row_hash, route = _sql_parts(input_spec)
    routed = df.selectExpr(*names, f"{row_hash} AS {HASH_COLUMN}", f"{route} AS {ROUTE_COLUMN}")
    return routed.repartition(parallelism, ROUTE_COLUMN).select(*names, HASH_COLUMN)


def prepare_key_hash(df: Any, input_spec: Any, parallelism: int) -> Any:
    """Spark's hash partitioning of ``key``; row hash before the exchange."""
    _check(input_spec)
    names, row_hash, _ = _sql_parts(input_spec)
    return df.selectExpr(*names, f"{row_hash} AS {HASH_COLUMN}").repartition(parallelism, "key")


def prepare_hash_after(df: Any, input_spec: Any, parallelism: int) -> Any:
    """Spark's hash partitioning of ``key``; row hash after the exchange."""
    _check(input_spec)
    names, row_hash, _ = _sql_parts(input_spec)
    return (
        df.selectExpr(*names)
        .repartition(parallelism, "key")
        .selectExpr(*names, f"{row_hash} AS {HASH_COLUMN}")
    )


def prepare_no_exchange(df: Any, input_spec: Any, parallelism: int) -> Any:
    """Keep the upstream partitioning (``parallelism`` must equal the input partitions)."""
    _check(input_spec)
    names, row_hash, _ = _sql_parts(input_spec)
    return df.selectExpr(*names, f"{row_hash} AS {HASH_COLUMN}")


WHAT_IF: dict[str, Prepare] = {
    "plan-sql": prepare_sql,
    "key-hash": prepare_key_hash,
    "hash-after": prepare_hash_after,
    "no-exchange": prepare_no_exchange,
}


class WhatIfWriters(Writers):
    """Writers plus exactly-once aligned sinks whose ``prepare`` is swapped while they write."""

    def __init__(self, bootstrap: str, variants: Sequence[str], what_if: Sequence[str]) -> None:
        super().__init__(bootstrap, variants)
        for name in what_if:
            if name == "no-exchange":
                self.add_sink(
                    name, guarantee="exactly-once", mode="unaligned", parallelism=INPUT_PARTITIONS
                )
            else:
                self.add_sink(name, guarantee="exactly-once", mode="aligned")
        self.plan_calls: dict[str, list[tuple[int, float]]] = {}

    @contextlib.contextmanager
    def _prepare_as(self, name: str) -> Iterator[None]:
        original = _stage_sink.route
        chosen: Prepare = WHAT_IF.get(name, original)

        def counted(df: Any, input_spec: Any, parallelism: int) -> Any:
            stack = _probe.py4j_stack()
            stack.append([name, 0, 0.0])
            t0 = time.perf_counter()
            try:
                return chosen(df, input_spec, parallelism)
            finally:
                _, calls, _s = stack.pop()
                self.plan_calls.setdefault(name, []).append((calls, time.perf_counter() - t0))

        _stage_sink.route = counted  # type: ignore[assignment]
        try:
            yield
        finally:
            _stage_sink.route = original

    def write(self, variant: str, df: Any, batch_id: int) -> None:
        """Write, with the variant's ``prepare`` in place for sink variants."""
        with self._prepare_as(variant):
            super().write(variant, df, batch_id)


def paired(
    times: Sequence[EpochTime], variant: str, other: str, field: str = "seconds"
) -> tuple[float, float] | None:
    """Median paired (ratio, ms difference) of ``variant`` against ``other`` in ``field``."""
    mine = {t.batch_id: getattr(t, field) for t in times if t.variant == variant}
    theirs = {t.batch_id: getattr(t, field) for t in times if t.variant == other}
    common = sorted(b for b in set(mine) & set(theirs) if mine[b] > 0 and theirs[b] > 0)
    if not common:
        return None
    return (
        statistics.median(theirs[b] / mine[b] for b in common),
        statistics.median(1000 * (mine[b] - theirs[b]) for b in common),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default="10000,200000", help="epoch sizes, comma-separated")
    parser.add_argument("--epochs", type=int, default=6, help="measured epochs per size")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--what-if", default=",".join(WHAT_IF), help="subset of: " + ", ".join(WHAT_IF)
    )
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument(
        "--writer-ref",
        default=None,
        help="git revision whose RecordWriter the 'writer-ref' sink uses",
    )
    parser.add_argument("--out", default="bench_routing")
    args = parser.parse_args(argv)
    what_if = [w for w in args.what_if.split(",") if w]
    if args.writer_ref:
        os.environ.update(_requests.worker_env(protocol_log=False))
        os.environ[_writer_swap.ENV_REF] = args.writer_ref
        what_if.append(_writer_swap.MARKER)
    sizes = [int(r) for r in args.rows.split(",")]
    variants = [*BASE_VARIANTS, *what_if]
    console = Console(width=max(Console().width, 140))
    from benchmarks._spark import bench_session

    _probe.install_py4j_meter()
    load = os.getloadavg()[0]
    times: list[EpochTime] = []
    calls: dict[str, list[tuple[int, float]]] = {}
    with (
        broker(args.bootstrap_servers) as bootstrap,
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress,
    ):
        spark = bench_session("bench-routing")
        try:
            bar = progress.add_task(
                "epochs", total=len(sizes) * len(variants) * (args.warmup + args.epochs)
            )
            for rows in sizes:
                writers = WhatIfWriters(bootstrap, BASE_VARIANTS, what_if)
                try:
                    sized = run_interleaved(
                        spark,
                        writers,
                        variants,
                        rows,
                        args.warmup + args.epochs,
                        on_epoch=lambda t: progress.update(
                            bar, advance=1, description=f"{t.rows:,} {t.variant} {t.seconds:.2f}s"
                        ),
                    )
                finally:
                    writers.close()
                times += [t for t in sized if t.batch_id >= args.warmup]
                for name, values in writers.plan_calls.items():
                    calls.setdefault(name, []).extend(values)
        finally:
            spark.stop()
    return report(times, calls, variants, sizes, console, load, args.out)


def report(
    times: Sequence[EpochTime],
    calls: dict[str, list[tuple[int, float]]],
    variants: Sequence[str],
    sizes: Sequence[int],
    console: Console,
    load: float,
    out: str,
) -> int:
    """Print the table; save JSON and a plot."""
    rows: list[list[Any]] = []
    series: dict[str, list[float]] = {v: [] for v in variants if v != "baseline"}
    for size in sizes:
        sized = [t for t in times if t.rows == size]
        for v in variants:
            mine = [t.seconds for t in sized if t.variant == v]
            vs_ref = paired(sized, v, REFERENCE)
            vs_base = paired(sized, v, "baseline")
            vs_unaligned = paired(sized, v, "eos-unaligned")
            cpu_ref = paired(sized, v, REFERENCE, "cpu_s")
            cpu_base = paired(sized, v, "baseline", "cpu_s")
            cpu = [t.cpu_s for t in sized if t.variant == v and t.cpu_s == t.cpu_s]
            plan = calls.get(v, [])
            rows.append(
                [
                    size,
                    v,
                    round(1000 * statistics.median(mine)),
                    "" if vs_ref is None else round(vs_ref[0], 2),
                    "" if vs_ref is None else round(vs_ref[1]),
                    "" if vs_unaligned is None else round(vs_unaligned[0], 2),
                    "" if vs_base is None else round(vs_base[0], 2),
                    round(statistics.median(c for c, _ in plan)) if plan else "",
                    round(1000 * statistics.median(s for _, s in plan), 1) if plan else "",
                    round(1000 * statistics.median(cpu)) if cpu else "",
                    "" if cpu_ref is None else round(cpu_ref[0], 2),
                    "" if cpu_ref is None else round(cpu_ref[1]),
                    "" if cpu_base is None else round(cpu_base[0], 2),
                ]
            )
            if v in series:
                series[v].append(vs_base[0] if vs_base else float("nan"))
    print_table(
        f"Routing what-ifs, variants interleaved per epoch (load average {load:.1f})",
        [
            "epoch rows",
            "variant",
            "median ms",
            f"x {REFERENCE}",
            f"ms vs {REFERENCE}",
            "x eos-unaligned",
            "x baseline",
            "plan py4j calls",
            "plan ms",
            "CPU ms",
            f"x {REFERENCE} (CPU)",
            f"CPU ms vs {REFERENCE}",
            "x baseline (CPU)",
        ],
        rows,
        console,
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{out}.json").write_text(
        json.dumps(
            {"load_average": load, "epochs": [asdict(t) for t in times], "plan_calls": calls},
            indent=1,
        )
    )
    png = grouped_bar_plot(
        RESULTS / f"{out}.png",
        f"Routing what-ifs (load average {load:.1f})",
        [
            (
                "throughput / hand-written sink (median paired ratio)",
                [f"{n // 1000}k rows" for n in sizes],
                series,
                1.5,
            )
        ],
    )
    console.print(f"saved {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""DeltaSink and IcebergSink against the hand-written foreachBatch writer, in one streaming job.

Run ``python -m benchmarks.bench_lakehouse`` (``--format delta`` or ``iceberg`` for one
format, ``--quick`` for a smoke run, ``--help`` for the options). The job: Spark's
``rate-micro-batch`` source (4 input partitions, ``--rows`` rows per micro-batch, 200,000 by
default) projected to ``(id bigint, name string, amount double, ts timestamp)`` rows
(``benchmarks._job.table_frame``), on the ``local[2]`` SparkSession of the sink benchmarks.
Every micro-batch is written by every variant in turn, each into a table of its own on the
local file system, in an order that rotates with the batch id (``benchmarks._job``):

* ``delta-eos``: ``DeltaSink`` exactly-once (unaligned, ``WRITE_TASKS`` write tasks that
  write the Parquet files in parallel, one Delta commit per epoch by the coordinator);
* ``delta-hand``: what users hand-write today: ``foreachBatch`` collecting the batch to the
  driver (``df.toArrow()``) and calling ``deltalake.write_deltalake(path, batch,
  mode="append")`` once (at-least-once: a replay appends the batch again);
* ``delta-kept``: ``delta-eos`` with ``keep_partitioning=True``: one write task per input
  partition, no routing shuffle (an append epoch commits whole, so a replay rewrites every
  partition and needs no content routing; docs/delta-sink.md, "Performance");
* ``iceberg-eos`` / ``iceberg-kept``: ``IcebergSink`` likewise (an SQL catalog on SQLite);
* ``iceberg-hand``: ``foreachBatch`` with ``df.toArrow()`` and ``table.append(batch)``;
* ``arrow-drop``: ``df.mapInArrow(drop)`` into Spark's ``noop`` writer: what any Python sink
  on Spark pays to see the rows in its tasks, before it writes anything (``benchmarks._job``).

Interleaving makes load changes on the shared machine hit every variant alike; the report
is the median ms per epoch, rows/s, the paired per-epoch ratio of each exactly-once variant
to its format's hand-written writer, and CPU ms per epoch (driver, JVM, Python workers). The
first ``--warmup`` batches are not measured. Every table must end with every row of every
measured and warm-up batch once (exit 1 otherwise).

Target (issue 34): each exactly-once sink at least as fast as the hand-written writer of its
format at 200k-row batches. Results: tables on the console,
``benchmarks/results/bench_lakehouse.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks._job import EpochTime, _arrow_drop, paired, run_interleaved, table_frame
from benchmarks._plot import bar_plot
from benchmarks._spark import MASTER, bench_session
from benchmarks._table import print_table
from benchmarks._targets import as_dicts, at_least, print_targets

RESULTS = Path(__file__).parent / "results"
FORMATS = ("delta", "iceberg")
WRITE_TASKS = 2
DEFAULT_ROWS = 200_000
TARGET_X_HAND = 1.0  # exactly-once vs the hand-written writer of the same format (issue 34)


def variants_of(formats: Sequence[str]) -> list[str]:
    """The variants of ``formats`` (``<format>-eos``, ``-kept``, ``-hand``), then ``arrow-drop``."""
    return [*(f"{f}-{kind}" for f in formats for kind in ("eos", "kept", "hand")), "arrow-drop"]


class Writers:
    """One writer per variant, each with its own table under a temporary directory."""

    def __init__(self, variants: Sequence[str]) -> None:
        from connectors.lakehouse import DeltaSink, IcebergSink

        self.root = Path(tempfile.mkdtemp(prefix="bench-lakehouse-"))
        self.catalog = {
            "type": "sql",
            "uri": f"sqlite:///{self.root}/catalog.db",
            "warehouse": f"file://{self.root}/warehouse",
        }
        self.sinks: dict[str, Any] = {}
        self._write: dict[str, Callable[[Any, int], Any]] = {}
        for variant in variants:
            kind = variant.split("-")[1]
            common: dict[str, Any] = {"create_table": True}
            if kind == "kept":
                common["keep_partitioning"] = True
            else:
                common["parallelism"] = WRITE_TASKS
            if variant in ("delta-eos", "delta-kept"):
                sink = DeltaSink(str(self.root / variant), f"bench-{variant}", **common)
            elif variant in ("iceberg-eos", "iceberg-kept"):
                sink = IcebergSink(
                    f"bench.{kind}",
                    f"bench-{variant}",
                    catalog="bench",
                    catalog_properties=self.catalog,
                    epoch_log=str(self.root / f"{variant}.epochlog"),
                    **common,
                )
            elif variant == "arrow-drop":
                self._write[variant] = _arrow_drop
                continue
            else:
                self._write[variant] = self._hand(variant)
                continue
            self.sinks[variant] = self._write[variant] = sink

    def _hand(self, variant: str) -> Callable[[Any, int], None]:
        """The hand-written writer: collect the batch to the driver, one library call."""
        if variant == "delta-hand":
            from deltalake import write_deltalake

            path = str(self.root / variant)

            def write_delta(df: Any, _batch_id: int) -> None:
                write_deltalake(path, _utc(df.toArrow()), mode="append")

            return write_delta
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog("bench", **self.catalog)
        catalog.create_namespace_if_not_exists("bench")
        holder: dict[str, Any] = {}

        def write_iceberg(df: Any, _batch_id: int) -> None:
            batch = _utc(df.toArrow())
            if "table" not in holder:
                holder["table"] = catalog.create_table_if_not_exists("bench.hand", batch.schema)
            holder["table"].append(batch)

        return write_iceberg

    def write(self, variant: str, df: Any, batch_id: int) -> None:
        """Write micro-batch ``batch_id`` with ``variant``."""
        self._write[variant](df, batch_id)

    def rows_written(self) -> dict[str, int]:
        """Rows in each variant's table (every variant must have written every batch)."""
        from deltalake import DeltaTable
        from pyiceberg.catalog import load_catalog

        out = {}
        for variant in self._write:
            if variant == "arrow-drop":
                continue
            if variant.startswith("delta"):
                out[variant] = DeltaTable(str(self.root / variant)).to_pyarrow_table().num_rows
            else:
                name = f"bench.{variant.split('-')[1]}"
                table = load_catalog("bench", **self.catalog).load_table(name)
                out[variant] = table.scan(selected_fields=("id",)).to_arrow().num_rows
        return out

    def close(self) -> None:
        """Close the sinks and delete the tables."""
        for sink in self.sinks.values():
            sink.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _utc(batch: Any) -> Any:
    """``batch`` with its timestamps in UTC (Delta's and Iceberg's timestamp type)."""
    import pyarrow as pa

    fields = [
        f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
        for f in batch.schema
    ]
    return batch.cast(pa.schema(fields))


COLUMNS = [
    "variant",
    "epochs",
    "median ms/epoch",
    "rows/s",
    "x hand-written",
    "x arrow-drop",
    "CPU ms/epoch",
]


def summarize(times: Sequence[EpochTime], variants: Sequence[str], rows: int) -> list[list[Any]]:
    """One report row per variant (columns: see ``COLUMNS``)."""
    out = []
    for variant in variants:
        mine = [t for t in times if t.variant == variant]
        median_s = statistics.median(t.seconds for t in mine)
        cpu = [t.cpu_s for t in mine if t.cpu_s == t.cpu_s]
        sink = variant.endswith(("-eos", "-kept"))
        hand = f"{variant.split('-')[0]}-hand"
        x_hand = paired(times, variant, hand, "ratio") if sink else None
        x_drop = paired(times, variant, "arrow-drop", "ratio") if variant != "arrow-drop" else None
        out.append(
            [
                variant,
                len(mine),
                1000.0 * median_s,
                rows / median_s,
                "" if x_hand is None else x_hand,
                "" if x_drop is None else x_drop,
                1000.0 * statistics.median(cpu) if cpu else "",
            ]
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 1 if a variant lost or duplicated rows, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--format", choices=[*FORMATS, "both"], default="both")
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="rows per micro-batch")
    parser.add_argument("--epochs", type=int, default=7, help="measured micro-batches")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured first batches")
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 3 epochs")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.epochs = 20_000, 3
    formats = FORMATS if args.format == "both" else (args.format,)
    variants = variants_of(formats)
    console = Console()
    batches = args.warmup + args.epochs
    load_before = os.getloadavg()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("lakehouse", total=batches * len(variants))

        def on_epoch(t: EpochTime) -> None:
            progress.update(task, advance=1, description=f"batch {t.batch_id} {t.variant}")

        spark = bench_session("bench-lakehouse")
        writers = Writers(variants)
        try:
            times = run_interleaved(
                spark,
                writers,
                variants,
                args.rows,
                batches,
                on_epoch=on_epoch,
                frame=table_frame(spark, args.rows),
            )
            written = writers.rows_written()
        finally:
            writers.close()
            spark.stop()
    load = f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after"
    report = summarize([t for t in times if t.batch_id >= args.warmup], variants, args.rows)
    print_table(
        f"Table sinks, {args.rows:,}-row epochs ({MASTER}, {WRITE_TASKS} write tasks, {load})",
        COLUMNS,
        report,
        console,
    )
    targets = [
        at_least(
            "bench_lakehouse",
            f"{row[0]} >= {TARGET_X_HAND}x the hand-written {row[0].split('-')[0]} writer",
            None if row[4] == "" else float(row[4]),
            TARGET_X_HAND,
            "x{:.2f}",
        )
        for row in report
        if row[0].endswith(("-eos", "-kept"))
    ]
    print_targets(targets, console)
    RESULTS.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python -m benchmarks.bench_lakehouse", *(argv or sys.argv[1:])])
    (RESULTS / "bench_lakehouse.json").write_text(
        json.dumps(
            {
                "command": command,
                "rows": args.rows,
                "load": load,
                "targets": as_dicts(targets),
                "written": written,
                "epochs": [asdict(t) for t in times],
            },
            indent=2,
        )
    )
    hand = {r[0]: r[3] for r in report if r[0].endswith("-hand")}
    bar_plot(
        RESULTS / "bench_lakehouse.png",
        f"DeltaSink / IcebergSink vs hand-written, {args.rows:,}-row epochs",
        [r[0] for r in report],
        [r[3] for r in report],
        "rows/s",
        targets=[
            hand.get(r[0].replace("-eos", "-hand")) if r[0].endswith("-eos") else None
            for r in report
        ],
    )
    console.print(f"saved {RESULTS / 'bench_lakehouse.json'} and {RESULTS / 'bench_lakehouse.png'}")
    expected = batches * args.rows
    wrong = {v: n for v, n in written.items() if n != expected}
    if wrong:
        console.print(f"[red]rows written {wrong}, expected {expected:,} each")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

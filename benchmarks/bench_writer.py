"""The write task's per-row path in isolation: Arrow batches into ``RecordWriter``.

Run ``python -m benchmarks.bench_writer`` (``--help`` for options). It starts a minikafka
broker in a subprocess (or uses ``--bootstrap-servers`` / ``KAFKA_BOOTSTRAP_SERVERS``) and,
in this process, feeds Arrow record batches shaped like the sink benchmark's job (string
key, ``to_json`` string value of about 45 bytes, the ``_eos_hash`` column; 10,000 rows per
batch, Spark's ``maxRecordsPerBatch``) to ``connectors.kafka._sink._writer.RecordWriter`` through
a producer built like a write task's (``_producers.new_producer``, the sink's settings):

* ``txn``: begin a transaction, ``write``, ``flush``, commit (an exactly-once task);
* ``plain``: an idempotent producer, ``write``, ``flush`` (an at-least-once task).

With ``--ref GIT_REF`` the ``_writer.py`` of that revision is loaded too and both take
turns round by round, so the before/after ratio is measured side by side. The table shows
the median over rounds of rows/s for ``write`` alone (Python enqueue) and for
``write + flush`` (rows acknowledged by the broker), and the ratio to the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks._broker import broker
from benchmarks._plot import bar_plot
from benchmarks._table import print_table
from connectors.kafka import KafkaSink
from connectors.kafka._sink import _writer
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._producers import INIT_TIMEOUT_S, new_producer
from connectors.stage._rows import HASH_COLUMN

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
BATCH_ROWS = 10_000  # Spark's default spark.sql.execution.arrow.maxRecordsPerBatch
PARTITIONS = 4
# Seconds for topic creation, flush and transaction calls.
KAFKA_TIMEOUT_S = 60.0
MODES = ("txn", "plain")


def make_batches(rows: int, pad: int = 0) -> list[pa.RecordBatch]:
    """Batches like the sink benchmark's job: key, JSON value, row hash."""
    out = []
    for start in range(0, rows, BATCH_ROWS):
        ids = range(start, min(rows, start + BATCH_ROWS))
        out.append(
            pa.record_batch(
                {
                    "key": pa.array([str(i) for i in ids], pa.string()),
                    "value": pa.array(
                        [f'{{"id":{i},"ts":"2026-01-01T00:00:00.000Z"{"x" * pad}}}' for i in ids],
                        pa.string(),
                    ),
                    HASH_COLUMN: pa.array([i * 2654435761 % (1 << 62) for i in ids], pa.int64()),
                }
            )
        )
    return out


WRITER_PATHS = ("connectors/kafka/_sink/_writer.py", "connectors/kafka/_writer.py")  # now, before


def load_reference(ref: str) -> types.ModuleType:
    """Load the Kafka sink's ``_writer.py`` as of git revision ``ref`` as a module."""
    for path in WRITER_PATHS:
        shown = subprocess.run(
            ["git", "show", f"{ref}:{path}"], cwd=REPO, check=False, capture_output=True, text=True
        )
        if shown.returncode == 0:
            break
    else:
        msg = f"no writer module at {ref} (looked for {', '.join(WRITER_PATHS)})"
        raise SystemExit(msg)
    source = shown.stdout
    module = types.ModuleType(f"_writer_at_{ref}")
    module.__file__ = f"{ref}:{path}"
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def run_once(
    impl: types.ModuleType, cfg: SinkConfig, mode: str, batches: list[pa.RecordBatch]
) -> tuple[float, float, float]:
    """Seconds of ``write``, of ``write + flush``, and CPU seconds of this thread in both.

    The CPU time of the calling thread is the per-row cost proper: it does not count
    the time the thread waited for a core on a loaded machine, nor librdkafka's threads.
    """
    errors = impl.DeliveryErrors()
    txn_id = f"{cfg.sink_id}-{uuid.uuid4().hex[:6]}" if mode == "txn" else None
    producer = new_producer(cfg, txn_id, errors)
    if txn_id is not None:
        producer.init_transactions(INIT_TIMEOUT_S)
        producer.begin_transaction()
    else:  # connect and get the producer id outside the measurement, like init above
        producer.produce(cfg.topic, b"warm-up")
        producer.flush(KAFKA_TIMEOUT_S)
    layout = getattr(impl, "RecordLayout", None) or impl.Layout  # Layout before the renames
    writer = impl.RecordWriter(producer, errors, layout(key=True), cfg.topic)
    t0, c0 = time.perf_counter(), time.thread_time()
    writer.write(iter(batches))
    t1 = time.perf_counter()
    writer.flush(KAFKA_TIMEOUT_S)
    t2, c2 = time.perf_counter(), time.thread_time()
    if txn_id is not None:
        producer.commit_transaction(KAFKA_TIMEOUT_S)
    return t1 - t0, t2 - t0, c2 - c0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000, help="rows per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per implementation")
    parser.add_argument("--ref", default=None, help="git revision to compare with (e.g. HEAD)")
    parser.add_argument("--pad", type=int, default=0, help="extra bytes per value")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    impls: dict[str, types.ModuleType] = {"current": _writer}
    if args.ref:
        impls = {f"ref {args.ref}": load_reference(args.ref), **impls}
    console = Console(width=max(Console().width, 120))
    batches = make_batches(args.rows, args.pad)
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    load = os.getloadavg()[0]
    with broker(args.bootstrap_servers) as bootstrap:
        topic = f"bench-writer-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(KAFKA_TIMEOUT_S)
        cfg = KafkaSink(bootstrap, topic, topic).config  # validated, no network I/O
        cases = [(m, name) for _ in range(args.rounds + 1) for m in modes for name in impls]
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("rounds", total=len(cases))
            for i, (mode, name) in enumerate(cases):
                progress.update(task, description=f"{mode} {name}")
                timing = run_once(impls[name], cfg, mode, batches)
                if i >= len(modes) * len(impls):  # the first round warms up
                    results.setdefault((mode, name), []).append(timing)
                progress.advance(task)
    return report(results, args, console, load)


def report(
    results: dict[tuple[str, str], list[tuple[float, float, float]]],
    args: argparse.Namespace,
    console: Console,
    load: float,
) -> int:
    """Print the table, save JSON and the plot."""
    rows: list[list[Any]] = []
    labels, values = [], []
    for (mode, name), timings in results.items():
        write = statistics.median(args.rows / t[0] for t in timings)
        total = statistics.median(args.rows / t[1] for t in timings)
        cpu_ns = statistics.median(1e9 * t[2] / args.rows for t in timings)
        ref = next((v for (m, n), v in results.items() if m == mode and n.startswith("ref")), None)
        ratio = cpu_ratio = ""
        if ref is not None:  # paired by round: the implementations took turns
            ratio = round(
                statistics.median(r[1] / t[1] for r, t in zip(ref, timings, strict=True)), 2
            )
            cpu_ratio = round(
                statistics.median(r[2] / t[2] for r, t in zip(ref, timings, strict=True)), 2
            )
        rows.append([mode, name, round(write), round(total), ratio, round(cpu_ns), cpu_ratio])
        labels.append(f"{mode}\n{name}")
        values.append(total)
    print_table(
        f"RecordWriter, {args.rows:,} rows per round, median of {args.rounds} rounds "
        f"(load average {load:.1f})",
        [
            "mode",
            "writer",
            "write rows/s",
            "write+flush rows/s",
            "x ref (write+flush)",
            "CPU ns/row (this thread)",
            "x ref (CPU)",
        ],
        rows,
        console,
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_writer.json").write_text(
        json.dumps(
            {
                "rows": args.rows,
                "load_average": load,
                "results": {f"{m}/{n}": v for (m, n), v in results.items()},
            },
            indent=1,
        )
    )
    png = bar_plot(
        RESULTS / "bench_writer.png",
        "RecordWriter write+flush (median round)",
        labels,
        values,
        "rows/s",
    )
    console.print(f"saved {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

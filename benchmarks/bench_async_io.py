"""Throughput of async_map against a 20 ms HTTP service, versus a blocking per-row map.

Run ``python -m benchmarks.bench_async_io`` (``--help`` for options). It starts an
asyncio HTTP/1.1 keep-alive service on 127.0.0.1 that answers every request after a fixed
latency (20 ms by default), starts Spark ``local[2]``, and pushes ``spark.range(n)``
(two partitions) through:

1. a synchronous map: ``mapInArrow`` calling the service once per row with a blocking
   ``http.client`` connection (throughput capped at partitions / latency);
2. ``async_map`` with capacity 1, 10 and 100 (a pooled asyncio client per partition).

Each run is executed with the ``noop`` sink so every row is computed; the metrics
accumulator confirms every row was requested. The table and a PNG bar plot (dashed line:
the ideal partitions x capacity / latency) go to benchmarks/results/. The machine is
shared, so numbers vary between runs; they are measurements, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks._plot import bar_plot
from benchmarks._table import print_table
from connectors.async_io import AsyncConfig, AsyncFunction, async_map
from connectors.async_io._spark import MetricsAccumulator

# Partition functions below travel to the Spark workers by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# Seconds to wait for the service thread to start listening; generous on a busy machine.
SERVICE_START_TIMEOUT_S = 30.0
# Seconds each configuration should run at its ideal throughput; sizes the row count.
DEFAULT_RUN_S = 3.0
# Rows per configuration are capped so a CPU-bound run stays well under a minute.
MAX_ROWS = 30_000
PARTITIONS = 2


class LatencyService:
    """HTTP/1.1 keep-alive service: ``GET /score?key=K`` answers ``3K+1`` after a delay."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="latency-service", daemon=True)

    def __enter__(self) -> LatencyService:
        self._thread.start()
        if not self._ready.wait(SERVICE_START_TIMEOUT_S):
            raise RuntimeError("latency service did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(SERVICE_START_TIMEOUT_S)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=1024)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                key = int(head.split(b" ", 2)[1].rpartition(b"=")[2])
                await asyncio.sleep(self.latency_s)
                body = b"%d" % (3 * key + 1)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


class PooledScoreClient(AsyncFunction):
    """Async client with a per-partition pool of keep-alive connections."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def open(self) -> None:
        self._idle = []

    async def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        if self._idle:
            reader, writer = self._idle.pop()
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(b"GET /score?key=%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % row["id"])
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        body = await reader.readexactly(length)
        self._idle.append((reader, writer))
        return {"score": int(body)}

    async def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle = []


def blocking_map(port: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The baseline: one blocking HTTP call per row, one keep-alive connection per task."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        try:
            for batch in batches:
                scores = []
                for key in batch.column("id").to_pylist():
                    conn.request("GET", f"/score?key={key}")
                    scores.append(int(conn.getresponse().read()))
                yield batch.append_column("score", pa.array(scores, pa.int64()))
        finally:
            conn.close()

    return run


@dataclass(frozen=True)
class RunResult:
    name: str
    capacity: int
    rows: int
    seconds: float
    ideal_rows_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    max_in_flight: int

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def timed_noop(df: DataFrame) -> float:
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def run_sync(spark: SparkSession, port: int, rows: int, latency_s: float) -> RunResult:
    df = spark.range(rows, numPartitions=PARTITIONS)
    seconds = timed_noop(df.mapInArrow(blocking_map(port), "id long, score long"))
    return RunResult("sync map", 1, rows, seconds, PARTITIONS / latency_s, None, None, 1)


def run_async(
    spark: SparkSession, port: int, rows: int, capacity: int, latency_s: float
) -> RunResult:
    metrics = MetricsAccumulator(spark)
    df = async_map(
        spark.range(rows, numPartitions=PARTITIONS),
        PooledScoreClient(port),
        output_schema="score long",
        config=AsyncConfig(capacity=capacity, ordered=True),
        metrics=metrics,
    )
    seconds = timed_noop(df)
    m = metrics.value
    if m.requests != rows or m.rows_out != rows:
        msg = f"capacity {capacity}: {m.requests} requests / {m.rows_out} rows for {rows} rows"
        raise RuntimeError(msg)
    return RunResult(
        f"async_map cap={capacity}",
        capacity,
        rows,
        seconds,
        PARTITIONS * capacity / latency_s,
        m.p50_ms,
        m.p99_ms,
        m.max_in_flight,
    )


def start_spark() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(f"local[{PARTITIONS}]")
        .appName("bench-async-io")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_all(args: argparse.Namespace, console: Console) -> list[RunResult]:
    latency_s = args.latency_ms / 1000.0
    capacities = [int(c) for c in args.capacities.split(",")]

    def rows_for(ideal_rows_per_s: float) -> int:
        return min(MAX_ROWS, max(PARTITIONS * 10, int(ideal_rows_per_s * args.run_s)))

    results: list[RunResult] = []
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with LatencyService(latency_s) as service, Progress(*columns, console=console) as progress:
        task = progress.add_task("starting Spark", total=len(capacities) + 2)
        spark = start_spark()
        try:
            progress.update(task, description="warm-up", advance=1)
            run_sync(spark, service.port, PARTITIONS * 4, latency_s)
            run_async(spark, service.port, PARTITIONS * 4, 2, latency_s)
            progress.update(task, description="sync map")
            results.append(
                run_sync(spark, service.port, rows_for(PARTITIONS / latency_s), latency_s)
            )
            progress.advance(task)
            for capacity in capacities:
                progress.update(task, description=f"async_map capacity {capacity}")
                ideal = PARTITIONS * capacity / latency_s
                results.append(run_async(spark, service.port, rows_for(ideal), capacity, latency_s))
                progress.advance(task)
        finally:
            spark.stop()
    return results


def report(results: list[RunResult], args: argparse.Namespace, console: Console) -> Path:
    base = results[0].rows_per_s
    print_table(
        f"async_map vs blocking map: {args.latency_ms:g} ms service, Spark local[{PARTITIONS}]",
        [
            "run",
            "rows",
            "seconds",
            "rows/s",
            "ideal rows/s",
            "speed-up",
            "p50 ms",
            "p99 ms",
            "max in flight",
        ],
        [
            [
                r.name,
                r.rows,
                r.seconds,
                r.rows_per_s,
                r.ideal_rows_per_s,
                r.rows_per_s / base,
                "-" if r.p50_ms is None else r.p50_ms,
                "-" if r.p99_ms is None else r.p99_ms,
                r.max_in_flight,
            ]
            for r in results
        ],
        console,
    )
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "async-io.json").write_text(
        json.dumps([asdict(r) | {"rows_per_s": r.rows_per_s} for r in results], indent=2)
    )
    return bar_plot(
        RESULTS_DIR / "async-io.png",
        f"{args.latency_ms:g} ms service; dashed: ideal partitions x capacity / latency",
        [r.name.replace("async_map ", "") for r in results],
        [r.rows_per_s for r in results],
        "rows/s",
        [r.ideal_rows_per_s for r in results],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=20.0, help="service latency")
    parser.add_argument("--capacities", default="1,10,100", help="comma-separated capacities")
    parser.add_argument(
        "--run-s",
        type=float,
        default=DEFAULT_RUN_S,
        help="target seconds per configuration at ideal throughput",
    )
    args = parser.parse_args(argv)
    console = Console()
    if not console.is_terminal:  # keep the table readable when the output is piped
        console = Console(width=max(console.width, 130))
    results = run_all(args, console)
    path = report(results, args, console)
    console.print(f"plot: {path}")


if __name__ == "__main__":
    main()

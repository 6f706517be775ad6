"""bench_source's consumer-reuse section: micro-batches of 1k and 100k rows, before and after.

Before is ``kafkaConsumer.cache.capacity=0`` (a consumer per read task, the reference
path); after is the default cache (a Python worker keeps the partition's consumer for the
next micro-batch). Two ways to read the same consecutive ranges ``[i*n, (i+1)*n)``:

* the task read path (``read_range``, the code a Spark task runs) in this process, one
  range after another as a reused Python worker reads them: rows/s, and the consumers
  created per batch (``_consumers.stats``; every new consumer opens its own TCP
  connections, to the bootstrap broker and to the partition's leader, so no new consumer
  means no new connection);
* Spark: a ``Trigger.AvailableNow`` stream with ``maxOffsetsPerTrigger=n`` into the
  ``noop`` sink on a local[1] session with reused Python workers: rows/s of the whole run,
  and the TCP connections to the broker opened per batch by every process of the machine
  (the driver's admin client included), the open ones read from ``/proc/net/tcp`` every
  :data:`SAMPLE_S`: a connection shorter than that may be missed, so it is a lower bound
  (Linux only; elsewhere not reported).

Each variant runs interleaved with the others, ``repeat`` rounds, best round kept.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._plot import grouped_bar_plot
from benchmarks._table import print_table
from connectors.kafka._source import OffsetRange, SourceOptions, _consumers
from connectors.kafka._source._fetch import read_range

BEFORE = "one consumer per read (capacity 0)"
AFTER = "consumer reuse (capacity 64)"
CAPACITY = {BEFORE: "0", AFTER: "64"}
RUN_TIMEOUT_S = 600.0
"""Seconds one Spark availableNow run may take on a busy machine."""
SAMPLE_S = 0.005
"""Seconds between two reads of the machine's TCP connections during a Spark run."""
_TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_OPEN_STATES = ("01", "02")  # ESTABLISHED, SYN_SENT (not the TIME_WAIT of closed ones)


@dataclass(frozen=True)
class ReuseResult:
    """The best round of one variant: ``batches`` micro-batches of ``batch_rows`` rows."""

    path: str  # "task read path" or "Spark stream"
    variant: str  # BEFORE or AFTER
    batch_rows: int
    batches: int
    seconds: float
    # Task read path: consumers created per batch; Spark: TCP connections to the broker
    # opened per batch (sampled, a lower bound); None where they cannot be counted.
    consumers_per_batch: float | None

    @property
    def rows_per_s(self) -> float:
        return self.batch_rows * self.batches / self.seconds if self.seconds > 0 else 0.0


def _options(bootstrap: str, topic: str, variant: str) -> SourceOptions:
    return SourceOptions.from_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "kafkaConsumer.cache.capacity": CAPACITY[variant],
        }
    )


def task_batches(bootstrap: str, topic: str, variant: str, rows: int, batches: int) -> float:
    """Read ``batches`` consecutive ranges of ``rows``; return the consumers created per batch."""
    _consumers.close_idle()
    options = _options(bootstrap, topic, variant)
    before = _consumers.stats().created
    for i in range(batches):
        got = sum(
            b.num_rows
            for b in read_range(
                options, OffsetRange(topic=topic, partition=0, start=i * rows, end=(i + 1) * rows)
            )
        )
        if got != rows:
            raise RuntimeError(f"{variant}: batch {i} read {got} rows, expected {rows}")
    created = _consumers.stats().created - before
    _consumers.close_idle()
    return created / batches


class Connections:
    """The client ends of TCP connections to ``port`` seen while it runs (a sampling thread)."""

    def __init__(self, port: int) -> None:
        self._port = f":{port:04X}"
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def available() -> bool:
        return _TCP_TABLES[0].exists()

    def __enter__(self) -> Connections:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.is_set():
            for table in _TCP_TABLES:
                with contextlib.suppress(OSError):
                    for line in table.read_text().splitlines()[1:]:
                        local, remote, state = line.split()[1:4]
                        if remote.endswith(self._port) and state in _OPEN_STATES:
                            self.seen.add(local)
            time.sleep(SAMPLE_S)


def spark_batches(spark: Any, bootstrap: str, topic: str, variant: str, rows: int) -> None:
    """One availableNow run over the whole ``topic``, ``rows`` per micro-batch."""
    with tempfile.TemporaryDirectory(prefix="bench-reuse-") as ck:
        query = (
            spark.readStream.format("kafka-rc")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(rows))
            .option("kafkaConsumer.cache.capacity", CAPACITY[variant])
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(Path(ck) / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(RUN_TIMEOUT_S) or query.exception() is not None:
            raise RuntimeError(f"{variant}: the stream failed or hung: {query.exception()}")


def measure(
    bootstrap: str,
    sizes: dict[int, tuple[str, int]],
    repeat: int,
    spark: Any | None,
    step: Callable[[], None],
) -> list[ReuseResult]:
    """Best round of every (path, size, variant), interleaved.

    ``sizes``: rows per batch -> (a one-partition topic of exactly ``rows * batches``
    records, ``batches``).
    """
    best: dict[tuple[str, int, str], ReuseResult] = {}
    for _ in range(repeat):
        for rows, (topic, batches) in sizes.items():
            for variant in (BEFORE, AFTER):
                t0 = time.perf_counter()
                per_batch = task_batches(bootstrap, topic, variant, rows, batches)
                _keep(
                    best,
                    ReuseResult(
                        "task read path",
                        variant,
                        rows,
                        batches,
                        time.perf_counter() - t0,
                        per_batch,
                    ),
                )
                if spark is not None:
                    _keep(best, _spark_round(spark, bootstrap, topic, variant, rows, batches))
                step()
    return list(best.values())


def _spark_round(
    spark: Any, bootstrap: str, topic: str, variant: str, rows: int, batches: int
) -> ReuseResult:
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    with Connections(port) as connections:
        t0 = time.perf_counter()
        spark_batches(spark, bootstrap, topic, variant, rows)
        seconds = time.perf_counter() - t0
    per_batch = len(connections.seen) / batches if Connections.available() else None
    return ReuseResult("Spark stream", variant, rows, batches, seconds, per_batch)


def _keep(best: dict[tuple[str, int, str], ReuseResult], result: ReuseResult) -> None:
    key = (result.path, result.batch_rows, result.variant)
    if key not in best or result.seconds < best[key].seconds:
        best[key] = result


def report(results: list[ReuseResult], title: str, png: Path, console: Any) -> Path:
    """Print the table and draw rows/s and consumers per batch, before and after."""
    rows = [
        [
            r.path,
            f"{r.batch_rows:,}",
            r.batches,
            r.variant,
            round(r.seconds, 3),
            round(r.rows_per_s),
            "-" if r.consumers_per_batch is None else round(r.consumers_per_batch, 2),
        ]
        for r in sorted(results, key=lambda r: (r.path, r.batch_rows, r.variant != BEFORE))
    ]
    columns = [
        "path",
        "rows/batch",
        "batches",
        "variant",
        "seconds",
        "rows/s",
        "new consumers/batch",
    ]
    print_table(title, columns, rows, console)
    groups = sorted({(r.path, r.batch_rows) for r in results})
    labels = [f"{path}\n{n:,}-row batches" for path, n in groups]
    by_key = {(r.path, r.batch_rows, r.variant): r for r in results}

    def series(value: Callable[[ReuseResult], float | None]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for variant in (BEFORE, AFTER):
            values = [value(by_key[(p, n, variant)]) for p, n in groups]
            out[variant] = [math.nan if v is None else v for v in values]
        return out

    return grouped_bar_plot(
        png,
        title,
        [
            ("rows/s", labels, series(lambda r: r.rows_per_s), None),
            (
                "per batch: new consumers (task) / connections (Spark)",
                labels,
                series(lambda r: r.consumers_per_batch),
                None,
            ),
        ],
    )

"""Throughput and per-epoch latency of KafkaSink against what users write today.

Run ``python -m benchmarks.bench_sink`` (``--full`` adds 1M-row epochs; ``--help`` for
options). It starts a minikafka broker in a subprocess (or uses ``--bootstrap-servers`` /
``KAFKA_BOOTSTRAP_SERVERS``) and a local[2] SparkSession, then for each record size
(100 B, 1 KB) and epoch size (10k, 100k rows, 1M with ``--full``) writes ``--epochs`` epochs
with each variant:

1. ``eos-aligned``: KafkaSink exactly-once, aligned commit (barrier stage);
2. ``eos-unaligned``: KafkaSink exactly-once, unaligned commit;
3. ``alo-sink``: KafkaSink at-least-once (idempotent producer, flush, no transactions);
4. ``baseline``: hand-written at-least-once, ``df.foreachPartition`` with a plain
   confluent-kafka producer over Row objects (what users write today);
5. ``ceiling``: a plain confluent-kafka producer loop in one process over prepared bytes.

Spark variants call the sink's ``foreachBatch`` function with a cached DataFrame of the epoch
and consecutive batch ids: the same code path a streaming query takes, without the source's
noise. ``--vote-channel driver|barrier`` picks how the aligned mode gathers votes
(``KafkaSink(vote_channel=...)``; default ``driver``, the sink's default). Every variant uses
the same producer batching settings (the sink's defaults). The
table shows rows/s and MB/s (median epoch), the ratio to the baseline, and the median added
latency per epoch of exactly-once over the sink's at-least-once mode. Results are saved as
JSON and a PNG under benchmarks/results/. Numbers are measurements on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks._table import print_table
from connectors.kafka._config import DEFAULT_VOTE_CHANNEL, VOTE_CHANNELS

RESULTS = Path(__file__).parent / "results"
# Seconds for topic creation and for a final producer flush.
ADMIN_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 300.0
PARTITIONS = 3
WRITE_TASKS = 2
TARGET_EO_RATIO = 0.90  # exactly-once >= 90% of at-least-once at 100k-row epochs
TARGET_ADDED_LATENCY_MS = 100.0  # median added latency per epoch
VARIANTS = ("eos-aligned", "eos-unaligned", "alo-sink", "baseline", "ceiling")
PRODUCER_SETTINGS = {"linger.ms": "10", "batch.size": "1000000", "acks": "all",
                     "queue.buffering.max.messages": "100000",
                     "queue.buffering.max.kbytes": "65536"}


@dataclass(frozen=True)
class Result:
    variant: str
    record_bytes: int
    epoch_rows: int
    epoch_seconds: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.epoch_seconds)

    @property
    def rows_per_s(self) -> float:
        return self.epoch_rows / self.median_s

    @property
    def mb_per_s(self) -> float:
        return self.rows_per_s * self.record_bytes / 1e6


def _broker(bootstrap: str | None) -> contextlib.AbstractContextManager[str]:
    @contextlib.contextmanager
    def started() -> Iterator[str]:
        if bootstrap:
            yield bootstrap
            return
        from minikafka import BrokerProcess

        with BrokerProcess() as broker:
            yield broker.bootstrap_servers

    return started()


def _new_topic(admin: AdminClient, prefix: str) -> str:
    name = f"bench-{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=ADMIN_TIMEOUT_S)
    return name


def _epoch_frame(spark: Any, rows: int, size: int) -> Any:
    # key: 1000 distinct keys; value: the row id zero-padded and filled up to `size` bytes
    df = spark.range(rows).selectExpr(
        "cast(id % 1000 as string) as key",
        f"cast(rpad(lpad(cast(id as string), 12, '0'), {size}, 'x') as binary) as value",
        "id as seq",
    ).repartition(WRITE_TASKS).cache()
    df.count()
    return df


def _baseline_writer(bootstrap: str, topic: str) -> Callable[[Any, int], None]:
    def write(df: Any, _batch_id: int) -> None:
        settings = {"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS}

        def write_partition(rows: Iterator[Any]) -> None:
            # imported here: the function is shipped to Python workers by value
            from confluent_kafka import Producer as TaskProducer

            producer = TaskProducer(settings)
            for row in rows:
                while True:
                    try:
                        producer.produce(topic, key=row.key, value=bytes(row.value))
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
            if producer.flush(300.0):  # seconds; literal so the closure ships no globals
                raise RuntimeError("baseline producer did not flush")

        df.foreachPartition(write_partition)

    return write


def _ceiling(bootstrap: str, topic: str, rows: int, size: int) -> Callable[[int], None]:
    payload = [(str(i % 1000).encode(), str(i).zfill(12).encode().ljust(size, b"x"))
               for i in range(rows)]

    def write(_batch_id: int) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS})
        for key, value in payload:
            while True:
                try:
                    producer.produce(topic, key=key, value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
        if producer.flush(FLUSH_TIMEOUT_S):
            raise RuntimeError("ceiling producer did not flush")

    return write


def _sink_writer(bootstrap: str, topic: str, variant: str,
                 vote_channel: str) -> tuple[Callable[[Any, int], Any], Any]:
    from connectors.kafka import KafkaSink

    guarantee = "at-least-once" if variant == "alo-sink" else "exactly-once"
    mode = "unaligned" if variant == "eos-unaligned" else "aligned"
    sink = KafkaSink(bootstrap, topic, f"{topic}-sink", guarantee=guarantee, mode=mode,
                     parallelism=WRITE_TASKS, order_by=("seq",), vote_channel=vote_channel)
    return sink, sink


def run_case(spark: Any, bootstrap: str, admin: AdminClient, variant: str, rows: int,
             size: int, epochs: int, df: Any, vote_channel: str = DEFAULT_VOTE_CHANNEL) -> Result:
    topic = _new_topic(admin, variant)
    times: list[float] = []
    if variant == "ceiling":
        write_plain = _ceiling(bootstrap, topic, rows, size)
        for epoch in range(epochs):
            t0 = time.perf_counter()
            write_plain(epoch)
            times.append(time.perf_counter() - t0)
        return Result(variant, size, rows, tuple(times))
    closer = None
    if variant == "baseline":
        write = _baseline_writer(bootstrap, topic)
    else:
        write, closer = _sink_writer(bootstrap, topic, variant, vote_channel)
        write(df.limit(10), 0)  # preflight, topics, first producers: not measured
    try:
        for epoch in range(1, epochs + 1):
            t0 = time.perf_counter()
            write(df, epoch)
            times.append(time.perf_counter() - t0)
    finally:
        if closer is not None:
            closer.close()
    return Result(variant, size, rows, tuple(times))


def _report(results: list[Result], console: Console, vote_channel: str) -> list[list[Any]]:
    table: list[list[Any]] = []
    for r in results:
        base = next(b for b in results if b.variant == "baseline"
                    and (b.record_bytes, b.epoch_rows) == (r.record_bytes, r.epoch_rows))
        alo = next(b for b in results if b.variant == "alo-sink"
                   and (b.record_bytes, b.epoch_rows) == (r.record_bytes, r.epoch_rows))
        added = ((r.median_s - alo.median_s) * 1000.0 if r.variant.startswith("eos")
                 else None)
        table.append([r.variant, r.record_bytes, r.epoch_rows, round(r.rows_per_s),
                      round(r.mb_per_s, 2), round(r.rows_per_s / base.rows_per_s, 2),
                      round(r.rows_per_s / alo.rows_per_s, 2),
                      "" if added is None else round(added, 1)])
    print_table(f"KafkaSink throughput (median epoch; aligned votes via {vote_channel})",
                ["variant", "record B", "epoch rows", "rows/s", "MB/s", "x baseline",
                 "x alo-sink", "added ms/epoch vs alo"], table, console)
    return table


def _plot(results: list[Result], path: Path, vote_channel: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({(r.record_bytes, r.epoch_rows) for r in results})
    fig, ax = plt.subplots(figsize=(max(8.0, 2.2 * len(cases)), 5))
    width = 0.8 / len(VARIANTS)
    for i, variant in enumerate(VARIANTS):
        values = [next((r.rows_per_s for r in results if r.variant == variant
                        and (r.record_bytes, r.epoch_rows) == c), 0.0) for c in cases]
        ax.bar([x + i * width for x in range(len(cases))], values, width, label=variant)
    ax.set_xticks([x + width * (len(VARIANTS) - 1) / 2 for x in range(len(cases))])
    ax.set_xticklabels([f"{b} B x {n // 1000}k rows" for b, n in cases])
    ax.set_ylabel("rows/s (median epoch)")
    ax.set_title("KafkaSink vs. hand-written at-least-once and a plain producer"
                 f" (aligned votes via {vote_channel})")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="add 1M-row epochs")
    parser.add_argument("--epochs", type=int, default=3, help="measured epochs per case")
    parser.add_argument("--sizes", default="100,1024", help="record sizes in bytes")
    parser.add_argument("--rows", default=None, help="epoch sizes (default 10000,100000)")
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--vote-channel", choices=VOTE_CHANNELS, default=DEFAULT_VOTE_CHANNEL,
                        help="how aligned mode gathers votes: the driver's vote server or "
                             "Spark's barrier allGather (default %(default)s)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    epoch_rows = ([int(r) for r in args.rows.split(",")] if args.rows
                  else [10_000, 100_000] + ([1_000_000] if args.full else []))
    console = Console(width=max(Console().width, 132))  # the table needs ~130 columns
    from connectors.demo import make_spark

    spark = make_spark("local[2]", app_name="bench-sink")
    results: list[Result] = []
    try:
        with _broker(args.bootstrap_servers) as bootstrap:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            cases = [(s, n, v) for s in sizes for n in epoch_rows for v in VARIANTS]
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                          MofNCompleteColumn(), TimeElapsedColumn(), console=console) as prog:
                task = prog.add_task("cases", total=len(cases))
                frames: dict[tuple[int, int], Any] = {}
                for size, rows, variant in cases:
                    prog.update(task, description=f"{variant} {size} B x {rows:,}")
                    if (size, rows) not in frames:
                        for old in frames.values():
                            old.unpersist()
                        frames = {(size, rows): _epoch_frame(spark, rows, size)}
                    results.append(run_case(spark, bootstrap, admin, variant, rows, size,
                                            args.epochs, frames[(size, rows)],
                                            args.vote_channel))
                    prog.advance(task)
    finally:
        spark.stop()
    _report(results, console, args.vote_channel)
    RESULTS.mkdir(parents=True, exist_ok=True)
    # The default channel keeps the historic file names; another one gets a suffix.
    stem = ("bench_sink" if args.vote_channel == DEFAULT_VOTE_CHANNEL
            else f"bench_sink-{args.vote_channel}")
    (RESULTS / f"{stem}.json").write_text(json.dumps(
        [asdict(r) | {"rows_per_s": r.rows_per_s, "vote_channel": args.vote_channel}
         for r in results], indent=2))
    png = _plot(results, RESULTS / f"{stem}.png", args.vote_channel)
    _targets(results, console)
    console.print(f"saved {png} and {RESULTS / f'{stem}.json'}")
    return 0


def _targets(results: list[Result], console: Console) -> None:
    for r in results:
        if r.epoch_rows != 100_000 or not r.variant.startswith("eos"):
            continue
        alo = next(a for a in results if a.variant == "alo-sink"
                   and (a.record_bytes, a.epoch_rows) == (r.record_bytes, r.epoch_rows))
        ratio = r.rows_per_s / alo.rows_per_s
        added = (r.median_s - alo.median_s) * 1000.0
        console.print(
            f"{r.variant} {r.record_bytes} B x 100k: {ratio:.0%} of at-least-once "
            f"(target >= {TARGET_EO_RATIO:.0%}: {'met' if ratio >= TARGET_EO_RATIO else 'MISSED'}),"
            f" added {added:.0f} ms/epoch (target <= {TARGET_ADDED_LATENCY_MS:.0f} ms: "
            f"{'met' if added <= TARGET_ADDED_LATENCY_MS else 'MISSED'})")


if __name__ == "__main__":
    raise SystemExit(main())

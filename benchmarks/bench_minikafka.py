"""Throughput of minikafka with confluent-kafka: produce, fetch, transactional produce.

Run ``python -m benchmarks.bench_minikafka`` (``--help`` for options). It starts a minikafka
broker in a subprocess, or uses ``KAFKA_BOOTSTRAP_SERVERS`` when that is set, then:

1. produces N records of B bytes (acks=all, linger.ms=5, batch.size about 1 MB);
2. fetches them back with a read_uncommitted consumer;
3. produces N more records in transactions of T records each;
4. fetches those back with a read_committed consumer.

Every phase checks that it saw exactly N records. Results are printed as a table, saved as a
PNG bar plot and a JSON file under benchmarks/results/. The machine is shared, so numbers vary
from run to run; they are measurements, not assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks._plot import bar_plot
from benchmarks._table import print_table

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# Targets for minikafka on the project's 2-core test machine.
PRODUCE_TARGET_RPS = 100_000
FETCH_TARGET_RPS = 200_000
# Seconds for admin calls, transaction calls and flushes; generous on a busy machine.
CLIENT_TIMEOUT_S = 120.0
# Seconds a fetch phase may go without receiving any record before it is declared stuck.
STALL_TIMEOUT_S = 60.0
# Seconds one consumer.consume() call may block.
CONSUME_POLL_S = 0.5
# Records fetched per consumer.consume() call.
CONSUME_BATCH = 10_000
# Records produced between two progress-bar refreshes.
PROGRESS_EVERY = 5_000

PRODUCER_CONF = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "delivery.report.only.error": True,
}
CONSUMER_CONF = {
    "enable.auto.commit": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 10_485_760,
    "fetch.wait.max.ms": 100,
    "queued.min.messages": 1_000_000,
}


@dataclass(frozen=True)
class PhaseResult:
    """One measured phase."""

    phase: str
    records: int
    seconds: float
    record_bytes: int
    target_rps: int | None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * self.record_bytes / self.seconds / 1_000_000


class BenchmarkError(Exception):
    """A phase did not deliver or read back exactly the records it should have."""


@contextlib.contextmanager
def _bootstrap(data_dir: str | None) -> Iterator[tuple[str, str]]:
    """Yield (bootstrap address, label): the configured cluster or a fresh minikafka."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        yield configured, f"Kafka at {configured}"
        return
    from minikafka import BrokerProcess

    with BrokerProcess(data_dir=data_dir) as broker:
        yield broker.bootstrap_servers, "minikafka" + (" (data dir)" if data_dir else "")


def _create_topics(bootstrap: str, partitions: int) -> tuple[str, str]:
    """Create the plain and the transactional topic; return their names."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    suffix = uuid.uuid4().hex[:8]
    names = (f"bench-plain-{suffix}", f"bench-txn-{suffix}")
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names],
        request_timeout=CLIENT_TIMEOUT_S,
    )
    for name in names:
        futures[name].result(timeout=CLIENT_TIMEOUT_S)
    return names


def _produce(
    producer: Producer,
    topic: str,
    payload: bytes,
    count: int,
    advance: Callable[[int], None],
    errors: list[KafkaError],
) -> None:
    """Queue ``count`` records, retrying on a full local queue; report progress in steps."""
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
        if i % PROGRESS_EVERY == PROGRESS_EVERY - 1:
            producer.poll(0)
            advance(PROGRESS_EVERY)
    advance(count % PROGRESS_EVERY)
    if errors:
        raise KafkaException(errors[0])


def _error_collector() -> tuple[list[KafkaError], Callable[[KafkaError | None, object], None]]:
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    return errors, on_delivery


def produce_phase(
    bootstrap: str, topic: str, args: argparse.Namespace, progress: Progress
) -> float:
    """Produce N plain records and flush; return the elapsed seconds."""
    errors, on_delivery = _error_collector()
    producer = Producer(
        {"bootstrap.servers": bootstrap, **PRODUCER_CONF, "on_delivery": on_delivery}
    )
    task = progress.add_task("produce", total=args.records)
    payload = os.urandom(args.record_size)
    start = time.perf_counter()
    _produce(producer, topic, payload, args.records, lambda n: progress.advance(task, n), errors)
    if producer.flush(CLIENT_TIMEOUT_S) != 0 or errors:
        raise BenchmarkError(f"produce: {len(producer)} undelivered, errors {errors[:3]}")
    return time.perf_counter() - start


def txn_produce_phase(
    bootstrap: str, topic: str, args: argparse.Namespace, progress: Progress
) -> float:
    """Produce N records in transactions of ``--txn-records`` each; return elapsed seconds."""
    errors, on_delivery = _error_collector()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_CONF,
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            "on_delivery": on_delivery,
        }
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    task = progress.add_task("produce (transactional)", total=args.records)
    payload = os.urandom(args.record_size)
    start = time.perf_counter()
    remaining = args.records
    while remaining:
        size = min(args.txn_records, remaining)
        producer.begin_transaction()
        _produce(producer, topic, payload, size, lambda n: progress.advance(task, n), errors)
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        remaining -= size
    return time.perf_counter() - start


def fetch_phase(
    bootstrap: str,
    topic: str,
    args: argparse.Namespace,
    progress: Progress,
    isolation: str,
) -> float:
    """Read every partition from the beginning until N records arrived; return seconds."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            **CONSUMER_CONF,
        }
    )
    consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)  # connect before the clock starts
    task = progress.add_task(f"fetch ({isolation})", total=args.records)
    got = 0
    start = time.perf_counter()
    last_record = start
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(args.partitions)])
    try:
        while got < args.records:
            batch = consumer.consume(CONSUME_BATCH, CONSUME_POLL_S)
            now = time.perf_counter()
            if not batch and now - last_record > STALL_TIMEOUT_S:
                raise BenchmarkError(f"fetch stalled at {got}/{args.records} records")
            for msg in batch:
                if msg.error() is not None:
                    raise KafkaException(msg.error())
            if batch:
                last_record = now
                got += len(batch)
                progress.advance(task, len(batch))
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    if got != args.records:
        raise BenchmarkError(f"fetch read {got} records, expected {args.records}")
    return elapsed


def run(args: argparse.Namespace, console: Console) -> list[PhaseResult]:
    """Run the four phases against one broker and return their results."""
    with _bootstrap(args.data_dir) as (bootstrap, label):
        console.print(
            f"[bold]Benchmarking {label}[/bold]: {args.records:,} records of "
            f"{args.record_size} B, {args.partitions} partition(s)"
        )
        plain_topic, txn_topic = _create_topics(bootstrap, args.partitions)
        columns = (
            TextColumn("{task.description:<26}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console) as progress:
            timings = [
                (
                    "produce",
                    produce_phase(bootstrap, plain_topic, args, progress),
                    PRODUCE_TARGET_RPS,
                ),
                (
                    "fetch",
                    fetch_phase(bootstrap, plain_topic, args, progress, "read_uncommitted"),
                    FETCH_TARGET_RPS,
                ),
                ("produce (txn)", txn_produce_phase(bootstrap, txn_topic, args, progress), None),
                (
                    "fetch (committed)",
                    fetch_phase(bootstrap, txn_topic, args, progress, "read_committed"),
                    None,
                ),
            ]
    return [
        PhaseResult(name, args.records, secs, args.record_size, target)
        for name, secs, target in timings
    ]


def report(results: list[PhaseResult], args: argparse.Namespace, console: Console) -> Path:
    """Print the table, save the plot and the JSON file; return the plot's path."""
    rows = [
        (
            r.phase,
            r.records,
            r.seconds,
            r.records_per_s,
            r.mb_per_s,
            f"{r.target_rps:,}" if r.target_rps else "-",
            ("yes" if r.records_per_s >= r.target_rps else "NO") if r.target_rps else "-",
        )
        for r in results
    ]
    print_table(
        f"minikafka throughput ({args.record_size} B records, txn size {args.txn_records:,})",
        ["phase", "records", "seconds", "records/s", "MB/s", "target rec/s", "met"],
        rows,
        console,
    )
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        stem = "kafka-external"
    else:
        stem = "minikafka-data-dir" if args.data_dir else "minikafka"
    path = bar_plot(
        RESULTS_DIR / f"{stem}.png",
        f"{stem}: records/s ({args.records:,} x {args.record_size} B)",
        [r.phase for r in results],
        [r.records_per_s for r in results],
        "records/s",
        [r.target_rps for r in results],
    )
    summary = [
        asdict(r) | {"records_per_s": r.records_per_s, "mb_per_s": r.mb_per_s} for r in results
    ]
    (RESULTS_DIR / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
    console.print(f"plot saved to {path}")
    return path


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=_positive, default=500_000, help="records per phase")
    parser.add_argument("--record-size", type=_positive, default=100, help="value bytes")
    parser.add_argument("--partitions", type=_positive, default=1, help="partitions per topic")
    parser.add_argument(
        "--txn-records",
        type=_positive,
        default=50_000,
        help="records per transaction in the transactional phase",
    )
    parser.add_argument(
        "--data-dir", default=None, help="run minikafka with on-disk durability in this directory"
    )
    args = parser.parse_args(argv)
    console = Console()
    report(run(args, console), args, console)


if __name__ == "__main__":
    main()

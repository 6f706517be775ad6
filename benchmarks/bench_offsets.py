"""Per-epoch cost of committing the input offsets inside the output's transaction.

``python -m benchmarks.bench_offsets [--rounds N] [--partitions P,...]``

Isolated from Spark (whose epoch time varies by far more than this cost), it runs the exact
calls one write task adds per epoch (benchmarks/HISTORY.md, "Input offsets"):

* Kafka (``KafkaSink(commit_offsets_to_group=...)``): transactions of one record and the
  marker's ``send_offsets_to_transaction``, without and with a second one for the input
  offsets of ``P`` input partitions (``_input_offsets.group_offsets``): the difference of the
  median transaction times is the cost; on minikafka unless ``--bootstrap-servers``;
* PostgreSQL: ``_input_offsets.write_input_offsets`` of ``P`` partitions inside a
  transaction (an embedded server unless ``--dsn``), median milliseconds;
* the driver's read of every epoch's input offsets (``connectors.stage._offsets.batch_input``,
  py4j, no Spark job): a ``kafka-rc`` streaming query over a topic of ``P`` partitions on
  ``local[2]``, whose ``foreachBatch`` times the call (``--batches`` micro-batches; the
  first, which warms py4j up, is reported apart).

Prints a table and one JSON object; the PNG goes to ``benchmarks/results/offsets.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from rich.progress import Progress

from benchmarks._broker import broker
from benchmarks._pg import server
from benchmarks._plot import grouped_bar_plot
from benchmarks._table import print_table
from txn import EpochPlan, InputOffsets

# Seconds a transactional call of the benchmark may take.
CALL_TIMEOUT_S = 30.0
# Seconds the driver-read query may run (its input is small: a few seconds on local[2]).
QUERY_TIMEOUT_S = 600.0
RESULTS = Path(__file__).resolve().parent / "results"


def _plan(epoch: int, topic: str, partitions: int) -> EpochPlan:
    ends = {(topic, p): 1000 * epoch + p for p in range(partitions)}
    return EpochPlan(
        sink_id="bench",
        epoch=epoch,
        parallelism=1,
        fingerprint="f",
        input=InputOffsets.of({}, ends),
    )


def kafka_ms(bootstrap: str, partitions: int, rounds: int) -> dict[str, float]:
    """Median ms of a transaction without and with the input offsets of ``partitions``."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from connectors.kafka._sink._input_offsets import group_metadata, group_offsets

    run = uuid.uuid4().hex[:8]
    topic, marker_topic = f"bench-offsets-in-{run}", f"bench-offsets-markers-{run}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, count in ((topic, partitions), (marker_topic, 1)):
        admin.create_topics([NewTopic(name, count, 1)])[name].result(timeout=CALL_TIMEOUT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{run}"})
    producer.init_transactions(CALL_TIMEOUT_S)
    marker = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-marker-{run}"})
    marker_meta = marker.consumer_group_metadata()
    lag_meta = group_metadata(f"bench-lag-{run}")
    out: dict[str, list[float]] = {"marker_only": [], "with_input_offsets": []}
    epoch = 0
    for _ in range(rounds):
        for variant in out:
            epoch += 1
            started = time.perf_counter()
            producer.begin_transaction()
            producer.produce(marker_topic, b"v")
            mark = [TopicPartition(marker_topic, 0, epoch + 1, metadata="{}")]
            producer.send_offsets_to_transaction(mark, marker_meta, CALL_TIMEOUT_S)
            if variant == "with_input_offsets":
                offsets = group_offsets(_plan(epoch, topic, partitions))
                producer.send_offsets_to_transaction(offsets, lag_meta, CALL_TIMEOUT_S)
            producer.commit_transaction(CALL_TIMEOUT_S)
            out[variant].append(1000 * (time.perf_counter() - started))
    marker.close()
    return {k: round(statistics.median(v), 2) for k, v in out.items()}


def postgres_ms(dsn: str, partitions: int, rounds: int) -> float:
    """Median ms of ``write_input_offsets`` of ``partitions`` inside a transaction."""
    import psycopg

    from connectors.postgres._connect import Conn
    from connectors.postgres._input_offsets import ensure_offsets_table, write_input_offsets

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    times = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        typed: Conn = conn
        ensure_offsets_table(typed, schema)
        for epoch in range(1, rounds + 1):
            with conn.transaction():
                started = time.perf_counter()
                write_input_offsets(typed, schema, "bench", _plan(epoch, "in", partitions))
                times.append(1000 * (time.perf_counter() - started))
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return round(statistics.median(times), 3)


def driver_read_ms(bootstrap: str, partitions: int, batches: int) -> dict[str, float]:
    """Milliseconds of ``batch_input`` per micro-batch: the first one, and the median after."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from benchmarks._spark import bench_session
    from connectors.kafka import register
    from connectors.stage._binding import query_id_of
    from connectors.stage._offsets import batch_input

    topic = f"bench-offsets-read-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=CALL_TIMEOUT_S)
    producer = Producer({"bootstrap.servers": bootstrap})
    per_batch = 10 * partitions
    for i in range(per_batch * batches):
        producer.produce(topic, str(i).encode(), partition=i % partitions)
    producer.flush(CALL_TIMEOUT_S)
    spark = bench_session("bench-offsets-read")
    register(spark)
    times: list[float] = []
    recorded: list[bool] = []

    def timed(df: Any, batch_id: int) -> None:
        started = time.perf_counter()
        offsets = batch_input(df, query_id_of(df), batch_id)
        times.append(1000 * (time.perf_counter() - started))
        recorded.append(offsets is not None and bool(offsets.end))

    stream = (
        spark.readStream.format("kafka-rc")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_batch))
        .load()
    )
    checkpoint = f"/tmp/bench-offsets-{uuid.uuid4().hex[:8]}"
    query = (
        stream.writeStream.foreachBatch(timed)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(QUERY_TIMEOUT_S)
    spark.stop()
    if not times or not all(recorded):
        msg = f"the offsets were not read in every batch ({recorded})"
        raise RuntimeError(msg)
    rest = times[1:] or times
    return {
        "first": round(times[0], 2),
        "median": round(statistics.median(rest), 2),
        "p90": round(sorted(rest)[int(0.9 * (len(rest) - 1))], 2),
        "batches": len(times),
    }


def _report(result: dict[str, Any]) -> None:
    counts = sorted(result["kafka"], key=int)
    rows: list[list[Any]] = []
    for p in counts:
        k, read = result["kafka"][p], result["driver_read"][p]
        rows.append(
            [
                p,
                k["with_input_offsets"] - k["marker_only"],
                result["postgres"][p],
                read["median"],
                read["first"],
            ]
        )
    columns = [
        "input partitions",
        "Kafka group commit +ms",
        "PostgreSQL row ms",
        "driver read ms (median)",
        "driver read ms (first)",
    ]
    print_table("Per-epoch cost of the input offsets (medians)", columns, rows)
    series = {c: [float(r[i]) for r in rows] for i, c in enumerate(columns) if i in (1, 2, 3)}
    grouped_bar_plot(
        RESULTS / "offsets.png",
        "Input offsets: cost per epoch",
        [("ms per epoch", [f"{p} partitions" for p in counts], series, None)],
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--partitions", default="2,32")
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args(argv)
    counts = [int(p) for p in args.partitions.split(",")]
    result: dict[str, Any] = {"rounds": args.rounds, "kafka": {}, "postgres": {}}
    result["driver_read"] = {}
    with Progress() as progress:
        task = progress.add_task("input offsets", total=3 * len(counts))
        with broker(args.bootstrap_servers) as bootstrap:
            for p in counts:
                result["kafka"][str(p)] = kafka_ms(bootstrap, p, args.rounds)
                progress.advance(task)
            for p in counts:
                result["driver_read"][str(p)] = driver_read_ms(bootstrap, p, args.batches)
                progress.advance(task)
        with server(args.dsn) as (dsn, _):
            for p in counts:
                result["postgres"][str(p)] = postgres_ms(dsn, p, args.rounds)
                progress.advance(task)
    _report(result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

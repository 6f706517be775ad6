"""Per-epoch cost of committing the input offsets inside the output's transaction.

``python -m benchmarks.bench_offsets [--rounds N] [--partitions P,...]``

Isolated from Spark (whose epoch time varies by far more than this cost), it runs the exact
calls one write task adds per epoch (docs/perf-notes.md, "Input offsets"):

* Kafka (``KafkaSink(commit_offsets_to_group=...)``): transactions of one record and the
  marker's ``send_offsets_to_transaction``, without and with a second one for the input
  offsets of ``P`` input partitions (``_input_offsets.group_offsets``): the difference of the
  median transaction times is the cost; on minikafka unless ``--bootstrap-servers``;
* PostgreSQL: ``_input_offsets.write_input_offsets`` of ``P`` partitions inside a
  transaction (an embedded server unless ``--dsn``), median milliseconds.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

from benchmarks._broker import broker
from benchmarks._pg import server
from txn import EpochPlan, InputOffsets

# Seconds a transactional call of the benchmark may take.
CALL_TIMEOUT_S = 30.0


def _plan(epoch: int, topic: str, partitions: int) -> EpochPlan:
    ends = {(topic, p): 1000 * epoch + p for p in range(partitions)}
    return EpochPlan("bench", epoch, 1, "f", input=InputOffsets.of({}, ends))


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


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--partitions", default="2,32")
    args = parser.parse_args(argv)
    counts = [int(p) for p in args.partitions.split(",")]
    result: dict[str, Any] = {"rounds": args.rounds, "kafka": {}, "postgres": {}}
    with broker(args.bootstrap_servers) as bootstrap:
        for p in counts:
            result["kafka"][str(p)] = kafka_ms(bootstrap, p, args.rounds)
    with server(args.dsn) as (dsn, _):
        for p in counts:
            result["postgres"][str(p)] = postgres_ms(dsn, p, args.rounds)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Schema Registry formats: rows/s of Avro (and the other formats) against JSON strings.

Run ``python -m benchmarks.bench_formats`` (``--help`` for options). In this process, Arrow
batches of 10,000 rows (Spark's ``maxRecordsPerBatch``) of a five-field record (id, key,
seq, name, amount) go through a write task's path:

* ``encode``: the format layer alone (``connectors.kafka._formats._encode.BatchEncoder`` on a
  plan resolved against the library's in-process registry), rows/s of thread CPU time;
  ``json strings`` costs nothing here (Spark's ``to_json`` made them in the JVM);
  ``avro (fastavro direct)`` is ``fastavro.schemaless_writer`` per row with the same
  framing: the floor under the library's ``AvroSerializer`` per-row overhead;
* ``encode + produce``: the encoded batches (or the JSON strings) through the sink's
  ``RecordWriter`` to a broker (minikafka in a subprocess, or ``--bootstrap-servers``),
  flushed; rows/s of wall time (the at-least-once producer: no transaction).

The table shows the median over rounds; the PNG goes to ``benchmarks/results/formats.png``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks._broker import broker
from benchmarks._plot import grouped_bar_plot
from benchmarks._table import print_table
from connectors.kafka._formats._encode import BatchEncoder
from connectors.kafka._sink import _writer
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._producers import new_producer
from connectors.kafka._sink._sink import KafkaConnector

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
BATCH_ROWS = 10_000
# Seconds for topic creation and flush.
KAFKA_TIMEOUT_S = 60.0
FORMATS = ("json strings", "avro", "avro (fastavro direct)", "json-schema", "protobuf")
PROTO = "tests.kafka_sink._proto_order:Order"


def value_type() -> Any:
    from pyspark.sql import types as T  # noqa: N812

    return T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("key", T.StringType(), False),
            T.StructField("seq", T.LongType(), False),
            T.StructField("name", T.StringType()),
            T.StructField("amount", T.DoubleType()),
        ]
    )


def make_batches(
    rows: int, proto: bool = False
) -> tuple[list[pa.RecordBatch], list[pa.RecordBatch]]:
    """(struct batches, JSON string batches) of the same rows."""
    structs, strings = [], []
    for start in range(0, rows, BATCH_ROWS):
        ids = range(start, min(rows, start + BATCH_ROWS))
        if proto:  # the test message has id, name, tags
            body = [{"id": i, "name": f"n{i}", "tags": [f"k{i % 16}"]} for i in ids]
        else:
            body = [
                {"id": i, "key": f"k{i % 16}", "seq": i // 16, "name": f"n{i}", "amount": i * 0.5}
                for i in ids
            ]
        keys = pa.array([f"k{i % 16}" for i in ids], pa.string())
        structs.append(pa.record_batch({"key": keys, "value": pa.array(body)}))
        text = [json.dumps(b, separators=(",", ":")) for b in body]
        strings.append(pa.record_batch({"key": keys, "value": pa.array(text, pa.string())}))
    return structs, strings


def encoder(kind: str, topic: str) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """The batch encoding of format ``kind`` (resolved against an in-process registry)."""
    from pyspark.sql import types as T  # noqa: N812

    if kind == "json strings":
        return lambda batch: batch
    registry = {"url": f"mock://bench-{uuid.uuid4().hex}"}
    fmt: Any = kind
    vtype = value_type()
    if kind == "protobuf":
        fmt = {"kind": "protobuf", "message": PROTO}
        vtype = T.StructType(
            [
                T.StructField("id", T.LongType()),
                T.StructField("name", T.StringType()),
                T.StructField("tags", T.ArrayType(T.StringType())),
            ]
        )
    plain = "avro" if kind.startswith("avro") else fmt
    cfg = SinkConfig.create(
        bootstrap_servers="x:9", topic=topic, sink_id="bench-fmt", value_format=plain,
        schema_registry=registry,
    )  # fmt: skip
    conn = KafkaConnector(cfg)
    schema = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", vtype)])
    plan = conn.resource(conn.check_input(schema)).formats
    assert plan is not None
    if kind != "avro (fastavro direct)":
        return BatchEncoder(plan).encode
    return fastavro_encoder(plan.columns[0].schema or "", plan.columns[0].schema_id)


def fastavro_encoder(schema: str, schema_id: int) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    from fastavro import parse_schema, schemaless_writer

    parsed = parse_schema(json.loads(schema))
    prefix = b"\x00" + schema_id.to_bytes(4, "big")

    def one(row: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(prefix)
        schemaless_writer(out, parsed, row)
        return out.getvalue()

    def encode(batch: pa.RecordBatch) -> pa.RecordBatch:
        values = pa.array(list(map(one, batch.column(1).to_pylist())), pa.binary())
        return pa.RecordBatch.from_arrays([batch.column(0), values], names=batch.schema.names)

    return encode


def run_encode(
    encode: Callable[[pa.RecordBatch], pa.RecordBatch], batches: list[pa.RecordBatch]
) -> tuple[float, list[pa.RecordBatch]]:
    c0 = time.thread_time()
    out = [encode(b) for b in batches]
    return time.thread_time() - c0, out


def run_produce(
    cfg: SinkConfig,
    encode: Callable[[pa.RecordBatch], pa.RecordBatch],
    batches: list[pa.RecordBatch],
) -> float:
    """Wall seconds to encode, produce and flush ``batches`` (an idempotent producer)."""
    errors = _writer.DeliveryErrors()
    producer = new_producer(cfg, None, errors)
    producer.produce(cfg.topic, b"warm-up")
    producer.flush(KAFKA_TIMEOUT_S)
    writer = _writer.RecordWriter(producer, errors, _writer.RecordLayout(key=True), cfg.topic)
    t0 = time.perf_counter()
    writer.write(map(encode, batches))
    writer.flush(KAFKA_TIMEOUT_S)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000, help="rows per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per format")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    args = parser.parse_args(argv)
    kinds = [k for k in args.formats.split(",") if k]
    topic = f"bench-formats-{uuid.uuid4().hex[:6]}"
    data = make_batches(args.rows)
    proto_data = make_batches(args.rows, proto=True)
    encode_rate: dict[str, float] = {}
    produce_rate: dict[str, float] = {}
    with broker(args.bootstrap_servers) as bootstrap:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(KAFKA_TIMEOUT_S)
        cfg = SinkConfig.create(bootstrap_servers=bootstrap, topic=topic, sink_id="bench-fmt")
        for kind in kinds:
            structs, strings = proto_data if kind == "protobuf" else data
            source = strings if kind == "json strings" else structs
            encode = encoder(kind, topic)
            cpu, wall = [], []
            for _ in range(args.rounds):
                seconds, _out = run_encode(encode, source)
                cpu.append(seconds)
                wall.append(run_produce(cfg, encode, source))
            encode_rate[kind] = args.rows / max(statistics.median(cpu), 1e-9)
            produce_rate[kind] = args.rows / statistics.median(wall)
    rows = [
        [k, encode_rate[k] if k != "json strings" else "no Python work", produce_rate[k]]
        for k in kinds
    ]
    print_table(
        f"formats: {args.rows:,} rows x {args.rounds} rounds (median)",
        ["value format", "encode rows/s (CPU)", "encode + produce rows/s"],
        rows,
    )
    path = grouped_bar_plot(
        RESULTS / "formats.png",
        "KafkaSink value formats: rows/s of a write task",
        [
            ("encode + produce rows/s", kinds, {"rows/s": [produce_rate[k] for k in kinds]}, None),
            (
                "encode rows/s (thread CPU)",
                [k for k in kinds if k != "json strings"],
                {"rows/s": [encode_rate[k] for k in kinds if k != "json strings"]},
                None,
            ),
        ],
    )
    print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""KafkaSink with ``value_format="avro"`` end to end: real Spark, a real broker, a registry.

The registry is ``SCHEMA_REGISTRY_URL`` when set (a real Confluent Schema Registry, e.g.
docker/docker-compose.yml's ``schema-registry`` service), else confluent-kafka's in-process
registry (``mock://``; the write tasks never call the registry, the driver and this test
share it). Topics are fresh per test, so are the subjects.

Checks: the Avro output read back through the registry equals the input rows; a replay of a
partly committed batch (unaligned, one partition failed) completes it exactly once, every
record byte-identical to what the library's own ``AvroSerializer`` makes of its row
(checker: ``connectors.verify.check_exactly_once``); the source's decode helper reads the
output back in Spark.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import functions as F  # noqa: N812 - Spark's customary alias
from pyspark.sql import types as T  # noqa: N812

from connectors.kafka import KafkaSink, decode_avro, register
from connectors.kafka._client import Settings
from connectors.kafka._formats._registry import driver_client
from connectors.testing import FaultPlan, inject_faults
from connectors.verify import (
    RecordIdentity,
    check_exactly_once,
    json_identity,
    produce_input,
    read_committed_topic,
)
from integration_tests.kafka_sink._support import after_partition_commits, sid

pytestmark = pytest.mark.spark

VALUE = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("key", T.StringType(), False),
        T.StructField("seq", T.LongType(), False),
    ]
)
SCHEMA = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", VALUE)])


@pytest.fixture
def registry() -> dict[str, str]:
    """The registry's client settings: SCHEMA_REGISTRY_URL, or an in-process one."""
    return {"url": os.environ.get("SCHEMA_REGISTRY_URL") or f"mock://it-{uuid.uuid4().hex}"}


def client(registry):
    return driver_client(Settings.of(registry))


def input_rows(kafka_bootstrap, topic, n):
    produce_input(kafka_bootstrap, topic, n, keys=8)
    records = read_committed_topic(kafka_bootstrap, topic)
    return [(r.key.decode(), json.loads(r.value)) for r in records]


def avro_identity(registry):
    """Identity of an input (JSON) or output (Avro, decoded through the registry) record."""
    decode = AvroDeserializer(client(registry))

    def identity(record):
        if record.value is not None and record.value[:1] == b"\x00":
            body = decode(record.value)
            return RecordIdentity(id=str(body["id"]), key=str(body["key"]))
        return json_identity(record)

    return identity


def test_avro_output_equals_input_and_a_replay_is_byte_identical(
    spark, kafka_bootstrap, new_topic, registry, tmp_path
):
    source = new_topic("fmt-in", partitions=2)
    topic = new_topic("fmt-out", partitions=3)
    rows = input_rows(kafka_bootstrap, source, 300)
    # order_by keeps each key's input order in the output (the checker checks it)
    df = spark.createDataFrame(rows, SCHEMA).repartition(3).withColumn("pos", F.col("value.id"))
    faults = tmp_path / "faults.json"
    faults.write_text(
        json.dumps(
            [
                # partition 1 fails only once partition 0 has committed on its own
                *after_partition_commits(epoch=0),
                {
                    "id": "boom",
                    "step": "mid_write",
                    "epoch": 0,
                    "partition": 1,
                    "action": "raise",
                    "after_rows": 5,
                    "times": 1,
                },
            ]
        )
    )
    sink_id = sid()
    options = {
        "value_format": "avro",
        "schema_registry": registry,
        "mode": "unaligned",
        "parallelism": 2,
        "stage_retries": 0,
        "order_by": ("pos",),
    }
    sink = KafkaSink(kafka_bootstrap, topic, sink_id, **options)
    try:
        with (
            pytest.raises(Exception, match="injected fault"),
            inject_faults(FaultPlan(str(faults))),
        ):
            sink(df, 0)  # partition 0 committed on its own (unaligned), partition 1 failed
    finally:
        sink.close()
    replay = KafkaSink(kafka_bootstrap, topic, sink_id, **options)  # a restarted driver
    try:
        result = replay(df, 0)
        assert result.committed
        assert {r.partition: r.outcome.value for r in result.reports} == {
            0: "already-committed",
            1: "committed",
        }
        assert replay(df, 0).skipped
    finally:
        replay.close()

    report = check_exactly_once(
        kafka_bootstrap,
        input_topic=source,
        output_topic=topic,
        sink_id=sink_id,
        key_fn=avro_identity(registry),
    )
    assert report.ok, (dict(report.anomaly_counts), report.examples[:3])
    written = read_committed_topic(kafka_bootstrap, topic)
    registry_client = client(registry)
    decode = AvroDeserializer(registry_client)
    got = sorted(((r.key.decode(), decode(r.value)) for r in written), key=lambda kv: kv[1]["id"])
    assert got == sorted(rows, key=lambda kv: kv[1]["id"])
    # every record, the replayed partition's too, is what the library's serializer makes
    subject = f"{topic}-value"
    writer = registry_client.get_latest_version(subject).schema.schema_str
    reference = AvroSerializer(registry_client, writer, conf={"auto.register.schemas": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    by_id = {decode(r.value)["id"]: r.value for r in written}
    assert by_id == {body["id"]: reference(body, ctx) for _, body in rows}


def test_decode_avro_reads_the_sinks_output_back(spark, kafka_bootstrap, new_topic, registry):
    source = new_topic("fmt-src", partitions=1)
    topic = new_topic("fmt-dec", partitions=2)
    rows = input_rows(kafka_bootstrap, source, 50)
    sink = KafkaSink(kafka_bootstrap, topic, sid(), value_format="avro", schema_registry=registry)
    try:
        assert sink(spark.createDataFrame(rows, SCHEMA), 0).committed
    finally:
        sink.close()
    register(spark)
    raw = (
        spark.read.format("kafka-rc")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    decoded = decode_avro(raw, schema_registry=registry, topic=topic)
    assert decoded.schema["value"].dataType == VALUE
    got = sorted((r.value.asDict() for r in decoded.select("value").collect()), key=_id)
    assert got == sorted((body for _, body in rows), key=_id)


def _id(body):
    return body["id"]

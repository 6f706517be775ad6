"""Unit tests of the Schema Registry format layer (connectors.kafka._formats).

The registry is confluent-kafka's in-process one (``mock://SCOPE`` URLs, one per test);
the serializers and deserializers are the library's own. Encoding runs the task-side
path (``BatchEncoder`` on a plan resolved by the sink's connector), decoding uses the
library's deserializers on the same registry, so a round trip checks the wire format.
"""

from __future__ import annotations

import datetime
import decimal
import pickle
import uuid

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import types as T  # noqa: N812 - Spark's customary alias

from connectors.kafka import KafkaCode, KafkaConnectorError, RecordFormat
from connectors.kafka._formats import _encode, _registry
from connectors.kafka._formats._config import registry_settings
from connectors.kafka._formats._decode import (
    ColumnReader,
    avro_reader,
    decode_batches,
    json_schema_reader,
    protobuf_reader,
)
from connectors.kafka._formats._encode import BatchEncoder
from connectors.kafka._formats._plan import ColumnPlan, FormatPlan
from connectors.kafka._formats._registry import PinnedRegistry, Registered, driver_client
from connectors.kafka._sink._config import SinkConfig
from connectors.kafka._sink._sink import KafkaConnector
from connectors.stage import StageCode
from tests.kafka_sink._proto_order import Order
from txn import TxnCode

SECRET = "s3cr3t-pw"
VALUE = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("name", T.StringType()),
        T.StructField("amount", T.DecimalType(10, 2)),
        T.StructField("day", T.DateType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("inner", T.StructType([T.StructField("x", T.IntegerType())])),
    ]
)
ROWS = [
    {
        "id": 1,
        "name": "a",
        "amount": decimal.Decimal("1.50"),
        "day": datetime.date(2024, 2, 29),
        "at": datetime.datetime(2024, 1, 1, 12, 0, tzinfo=datetime.timezone.utc),
        "tags": ["x", None],
        "inner": {"x": 7},
    },
    {
        "id": 2,
        "name": None,
        "amount": None,
        "day": None,
        "at": None,
        "tags": None,
        "inner": None,
    },
]


@pytest.fixture
def registry() -> dict[str, str]:
    """A fresh in-process registry (its own mock:// scope) with a secret credential."""
    return {"url": f"mock://{uuid.uuid4().hex}", "basic.auth.user.info": f"user:{SECRET}"}


def schema(value=VALUE, key=None):
    fields = [T.StructField("value", value)]
    if key is not None:
        fields.insert(0, T.StructField("key", key))
    return T.StructType(fields)


def connector(registry, topic="orders", **options):
    cfg = SinkConfig.create(bootstrap_servers="127.0.0.1:9", topic=topic, sink_id="fmt", **options)
    return KafkaConnector(cfg)


def resolve(conn, spark_schema):
    return conn.resource(conn.check_input(spark_schema))


def value_batch(rows=ROWS, value_type=VALUE):
    from pyspark.sql.pandas.types import to_arrow_type

    return pa.RecordBatch.from_arrays(
        [pa.array(rows, type=to_arrow_type(value_type, timezone="UTC"))], names=["value"]
    )


def encoded_values(resource, batch):
    return BatchEncoder(resource.formats).encode(batch).column(0).to_pylist()


# -- options ---------------------------------------------------------------------------
def test_options_are_validated_at_construction_without_io(registry):
    with pytest.raises(
        KafkaConnectorError, match="format kind", check=lambda e: e.code is TxnCode.CONFIG
    ):
        connector(registry, value_format="xml", schema_registry=registry)
    with pytest.raises(
        KafkaConnectorError, match="need schema_registry", check=lambda e: e.code is TxnCode.CONFIG
    ):
        connector(registry, value_format="avro")
    with pytest.raises(
        KafkaConnectorError,
        match="neither key_format nor value_format",
        check=lambda e: e.code is TxnCode.CONFIG,
    ):
        connector(registry, schema_registry=registry)
    with pytest.raises(
        KafkaConnectorError, match="message=", check=lambda e: e.code is TxnCode.CONFIG
    ):
        connector(registry, value_format="protobuf", schema_registry=registry)
    with pytest.raises(
        KafkaConnectorError, match="cannot be imported", check=lambda e: e.code is TxnCode.CONFIG
    ):
        connector(
            registry,
            value_format={"kind": "protobuf", "message": "no.such.module:Msg"},
            schema_registry=registry,
        )
    with pytest.raises(
        KafkaConnectorError, match="subject_strategy", check=lambda e: e.code is TxnCode.CONFIG
    ):
        connector(
            registry, value_format={"kind": "avro", "subject_strategy": "x"},
            schema_registry=registry,
        )  # fmt: skip
    with pytest.raises(KafkaConnectorError, match="url", check=lambda e: e.code is TxnCode.CONFIG):
        connector(registry, value_format="avro", schema_registry={"url": "ftp://registry"})
    # the library's own checks, with the secret scrubbed: a user:password without ':'
    bad = {**registry, "basic.auth.user.info": "no-colon-" + SECRET}
    with pytest.raises(KafkaConnectorError, check=lambda e: e.code is TxnCode.CONFIG) as info:
        connector(registry, value_format="avro", schema_registry=bad)
    assert SECRET not in str(info.value)


def test_credentials_never_in_repr_plan_or_tasks(registry):
    conn = connector(registry, value_format="avro", schema_registry=registry)
    assert SECRET not in repr(conn.cfg)
    resource = resolve(conn, schema())
    shipped = pickle.dumps(resource)
    assert SECRET.encode() not in shipped
    assert resource.cfg.schema_registry.items == ()  # the tasks hold no registry settings
    assert SECRET not in repr(resource)


def test_plans_cross_process_boundaries_by_pickle(registry):
    conn = connector(registry, value_format="avro", schema_registry=registry)
    resource = resolve(conn, schema())
    plan = resource.formats
    assert isinstance(plan, FormatPlan)
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert pickle.loads(pickle.dumps(resource)) == resource
    fmt = RecordFormat(kind="avro", subject_strategy="record", record_name="Order")
    assert pickle.loads(pickle.dumps(fmt)) == fmt
    reader = ColumnReader(
        column="value",
        kind="avro",
        subject="orders-value",
        reader_schema='"string"',
        writer_schemas=((1, '"string"'),),
    )
    assert pickle.loads(pickle.dumps(reader)) == reader
    # the sink's connector (Spark Connect ships it) pickles without its registry client
    again = pickle.loads(pickle.dumps(conn))
    assert again.cfg == conn.cfg


# -- Avro --------------------------------------------------------------------------------
def test_avro_round_trip_through_the_registry(registry):
    conn = connector(registry, value_format="avro", schema_registry=registry)
    resource = resolve(conn, schema())
    values = encoded_values(resource, value_batch())
    client = driver_client(conn.cfg.schema_registry)
    [only] = resource.formats.columns
    assert only.subject == "orders-value"
    assert client.get_latest_version("orders-value").schema_id == only.schema_id
    assert all(v[0] == 0 and int.from_bytes(v[1:5], "big") == only.schema_id for v in values)
    decode = AvroDeserializer(client)
    assert [decode(v) for v in values] == ROWS


def test_a_replay_writes_byte_identical_records(registry):
    first = resolve(connector(registry, value_format="avro", schema_registry=registry), schema())
    bytes_first = encoded_values(first, value_batch())
    _encode.serializer.cache_clear()  # a new write-task process
    # a new sink object (a restarted driver) resolves the same id and writes the same bytes
    again = resolve(connector(registry, value_format="avro", schema_registry=registry), schema())
    assert again.fingerprint() == first.fingerprint()
    assert encoded_values(again, value_batch()) == bytes_first


def test_another_schema_id_changes_the_fingerprint(registry):
    """A replay that would resolve another id is refused by the pinned plan's fingerprint."""
    base = resolve(connector(registry, value_format="avro", schema_registry=registry), schema())
    wider = T.StructType([*VALUE.fields, T.StructField("extra", T.StringType())])
    other = resolve(
        connector(registry, value_format="avro", schema_registry=registry), schema(wider)
    )
    assert other.formats.columns[0].schema_id != base.formats.columns[0].schema_id
    assert other.fingerprint() != base.fingerprint()


@pytest.mark.parametrize(
    ("strategy", "subject"),
    [("topic", "orders-key"), ("record", "eos.Order"), ("topic-record", "orders-eos.Order")],
)
def test_confluent_subject_strategies(registry, strategy, subject):
    text = (
        '{"type":"record","name":"Order","namespace":"eos","fields":[{"name":"id","type":"long"}]}'
    )
    fmt = {"kind": "avro", "schema": text, "subject_strategy": strategy}
    conn = connector(registry, key_format=fmt, value_format="avro", schema_registry=registry)
    resource = resolve(conn, schema(key=T.StructType([T.StructField("id", T.LongType())])))
    subjects = {c.column: c.subject for c in resource.formats.columns}
    assert subjects == {"key": subject, "value": "orders-value"}


def test_topic_strategies_need_a_fixed_topic(registry):
    conn = connector(registry, topic=None, value_format="avro", schema_registry=registry)
    spark_schema = T.StructType([*schema().fields, T.StructField("topic", T.StringType())])
    with pytest.raises(
        KafkaConnectorError,
        match="subject_strategy='record'",
        check=lambda e: e.code is StageCode.INPUT_SCHEMA,
    ):
        conn.check_input(spark_schema)
    record = {"kind": "avro", "subject_strategy": "record", "record_name": "Order"}
    conn = connector(registry, topic=None, value_format=record, schema_registry=registry)
    assert resolve(conn, spark_schema).formats.columns[0].subject == "Order"


def test_lookup_without_registration(registry):
    fmt = {"kind": "avro", "auto_register": False}
    conn = connector(registry, value_format=fmt, schema_registry=registry)
    with pytest.raises(
        KafkaConnectorError, match="HTTP 404", check=lambda e: e.code is KafkaCode.SCHEMA_RESOLUTION
    ):
        resolve(conn, schema())
    registered = resolve(
        connector(registry, value_format="avro", schema_registry=registry), schema()
    )
    looked_up = resolve(connector(registry, value_format=fmt, schema_registry=registry), schema())
    assert looked_up.formats == registered.formats


def test_a_pinned_version_is_the_writer_schema(registry):
    client = driver_client(SinkConfig.create(
        bootstrap_servers="x:9", topic="orders", sink_id="fmt", value_format="avro",
        schema_registry=registry,
    ).schema_registry)  # fmt: skip
    v1 = '{"type":"record","name":"Value","fields":[{"name":"id","type":"long"}]}'
    first = client.register_schema("orders-value", Schema(v1, "AVRO"))
    resolve(connector(registry, value_format="avro", schema_registry=registry), schema())
    conn = connector(
        registry, value_format={"kind": "avro", "version": 1}, schema_registry=registry
    )
    resource = resolve(conn, schema(T.StructType([T.StructField("id", T.LongType(), False)])))
    assert resource.formats.columns[0].schema_id == first
    values = encoded_values(resource, pa.RecordBatch.from_pydict({"value": [{"id": 5}]}))
    assert AvroDeserializer(client)(values[0]) == {"id": 5}


def test_a_row_that_does_not_fit_names_column_and_row(registry):
    text = '{"type":"record","name":"Value","fields":[{"name":"name","type":"string"}]}'
    fmt = {"kind": "avro", "schema": text}
    conn = connector(registry, value_format=fmt, schema_registry=registry)
    resource = resolve(conn, schema(T.StructType([T.StructField("name", T.StringType())])))
    batch = pa.RecordBatch.from_pydict({"value": [{"name": "a"}, {"name": None}]})
    with pytest.raises(
        KafkaConnectorError,
        match="row 1 .* column 'value'",
        check=lambda e: e.code is KafkaCode.RECORD_FORMAT,
    ) as info:
        BatchEncoder(resource.formats).encode(batch)
    assert info.value.column == "value"
    assert info.value.retry_stage is False


def test_types_without_a_derived_schema_are_refused_on_the_driver(registry):
    conn = connector(registry, value_format="avro", schema_registry=registry)
    mapped = T.StructType([T.StructField("m", T.MapType(T.StringType(), T.LongType()))])
    with pytest.raises(
        KafkaConnectorError, match="field 'm'", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ):
        conn.check_input(schema(mapped))
    conn = connector(registry, value_format="json-schema", schema_registry=registry)
    with pytest.raises(
        KafkaConnectorError,
        match="cast it to string",
        check=lambda e: e.code is StageCode.INPUT_SCHEMA,
    ):
        conn.check_input(schema())  # decimal, date, timestamp


def test_nulls_stay_null_and_a_plain_value_column_is_refused_unformatted(registry):
    conn = connector(registry, value_format="avro", schema_registry=registry)
    resource = resolve(conn, schema())
    batch = pa.RecordBatch.from_arrays(
        [pa.array([None], type=value_batch().schema[0].type)], ["value"]
    )
    assert encoded_values(resource, batch) == [None]
    plain = connector(registry)
    with pytest.raises(
        KafkaConnectorError,
        match="column 'value' has type struct",
        check=lambda e: e.code is StageCode.INPUT_SCHEMA,
    ):
        plain.check_input(schema())


# -- JSON Schema and Protobuf ------------------------------------------------------------
def test_json_schema_round_trip(registry):
    value = T.StructType(
        [
            T.StructField("id", T.LongType(), False),
            T.StructField("name", T.StringType()),
            T.StructField("tags", T.ArrayType(T.StringType())),
        ]
    )
    rows = [{"id": 1, "name": "a", "tags": ["x"]}, {"id": 2, "name": None, "tags": None}]
    conn = connector(registry, value_format="json-schema", schema_registry=registry)
    resource = resolve(conn, schema(value))
    values = encoded_values(resource, value_batch(rows, value))
    [only] = resource.formats.columns
    assert int.from_bytes(values[0][1:5], "big") == only.schema_id
    decode = JSONDeserializer(None, schema_registry_client=driver_client(conn.cfg.schema_registry))
    ctx = SerializationContext("orders", MessageField.VALUE)
    assert [decode(v, ctx) for v in values] == rows


def test_protobuf_round_trip(registry):
    fmt = {"kind": "protobuf", "message": "tests.kafka_sink._proto_order:Order"}
    conn = connector(registry, value_format=fmt, schema_registry=registry)
    value = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("name", T.StringType()),
            T.StructField("tags", T.ArrayType(T.StringType())),
        ]
    )
    resource = resolve(conn, schema(value))
    rows = [{"id": 1, "name": "a", "tags": ["x", "y"]}, {"id": 2, "name": None, "tags": []}]
    values = encoded_values(resource, value_batch(rows, value))
    [only] = resource.formats.columns
    assert only.subject == "orders-value"
    assert int.from_bytes(values[0][1:5], "big") == only.schema_id
    decode = ProtobufDeserializer(Order, {"use.deprecated.format": False})
    ctx = SerializationContext("orders", MessageField.VALUE)
    assert [decode(v, ctx) for v in values] == [
        Order(id=1, name="a", tags=["x", "y"]),
        Order(id=2),
    ]


# -- the registry as the tasks and the driver see it ---------------------------------------
def test_pinned_registry_answers_only_the_plan():
    pinned = PinnedRegistry((Registered("orders-value", 7, 1),))
    assert pinned.lookup_schema("orders-value", Schema('"long"', "AVRO")).schema_id == 7
    with pytest.raises(
        KafkaConnectorError,
        match="does not hold",
        check=lambda e: e.code is KafkaCode.SCHEMA_RESOLUTION,
    ):
        pinned.lookup_schema("other-value", Schema('"long"', "AVRO"))
    with pytest.raises(
        KafkaConnectorError,
        match="schema id 8",
        check=lambda e: e.code is KafkaCode.SCHEMA_RESOLUTION,
    ):
        pinned.get_schema(8)


def test_a_plan_for_another_subject_is_refused_in_the_task(registry):
    conn = connector(registry, value_format="avro", schema_registry=registry)
    [col] = resolve(conn, schema()).formats.columns
    moved = FormatPlan((ColumnPlan(**{**col.__dict__, "registered": (Registered("x-value", 1),)}),))
    with pytest.raises(
        KafkaConnectorError,
        match="does not hold",
        check=lambda e: e.code is KafkaCode.SCHEMA_RESOLUTION,
    ):
        BatchEncoder(moved).encode(value_batch())


def test_an_unreachable_registry_is_a_typed_error(monkeypatch):
    monkeypatch.setattr(_registry, "REGISTRY_WAIT_S", 1.0)
    unreachable = {"url": "http://127.0.0.1:9", "basic.auth.user.info": f"u:{SECRET}"}
    conn = connector(None, value_format="avro", schema_registry=unreachable)
    with pytest.raises(
        KafkaConnectorError,
        match="did not answer",
        check=lambda e: e.code is KafkaCode.SCHEMA_REGISTRY_UNAVAILABLE,
    ) as info:
        resolve(conn, schema())
    assert SECRET not in str(info.value)


# -- decoding (the source's value column) ------------------------------------------------
def decoded(reader, dtype, values):
    """Decode ``values`` as the executors do (one Arrow batch), return the decoded column."""
    from pyspark.sql.pandas.types import to_arrow_type

    batch = pa.RecordBatch.from_arrays([pa.array(values, type=pa.binary())], names=["value"])
    arrow_type = to_arrow_type(dtype, timezone="UTC")
    [out] = decode_batches(reader, arrow_type, iter([batch]))
    assert pickle.loads(pickle.dumps(reader)) == reader  # shipped to the executors
    return out.column(0).to_pylist()


def test_decode_avro_round_trip(registry):
    resource = resolve(connector(registry, value_format="avro", schema_registry=registry), schema())
    values = [*encoded_values(resource, value_batch()), None]
    reader, dtype = avro_reader(registry, "value", "orders-value", None)
    assert dtype == VALUE
    assert decoded(reader, dtype, values) == [*ROWS, None]


JSON_VALUE = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("name", T.StringType()),
        T.StructField("score", T.DoubleType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("inner", T.StructType([T.StructField("ok", T.BooleanType())])),
    ]
)
JSON_ROWS = [
    {"id": 1, "name": "a", "score": 1.5, "tags": ["x", None], "inner": {"ok": True}},
    {"id": 2, "name": None, "score": None, "tags": None, "inner": None},
]


def test_decode_json_schema_round_trip_with_a_derived_type(registry):
    conn = connector(registry, value_format="json-schema", schema_registry=registry)
    values = encoded_values(resolve(conn, schema(JSON_VALUE)), value_batch(JSON_ROWS, JSON_VALUE))
    reader, dtype = json_schema_reader(registry, "value", "orders-value", None)
    # the derived schema lists properties sorted by name: the struct follows the schema
    assert [f.name for f in dtype.fields] == ["id", "inner", "name", "score", "tags"]
    assert dtype["tags"].dataType == T.ArrayType(T.StringType(), True)
    assert dtype["inner"].dataType == T.StructType([T.StructField("ok", T.BooleanType())])
    assert decoded(reader, dtype, [*values, None]) == [*JSON_ROWS, None]


def test_decode_json_schema_with_an_explicit_spark_type(registry):
    conn = connector(registry, value_format="json-schema", schema_registry=registry)
    values = encoded_values(resolve(conn, schema(JSON_VALUE)), value_batch(JSON_ROWS, JSON_VALUE))
    wanted = T.StructType(
        [T.StructField("name", T.StringType()), T.StructField("id", T.LongType())]
    )
    reader, dtype = json_schema_reader(registry, "value", "orders-value", wanted)
    assert dtype == wanted
    assert decoded(reader, dtype, values) == [{"name": "a", "id": 1}, {"name": None, "id": 2}]


def test_a_json_schema_without_a_derived_type_asks_for_spark_schema(registry):
    client = driver_client(registry_settings(registry))
    loose = '{"type": "object", "additionalProperties": {"type": "string"}}'
    client.register_schema("loose-value", Schema(loose, "JSON"))
    with pytest.raises(
        KafkaConnectorError, match="spark_schema=", check=lambda e: e.code is StageCode.INPUT_SCHEMA
    ):
        json_schema_reader(registry, "value", "loose-value", None)


def test_decode_json_schema_refuses_a_record_that_is_not_framed(registry):
    conn = connector(registry, value_format="json-schema", schema_registry=registry)
    resolve(conn, schema(JSON_VALUE))
    reader, dtype = json_schema_reader(registry, "value", "orders-value", None)
    with pytest.raises(
        KafkaConnectorError,
        match="record 0 of column 'value'",
        check=lambda e: e.code is KafkaCode.RECORD_FORMAT,
    ):
        decoded(reader, dtype, [b'{"id": 1}'])


def test_decode_protobuf_round_trip():
    fmt = {"kind": "protobuf", "message": "tests.kafka_sink._proto_order:Order"}
    registry = {"url": f"mock://{uuid.uuid4().hex}"}
    conn = connector(registry, value_format=fmt, schema_registry=registry)
    value = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("name", T.StringType()),
            T.StructField("tags", T.ArrayType(T.StringType())),
        ]
    )
    rows = [{"id": 1, "name": "a", "tags": ["x", "y"]}, {"id": 2, "name": None, "tags": []}]
    values = encoded_values(resolve(conn, schema(value)), value_batch(rows, value))
    reader, dtype = protobuf_reader("value", "tests.kafka_sink._proto_order:Order")
    assert dtype == T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("name", T.StringType()),
            T.StructField("tags", T.ArrayType(T.StringType())),
        ]
    )
    # proto3 scalars without presence read back as their default ("" for the null name)
    assert decoded(reader, dtype, [*values, None]) == [
        rows[0],
        {"id": 2, "name": "", "tags": []},
        None,
    ]
    with pytest.raises(
        KafkaConnectorError, match="protobuf", check=lambda e: e.code is KafkaCode.RECORD_FORMAT
    ):
        decoded(reader, dtype, [b"not framed"])


def test_decode_protobuf_takes_an_importable_class():
    from google.protobuf.timestamp_pb2 import Timestamp

    reader, dtype = protobuf_reader("value", Timestamp)
    assert reader.message == "google.protobuf.timestamp_pb2:Timestamp"
    assert dtype == T.StructType(
        [T.StructField("seconds", T.LongType()), T.StructField("nanos", T.IntegerType())]
    )
    # a class built at run time (Order) has no module the executors could import it from
    with pytest.raises(
        KafkaConnectorError,
        match="pass message='module:Class'",
        check=lambda e: e.code is TxnCode.CONFIG,
    ):
        protobuf_reader("value", Order)
    with pytest.raises(
        KafkaConnectorError, match="cannot be imported", check=lambda e: e.code is TxnCode.CONFIG
    ):
        protobuf_reader("value", "no.such.module:Msg")

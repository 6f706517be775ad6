"""Decode a column of Confluent-framed records (the ``kafka-rc`` source's ``value``).

The reading side of ``value_format``: :func:`decode_avro`, :func:`decode_json_schema` and
:func:`decode_protobuf`. On the driver, once, they read the subject's registered versions
(their ids and writer schemas; Protobuf needs none: the caller's message class is the
schema) and derive the column's Spark type (from the Avro reader schema, the JSON Schema
or the message's descriptor; ``_read_types``). The executors decode with confluent-kafka's
``AvroDeserializer`` / ``JSONDeserializer`` / ``ProtobufDeserializer`` on a
:class:`~connectors.kafka._formats._registry.PinnedRegistry` holding those schemas, so they
make no registry request and hold no registry credentials. A record whose schema id was
registered after the decoder was built raises ``KafkaCode.SCHEMA_RESOLUTION`` (build it again:
restart the query). A record that is not in the wire format, or does not decode, raises
``KafkaCode.RECORD_FORMAT``; a null stays null.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connectors.kafka._client import scrub
from connectors.kafka._errors import KafkaCode, KafkaConnectorError
from connectors.kafka._formats._config import AVRO, JSON_SCHEMA, PROTOBUF, registry_settings
from connectors.kafka._formats._read_types import (
    message_row,
    spark_type_of_json_schema,
    spark_type_of_message,
)
from connectors.kafka._formats._registry import PinnedRegistry, call, driver_client
from connectors.kafka._formats._schemas import spark_type_of_avro
from connectors.stage import StageCode
from txn import TxnCode, has_code

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType

# Characters of a deserializer's complaint kept in a KafkaCode.RECORD_FORMAT.
_MAX_REASON = 300


@dataclass(frozen=True, kw_only=True)
class ColumnReader:
    """What the executors need to decode one column (picklable, no registry settings)."""

    column: str
    kind: str  # avro, json-schema or protobuf
    subject: str
    reader_schema: str | None  # Avro reader schema; None for the others
    writer_schemas: tuple[tuple[int, str], ...]  # (schema id, schema text); () for protobuf
    message: str | None = None  # protobuf message class as "module:Class"


def decode_avro(
    df: DataFrame,
    column: str = "value",
    *,
    schema_registry: Mapping[str, Any],
    topic: str | None = None,
    subject: str | None = None,
    reader_schema: str | None = None,
) -> DataFrame:
    """Return ``df`` with ``column`` (binary, Confluent-framed Avro) decoded into its Spark type.

    ``subject`` defaults to ``{topic}-{column}`` (Confluent's topic strategy); the reader
    schema to the subject's latest version. Works on streaming and batch DataFrames
    (``mapInArrow``). Registry I/O happens here, once, on the driver.

    Raises:
        TxnCode.CONFIG: a bad ``schema_registry`` setting.
        StageCode.INPUT_SCHEMA: the column is missing, or the reader schema has no Spark type.
        KafkaCode.SCHEMA_RESOLUTION / KafkaCode.SCHEMA_REGISTRY_UNAVAILABLE: the registry refused or
            did not answer.

    """
    _has_column("decode_avro", df, column)
    subject = subject_of("decode_avro", column, topic, subject)
    return _decode(df, *avro_reader(schema_registry, column, subject, reader_schema))


def avro_reader(
    schema_registry: Mapping[str, Any], column: str, subject: str, reader_schema: str | None
) -> tuple[ColumnReader, DataType]:
    """Return the reader of an Avro column and its Spark type (driver, registry I/O)."""
    client = driver_client(registry_settings(dict(schema_registry)))
    writers = _writer_schemas(client, subject)
    if reader_schema is None:
        reader_schema = _latest(client, subject)
    reader = ColumnReader(
        column=column,
        kind=AVRO,
        subject=subject,
        reader_schema=reader_schema,
        writer_schemas=writers,
    )
    return reader, spark_type_of_avro(reader_schema)


def decode_json_schema(
    df: DataFrame,
    column: str = "value",
    *,
    schema_registry: Mapping[str, Any],
    topic: str | None = None,
    subject: str | None = None,
    spark_schema: DataType | None = None,
) -> DataFrame:
    """Return ``df`` with ``column`` (Confluent-framed JSON Schema) decoded into a Spark type.

    Each record is validated against its writer schema (by the record's id). The Spark
    type is ``spark_schema`` if given (fields the records lack are null, others ignored),
    else derived from the subject's latest version (docs/kafka-source.md).

    Raises:
        TxnCode.CONFIG: a bad ``schema_registry`` setting.
        StageCode.INPUT_SCHEMA: the column is missing, or the latest schema has no derived
            Spark type (pass ``spark_schema=``).
        KafkaCode.SCHEMA_RESOLUTION / KafkaCode.SCHEMA_REGISTRY_UNAVAILABLE: the registry refused or
            did not answer.

    """
    _has_column("decode_json_schema", df, column)
    subject = subject_of("decode_json_schema", column, topic, subject)
    return _decode(df, *json_schema_reader(schema_registry, column, subject, spark_schema))


def json_schema_reader(
    schema_registry: Mapping[str, Any], column: str, subject: str, spark_schema: DataType | None
) -> tuple[ColumnReader, DataType]:
    """Return the reader of a JSON Schema column and its Spark type (driver, registry I/O)."""
    client = driver_client(registry_settings(dict(schema_registry)))
    writers = _writer_schemas(client, subject)
    if spark_schema is None:
        spark_schema = spark_type_of_json_schema(_latest(client, subject), column)
    return ColumnReader(
        column=column, kind=JSON_SCHEMA, subject=subject, reader_schema=None, writer_schemas=writers
    ), spark_schema


def decode_protobuf(df: DataFrame, column: str = "value", *, message: str | type) -> DataFrame:
    """Return ``df`` with ``column`` (Confluent-framed Protobuf) decoded into a Spark struct.

    ``message`` is the generated message class, or its ``"module:Class"`` path; the
    executors import it by that path, so it must be importable there. The Spark type comes
    from its descriptor (docs/kafka-source.md); no registry request is made (the message
    class is the schema).

    Raises:
        TxnCode.CONFIG: ``message`` is not an importable generated message class.
        StageCode.INPUT_SCHEMA: the column is missing, or the message is recursive.

    """
    _has_column("decode_protobuf", df, column)
    return _decode(df, *protobuf_reader(column, message))


def protobuf_reader(column: str, message: str | type) -> tuple[ColumnReader, DataType]:
    """Return the reader of a Protobuf column and its Spark type (no I/O)."""
    from connectors.kafka._formats._config import RecordFormat

    path = message if isinstance(message, str) else _class_path(message)
    cls = RecordFormat(kind=PROTOBUF, message=path).message_class()
    reader = ColumnReader(
        column=column,
        kind=PROTOBUF,
        subject=cls.DESCRIPTOR.full_name,
        reader_schema=None,
        writer_schemas=(),
        message=path,
    )
    return reader, spark_type_of_message(cls.DESCRIPTOR, column)


def _class_path(cls: type) -> str:
    from connectors.kafka._formats._config import RecordFormat

    path = f"{cls.__module__}:{cls.__qualname__}"
    try:
        same = RecordFormat(kind=PROTOBUF, message=path).message_class() is cls
    except KafkaConnectorError as exc:
        if exc.code is not TxnCode.CONFIG:
            raise
        same = False
    if not same:
        msg = (
            f"message class {cls.__qualname__} cannot be imported by its module and name "
            f"({path!r}) on the executors; pass message='module:Class'"
        )
        raise KafkaConnectorError(msg, code=TxnCode.CONFIG)
    return path


def _has_column(caller: str, df: DataFrame, column: str) -> None:
    if column not in df.columns:
        msg = f"{caller}: the DataFrame has no column {column!r}"
        raise KafkaConnectorError(msg, column=column, code=StageCode.INPUT_SCHEMA)


def subject_of(caller: str, column: str, topic: str | None, subject: str | None) -> str:
    """Return ``subject``, or ``{topic}-{column}`` (Confluent's topic strategy)."""
    if subject is None:
        if topic is None:
            msg = f"{caller} needs subject= or topic= (the subject is then {{topic}}-{column})"
            raise KafkaConnectorError(msg, column=column, code=StageCode.INPUT_SCHEMA)
        subject = f"{topic}-{column}"
    return subject


def _writer_schemas(client: Any, subject: str) -> tuple[tuple[int, str], ...]:
    versions = call(f"the versions of subject {subject!r}", lambda: client.get_versions(subject))
    writers = []
    for version in sorted(versions):
        found = call(
            f"version {version} of subject {subject!r}",
            functools.partial(client.get_version, subject, version),
        )
        writers.append((int(found.schema_id), str(found.schema.schema_str)))
    return tuple(writers)


def _latest(client: Any, subject: str) -> str:
    found = call(f"the latest version of {subject!r}", lambda: client.get_latest_version(subject))
    return str(found.schema.schema_str)


def _decode(df: DataFrame, reader: ColumnReader, dtype: DataType) -> DataFrame:
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StructField, StructType

    out = StructType(
        [StructField(f.name, dtype, True) if f.name == reader.column else f for f in df.schema]
    )
    arrow_type = to_arrow_type(dtype, timezone="UTC")  # the source needs PySpark 4.2+
    return df.mapInArrow(functools.partial(decode_batches, reader, arrow_type), out)


@functools.lru_cache(maxsize=16)
def _deserializer(reader: ColumnReader) -> Any:
    from confluent_kafka.schema_registry import Schema

    types = {AVRO: "AVRO", JSON_SCHEMA: "JSON"}
    schemas = {i: Schema(text, types[reader.kind]) for i, text in reader.writer_schemas}
    pinned = PinnedRegistry((), schemas)
    if reader.kind == AVRO:
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        return AvroDeserializer(pinned, reader.reader_schema)
    if reader.kind == JSON_SCHEMA:
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        # No subject: the writer schema comes by the record's id (no latest-version lookup).
        conf = {"subject.name.strategy": _no_subject}
        return JSONDeserializer(None, schema_registry_client=pinned, conf=conf)
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

    from connectors.kafka._formats._encode import message_class

    deserialize = ProtobufDeserializer(
        message_class(reader.message), {"use.deprecated.format": False}
    )
    return lambda data: message_row(deserialize(data))


def _no_subject(ctx: Any, record_name: Any) -> None:
    return None


def decode_batches(
    reader: ColumnReader, arrow_type: pa.DataType, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Decode ``reader.column`` of each batch (the executors' side; module docstring)."""
    decode = _deserializer(reader)
    for batch in batches:
        idx = batch.schema.get_field_index(reader.column)
        raw = batch.column(idx).to_pylist()
        rows: list[Any] = []
        try:
            rows.extend(decode(v) if v is not None else None for v in raw)
        except Exception as exc:  # noqa: BLE001 - any complaint is this record's
            raise _decode_error(reader, len(rows), exc) from None
        arrays = list(batch.columns)
        arrays[idx] = pa.array(rows, type=arrow_type)
        yield pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _decode_error(reader: ColumnReader, row: int, exc: Exception) -> Exception:
    if has_code(exc, KafkaCode.SCHEMA_RESOLUTION):
        return exc
    reason = scrub(f"{type(exc).__name__}: {exc}")[:_MAX_REASON]
    msg = (
        f"record {row} of column {reader.column!r} is not Confluent-framed {reader.kind} of "
        f"subject {reader.subject!r}: {reason}"
    )
    return KafkaConnectorError(msg, column=reader.column, code=KafkaCode.RECORD_FORMAT)

"""Decode a column of Confluent-framed Avro records (the ``kafka-rc`` source's ``value``).

:func:`decode_avro` is the reading side of ``value_format="avro"``: on the driver it reads
the subject's registered versions once (their ids and writer schemas) and the reader
schema (given, or the subject's latest version), and derives the column's Spark type from
the reader schema; the executors decode with confluent-kafka's ``AvroDeserializer`` on a
:class:`~connectors.kafka._formats._registry.PinnedRegistry` holding those schemas, so they
make no registry request and hold no registry credentials. A record whose schema id was
registered after the decoder was built raises ``SchemaResolutionError`` (build it again:
restart the query). A record that is not in the wire format, or does not decode, raises
``RecordFormatError``; a null stays null.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from connectors.kafka._errors import KafkaInputSchemaError
from connectors.kafka._formats._config import registry_settings
from connectors.kafka._formats._errors import RecordFormatError, SchemaResolutionError
from connectors.kafka._formats._registry import PinnedRegistry, call, driver_client
from connectors.kafka._formats._schemas import spark_type_of_avro
from connectors.kafka._secrets import scrub

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Characters of a deserializer's complaint kept in a RecordFormatError.
_MAX_REASON = 300


@dataclass(frozen=True)
class AvroReader:
    """What the executors need to decode one column (picklable, no registry settings)."""

    column: str
    subject: str
    reader_schema: str
    writer_schemas: tuple[tuple[int, str], ...]  # (schema id, Avro schema text)


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
        KafkaSinkConfigError: a bad ``schema_registry`` setting.
        KafkaInputSchemaError: the column is missing, or the reader schema has no Spark type.
        SchemaResolutionError / SchemaRegistryUnavailableError: the registry refused or
            did not answer.

    """
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import StructField, StructType

    if column not in df.columns:
        msg = f"decode_avro: the DataFrame has no column {column!r}"
        raise KafkaInputSchemaError(msg, column=column)
    if subject is None:
        if topic is None:
            msg = "decode_avro needs subject= or topic= (the subject is then {topic}-{column})"
            raise KafkaInputSchemaError(msg, column=column)
        subject = f"{topic}-{column}"
    reader = _reader(registry_settings(dict(schema_registry)), column, subject, reader_schema)
    dtype = spark_type_of_avro(reader.reader_schema)
    out = StructType(
        [StructField(f.name, dtype, True) if f.name == column else f for f in df.schema.fields]
    )
    arrow_type = to_arrow_type(dtype, timezone="UTC")  # the source needs PySpark 4.2+
    decode = functools.partial(_decode_batches, reader, arrow_type)
    return df.mapInArrow(decode, out)


def _reader(settings: Any, column: str, subject: str, reader_schema: str | None) -> AvroReader:
    client = driver_client(settings)
    versions = call(f"the versions of subject {subject!r}", lambda: client.get_versions(subject))
    writers = []
    for version in sorted(versions):
        found = call(
            f"version {version} of subject {subject!r}",
            functools.partial(client.get_version, subject, version),
        )
        writers.append((int(found.schema_id), str(found.schema.schema_str)))
    if reader_schema is None:
        latest = call(
            f"the latest version of {subject!r}", lambda: client.get_latest_version(subject)
        )
        reader_schema = str(latest.schema.schema_str)
    return AvroReader(column, subject, reader_schema, tuple(writers))


@functools.lru_cache(maxsize=16)
def _deserializer(reader: AvroReader) -> Any:
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    schemas = {i: Schema(text, "AVRO") for i, text in reader.writer_schemas}
    return AvroDeserializer(PinnedRegistry((), schemas), reader.reader_schema)


def _decode_batches(
    reader: AvroReader, arrow_type: pa.DataType, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
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


def _decode_error(reader: AvroReader, row: int, exc: Exception) -> Exception:
    if isinstance(exc, SchemaResolutionError):
        return exc
    reason = scrub(f"{type(exc).__name__}: {exc}")[:_MAX_REASON]
    msg = (
        f"record {row} of column {reader.column!r} is not Confluent-framed Avro of subject "
        f"{reader.subject!r}: {reason}"
    )
    return RecordFormatError(msg, column=reader.column)

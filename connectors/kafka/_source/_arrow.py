"""The output schema (identical to Spark's Kafka source) and Arrow batch building.

Rows never cross into Spark as Python objects: a read task turns a list of consumed
messages into one ``pyarrow.RecordBatch`` per chunk, column by column.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_HEADERS_TYPE = pa.list_(pa.field("element", _HEADER_STRUCT))
_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

# librdkafka timestamp type (0 not available, 1 create time, 2 log-append time) to the Java
# client's TimestampType id that Spark's Kafka source reports (-1, 0, 1).
_TIMESTAMP_TYPE_IDS = np.array([-1, 0, 1], dtype=np.int32)


def spark_schema(include_headers: bool) -> StructType:
    """Return the schema of Spark's built-in Kafka source (all columns nullable)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Return the Arrow schema Spark expects for :func:`spark_schema` (UTC, microseconds)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _HEADERS_TYPE))
    return pa.schema(fields)


def build_batch(
    messages: Sequence[Any], topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """Build one RecordBatch from consumed ``confluent_kafka.Message`` objects.

    Contract: ``messages`` is non-empty, of one class (one consumer's messages), every one
    belongs to ``topic``/``partition`` and carries no error; ``schema`` is
    :func:`arrow_schema` (its field count decides whether headers are built).

    Each column is taken in one C-level pass (``map`` over the class's unbound accessor,
    no per-row Python frame); ``topic`` and ``partition`` are constants, not per-row values.
    """
    n = len(messages)
    cls = type(messages[0])
    # (type, ms) pairs flattened: even positions are types, odd ones milliseconds.
    stamps = np.fromiter(chain.from_iterable(map(cls.timestamp, messages)), np.int64, 2 * n)
    columns = [
        pa.array(list(map(cls.key, messages)), pa.binary()),
        pa.array(list(map(cls.value, messages)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(np.fromiter(map(cls.offset, messages), np.int64, n)),
        pa.array(stamps[1::2] * 1000, _TIMESTAMP_TYPE),
        pa.array(_TIMESTAMP_TYPE_IDS[stamps[0::2]]),
    ]
    if len(schema) > len(columns):
        columns.append(pa.array([_headers(m.headers()) for m in messages], _HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _headers(raw: list[tuple[str, bytes | None]] | None) -> list[dict[str, Any]] | None:
    """Spark reports a message without headers as null, not as an empty array."""
    if not raw:
        return None
    return [{"key": k, "value": v} for k, v in raw]
